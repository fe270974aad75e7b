/* SPDX-License-Identifier: see repository LICENSE */
/* The helper process that makes the stock's writable layers (writable.c) for cordond.
 *
 * A layer is a copy of the ext4 template, a loop device on it and ext4 mounted from that: the loop
 * device's configure syncs the file and starts a worker thread, the mount reads the superblock and
 * the first directory the bitmaps, all waiting on the disk. Made in cordond's event loop, each one
 * stopped every request behind it; under a steady load (creates never pausing) the stock stayed
 * empty and each create made its own there, so creates went one at a time. Made here, in a process
 * of its own, the waits overlap cordond's work, and the layers come back as mount fds over a
 * SOCK_SEQPACKET socket (the same SCM_RIGHTS hand-over `cordon run` gets them by).
 *
 * Requests: a uint64_t, the layer's disk_mb. Answers, one message per request (struct
 * cdn_layer_answer): 'L' with the layer's mount fd, or 'E' and why not. It ends when cordond does
 * (PR_SET_PDEATHSIG) or closes its socket. */
#include "container-internal.h"
#include "shared/fd-util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static _noreturn_ void maker_main(int sock, pid_t owner)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != owner)
        _exit(0);
    (void) prctl(PR_SET_NAME, "cordon-layers");
    /* Nothing of cordond's but the socket (and stdio, for nothing): its sandboxes' fds among them
     * would keep their layers and sockets alive. */
    if (dup2(sock, 3) < 0 || syscall(SYS_close_range, 4, ~0U, 0) < 0)
        _exit(1);
    /* Whose a layer is until a sandbox takes it (writable.c names it so when it makes one itself). */
    char name[64];
    (void) snprintf(name, sizeof name, "cordon-stock-%d", (int) owner);
    for (;;) {
        uint64_t mb;
        if (recv(3, &mb, sizeof mb, 0) != (ssize_t) sizeof mb)
            _exit(0);
        struct cdn_layer_answer ans = {.kind = 'L'};
        int fd = cdn_layer_new_warm(mb, name, &ans.err);
        if (fd < 0)
            ans.kind = 'E';
        ssize_t r = cdn_send_fd(3, &ans, sizeof ans, fd, MSG_NOSIGNAL);
        if (fd >= 0)
            (void) close(fd); /* cordond has its copy */
        if (r != (ssize_t) sizeof ans)
            _exit(0);
    }
}

int cdn_layer_maker_fork(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    pid_t owner = getpid(), pid = fork();
    if (pid < 0) {
        int e = -errno;
        (void) close(sv[0]);
        (void) close(sv[1]);
        return e;
    }
    if (pid == 0)
        maker_main(sv[1], owner);
    (void) close(sv[1]);
    return sv[0];
}
