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

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CDN_FRAME_MAGIC   0x314e4443u /* "CDN1" */
#define CDN_FRAME_HEADER  16u
#define CDN_FRAME_MAX     (1u << 20)
#define CDN_EXEC_MAX_ARGS 4096
#define CDN_EXEC_FIXED    16u /* EXEC payload bytes before the strings */

/* A channel is chosen by the host, one per request (an exec or a file
 * operation); every frame init sends about that request carries it. */
enum cdn_frame_type {
    CDN_FRAME_EXEC = 1,   /* host→init: start a command (payload: struct cdn_exec_req) */
    CDN_FRAME_EXIT = 2,   /* init→host: a command ended (payload: struct cdn_exit_msg); its last frame */
    CDN_FRAME_ERROR = 3,  /* init→host: a request failed (payload: i32 errno, message); its last frame.
                           * On channel 0: the connection is being closed for a malformed frame. */
    CDN_FRAME_SIGNAL = 4, /* host→init: deliver a signal to a command (payload: i32 signo); SIGKILL
                           * goes to every process the command started, wherever it went since */
    CDN_FRAME_PING = 5,   /* either way: liveness; answered by PONG with the same payload */
    CDN_FRAME_PONG = 6,
    CDN_FRAME_STDOUT = 7, /* init→host: output of a CDN_EXEC_PIPES command; empty = that stream ended */
    CDN_FRAME_STDERR = 8,
    CDN_FRAME_STDIN = 9,     /* host→init: input for a CDN_EXEC_STDIN command; empty = close its stdin */
    CDN_FRAME_FILE = 10,     /* host→init: a file operation (payload: struct cdn_file_req) */
    CDN_FRAME_DATA = 11,     /* either way: file bytes (read: init→host; write: host→init, after FILE) or,
                              * for LIST, directory entries (struct cdn_file_stat each) */
    CDN_FRAME_DONE = 12,     /* init→host: a file operation succeeded (payload: struct cdn_file_stat of the
                              * path, for every op but REMOVE, which sends none); its last frame */
    CDN_FRAME_RESIZE = 13,   /* host→init: PTY window size of a command (payload: u16 rows | u16 cols) */
    CDN_FRAME_QUIESCE = 14,  /* host→init: SIGKILL every process of the sandbox but init (no payload);
                              * answered by DONE (no payload) on its channel once none is left */
    CDN_FRAME_IDENTITY = 15, /* host→init, VM guests restored from a snapshot: a fresh identity before
                              * any command (payload: struct cdn_identity); answered by DONE */
    CDN_FRAME_POLICY = 16,   /* host→init, VM guests: how commands are confined (payload: struct
                              * cdn_policy); answered by DONE */
    CDN_FRAME_VIOLATION = 17, /* init→host on channel 0, VM guests: a command's watched denial (payload:
                               * struct cdn_violation_msg) */
    CDN_FRAME_USAGE = 18,     /* init→host on channel 0, VM guests: the commands' accounting, whenever it
                               * changes and before each EXIT (payload: struct cdn_usage_msg) */
    CDN_FRAME_CALL = 19,      /* host→init, the process tier: run code in the warm interpreter (payload:
                               * the request's JSON, docs/process.md); answered by RESULT or ERROR */
    CDN_FRAME_RESULT = 20,    /* init→host: a call's outcome (payload: JSON); its last frame */
    CDN_FRAME_CANCEL = 21,    /* host→init: stop the file operation of this channel (no payload; its
                               * client left); answered by ERROR (ECANCELED) unless it had ended */
    CDN_FRAME_WINDOW = 22,    /* host→init: u32 more bytes the host takes on this read's channel
                               * (a FILE READ whose request set a window) */
    CDN_FRAME_PROTECTED = 23, /* host→init on channel 0: the mounts of the protected paths (payload:
                               * u32 n | n x u64 mount id), replacing the last list; no answer */
    CDN_FRAME_STARTED = 24,   /* init→host: a CDN_EXEC_PID command runs (payload: u32 its pid in the
                               * sandbox); its output and EXIT follow */
    CDN_FRAME_CONTROL = 25,   /* either way, a CDN_EXEC_CONTROL command's control channel: host→init,
                               * bytes for its fd 3; init→host, what it wrote to its fd 4, sent once
                               * its output before them went (init-exec.c) */
    CDN_FRAME_TCP = 26,       /* host→init: connect to 127.0.0.1:port in the sandbox (payload: u16 port |
                               * u32 window, what init may send first); then WINDOW and DATA both ways,
                               * DONE or ERROR at the end (init-tcp.c) */
    CDN_FRAME_PROTECT = 27,   /* host→init, VM guests: the whole new list of protected-path patterns
                               * (payload: cdn_protect_list_encode); DONE, or ERROR (EBUSY: a process
                               * holds a way past a new bind), the message naming protect[i] */
    CDN_FRAME_HOLD = 28,      /* on channel 0, VM guests, around a memory checkpoint: host→init, u8 op:
                               * CDN_HOLD_ON (| u32 nonce): init freezes its commands, answers HOLD
                               * with the same payload and then writes nothing more, so the stream is
                               * at a frame's end when QEMU saves the guest (the host writes nothing
                               * after its HOLD either); CDN_HOLD_OFF: it thaws them and writes again
                               * (no answer; a hold nobody lets go of ends after 30 s); CDN_HOLD_RESUME
                               * (| u64 the host's CLOCK_REALTIME in ns): the guest was restored from
                               * such a checkpoint under a new host: what it owed the old one is
                               * dropped (its channels, queued frames), its clock set, its random
                               * pool reseeded (| CDN_IDENTITY_SEED bytes), its network made the
                               * sandbox's, which a fork's is not (| u32 ip | u32 gateway | u32
                               * resolver | u8 prefix, as IDENTITY's; ip 0: none); it thaws its
                               * commands, answers DONE and writes again */
};

