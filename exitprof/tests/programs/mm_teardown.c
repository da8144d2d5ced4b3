// Processes whose exit is dominated by tearing down their memory: each child touches every
// page of MIB MiB of private anonymous memory (4 KiB pages: transparent huge pages off for the
// region, so the teardown walks every page) and exits; the parent waits for each. All run
// SCHED_FIFO.
//
// usage: mm_teardown MIB CHILDREN
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

// Real-time, so that no other task of the machine takes the CPU from the exit: its time is its
// own work.
static void realtime(void) {
    struct sched_param param = {.sched_priority = 50};
    if (sched_setscheduler(0, SCHED_FIFO, &param) != 0) {
        perror("sched_setscheduler SCHED_FIFO");
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MIB CHILDREN\n", argv[0]);
        return 2;
    }
    size_t bytes = strtoul(argv[1], NULL, 10) << 20;
    realtime();
    int children = atoi(argv[2]);
    for (int i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) {
                perror("mmap");
                _exit(1);
            }
            madvise(p, bytes, MADV_NOHUGEPAGE);
            memset(p, 1, bytes);
            _exit(0);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child %d failed\n", pid);
            return 1;
        }
    }
    return 0;
}
