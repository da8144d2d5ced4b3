/*
 * The 2012 CLONE_NEWIPC thread's storm, as Dmitry V. Levin posted it (lkml, 27 Jun 2012), with
 * the count as an argument: sequential fork; the child unshares its IPC namespace and exits;
 * the parent waits for it. With "fork" as the second argument the child exits at once.
 *
 * Usage: forks_ref [count [ipcns|fork]]   (defaults 1024, ipcns as in the original)
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char *argv[])
{
	int i;
	int count = argc > 1 ? atoi(argv[1]) : 1024;
	int newipc = !(argc > 2 && strcmp(argv[2], "fork") == 0);

	for (i = 0; i < count; i++) {
		if (fork()) {
			wait(NULL);
			continue;
		}
		if (newipc)
			unshare(CLONE_NEWIPC);
		exit(0);
	}
	return 0;
}
