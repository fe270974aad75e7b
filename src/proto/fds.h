/* The fds a sandbox's init (cordon-init, or a process-tier worker's agent) starts with: one layout,
 * shared by the host side that arranges them (the container tier's setup child, the process tier's
 * worker, the microvm tier's QEMU for its agent socket) and init, which uses them. A change here is
 * a change of the agent's interface: both sides are built from this header. */
#pragma once

enum cdn_init_fd {
    CDN_FD_AGENT = 3,     /* the agent socket, whose other end the host holds (frame.h) */
    CDN_FD_INIT_BIN = 4,  /* setup child only: the cordon-init executable (CLOEXEC) */
    CDN_FD_SETUP_ERR = 5, /* setup child only: its error pipe (CLOEXEC; EOF once init is exec'd) */
    CDN_FD_SETUP_GO = 6,  /* setup child only: the go pipe from the parent ('m', then 'c') */
    CDN_FD_LISTEN = 7,    /* a persistent sandbox's listening socket (a restarted host reconnects) */
    CDN_FD_SLOT = 8,      /* a persistent sandbox's slot lock, held by init for its life */
    CDN_FD_MONITOR = 9,   /* init's copy of the seccomp listener of watched denials */
    CDN_FD_FANOTIFY = 10, /* init's copy of the host's fanotify group (sandboxes with protected paths) */
    CDN_FD_WRITABLE =
        11, /* setup child only: the writable layer's detached mount (CLOEXEC, closed once moved) */
};
