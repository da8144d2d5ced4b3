// A thread whose exit blocks on a lock another thread holds for a known time. A thread's exit
// takes its process's mmap_lock for reading (exit_mm); a second thread holds it for writing
// with one long mprotect, which walks every page table entry of a populated region under the
// lock. The region maps one 64 MiB shared memory file over and over: the hold is long for
// little memory (a page table entry for each page mapped, the pages themselves once).
//
// Both threads run on one CPU, so that nothing depends on how two CPUs keep time with each
// other (two emulated CPUs sharing one host thread do not): the order of events is the
// scheduler's. Both are SCHED_FIFO while it matters, so no other task takes that CPU from
// them; the exiter at a higher priority than the holder, so that it takes the CPU whenever it
// wakes:
// - the holder takes its timestamp and wakes the exiter, which at once sleeps until DELAY_NS
//   past that timestamp; the holder enters mprotect and takes the lock;
// - when the sleep ends, the exiter takes the CPU from the holder inside the hold (mprotect
//   lets the scheduler in at every page table it walks); it makes sure of it in the holder's
//   kernel stack (the holder is not running then: the exiter has its CPU), else sleeps a
//   millisecond and looks again (under emulation the holder was seen to take 27 ms to get from
//   its timestamp into mprotect). Then it comes down to the holder's priority, which leaves it
//   running, begins its exit and blocks on the lock;
// - the holder runs on; releasing the lock wakes the exiter, which, at the holder's priority
//   now, waits for the holder to take its timestamp, then ends its exit.
// The block is the lock's alone: while the exiter waits, the holder holds the lock. And the
// time the lock was held after the exit began is measured without the rest of the exit, which
// under emulation takes milliseconds of probe hits (the part of the exit before the block is
// in it: some µs here, some ms under emulation).
//
// The program checks its own construction: it fails (exit 1) when the exit began before the
// holder went for the lock or after the hold was over (the region too small), rather than
// leave a test to assert what did not happen.
//
// Writes to OUT: the hold's length (from the holder's last timestamp before mprotect to its
// return) and the part of it left when the thread began exiting (ns, CLOCK_MONOTONIC, as the
// kernel's timestamps).
//
// usage: lock_hold MIB OUT (MIB: the region, a multiple of 64)
// First: it defines _GNU_SOURCE for every header.
#include "ground_truth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/syscall.h>

// From the holder's timestamp to the exiter's first look at it: time enough for the holder to
// get into mprotect and take the lock (some 10 µs here, 3 to 27 ms were seen under emulation).
#define DELAY_NS 10000000L
// The one CPU both threads run on.
#define CPU 0
// SCHED_FIFO priorities: the exiter's while it must take the CPU from the holder, the holder's.
#define ABOVE 50
#define HOLDER 40

// The shared memory file the region maps again and again.
#define FILE_BYTES (64L << 20)
// Older headers lack it (Linux 5.14).
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static int ready[2], go[2];
static atomic_long exit_start;
static atomic_int hold_over;
static pid_t holder;

// A function mprotect runs with the lock held for writing.
#define UNDER_THE_LOCK "mprotect_fixup"

// Whether the holder is inside mprotect, holding the lock: its kernel stack, which root can
// read while the holder is not running, goes through UNDER_THE_LOCK. -1 when the stack cannot
// be read (no CONFIG_STACKTRACE): the delay alone has to do. Nothing here may wait for the
// lock: no allocation (malloc may map memory), no buffer or code page touched for the first
// time (a page fault takes the lock on older kernels), so it runs once before the hold.
static int holding(void) {
    static char path[64], stack[4096];
    snprintf(path, sizeof(path), "/proc/self/task/%d/stack", holder);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, stack, sizeof(stack) - 1);
    close(fd);
    if (n < 0)
        return -1;
    stack[n] = 0;
    return strstr(stack, UNDER_THE_LOCK) != NULL;
}

// Sleeps until `at` (CLOCK_MONOTONIC, ns).
static void sleep_until(long at) {
    struct timespec until = {.tv_sec = at / 1000000000L, .tv_nsec = at % 1000000000L};
    int err;
    while ((err = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL)) == EINTR)
        ;
    if (err != 0) {
        fprintf(stderr, "clock_nanosleep: %s\n", strerror(err));
        exit(1);
    }
}

