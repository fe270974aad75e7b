/* cordon-runtime's exec (container.h), and the startContainer hooks, which run as execs do: a process
 * started from the host inside a running container (tiers/container/join.c), the engine's to reap. */
#include "runtime/container-internal.h"
#include "runtime/container.h"
#include "runtime/attach.h"
#include "runtime/console.h"
#include "runtime/hooks.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/json-util.h"
#include "shared/fd-util.h"
#include "shared/macro.h"
#include "tiers/container/join.h"

static json_t *read_json_file(const char *path, const char *what, struct cdn_error *err)
{
    json_error_t je;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &je);
    if (!o)
        cdn_error_set(err, EINVAL, "%s %s: %s (line %d)", what, path, je.text, je.line);
    return o;
}

/* The process object of the exec, from --process, or from the bundle's own with the command line's
 * args, cwd, env and user. */
static json_t *exec_process(const json_t *bundle_process, const struct cdn_rt_exec_opts *o,
                            struct cdn_error *err)
{
    if (o->process_path)
        return read_json_file(o->process_path, "--process", err);
    _cleanup_json_ json_t *p = json_deep_copy(bundle_process);
    json_t *args = json_array(), *env = json_object_get(p, "env");
    if (!p || !args)
        return json_decref(args), cdn_error_set(err, ENOMEM, "out of memory"), NULL;
    (void) json_object_set_new(p, "args", args);
    for (size_t i = 0; o->args && o->args[i]; i++)
        (void) json_array_append_new(args, json_string(o->args[i]));
    for (size_t i = 0; o->env && i < o->env->n && json_is_array(env); i++)
        (void) json_array_append_new(env, json_string(o->env->v[i]));
    if (o->cwd)
        (void) json_object_set_new(p, "cwd", json_string(o->cwd));
    if (o->user) {
        unsigned uid, gid;
        int n = sscanf(o->user, "%u:%u", &uid, &gid);
        if (n < 1)
            return cdn_error_field(err, EINVAL, "--user", "--user '%s': uid[:gid] as numbers", o->user), NULL;
        (void) json_object_set_new(
            p, "user",
            json_pack("{s:I, s:I}", "uid", (json_int_t) uid, "gid", (json_int_t) (n == 2 ? gid : uid)));
    }
    (void) json_object_set_new(p, "terminal", json_boolean(o->tty));
    return json_incref(p);
}

/* The bundle's config.json with the exec's process in it, parsed as create parsed the bundle: the
 * same refusals and reductions, and the spec whose Landlock ruleset and rlimits confine the process. */
static int exec_bundle(const struct rt_state *s, const struct cdn_rt_exec_opts *o, struct cdn_bundle *b,
                       struct cdn_error *err)
{
    const char *dir = json_string_value(json_object_get(s->doc, "bundle"));
    char path[4200];
    (void) snprintf(path, sizeof path, "%s/config.json", dir ? dir : "");
    _cleanup_json_ json_t *config = read_json_file(path, "the bundle's", err);
    if (!config)
        return -EINVAL;
    json_t *p = exec_process(json_object_get(config, "process"), o, err);
    if (!p)
        return -EINVAL;
    (void) json_object_set_new(config, "process", p);
    _cleanup_free_ char *text = json_dumps(config, JSON_COMPACT);
    if (!text)
        return cdn_error_set(err, ENOMEM, "out of memory");
    int r = cdn_bundle_parse(text, strlen(text), dir, b, err);
    if (r >= 0 && b->terminal && !o->console_socket)
        r = cdn_error_field(err, EINVAL, "process.terminal",
                            "process.terminal: a terminal needs --console-socket");
    return r;
}

static int exec_failed(const char *arg0, int r, struct cdn_error *err)
{
    /* The engines' words: podman maps them to exit statuses 127 and 126. */
    if (r == -ENOENT && !strchr(arg0, '/'))
        return cdn_error_set(err, ENOENT, "exec: \"%s\": executable file not found in $PATH", arg0);
    if (r == -ENOENT)
        return cdn_error_set(err, ENOENT, "exec: \"%s\": stat: no such file or directory", arg0);
    if (r == -EACCES)
        return cdn_error_set(err, EACCES, "exec: \"%s\": permission denied", arg0);
    return r;
}

static int hand_to_cordond(pid_t pid, int fd, void *arg, struct cdn_error *err)
{
    return cdn_rt_hand_listener(arg, pid, fd, err);
}

