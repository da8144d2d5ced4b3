// A process that exits in a user namespace of its own, and waits for that namespace's teardown.
//
// A child unshares its user namespace and exits; its namespace's last reference goes with its
// credentials, freed an RCU grace period after it is reaped, and `free_user_ns` frees the
// namespace in a kworker. The parent reaps the child and waits WAIT_MS (the teardown comes well
// within it) before it exits, so that exitprof watches it happen.
//
// Writes to OUT: the child's pid and its user namespace's inode number (as /proc/PID/ns/user
// names it).
//
// usage: userns_exit WAIT_MS OUT
// First: it defines _GNU_SOURCE for every header.
#include "ground_truth.h"

#include <sys/stat.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s WAIT_MS OUT\n", argv[0]);
        return 2;
    }
    long wait_ms = atol(argv[1]);
    int inode[2];
    if (pipe(inode) != 0) {
        perror("pipe");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        struct stat st;
        if (unshare(CLONE_NEWUSER) != 0 || stat("/proc/self/ns/user", &st) != 0) {
            perror("unshare(CLONE_NEWUSER)");
            _exit(1);
        }
        unsigned long inum = (unsigned long)st.st_ino;
        _exit(write(inode[1], &inum, sizeof(inum)) == sizeof(inum) ? 0 : 1);
    }
    close(inode[1]);
    unsigned long inum = 0;
    if (read(inode[0], &inum, sizeof(inum)) != sizeof(inum)) {
        fprintf(stderr, "the child did not make its user namespace\n");
        return 1;
    }
    wait_child(child);
    struct timespec wait = {.tv_sec = wait_ms / 1000, .tv_nsec = wait_ms % 1000 * 1000000};
    nanosleep(&wait, NULL);
    FILE *out = fopen(argv[2], "w");
    if (out == NULL) {
        perror(argv[2]);
        return 1;
    }
    fprintf(out, "pid=%d\ninum=%lu\n", child, inum);
    fclose(out);
    return 0;
}
