/* Checkpoints and forks (docs/trajectories.md), the container tier's:
 *   POST   /v1/sandboxes/{id}/checkpoints   take one: its files now → 201 {"id": "ck-…", …}
 *   GET    /v1/sandboxes/{id}/checkpoints   its checkpoints, oldest first
 *   POST   /v1/sandboxes/{id}/fork          {"checkpoint"?, "count", "labels"?} → N new sandboxes
 *   GET    /v1/checkpoints[?sandbox=ID][&trajectory=T]      GET|DELETE /v1/checkpoints/{ck}
 * and a create's spec "checkpoint": a new sandbox starts with that checkpoint's files.
 *
 * A checkpoint is a reflink copy of the sandbox's layer image in the checkpoint store
 * (tiers/container/layer-store.c), taken while the sandbox's processes are frozen and after its
 * layer's ext4 was synced (its dirty metadata and data written through to the image), so it is a
 * whole file system as of one moment. Its record, <ck>.json beside <ck>.img, says whose it
 * is, the trajectory's step count then, and the sandbox's spec (what a fork or a resume makes). Both
 * are fsync'd before the answer: a checkpoint answered survives cordond and the host. */
#include "api.h"
#include "core/json-util.h"
#include "core/paths.h"
#include "registry.h"
#include "shared/fd-util.h"
#include "shared/macro.h"
#include "tiers/tier.h"
#include "trajectory.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/mount.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#define FORK_MAX 64

static double now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* Whether there is a store: reading routes do not make one. */
static bool store_made(void)
{
    char path[4200];
    (void) snprintf(path, sizeof path, "%s/store.xfs", cdn_state_dir());
    return cdn_layer_store_fd() >= 0 || access(path, F_OK) == 0;
}

/* The store's checkpoints directory (O_PATH), or -1 with err. */
static int ck_dir(struct cdn_error *err)
{
    int store = cdn_layer_store(err);
    if (store < 0)
        return -1;
    int d = openat(store, "checkpoints", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (d < 0)
        cdn_error_set(err, errno, "the checkpoint store: %m");
    return d;
}

/* Checkpoint ck's record, or NULL (err: -ENOENT when there is none). */
static json_t *ck_load(int dir, const char *ck, struct cdn_error *err)
{
    if (!cdn_checkpoint_id_valid(ck)) {
        cdn_error_field(err, ENOENT, "checkpoint", "'%.32s' is not a checkpoint's id", ck);
        return NULL;
    }
    char name[64];
    (void) snprintf(name, sizeof name, "%s.json", ck);
    _cleanup_close_ int fd = openat(dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        cdn_error_field(err, errno, "checkpoint",
                        errno == ENOENT ? "no checkpoint '%s'" : "checkpoint '%s': %m", ck);
        return NULL;
    }
    json_t *o = json_loadfd(fd, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        cdn_error_field(err, EBADMSG, "checkpoint", "checkpoint '%s': its record does not parse", ck);
        return NULL;
    }
    return o;
}

/* What the API shows of a record (its spec stays inside). */
static json_t *ck_public(const json_t *rec)
{
    json_t *o = json_deep_copy(rec);
    if (o)
        json_object_del(o, "spec");
    return o;
}

/* A mount of the sandbox's layer file system (the same superblock as the sandbox's), to freeze it. */
static int layer_root(struct box *b, int file, struct cdn_error *err)
{
    if (b->layer_mnt >= 0)
        return b->layer_mnt;
    int nr = cdn_layer_loop(file);
    if (nr < 0)
        return cdn_error_set(err, -nr, "sandbox %s: its writable layer has no loop device", b->sb.id);
    char dev[32];
    (void) snprintf(dev, sizeof dev, "/dev/loop%d", nr);
    _cleanup_close_ int fs = (int) syscall(SYS_fsopen, "ext4", FSOPEN_CLOEXEC);
    if (fs < 0 || syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
        syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return cdn_error_set(err, errno, "sandbox %s: its writable layer (%s): %m", b->sb.id, dev);
    _cleanup_close_ int mnt = (int) syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                                            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    if (mnt < 0)
        return cdn_error_set(err, errno, "sandbox %s: its writable layer: %m", b->sb.id);
    b->layer_mnt = openat(mnt, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (b->layer_mnt < 0)
        return cdn_error_set(err, errno, "sandbox %s: its writable layer: %m", b->sb.id);
    return b->layer_mnt;
}

static int write_record(int dir, const char *ck, json_t *rec, struct cdn_error *err)
{
    char name[64], tmp[64];
    (void) snprintf(name, sizeof name, "%s.json", ck);
    (void) snprintf(tmp, sizeof tmp, "%s.json.tmp", ck);
    _cleanup_close_ int fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || json_dumpfd(rec, fd, JSON_COMPACT) < 0 || fsync(fd) < 0 ||
        renameat(dir, tmp, dir, name) < 0) {
        int e = errno ?: EIO;
        (void) unlinkat(dir, tmp, 0);
        return cdn_error_set(err, e, "checkpoint %s: write its record: %s", ck, strerror(e));
    }
    return 0;
}

/* A new checkpoint: its id into ck, its file <ck>.<ext> made in dir (name into name): the file's fd,
 * or -1 with err. */
static int new_file(int dir, const char *ext, char ck[CDN_CHECKPOINT_ID_LEN + 1], char name[64],
                    struct cdn_error *err)
{
    uint8_t rnd[8];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t) sizeof rnd)
        return cdn_error_set(err, errno, "getrandom: %m"), -1;
    (void) snprintf(ck, CDN_CHECKPOINT_ID_LEN + 1, "ck-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1],
                    rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    (void) snprintf(name, 64, "%s.%s", ck, ext);
    int fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        cdn_error_set(err, errno, "checkpoint %s: %m", ck);
    return fd;
}

/* What the checkpointable containers' layers may take of the store: each may rewrite all of its
 * blocks after a checkpoint (which keeps the old ones). */
static uint64_t layers_need(void)
{
    uint64_t need = 0;
    struct box *o;
    LIST_FOREACH(o, &cdn_daemon->boxes, link)
    if (o->spec.checkpoints && o->spec.tier == CDN_TIER_CONTAINER && o->state != BOX_EXITED)
        need += o->spec.limits.disk_mb << 20;
    return need;
}

/* Free space of the store and of the state file system under it: less than need, err and 507. */
static bool room_for(struct box *b, int dir, uint64_t need, int *status, const char **code,
                     struct cdn_error *err)
{
    struct statfs sfs;
    if ((fstatfs(dir, &sfs) == 0 && (uint64_t) sfs.f_bavail * (uint64_t) sfs.f_bsize < need) ||
        (statfs(cdn_state_dir(), &sfs) == 0 && (uint64_t) sfs.f_bavail * (uint64_t) sfs.f_bsize < need)) {
        *status = 507, *code = "insufficient_storage";
        cdn_error_set(err, ENOSPC,
                      "checkpoint of sandbox %s: the checkpoint store (or the state filesystem under it) has "
                      "%llu MiB free, less than %llu MiB (the checkpointable containers' layers, and a "
                      "guest's memory): delete checkpoints",
                      b->sb.id, (unsigned long long) ((uint64_t) sfs.f_bavail * (uint64_t) sfs.f_bsize >> 20),
                      (unsigned long long) (need >> 20));
        return false;
    }
    return true;
}

/* A checkpoint's record written (and its directory's names synced): b's newest. */
static json_t *keep_record(struct box *b, int dir, const char *ck, const char *file, json_t *rec,
                           uint64_t step, struct cdn_error *err)
{
    if (rec && b->spec.trajectory &&
        (json_object_set_new(rec, "trajectory", json_string(b->spec.trajectory)) < 0 ||
         json_object_set_new(rec, "step", json_integer((json_int_t) step)) < 0)) {
        json_decref(rec);
        rec = NULL;
    }
    if (!rec || write_record(dir, ck, rec, err) < 0) {
        if (!rec)
            cdn_error_set(err, ENOMEM, "out of memory");
        json_decref(rec);
        (void) unlinkat(dir, file, 0);
        return NULL;
    }
    _cleanup_close_ int dfd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0)
        (void) fsync(dfd); /* the names */
    (void) snprintf(b->last_checkpoint, sizeof b->last_checkpoint, "%s", ck);
    if (b->checkpoint_ev) /* one due after the last step: this one is of the same files */
        (void) evtimer_del(b->checkpoint_ev);
    cdn_box_event(b, "checkpoint", json_pack("{s:s}", "id", ck));
    return rec;
}

