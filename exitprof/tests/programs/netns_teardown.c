// A killed process owning a network namespace full of devices, and that namespace's teardown
// timed without exitprof, by the kernel's own notifications.
//
// A child unshares its network namespace, makes PAIRS veth pairs in it (rtnetlink), closes its
// socket and waits; SMALL more children each unshare an empty network namespace and wait. The
// parent gives each namespace an id in its own (RTM_NEWNSID), and listens for RTM_DELNSID: a
// `cleanup_net` run announces each namespace it tears down as it begins (`unhash_nsid`). The
// parent kills the first child (SIGKILL): its exit drops its namespace's last reference, a
// `cleanup_net` run begins, and says so. Then it kills the others, whose namespaces die while
// that run tears the big one down; the netns workqueue runs one run at a time, so the next run
// takes them all (a batch) as soon as the first ends, and says so. From the first announcement
// to the next is the big namespace's run, within the run's own first steps (taking the list,
// unlinking the namespaces) and the workqueue's dispatch: microseconds.
//
// Writes to OUT: the run's length as announced (ns, CLOCK_MONOTONIC), the first child's pid and
// its namespace's inode number (as /proc/PID/ns/net names it), and the others' inode numbers
// and pids, comma-separated.
//
// usage: netns_teardown PAIRS SMALL OUT (SMALL at least 1)
// First: it defines _GNU_SOURCE for every header.
#include "netns.h"

#define MAX_SMALL 64

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s PAIRS SMALL OUT\n", argv[0]);
        return 2;
    }
    int pairs = atoi(argv[1]);
    int small = atoi(argv[2]);
    if (small < 1 || small > MAX_SMALL) {
        fprintf(stderr, "SMALL must be 1 to %d\n", MAX_SMALL);
        return 2;
    }
    int fd = route_socket();
    // Ids of our own, away from what others give.
    int first = 1000000 + (getpid() % 100000) * (MAX_SMALL + 1);
    pid_t victim = holder(pairs);
    pid_t others[MAX_SMALL];
    for (int i = 0; i < small; i++) {
        others[i] = holder(0);
    }
    set_nsid(fd, victim, first);
    for (int i = 0; i < small; i++) {
        set_nsid(fd, others[i], first + 1 + i);
    }
    unsigned long victim_inum = ns_inode(victim);
    unsigned long inums[MAX_SMALL];
    for (int i = 0; i < small; i++) {
        inums[i] = ns_inode(others[i]);
    }
    listen_nsids(fd);
    int seen[MAX_SMALL + 1] = {0};
    kill_and_reap(victim);
    long began = wait_delnsid(fd, first, 1, seen);
    for (int i = 0; i < small; i++) {
        kill_and_reap(others[i]);
    }
    long next = wait_delnsid(fd, first + 1, small, seen + 1);
    for (int i = 1; i < small; i++) {
        wait_delnsid(fd, first + 1, small, seen + 1);
    }
    FILE *out = fopen(argv[3], "w");
    if (out == NULL) {
        die(argv[3]);
    }
    fprintf(out, "teardown_ns=%ld\nvictim_pid=%d\nvictim_inum=%lu\n", next - began, victim,
            victim_inum);
    fprintf(out, "small_inums=");
    for (int i = 0; i < small; i++) {
        fprintf(out, "%s%lu", i > 0 ? "," : "", inums[i]);
    }
    fprintf(out, "\nsmall_pids=");
    for (int i = 0; i < small; i++) {
        fprintf(out, "%s%d", i > 0 ? "," : "", others[i]);
    }
    fprintf(out, "\n");
    fclose(out);
    return 0;
}