enum cdn_hold_op { CDN_HOLD_OFF = 0, CDN_HOLD_ON = 1, CDN_HOLD_RESUME = 2 };
#define CDN_HOLD_ON_LEN     5u
#define CDN_HOLD_RESUME_LEN (1u + 8u + CDN_IDENTITY_SEED + 13u)

/* CALL payload: u32 timeout (ms, 0 = none) | u32 flags | the request's JSON ({"code", "input"}). */
#define CDN_CALL_FIXED 8u
#define CDN_CALL_FRESH 1u /* a pristine interpreter for this call alone, ended after it */

/* Frame header flags. */
enum cdn_frame_flags {
    CDN_FRAME_MORE = 1u << 0, /* FILE(WRITE)/DATA host→init: more DATA frames of this write follow */
    CDN_FRAME_SYNC = 1u << 1, /* STDIN host→init: answer WINDOW (u32: what init takes now, > 0) on its
                               * channel once at most CDN_STDIN_LOW of the command's input waits in
                               * init: the host sends more only then (backpressure) */
};

enum cdn_exec_flags {
    CDN_EXEC_SHUTDOWN_ON_EXIT =
        1u << 0,                  /* one-shot: init exits (ending the sandbox) when this command ends */
    CDN_EXEC_PIPES = 1u << 1,     /* stdout/stderr come back as STDOUT/STDERR frames (else init's own) */
    CDN_EXEC_STDIN = 1u << 2,     /* with PIPES: stdin from STDIN frames (else /dev/null) */
    CDN_EXEC_PTY = 1u << 3,       /* with PIPES: a pseudo-terminal of rows×cols is stdin/out/err; its
                                   * output comes as STDOUT, input as STDIN; RESIZE changes its size */
    CDN_EXEC_VERIFIER = 1u << 4,  /* a verifier step (after QUIESCE): a VM guest's init lets it, alone,
                                   * read the protected paths while it runs; init gives it a HOME and
                                   * a PATH of its own when the request has none (init-exec.c) */
    CDN_EXEC_TREE = 1u << 5,      /* the command is the subreaper of what it starts (a command with a
                                   * timeout): what orphans itself, setsid or not, stays in its tree,
                                   * which a SIGKILL SIGNAL kills whole (init-exec.c) */
    CDN_EXEC_USER = 1u << 6,      /* a user string follows the environment: the command runs as it,
                                   * resolved by init in the sandbox's /etc/passwd (shared/user.h) */
    CDN_EXEC_PID = 1u << 8,       /* STARTED with its pid once it runs (an older init ignores it) */
    CDN_EXEC_CONTROL = 1u << 9,   /* with PIPES, not PTY: fd 3 reads CONTROL bytes from the host, and
                                   * what it writes to fd 4 goes to the host as CONTROL, after the output
                                   * it wrote before; each line of it is acknowledged by a "\n" on fd 3
                                   * once sent (a shell session, api-session.c) */
    CDN_EXEC_STATUS = 1u << 10,   /* with SHUTDOWN_ON_EXIT: init's own exit status is the command's
                                   * (128+N when signal N ended it; 127 when it was not found, 126 when
                                   * it could not start), for a parent that waits for init itself
                                   * (cordon-runtime's engine: conmon, containerd's shim) */
    CDN_EXEC_CTTY = 1u << 11,     /* without PIPES: init's own stdio is a terminal (cordon-runtime's
                                   * process.terminal), which becomes the controlling terminal of the
                                   * command's new session, as a shell's job control needs */
    CDN_EXEC_SYSTEM_RO = 1u << 7, /* with VERIFIER, on the container tier: the host vouches that landlock
                                   * keeps the system directories (shared/sysdirs.h) read-only to every
                                   * process of the sandbox (no writable_system, no read-write bind
                                   * there), which access() does not tell (init-verifier.c) */
};

