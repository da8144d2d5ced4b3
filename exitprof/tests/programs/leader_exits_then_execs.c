/*
 * The leader of a process exits first (pthread_exit: a zombie, its process lives on); then
 * another thread executes PROGRAM ARGS. The execing thread takes over the leader's pid, and the
 * new program, with all it starts, is the same process: the target still.
 *
 * Usage: leader_exits_then_execs PROGRAM [ARGS...]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char **program;
static pid_t leader;

/* Whether the leader has exited: its state in /proc is Z (zombie) once it has. */
static int leader_exited(void)
{
	char path[64], stat[256];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", leader);
	FILE *f = fopen(path, "r");
	if (!f)
		return 1;
	size_t n = fread(stat, 1, sizeof(stat) - 1, f);
	fclose(f);
	stat[n] = 0;
	const char *state = strrchr(stat, ')');
	return state && state[1] == ' ' && state[2] == 'Z';
}

static void *run(void *arg)
{
	(void)arg;
	while (!leader_exited())
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