// A region of `bytes` (a multiple of FILE_BYTES) that maps one shared memory file of
// FILE_BYTES again and again, every page mapped, in 4 KiB pages (no transparent huge pages):
// changing its protection walks an entry per page. Each mapping is an area of its own (the
// same offsets of the file), all of them adjacent.
static char *populated_shared(size_t bytes) {
    int fd = memfd_create("lock_hold", 0);
    if (fd < 0 || ftruncate(fd, FILE_BYTES) != 0) {
        perror("memfd");
        exit(1);
    }
    char *region = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    for (size_t off = 0; off < bytes; off += FILE_BYTES) {
        void *p =
            mmap(region + off, FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            exit(1);
        }
        madvise(p, FILE_BYTES, MADV_NOHUGEPAGE);
        if (madvise(p, FILE_BYTES, MADV_POPULATE_READ) != 0) {
            // Before 5.14: a read of every page maps it.
            if (errno != EINVAL) {
                perror("madvise(MADV_POPULATE_READ)");
                exit(1);
            }
            for (long page = 0; page < FILE_BYTES; page += 4096)
                (void)*(volatile char *)((char *)p + page);
        }
    }
    close(fd);
    return region;
}

static void *exiter(void *arg) {
    (void)arg;
    fifo(ABOVE);
    holding();
    // Above the holder from here on: the holder runs only while this thread waits.
    char c = 0;
    long hold_start;
    if (write(ready[1], &c, 1) != 1 ||
        read(go[0], &hold_start, sizeof hold_start) != sizeof hold_start) {
        perror("pipe");
        exit(1);
    }
    sleep_until(hold_start + DELAY_NS);
    while (!atomic_load(&hold_over) && holding() == 0)
        sleep_until(now_ns() + 1000000L);
    // Lowered to the holder's priority, a SCHED_FIFO thread goes first among its equals: it
    // runs on. Woken by the lock's release, it no longer takes the CPU from the holder.
    int err = pthread_setschedprio(pthread_self(), HOLDER);
    if (err != 0) {
        fprintf(stderr, "pthread_setschedprio: %s\n", strerror(err));
        exit(1);
    }
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
    size_t bytes = strtoul(argv[1], NULL, 10) << 20;
    if (bytes == 0 || bytes % FILE_BYTES != 0) {
        fprintf(stderr, "%s MiB: not a multiple of %ld\n", argv[1], FILE_BYTES >> 20);
        return 2;
    }
    char *region = populated_shared(bytes);
    holder = gettid();
    if (pipe(ready) != 0 || pipe(go) != 0) {
        perror("pipe");
        return 1;
    }
    // Pinned before the exiter is created, which inherits the CPU: both run on it alone.
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(CPU, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        perror("sched_setaffinity");
        return 1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, exiter, NULL) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        return 1;
    }
    // Once the exiter is above the holder and waits for its start.
    char c;
    if (read(ready[0], &c, 1) != 1) {
        perror("pipe");
        return 1;
    }
    fifo(HOLDER);
    long hold_start = now_ns();
    // The exiter takes the CPU here, and gives it back as it goes to sleep.
    if (write(go[1], &hold_start, sizeof hold_start) != sizeof hold_start) {
        perror("pipe");
        return 1;
    }
    long locking = now_ns();
    if (mprotect(region, bytes, PROT_READ) != 0) {
        perror("mprotect");
        return 1;
    }
    long hold_end = now_ns();
    atomic_store(&hold_over, 1);
    // An ordinary thread again: the exiter ends its exit now, and what follows takes no
    // real-time CPU (the kernel throttles real-time tasks that take more than their share).
    struct sched_param other = {.sched_priority = 0};
    int err = pthread_setschedparam(pthread_self(), SCHED_OTHER, &other);
    if (err != 0) {
        fprintf(stderr, "cannot run as SCHED_OTHER: %s\n", strerror(err));
        return 1;
    }
    pthread_join(t, NULL);
    long started = atomic_load(&exit_start);
    if (started < locking) {
        fprintf(stderr,
                "the thread began to exit %.2f ms before the holder went for the lock (%.2f ms "
                "after its timestamp): the delay of %.2f ms is too short here\n",
                (locking - started) / 1e6, (locking - hold_start) / 1e6, DELAY_NS / 1e6);
        return 1;
    }
    if (started > hold_end) {
        fprintf(stderr,
                "the thread began to exit %.2f ms after the hold of %.2f ms was over: %s MiB are "
                "too few here\n",
                (started - hold_end) / 1e6, (hold_end - locking) / 1e6, argv[1]);
        return 1;
    }
    // Not torn down in the process's own exit: the thread's exit is the one under test.
    munmap(region, bytes);
    FILE *out = fopen(argv[2], "w");
    if (!out) {
        perror(argv[2]);
        return 1;
    }
    fprintf(out, "hold_ns=%ld\nremaining_ns=%ld\n", hold_end - locking, hold_end - started);
    fclose(out);
    return 0;
}