/* The ERROR that refuses a verifier step (CDN_EXEC_VERIFIER) before it runs, by errnum (the
 * host answers 409): a protected path is not the mount bound there at creation any more (moved
 * aside with a parent); the sandbox is not fit for an in-place step (the dynamic loader's preload
 * list is writable by its commands). */
#define CDN_VERIFIER_MOVED  ESTALE
#define CDN_VERIFIER_UNSAFE ENOTRECOVERABLE

struct cdn_frame_header {
    uint16_t type;
    uint16_t flags;
    uint32_t channel;
    uint32_t length;
};

/* Decoded EXEC request. Pointers point into the payload buffer the caller owns. */
struct cdn_exec_req {
    uint32_t flags;
    uint16_t rows, cols; /* PTY size, CDN_EXEC_PTY only */
    const char *cwd;
    uint32_t argc, envc;
    const char *argv[CDN_EXEC_MAX_ARGS + 1];
    const char *envp[CDN_EXEC_MAX_ARGS + 1];
    const char *user; /* CDN_EXEC_USER only, else NULL */
};

struct cdn_exit_msg {
    int32_t exit_code; /* valid when signal == 0 */
    int32_t signal;    /* terminating signal, 0 if exited */
    uint64_t user_us, sys_us;
    uint64_t maxrss_kb;
};

enum cdn_file_op {
    CDN_FILE_WRITE = 1,   /* create/truncate path (mode), write DATA; parents are made */
    CDN_FILE_READ = 2,    /* DATA chunks of the contents, then DONE */
    CDN_FILE_STAT = 3,    /* DONE */
    CDN_FILE_LIST = 4,    /* DATA frames of entries, then DONE */
    CDN_FILE_MKDIR = 5,   /* mkdir -p */
    CDN_FILE_REMOVE = 6,  /* a file, or a directory with everything in it */
    CDN_FILE_RENAME = 7,  /* path → to (options, then to\0); the destination's parents are made */
    CDN_FILE_CHMOD = 8,   /* path's permission bits := mode (a symlink is followed, as chmod(1) does) */
    CDN_FILE_SYMLINK = 9, /* path := a symlink to `to` (options, then to\0), replacing a non-directory */
    CDN_FILE_WATCH = 10,  /* the directory's changes as DATA frames of entries (init-watch.c), within the
                           * options' window, until DONE (it went) or CANCEL */
    _CDN_FILE_OP_MAX,
};

/* FILE payload: u32 op | u32 mode | path\0 | [user\0 with CDN_FILE_AS_USER] | then, for WRITE, the
 * first bytes; for the other ops, optionally (absent: all zero) the options: u32 flags | u32 window |
 * u64 max_bytes; for RENAME and SYMLINK, the options and then the destination or the link's target:
 * to\0. With a user (as an EXEC's: name, uid, name:group, uid:gid), the operation runs with that
 * user's file system ids and groups: its permission checks are the user's, and what it makes is the
 * user's (init-user.c). */