static double ms_between(const struct timespec *a, const struct timespec *b)
{
    return (double) (b->tv_sec - a->tv_sec) * 1e3 + (double) (b->tv_nsec - a->tv_nsec) / 1e6;
}

/* A microvm guest's checkpoint: the whole guest (its files are in its RAM), saved by QEMU into
 * <ck>.vm while its init holds (CDN_FRAME_HOLD: the agent's stream is at a frame's end then, so a
 * guest restored from it speaks to a new host from a clean start). */
static json_t *take_memory(struct box *b, int dir, uint64_t step, int *status, const char **code,
                           struct cdn_error *err)
{
    uint64_t need = layers_need() + ((b->spec.limits.memory_mb + 512) << 20); /* its RAM and kernel's */
    char ck[CDN_CHECKPOINT_ID_LEN + 1], file[64];
    if (!room_for(b, dir, need, status, code, err))
        return NULL;
    _cleanup_close_ int out = new_file(dir, "vm", ck, file, err);
    if (out < 0)
        return NULL;
    if (b->sb.tier->save_memory(&b->sb, -1, err) < 0) { /* no monitor: no hold for nothing */
        (void) unlinkat(dir, file, 0);
        return NULL;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* cordond waits (its init answers in ms): a guest that does not answer holds it up 5 s. */
    int r = cdn_agent_conn_hold(&b->agent, 5000);
    if (r < 0)
        cdn_error_set(err, -r, "checkpoint of sandbox %s: its guest did not hold: %s", b->sb.id,
                      r == -ETIMEDOUT ? "no answer in 5 s" : strerror(-r));
    else if (b->state != BOX_RUNNING || b->dying) /* ended while it held (its frames did it) */
        r = cdn_error_set(err, ESRCH, "checkpoint of sandbox %s: it ended", b->sb.id);
    else
        r = b->sb.tier->save_memory(&b->sb, out, err);
    uint8_t off = CDN_HOLD_OFF;
    (void) cdn_agent_conn_send(&b->agent, CDN_FRAME_HOLD, 0, 0, &off, 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct stat st = {0};
    if (r == 0 && (fsync(out) < 0 || fstat(out, &st) < 0))
        r = cdn_error_set(err, errno, "checkpoint of sandbox %s: %m", b->sb.id);
    if (r < 0) {
        (void) unlinkat(dir, file, 0);
        if (err->errnum == ENOSPC || err->errnum == EDQUOT)
            *status = 507, *code = "insufficient_storage";
        return NULL;
    }
    _cleanup_free_ char *spec = cdn_spec_to_json(&b->spec);
    json_t *sj = spec ? json_loads(spec, 0, NULL) : NULL;
    json_t *rec = json_pack("{s:s, s:s, s:f, s:s, s:b, s:I, s:f, s:o?, s:s?}", "id", ck, "sandbox", b->sb.id,
                            "created", now_unix(), "tier", "microvm", "memory", 1, "bytes",
                            (json_int_t) st.st_size, "frozen_ms", ms_between(&t0, &t1), "spec", sj, "parent",
                            b->last_checkpoint[0] ? b->last_checkpoint : NULL);
    return keep_record(b, dir, ck, file, rec, step, err);
}

/* Take a checkpoint of b; its record (owned) or NULL with *status, *code and err. */
static json_t *take(struct box *b, int *status, const char **code, struct cdn_error *err)
{
    *status = 500;
    *code = "checkpoint_failed";
    if (!b->spec.checkpoints) {
        *status = 409, *code = "checkpoints_off";
        cdn_error_set(err, EOPNOTSUPP,
                      "sandbox %s keeps no checkpoints: create it with \"checkpoints\": true", b->sb.id);
        return NULL;
    }
    if (b->state != BOX_RUNNING || b->dying) {
        *status = 409, *code = "sandbox_not_running";
        cdn_error_set(err, ESRCH, "sandbox %s is not running", b->sb.id);
        return NULL;
    }
    uint64_t step = 0;
    if (b->spec.trajectory && cdn_traj_steps(b->spec.trajectory, &step, err) < 0) {
        if (err->errnum == EBUSY)
            *status = 409, *code = "step_in_progress";
        return NULL;
    }
    _cleanup_close_ int dir = ck_dir(err);
    int store = cdn_layer_store_fd();
    if (dir < 0)
        return NULL;
    if (b->spec.tier == CDN_TIER_MICROVM && b->sb.tier->save_memory)
        return take_memory(b, dir, step, status, code, err);
    _cleanup_close_ int layers = openat(store, "layers", O_PATH | O_DIRECTORY | O_CLOEXEC);
    _cleanup_close_ int file = layers < 0 ? -1 : openat(layers, b->sb.id, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    uint32_t base;
    if (file < 0 || cdn_layer_uid_base(file, &base) < 0) {
        cdn_error_set(err, errno, "sandbox %s: its writable layer is not in the checkpoint store", b->sb.id);
        return NULL;
    }
    /* Room for every checkpointable sandbox to write its whole layer again after this: every block
     * one rewrites then takes a new one of the store (the checkpoint keeps the old). Without it, their
     * writes could meet a full store as I/O errors; so the checkpoint is refused, cleanly, and the
     * sandbox runs on. */
    if (!room_for(b, dir, layers_need(), status, code, err))
        return NULL;
    int root = layer_root(b, file, err);
    char ck[CDN_CHECKPOINT_ID_LEN + 1], img[64];
    _cleanup_close_ int out = root < 0 ? -1 : new_file(dir, "img", ck, img, err);
    if (out < 0)
        return NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* One moment of the file system, whole on its image: the sandbox's processes are frozen (its
     * cgroup; every writer of its layer is one of them, its init's file operations too), then the
     * file system is synced through the loop device to the image (whose page cache the clone writes
     * back first). Not the file system's own freeze (FIFREEZE): it waits for every writer to leave,
     * and a process of the agent's can stay inside a write for ever (a splice from an empty pipe),
     * which would hang cordond; frozen, such a process has left it. It also costs three RCU grace
     * periods, ~50 ms here. */
    const bool paused = b->paused;
    int r = paused ? 0 : b->sb.cgroup.ops ? b->sb.cgroup.ops->freeze(&b->sb.cgroup, true) : -ENOTSUP;
    if (r < 0) {
        (void) unlinkat(dir, img, 0);
        if (b->sb.cgroup.ops)
            (void) b->sb.cgroup.ops->freeze(&b->sb.cgroup, false);
        cdn_error_set(err, -r, "checkpoint of sandbox %s: freeze its processes: %s", b->sb.id, strerror(-r));
        return NULL;
    }
    r = syncfs(root) < 0 ? -errno : 0;
    if (r == 0)
        r = ioctl(out, FICLONE, file) < 0 ? -errno : 0;
    if (!paused && b->sb.cgroup.ops->freeze(&b->sb.cgroup, false) < 0)
        fprintf(stderr, "cordond: sandbox %s: thaw its processes after a checkpoint: %m\n", b->sb.id);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (r == 0 && (r = cdn_layer_set_uid_base(out, base)) == 0 && fsync(out) < 0)
        r = -errno;
    if (r < 0) {
        (void) unlinkat(dir, img, 0);
        if (r == -ENOSPC || r == -EDQUOT)
            *status = 507, *code = "insufficient_storage";
        cdn_error_set(err, -r, "checkpoint of sandbox %s: %s", b->sb.id,
                      r == -ENOSPC ? "the checkpoint store is full" : strerror(-r));
        return NULL;
    }
    _cleanup_free_ char *spec = cdn_spec_to_json(&b->spec);
    json_t *sj = spec ? json_loads(spec, 0, NULL) : NULL;
    json_t *rec = json_pack("{s:s, s:s, s:f, s:I, s:I, s:f, s:o?, s:s?}", "id", ck, "sandbox", b->sb.id,
                            "created", now_unix(), "disk_mb", (json_int_t) b->spec.limits.disk_mb, "uid_base",
                            (json_int_t) base, "frozen_ms", ms_between(&t0, &t1), "spec", sj, "parent",
                            b->last_checkpoint[0] ? b->last_checkpoint : NULL);
    return keep_record(b, dir, ck, img, rec, step, err);
}

/* ---- "every_step" ---- */

/* The checkpoints "every_step" took of b: ck is one more, and past every_step_keep the oldest goes
 * (its record first, as a DELETE does). One a rollback is on its way to stays: a rollback clones its
 * image at once. A cordond that restarts forgets which they were: they stay until deleted. */
static void keep_newest(struct box *b, const char *ck)
{
    unsigned keep = cdn_daemon->cfg.every_step_keep;
    if (!keep || !ck)
        return;
    if (b->n_auto_cks == b->cap_auto_cks && b->n_auto_cks < keep) {
        unsigned cap = b->cap_auto_cks ? b->cap_auto_cks * 2 : 8;
        cap = cap < keep ? cap : keep;
        char(*more)[24] = realloc(b->auto_cks, cap * sizeof *b->auto_cks);
        if (!more)
            return;
        b->auto_cks = more, b->cap_auto_cks = cap;
    }
    if (b->n_auto_cks == keep) {
        struct cdn_error err = {0};
        _cleanup_close_ int dir = ck_dir(&err);
        char name[64];
        (void) snprintf(name, sizeof name, "%s.json", b->auto_cks[0]);
        cdn_standby_forget(b->auto_cks[0]);
        if (dir >= 0 && unlinkat(dir, name, 0) == 0) {
            (void) snprintf(name, sizeof name, "%s.img", b->auto_cks[0]);
            (void) unlinkat(dir, name, 0);
            (void) snprintf(name, sizeof name, "%s.vm", b->auto_cks[0]);
            (void) unlinkat(dir, name, 0);
            cdn_box_event(b, "checkpoint_deleted",
                          json_pack("{s:s, s:s}", "id", b->auto_cks[0], "why", "every_step_keep"));
        }
        memmove(b->auto_cks, b->auto_cks + 1, (keep - 1) * sizeof *b->auto_cks);
        b->n_auto_cks--;
    }
    (void) snprintf(b->auto_cks[b->n_auto_cks++], sizeof *b->auto_cks, "%s", ck);
}

static void after_step(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct box *b = arg;
    if (b->state != BOX_RUNNING || b->dying)
        return; /* its step ended it: nothing to checkpoint */
    int status;
    const char *code;
    struct cdn_error err = {0};
    json_t *rec = take(b, &status, &code, &err);
    if (rec) {
        keep_newest(b, json_string_value(json_object_get(rec, "id")));
        json_decref(rec);
    } else
        cdn_box_event(b, "checkpoint_failed",
                      json_pack("{s:s, s:i, s:s}", "code", code, "status", status, "error", err.msg));
}

void cdn_checkpoint_after_step(struct box *b)
{
    if (!b->spec.checkpoint_every_step)
        return;
    if (!b->checkpoint_ev && !(b->checkpoint_ev = evtimer_new(cdn_daemon->base, after_step, b))) {
        cdn_box_event(
            b, "checkpoint_failed",
            json_pack("{s:s, s:i, s:s}", "code", "internal", "status", 500, "error", "out of memory"));
        return;
    }
    /* 1 ms on: the step's answer is written out at the loop's next turn, before this. One is due at
     * a time: the next step of the trajectory waits for this one's to be answered. */
    if (!evtimer_pending(b->checkpoint_ev, NULL))
        (void) evtimer_add(b->checkpoint_ev, &(struct timeval){.tv_usec = 1000});
}

void cdn_checkpoint_before_step(struct box *b)
{
    if (b->checkpoint_ev && evtimer_pending(b->checkpoint_ev, NULL)) {
        (void) evtimer_del(b->checkpoint_ev);
        after_step(-1, EV_TIMEOUT, b);
    }
}

int cdn_checkpoint_layer_mount(struct box *b)
{
    if (b->layer_mnt >= 0 || !b->spec.checkpoints || cdn_layer_store_fd() < 0)
        return b->layer_mnt;
    _cleanup_close_ int layers = openat(cdn_layer_store_fd(), "layers", O_PATH | O_DIRECTORY | O_CLOEXEC);
    _cleanup_close_ int file = layers < 0 ? -1 : openat(layers, b->sb.id, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct cdn_error err = {0};
    return file < 0 ? -1 : layer_root(b, file, &err);
}

/* Records of the store, oldest first, that match sandbox and trajectory (NULL: any). */
static json_t *ck_list(const char *sandbox, const char *trajectory, struct cdn_error *err)
{
    if (!store_made())
        return json_array();
    _cleanup_close_ int dir = ck_dir(err);
    if (dir < 0)
        return NULL;
    int fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            (void) close(fd);
        cdn_error_set(err, errno, "the checkpoint store: %m");
        return NULL;
    }
    json_t *all = json_array();
    struct dirent *de;
    while (all && (de = readdir(d))) {
        char ck[CDN_CHECKPOINT_ID_LEN + 1];
        size_t n = strlen(de->d_name);
        if (n != CDN_CHECKPOINT_ID_LEN + 5 || strcmp(de->d_name + CDN_CHECKPOINT_ID_LEN, ".json") != 0)
            continue;
        memcpy(ck, de->d_name, CDN_CHECKPOINT_ID_LEN);
        ck[CDN_CHECKPOINT_ID_LEN] = 0;
        struct cdn_error e = {0};
        json_t *rec = ck_load(dir, ck, &e);
        const char *s = json_string_value(json_object_get(rec, "sandbox")),
                   *t = json_string_value(json_object_get(rec, "trajectory"));
        if (rec && (!sandbox || (s && strcmp(s, sandbox) == 0)) &&
            (!trajectory || (t && strcmp(t, trajectory) == 0)))
            json_array_append_new(all, ck_public(rec));
        json_decref(rec);
    }
    closedir(d);
    /* Oldest first. */
    size_t n = json_array_size(all);
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            json_t *a = json_array_get(all, j - 1), *c = json_array_get(all, j);
            if (json_real_value(json_object_get(a, "created")) <=
                json_real_value(json_object_get(c, "created")))
                break;
            json_incref(a);
            json_array_set(all, j - 1, c);
            json_array_set_new(all, j, a);
        }
    return all;
}

/* The request's body: a JSON object ({} when empty) of fields only (NULL-terminated), else NULL
 * once the request is answered 400 (what: the request's name in the answer). */
static json_t *body_object(struct evhttp_request *req, const char *const *fields, const char *what)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    json_t *body = len ? json_loadb((const char *) evbuffer_pullup(in, -1), len, JSON_REJECT_DUPLICATES, NULL)
                       : json_object();
    if (!json_is_object(body)) {
        json_decref(body);
        cdn_api_reply_error(req, 400, "invalid_request", "body", "the body must be a JSON object");
        return NULL;
    }
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        size_t i = 0;
        while (fields[i] && strcmp(key, fields[i]) != 0)
            i++;
        if (!fields[i]) {
            cdn_api_reply_error(req, 400, "invalid_request", key, "%s: not a field of %s", key, what);
            json_decref(body);
            return NULL;
        }
    }
    return body;
}

