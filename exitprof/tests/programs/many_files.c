// Processes whose exit is dominated by closing their descriptors: each child holds as many
// descriptors as its limit allows (up to FILES), all of one open file (dup), then exits; the
// parent waits for each. All run SCHED_FIFO. One file, so the
// cost is in exit_files closing descriptors: a file's last close defers its release (__fput)
// to task work, which would put the cost of distinct files in task_work_run instead.
//
// usage: many_files FILES CHILDREN
#define _GNU_SOURCE
#include <sched.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
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
        fprintf(stderr, "usage: %s FILES CHILDREN\n", argv[0]);
        return 2;
    }
    long files = strtol(argv[1], NULL, 10);
    int children = atoi(argv[2]);
    realtime();
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
        perror("getrlimit");
        return 1;
    }
    // Raising the hard limit needs CAP_SYS_RESOURCE; without it, the hard limit is the ceiling.
    struct rlimit wanted = {files + 16, files + 16};
    if (setrlimit(RLIMIT_NOFILE, &wanted) != 0) {
        wanted.rlim_cur = wanted.rlim_max = limit.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &wanted) != 0) {
            perror("setrlimit");
            return 1;
        }
    }
    for (int i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            int fd = open("/dev/null", O_RDONLY);
            if (fd < 0) {
                perror("open /dev/null");
                _exit(1);
            }
            long held = 1;
            while (held < files && dup(fd) >= 0)
                held++;
            if (i == 0)
                printf("descriptors=%ld\n", held);
            fflush(stdout);
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
