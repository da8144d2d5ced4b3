/*
 * A chain of DEPTH processes, each the child of the one before: deeper than any walk up the
 * ancestry a profiler can afford. Each waits for its child; the deepest exits at once, or
 * executes PROGRAM ARGS where they are given.
 *
 * Usage: deep_tree DEPTH [PROGRAM [ARGS...]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char *argv[])
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s DEPTH [PROGRAM [ARGS...]]\n", argv[0]);
		return 2;
	}
	for (int left = atoi(argv[1]) - 1; left > 0; left--) {
		pid_t child = fork();
		if (child < 0) {
			perror("fork");
			return 1;
		}
		if (child > 0) {
			int status;
			if (waitpid(child, &status, 0) != child || !WIFEXITED(status))
				return 1;
			return WEXITSTATUS(status);
		}
	}
	if (argc > 2) {
		execv(argv[2], argv + 2);
		perror(argv[2]);
		return 1;
	}
	return 0;
}
