// An exit preempted for a known time: a child pinned to the last CPU tears down MIB MiB of
// memory in its exit; a SCHED_FIFO thread of the parent watches it from the first CPU and, as
// soon as the child is exiting (PF_EXITING), moves to the child's CPU and spins there for
// SPIN_MS ms. A real-time task preempts a normal one as soon as the kernel lets it (at the
// teardown's next cond_resched), so the exit waits runnable for about SPIN_MS ms.
//
// Writes to OUT how long the spinner spun (ns).
//
// usage: fifo_preempt MIB SPIN_MS OUT
#include "ground_truth.h"

static long spin_ns, spun_ns;
static int cpu, exiting[2];
static volatile pid_t child;

/// PF_EXITING in the flags of /proc/PID/stat (the 9th field): the task is in do_exit.
#define PF_EXITING 0x4

static int in_exit(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    // The name, in parentheses, may hold anything: the fields after it are plain.
    char *p = strrchr(buf, ')');
    unsigned long flags = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %lu", &flags) != 1)
        return 1;
    return (flags & PF_EXITING) != 0;
}

static void *spinner(void *arg) {
    (void)arg;
    // Real-time from the start, on the first CPU: nothing delays its watch (it sleeps until the
    // child is about to exit, then polls for microseconds).
    realtime(0);
    char c;
    // The child has populated its memory and is about to exit.
    if (read(exiting[0], &c, 1) != 1)
        return NULL;
    while (!in_exit(child))
        ;
    realtime(cpu);
    long start = now_ns();
    while (now_ns() - start < spin_ns)
        ;
    spun_ns = now_ns() - start;
    return NULL;
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
        fprintf(stderr, "needs two CPUs: one to watch the exit from, one to preempt it on\n");
        return 1;
    }
    if (pipe(exiting) != 0) {
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
    child = pid;
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        if (sched_setaffinity(0, sizeof(set), &set) != 0) {
            perror("sched_setaffinity");
            _exit(1);
        }
        // 4 KiB pages: the teardown takes long enough to be caught in.
        populated(bytes);
        if (write(exiting[1], "x", 1) != 1)
            _exit(1);
        _exit(0);
    }
    wait_child(pid);
    pthread_join(t, NULL);
    FILE *out = fopen(argv[3], "w");
    if (!out) {
        perror(argv[3]);
        return 1;
    }
    fprintf(out, "spun_ns=%ld\n", spun_ns);
    fclose(out);
    return 0;
}
