/*
 * A chain of DEPTH processes, each the child of the one before: deeper than any walk up the
 * ancestry a profiler can afford. Each waits for its child; the deepest exits at once.
 *
 * Usage: deep_tree DEPTH
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char *argv[])
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DEPTH\n", argv[0]);
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
	return 0;
}
