// Threads that exit one after another, real-time on one CPU: no other task of the machine runs
// on that CPU during their exits, and none waits for a lock another holds, so that their
// spread is their own work's and the few hundred nanoseconds a probe adds show.
// Usage: serial_threads THREADS
#include "ground_truth.h"

static void *nothing(void *arg) {
    return arg;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s THREADS\n", argv[0]);
        return 2;
    }
    // Its threads inherit the policy and the CPU.
    realtime(1);
    for (long i = atol(argv[1]); i > 0; i--) {
        pthread_t t;
        if (pthread_create(&t, NULL, nothing, NULL) != 0 || pthread_join(t, NULL) != 0) {
            perror("thread");
            return 1;
        }
    }
    return 0;
}