void cdn_api_checkpoints(struct evhttp_request *req, struct box *b)
{
    struct cdn_error err = {0};
    if (evhttp_request_get_command(req) == EVHTTP_REQ_GET) {
        json_t *all = ck_list(b->sb.id, NULL, &err);
        if (!all)
            return cdn_api_reply_cdn_error(req, 500, "internal", &err);
        return cdn_api_reply_json(req, 200, json_pack("{s:o}", "checkpoints", all));
    }
    /* {"memory"?: bool}: what a checkpoint of this sandbox's tier keeps, said by the client. */
    static const char *const fields[] = {"memory", NULL};
    _cleanup_json_ json_t *body = body_object(req, fields, "a checkpoint");
    if (!body)
        return;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        if (!json_is_boolean(v))
            return cdn_api_reply_error(req, 400, "invalid_request", key, "memory: true or false");
        if (json_is_true(v) != (b->spec.tier == CDN_TIER_MICROVM))
            return cdn_api_reply_error(
                req, 400, "invalid_request", key, "memory: %s",
                json_is_true(v)
                    ? "a checkpoint of tier container keeps its files (its processes start again)"
                    : "a microvm guest's files live in its RAM: its checkpoint is the whole guest");
    }
    if (!cdn_api_box_usable(req, b))
        return;
    int status;
    const char *code;
    json_t *rec = take(b, &status, &code, &err);
    if (!rec)
        return cdn_api_reply_cdn_error(req, status, code, &err);
    json_t *pub = ck_public(rec);
    cdn_standby_want(b, json_string_value(json_object_get(rec, "id")));
    json_decref(rec);
    cdn_api_reply_json(req, 201, pub);
}

