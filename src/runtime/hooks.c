/* runtime/hooks.h. */
#include "runtime/hooks.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/json-util.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

static const char *const kinds[_CDN_HOOK_MAX] = {"prestart",       "createRuntime", "createContainer",
                                                 "startContainer", "poststart",     "poststop"};

static json_t *strings_json(const struct cdn_strv *v)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < v->n; i++)
        if (json_array_append_new(a, json_string(v->v[i])) < 0)
            return json_decref(a), NULL;
    return a;
}

json_t *cdn_rt_hooks_json(const struct cdn_bundle *b)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < b->n_hooks; i++) {
        const struct cdn_bundle_hook *h = &b->hooks[i];
        json_t *list = json_object_get(o, kinds[h->kind]);
        if (!list && json_object_set_new(o, kinds[h->kind], list = json_array()) < 0)
            return json_decref(o), NULL;
        json_t *one = json_pack("{s:s, s:o, s:o, s:i}", "path", h->path, "args", strings_json(&h->args),
                                "env", strings_json(&h->env), "timeout", h->timeout_s);
        if (!one || json_array_append_new(list, one) < 0)
            return json_decref(o), NULL;
    }
    return o;
}

char *cdn_rt_hook_state(const char *id, const char *status, pid_t pid, const json_t *doc)
{
    _cleanup_json_ json_t *o =
        json_pack("{s:s, s:s, s:s, s:I, s:O?, s:O?}", "ociVersion", "1.1.0", "id", id, "status", status,
                  "pid", (json_int_t) pid, "bundle", json_object_get(doc, "bundle"), "annotations",
                  json_object_get(doc, "annotations"));
    return o ? json_dumps(o, JSON_COMPACT) : NULL;
}

/* A list of strings from JSON as a NULL-terminated vector (fallback: one entry, when empty). */
static char **vector(const json_t *a, const char *fallback)
{
    size_t n = json_array_size(a), i;
    char **v = calloc(n + 2, sizeof *v);
    const json_t *s;
    if (!v)
        return NULL;
    json_array_foreach(a, i, s) v[i] = (char *) json_string_value(s);
    if (n == 0 && fallback)
        v[0] = (char *) fallback;
    return v;
}

_noreturn_ static void run_child(int in, const char *path, char **argv, char **envp)
{
    if (setpgid(0, 0) < 0 || dup2(in, 0) < 0 || syscall(SYS_close_range, 3, ~0U, 0) < 0)
        _exit(127);
    (void) signal(SIGPIPE, SIG_DFL);
    execve(path, argv, envp);
    _exit(errno == ENOENT ? 127 : 126);
}

/* Wait for pid (pidfd) at most timeout_s seconds (0: no bound); past it, kill it. Its wait status, or
 * -ETIMEDOUT. */
static int wait_bounded(pid_t pid, int pidfd, int timeout_s)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    int r;
    while ((r = poll(&p, 1, timeout_s > 0 ? timeout_s * 1000 : -1)) < 0 && errno == EINTR)
        ;
    if (r == 0) /* and what it started: its process group (run_child) */
        (void) syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0), (void) kill(-pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -errno;
    return r == 0 ? -ETIMEDOUT : status;
}

int cdn_rt_wait_hook(pid_t pid, int timeout, const char *field, struct cdn_error *err)
{
    _cleanup_close_ int pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
    int status = pidfd >= 0 ? wait_bounded(pid, pidfd, timeout) : -errno;
    if (pidfd < 0)
        (void) kill(pid, SIGKILL), (void) waitpid(pid, NULL, 0);
    if (status == -ETIMEDOUT)
        return cdn_error_field(err, ETIMEDOUT, field, "%s: did not end within its timeout of %d s: killed",
                               field, timeout);
    if (status < 0)
        return cdn_error_field(err, -status, field, "%s: wait: %s", field, strerror(-status));
    if (WIFSIGNALED(status))
        return cdn_error_field(err, EIO, field, "%s: killed by signal %d", field, WTERMSIG(status));
    if (WEXITSTATUS(status) != 0)
        return cdn_error_field(err, EIO, field, "%s: exited %d%s", field, WEXITSTATUS(status),
                               WEXITSTATUS(status) == 127 ? " (not found)" : "");
    return 0;
}

static int run_one(const json_t *h, const char *field, const char *state, struct cdn_error *err)
{
    const char *path = json_string_value(json_object_get(h, "path"));
    int timeout = (int) json_integer_value(json_object_get(h, "timeout"));
    _cleanup_free_ char **argv = vector(json_object_get(h, "args"), path);
    _cleanup_free_ char **envp = vector(json_object_get(h, "env"), NULL);
    if (!path || !argv || !envp)
        return cdn_error_field(err, EINVAL, field, "%s: no path", field);
    _cleanup_close_pair_ int sv[2] = {-EBADF, -EBADF};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return cdn_error_field(err, errno, field, "%s: socketpair: %m", field);
    pid_t pid = fork();
    if (pid < 0)
        return cdn_error_field(err, errno, field, "%s: fork: %m", field);
    if (pid == 0)
        run_child(sv[1], path, argv, envp);
    sv[1] = safe_close(sv[1]);
    /* The state, then EOF; a hook that does not read it may end first (MSG_NOSIGNAL: no SIGPIPE). */
    (void) send(sv[0], state, strlen(state), MSG_NOSIGNAL);
    (void) shutdown(sv[0], SHUT_WR);
    char what[600];
    (void) snprintf(what, sizeof what, "%s (%.500s)", field, path);
    int r = cdn_rt_wait_hook(pid, timeout, what, err);
    if (r < 0)
        (void) snprintf(err->field, sizeof err->field, "%s", field);
    return r;
}

int cdn_rt_hooks_run(const json_t *hooks, const char *kind, const char *state, struct cdn_error *err)
{
    const json_t *list = json_object_get(hooks, kind), *h;
    size_t i;
    json_array_foreach(list, i, h)
    {
        char field[64];
        (void) snprintf(field, sizeof field, "hooks.%s[%zu]", kind, i);
        int r = run_one(h, field, state, err);
        if (r < 0)
            return r;
    }
    return 0;
}
