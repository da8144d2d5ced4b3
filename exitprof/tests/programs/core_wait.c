// The threads of a process whose main thread dumps core: the dump kills them, and each waits in
// its exit, before exit_signals sets PF_EXITING, until the dump is written (coredump_task_exit
// since v5.16, folded into synchronize_group_exit in v6.18; exit_mm before v5.16). The test
// points core_pattern at a pipe handler that sleeps before it reads, and asks the kernel to wait
// for the handler (core_pipe_limit): the dump, and every thread's exit, lasts the sleep at least.
//
// A child process starts THREADS threads that sleep, and aborts once they all run; the parent
// checks that the child dumped core.
//
// usage: core_wait THREADS
// First: it defines _GNU_SOURCE for every header.
#include "ground_truth.h"

#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>

static atomic_int running;

static void *sleeper(void *arg) {
    (void)arg;
    atomic_fetch_add(&running, 1);
    for (;;)
        pause();
    return NULL;
}

static void dump_core(int threads) {
    struct rlimit unlimited = {RLIM_INFINITY, RLIM_INFINITY};
    if (setrlimit(RLIMIT_CORE, &unlimited) != 0) {
        perror("setrlimit(RLIMIT_CORE)");
        _exit(1);
    }
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, sleeper, NULL) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            _exit(1);
        }
    }
    while (atomic_load(&running) < threads)
        usleep(1000);
    abort();
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s THREADS\n", argv[0]);
        return 2;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0)
        dump_core(atoi(argv[1]));
    int status;
    if (waitpid(child, &status, 0) != child) {
        perror("waitpid");
        return 1;
    }
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT || !WCOREDUMP(status)) {
        fprintf(stderr, "the child did not dump core (status %#x)\n", status);
        return 1;
    }
    return 0;
}