/* GET /v1/checkpoints[?sandbox=&trajectory=], GET|DELETE /v1/checkpoints/{ck} */
void cdn_api_checkpoint_route(struct evhttp_request *req, const char *path)
{
    struct cdn_error err = {0};
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    if (!path[0]) {
        if (m != EVHTTP_REQ_GET)
            return cdn_api_reply_error(req, 405, "method_not_allowed", NULL, "/v1/checkpoints takes GET");
        struct evkeyvalq q;
        TAILQ_INIT(&q);
        const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
        if (query && evhttp_parse_query_str(query, &q) < 0)
            return cdn_api_reply_error(req, 400, "invalid_query", NULL, "the query string does not parse");
        const char *sandbox = evhttp_find_header(&q, "sandbox"), *traj = evhttp_find_header(&q, "trajectory");
        json_t *all = ck_list(sandbox, traj, &err);
        evhttp_clear_headers(&q);
        if (!all)
            return cdn_api_reply_cdn_error(req, 500, "internal", &err);
        return cdn_api_reply_json(req, 200, json_pack("{s:o}", "checkpoints", all));
    }
    if (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_DELETE)
        return cdn_api_reply_error(req, 405, "method_not_allowed", NULL, "a checkpoint takes GET or DELETE");
    if (!store_made())
        return cdn_api_reply_error(req, 404, "checkpoint_not_found", "checkpoint", "no checkpoint '%.32s'",
                                   path);
    _cleanup_close_ int dir = ck_dir(&err);
    if (dir < 0)
        return cdn_api_reply_cdn_error(req, 500, "internal", &err);
    json_t *rec = ck_load(dir, path, &err);
    if (!rec)
        return cdn_api_reply_cdn_error(req, err.errnum == ENOENT ? 404 : 500,
                                       err.errnum == ENOENT ? "checkpoint_not_found" : "internal", &err);
    if (m == EVHTTP_REQ_GET) {
        json_t *pub = ck_public(rec);
        json_decref(rec);
        return cdn_api_reply_json(req, 200, pub);
    }
    json_decref(rec);
    cdn_standby_forget(path);
    char name[64];
    (void) snprintf(name, sizeof name, "%s.json", path);
    (void) unlinkat(dir, name, 0); /* the record first: an image without one is nobody's */
    (void) snprintf(name, sizeof name, "%s.img", path);
    (void) unlinkat(dir, name, 0);
    (void) snprintf(name, sizeof name, "%s.vm", path);
    (void) unlinkat(dir, name, 0);
    cdn_api_reply_json(req, 200, json_pack("{s:s, s:b}", "id", path, "deleted", 1));
}

