// A thread whose exit blocks on a lock another thread holds for a known time. A thread's exit
// takes its process's mmap_lock for reading (exit_mm); a second thread holds it for writing
// with one long mprotect, which walks every page table entry of a populated region under the
// lock. The exiting thread starts its exit once the holder is inside mprotect, so it blocks
// for the rest of the hold. Both threads are real-time, each on a CPU of its own, so that
// neither waits for a CPU: the block is the lock's alone.
//
// Writes to OUT: the hold's length and the part of it left when the thread began exiting (ns,
// CLOCK_MONOTONIC, as the kernel's timestamps).
//
// usage: lock_hold MIB OUT
// First: it defines _GNU_SOURCE for every header.
#include "ground_truth.h"

#include <stdatomic.h>
#include <sys/syscall.h>

static char *region;
static size_t bytes;
static atomic_long hold_start, exit_start;
static atomic_int ready;

static void *exiter(void *arg) {
    (void)arg;
    realtime(1);
    atomic_store(&ready, 1);
    while (atomic_load(&hold_start) == 0)
        ;
    // Let the holder get from its timestamp into mprotect and take the lock.
    long until = atomic_load(&hold_start) + 2000000;
    while (now_ns() < until)
        ;
    atomic_store(&exit_start, now_ns());
    // The thread's own exit (exit, not exit_group): the process lives on.
    syscall(SYS_exit, 0);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MIB OUT\n", argv[0]);
        return 2;
    }
    bytes = strtoul(argv[1], NULL, 10) << 20;
    region = populated(bytes);
    pthread_t t;
    if (pthread_create(&t, NULL, exiter, NULL) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        return 1;
    }
    // Holder and exiter on CPUs of their own: the exiter must run while the holder computes.
    realtime(0);
    while (atomic_load(&ready) == 0)
        ;
    atomic_store(&hold_start, now_ns());
    if (mprotect(region, bytes, PROT_READ) != 0) {
        perror("mprotect");
        return 1;
    }
    long hold_end = now_ns();
    pthread_join(t, NULL);
    // Not torn down in the process's own exit: the thread's exit is the one under test.
    munmap(region, bytes);
    FILE *out = fopen(argv[2], "w");
    if (!out) {
        perror(argv[2]);
        return 1;
    }
    fprintf(out, "hold_ns=%ld\nremaining_ns=%ld\n", hold_end - atomic_load(&hold_start),
            hold_end - atomic_load(&exit_start));
    fclose(out);
    return 0;
}
