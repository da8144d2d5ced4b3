// Network namespace teardowns that are not an exit's: one that outlived the exit of the last
// task in it, and one no task exited in.
//
// A child unshares its network namespace and waits. The parent holds that namespace by a
// descriptor of /proc/CHILD/ns/net, kills the child (its exit leaves the namespace referenced),
// waits HOLD_MS and closes the descriptor: the namespace's teardown begins then, HOLD_MS or
// more after the exit. Then the parent unshares a network namespace of its own, holds it by a
// descriptor, goes back to its first namespace and closes the descriptor: a namespace no task
// exited in is torn down. It gives both an id in its own namespace and waits for the kernel to
// announce each teardown (RTM_DELNSID), so that both happen while exitprof watches.
//
// Writes to OUT: the child's pid, the inode number of its namespace and of the other one, and
// from the child's reaping to its namespace's teardown (ns, CLOCK_MONOTONIC).
//
// usage: netns_outlive HOLD_MS OUT
// First: it defines _GNU_SOURCE for every header.
#include "netns.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s HOLD_MS OUT\n", argv[0]);
        return 2;
    }
    long hold_ms = atol(argv[1]);
    int fd = route_socket();
    int first = 2000000 + (getpid() % 100000) * 2;
    int seen[2] = {0};
    listen_nsids(fd);

    pid_t child = holder(0);
    int held = ns_of(child);
    set_nsid_of(fd, held, first);
    unsigned long outlived_inum = ns_inode(child);
    kill_and_reap(child);
    long reaped = now_ns();
    struct timespec hold = {.tv_sec = hold_ms / 1000, .tv_nsec = hold_ms % 1000 * 1000000};
    nanosleep(&hold, NULL);
    close(held);
    long torn = wait_delnsid(fd, first, 1, seen);

    int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home < 0 || unshare(CLONE_NEWNET) != 0) {
        die("unshare(CLONE_NEWNET)");
    }
    int orphan = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (orphan < 0 || fstat(orphan, &st) != 0 || setns(home, CLONE_NEWNET) != 0) {
        die("holding a namespace by a descriptor");
    }
    set_nsid_of(fd, orphan, first + 1);
    close(orphan);
    wait_delnsid(fd, first + 1, 1, seen + 1);

    FILE *out = fopen(argv[2], "w");
    if (out == NULL) {
        die(argv[2]);
    }
    fprintf(out, "outlived_pid=%d\noutlived_inum=%lu\noutlived_by_ns=%ld\norphan_inum=%lu\n",
            child, outlived_inum, torn - reaped, (unsigned long)st.st_ino);
    fclose(out);
    return 0;
}