/* Whether b's spec asks its guest for something other than what checkpoint ck's guest was set up
 * with (its IDENTITY and POLICY, which a restored guest keeps: it is only told of its network): err
 * names the first field that differs. */
static bool guest_spec_differs(struct box *b, const char *ck, const json_t *rec, struct cdn_error *err)
{
    static const char *const fields[] = {
        "image",       "hostname",      "workdir",         "user",
        "protect",     "on_violation",  "writable_system", "limits.memory_mb",
        "limits.pids", "limits.nofile", "limits.disk_mb",  "limits.cpus"};
    _cleanup_free_ char *s = cdn_spec_to_json(&b->spec);
    _cleanup_json_ json_t *now = s ? json_loads(s, 0, NULL) : NULL;
    const json_t *then = json_object_get(rec, "spec");
    if (!now || !json_is_object(then)) {
        cdn_error_field(err, EBADMSG, "checkpoint", "checkpoint '%s': its record has no guest's spec", ck);
        return true;
    }
    for (size_t i = 0; i < ELEMENTSOF(fields); i++) {
        const char *f = fields[i], *dot = strchr(f, '.');
        const json_t *a = dot ? json_object_get(json_object_get(now, "limits"), dot + 1)
                              : json_object_get(now, f),
                     *c = dot ? json_object_get(json_object_get(then, "limits"), dot + 1)
                              : json_object_get(then, f);
        bool same = a && c ? json_equal((json_t *) a, (json_t *) c) : a == c;
        if (!same && a && c && strcmp(f, "limits.cpus") == 0) /* the guest's vCPUs: its quota may differ */
            same = ceil(json_number_value(a)) == ceil(json_number_value(c));
        if (!same) {
            _cleanup_free_ char *was = c ? json_dumps(c, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
            _cleanup_free_ char *is = a ? json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
            cdn_error_field(
                err, EINVAL, f,
                "%s: checkpoint '%s' is of a guest set up with %.200s, not %.200s (a restored guest "
                "keeps what it was set up with)",
                f, ck, was ? was : "none", is ? is : "none");
            return true;
        }
    }
    return false;
}

/* A new microvm guest restored from checkpoint rec's (a fork's, a resume's): the guest of then, of
 * its shape (its RAM and vCPUs are the saved machine's, as a layer's size is the checkpoint's) and of
 * everything it was set up with, told of its own network. */
static int prepare_guest(struct box *b, int dir, const json_t *rec, struct cdn_error *err)
{
    const char *ck = b->spec.checkpoint;
    const json_t *lim = json_object_get(json_object_get(rec, "spec"), "limits");
    json_int_t mb = json_integer_value(json_object_get(lim, "memory_mb"));
    double cpus = json_number_value(json_object_get(lim, "cpus"));
    if (mb <= 0 || cpus <= 0)
        return cdn_error_field(err, EBADMSG, "checkpoint", "checkpoint '%s': its record has no guest's spec",
                               ck);
    b->spec.limits.memory_mb = (uint64_t) mb;
    b->spec.limits.cpus = cpus;
    if (guest_spec_differs(b, ck, rec, err))
        return -1;
    char name[64];
    (void) snprintf(name, sizeof name, "%s.vm", ck);
    int fd = openat(dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return cdn_error_field(err, errno, "checkpoint", "checkpoint '%s': its saved guest: %m", ck);
    b->spec.checkpoints = true;
    b->sb.memory_from_fd = fd;
    b->start_answers = b->sb.tier->start_answers - 1; /* set up already: its one answer is RESUME's */
    return 0;
}

int cdn_checkpoint_prepare(struct box *b, struct cdn_error *err)
{
    if (!b->spec.checkpoint)
        return 0;
    _cleanup_close_ int dir = ck_dir(err);
    if (dir < 0)
        return -1;
    _cleanup_json_ json_t *rec = ck_load(dir, b->spec.checkpoint, err);
    if (!rec)
        return -1;
    const bool memory = json_is_true(json_object_get(rec, "memory"));
    if (memory != (b->spec.tier == CDN_TIER_MICROVM))
        return cdn_error_field(err, EINVAL, "checkpoint", "checkpoint '%s' is of a %s, not of tier %s",
                               b->spec.checkpoint, memory ? "microvm guest" : "container",
                               cdn_tier_to_string(b->spec.tier));
    if (memory)
        return prepare_guest(b, dir, rec, err);
    char img[64];
    (void) snprintf(img, sizeof img, "%s.img", b->spec.checkpoint);
    int fd = openat(dir, img, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    uint32_t base;
    if (fd < 0 || cdn_layer_uid_base(fd, &base) < 0) {
        int e = errno;
        safe_close(fd);
        return cdn_error_field(err, e, "checkpoint", "checkpoint '%s': its layer: %s", b->spec.checkpoint,
                               strerror(e));
    }
    /* Its layer is of its own size, whatever the spec says. */
    json_int_t mb = json_integer_value(json_object_get(rec, "disk_mb"));
    if (mb > 0)
        b->spec.limits.disk_mb = (uint64_t) mb;
    b->spec.checkpoints = true;
    b->sb.layer_from_fd = fd;
    b->sb.layer_from_base = base;
    return 0;
}

/* ---- fork ---- */

struct fork_op {
    struct evhttp_request *req;
    char parent[CDN_ID_LEN + 1]; /* whose standby waits meanwhile */
    unsigned n, pending;
    char checkpoint[CDN_CHECKPOINT_ID_LEN + 1];
    json_t *made;    /* the boxes' ids, as they came */
    json_t *answers; /* the boxes, in the order of their names (b1, b2, …), not as they came */
    struct fork_child *kids;
    struct cdn_error first_err;
    int first_status;
    const char *first_code;
};

/* One child's waiter: where its answer goes. */
struct fork_child {
    struct fork_op *f;
    size_t index;
};

static void fork_done(void *arg, struct box *b, enum cdn_box_created how, const struct cdn_error *err)
{
    struct fork_child *c = arg;
    struct fork_op *f = c->f;
    if (how == CDN_BOX_CREATED) {
        json_array_append_new(f->made, json_string(b->sb.id));
        json_array_set_new(f->answers, c->index, cdn_box_to_json(b));
    } else if (!f->first_status) {
        f->first_err = *err;
        f->first_status = how == CDN_BOX_TOO_MANY ? 429 : how == CDN_BOX_STOPPING ? 503 : 500;
        f->first_code = how == CDN_BOX_TOO_MANY   ? "too_many_sandboxes"
                        : how == CDN_BOX_STOPPING ? "stopping"
                                                  : "sandbox_failed";
    }
    if (--f->pending)
        return;
    if (f->first_status) { /* all or none: the ones made go again */
        size_t i;
        json_t *id;
        json_array_foreach(f->made, i, id)
        {
            struct box *m = cdn_box_find(json_string_value(id));
            if (m)
                cdn_box_delete(m, "its fork failed");
        }
        cdn_api_reply_cdn_error(f->req, f->first_status, f->first_code, &f->first_err);
    } else {
        cdn_api_reply_json(f->req, 201,
                           json_pack("{s:s, s:O}", "checkpoint", f->checkpoint, "sandboxes", f->answers));
    }
    struct box *parent = cdn_box_find(f->parent);
    if (parent)
        cdn_standby_go(parent);
    json_decref(f->made);
    json_decref(f->answers);
    free(f->kids);
    free(f);
}

void cdn_api_fork(struct evhttp_request *req, struct box *b)
{
    struct cdn_error err = {0};
    static const char *const fields[] = {"checkpoint", "count", "labels", NULL};
    _cleanup_json_ json_t *body = body_object(req, fields, "a fork");
    if (!body)
        return;
    const char *key;
    json_t *v;
    json_t *cv = json_object_get(body, "count"), *ckv = json_object_get(body, "checkpoint"),
           *lv = json_object_get(body, "labels");
    json_int_t count = cv ? (json_is_integer(cv) ? json_integer_value(cv) : -1) : 1;
    if (count < 1 || count > FORK_MAX)
        return cdn_api_reply_error(req, 400, "invalid_request", "count", "count: an integer 1-%d", FORK_MAX);
    if (ckv && !json_is_string(ckv))
        return cdn_api_reply_error(req, 400, "invalid_request", "checkpoint",
                                   "checkpoint: a checkpoint's id");
    if (lv && !json_is_object(lv))
        return cdn_api_reply_error(req, 400, "invalid_request", "labels", "labels: an object of strings");
    json_object_foreach(lv, key, v)
    {
        if (!json_is_string(v))
            return cdn_api_reply_error(req, 400, "invalid_request", "labels", "labels.%s: must be a string",
                                       key);
    }
    if (!cdn_api_box_usable(req, b))
        return;
    if (cdn_daemon->n_boxes + (unsigned) count > cdn_daemon->cfg.max_sandboxes)
        return cdn_api_reply_error(req, 429, "too_many_sandboxes", "count",
                                   "%u sandboxes exist; %lld more would pass the configured maximum %u",
                                   cdn_daemon->n_boxes, (long long) count, cdn_daemon->cfg.max_sandboxes);
    /* The checkpoint: the one named (this sandbox's), or one taken now. */
    _cleanup_json_ json_t *rec = NULL;
    if (ckv) {
        _cleanup_close_ int dir = ck_dir(&err);
        if (dir < 0)
            return cdn_api_reply_cdn_error(req, 500, "internal", &err);
        if (!(rec = ck_load(dir, json_string_value(ckv), &err)))
            return cdn_api_reply_cdn_error(req, err.errnum == ENOENT ? 404 : 500,
                                           err.errnum == ENOENT ? "checkpoint_not_found" : "internal", &err);
        const char *of = json_string_value(json_object_get(rec, "sandbox"));
        if (!of || strcmp(of, b->sb.id) != 0)
            return cdn_api_reply_error(req, 409, "checkpoint_mismatch", "checkpoint",
                                       "checkpoint '%s' is of sandbox %s, not of %s", json_string_value(ckv),
                                       of ?: "?", b->sb.id);
    } else {
        int status;
        const char *code;
        if (!(rec = take(b, &status, &code, &err)))
            return cdn_api_reply_cdn_error(req, status, code, &err);
    }
    const char *ck = json_string_value(json_object_get(rec, "id"));
    const char *traj = json_string_value(json_object_get(rec, "trajectory"));
    json_int_t step = json_integer_value(json_object_get(rec, "step"));
    json_t *spec0 = json_object_get(rec, "spec");
    if (!json_is_object(spec0))
        return cdn_api_reply_error(req, 500, "internal", "checkpoint", "checkpoint '%s' has no spec", ck);
    /* The children's labels: the parent's, and the fork's over them. */
    json_t *labels = json_object_get(spec0, "labels");
    if (!json_is_object(labels))
        (void) json_object_set_new(spec0, "labels", labels = json_object());
    if (lv)
        (void) json_object_update(labels, lv);
    (void) json_object_set_new(spec0, "checkpoint", json_string(ck));
    (void) json_object_del(spec0, "trajectory");
    /* The children's trajectories: ID/bK for the first N names K = 1, 2, … that no earlier fork took (a
     * log with steps, or a running sandbox), each with the parent's steps up to the checkpoint. */
    char child[CDN_TRAJECTORY_ID_MAX + 16];
    unsigned names[FORK_MAX];
    for (unsigned i = 0, k = 1; traj && i < (unsigned) count; k++) {
        (void) snprintf(child, sizeof child, "%s/b%u", traj, k);
        if (k > 100000 || !cdn_trajectory_id_valid(child))
            return cdn_api_reply_error(req, 400, "invalid_request", "trajectory",
                                       "trajectory '%s': no name left for a fork's branch", traj);
        uint64_t has = 0;
        bool used = cdn_traj_steps_quiet(child, &has) < 0 || has > 0;
        struct box *o;
        LIST_FOREACH(o, &cdn_daemon->boxes, link)
        used = used || (o->spec.trajectory && strcmp(o->spec.trajectory, child) == 0 && !o->dying);
        if (used)
            continue;
        if (cdn_traj_fork(traj, (uint64_t) step, child, &err) < 0)
            return cdn_api_reply_cdn_error(req, err.errnum == EBUSY ? 409 : 500,
                                           err.errnum == EBUSY ? "step_in_progress" : "internal", &err);
        names[i++] = k;
    }
    struct fork_op *f = calloc(1, sizeof *f);
    if (!f || !(f->made = json_array()) || !(f->answers = json_array()) ||
        !(f->kids = calloc((size_t) count, sizeof *f->kids))) {
        if (f) {
            json_decref(f->made);
            json_decref(f->answers);
            free(f);
        }
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    }
    for (json_int_t i = 0; i < count; i++)
        if (json_array_append_new(f->answers, json_null()) < 0) {
            json_decref(f->made);
            json_decref(f->answers);
            free(f->kids);
            free(f);
            return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
        }
    f->req = req;
    (void) snprintf(f->parent, sizeof f->parent, "%s", b->sb.id);
    cdn_standby_wait(b);
    f->n = f->pending = (unsigned) count;
    (void) snprintf(f->checkpoint, sizeof f->checkpoint, "%s", ck);
    for (json_int_t i = 1; i <= count; i++) {
        struct cdn_spec spec;
        struct cdn_error e = {0};
        struct fork_child *kid = &f->kids[i - 1];
        *kid = (struct fork_child){.f = f, .index = (size_t) (i - 1)};
        if (traj) {
            (void) snprintf(child, sizeof child, "%s/b%u", traj, names[i - 1]);
            (void) json_object_set_new(spec0, "trajectory", json_string(child));
        }
        _cleanup_free_ char *s = json_dumps(spec0, JSON_COMPACT);
        int r = cdn_spec_init(&spec);
        if (r >= 0)
            r = s ? cdn_spec_from_json(&spec, s, strlen(s), &e) : cdn_error_set(&e, ENOMEM, "out of memory");
        if (r >= 0)
            r = cdn_spec_validate(&spec, &e);
        if (r < 0) {
            cdn_spec_free(&spec);
            fork_done(kid, NULL, CDN_BOX_FAILED, &e);
            continue;
        }
        cdn_box_create(&spec, (struct cdn_box_waiter){.done = fork_done, .arg = kid});
    }
}

void cdn_checkpoint_sweep(void)
{
    char path[4200];
    (void) snprintf(path, sizeof path, "%s/store.xfs", cdn_state_dir());
    struct cdn_error err = {0};
    if (access(path, F_OK) < 0)
        return; /* no store yet: nothing of it to sweep */
    int store = cdn_layer_store(&err);
    if (store < 0) {
        fprintf(stderr, "cordond: the checkpoint store: %s\n", err.msg);
        return;
    }
    /* What a cordond killed in the middle of a checkpoint left: a record's temporary copy, an image
     * without its record. */
    int cfd = openat(store, "checkpoints", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *cd = cfd < 0 ? NULL : fdopendir(cfd);
    struct dirent *ce;
    while (cd && (ce = readdir(cd))) {
        size_t n = strlen(ce->d_name);
        char rec[64];
        if (n > 4 && strcmp(ce->d_name + n - 4, ".tmp") == 0) {
            (void) unlinkat(dirfd(cd), ce->d_name, 0);
        } else if ((n == CDN_CHECKPOINT_ID_LEN + 4 &&
                    strcmp(ce->d_name + CDN_CHECKPOINT_ID_LEN, ".img") == 0) ||
                   (n == CDN_CHECKPOINT_ID_LEN + 3 &&
                    strcmp(ce->d_name + CDN_CHECKPOINT_ID_LEN, ".vm") == 0)) {
            (void) snprintf(rec, sizeof rec, "%.*s.json", CDN_CHECKPOINT_ID_LEN, ce->d_name);
            if (faccessat(dirfd(cd), rec, F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
                (void) unlinkat(dirfd(cd), ce->d_name, 0);
        }
    }
    if (cd)
        closedir(cd);
    else
        safe_close(cfd);
    int fd = openat(store, "layers", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        safe_close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strlen(de->d_name) != CDN_ID_LEN)
            continue; /* ".", "..", the templates */
        struct box *b = cdn_box_find(de->d_name);
        if (!b) { /* its sandbox is gone (a crash of cordond between its end and this) */
            (void) unlinkat(dirfd(d), de->d_name, 0);
            continue;
        }
        /* A cordond that died between a freeze and its thaw left the layer frozen: thawed. */
        _cleanup_close_ int file = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        struct cdn_error e = {0};
        int root = file < 0 ? -1 : layer_root(b, file, &e);
        if (root >= 0)
            (void) ioctl(root, FITHAW, 0);
    }
    closedir(d);
}

/* ---- rollback ---- */

struct rollback_op {
    struct evhttp_request *req;
    char checkpoint[CDN_CHECKPOINT_ID_LEN + 1];
    uint64_t steps; /* how many a rollback took off the trajectory */
};

static void rollback_done(void *arg, struct box *b, enum cdn_box_created how, const struct cdn_error *err)
{
    struct rollback_op *op = arg;
    if (how == CDN_BOX_CREATED) {
        json_t *o = cdn_box_to_json(b);
        if (o)
            (void) json_object_update_new(o, json_pack("{s:s, s:I}", "checkpoint", op->checkpoint,
                                                       "rolled_back_steps", (json_int_t) op->steps));
        cdn_api_reply_json(op->req, 200, o);
        cdn_standby_want(b, op->checkpoint); /* the next rollback's */
    } else {
        cdn_api_reply_cdn_error(op->req, 500, "rollback_failed", err);
    }
    free(op);
}

void cdn_api_rollback(struct evhttp_request *req, struct box *b)
{
    struct cdn_error err = {0};
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    _cleanup_json_ json_t *body =
        len ? json_loadb((const char *) evbuffer_pullup(in, -1), len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    const char *key;
    json_t *v;
    if (!json_is_object(body))
        return cdn_api_reply_error(req, 400, "invalid_request", "body",
                                   "the body must be {\"checkpoint\": ID}");
    json_object_foreach(body, key, v)
    {
        if (strcmp(key, "checkpoint") != 0)
            return cdn_api_reply_error(req, 400, "invalid_request", key, "%s: not a field of a rollback",
                                       key);
    }
    const char *ck = json_string_value(json_object_get(body, "checkpoint"));
    if (!ck)
        return cdn_api_reply_error(req, 400, "invalid_request", "checkpoint",
                                   "checkpoint: a checkpoint's id");
    if (!cdn_api_box_usable(req, b))
        return;
    if (!b->spec.checkpoints)
        return cdn_api_reply_error(req, 409, "checkpoints_off", NULL,
                                   "sandbox %s keeps no checkpoints: create it with \"checkpoints\": true",
                                   b->sb.id);
    _cleanup_close_ int dir = ck_dir(&err);
    if (dir < 0)
        return cdn_api_reply_cdn_error(req, 500, "internal", &err);
    _cleanup_json_ json_t *rec = ck_load(dir, ck, &err);
    if (!rec)
        return cdn_api_reply_cdn_error(req, err.errnum == ENOENT ? 404 : 500,
                                       err.errnum == ENOENT ? "checkpoint_not_found" : "internal", &err);
    /* Its own checkpoints, or the one it was made from (a fork's, a resume's). */
    const char *of = json_string_value(json_object_get(rec, "sandbox"));
    if ((!of || strcmp(of, b->sb.id) != 0) && (!b->spec.checkpoint || strcmp(b->spec.checkpoint, ck) != 0))
        return cdn_api_reply_error(
            req, 409, "checkpoint_mismatch", "checkpoint",
            "checkpoint '%s' is of sandbox %s, not of %s (nor the one it was made from)", ck, of ?: "?",
            b->sb.id);
    char img[64];
    const bool memory = json_is_true(json_object_get(rec, "memory"));
    if (memory != (b->spec.tier == CDN_TIER_MICROVM))
        return cdn_api_reply_error(req, 409, "checkpoint_mismatch", "checkpoint",
                                   "checkpoint '%s' is not of tier %s", ck, cdn_tier_to_string(b->spec.tier));
    struct cdn_error serr = {0};
    if (memory && guest_spec_differs(b, ck, rec, &serr))
        return cdn_api_reply_cdn_error(req, 409, "checkpoint_mismatch", &serr);
    (void) snprintf(img, sizeof img, "%s.%s", ck, memory ? "vm" : "img");
    _cleanup_close_ int fd = openat(dir, img, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    uint32_t base = 0;
    if (fd < 0 || (!memory && cdn_layer_uid_base(fd, &base) < 0))
        return cdn_api_reply_error(req, 500, "internal", "checkpoint", "checkpoint '%s': its %s: %s", ck,
                                   memory ? "saved guest" : "layer", strerror(errno));
    /* Everything that could refuse it is asked first: past here its trajectory changes. */
    if (cdn_box_respawn_check(b, &err) < 0)
        return cdn_api_reply_cdn_error(req, 409, "sandbox_busy", &err);
    struct rollback_op *op = calloc(1, sizeof *op);
    if (!op)
        return cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
    op->req = req;
    (void) snprintf(op->checkpoint, sizeof op->checkpoint, "%s", ck);
    /* The trajectory goes back to the checkpoint's step: the later ones are kept, marked rolled back.
     * The checkpoint's step counts in this trajectory when it is the checkpoint's or a fork of it
     * (T/bN shares T's steps up to the fork); a trajectory begun on another's checkpoint began there. */
    const char *ct = json_string_value(json_object_get(rec, "trajectory")), *t = b->spec.trajectory;
    size_t cl = ct ? strlen(ct) : 0;
    uint64_t k = ct && t && (strcmp(ct, t) == 0 || (strncmp(t, ct, cl) == 0 && strncmp(t + cl, "/b", 2) == 0))
                     ? (uint64_t) json_integer_value(json_object_get(rec, "step"))
                     : 0;
    cdn_checkpoint_before_step(b);            /* the last step's, if still due, before its files go */
    if (cdn_box_respawn_check(b, &err) < 0) { /* that checkpoint may have ended it */
        free(op);
        return cdn_api_reply_cdn_error(req, 409, "sandbox_busy", &err);
    }
    if (t && cdn_traj_rollback(t, k, ck, &op->steps, &err) < 0) {
        free(op);
        return cdn_api_reply_cdn_error(req, err.errnum == EBUSY ? 409 : 500,
                                       err.errnum == EBUSY ? "step_in_progress" : "internal", &err);
    }
    /* The layer made ahead for ck, if it is; one for another checkpoint goes now, before it is made
     * beside this rollback (the next standby is ck's, once it runs). */
    if (!memory && !(b->sb.layer_ready = cdn_standby_take(b, ck)))
        cdn_standby_drop(b);
    /* b may be gone once this fails (deleted): not touched after it. */
    int r = cdn_box_respawn(b, memory ? -EBADF : fd, base, memory ? fd : -EBADF,
                            (struct cdn_box_waiter){.done = rollback_done, .arg = op}, &err);
    if (r < 0) {
        cdn_api_reply_cdn_error(req, err.errnum == EBUSY ? 409 : 500,
                                err.errnum == EBUSY ? "sandbox_busy" : "rollback_failed", &err);
        free(op);
    }
}

/* ---- resume ---- */

static void resume_done(void *arg, struct box *b, enum cdn_box_created how, const struct cdn_error *err)
{
    struct rollback_op *op = arg;
    if (how == CDN_BOX_CREATED) {
        json_t *o = cdn_box_to_json(b);
        if (o)
            (void) json_object_update_new(o, json_pack("{s:b, s:s, s:I}", "resumed", 1, "checkpoint",
                                                       op->checkpoint, "rolled_back_steps",
                                                       (json_int_t) op->steps));
        cdn_api_reply_json(op->req, 201, o);
    } else {
        cdn_api_reply_cdn_error(op->req,
                                how == CDN_BOX_TOO_MANY   ? 429
                                : how == CDN_BOX_STOPPING ? 503
                                                          : 500,
                                how == CDN_BOX_TOO_MANY   ? "too_many_sandboxes"
                                : how == CDN_BOX_STOPPING ? "stopping"
                                                          : "sandbox_failed",
                                err);
    }
    free(op);
}

void cdn_api_traj_resume(struct evhttp_request *req, const char *id)
{
    struct cdn_error err = {0};
    if (!cdn_trajectory_id_valid(id))
        return cdn_api_reply_error(req, 400, "invalid_request", "id", "'%.64s' is not a trajectory's id", id);
    /* Its sandbox alive: that one. */
    struct box *b;
    LIST_FOREACH(b, &cdn_daemon->boxes, link)
    if (b->spec.trajectory && strcmp(b->spec.trajectory, id) == 0 && b->state != BOX_EXITED && !b->dying) {
        if (b->state != BOX_RUNNING)
            return cdn_api_reply_error(req, 409, "trajectory_in_use", "id",
                                       "trajectory '%s': its sandbox %s is starting", id, b->sb.id);
        json_t *o = cdn_box_to_json(b);
        if (o)
            (void) json_object_set_new(o, "resumed", json_false());
        return cdn_api_reply_json(req, 200, o);
    }
    /* Gone: a new one from its newest checkpoint, the trajectory back at that checkpoint's step. */
    _cleanup_json_ json_t *all = ck_list(NULL, id, &err);
    if (!all)
        return cdn_api_reply_cdn_error(req, 500, "internal", &err);
    size_t n = json_array_size(all);
    if (!n)
        return cdn_api_reply_error(req, 404, "checkpoint_not_found", "id",
                                   "trajectory '%s' has no running sandbox and no checkpoint to resume from",
                                   id);
    const char *ck = json_string_value(json_object_get(json_array_get(all, n - 1), "id"));
    _cleanup_close_ int dir = ck_dir(&err);
    _cleanup_json_ json_t *rec = dir < 0 ? NULL : ck_load(dir, ck, &err);
    json_t *spec0 = json_object_get(rec, "spec");
    if (!json_is_object(spec0))
        return cdn_api_reply_cdn_error(req, 500, "internal", &err);
    (void) json_object_set_new(spec0, "checkpoint", json_string(ck));
    (void) json_object_set_new(spec0, "trajectory", json_string(id));
    _cleanup_free_ char *s = json_dumps(spec0, JSON_COMPACT);
    struct cdn_spec spec;
    int r = cdn_spec_init(&spec);
    if (r >= 0)
        r = s ? cdn_spec_from_json(&spec, s, strlen(s), &err) : cdn_error_set(&err, ENOMEM, "out of memory");
    if (r >= 0)
        r = cdn_spec_validate(&spec, &err);
    struct rollback_op *op = r < 0 ? NULL : calloc(1, sizeof *op);
    if (!op) {
        cdn_spec_free(&spec);
        return cdn_api_reply_cdn_error(req, 500, "internal", &err);
    }
    op->req = req;
    (void) snprintf(op->checkpoint, sizeof op->checkpoint, "%s", ck);
    if (cdn_traj_rollback(id, (uint64_t) json_integer_value(json_object_get(rec, "step")), ck, &op->steps,
                          &err) < 0) {
        cdn_spec_free(&spec);
        free(op);
        return cdn_api_reply_cdn_error(req, err.errnum == EBUSY ? 409 : 500,
                                       err.errnum == EBUSY ? "step_in_progress" : "internal", &err);
    }
    cdn_box_create(&spec, (struct cdn_box_waiter){.done = resume_done, .arg = op});
}
