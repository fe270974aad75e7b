/* cordon-runtime's containers (container.h): create, start, state, kill, delete.
 *
 * Runs as root on the host, one call per engine command. Trusts the engine and its bundle for what
 * cordon grants (bundle.c refuses the rest); trusts nothing inside the container: init's frames are
 * decoded as hostile, and what a container's processes can change (their /proc entries, their pids)
 * is checked against what create recorded (init's start time) before a signal is sent. */
#include "runtime/container.h"
#include "runtime/container-internal.h"
#include "runtime/attach.h"
#include "runtime/console.h"
#include "runtime/hooks.h"
#include "runtime/layers.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "confine/slot.h"
#include "core/json-util.h"
#include "core/paths.h"
#include "core/sandbox.h"
#include "proto/frame.h"
#include "shared/fd-util.h"
#include "shared/macro.h"
#include "tiers/container/join.h"
#include "tiers/tier.h"

#define STATE_MAX (64u << 10)

void (*cdn_rt_warn)(const char *msg);

static void warn(const struct cdn_error *e)
{
    if (cdn_rt_warn)
        cdn_rt_warn(e->msg);
}

void rt_state_free(struct rt_state *s)
{
    json_decref(s->doc);
    s->doc = NULL;
}

static int dir_of(char *buf, size_t size, const char *root, const char *id, const char *file)
{
    int n = snprintf(buf, size, "%s/%s%s%s", root, id, file ? "/" : "", file ? file : "");
    return n < 0 || (size_t) n >= size ? -ENAMETOOLONG : 0;
}

bool cdn_rt_exists(const char *root, const char *id)
{
    char p[4096];
    struct stat st;
    return dir_of(p, sizeof p, root, id, NULL) == 0 && lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Field 22 of /proc/PID/stat (start time, clock ticks since boot) and its state letter: what tells
 * this init from a later process given the same pid. comm (field 2) may hold spaces and ')'. */
static int proc_start(pid_t pid, unsigned long long *ret_start, char *ret_state)
{
    char path[64], buf[1024];
    (void) snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (n <= 0)
        return -ESRCH;
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    char state;
    unsigned long long start;
    if (!p || sscanf(p + 2, "%c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
                     &state, &start) != 2)
        return -EIO;
    *ret_start = start;
    *ret_state = state;
    return 0;
}

static int load(const char *root, const char *id, struct rt_state *ret, struct cdn_error *err)
{
    char path[4096];
    *ret = (struct rt_state){.pid = 0, .slot = -1};
    if (dir_of(path, sizeof path, root, id, "state.json") < 0 || !cdn_rt_exists(root, id))
        return cdn_error_set(err, ENOENT, "container \"%s\" does not exist", id);
    json_error_t je;
    ret->doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    json_int_t pid = 0, slot = -1;
    const char *start = NULL;
    if (!ret->doc ||
        json_unpack(ret->doc, "{s:I, s:s, s:I}", "pid", &pid, "init_start", &start, "slot", &slot) < 0 ||
        pid <= 0 || slot < 0 || slot >= CDN_SLOT_COUNT) {
        rt_state_free(ret);
        return cdn_error_set(err, EIO, "container \"%s\": its state %s cannot be read (%s)", id, path,
                             ret->doc ? "fields" : je.text);
    }
    ret->pid = (pid_t) pid;
    ret->slot = (int) slot;
    ret->starttime = strtoull(start, NULL, 10);
    unsigned long long now;
    char st;
    ret->alive = proc_start(ret->pid, &now, &st) == 0 && now == ret->starttime && st != 'Z' && st != 'X';
    char started[4096];
    ret->started = dir_of(started, sizeof started, root, id, "started") == 0 && access(started, F_OK) == 0;
    ret->paused = dir_of(started, sizeof started, root, id, "paused") == 0 && access(started, F_OK) == 0;
    return 0;
}

/* load(), and the container's init must be alive: else -errnum with why (runc's words). */
int rt_load_alive(const char *root, const char *id, struct rt_state *ret, int errnum, const char *why,
                  struct cdn_error *err)
{
    int r = load(root, id, ret, err);
    if (r >= 0 && !ret->alive)
        r = cdn_error_set(err, errnum, "%s", why);
    return r;
}

static const char *status_of(const struct rt_state *s)
{
    return !s->alive ? "stopped" : s->paused ? "paused" : s->started ? "running" : "created";
}

/* ---- create ---- */

/* The listening socket init takes connections on: <root>/<id>/s, root's alone (the directory is
 * 0700): whoever connects can run commands in the container. */
static int listen_at(const char *root, const char *id, struct cdn_error *err)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char path[4096];
    if (dir_of(path, sizeof path, root, id, "s") < 0 || strlen(path) >= sizeof a.sun_path)
        return cdn_error_set(err, ENAMETOOLONG, "--root: %s/%s/s is too long for a socket path", root, id);
    memcpy(a.sun_path, path, strlen(path) + 1);
    _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *) &a, sizeof a) < 0 || listen(fd, 8) < 0)
        return cdn_error_set(err, errno, "socket %s: %m", path);
    return TAKE_FD(fd);
}

