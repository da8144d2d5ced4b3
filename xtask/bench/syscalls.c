/*
 * A system-call-heavy workload that never exits mid-run: COUNT getppid() calls, about the
 * cheapest system call there is, so that what a tracer adds to every system call's entry and
 * exit shows at full scale.
 *
 * Usage: syscalls COUNT
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char *argv[])
{
	long count, i;

	if (argc < 2) {
		fprintf(stderr, "usage: syscalls COUNT\n");
		return 1;
	}
	count = atol(argv[1]);
	/* syscall(2), not the libc wrapper: nothing may be answered without entering the kernel. */
	for (i = 0; i < count; i++)
		syscall(SYS_getppid);
	return 0;
}
