// Processes whose exit is dominated by closing their descriptors: each child holds as many
// descriptors as its limit allows (up to FILES), all of one open file (dup), then exits,
// SCHED_FIFO; the parent waits for each. One file, so the cost is in exit_files closing
// descriptors: a file's last close defers its release (__fput) to task work, which would put the
// cost of distinct files in task_work_run instead.
//
// usage: many_files FILES CHILDREN
// First: it defines _GNU_SOURCE for every header.
#include "ground_truth.h"

#include <fcntl.h>
#include <sys/resource.h>

static long files;

static void child(int i) {
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
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s FILES CHILDREN\n", argv[0]);
        return 2;
    }
    files = strtol(argv[1], NULL, 10);
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
    each_child(atoi(argv[2]), child);
    return 0;
}