/* state.json, written whole then renamed: a reader sees the old file or the new one. */
static int write_state(const char *root, const char *id, json_t *doc, struct cdn_error *err)
{
    char path[4096], tmp[4200];
    if (dir_of(path, sizeof path, root, id, "state.json") < 0)
        return cdn_error_set(err, ENAMETOOLONG, "state path too long");
    (void) snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (json_dump_file(doc, tmp, JSON_COMPACT) < 0 || rename(tmp, path) < 0)
        return cdn_error_set(err, errno ?: EIO, "write %s: %m", path);
    return 0;
}

int rt_write_pid_file(const char *path, pid_t pid, struct cdn_error *err)
{
    char tmp[4200], text[32];
    (void) snprintf(tmp, sizeof tmp, "%s.cordon-tmp", path);
    (void) snprintf(text, sizeof text, "%d", (int) pid);
    _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 || cdn_write_all(fd, text, strlen(text)) < 0 || rename(tmp, path) < 0)
        return cdn_error_set(err, errno, "--pid-file %s: %m", path);
    return 0;
}

/* What the sandbox is asked for beyond the bundle's spec: its root is the bundle's, in place; no
 * writable layer on disk (nothing but /proc's masks goes in the scratch). */
static void adjust_spec(struct cdn_bundle *b)
{
    b->spec.tier = CDN_TIER_CONTAINER;
    b->spec.disk = CDN_DISK_MEMORY;
    b->spec.limits.timeout_ms = 0;
}

/* The setup child's report: EOF once cordon-init runs, a whole struct cdn_error if setup failed. */
static int wait_setup(struct cdn_sandbox *sb, struct cdn_error *err)
{
    struct cdn_error child = {0};
    ssize_t n = cdn_read_full(sb->setup_fd, &child, sizeof child);
    if (n == (ssize_t) sizeof child) {
        child.msg[sizeof child.msg - 1] = child.field[sizeof child.field - 1] = 0;
        *err = child;
        return -(child.errnum ?: EIO);
    }
    return 0;
}

/* Whether path names an executable file in the container's root (rootfd), resolved as the container
 * would (its symlinks stay inside): 0, -ENOENT, or -EACCES for a file that is not executable. */
static int executable_at(int rootfd, const char *path)
{
    struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT};
    _cleanup_close_ int fd = (int) syscall(SYS_openat2, rootfd, path, &how, sizeof how);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return -ENOENT;
    return S_ISREG(st.st_mode) && (st.st_mode & 0111) ? 0 : -EACCES;
}

/* The process's program must exist when create returns, as runc's create checks: the engines take
 * "executable file not found" from create for exit status 127 (podman), not from start. Looked up
 * in the container's root as it is now, with the bundle's PATH; a program that is there but fails to
 * start is start's to report. */
