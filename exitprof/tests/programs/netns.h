// What the network namespace programs share: namespaces held by children, their ids in the
// caller's namespace, and the kernel's announcements of their teardowns (rtnetlink).
#ifndef NETNS_H
#define NETNS_H

#include "ground_truth.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/net_namespace.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

// Room for one request or a few notifications.
#define BUF 4096

static inline void die(const char *what) {
    perror(what);
    exit(1);
}

// A netlink message being put together.
struct msg {
    char buf[BUF];
    size_t len;
};

static inline struct rtattr *attr_at(struct msg *m) { return (struct rtattr *)(m->buf + m->len); }

// Appends an attribute of `len` bytes of `data`; returns it (for nesting).
static inline struct rtattr *put(struct msg *m, unsigned short type, const void *data, size_t len) {
    struct rtattr *a = attr_at(m);
    a->rta_type = type;
    a->rta_len = RTA_LENGTH(len);
    if (len > 0) {
        memcpy(RTA_DATA(a), data, len);
    }
    m->len += RTA_ALIGN(a->rta_len);
    return a;
}

// Closes a nested attribute opened with `put(m, type, NULL, 0)`.
static inline void end_nest(struct msg *m, struct rtattr *nest) {
    nest->rta_len = (unsigned short)((char *)attr_at(m) - (char *)nest);
}

static inline void start(struct msg *m, unsigned short type, unsigned short flags, const void *header,
                  size_t header_len) {
    memset(m, 0, sizeof(*m));
    struct nlmsghdr *h = (struct nlmsghdr *)m->buf;
    h->nlmsg_type = type;
    h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    m->len = NLMSG_ALIGN(NLMSG_LENGTH(header_len));
    memcpy(NLMSG_DATA(h), header, header_len);
}

// Sends a request and checks the kernel's acknowledgement.
static inline void request(int fd, struct msg *m, const char *what) {
    struct nlmsghdr *h = (struct nlmsghdr *)m->buf;
    h->nlmsg_len = (unsigned int)m->len;
    if (send(fd, m->buf, m->len, 0) < 0) {
        die(what);
    }
    // The acknowledgement; announcements the socket listens to may come first.
    char answer[BUF];
    for (;;) {
        ssize_t got = recv(fd, answer, sizeof(answer), 0);
        if (got < 0) {
            die(what);
        }
        for (struct nlmsghdr *a = (struct nlmsghdr *)answer; NLMSG_OK(a, (unsigned int)got);
             a = NLMSG_NEXT(a, got)) {
            if (a->nlmsg_type != NLMSG_ERROR) {
                continue;
            }
            struct nlmsgerr *e = NLMSG_DATA(a);
            if (e->error != 0) {
                errno = -e->error;
                die(what);
            }
            return;
        }
    }
}

static inline int route_socket(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) {
        die("netlink socket");
    }
    return fd;
}

// Makes veth pair `i` (v<i>, its peer p<i>) in the caller's namespace.
static inline void add_veth(int fd, int i) {
    struct msg m;
    struct ifinfomsg info = {.ifi_family = AF_UNSPEC};
    start(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &info, sizeof(info));
    char name[IFNAMSIZ];
    snprintf(name, sizeof(name), "v%d", i);
    put(&m, IFLA_IFNAME, name, strlen(name) + 1);
    struct rtattr *linkinfo = put(&m, IFLA_LINKINFO, NULL, 0);
    put(&m, IFLA_INFO_KIND, "veth", 5);
    struct rtattr *data = put(&m, IFLA_INFO_DATA, NULL, 0);
    struct rtattr *peer = put(&m, VETH_INFO_PEER, NULL, 0);
    memcpy(m.buf + m.len, &info, sizeof(info));
    m.len += NLMSG_ALIGN(sizeof(info));
    snprintf(name, sizeof(name), "p%d", i);
    put(&m, IFLA_IFNAME, name, strlen(name) + 1);
    end_nest(&m, peer);
    end_nest(&m, data);
    end_nest(&m, linkinfo);
    request(fd, &m, "RTM_NEWLINK veth");
}

