/*
 * The 2006 taskstats thread's storm, as Shailabh Nagar posted it (lkml, 9 Jun 2006), with the
 * stagger as a third argument instead of the constant 2: N threads x reps; thread i sleeps
 * (N-i)*stagger us, then exits; every rep creates all its threads, then joins them all.
 *
 * Usage: threads_ref [N [reps [stagger_us]]]   (defaults 5, 10, 2 as in the original)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int n;
static int stagger;

static void *slow_exit(void *arg)
{
	int i = (int)(intptr_t)arg;

	usleep((n - i) * stagger);
	return NULL;
}

int main(int argc, char *argv[])
{
	int i, rc, rep;
	pthread_t *ppthread;

	n = argc > 1 ? atoi(argv[1]) : 5;
	rep = argc > 2 ? atoi(argv[2]) : 10;
	stagger = argc > 3 ? atoi(argv[3]) : 2;

	ppthread = malloc(n * sizeof(pthread_t));
	if (ppthread == NULL) {
		printf("Memory allocation failure\n");
		exit(-1);
	}
	while (rep) {
		for (i = 0; i < n; i++) {
			rc = pthread_create(&ppthread[i], NULL, slow_exit, (void *)(intptr_t)i);
			if (rc) {
				printf("Error creating thread %d\n", i);
				exit(-1);
			}
		}
		for (i = 0; i < n; i++) {
			rc = pthread_join(ppthread[i], NULL);
			if (rc) {
				printf("Error joining thread %d\n", i);
				exit(-1);
			}
		}
		rep--;
	}
	return 0;
}
