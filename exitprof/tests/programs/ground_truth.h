// What the test programs share: real-time scheduling, populated memory, children, a thread's
// state.
#ifndef GROUND_TRUTH_H
#define GROUND_TRUTH_H

#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// CLOCK_MONOTONIC, as the kernel's timestamps.
static inline long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

// Makes the calling thread SCHED_FIFO at `priority`.
static inline void fifo(int priority) {
    struct sched_param param = {.sched_priority = priority};
    int err = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param);
    if (err != 0) {
        fprintf(stderr, "cannot run as SCHED_FIFO: %s\n", strerror(err));
        exit(1);
    }
}

// Makes the calling thread SCHED_FIFO, on `cpu` when it is not negative: no other task of the
// machine takes the CPU from it, so the times it shows are its own work's.
static inline void realtime(int cpu) {
    fifo(50);
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) {
            perror("sched_setaffinity");
            exit(1);
        }
    }
}

// Private anonymous memory of `bytes`, every page touched, in 4 KiB pages (no transparent huge
// pages): tearing it down or changing its protection walks an entry per page.
static inline char *populated(size_t bytes) {
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    madvise(p, bytes, MADV_NOHUGEPAGE);
    memset(p, 1, bytes);
    return p;
}

// Writes `name=value` to the file at `path`: what a program measured, for its test to read.
// Exits the program when the file cannot be written.
static inline void write_measure(const char *path, const char *name, long value) {
    FILE *out = fopen(path, "w");
    if (!out || fprintf(out, "%s=%ld\n", name, value) < 0 || fclose(out) != 0) {
        perror(path);
        exit(1);
    }
}

// Waits for child `pid`; exits the program when it failed.
static inline void wait_child(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "child %d failed\n", pid);
        exit(1);
    }
}

// Runs `body` in `n` children, one after the other, each exiting when `body` returns. Each
// child becomes SCHED_FIFO only then, for its exit: the kernel lets real-time tasks have 95 % of
// each second, and a child that spent its second setting up as SCHED_FIFO (populating memory
// takes that long under emulation) would be throttled, runnable, in the middle of its exit.
static inline void each_child(int n, void (*body)(int)) {
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            exit(1);
        }
        if (pid == 0) {
            body(i);
            realtime(-1);
            _exit(0);
        }
        wait_child(pid);
    }
}

// Whether the thread `tid` of this process has exited: its state in /proc is Z (zombie) once
// it has (a leader that exited first stays one while its process lives), or it is gone.
static inline int thread_exited(pid_t tid) {
    char path[64], stat[256];
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t n = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[n] = 0;
    const char *state = strrchr(stat, ')');
    return state && state[1] == ' ' && state[2] == 'Z';
}

#endif
