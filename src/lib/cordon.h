/* libcordon: C client of cordond's HTTP API (docs/cordond.md).
 *
 *   cordon_client *c = cordon_client_new(NULL);          // $CORDON_SOCKET or /run/cordon/cordond.sock
 *   char *id;
 *   if (cordon_create(c, "{\"limits\": {\"memory_mb\": 256}}", &id) < 0)
 *       fprintf(stderr, "%s\n", cordon_last_error(c)->message);
 *   const char *argv[] = {"python3", "-c", "print(6*7)", NULL};
 *   struct cordon_exec_result r;
 *   cordon_exec(c, id, argv, NULL, &r);                   // r.exit_code, r.out, r.err
 *   cordon_exec_result_free(&r);
 *   cordon_delete(c, id);
 *   free(id);
 *   cordon_client_free(c);
 *
 * Every call is blocking and returns 0 (or, where said, a count) on success
 * and a negative errno on failure; when the daemon answered with an error,
 * the return is -EPROTO and cordon_last_error() holds its status, code,
 * message and field. A client is not thread-safe: one per thread. Returned
 * strings and buffers are malloc'd and owned by the caller unless noted. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CORDON_API __attribute__((visibility("default")))

typedef struct cordon_client cordon_client;

struct cordon_error {
    long status;       /* HTTP status, 0 if no answer came */
    char code[64];     /* e.g. "invalid_spec", "sandbox_not_found" */
    char field[64];    /* the field at fault, or "" */
    char message[512]; /* a sentence for humans */
};

/* socket_path NULL: $CORDON_SOCKET, else /run/cordon/cordond.sock. */
CORDON_API cordon_client *cordon_client_new(const char *socket_path);
/* TCP: url "http://HOST:PORT", token the bearer token. */
CORDON_API cordon_client *cordon_client_new_tcp(const char *url, const char *token);
CORDON_API void cordon_client_free(cordon_client *c);
/* The last failure of c (owned by c, valid until its next call). */
CORDON_API const struct cordon_error *cordon_last_error(const cordon_client *c);

/* Any request: body may be NULL. *ret_body (NUL-terminated, also when binary:
 * use *ret_len) and *ret_status on any HTTP answer; -EPROTO for >= 400. */
CORDON_API int cordon_request(cordon_client *c, const char *method, const char *path, const void *body,
                              size_t body_len, const char *content_type, long *ret_status, char **ret_body,
                              size_t *ret_len);

/* A request whose answer is NDJSON (…?follow=true): on_line(line, len, arg) for each line as it
 * comes (line NUL-terminated, without its newline); returns at the answer's end. */
CORDON_API int cordon_request_lines(cordon_client *c, const char *method, const char *path,
                                    void (*on_line)(const char *line, size_t len, void *arg), void *arg);

/* POST /v1/sandboxes/{id}/call (tier process, docs/process.md): body_json is the request
 * ({"code": "...", "input": ...}); *ret_json (free() it) the result object's JSON text. */
CORDON_API int cordon_call(cordon_client *c, const char *id, const char *body_json, char **ret_json);

/* POST /v1/sandboxes with a spec (JSON text, NULL = defaults); *ret_id is the new sandbox's id. */
CORDON_API int cordon_create(cordon_client *c, const char *spec_json, char **ret_id);
CORDON_API int cordon_delete(cordon_client *c, const char *id);
/* DELETE /v1/sandboxes?label=…: every sandbox with all of labels ("K=V", NULL-terminated, at least
 * one); *ret_n (may be NULL) how many went. */
CORDON_API int cordon_delete_labelled(cordon_client *c, const char *const *labels, size_t *ret_n);
/* PATCH /v1/sandboxes/{id}: patch_json is any of {"timeout_s": a new lifetime from now (0: none),
 * "idle_timeout_s", "labels": {"k": "v", "k2": null}}; *ret_json (may be NULL; free() it) the
 * sandbox as GET shows it. */
CORDON_API int cordon_update(cordon_client *c, const char *id, const char *patch_json, char **ret_json);

struct cordon_exec_opts {
    const char *const *env; /* "K=V", NULL-terminated, or NULL */
    const char *cwd;        /* absolute, or NULL for the sandbox's workdir */
    const void *stdin_data; /* or NULL: stdin is /dev/null */
    size_t stdin_len;
    double timeout_s; /* 0: none */
    /* A verifier step (docs/events.md): cordond first ends every other process
     * of the sandbox, runs this command alone, with read access to the
     * protected paths, and ends what it leaves behind. */
    bool verifier;
    /* With verifier: run it in a clean sibling instead (a fresh sandbox of the same spec) into
     * which these absolute paths (NULL-terminated) are copied from the sandbox; NULL: in place. */
    const char *const *verifier_copy;
    /* Run as this user of the sandbox ("name", "uid", "name:group", "uid:gid"; container tier);
     * NULL: the spec's user, or root. */
    const char *user;
};

struct cordon_exec_result {
    int exit_code; /* 128+N after signal N; 124 after the timeout */
    int signal;    /* 0 if it exited */
    bool timed_out, truncated;
    double duration_ms;
    uint8_t *out, *err; /* exact bytes, NUL-terminated for convenience */
    size_t out_len, err_len;
};