static int check_executable(pid_t pid, const struct cdn_bundle *b, struct cdn_error *err)
{
    char proc[64];
    (void) snprintf(proc, sizeof proc, "/proc/%d/root", (int) pid);
    _cleanup_close_ int rootfd = open(proc, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return cdn_error_set(err, errno, "open the container's root: %m");
    const char *arg0 = b->args.v[0], *path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    char full[8192];
    if (strchr(arg0, '/')) {
        (void) snprintf(full, sizeof full, "%s/%s", arg0[0] == '/' ? "" : b->spec.workdir, arg0);
        int r = executable_at(rootfd, full);
        return r == 0 ? 0
                      : cdn_error_set(err, -r, "exec: \"%s\": %s", arg0,
                                      r == -EACCES ? "permission denied" : "stat: no such file or directory");
    }
    for (size_t i = 0; i < b->env.n; i++)
        if (strncmp(b->env.v[i], "PATH=", 5) == 0)
            path = b->env.v[i] + 5;
    for (const char *p = path; p;) {
        const char *end = strchr(p, ':');
        int n = end ? (int) (end - p) : (int) strlen(p);
        (void) snprintf(full, sizeof full, "%.*s/%s", n ? n : 1, n ? p : ".", arg0);
        if (executable_at(rootfd, full) == 0)
            return 0;
        p = end ? end + 1 : NULL;
    }
    return cdn_error_set(err, ENOENT, "exec: \"%s\": executable file not found in $PATH", arg0);
}

/* The bundle's rlimits as the container tier takes them (sandbox.h rlimits): for init, inherited
 * by the process start runs, as runc gives them to its process; never above cordon's. */
void rt_bundle_rlimits(const struct cdn_bundle *b, struct rlimit ret[RLIM_NLIMITS])
{
    for (int res = 0; res < RLIM_NLIMITS; res++)
        ret[res] = (struct rlimit){.rlim_cur = 1, .rlim_max = 0}; /* left as cordon sets it */
    for (size_t i = 0; i < b->n_rlimits; i++)
        if (b->rlimits[i].resource >= 0 && b->rlimits[i].resource < RLIM_NLIMITS)
            ret[b->rlimits[i].resource] =
                (struct rlimit){.rlim_cur = b->rlimits[i].soft, .rlim_max = b->rlimits[i].hard};
}

static json_t *strv_json(const struct cdn_strv *v)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < v->n; i++)
        if (json_array_append_new(a, json_string(v->v[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *state_doc(const char *id, const struct cdn_bundle *b, const struct cdn_sandbox *sb,
                         const char *bundle_dir, unsigned long long start)
{
    char created[64], startv[32];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%S", &tm);
    (void) snprintf(created + k, sizeof created - k, ".%09ldZ", ts.tv_nsec);
    (void) snprintf(startv, sizeof startv, "%llu", start);
    json_t *ann = json_object();
    for (size_t i = 0; ann && i < b->annotations.n; i++) {
        const char *kv = b->annotations.v[i], *eq = strchr(kv, '=');
        char key[512];
        if (eq && (size_t) (eq - kv) < sizeof key) {
            memcpy(key, kv, (size_t) (eq - kv));
            key[eq - kv] = 0;
            (void) json_object_set_new(ann, key, json_string(eq + 1));
        }
    }
    return json_pack("{s:s, s:I, s:s, s:s, s:s, s:s, s:o, s:I, s:s, s:o, s:o, s:s?, s:b}", "id", id, "pid",
                     (json_int_t) sb->init_pid, "init_start", startv, "bundle", bundle_dir, "rootfs",
                     b->spec.image, "created", created, "annotations", ann ?: json_object(), "slot",
                     (json_int_t) sb->slot, "cwd", b->spec.workdir, "args", strv_json(&b->args), "env",
                     strv_json(&b->env), "user", b->spec.user, "terminal", b->terminal);
}

/* linux.cgroupsPath as a cgroup name from the hierarchies' roots (cgroup.h): "/a/b" as given, a
 * relative one from the root too; "": none (the slot's). systemd's "slice:prefix:name" is refused
 * (cordon-runtime manages cgroupfs paths). One that holds processes already is refused: the
 * container would share it. */
static int cgroup_name(const struct cdn_bundle *b, char ret[CDN_CGROUP_NAME_MAX], struct cdn_error *err)
{
    ret[0] = 0;
    const char *p = b->cgroups_path;
    if (!p || !*p)
        return 0;
    if (strchr(p, ':'))
        return cdn_error_field(
            err, EINVAL, "linux.cgroupsPath",
            "linux.cgroupsPath '%s': a systemd slice; cordon-runtime manages cgroupfs paths "
            "(podman: --cgroup-manager cgroupfs; containerd: SystemdCgroup = false)",
            p);
    int n = snprintf(ret, CDN_CGROUP_NAME_MAX, "%s%s", p[0] == '/' ? "" : "/", p);
    if (n < 0 || n >= CDN_CGROUP_NAME_MAX - 1 || strcmp(ret, "/") == 0)
        return cdn_error_field(err, EINVAL, "linux.cgroupsPath", "linux.cgroupsPath '%s': empty or too long",
                               p);
    while (n > 1 && ret[n - 1] == '/')
        ret[--n] = 0;
    struct cdn_cgroup cg;
    cdn_cgroup_init(&cg, cdn_cgroup_detect(), ret);
    char procs[512];
    if (cdn_cgroup_path(procs, sizeof procs, cg.ops->version, "pids", ret) == 0) {
        strncat(procs, "/cgroup.procs", sizeof procs - strlen(procs) - 1);
        _cleanup_free_ char *text = cdn_cgroup_read_procs(AT_FDCWD, procs);
        if (text && *text)
            return cdn_error_field(err, EBUSY, "linux.cgroupsPath",
                                   "linux.cgroupsPath '%s': in use by other processes", p);
    }
    return 0;
}

/* The first of the bundle's annotations that only cordond enforces (attach.h), as a field; NULL: none. */
static const char *supervised_annotation(const struct cdn_bundle *b)
{
    static const char *const keys[] = {"io.cordon.protect", "io.cordon.network.allow",
                                       "io.cordon.on-violation"};
    static char field[64];
    for (size_t i = 0; i < b->annotations.n; i++)
        for (size_t k = 0; k < ELEMENTSOF(keys); k++)
            if (strncmp(b->annotations.v[i], keys[k], strlen(keys[k])) == 0 &&
                b->annotations.v[i][strlen(keys[k])] == '=') {
                (void) snprintf(field, sizeof field, "annotations.%s", keys[k]);
                return field;
            }
    return NULL;
}

/* The end of a create once the container exists: its state (with cordond's id for it, box), the hooks
 * of the runtime's namespace, the pid file. */
static int finish_create(const char *root, const char *id, const struct cdn_bundle *b,
                         const struct cdn_rt_create_opts *o, const struct cdn_sandbox *sb, json_t *doc,
                         const char *box, struct cdn_error *err)
{
    if (box && json_object_set_new(doc, "cordond", json_string(box)) < 0)
        return cdn_error_set(err, ENOMEM, "out of memory");
    int r = write_state(root, id, doc, err);
    if (r < 0)
        return r;
    /* The container exists, its command not yet: the hooks of the runtime's namespace at create. */
    _cleanup_free_ char *state = b->n_hooks ? cdn_rt_hook_state(id, "creating", sb->init_pid, doc) : NULL;
    const json_t *hooks = json_object_get(doc, "hooks");
    if (b->n_hooks && (!state || (r = cdn_rt_hooks_run(hooks, "prestart", state, err)) < 0 ||
                       (r = cdn_rt_hooks_run(hooks, "createRuntime", state, err)) < 0))
        return state ? r : cdn_error_set(err, ENOMEM, "out of memory");
    return o->pid_file ? rt_write_pid_file(o->pid_file, sb->init_pid, err) : 0;
}

static int create_sandbox(const char *root, const char *id, struct cdn_bundle *b,
                          const struct cdn_rt_create_opts *o, struct cdn_sandbox *sb, struct cdn_error *err)
{
    static char cgroup[CDN_CGROUP_NAME_MAX];
    int r = cgroup_name(b, cgroup, err);
    if (r < 0)
        return r;
    sb->cgroup_name = cgroup[0] ? cgroup : NULL;
    /* cordond supervises the container when it runs here; what only it enforces needs it. */
    const bool attach = cdn_rt_cordond_present();
    const char *needs = supervised_annotation(b);
    if (needs && !attach)
        return cdn_error_field(err, EHOSTUNREACH, needs,
                               "%s: needs cordond, which supervises it, and none answers at $CORDON_SOCKET "
                               "or /run/cordon/cordond.sock",
                               needs);
    /* An allowlist is cordond's egress: the container gets a namespace of its own, which cordond
     * wires to its proxy, rather than the engine's. */
    if (b->spec.net_mode == CDN_NET_ALLOWLIST && b->netns_path && cdn_rt_warn)
        cdn_rt_warn("linux.namespaces: the engine's network namespace is left for cordon's egress "
                    "(annotations.io.cordon.network.allow)");
    if (b->netns_path && b->spec.net_mode != CDN_NET_ALLOWLIST &&
        (sb->netns_fd = open(b->netns_path, O_RDONLY | O_CLOEXEC)) < 0)
        return cdn_error_field(err, errno, "linux.namespaces", "network namespace %s: %m", b->netns_path);
    if ((r = cdn_tier_check_spec(sb->tier, &b->spec, err)) < 0)
        return r;
    if ((sb->listen_fd = listen_at(root, id, err)) < 0)
        return sb->listen_fd;
    static struct rlimit rlimits[RLIM_NLIMITS];
    rt_bundle_rlimits(b, rlimits);
    sb->rlimits = rlimits;
    sb->sysctls = b->sysctls.v;
    sb->masked_paths = b->masked.v;
    sb->readonly_paths = b->readonly.v;
    static struct cdn_fs_mount fs[CDN_BUNDLE_MOUNTS_MAX];
    for (size_t i = 0; i < b->n_mounts; i++)
        fs[i] = (struct cdn_fs_mount){.type = b->mounts[i].type,
                                      .destination = b->mounts[i].destination,
                                      .options = b->mounts[i].options.v,
                                      .index = b->mounts[i].index};
    sb->fs_mounts = fs;
    sb->n_fs_mounts = b->n_mounts;
    sb->root_ids_from = b->spec_ids_from;
    sb->root_ids_count = b->spec_ids_count;
    sb->seccomp_extra = b->seccomp_insns;
    sb->seccomp_extra_len = b->seccomp_len;
    /* Without cordond no host stays to answer the seccomp monitor's notifications: the filter denies
     * outright. With it, cordond takes init's listener when it attaches, before start. */
    if (!attach)
        (void) setenv("CORDON_MONITOR", "off", 1);
    if ((r = sb->tier->create(sb, err)) < 0)
        return r;
    if ((r = wait_setup(sb, err)) < 0 || (r = check_executable(sb->init_pid, b, err)) < 0)
        return r;
    unsigned long long start;
    char st;
    if (proc_start(sb->init_pid, &start, &st) < 0)
        return cdn_error_set(err, ESRCH, "the container's init ended as it started");
    _cleanup_json_ json_t *doc = state_doc(id, b, sb, o->bundle_dir, start);
    if (!doc || (cgroup[0] && json_object_set_new(doc, "cgroup", json_string(cgroup)) < 0) ||
        (b->n_hooks && json_object_set_new(doc, "hooks", cdn_rt_hooks_json(b)) < 0))
        return cdn_error_set(err, ENOMEM, "out of memory");
    char box[CDN_RT_BOX_ID_MAX], sock[4096], label[512];
    (void) dir_of(sock, sizeof sock, root, id, "s");
    (void) snprintf(label, sizeof label, "oci.container-id=%s", id); /* its name in cordond's records */
    if (attach && (r = cdn_strv_push(&b->spec.labels, label)) < 0)
        return cdn_error_set(err, -r, "out of memory");
    if (attach && (r = cdn_rt_attach(&(struct cdn_rt_attach){.container_id = id,
                                                             .spec = &b->spec,
                                                             .init_pid = sb->init_pid,
                                                             .init_start = start,
                                                             .slot = sb->slot,
                                                             .cgroup = cgroup[0] ? cgroup : NULL,
                                                             .socket = sock,
                                                             .ids_from = b->spec_ids_from,
                                                             .ids_count = b->spec_ids_count},
                                     box, err)) < 0)
        return r;
    /* Whatever fails from here on lets cordond go too: the container is destroyed (cdn_rt_create). */
    if ((r = finish_create(root, id, b, o, sb, doc, attach ? box : NULL, err)) < 0 && attach)
        cdn_rt_detach(box);
    return r;
}

int cdn_rt_create(const char *root, const char *id, struct cdn_bundle *b, const struct cdn_rt_create_opts *o,
                  struct cdn_error *err)
{
    char dir[4096];
    int r = cdn_mkdir_p(root, 0700);
    if (r < 0)
        return cdn_error_set(err, r, "--root %s: %s", root, strerror(-r));
    if (dir_of(dir, sizeof dir, root, id, NULL) < 0)
        return cdn_error_set(err, ENAMETOOLONG, "container id too long");
    if (mkdir(dir, 0700) < 0)
        return cdn_error_set(err, errno, errno == EEXIST ? "container with id exists: %s" : "mkdir %s: %m",
                             errno == EEXIST ? id : dir);
    adjust_spec(b);
    struct cdn_sandbox sb;
    cdn_sandbox_init(&sb, &b->spec);
    memcpy(sb.id, id, strnlen(id, CDN_ID_LEN)); /* for the tier's own names; ours is the directory */
    sb.tier = cdn_tier_lookup(CDN_TIER_CONTAINER);
    sb.persistent = true;
    sb.root_in_place = true;
    /* A terminal: init's stdio, and the controlling terminal of the process start runs. */
    _cleanup_close_ int tty = b->terminal ? cdn_rt_console(o->console_socket, err) : -EBADF;
    if (b->terminal && tty < 0) {
        (void) rmdir(dir);
        return tty;
    }
    sb.stdio_fd = tty;
    struct cdn_root_layers layers;
    r = cdn_rt_root_layers(b->spec.image, &layers, err);
    if (r > 0)
        sb.root_layers = &layers;
    /* The new overlay's work directory is its upper's kind: the engine's range's root owns it (the overlay is
     * mounted with that uid: root-layers.c). */
    char work[8400];
    if (r > 0 && layers.work && b->spec_ids_from &&
        (snprintf(work, sizeof work, "%s/%s", layers.base, layers.work) < 0 ||
         chown(work, b->spec_ids_from, b->spec_ids_from) < 0))
        r = cdn_error_field(err, errno, "root.path", "root.path: give %s to the container's range: %m", work);
    if (r >= 0)
        r = sb.tier ? create_sandbox(root, id, b, o, &sb, err)
                    : cdn_error_set(err, EOPNOTSUPP, "this build has no container tier");
    cdn_rt_layers_free(&layers);
    (void) safe_close(sb.listen_fd);
    (void) safe_close(sb.netns_fd);
    if (r < 0) {
        if (sb.tier)
            (void) sb.tier->destroy(&sb);
        char p[4200];
        (void) snprintf(p, sizeof p, "%s/s", dir), (void) unlink(p);
        (void) snprintf(p, sizeof p, "%s/state.json", dir), (void) unlink(p);
        (void) rmdir(dir);
        return r;
    }
    /* init goes on alone: it holds the slot lock and the listener, and is the engine's child once
     * we exit. Our ends go without killing it (a persistent sandbox has no reaper). */
    (void) safe_close(sb.agent_fd);
    (void) safe_close(sb.setup_fd);
    (void) safe_close(sb.init_pidfd);
    (void) safe_close(sb.slot_fd);
    (void) safe_close(sb.image_fd);
    return 0;
}

/* ---- start ---- */

/* Hooks whose failure is said and goes no further (poststart, poststop: the runtime spec's). */
static void host_hooks(const char *id, const struct rt_state *s, const char *kind, const char *status,
                       pid_t pid)
{
    const json_t *hooks = json_object_get(s->doc, "hooks");
    if (!json_array_size(json_object_get(hooks, kind)))
        return;
    _cleanup_free_ char *state = cdn_rt_hook_state(id, status, pid, s->doc);
    struct cdn_error e = {0};
    if (!state)
        cdn_error_set(&e, ENOMEM, "hooks.%s: out of memory", kind);
    if (!state || cdn_rt_hooks_run(hooks, kind, state, &e) < 0)
        warn(&e);
}

static int connect_init(const char *root, const char *id, struct cdn_error *err)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char path[4096];
    if (dir_of(path, sizeof path, root, id, "s") < 0 || strlen(path) >= sizeof a.sun_path)
        return cdn_error_set(err, ENAMETOOLONG, "socket path too long");
    memcpy(a.sun_path, path, strlen(path) + 1);
    _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *) &a, sizeof a) < 0)
        return cdn_error_set(err, errno, "container \"%s\": its init does not answer (%s): %m", id, path);
    struct timeval tv = {.tv_sec = 30};
    (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return TAKE_FD(fd);
}

/* The EXEC of the bundle's process, from what create recorded. */
static int encode_process(const json_t *doc, uint8_t *buf, size_t size, struct cdn_error *err)
{
    const json_t *args = json_object_get(doc, "args"), *env = json_object_get(doc, "env");
    size_t na = json_array_size(args), ne = json_array_size(env);
    if (na == 0 || na > CDN_EXEC_MAX_ARGS || ne > CDN_EXEC_MAX_ARGS)
        return cdn_error_field(err, EINVAL, "process.args", "process.args: none recorded");
    _cleanup_free_ char **argv = calloc(na + 1, sizeof *argv);
    _cleanup_free_ char **envp = calloc(ne + 1, sizeof *envp);
    if (!argv || !envp)
        return cdn_error_set(err, ENOMEM, "out of memory");
    for (size_t i = 0; i < na; i++)
        argv[i] = (char *) json_string_value(json_array_get(args, i));
    for (size_t i = 0; i < ne; i++)
        envp[i] = (char *) json_string_value(json_array_get(env, i));
    const char *cwd = json_string_value(json_object_get(doc, "cwd"));
    int n = cdn_exec_encode(buf, size,
                            &(struct cdn_exec_args){
                                .flags = CDN_EXEC_SHUTDOWN_ON_EXIT | CDN_EXEC_STATUS | CDN_EXEC_PID |
                                         (json_is_true(json_object_get(doc, "terminal")) ? CDN_EXEC_CTTY : 0),
                                .cwd = cwd ? cwd : "/",
                                .argv = argv,
                                .envp = envp,
                                .user = json_string_value(json_object_get(doc, "user")),
                            });
    if (n < 0)
        return cdn_error_field(err, E2BIG, "process", "process: its args and env exceed %u KiB",
                               CDN_FRAME_MAX / 1024);
    return n;
}

/* Frames until the command's STARTED (0) or ERROR (init's reason, in runc's words where the engines
 * match them). */
static int await_started(int fd, struct cdn_error *err)
{
    static uint8_t buf[CDN_FRAME_MAX];
    for (;;) {
        struct cdn_frame_header h;
        int n = cdn_frame_recv(fd, &h, buf, sizeof buf);
        if (n < 0)
            return cdn_error_set(err, -n, "the container's init hung up before its process started: %s",
                                 strerror(-n));
        if (h.channel != 1)
            continue;
        if (h.type == CDN_FRAME_STARTED)
            return 0;
        int e;
        const char *msg;
        if (h.type == CDN_FRAME_ERROR && cdn_errmsg_decode(buf, (size_t) n, &e, &msg) == 0)
            return e == ENOENT ? cdn_error_set(err, e, "exec: %s: executable file not found in $PATH", msg)
                               : cdn_error_set(err, e ?: EIO, "exec: %s: %s", msg, strerror(e ?: EIO));
        if (h.type == CDN_FRAME_EXIT) /* an older init without STARTED */
            return 0;
    }
}

int cdn_rt_start(const char *root, const char *id, struct cdn_error *err)
{
    _cleanup_(rt_state_free) struct rt_state s = {0};
    int r = rt_load_alive(root, id, &s, EINVAL, "cannot start a container that has stopped", err);
    if (r < 0)
        return r;
    if (s.started)
        return cdn_error_set(err, EINVAL, "cannot start an already running container");
    char started[4096];
    (void) dir_of(started, sizeof started, root, id, "started");
    _cleanup_close_ int mark = open(started, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (mark < 0) /* two starts at once: one wins */
        return cdn_error_set(err, errno, "cannot start an already running container");
    static uint8_t frame[CDN_FRAME_MAX];
    int n = rt_start_hooks(root, id, &s, err);
    n = n < 0 ? n : encode_process(s.doc, frame, sizeof frame, err);
    const char *box = json_string_value(json_object_get(s.doc, "cordond"));
    if (box && n >= 0) { /* cordond's connection is init's one: through it */
        if ((r = cdn_rt_attached_start(box, frame, (size_t) n, err)) < 0) {
            (void) unlink(started);
            return r;
        }
        host_hooks(id, &s, "poststart", "running", s.pid);
        return 0;
    }
    _cleanup_close_ int fd = n < 0 ? n : connect_init(root, id, err);
    if (fd >= 0 && (r = cdn_frame_send(fd, CDN_FRAME_EXEC, 1, frame, (uint32_t) n)) < 0)
        fd = safe_close(fd),
        r = cdn_error_set(err, -r, "send the process to the container's init: %s", strerror(-r));
    else if (fd < 0)
        r = fd;
    if (r < 0) { /* nothing was started: it may be started again */
        (void) unlink(started);
        return r;
    }
    if ((r = await_started(fd, err)) < 0)
        return r;
    host_hooks(id, &s, "poststart", "running", s.pid);
    return 0;
}

/* ---- state, kill, delete ---- */

int cdn_rt_state(const char *root, const char *id, char **ret_json, struct cdn_error *err)
{
    _cleanup_(rt_state_free) struct rt_state s = {0};
    int r = load(root, id, &s, err);
    if (r < 0)
        return r;
    _cleanup_json_ json_t *o = json_pack(
        "{s:s, s:s, s:s, s:I, s:O, s:O, s:O, s:s, s:O}", "ociVersion", "1.1.0", "id", id, "status",
        status_of(&s), "pid", (json_int_t) (s.alive ? s.pid : 0), "bundle", json_object_get(s.doc, "bundle"),
        "rootfs", json_object_get(s.doc, "rootfs"), "created", json_object_get(s.doc, "created"), "owner", "",
        "annotations", json_object_get(s.doc, "annotations"));
    char *text = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    if (!text)
        return cdn_error_set(err, ENOMEM, "out of memory");
    *ret_json = text;
    return 0;
}

static void slot_cgroup(int slot, struct cdn_cgroup *cg)
{
    char name[32];
    (void) snprintf(name, sizeof name, "slot-%d", slot);
    cdn_cgroup_init(cg, cdn_cgroup_detect(), name);
}

/* The container's cgroup: the engine's cgroupsPath, or its slot's. */
void rt_cgroup(const struct rt_state *s, struct cdn_cgroup *cg)
{
    const char *path = json_string_value(json_object_get(s->doc, "cgroup"));
    if (path && path[0] == '/')
        cdn_cgroup_init(cg, cdn_cgroup_detect(), path);
    else
        slot_cgroup(s->slot, cg);
}

/* A signal to the recorded init through a pidfd, so that a pid reused since cannot receive it. */
static int signal_init(const struct rt_state *s, int sig)
{
    _cleanup_close_ int pidfd = (int) syscall(SYS_pidfd_open, s->pid, 0);
    unsigned long long now;
    char st;
    if (pidfd < 0 || proc_start(s->pid, &now, &st) < 0 || now != s->starttime)
        return -ESRCH;
    return syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) < 0 ? -errno : 0;
}

/* sig to each process its cgroup lists, through a pidfd (one that ended since is not signalled). */
static void signal_cgroup(const struct rt_state *s, int sig)
{
    struct cdn_cgroup cg;
    rt_cgroup(s, &cg);
    char dir[4096];
    if (cdn_cgroup_path(dir, sizeof dir - 16, cg.ops->version, "pids", cg.name) < 0)
        return;
    strcat(dir, "/cgroup.procs");
    /* init alive after the read: the cgroup was still this container's when it was listed (a slot's
     * cgroup is another sandbox's only once init has ended and the slot is taken again) */
    _cleanup_close_ int initfd = (int) syscall(SYS_pidfd_open, s->pid, 0);
    _cleanup_free_ char *procs = initfd >= 0 ? cdn_cgroup_read_procs(AT_FDCWD, dir) : NULL;
    struct pollfd pfd = {.fd = initfd, .events = POLLIN};
    unsigned long long now;
    char st;
    if (!procs || poll(&pfd, 1, 0) != 0 || proc_start(s->pid, &now, &st) < 0 || now != s->starttime)
        return;
    for (char *p = procs, *end; p && *p; p = end + 1) {
        long pid = strtol(p, &end, 10);
        if (*end != '\n')
            break;
        if (pid == s->pid)
            continue;
        _cleanup_close_ int fd = (int) syscall(SYS_pidfd_open, (pid_t) pid, 0);
        if (fd >= 0)
            (void) syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0);
    }
}

