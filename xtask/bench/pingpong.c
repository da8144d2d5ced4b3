/*
 * A context-switch-heavy workload that never exits mid-run: two processes bounce one byte over
 * a pair of pipes, round trip after round trip. Both are pinned to one CPU, so every bounce is
 * a context switch (lmbench's lat_ctx does the same); each round trip is two switches and four
 * read/write system calls.
 *
 * Usage: pingpong ROUND_TRIPS [CPU]   (CPU defaults to 0)
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void bounce(int in, int out, long trips, int serve)
{
	char byte = 0;
	long i;

	for (i = 0; i < trips; i++) {
		if (!serve && write(out, &byte, 1) != 1)
			die("write");
		if (read(in, &byte, 1) != 1)
			die("read");
		if (serve && write(out, &byte, 1) != 1)
			die("write");
	}
}

int main(int argc, char *argv[])
{
	int to_child[2], to_parent[2];
	long trips;
	cpu_set_t cpus;
	pid_t child;
	int status;

	if (argc < 2)
		die("usage: pingpong ROUND_TRIPS [CPU]");
	trips = atol(argv[1]);
	CPU_ZERO(&cpus);
	CPU_SET(argc > 2 ? atoi(argv[2]) : 0, &cpus);
	/* Inherited by the child. */
	if (sched_setaffinity(0, sizeof(cpus), &cpus))
		die("sched_setaffinity");
	if (pipe(to_child) || pipe(to_parent))
		die("pipe");
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		bounce(to_child[0], to_parent[1], trips, 1);
		_exit(0);
	}
	bounce(to_parent[0], to_child[1], trips, 0);
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status))
		die("child");
	return 0;
}
