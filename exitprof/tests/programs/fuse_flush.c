// Exits that wait for a FUSE server to answer the flush of a file they left open: at exit,
// exit_files closes the task's files, and closing a file of a FUSE filesystem sends FLUSH to
// its server (fuse_flush) and sleeps until the server answers (request_wait_answer). A network
// filesystem's client, sshfs or a container's lazy image store does the same.
//
// The server is this program's own, speaking the kernel's FUSE protocol on /dev/fuse without
// libfuse: one directory with one empty file, FLUSH answered HOLD_MS after it came. N children,
// one after the other, open the file and exit without closing it. The hold is measured by the
// server, from the FLUSH it read to the answer it wrote; each child's exit includes all of it.
//
// Writes to OUT: the shortest of the holds (ns).
//
// usage: fuse_flush MOUNTPOINT HOLD_MS N OUT
#include "ground_truth.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>

// The root directory's node id is the kernel's FUSE_ROOT_ID; the file's is the next.
#define FILE_NODE 2
#define FILE_NAME "file"
// The kernel asks for a read buffer of at least this (FUSE_MIN_READ_BUFFER).
static char request[1 << 17];

static long hold_ns;
static long shortest = -1;

static void reply(int fd, const struct fuse_in_header *in, int error, const void *body,
                  size_t len) {
    struct fuse_out_header out = {.len = sizeof(out) + len, .error = error, .unique = in->unique};
    char buffer[sizeof(out) + 512];
    memcpy(buffer, &out, sizeof(out));
    memcpy(buffer + sizeof(out), body, len);
    if (write(fd, buffer, out.len) != (ssize_t)out.len && errno != ENOENT) {
        perror("write /dev/fuse");
        exit(1);
    }
}

static void attributes(uint64_t node, struct fuse_attr *attr) {
    memset(attr, 0, sizeof(*attr));
    attr->ino = node;
    attr->mode = node == FUSE_ROOT_ID ? S_IFDIR | 0755 : S_IFREG | 0644;
    attr->nlink = node == FUSE_ROOT_ID ? 2 : 1;
    attr->blksize = 4096;
}

// Answers the kernel's requests until the filesystem is unmounted.
static void serve(int fd) {
    for (;;) {
        ssize_t n = read(fd, request, sizeof(request));
        if (n < 0 && (errno == EINTR || errno == ENOENT))
            continue;
        if (n < 0 && errno == ENODEV)
            break;
        if (n < (ssize_t)sizeof(struct fuse_in_header)) {
            perror("read /dev/fuse");
            exit(1);
        }
        const struct fuse_in_header *in = (const void *)request;
        const void *body = request + sizeof(*in);
        switch (in->opcode) {
        case FUSE_INIT: {
            const struct fuse_init_in *init = body;
            struct fuse_init_out out = {.major = FUSE_KERNEL_VERSION,
                                        .minor = init->minor < FUSE_KERNEL_MINOR_VERSION
                                                     ? init->minor
                                                     : FUSE_KERNEL_MINOR_VERSION,
                                        .max_write = 4096,
                                        .max_readahead = init->max_readahead};
            // Older kernels take the shorter answer of their minor version.
            reply(fd, in, 0, &out, init->minor < 23 ? FUSE_COMPAT_22_INIT_OUT_SIZE : sizeof(out));
            break;
        }
        case FUSE_LOOKUP:
            if (in->nodeid == FUSE_ROOT_ID && strcmp(body, FILE_NAME) == 0) {
                struct fuse_entry_out out = {.nodeid = FILE_NODE, .generation = 1};
                attributes(FILE_NODE, &out.attr);
                reply(fd, in, 0, &out, sizeof(out));
            } else {
                reply(fd, in, -ENOENT, NULL, 0);
            }
            break;
        case FUSE_GETATTR: {
            struct fuse_attr_out out = {0};
            attributes(in->nodeid, &out.attr);
            reply(fd, in, 0, &out, sizeof(out));
            break;
        }
        case FUSE_OPEN:
        case FUSE_OPENDIR: {
            struct fuse_open_out out = {.fh = 1};
            reply(fd, in, 0, &out, sizeof(out));
            break;
        }
        case FUSE_FLUSH: {
            long read_at = now_ns();
            struct timespec hold = {.tv_sec = hold_ns / 1000000000L,
                                    .tv_nsec = hold_ns % 1000000000L};
            while (nanosleep(&hold, &hold) != 0)
                ;
            long held = now_ns() - read_at;
            if (shortest < 0 || held < shortest)
                shortest = held;
            reply(fd, in, 0, NULL, 0);
            break;
        }
        case FUSE_RELEASE:
        case FUSE_RELEASEDIR:
        case FUSE_DESTROY:
            reply(fd, in, 0, NULL, 0);
            break;
        case FUSE_FORGET:
        case FUSE_BATCH_FORGET:
        case FUSE_INTERRUPT:
            break; // no answer is expected
        default:
            reply(fd, in, -ENOSYS, NULL, 0);
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s MOUNTPOINT HOLD_MS N OUT\n", argv[0]);
        return 2;
    }
    const char *mountpoint = argv[1];
    hold_ns = strtol(argv[2], NULL, 10) * 1000000L;
    int n = atoi(argv[3]);
    int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        perror("/dev/fuse");
        return 1;
    }
    char options[128];
    snprintf(options, sizeof(options), "fd=%d,rootmode=40000,user_id=0,group_id=0", fd);
    if (mount("exitprof-test", mountpoint, "fuse", MS_NOSUID | MS_NODEV, options) != 0) {
        perror("mount fuse");
        return 1;
    }
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        perror("pipe");
        return 1;
    }
    pid_t server = fork();
    if (server < 0) {
        perror("fork");
        return 1;
    }
    if (server == 0) {
        close(pipefd[0]);
        serve(fd);
        // The shortest hold, to the parent.
        if (write(pipefd[1], &shortest, sizeof(shortest)) != sizeof(shortest))
            _exit(1);
        _exit(0);
    }
    close(pipefd[1]);
    close(fd);
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", mountpoint, FILE_NAME);
    for (int i = 0; i < n; i++) {
        pid_t child = fork();
        if (child < 0) {
            perror("fork");
            return 1;
        }
        if (child == 0) {
            // Left open: exit_files closes it, and waits for the flush.
            if (open(path, O_RDONLY) < 0) {
                perror(path);
                _exit(1);
            }
            _exit(0);
        }
        wait_child(child);
    }
    if (umount2(mountpoint, 0) != 0) {
        perror("umount");
        kill(server, SIGKILL);
        return 1;
    }
    long held = -1;
    if (read(pipefd[0], &held, sizeof(held)) != sizeof(held)) {
        fprintf(stderr, "the FUSE server did not say what it held\n");
        return 1;
    }
    wait_child(server);
    write_measure(argv[4], "hold_ns", held);
    return 0;
}
