/* The exec request body (docs/cordond.md): cmd, env, cwd, user, stdin or
 * stdin_b64, timeout_s, stream, encoding, pty, background, keep_stdin, step. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/spec.h"
#include "shared/error.h"

/* Paths one sibling step may copy. */
#define EXEC_COPY_MAX 16

/* Largest stdin of one exec: what cordon-init keeps for a command that has
 * not read it yet (src/agent/init-exec.c STDIN_MAX). */
#define EXEC_STDIN_MAX (8u << 20)

struct exec_args {
    /* owned; cdn_exec_args_free() releases them, also after a failed parse */
    struct cdn_strv argv, env;
    char *cwd;  /* absolute (a relative one is joined to the workdir); NULL: the workdir */
    char *user; /* "name", "uid", "name:group", "uid:gid" (shared/user.h); NULL: the spec's */
    uint8_t *stdin_data;
    long stdin_len;
    bool has_stdin, stream, b64, pty;
    bool background, keep_stdin; /* api-proc.c: started and answered at once; its stdin left open */
    /* A verifier step: runs alone, may read protected paths (api-exec.c); in place, or in a clean
     * sibling into which copy (absolute paths) is copied from the sandbox (api-sibling.c). */
    enum { EXEC_PLAIN, EXEC_VERIFIER_IN_PLACE, EXEC_VERIFIER_SIBLING } verifier;
    struct cdn_strv copy;
    double timeout_s;
    uint16_t rows, cols;
    bool has_step; /* "step": k, the trajectory's step this exec is (trajectory.h) */
    uint64_t step;
};

/* Longest cwd, once joined to the workdir (as file-args.h's path). */
#define EXEC_CWD_MAX 4096

/* Parse body (len bytes) into a, which must be zeroed. A relative "cwd" is
 * joined to workdir (the sandbox's spec.workdir), as the files API does with
 * a relative path. -EBADMSG: not JSON; -EINVAL: a field is wrong (e names
 * it); -ENAMETOOLONG: cwd (named); -ENOMEM. */
int cdn_exec_args_parse(const char *body, size_t len, const char *workdir, struct exec_args *a,
                        struct cdn_error *e);
void cdn_exec_args_free(struct exec_args *a);

/* Shell sessions (api-session.c), in the same struct. Open (run false): {"shell", "cwd", "env",
 * "user"}, all optional (an empty body is {}); argv holds the shell, if given (a name found in PATH
 * or an absolute path). Run (run true): {"cmd": "…", "timeout_s", "stdin" | "stdin_b64",
 * "encoding"}; argv holds the command line. Errors as cdn_exec_args_parse's. */
#define SESSION_CMD_MAX   (256u << 10)
#define SESSION_STDIN_MAX (256u << 10)
#define SESSION_SHELL_MAX 255u
int cdn_session_args_parse(const char *body, size_t len, const char *workdir, bool run, struct exec_args *a,
                           struct cdn_error *e);