#define CDN_FILE_OPTS    16u
#define CDN_FILE_AS_USER (1u << 16) /* in op: a user follows the path */
enum cdn_file_flags {
    CDN_FILE_NOFOLLOW = 1u << 0,  /* STAT: of a symlink in the last component itself (lstat) */
    CDN_FILE_NOREPLACE = 1u << 1, /* RENAME: an existing destination is an error (EEXIST) */
    CDN_FILE_CUT = 1u << 2,       /* READ: a file longer than max_bytes is read up to it, not refused */
    CDN_FILE_RECURSIVE = 1u << 3, /* WATCH: its subdirectories too, those made later as well */
    CDN_FILE_OWNERS = 1u << 4,    /* STAT, LIST, MKDIR, RENAME: every entry carries its owner (below) */
};
struct cdn_file_opts {
    uint32_t flags;     /* enum cdn_file_flags */
    uint32_t window;    /* READ: bytes init may send before the host's first WINDOW; 0 = no limit */
    uint64_t max_bytes; /* READ: a longer file is refused (EFBIG); 0 = no limit */
};
struct cdn_file_req {
    uint32_t op;
    uint32_t mode;
    const char *path; /* points into the payload */
    const char *to;   /* RENAME: the destination; SYMLINK: the target; into the payload; else NULL */
    const char *user; /* CDN_FILE_AS_USER's (non-empty, into the payload), else NULL; op has no flag */
    const uint8_t *data;
    size_t data_len;
    struct cdn_file_opts opts;
};

/* DONE payload and LIST entries: u32 mode | u64 size | i64 mtime (s) | name\0
 * (name: the entry's name for LIST, empty for DONE), and for a request with CDN_FILE_OWNERS then
 * u32 uid | u32 gid | owner\0 | group\0 (their names in the sandbox's /etc/passwd and /etc/group,
 * the number when it has none). WATCH entries use it too: mode S_IFDIR or S_IFREG, size the kind
 * below, mtime a rename's cookie, name relative to the watched directory. */
enum cdn_watch_kind {
    CDN_WATCH_START = 1, /* first: the watch is set */
    CDN_WATCH_CREATE = 2,
    CDN_WATCH_WRITE = 3, /* a file opened for writing was closed */
    CDN_WATCH_REMOVE = 4,
    CDN_WATCH_RENAME_FROM = 5,
    CDN_WATCH_RENAME_TO = 6,
    CDN_WATCH_CHMOD = 7,    /* its metadata changed */
    CDN_WATCH_OVERFLOW = 8, /* events were lost (a queue was full) */
};
struct cdn_file_stat {
    uint32_t mode; /* st_mode: type and permission bits */
    uint64_t size;
    int64_t mtime;
    const char *name;
    const char *owner, *group; /* CDN_FILE_OWNERS's (encode: given when not NULL), else NULL */
    uint32_t uid, gid;
};

/* Header codec: returns 0, or -EBADMSG (bad magic), -EMSGSIZE (too long). */
int cdn_frame_header_decode(const uint8_t buf[CDN_FRAME_HEADER], struct cdn_frame_header *ret);
void cdn_frame_header_encode(uint8_t buf[CDN_FRAME_HEADER], const struct cdn_frame_header *h);

/* EXEC payload: u32 flags | u32 argc | u32 envc | u16 rows | u16 cols | cwd\0 | argv\0… | env\0…
 * [| user\0 with CDN_EXEC_USER]. Encode returns the payload length written into buf (or -ENOBUFS);
 * it sets CDN_EXEC_USER itself when user is given. */
struct cdn_exec_args {
    uint32_t flags;
    uint16_t rows, cols;
    const char *cwd;
    char *const *argv; /* NULL-terminated, at least one */
    char *const *envp; /* NULL-terminated or NULL */
    const char *user;  /* NULL: the sandbox's root */
};
int cdn_exec_encode(uint8_t *buf, size_t size, const struct cdn_exec_args *a);
int cdn_exec_decode(const uint8_t *p, size_t len, struct cdn_exec_req *ret);

int cdn_file_encode(uint8_t *buf, size_t size, uint32_t op, uint32_t mode, const char *path, const void *data,
                    size_t data_len);
/* Any op but WRITE, with its options. */
int cdn_file_encode_opts(uint8_t *buf, size_t size, uint32_t op, uint32_t mode, const char *path,
                         const struct cdn_file_opts *o);
