// A process whose exit is dominated by closing its descriptors: it holds as many descriptors
// as its limit allows (up to FILES), all of one open file (dup), then exits. One file, so the
// cost is in exit_files closing descriptors: a file's last close defers its release (__fput)
// to task work, which would put the cost of distinct files in task_work_run instead.
//
// usage: many_files FILES
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILES\n", argv[0]);
        return 2;
    }
    long files = strtol(argv[1], NULL, 10);
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
    int fd = open("/dev/null", O_RDONLY);
    if (fd < 0) {
        perror("open /dev/null");
        return 1;
    }
    long held = 1;
    while (held < files && dup(fd) >= 0)
        held++;
    printf("descriptors=%ld\n", held);
    fflush(stdout);
    _exit(0);
}
