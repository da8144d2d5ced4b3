// Processes whose exit is dominated by undoing their System V semaphore operations: the parent
// makes SETS sets of SEMS semaphores each; each child raises one semaphore of every set with
// SEM_UNDO and exits, SCHED_FIFO; the parent waits for each. exit_sem then takes each set's
// undo entry in turn and, per set, walks all its semaphores three times: to apply the
// adjustments, and in do_smart_update for waiters to wake (none here). Its cost is SETS x SEMS,
// however few semaphores were touched.
//
// The sets live in an IPC namespace of the program's own (it needs CAP_SYS_ADMIN), which the
// kernel frees with them when the program ends, however it ends, and whose limits on semaphores
// are the kernel's defaults whatever the machine's are.
//
// usage: sem_undo SETS SEMS CHILDREN
#include "ground_truth.h"

#include <sys/sem.h>

static int sets;
static int *ids;

static void child(int i) {
    struct sembuf up = {.sem_num = 0, .sem_op = 1, .sem_flg = SEM_UNDO};
    for (int s = 0; s < sets; s++) {
        if (semop(ids[s], &up, 1) != 0) {
            perror("semop");
            _exit(1);
        }
    }
    if (i == 0)
        printf("undo_entries=%d\n", sets);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s SETS SEMS CHILDREN\n", argv[0]);
        return 2;
    }
    sets = atoi(argv[1]);
    int sems = atoi(argv[2]);
    if (unshare(CLONE_NEWIPC) != 0) {
        perror("unshare(CLONE_NEWIPC)");
        return 1;
    }
    ids = calloc(sets, sizeof(*ids));
    for (int s = 0; s < sets; s++) {
        ids[s] = semget(IPC_PRIVATE, sems, IPC_CREAT | 0600);
        if (ids[s] < 0) {
            perror("semget");
            return 1;
        }
    }
    each_child(atoi(argv[3]), child);
    for (int s = 0; s < sets; s++)
        semctl(ids[s], 0, IPC_RMID);
    return 0;
}
