// The churn of `cargo xtask soak`: for SECONDS, one mix after another, each in a child of its
// own, the ways tasks end that an always-on profiler meets over days. It counts every task it
// creates, so that the exits it caused are known without any profiler: each task created exits
// once, and so does the driver itself.
//
//   threads     a storm of THREADS threads that exit at once
//   exec-chain  fork + exec, CHAIN links deep
//   leader-exit the leader exits (pthread_exit), then another thread execs
//   thread-exec a thread execs: the kernel kills the leader (de_thread)
//   ptrace      an exit held at its exit stop (PTRACE_O_TRACEEXIT) by its tracer
//   core        a threaded process dumps core (wherever kernel.core_pattern sends it)
//   kill-tree   a tree of processes and threads killed with one SIGKILL to its group
//   pidns       a PID namespace whose init exits, ending the processes inside
//   cgroup      processes in a cgroup (v2) made for them, removed after them
//   deep        a chain of DEEP processes, each the child of the one before, named DEEP_COMM:
//               deeper than a profiler's walk up the ancestry
//
// Tasks named DEEP_COMM are counted apart (deep_tasks); every other task keeps the driver's
// name (an exec runs this program again). The driver is a child subreaper: whatever a mix
// orphans is reaped here.
//
// usage: soak_churn COUNTS SECONDS CGROUP_DIR     the driver; prints its counts as JSON
//        soak_churn COUNTS chain N                a link of the exec chain
//        soak_churn COUNTS noop                   what the execs of the leader-exit and
//                                                 thread-exec mixes run
// COUNTS is a file the driver creates, shared by every process of the churn.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define THREADS 200
#define CHAIN 6
#define DEEP 72
#define DEEP_COMM "soak_deep"

enum mix { THREAD_STORM, EXEC_CHAIN, LEADER_EXIT, THREAD_EXEC, PTRACE_HOLD, CORE_DUMP,
           KILL_TREE, PID_NS, CGROUP, DEEP_CHAIN, MIXES };
static const char *const MIX_NAMES[MIXES] = {"threads", "exec-chain", "leader-exit",
                                             "thread-exec", "ptrace", "core", "kill-tree",
                                             "pidns", "cgroup", "deep"};

struct counts {
    atomic_uint_fast64_t tasks;      // tasks created that keep the driver's name
    atomic_uint_fast64_t deep_tasks; // tasks created and named DEEP_COMM
    atomic_uint_fast64_t ready;      // tasks of the current mix up and waiting (one mix at a time)
    atomic_uint_fast64_t rounds[MIXES];
    atomic_uint_fast64_t failed[MIXES];
    atomic_uint_fast64_t mix_ns[MIXES]; // time each mix took, in all
};

static struct counts *counts;
static const char *counts_path;
static char self[4096];

static void die(const char *what) {
    perror(what);
    _exit(111);
}

static void map_counts(int create) {
    int fd = open(counts_path, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0), 0600);
    if (fd < 0 || (create && ftruncate(fd, sizeof(struct counts)) != 0))
        die(counts_path);
    counts = mmap(NULL, sizeof(struct counts), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (counts == MAP_FAILED)
        die("mmap");
    close(fd);
}

static void created(int n) { atomic_fetch_add(&counts->tasks, n); }

static pid_t fork_counted(void) {
    pid_t pid = fork();
    if (pid > 0)
        created(1);
    return pid;
}

static int wait_ok(pid_t pid) {
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Waits until `n` tasks of the mix said they are up; the mix fails after a minute.
static void await_ready(uint64_t n) {
    for (int i = 0; atomic_load(&counts->ready) < n; i++) {
        if (i == 60000)
            _exit(1);
        usleep(1000);
    }
}

static void run_self(const char *mode, const char *arg) {
    char *argv[] = {self, (char *)counts_path, (char *)mode, (char *)arg, NULL};
    execv(self, argv);
    die("execv");
}

// A task of a mix that is killed, or ends with its process, once the mix's tasks are all up:
// it counts itself as it starts, so that no task is killed uncounted.
static void started(void) {
    created(1);
    atomic_fetch_add(&counts->ready, 1);
}

static void *sleeper(void *arg) {
    (void)arg;
    started();
    for (;;)
        pause();
    return NULL;
}

// Starts `n` threads that sleep until their process ends, on small stacks (a core dump writes
// every page of its process); each counts itself (`started`).
static void sleepers(int n) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10);
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, &attr, sleeper, NULL) != 0)
            _exit(1);
    }
    pthread_attr_destroy(&attr);
}

static pthread_barrier_t storm;

static void *storm_thread(void *arg) {
    (void)arg;
    pthread_barrier_wait(&storm);
    return NULL;
}