/* Run argv (NULL-terminated) to completion. -EPROTO with code "exec_failed"
 * when the command could not start. */
CORDON_API int cordon_exec(cordon_client *c, const char *id, const char *const argv[],
                           const struct cordon_exec_opts *opts, struct cordon_exec_result *ret);
CORDON_API void cordon_exec_result_free(struct cordon_exec_result *r);
/* cordon_exec as step `step` of the sandbox's trajectory (docs/trajectories.md): run once. A recorded
 * step with the same request is answered from the log (*ret_replayed true, may be NULL); another
 * request for it is -EPROTO with status 409 and code "step_mismatch" ("step_ahead",
 * "step_in_progress"). */
CORDON_API int cordon_exec_step(cordon_client *c, const char *id, const char *const argv[],
                                const struct cordon_exec_opts *opts, uint64_t step,
                                struct cordon_exec_result *ret, bool *ret_replayed);

/* Checkpoints and forks (docs/trajectories.md; a sandbox made with "checkpoints": true). Take one of the
 * sandbox's files now: its id ("ck-" and 16 hex digits) in ret_id (at least 20 bytes). */
CORDON_API int cordon_checkpoint(cordon_client *c, const char *id, char *ret_id, size_t size);
/* n new sandboxes from checkpoint (NULL: one taken now) of sandbox id, with its spec and egress policy;
 * their ids, n of them, in ret_ids[i] (each at least 16 bytes). All or none. */
CORDON_API int cordon_fork(cordon_client *c, const char *id, const char *checkpoint, unsigned n,
                           char (*ret_ids)[16]);
/* Make the sandbox's files exactly those of checkpoint (its own, or the one it was made from): its
 * processes all end and a new init starts; its trajectory goes back to the checkpoint's step. */
CORDON_API int cordon_rollback(cordon_client *c, const char *id, const char *checkpoint);

/* Start argv in the background (…/processes, docs/cordond.md): answered once it runs, with its pid in
 * the sandbox. keep_stdin: its stdin stays open for POST …/processes/{pid}/stdin. Its output, status,
 * signals and wait: the …/processes routes (cordon_request). */
CORDON_API int cordon_start(cordon_client *c, const char *id, const char *const argv[],
                            const struct cordon_exec_opts *opts, bool keep_stdin, uint32_t *ret_pid);

/* Streaming exec: on_output(stream 1 or 2, bytes, len, arg) as output comes;
 * the result (out/err left empty) at the end. */
CORDON_API int cordon_exec_stream(cordon_client *c, const char *id, const char *const argv[],
                                  const struct cordon_exec_opts *opts,
                                  void (*on_output)(int stream, const uint8_t *p, size_t len, void *arg),
                                  void *arg, struct cordon_exec_result *ret);

/* Files: path absolute or relative to the workdir. A read is refused (-EPROTO, status 413, code
 * "file_too_large") for a file longer than the daemon's max_read (256 MiB by default); a path that an
 * agent's symlink leads into a protected path, with 403 "protected_path" (docs/cordond.md). */
CORDON_API int cordon_file_write(cordon_client *c, const char *id, const char *path, const void *data,
                                 size_t len);
CORDON_API int cordon_file_read(cordon_client *c, const char *id, const char *path, uint8_t **ret_data,
                                size_t *ret_len);
/* Download path into fd (> 0), streamed: none of it is held in memory. max_bytes: refuse a longer
 * file (0: the daemon's max_read); more than that arriving anyway stops the transfer (-EFBIG).
 * *ret_len (may be NULL): the bytes written. A download cut short is -EIO. */
CORDON_API int cordon_file_read_fd(cordon_client *c, const char *id, const char *path, int fd,
                                   uint64_t max_bytes, uint64_t *ret_len);

/* A directory as one tar stream (docs/cordond.md, …/archive). Put: tar (plain or gzip'd) unpacked
 * beneath path, made if missing; every entry is checked before any is written. Get: path's tree as
 * a tar into fd, streamed; max_bytes bounds its files' bytes in all (0: the daemon's max_read),
 * refused up front with 413 "file_too_large". */
CORDON_API int cordon_archive_put(cordon_client *c, const char *id, const char *path, const void *tar,
                                  size_t len);
CORDON_API int cordon_archive_get_fd(cordon_client *c, const char *id, const char *path, int fd,
                                     uint64_t max_bytes);
/* GET …/stat: what path is (a symlink followed). */
struct cordon_file_info {
    char type[16]; /* "file", "dir", "symlink" or "other" */
    uint64_t size;
    uint32_t mode; /* the permission bits */
    int64_t mtime;
};
CORDON_API int cordon_file_stat(cordon_client *c, const char *id, const char *path,
                                struct cordon_file_info *ret);
/* POST …/move: rename from to to, within the sandbox (its parents made). A to ending in '/' receives
 * from's last component. An existing to is replaced, unless !overwrite: -EPROTO, 409 "exists". Across
 * file systems: 400 "cross_device". */
CORDON_API int cordon_file_move(cordon_client *c, const char *id, const char *from, const char *to,
                                bool overwrite);
/* POST …/chmod: path's permission bits (at most 07777); a symlink is followed. */
CORDON_API int cordon_file_chmod(cordon_client *c, const char *id, const char *path, unsigned mode);

#ifdef __cplusplus
}
#endif