/* RENAME (from → to, flags CDN_FILE_NOREPLACE or 0) or SYMLINK (from := a link to to, flags 0). */
int cdn_file_encode_to(uint8_t *buf, size_t size, uint32_t op, const char *from, const char *to,
                       uint32_t flags);
/* A FILE payload of len bytes (from the encoders above) in buf, as user: sets CDN_FILE_AS_USER and puts
 * user\0 after the path. Returns the new length, or -ENOBUFS (-EINVAL: an empty user). */
int cdn_file_set_user(uint8_t *buf, size_t size, size_t len, const char *user);
int cdn_file_decode(const uint8_t *p, size_t len, struct cdn_file_req *ret);
/* WINDOW payload: u32 bytes (> 0). */
#define CDN_STDIN_LOW (256u << 10)
int cdn_window_decode(const uint8_t *p, size_t len, uint32_t *ret_bytes);
void cdn_window_encode(uint8_t buf[4], uint32_t bytes);
/* TCP's payload (6 bytes). decode: -EBADMSG unless port and window are non-zero. */
void cdn_tcp_open_encode(uint8_t buf[6], uint16_t port, uint32_t window);
int cdn_tcp_open_decode(const uint8_t *p, size_t len, uint16_t *ret_port, uint32_t *ret_window);
/* PROTECTED payload: u32 n (<= CDN_PROTECTED_MAX) | n x u64. Decode fills ids[0..n) (room for
 * CDN_PROTECTED_MAX); encode returns the length or -ENOBUFS. */
#define CDN_PROTECTED_MAX 16384
int cdn_protected_encode(uint8_t *buf, size_t size, const uint64_t *ids, uint32_t n);
int cdn_protected_decode(const uint8_t *p, size_t len, uint64_t *ids, uint32_t *ret_n);

/* PROTECT payload: u32 n | n patterns, each NUL-terminated, non-empty and at most
 * CDN_PROTECT_PATTERN_MAX bytes; n at most CDN_PROTECT_LIST_MAX. Decoded strings point into p. */
#define CDN_PROTECT_LIST_MAX    32
#define CDN_PROTECT_PATTERN_MAX 1024
int cdn_protect_list_encode(uint8_t *buf, size_t size, const char *const *v, size_t n);
int cdn_protect_list_decode(const uint8_t *p, size_t len, const char **v, size_t *ret_n);
/* Encodes at most one entry; returns its length or -ENOBUFS. */
int cdn_file_stat_encode(uint8_t *buf, size_t size, const struct cdn_file_stat *st);
/* Decodes the entry at p (len bytes available); returns the bytes it took. _owned: one of a request
 * with CDN_FILE_OWNERS. */
int cdn_file_stat_decode(const uint8_t *p, size_t len, struct cdn_file_stat *ret);
int cdn_file_stat_decode_owned(const uint8_t *p, size_t len, struct cdn_file_stat *ret);

int cdn_exit_encode(uint8_t *buf, size_t size, const struct cdn_exit_msg *m);

/* IDENTITY: what a VM guest gets from its host before any command — what a
 * clone of a snapshot must not share with its siblings, and where it works.
 * Wire: u64 unix time in ns, 32 seed bytes, 16 machine-id bytes, u32 address,
 * u32 gateway, u32 resolver (IPv4, 0 = no network), u8 prefix length (0-30),
 * u32 pids, u32 nofile, u32 disk_mb, u32 memory_mb (the spec's limits, which the guest applies to
 * its commands), then two NUL-terminated strings: hostname (1-64 bytes), workdir (absolute, < 256),
 * then u8 n (<= CDN_IDENTITY_PATHS) and n times: u8 kind, absolute path NUL-terminated (< 256; for
 * CDN_PATH_USER a user, not empty, without '/'). */