static int thread_storm(void) {
    pthread_t t[THREADS];
    int n = 0;
    pthread_barrier_init(&storm, NULL, THREADS + 1);
    for (; n < THREADS; n++) {
        if (pthread_create(&t[n], NULL, storm_thread, NULL) != 0)
            break;
        created(1);
    }
    if (n < THREADS)
        _exit(1); // the barrier would never open: the threads end with the process
    pthread_barrier_wait(&storm);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    return 0;
}

static int exec_chain(const char *left) {
    int n = atoi(left);
    if (n <= 0)
        return 0;
    pid_t child = fork_counted();
    if (child < 0)
        return 1;
    if (child == 0) {
        char next[16];
        snprintf(next, sizeof(next), "%d", n - 1);
        run_self("chain", next);
    }
    return !wait_ok(child);
}

static pthread_t leader;

// The thread counts itself: its exec may kill the leader before pthread_create returns there.
static void *exec_after_leader(void *arg) {
    (void)arg;
    created(1);
    // The leader's thread id is cleared as its exit leaves its memory (CLONE_CHILD_CLEARTID):
    // joined, it has exited or is exiting.
    pthread_join(leader, NULL);
    run_self("noop", NULL);
    return NULL;
}

static void *exec_now(void *arg) {
    (void)arg;
    created(1);
    run_self("noop", NULL);
    return NULL;
}

// The mix's process execs from a thread: after its leader's exit, or killing it.
static int exec_from_thread(int leader_first) {
    pthread_t t;
    leader = pthread_self();
    if (pthread_create(&t, NULL, leader_first ? exec_after_leader : exec_now, NULL) != 0)
        return 1;
    if (leader_first)
        pthread_exit(NULL);
    for (;;)
        pause();
}

static int ptrace_hold(void) {
    pid_t child = fork_counted();
    if (child < 0)
        return 1;
    if (child == 0) {
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0)
            _exit(1);
        raise(SIGSTOP);
        _exit(0);
    }
    int status;
    if (waitpid(child, &status, 0) != child || !WIFSTOPPED(status))
        return 1;
    ptrace(PTRACE_SETOPTIONS, child, NULL, (void *)(long)PTRACE_O_TRACEEXIT);
    ptrace(PTRACE_CONT, child, NULL, NULL);
    if (waitpid(child, &status, 0) != child)
        return 1;
    int held = WIFSTOPPED(status) && status >> 8 == (SIGTRAP | (PTRACE_EVENT_EXIT << 8));
    if (held)
        usleep(20000); // the exit waits at its exit stop meanwhile
    ptrace(PTRACE_DETACH, child, NULL, NULL);
    return !(wait_ok(child) && held);
}

static int core_dump(void) {
    pid_t child = fork_counted();
    if (child < 0)
        return 1;
    if (child == 0) {
        struct rlimit unlimited = {RLIM_INFINITY, RLIM_INFINITY};
        setrlimit(RLIMIT_CORE, &unlimited);
        sleepers(3);
        await_ready(3);
        abort();
    }
    int status;
    if (waitpid(child, &status, 0) != child)
        return 1;
    return !(WIFSIGNALED(status) && WCOREDUMP(status));
}

// A tree of processes and threads, each counting itself as it starts, killed at once.
static int kill_tree(void) {
    pid_t root = fork();
    if (root < 0)
        return 1;
    if (root == 0) {
        setpgid(0, 0);
        started();
        for (int i = 0; i < 4; i++) {
            if (fork() == 0) {
                started();
                if (fork() == 0)
                    started();
                else
                    sleepers(3);
                for (;;)
                    pause();
            }
        }
        for (;;)
            pause();
    }
    setpgid(root, root);
    await_ready(1 + 4 * (1 + 1 + 3));
    kill(-root, SIGKILL);
    int status;
    return waitpid(root, &status, 0) != root;
}

static int pidns_init(void *arg) {
    (void)arg;
    for (int i = 0; i < 3; i++)
        if (fork() == 0) {
            started();
            sleepers(2);
            for (;;)
                pause();
        }
    await_ready(3 * (1 + 2));
    return 0; // the namespace's other processes die with their init
}

static int pid_ns(void) {
    static char stack[64 << 10];
    pid_t init = clone(pidns_init, stack + sizeof(stack), CLONE_NEWPID | SIGCHLD, NULL);
    if (init < 0)
        return 1;
    created(1);
    return !wait_ok(init);
}

static int write_pid(const char *dir, pid_t pid) {
    char path[4200], text[16];
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int n = snprintf(text, sizeof(text), "%d", pid);
    int ok = write(fd, text, n) == n;
    close(fd);
    return ok ? 0 : -1;
}

