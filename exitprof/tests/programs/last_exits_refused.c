/*
 * The last exits of a process, refused: with one exit slot (`--exit-slots 1`), a child held at
 * its exit stop by a tracer keeps the slot while the process's leader exits (pthread_exit) and
 * then its last thread: both are refused, lost. The leader leaves a mark waiting for a thread
 * to take the process over by exec, which none does.
 *
 * Driven by lines on stdin, so that its tracer (the test) holds the child's exit:
 *   1st line: forks the child, which waits; writes its pid to stdout;
 *   2nd line: lets the child exit (its tracer, attached by then, holds its exit stop);
 *   3rd line: its leader exits; a second thread waits until it is a zombie, writes its own tid
 *             to stdout and exits, the last thread of the process.
 *
 * Usage: last_exits_refused
 */
#include "ground_truth.h"

#include <sys/syscall.h>

static pid_t leader;

static void die(const char *what)
{
	perror(what);
	_exit(1);
}

static void line(void)
{
	char buf[16];
	if (!fgets(buf, sizeof(buf), stdin))
		die("stdin");
}

static void *last_thread(void *arg)
{
	(void)arg;
	while (!thread_exited(leader))
		usleep(1000);
	printf("%ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	syscall(SYS_exit, 0);
	return NULL;
}

int main(void)
{
	leader = getpid();
	int go[2];
	if (pipe(go) != 0)
		die("pipe");
	line();
	pid_t child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		char c;
		if (read(go[0], &c, 1) != 1)
			die("read");
		_exit(0);
	}
	printf("%d\n", child);
	fflush(stdout);
	line();
	if (write(go[1], "x", 1) != 1)
		die("write");
	line();
	pthread_t t;
	int err = pthread_create(&t, NULL, last_thread, NULL);
	if (err != 0) {
		fprintf(stderr, "pthread_create: %s\n", strerror(err));
		return 1;
	}
	pthread_exit(NULL);
}