#define CDN_IDENTITY_SEED  32
#define CDN_IDENTITY_PATHS 32
enum cdn_identity_path_kind {
    CDN_PATH_BIND_RW = 1, /* the i-th bind (the i-th entry of the host's share): mounted at path */
    CDN_PATH_BIND_RO = 2,
    CDN_PATH_PROTECT = 3, /* a protected path (spec "protect"): the guest's agent guards it */
    CDN_PATH_SYSTEM = 4,  /* path "/": the image's system directories writable (spec writable_system) */
    CDN_PATH_USER = 5,    /* not a path: the spec's user (name, uid, name:group, uid:gid), at most one */
};
struct cdn_identity {
    uint64_t time_ns;
    uint8_t seed[CDN_IDENTITY_SEED];
    uint8_t machine_id[16];
    uint32_t ip, gateway, resolver; /* host byte order */
    uint8_t prefix;
    uint32_t pids, nofile, disk_mb, memory_mb;
    char hostname[65];
    char workdir[256];
    unsigned n_paths;
    struct {
        uint8_t kind;
        char path[256];
    } paths[CDN_IDENTITY_PATHS];
};
int cdn_identity_encode(uint8_t *buf, size_t size, const struct cdn_identity *id);
int cdn_identity_decode(const uint8_t *p, size_t len, struct cdn_identity *id);
int cdn_exit_decode(const uint8_t *p, size_t len, struct cdn_exit_msg *ret);

/* POLICY: a VM guest's init confines each command as the container tier
 * confines its init: no capabilities (bounding set empty, securebits locked),
 * no_new_privs, and these seccomp programs, the second installed first.
 * Watched denials become VIOLATION frames; with CDN_POLICY_KILL they are left
 * unanswered (the host ends the guest), else answered EPERM.
 * Wire: u8 flags, u8 0, u16 len0, u16 len1, then (len0 + len1) struct sock_filter (8 bytes each). */
#define CDN_POLICY_KILL 1u
struct cdn_policy {
    uint8_t flags;
    uint16_t len[2];
    const uint8_t *insns; /* into the decoded payload */
};
int cdn_policy_decode(const uint8_t *p, size_t len, struct cdn_policy *ret);

/* VIOLATION: u8 kind, u32 nr, u32 arch, u32 pid (the guest's), 6 x u64 args, then three
 * NUL-terminated strings: the command line (< 256), path and op (a protect's; empty otherwise).
 * SYSCALL and PROTECT come on channel 0 (VM guests); SYMLINK on the channel of the file operation
 * it refused, before that operation's ERROR (every tier). */
enum cdn_violation_kind {
    CDN_VIOLATION_MSG_SYSCALL = 1, /* a watched denial: nr, arch, args */
    CDN_VIOLATION_MSG_PROTECT = 2, /* an open of a protected path, refused: path, op ("open", "exec") */
    CDN_VIOLATION_MSG_SYMLINK = 3, /* a file operation of the API whose path led through a symlink into a
                                    * protected path, refused: path (the protected path it reached),
                                    * cmd (the path the request named), op ("read", "write", …) */
};
struct cdn_violation_msg {
    uint8_t kind;
    uint32_t nr, arch, pid;
    uint64_t args[6];
    char cmd[256];
    char path[256];
    char op[16];
};
/* USAGE: u64 memory_peak_bytes, u64 oom_kills, u64 pids_max_hits (the guest's cgroup of commands),
 * u8 disk_full (its writable disk has no space left). */
struct cdn_usage_msg {
    uint64_t memory_peak_bytes, oom_kills, pids_max_hits;
    bool disk_full;
    /* Then (absent from an older init's: now_known false) what the commands hold at the report. */
    bool now_known;
    uint64_t pids, disk_used_bytes, disk_size_bytes;
};
int cdn_usage_encode(uint8_t *buf, size_t size, const struct cdn_usage_msg *u);
int cdn_usage_decode(const uint8_t *p, size_t len, struct cdn_usage_msg *ret);

int cdn_violation_encode(uint8_t *buf, size_t size, const struct cdn_violation_msg *m);
int cdn_violation_decode(const uint8_t *p, size_t len, struct cdn_violation_msg *ret);

/* ERROR payload: i32 errno | message\0 */
int cdn_errmsg_encode(uint8_t *buf, size_t size, int errnum, const char *msg);
int cdn_errmsg_decode(const uint8_t *p, size_t len, int *ret_errno, const char **ret_msg);

/* Blocking helpers for simple peers: write one whole frame / read one whole
 * frame into buf (payload). Return payload length or negative errno; 0-length
 * EOF before a header returns -ECONNRESET. */
int cdn_frame_send(int fd, uint16_t type, uint32_t channel, const void *payload, uint32_t len);
int cdn_frame_recv(int fd, struct cdn_frame_header *h, uint8_t *buf, size_t size);