static int in_cgroup(const char *base, uint64_t round) {
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/m%llu", base, (unsigned long long)round);
    if (mkdir(dir, 0755) != 0 || write_pid(dir, getpid()) != 0)
        return 1;
    pid_t children[3];
    for (int i = 0; i < 3; i++) {
        children[i] = fork_counted();
        if (children[i] == 0) {
            sleepers(2);
            await_ready(3 * 2);
            _exit(0);
        }
    }
    int ok = 1;
    for (int i = 0; i < 3; i++)
        ok &= children[i] > 0 && wait_ok(children[i]);
    if (write_pid(base, getpid()) != 0)
        return 1;
    for (int i = 0; i < 100 && rmdir(dir) != 0; i++)
        usleep(1000);
    return !ok;
}

static int deep_chain(void) {
    for (int left = DEEP; left > 0; left--) {
        pid_t child = fork();
        if (child < 0)
            _exit(1);
        if (child > 0) {
            atomic_fetch_add(&counts->deep_tasks, 1);
            _exit(!wait_ok(child));
        }
        prctl(PR_SET_NAME, DEEP_COMM);
    }
    return 0;
}

static int run_mix(enum mix mix, const char *cgroup_dir, uint64_t round) {
    atomic_store(&counts->ready, 0);
    switch (mix) {
    case THREAD_STORM: return thread_storm();
    case EXEC_CHAIN: return exec_chain("6");
    case LEADER_EXIT: return exec_from_thread(1);
    case THREAD_EXEC: return exec_from_thread(0);
    case PTRACE_HOLD: return ptrace_hold();
    case CORE_DUMP: return core_dump();
    case KILL_TREE: return kill_tree();
    case PID_NS: return pid_ns();
    case CGROUP: return in_cgroup(cgroup_dir, round);
    case DEEP_CHAIN: return deep_chain();
    default: return 1;
    }
}

// Reaps whatever is left to reap: the mixes' orphans come to the subreaper.
static void reap_orphans(void) {
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char *argv[]) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s COUNTS SECONDS CGROUP_DIR | COUNTS chain N | COUNTS noop\n",
                argv[0]);
        return 2;
    }
    counts_path = argv[1];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
        die("readlink /proc/self/exe");
    self[len] = 0;
    if (strcmp(argv[2], "noop") == 0)
        return 0;
    if (strcmp(argv[2], "chain") == 0) {
        map_counts(0);
        return argc > 3 ? exec_chain(argv[3]) : 2;
    }
    if (argc != 4)
        return 2;
    map_counts(1);
    double seconds = atof(argv[2]);
    const char *cgroup_dir = argv[3];
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        die("PR_SET_CHILD_SUBREAPER");
    if (write_pid(cgroup_dir, getpid()) != 0)
        die(cgroup_dir);
    double until = now_s() + seconds;
    for (uint64_t round = 0; now_s() < until; round++) {
        for (enum mix mix = 0; mix < MIXES; mix++) {
            double started = now_s();
            pid_t child = fork_counted();
            if (child < 0) {
                atomic_fetch_add(&counts->failed[mix], 1);
                continue;
            }
            if (child == 0)
                _exit(run_mix(mix, cgroup_dir, round));
            int ok = wait_ok(child);
            atomic_fetch_add(ok ? &counts->rounds[mix] : &counts->failed[mix], 1);
            atomic_fetch_add(&counts->mix_ns[mix], (uint64_t)((now_s() - started) * 1e9));
            reap_orphans();
            usleep(1000); // leaves the machine's other work some room
        }
    }
    // The last orphans: every task created has ended once the driver has no child left.
    while (wait(NULL) > 0 || errno == EINTR)
        ;
    printf("{\"tasks\": %llu, \"deep_tasks\": %llu, \"rounds\": {",
           (unsigned long long)atomic_load(&counts->tasks),
           (unsigned long long)atomic_load(&counts->deep_tasks));
    for (int mix = 0; mix < MIXES; mix++)
        printf("%s\"%s\": %llu", mix ? ", " : "", MIX_NAMES[mix],
               (unsigned long long)atomic_load(&counts->rounds[mix]));
    printf("}, \"failed\": {");
    for (int mix = 0; mix < MIXES; mix++)
        printf("%s\"%s\": %llu", mix ? ", " : "", MIX_NAMES[mix],
               (unsigned long long)atomic_load(&counts->failed[mix]));
    printf("}, \"seconds\": {");
    for (int mix = 0; mix < MIXES; mix++)
        printf("%s\"%s\": %.3f", mix ? ", " : "", MIX_NAMES[mix],
               atomic_load(&counts->mix_ns[mix]) / 1e9);
    printf("}}\n");
    return 0;
}
