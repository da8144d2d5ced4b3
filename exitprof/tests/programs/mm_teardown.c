// Processes whose exit is dominated by tearing down their memory: each child touches every
// page of MIB MiB of private anonymous memory and exits, SCHED_FIFO; the parent waits for each.
//
// usage: mm_teardown MIB CHILDREN
#include "ground_truth.h"

static size_t bytes;

static void child(int i) {
    (void)i;
    populated(bytes);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MIB CHILDREN\n", argv[0]);
        return 2;
    }
    bytes = strtoul(argv[1], NULL, 10) << 20;
    each_child(atoi(argv[2]), child);
    return 0;
}