// Gives the namespace the descriptor `ns` holds the id `nsid` in the caller's namespace.
static inline void set_nsid_of(int fd, int ns, int nsid) {
    struct msg m;
    struct rtgenmsg gen = {.rtgen_family = AF_UNSPEC};
    start(&m, RTM_NEWNSID, 0, &gen, sizeof(gen));
    unsigned int fd_value = (unsigned int)ns;
    put(&m, NETNSA_FD, &fd_value, sizeof(fd_value));
    put(&m, NETNSA_NSID, &nsid, sizeof(nsid));
    request(fd, &m, "RTM_NEWNSID");
}

// A descriptor of the network namespace of `pid`: it holds a reference to it.
static inline int ns_of(pid_t pid) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/net", pid);
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    if (ns < 0) {
        die(path);
    }
    return ns;
}

// Gives the namespace of `pid` the id `nsid` in the caller's namespace.
static inline void set_nsid(int fd, pid_t pid, int nsid) {
    int ns = ns_of(pid);
    set_nsid_of(fd, ns, nsid);
    // The descriptor holds a reference to the namespace: let go of it.
    close(ns);
}

// Subscribes `fd` to the announcements of namespace ids (RTM_NEWNSID, RTM_DELNSID).
static inline void listen_nsids(int fd) {
    int group = RTNLGRP_NSID;
    if (setsockopt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &group, sizeof(group)) != 0) {
        die("NETLINK_ADD_MEMBERSHIP RTNLGRP_NSID");
    }
}

static inline unsigned long ns_inode(pid_t pid) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/net", pid);
    struct stat st;
    if (stat(path, &st) != 0) {
        die(path);
    }
    return (unsigned long)st.st_ino;
}

// Waits for RTM_DELNSID of any id in [first, first + n) not seen yet; returns when it came.
static inline long wait_delnsid(int fd, int first, int n, int *seen) {
    char buf[BUF];
    for (;;) {
        ssize_t got = recv(fd, buf, sizeof(buf), 0);
        long at = now_ns();
        if (got < 0) {
            die("recv RTM_DELNSID");
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (unsigned int)got);
             h = NLMSG_NEXT(h, got)) {
            if (h->nlmsg_type != RTM_DELNSID) {
                continue;
            }
            int len = (int)h->nlmsg_len - NLMSG_LENGTH(sizeof(struct rtgenmsg));
            struct rtattr *a = (struct rtattr *)((char *)NLMSG_DATA(h) +
                                                 NLMSG_ALIGN(sizeof(struct rtgenmsg)));
            for (; RTA_OK(a, len); a = RTA_NEXT(a, len)) {
                int id = *(int *)RTA_DATA(a);
                if (a->rta_type == NETNSA_NSID && id >= first && id < first + n &&
                    !seen[id - first]) {
                    seen[id - first] = 1;
                    return at;
                }
            }
        }
    }
}

// A child with a network namespace of its own and `pairs` veth pairs in it: says so on `ready`,
// then waits to be killed.
static inline pid_t holder(int pairs) {
    int ready[2];
    if (pipe(ready) != 0) {
        die("pipe");
    }
    pid_t pid = fork();
    if (pid < 0) {
        die("fork");
    }
    if (pid == 0) {
        if (unshare(CLONE_NEWNET) != 0) {
            die("unshare(CLONE_NEWNET)");
        }
        if (pairs > 0) {
            int fd = route_socket();
            for (int i = 0; i < pairs; i++) {
                add_veth(fd, i);
            }
            // A socket lets go of its namespace from an RCU callback: none is left open.
            close(fd);
        }
        char byte = 1;
        if (write(ready[1], &byte, 1) != 1) {
            die("write");
        }
        for (;;) {
            pause();
        }
    }
    close(ready[1]);
    char byte;
    if (read(ready[0], &byte, 1) != 1) {
        fprintf(stderr, "a namespace holder failed\n");
        exit(1);
    }
    close(ready[0]);
    return pid;
}

static inline void kill_and_reap(pid_t pid) {
    if (kill(pid, SIGKILL) != 0) {
        die("kill");
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) {
        die("waitpid");
    }
}

#endif
