/* The agent protocol: framed messages between the host (cordon run, cordond)
 * and cordon-init inside a sandbox. The same frames travel over a socketpair
 * (process/container tiers) and over virtio-serial (VM tiers).
 *
 * Wire format, all integers little-endian:
 *   u32 magic "CDN1" | u16 type | u16 flags | u32 channel | u32 length | payload[length]
 * channel names one exec (0 = the sandbox itself). A frame longer than
 * CDN_FRAME_MAX or with an unknown magic ends the connection, never the init.
 *
 * Payload encodings are plain and bounded so that a fuzzer can reach every
 * branch: strings are NUL-terminated and counted up front. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CDN_FRAME_MAGIC   0x314e4443u /* "CDN1" */
#define CDN_FRAME_HEADER  16u
#define CDN_FRAME_MAX     (1u << 20)
#define CDN_EXEC_MAX_ARGS 4096

enum cdn_frame_type {
    CDN_FRAME_EXEC = 1,   /* host→init: start a command (payload: struct cdn_exec_req) */
    CDN_FRAME_EXIT = 2,   /* init→host: a command ended (payload: struct cdn_exit_msg) */
    CDN_FRAME_ERROR = 3,  /* init→host: a request failed (payload: i32 errno, message) */
    CDN_FRAME_SIGNAL = 4, /* host→init: deliver a signal to a command (payload: i32 signo) */
    CDN_FRAME_PING = 5,   /* either way: liveness; answered by PONG with the same payload */
    CDN_FRAME_PONG = 6,
};

enum cdn_exec_flags {
    CDN_EXEC_SHUTDOWN_ON_EXIT =
        1u << 0, /* one-shot: init exits (ending the sandbox) when this command ends */
};

struct cdn_frame_header {
    uint16_t type;
    uint16_t flags;
    uint32_t channel;
    uint32_t length;
};

/* Decoded EXEC request. Pointers point into the payload buffer the caller owns. */
struct cdn_exec_req {
    uint32_t flags;
    const char *cwd;
    uint32_t argc, envc;
    const char *argv[CDN_EXEC_MAX_ARGS + 1];
    const char *envp[CDN_EXEC_MAX_ARGS + 1];
};

struct cdn_exit_msg {
    int32_t exit_code; /* valid when signal == 0 */
    int32_t signal;    /* terminating signal, 0 if exited */
    uint64_t user_us, sys_us;
    uint64_t maxrss_kb;
};

/* Header codec: returns 0, or -EBADMSG (bad magic), -EMSGSIZE (too long). */
int cdn_frame_header_decode(const uint8_t buf[CDN_FRAME_HEADER], struct cdn_frame_header *ret);
void cdn_frame_header_encode(uint8_t buf[CDN_FRAME_HEADER], const struct cdn_frame_header *h);

/* EXEC payload: u32 flags | u32 argc | u32 envc | cwd\0 | argv\0… | env\0…
 * Encode returns the payload length written into buf (or -ENOBUFS). */
int cdn_exec_encode(uint8_t *buf, size_t size, uint32_t flags, const char *cwd, char *const argv[],
                    char *const envp[]);
int cdn_exec_decode(const uint8_t *p, size_t len, struct cdn_exec_req *ret);

int cdn_exit_encode(uint8_t *buf, size_t size, const struct cdn_exit_msg *m);
int cdn_exit_decode(const uint8_t *p, size_t len, struct cdn_exit_msg *ret);

/* ERROR payload: i32 errno | message\0 */
int cdn_errmsg_encode(uint8_t *buf, size_t size, int errnum, const char *msg);
int cdn_errmsg_decode(const uint8_t *p, size_t len, int *ret_errno, const char **ret_msg);

/* Blocking helpers for simple peers: write one whole frame / read one whole
 * frame into buf (payload). Return payload length or negative errno; 0-length
 * EOF before a header returns -ECONNRESET. */
int cdn_frame_send(int fd, uint16_t type, uint32_t channel, const void *payload, uint32_t len);
int cdn_frame_recv(int fd, struct cdn_frame_header *h, uint8_t *buf, size_t size);
