/* cordond's HTTP layer (api*.c): routes, request bodies and JSON answers over evhttp, on top of the
 * sandbox registry (registry.h), which it asks for boxes and hears from (cdn_api_box_listener). */
#pragma once

#include <event2/buffer.h>
#include <event2/http.h>

#include "registry.h"
#include "shared/macro.h"

/* A handler's own evbuffer, freed at the end of its scope (evhttp copies or drains what it sends). */
static inline void evbuffer_freep(struct evbuffer **b)
{
    if (*b)
        evbuffer_free(*b);
}
#define _cleanup_evbuffer_ _cleanup_(evbuffer_freep)

/* ---- HTTP (api.c, api-exec.c, api-tcp.c) ---- */
int cdn_api_start(void);
/* The TCP listener's gate (api-tcp.c): each connection authenticated on its first header block. */
void cdn_api_tcp_gate(struct evhttp *http);
unsigned cdn_api_tcp_unauthenticated(void); /* connections waiting at the gate */
unsigned cdn_api_tcp_connections(void);     /* TCP connections open */
void cdn_api_reply_json(struct evhttp_request *req, int status, json_t *body); /* steals body */
void cdn_api_reply_error(struct evhttp_request *req, int status, const char *code, const char *field,
                         const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* {"error": {"code", "message", "field"?}} */
json_t *cdn_api_error_json(const char *code, const char *field, const char *msg);
void cdn_api_reply_cdn_error(struct evhttp_request *req, int status, const char *code,
                             const struct cdn_error *e);
void cdn_api_exec(struct evhttp_request *req, struct box *b);
struct exec_args;
/* Run a (parsed) exec on b and answer req; its args are moved out. For a clean sibling's step
 * (api-sibling.c) owner is the sandbox it verifies: the exec event, the alerts and the count are
 * its; done(done_arg) runs once req is answered (also when the exec could not start). */
void cdn_api_exec_begin(struct evhttp_request *req, struct box *b, struct exec_args *args, struct box *owner,
                        void (*done)(void *arg), void *done_arg);
/* POST …/exec with "verifier": {"mode": "sibling", "copy": […]} (api-sibling.c): args moved out. */
void cdn_api_sibling_start(struct evhttp_request *req, struct box *b, struct exec_args *args);
void cdn_api_call(struct evhttp_request *req, struct box *b);      /* api-call.c: the process tier */
void cdn_api_oci_start(struct evhttp_request *req, struct box *b); /* api-oci.c: cordon-runtime's start */
/* Whether req (the one being routed now) came over the TCP listener, not the unix socket. */
bool cdn_api_over_tcp(struct evhttp_request *req);
void cdn_api_oci_listener(struct evhttp_request *req, struct box *b); /* api-oci.c: …and its exec */
void cdn_api_throttle_end(struct box *b);                             /* the box is going */
/* One NDJSON line (body taken) as a chunk of a streaming reply. */
void cdn_api_send_line(struct evhttp_request *req, json_t *body);
void cdn_api_stream_timeout(struct evhttp_request *req); /* after evhttp_send_reply_start */
/* 409 (answered) unless the box is running. */
bool cdn_api_box_usable(struct evhttp_request *req, struct box *b);
void cdn_api_files(struct evhttp_request *req, struct box *b); /* api-files.c: files, ls, stat, mkdir */
void cdn_api_ls(struct evhttp_request *req, struct box *b);
void cdn_api_stat(struct evhttp_request *req, struct box *b);
void cdn_api_mkdir(struct evhttp_request *req, struct box *b);
void cdn_api_move(struct evhttp_request *req, struct box *b);
void cdn_api_chmod(struct evhttp_request *req, struct box *b);
void cdn_api_watch(struct evhttp_request *req, struct box *b); /* GET …/watch?path=DIR[&recursive=] */
/* The same operations answered in another surface's shapes (e2b-files.c): a view. A download's
 * bytes stream as they do on /v1; the rest goes to the view, req still open:
 * - done: the operation succeeded; st is the path's (a move's: the destination's), entries a
 *   LIST's (/v1's JSON, {"name", "type", "size", "mode", "mtime"} each, and "name_b64", the exact
 *   bytes, when the name is not UTF-8; borrowed).
 * - failed: it did not (status: /v1's HTTP status, errnum, msg), or the sandbox's agent broke
 *   (errnum 0). An agent's symlink into a protected path is counted as on /v1.
 * - watch_begin: a watch is set (its first reply bytes); watch_event: one change (kind: enum
 *   cdn_watch_kind, name relative to the watched directory) into out; watch_end: the directory went.
 * - keepalive: every 30 s of a watch, into out.
 * - release: the operation is over (always last, whether or not any of the others ran; a client
 *   that left hears none of them). */
struct cdn_file_stat;
struct cdn_file_view {
    void (*done)(struct evhttp_request *req, void *arg, const struct cdn_file_stat *st, json_t *entries);
    void (*failed)(struct evhttp_request *req, void *arg, int status, int errnum, const char *msg);
    void (*watch_begin)(struct evhttp_request *req, void *arg);
    void (*watch_event)(void *arg, struct evbuffer *out, int kind, const char *name, bool dir);
    void (*watch_end)(struct evhttp_request *req, void *arg);
    void (*keepalive)(void *arg, struct evbuffer *out);
    void (*release)(void *arg);
};
struct file_args;
/* Start operation op (enum cdn_file_op; mode: a write's or mkdir's) of args a on b for req,
 * answered through view (arg its); a write's bytes are taken from body (NULL: req's own). 0, or
 * -errno with nothing started (the caller answers; release is not called). */
int cdn_api_file_start(struct evhttp_request *req, struct box *b, int op, uint32_t mode,
                       const struct file_args *a, const struct cdn_file_view *view, void *arg,
                       struct evbuffer *body);
void cdn_api_archive(struct evhttp_request *req, struct box *b); /* api-archive.c: PUT|GET …/archive */
void cdn_api_archives_end(struct box *b); /* the box goes: its archives under way end */
/* api-proc.c: background processes. start: POST …/exec with "background" (a is the parsed body);
 * procs: …/processes and what is below it (sub: the rest after "processes/", "" for the list);
 * procs_free: the box goes (its records, followers and waiters). */
struct exec_args;
void cdn_api_proc_start(struct evhttp_request *req, struct box *b, struct exec_args *a);
/* The same processes for E2B's process service (e2b-process.c): a sink hears one of them — start
 * (its pid, once it runs), its output (stream 1 stdout, 2 stderr; pty: one stream of a terminal),
 * and its end, after which it is off the process (started false: it never ran, why says so; else
 * why is set when it did not exit by itself: the sandbox ended, its record went). */
struct cdn_proc_sink {
    void (*start)(struct cdn_proc_sink *s, uint32_t pid);
    void (*output)(struct cdn_proc_sink *s, uint8_t stream, bool pty, const uint8_t *d, size_t n);
    void (*end)(struct cdn_proc_sink *s, bool started, int exit_code, int signal, const char *why);
    struct bproc *p; /* the process heard, NULL once off it */
    LIST_ENTRY(cdn_proc_sink) link;
};
/* Start a's command as a background process heard by s: 0, or -EAGAIN (too many), -EINVAL (too
 * big), -EIO, with msg saying why. */
int cdn_api_proc_spawn(struct box *b, struct exec_args *a, struct cdn_proc_sink *s, char *msg, size_t size);
/* s hears running process pid from now (start at once): 0, -ENOENT, or -EMFILE (8 hear it already).
 * detach: s hears no more. sink_signal: a signal to s's process (-ESRCH: none runs). */
int cdn_api_proc_sink_signal(struct cdn_proc_sink *s, int sig);
int cdn_api_proc_attach(struct box *b, uint32_t pid, struct cdn_proc_sink *s);
void cdn_api_proc_detach(struct cdn_proc_sink *s);
/* To running process pid: a signal, stdin bytes (eof: then closed; -EPIPE: closed already, -EBUSY: a
 * /v1 write under way, -EAGAIN: over 1 MiB, or as much waits for init already), a terminal's size
 * (-ENOTTY: none). -ENOENT: no such process running. */
int cdn_api_proc_signal(struct box *b, uint32_t pid, int sig);
int cdn_api_proc_input(struct box *b, uint32_t pid, const uint8_t *d, size_t n, bool eof);
int cdn_api_proc_resize(struct box *b, uint32_t pid, uint16_t rows, uint16_t cols);
/* [{"pid", "argv", "pty"}] of those running, oldest first. */
json_t *cdn_api_proc_list(struct box *b);
void cdn_api_procs(struct evhttp_request *req, struct box *b, const char *sub);
void cdn_api_procs_free(struct box *b);
/* api-session.c: shell sessions. sessions: …/sessions and what is below it (sub as procs');
 * sessions_free: the box goes. */
void cdn_api_sessions(struct evhttp_request *req, struct box *b, const char *sub);
void cdn_api_sessions_free(struct box *b);
/* api-ports.c: …/ports/{port}[/…] (sub: what follows "ports/", still URL-encoded); ports_end: the
 * box goes (its connections close). */
void cdn_api_ports(struct evhttp_request *req, struct box *b, const char *sub);
void cdn_api_ports_end(struct box *b);
/* api-exec.c, for api-proc.c: an EXEC of a on r's new channel (more_flags: CDN_EXEC_PID admits STARTED
 * on it); the argv of an event, bounded. */
struct agent_req;
int cdn_api_exec_send(struct box *b, struct agent_req *req, const struct exec_args *a, bool verifier,
                      uint32_t more_flags);
json_t *cdn_api_argv_json(char *const *argv, bool *cut);
/* Output bytes as a JSON string: UTF-8, invalid sequences replaced, or base64 (b64). */
json_t *cdn_api_bytes_json(const uint8_t *p, size_t n, bool b64);
void cdn_api_events(struct evhttp_request *req, struct box *b);
/* /v1/images and below (api-images.c): path is the request's, still URL-encoded. */
void cdn_api_images(struct evhttp_request *req, const char *path);
/* api-checkpoint.c: POST|GET …/checkpoints, POST …/fork, GET /v1/checkpoints[/{ck}], DELETE of one */
void cdn_api_checkpoints(struct evhttp_request *req, struct box *b);
void cdn_api_fork(struct evhttp_request *req, struct box *b);
void cdn_api_rollback(struct evhttp_request *req, struct box *b);
/* POST /v1/trajectories/{id}/resume: its running sandbox (200), else a new one from its newest
 * checkpoint, the trajectory back at that checkpoint's step (201). */
void cdn_api_traj_resume(struct evhttp_request *req, const char *id);
void cdn_api_checkpoint_route(struct evhttp_request *req, const char *rest);
/* A create from spec.checkpoint: b's layer will be a clone of it (b->sb.layer_from_fd, owned by the
 * caller once set). 0, or -1 and err naming the field "checkpoint". */
int cdn_checkpoint_prepare(struct box *b, struct cdn_error *err);
/* b's layer file system held by a mount of cordond's own (b->layer_mnt, made now if need be): while
 * it is open, the end of the sandbox's mount namespace does not unmount the layer. -1 if b keeps no
 * checkpoints or its layer cannot be had. */
int cdn_checkpoint_layer_mount(struct box *b);
/* A step of b's trajectory ran and is recorded: with checkpoints "every_step", a checkpoint of b is
 * taken once the step's answer is out (a failure is b's event "checkpoint_failed"). */
void cdn_checkpoint_after_step(struct box *b);
/* A step of b's trajectory begins: the checkpoint still due after the last one is taken now. */
void cdn_checkpoint_before_step(struct box *b);
/* At start, after the adoptions: the layer names of sandboxes that are gone are dropped, and the
 * adopted ones' layers thawed (a cordond that died mid-checkpoint). */
void cdn_checkpoint_sweep(void);
void cdn_api_events_push(struct box *b, const char *line, size_t len);
void cdn_api_events_end(struct box *b); /* the box is going: end every follow */
/* The sibling runs; b (either side of a step) has stopped or is being freed (api-sibling.c). */
void cdn_sibling_box_ready(struct box *b);
void cdn_sibling_box_gone(struct box *b, const char *reason);
/* The registry's listener: events to followers, their streams ended, throttles let go. */
extern const struct cdn_box_listener cdn_api_box_listener;
