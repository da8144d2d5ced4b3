/*
 * Thread exits and one process exit: THREADS threads are created and joined (each ends with
 * pthread_exit: a thread exit, its process lives on), then the process exits.
 *
 * Usage: threads_then_exit THREADS
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *quit(void *arg)
{
	(void)arg;
	pthread_exit(NULL);
}

int main(int argc, char *argv[])
{
	int n = argc > 1 ? atoi(argv[1]) : 4;
	for (int i = 0; i < n; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, quit, NULL) || pthread_join(t, NULL)) {
			perror("thread");
			return 1;
		}
	}
	return 0;
}
