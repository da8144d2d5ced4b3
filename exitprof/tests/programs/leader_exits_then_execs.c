/*
 * The leader of a process exits first (pthread_exit: a zombie, its process lives on); then
 * another thread executes PROGRAM ARGS. The execing thread takes over the leader's pid, and the
 * new program, with all it starts, is the same process: the target still.
 *
 * Usage: leader_exits_then_execs PROGRAM [ARGS...]
 */
#include "ground_truth.h"

static char **program;
static pid_t leader;

static void *run(void *arg)
{
	(void)arg;
	while (!thread_exited(leader))
		usleep(1000);
	execv(program[0], program);
	perror("execv");
	_exit(1);
}

int main(int argc, char *argv[])
{
	pthread_t t;
	if (argc < 2) {
		fprintf(stderr, "usage: %s PROGRAM [ARGS...]\n", argv[0]);
		return 2;
	}
	program = argv + 1;
	leader = getpid();
	if (pthread_create(&t, NULL, run, NULL)) {
		perror("pthread_create");
		return 1;
	}
	pthread_exit(NULL);
}
