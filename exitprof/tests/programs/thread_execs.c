/*
 * A thread that is not the leader calls execve: the kernel's de_thread kills the leader, and
 * the execing thread takes over its pid (and becomes the leader). Two exits are left to
 * record: the old leader's, and the process's once the new program ends.
 *
 * Usage: thread_execs PROGRAM    (PROGRAM is executed by the second thread, with no arguments)
 */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static const char *program;

static void *run(void *arg)
{
	(void)arg;
	char *argv[] = {(char *)program, NULL};
	execv(program, argv);
	perror("execv");
	_exit(1);
}

int main(int argc, char *argv[])
{
	pthread_t t;
	if (argc < 2)
		return 2;
	program = argv[1];
	if (pthread_create(&t, NULL, run, NULL)) {
		perror("pthread_create");
		return 1;
	}
	/* The exec in the other thread ends this one. */
	for (;;)
		pause();
}
