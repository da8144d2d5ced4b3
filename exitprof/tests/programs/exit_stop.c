// Exits held by their tracer at the exit stop, as `strace -f`, debuggers and crash handlers do
// (PTRACE_O_TRACEEXIT): the kernel stops the task in do_exit, before exit_signals sets
// PF_EXITING, and it sleeps in ptrace_stop until the tracer lets it go.
//
// N children, one after the other: each stops itself for its tracer (this program), which sets
// the option and lets it run; the child exits at once; the tracer sees the exit stop, holds it
// HOLD_MS, and detaches. The hold is measured by the tracer, from the stop it saw to the detach;
// the child's exit includes all of it.
//
// Writes to OUT: the shortest of the holds (ns).
//
// usage: exit_stop HOLD_MS N OUT
// First: it defines _GNU_SOURCE for every header.
#include "ground_truth.h"

#include <signal.h>
#include <sys/ptrace.h>

// Waits for `pid` to stop or end, and returns its status.
static int wait_for(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) != pid) {
        perror("waitpid");
        exit(1);
    }
    return status;
}

static void ptrace_or_die(enum __ptrace_request request, pid_t pid, void *data) {
    if (ptrace(request, pid, NULL, data) != 0) {
        perror("ptrace");
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s HOLD_MS N OUT\n", argv[0]);
        return 2;
    }
    long hold_ns = strtol(argv[1], NULL, 10) * 1000000L;
    int n = atoi(argv[2]);
    long shortest = -1;
    for (int i = 0; i < n; i++) {
        pid_t child = fork();
        if (child < 0) {
            perror("fork");
            return 1;
        }
        if (child == 0) {
            if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0) {
                perror("PTRACE_TRACEME");
                _exit(1);
            }
            raise(SIGSTOP);
            _exit(0);
        }
        wait_for(child);
        ptrace_or_die(PTRACE_SETOPTIONS, child, (void *)PTRACE_O_TRACEEXIT);
        ptrace_or_die(PTRACE_CONT, child, NULL);
        int status = wait_for(child);
        if (!WIFSTOPPED(status) || status >> 8 != (SIGTRAP | (PTRACE_EVENT_EXIT << 8))) {
            fprintf(stderr, "child %d did not stop at its exit (status %#x)\n", child, status);
            return 1;
        }
        long stopped = now_ns();
        struct timespec hold = {.tv_sec = hold_ns / 1000000000L, .tv_nsec = hold_ns % 1000000000L};
        while (nanosleep(&hold, &hold) != 0)
            ;
        long held = now_ns() - stopped;
        ptrace_or_die(PTRACE_DETACH, child, NULL);
        status = wait_for(child);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child %d failed (status %#x)\n", child, status);
            return 1;
        }
        if (shortest < 0 || held < shortest)
            shortest = held;
    }
    write_measure(argv[3], "hold_ns", shortest);
    return 0;
}
