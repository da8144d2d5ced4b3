// An exit preempted for a known time: a child pinned to the last CPU tears down MIB MiB of
// memory in its exit; a SCHED_FIFO thread of the parent waits on the first CPU for a robust
// mutex the child holds. The kernel gives such a mutex up (owner died) as the exit enters
// exit_mm, just before the teardown; the thread then moves to the child's CPU and spins there
// for SPIN_MS ms. A real-time task preempts a normal one as soon as the kernel lets it (at the
// teardown's next cond_resched), so the exit waits runnable in exit_mm for about SPIN_MS ms.
//
// (Watching /proc/PID/stat for PF_EXITING instead would take a reference to the child's mm with
// each read: one taken as the exit began can leave the reader, not the exit, to tear the
// memory down.)
//
// The program checks its own construction: it fails (exit 1) when the thread was not yet
// waiting when the exit began, or the mutex was not given up by the exit.
//
// Writes to OUT how long the spinner spun (ns).
//
// usage: fifo_preempt MIB SPIN_MS OUT
#include "ground_truth.h"

#include <errno.h>

// Shared by parent and child: the mutex the child holds until its exit, and when it began
// exiting.
struct shared {
    pthread_mutex_t held;
    long exit_ns;
};

static struct shared *shared;
static long spin_ns, spun_ns, waiting_ns;
static int cpu, locked[2], lock_err;

static void *spinner(void *arg) {
    (void)arg;
    // Real-time from the start, on the first CPU: nothing delays its wake-up.
    realtime(0);
    char c;
    // The child holds the mutex and is populating its memory.
    if (read(locked[0], &c, 1) != 1)
        return NULL;
    waiting_ns = now_ns();
    lock_err = pthread_mutex_lock(&shared->held);
    realtime(cpu);
    long start = now_ns();
    while (now_ns() - start < spin_ns)
        ;
    spun_ns = now_ns() - start;
    return NULL;
}

// A mutex shared with the child, given up by the kernel when its holder dies.
static void init_shared(void) {
    shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                  0);
    if (shared == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&shared->held, &attr);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MIB SPIN_MS OUT\n", argv[0]);
        return 2;
    }
    size_t bytes = strtoul(argv[1], NULL, 10) << 20;
    spin_ns = strtol(argv[2], NULL, 10) * 1000000L;
    cpu = sysconf(_SC_NPROCESSORS_ONLN) - 1;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (cpu == 0) {
        fprintf(stderr, "needs two CPUs: one to wait for the exit on, one to preempt it on\n");
        return 1;
    }
    init_shared();
    if (pipe(locked) != 0) {
        perror("pipe");
        return 1;
    }
    pthread_t t;
    int err = pthread_create(&t, NULL, spinner, NULL);
    if (err != 0) {
        fprintf(stderr, "pthread_create: %s\n", strerror(err));
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        if (sched_setaffinity(0, sizeof(set), &set) != 0) {
            perror("sched_setaffinity");
            _exit(1);
        }
        if (pthread_mutex_lock(&shared->held) != 0 || write(locked[1], "x", 1) != 1)
            _exit(1);
        // 4 KiB pages: the teardown takes long enough to be caught in.
        populated(bytes);
        shared->exit_ns = now_ns();
        _exit(0);
    }
    wait_child(pid);
    pthread_join(t, NULL);
    if (lock_err != EOWNERDEAD) {
        fprintf(stderr, "the mutex was not given up by the child's exit: %s\n",
                strerror(lock_err));
        return 1;
    }
    if (waiting_ns > shared->exit_ns) {
        fprintf(stderr, "the spinner began waiting %ld ns after the exit began\n",
                waiting_ns - shared->exit_ns);
        return 1;
    }
    write_measure(argv[3], "spun_ns", spun_ns);
    return 0;
}