int cdn_rt_kill(const char *root, const char *id, int sig, bool all, struct cdn_error *err)
{
    _cleanup_(rt_state_free) struct rt_state s = {0};
    int r = rt_load_alive(root, id, &s, ESRCH, "container not running", err);
    if (r < 0)
        return r;
    /* A frozen process dies only once thawed, which kill_all does. Only then, and never for --all:
     * SIGKILL to init empties its pid namespace, and a cgroup emptied by name once init may have
     * ended could be the next sandbox's of the slot (a frozen init cannot end meanwhile). */
    if (s.paused && sig == SIGKILL) {
        struct cdn_cgroup cg;
        rt_cgroup(&s, &cg);
        (void) cg.ops->kill_all(&cg);
    }
    if (all && sig != SIGKILL) /* every process of its cgroup, init last */
        signal_cgroup(&s, sig);
    r = signal_init(&s, sig);
    if (r < 0 && !(s.paused && sig == SIGKILL))
        return cdn_error_set(err, -r, r == -ESRCH ? "container not running" : "kill: %s", strerror(-r));
    return 0;
}

/* Wait up to 5 s for the recorded init to end (it is the engine's child: the engine reaps it; an
 * unreaped zombie counts as ended). */
static bool wait_ended(const struct rt_state *s)
{
    for (int i = 0; i < 500; i++) {
        unsigned long long now;
        char st;
        if (proc_start(s->pid, &now, &st) < 0 || now != s->starttime || st == 'Z' || st == 'X')
            return true;
        (void) nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    return false;
}

/* The slot's cgroup, emptied and removed, with the slot's lock taken first: once init has ended the
 * slot may already be another sandbox's, whose cgroup is not ours to remove. */
static void release_slot(int slot)
{
    int got = -1, fd = -EBADF;
    struct cdn_error e = {0};
    if (cdn_slot_acquire(cdn_run_dir(), slot, &got, &fd, &e) < 0)
        return;
    if (got == slot) {
        struct cdn_cgroup cg;
        slot_cgroup(slot, &cg);
        (void) cg.ops->kill_all(&cg);
        (void) cg.ops->destroy(&cg);
    }
    (void) close(fd);
}

int cdn_rt_delete(const char *root, const char *id, bool force, struct cdn_error *err)
{
    _cleanup_(rt_state_free) struct rt_state s = {0};
    int r = load(root, id, &s, err);
    if (r < 0 && !(force && r == -EIO))
        return r;
    if (r == 0 && s.alive && !force)
        return cdn_error_set(err, EBUSY, "cannot delete container %s that is not stopped: %s", id,
                             status_of(&s));
    /* cordond lets it go first (and ends it, if it still runs): it stops supervising what goes now */
    const char *box = r == 0 ? json_string_value(json_object_get(s.doc, "cordond")) : NULL;
    if (box)
        cdn_rt_detach(box);
    if (r == 0 && s.alive) {
        struct cdn_cgroup cg;
        rt_cgroup(&s, &cg);
        (void) signal_init(&s, SIGKILL);
        if (s.paused) /* thawed, so that it dies (see cdn_rt_kill) */
            (void) cg.ops->kill_all(&cg);
        if (!wait_ended(&s))
            return cdn_error_set(err, EBUSY, "container %s: its init did not end after SIGKILL", id);
    }
    if (r == 0 && json_is_string(json_object_get(s.doc, "cgroup"))) { /* the engine's path: ours alone */
        struct cdn_cgroup cg;
        rt_cgroup(&s, &cg);
        (void) cg.ops->kill_all(&cg);
        (void) cg.ops->destroy(&cg);
    } else if (r == 0) {
        release_slot(s.slot);
    }
    char dir[4096], p[4200];
    (void) dir_of(dir, sizeof dir, root, id, NULL);
    static const char *const files[] = {"s", "started", "paused", "state.json", "state.json.tmp"};
    for (size_t i = 0; i < ELEMENTSOF(files); i++) {
        (void) snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        (void) unlink(p);
    }
    if (rmdir(dir) < 0)
        return cdn_error_set(err, errno, "remove %s: %m", dir);
    if (r == 0)
        host_hooks(id, &s, "poststop", "stopped", 0);
    return 0;
}

/* ---- pause, resume, ps, update ---- */

static int marker(const char *root, const char *id, const char *name, bool on)
{
    char path[4096];
    if (dir_of(path, sizeof path, root, id, name) < 0)
        return -ENAMETOOLONG;
    if (!on)
        return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    return fd < 0 ? -errno : 0;
}

int cdn_rt_pause(const char *root, const char *id, bool paused, struct cdn_error *err)
{
    _cleanup_(rt_state_free) struct rt_state s = {0};
    int r = rt_load_alive(root, id, &s, ESRCH, "container not running", err);
    if (r < 0)
        return r;
    struct cdn_cgroup cg;
    rt_cgroup(&s, &cg);
    /* The marker first when pausing, last when resuming: state never says running of a frozen one. */
    if (paused && (r = marker(root, id, "paused", true)) < 0)
        return cdn_error_set(err, -r, "mark it paused: %s", strerror(-r));
    if ((r = cg.ops->freeze(&cg, paused)) < 0) {
        if (paused)
            (void) marker(root, id, "paused", false);
        return cdn_error_set(err, -r, "%s its cgroup: %s", paused ? "freeze" : "thaw", strerror(-r));
    }
    if (!paused && (r = marker(root, id, "paused", false)) < 0)
        return cdn_error_set(err, -r, "unmark it paused: %s", strerror(-r));
    return 0;
}

int cdn_rt_ps(const char *root, const char *id, char **ret_json, struct cdn_error *err)
{
    _cleanup_(rt_state_free) struct rt_state s = {0};
    int r = load(root, id, &s, err);
    if (r < 0)
        return r;
    struct cdn_cgroup cg;
    rt_cgroup(&s, &cg);
    char dir[4096];
    if ((r = cdn_cgroup_path(dir, sizeof dir, cg.ops->version, "pids", cg.name)) < 0)
        return cdn_error_set(err, -r, "cgroup path too long");
    _cleanup_json_ json_t *pids = json_array();
    _cleanup_free_ char *procs =
        s.alive ? cdn_cgroup_read_procs(AT_FDCWD, strcat(dir, "/cgroup.procs")) : NULL;
    for (char *p = procs, *end; p && *p; p = end + 1) {
        long pid = strtol(p, &end, 10);
        if (*end != '\n')
            break;
        (void) json_array_append_new(pids, json_integer(pid));
    }
    char *text = pids ? json_dumps(pids, JSON_COMPACT) : NULL;
    if (!text)
        return cdn_error_set(err, ENOMEM, "out of memory");
    *ret_json = text;
    return 0;
}

int cdn_rt_update(const char *root, const char *id, const char *resources_json, struct cdn_error *err)
{
    _cleanup_(rt_state_free) struct rt_state s = {0};
    int r = rt_load_alive(root, id, &s, ESRCH, "container not running", err);
    if (r < 0)
        return r;
    json_error_t je;
    _cleanup_json_ json_t *res = json_loads(resources_json, JSON_DECODE_INT_AS_REAL, &je);
    if (!json_is_object(res))
        return cdn_error_field(err, EINVAL, "resources", "--resources: not a JSON object (%s)", je.text);
    struct cdn_cgroup_limits l = {0};
    unsigned which = 0;
    double mem = json_number_value(json_object_get(json_object_get(res, "memory"), "limit"));
    double pids = json_number_value(json_object_get(json_object_get(res, "pids"), "limit"));
    double quota = json_number_value(json_object_get(json_object_get(res, "cpu"), "quota"));
    double period = json_number_value(json_object_get(json_object_get(res, "cpu"), "period"));
    if (mem >= (double) (CDN_MEMORY_MB_MIN << 20))
        l.memory_bytes = (uint64_t) mem, which |= CDN_CGROUP_SET_MEMORY;
    else if (mem > 0)
        return cdn_error_field(err, EINVAL, "memory.limit", "memory.limit: below cordon's least (8 MiB)");
    if (pids >= CDN_PIDS_MIN)
        l.pids = (uint64_t) pids, which |= CDN_CGROUP_SET_PIDS;
    if (quota > 0)
        l.cpus = quota / (period > 0 ? period : 100000), which |= CDN_CGROUP_SET_CPUS;
    struct cdn_cgroup cg;
    rt_cgroup(&s, &cg);
    return which ? cg.ops->set_limits(&cg, &l, which, err) : 0;
}