/* The process of an exec, started: its pid, ours to reap unless o->detach. */
static int exec_start(const char *root, const char *id, const struct cdn_rt_exec_opts *o, pid_t *ret_pid,
                      struct cdn_error *err)
{
    _cleanup_(rt_state_free) struct rt_state s = {0};
    int r = rt_load_alive(root, id, &s, EINVAL, "cannot exec in a stopped container", err);
    if (r < 0)
        return r;
    struct cdn_bundle b = {0};
    if ((r = exec_bundle(&s, o, &b, err)) < 0) {
        cdn_bundle_free(&b);
        return r;
    }
    struct cdn_cgroup cg;
    rt_cgroup(&s, &cg);
    /* Attached to cordond, the process hands it its seccomp listener before it execs, as init did at
     * create; else no host answers its notifications, and its filter denies outright. */
    const char *box = json_string_value(json_object_get(s.doc, "cordond"));
    if (!box)
        (void) setenv("CORDON_MONITOR", "off", 1);
    /* Waiting for it ourselves: its parent exits, so it must come to us, not to the engine. */
    if (!o->detach && prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        r = cdn_error_set(err, errno, "PR_SET_CHILD_SUBREAPER: %m");
    struct cdn_container_join j = {.init_pid = s.pid,
                                   .cgroup_name = cg.name,
                                   .spec = &b.spec,
                                   .argv = b.args.v,
                                   .envp = b.env.v,
                                   .cwd = b.spec.workdir,
                                   .uid = b.uid,
                                   .gid = b.gid};
    int tty = r >= 0 && b.terminal ? cdn_rt_console(o->console_socket, err) : -EBADF;
    if (b.terminal && tty < 0)
        r = tty;
    j.tty_fd = tty;
    struct rlimit rlimits[RLIM_NLIMITS];
    rt_bundle_rlimits(&b, rlimits);
    j.rlimits = rlimits;
    j.seccomp_extra = b.seccomp_insns;
    j.seccomp_extra_len = b.seccomp_len;
    if (box) {
        j.hand = hand_to_cordond;
        j.hand_arg = (void *) box;
    }
    pid_t pid = r < 0 ? r : cdn_container_join(&j, err);
    (void) safe_close(tty);
    if (r >= 0 && pid < 0)
        r = exec_failed(b.args.v[0], pid, err);
    cdn_bundle_free(&b);
    if (r < 0)
        return r;
    if (o->pid_file && (r = rt_write_pid_file(o->pid_file, pid, err)) < 0)
        return r;
    *ret_pid = pid;
    return 0;
}

int cdn_rt_exec(const char *root, const char *id, const struct cdn_rt_exec_opts *o, int *ret_status,
                struct cdn_error *err)
{
    pid_t pid;
    int r = exec_start(root, id, o, &pid, err);
    if (r < 0 || o->detach)
        return r;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return cdn_error_set(err, errno, "wait for the process: %m");
    *ret_status = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    return 0;
}

/* The startContainer hooks: each run inside the container as an exec is (confined as its commands),
 * with the state on its stdin, and waited for within its timeout. */
int rt_start_hooks(const char *root, const char *id, const struct rt_state *s, struct cdn_error *err)
{
    const json_t *list = json_object_get(json_object_get(s->doc, "hooks"), "startContainer"), *h;
    if (!json_array_size(list))
        return 0;
    _cleanup_free_ char *state = cdn_rt_hook_state(id, "created", s->pid, s->doc);
    if (!state)
        return cdn_error_set(err, ENOMEM, "out of memory");
    size_t i;
    json_array_foreach(list, i, h)
    {
        char field[64];
        (void) snprintf(field, sizeof field, "hooks.startContainer[%zu]", i);
        const json_t *args = json_object_get(h, "args"), *v;
        struct cdn_strv argv = {0}, env = {0};
        size_t k;
        int r = cdn_strv_push(&argv, json_string_value(json_object_get(h, "path")));
        json_array_foreach(args, k, v) if (k > 0 && r >= 0) r = cdn_strv_push(&argv, json_string_value(v));
        json_array_foreach(json_object_get(h, "env"), k, v) if (r >= 0) r =
            cdn_strv_push(&env, json_string_value(v));
        /* Its stdin is ours for the while: the state, then EOF. */
        _cleanup_close_pair_ int sv[2] = {-EBADF, -EBADF};
        _cleanup_close_ int saved = r < 0 ? -EBADF : fcntl(0, F_DUPFD_CLOEXEC, 3);
        pid_t pid = -1;
        if (r < 0)
            r = cdn_error_set(err, ENOMEM, "out of memory");
        else if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 || dup2(sv[1], 0) < 0)
            r = cdn_error_field(err, errno, field, "%s: its stdin: %m", field);
        else
            r = exec_start(root, id, &(struct cdn_rt_exec_opts){.args = argv.v, .env = &env}, &pid, err);
        if (saved >= 0)
            (void) dup2(saved, 0);
        cdn_strv_free(&argv);
        cdn_strv_free(&env);
        if (r < 0)
            return err->field[0] ? r : cdn_error_prefix(err, r, "%s", field);
        sv[1] = safe_close(sv[1]);
        (void) send(sv[0], state, strlen(state), MSG_NOSIGNAL);
        (void) shutdown(sv[0], SHUT_WR);
        if ((r = cdn_rt_wait_hook(pid, (int) json_integer_value(json_object_get(h, "timeout")), field, err)) <
            0)
            return r;
    }
    return 0;
}
