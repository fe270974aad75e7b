/* Trajectories: each one's step log (trajectory.h, docs/trajectories.md). The log is append-only
 * JSONL; the offset of every line is kept in memory, so that a replayed step is one pread. A line
 * that a crash cut short (no newline at the end of the file) is cut off when the log is opened: it
 * was never answered. */
#include "trajectory.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/file.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "core/json-util.h"
#include "oci/digest.h"
#include "registry.h"
#include "shared/fd-util.h"

#define LOG_NAME     "steps.jsonl"
#define ROLLED_NAME  "rolled_back.jsonl"
#define LOG_MAX      (1ULL << 32) /* a log past 4 GiB takes no more steps */
#define LINE_MAX_LEN (64u << 20)  /* one step's line, its outputs in base64 included */

#define OPEN_MAX 256 /* logs kept open; past it the least recently used idle one is closed */

struct trajectory {
    char id[CDN_TRAJECTORY_ID_MAX + 1];
    int fd;        /* flock'd: one cordond writes a log */
    uint64_t n;    /* steps recorded */
    uint64_t *off; /* off[i]: where step i's line starts; off[n]: the log's end */
    size_t cap;
    bool busy;                   /* a step runs */
    bool broken;                 /* a failed write could not be undone: the log takes no more steps */
    char owner[CDN_ID_LEN + 1];  /* the sandbox whose steps it records now */
    LIST_ENTRY(trajectory) link; /* most recently used first */
};

static LIST_HEAD(, trajectory) trajs = LIST_HEAD_INITIALIZER(trajs);
static unsigned n_open;

static double now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static int log_path(const char *id, char *buf, size_t size)
{
    return (size_t) snprintf(buf, size, "%s/trajectories/%s/" LOG_NAME, cdn_daemon->cfg.state_dir, id) >= size
               ? -ENAMETOOLONG
               : 0;
}

/* mkdir -p of path's directory, each made one fsync'd in its parent (the log outlives a crash). */
static int make_dirs(char *path)
{
    for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        int r = mkdir(path, 0700);
        int e = errno;
        if (r == 0) {
            char *slash = strrchr(path, '/');
            *slash = 0;
            _cleanup_close_ int d = open(path[0] ? path : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            *slash = '/';
            if (d >= 0)
                (void) fsync(d);
        }
        *s = '/';
        if (r < 0 && e != EEXIST)
            return -e;
    }
    return 0;
}

static int push_off(struct trajectory *t, uint64_t off)
{
    if (t->n + 1 >= t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        uint64_t *o = realloc(t->off, cap * sizeof *o);
        if (!o)
            return -ENOMEM;
        t->off = o;
        t->cap = cap;
    }
    t->off[t->n + 1] = off;
    return 0;
}

/* The line offsets of an opened log; a last line without its newline is cut off. */
static int scan(struct trajectory *t)
{
    static char buf[1 << 16];
    uint64_t pos = 0, start = 0;
    t->n = 0;
    if (push_off(t, 0) < 0)
        return -ENOMEM;
    t->off[0] = 0;
    for (;;) {
        ssize_t k = pread(t->fd, buf, sizeof buf, (off_t) pos);
        if (k < 0)
            return -errno;
        if (k == 0)
            break;
        for (ssize_t i = 0; i < k; i++)
            if (buf[i] == '\n') {
                start = pos + (uint64_t) i + 1;
                if (push_off(t, start) < 0)
                    return -ENOMEM;
                t->n++;
            }
        pos += (uint64_t) k;
    }
    if (pos != start && ftruncate(t->fd, (off_t) start) < 0) /* a step that was never answered */
        return -errno;
    return 0;
}

static void traj_free(struct trajectory *t)
{
    if (t->fd >= 0)
        close(t->fd);
    free(t->off);
    free(t);
}

static struct trajectory *find(const char *id)
{
    struct trajectory *t;
    LIST_FOREACH(t, &trajs, link)
    if (strcmp(t->id, id) == 0) {
        LIST_REMOVE(t, link);
        LIST_INSERT_HEAD(&trajs, t, link);
        return t;
    }
    return NULL;
}

/* Room for one more open log: the least recently used one without a step running goes (it is
 * opened and scanned again when next used). */
static void make_room(void)
{
    if (n_open < OPEN_MAX)
        return;
    struct trajectory *t, *last = NULL;
    LIST_FOREACH(t, &trajs, link)
    if (!t->busy)
        last = t;
    if (last) {
        LIST_REMOVE(last, link);
        traj_free(last);
        n_open--;
    }
}

/* The trajectory id's log, opened (made when create) and scanned; NULL and err. */
static struct trajectory *open_traj(const char *id, bool create, struct cdn_error *err)
{
    struct trajectory *t = find(id);
    if (t)
        return t;
    char path[4400];
    if (log_path(id, path, sizeof path) < 0) {
        cdn_error_set(err, ENAMETOOLONG, "trajectory '%s': its log's path is too long", id);
        return NULL;
    }
    int r = create ? make_dirs(path) : 0;
    if (r < 0) {
        cdn_error_set(err, -r, "trajectory '%s': make its directory: %s", id, strerror(-r));
        return NULL;
    }
    make_room();
    int fd = open(path, O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
    if (fd < 0) {
        cdn_error_set(err, errno,
                      errno == ENOENT ? "no trajectory '%s'" : "trajectory '%s': open its log: %m", id);
        return NULL;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) { /* another cordond on this state directory writes it */
        int e = errno;
        cdn_error_set(err, e == EWOULDBLOCK ? EBUSY : e, "trajectory '%s': its log is %s", id,
                      e == EWOULDBLOCK ? "another cordond's" : "not lockable");
        close(fd);
        return NULL;
    }
    if (create) { /* the log's name in its directory, on disk before any step is answered */
        *strrchr(path, '/') = 0;
        _cleanup_close_ int d = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d >= 0)
            (void) fsync(d);
    }
    if (!(t = calloc(1, sizeof *t))) {
        close(fd);
        cdn_error_set(err, ENOMEM, "out of memory");
        return NULL;
    }
    t->fd = fd;
    (void) snprintf(t->id, sizeof t->id, "%s", id);
    if ((r = scan(t)) < 0) {
        cdn_error_set(err, -r, "trajectory '%s': read its log: %s", id, strerror(-r));
        traj_free(t);
        return NULL;
    }
    LIST_INSERT_HEAD(&trajs, t, link);
    n_open++;
    return t;
}

/* Step k's line, parsed; NULL and err. */
static json_t *read_step(struct trajectory *t, uint64_t k, struct cdn_error *err)
{
    uint64_t len = t->off[k + 1] - t->off[k];
    if (len > LINE_MAX_LEN) {
        cdn_error_set(err, EFBIG, "trajectory '%s': step %llu's line is over %u bytes", t->id,
                      (unsigned long long) k, LINE_MAX_LEN);
        return NULL;
    }
    _cleanup_free_ char *buf = malloc(len ? len : 1);
    ssize_t got = buf ? pread(t->fd, buf, len, (off_t) t->off[k]) : -1;
    if (got != (ssize_t) len) {
        cdn_error_set(err, got < 0 ? errno : EIO, "trajectory '%s': read step %llu", t->id,
                      (unsigned long long) k);
        return NULL;
    }
    json_error_t je;
    json_t *o = json_loadb(buf, len, 0, &je);
    if (!json_is_object(o) || json_integer_value(json_object_get(o, "step")) != (json_int_t) k) {
        cdn_error_set(err, EBADMSG, "trajectory '%s': step %llu's line is not that step's record%s%s", t->id,
                      (unsigned long long) k, o ? "" : ": ", o ? "" : je.text);
        json_decref(o);
        return NULL;
    }
    return o;
}

static int digest_of(const json_t *request, char out[72])
{
    _cleanup_free_ char *s = json_dumps(request, JSON_COMPACT | JSON_SORT_KEYS);
    _cleanup_hasher_ struct cdn_hasher *h = NULL;
    if (!s || cdn_hasher_new("sha256", &h) < 0)
        return -ENOMEM;
    cdn_hasher_update(h, s, strlen(s));
    char d[CDN_DIGEST_MAX];
    cdn_hasher_digest(h, d);
    (void) snprintf(out, 72, "%s", d);
    return 0;
}

int cdn_traj_begin(struct box *b, const char *kind, json_t *request, bool has_k, uint64_t k,
                   struct traj_step *s, json_t **ret_recorded, int *status, const char **code,
                   struct cdn_error *err)
{
    _cleanup_json_ json_t *req = request;
    *s = (struct traj_step){0};
    *ret_recorded = NULL;
    *status = 500;
    *code = "trajectory_failed";
    cdn_checkpoint_before_step(b); /* the last step's, if still due: it is of that step's files */
    struct trajectory *t = open_traj(b->spec.trajectory, true, err);
    if (!t)
        return -err->errnum;
    char digest[72];
    if (!req || digest_of(req, digest) < 0)
        return cdn_error_set(err, ENOMEM, "out of memory");
    if (t->broken)
        return cdn_error_set(
            err, EIO,
            "trajectory '%s': a step's line could not be undone after a failed write: its log "
            "takes no more steps",
            t->id);
    *status = 409;
    struct box *other = t->owner[0] && strcmp(t->owner, b->sb.id) != 0 ? cdn_box_find(t->owner) : NULL;
    if (other && other->state != BOX_EXITED && !other->dying) {
        *code = "trajectory_in_use";
        return cdn_error_field(err, EBUSY, "trajectory", "trajectory '%s' is sandbox %s's", t->id, t->owner);
    }
    if (t->busy) {
        *code = "step_in_progress";
        return cdn_error_field(err, EBUSY, "step",
                               "trajectory '%s': step %llu runs; its steps run one at a time", t->id,
                               (unsigned long long) t->n);
    }
    if (has_k && k > t->n) {
        *code = "step_ahead";
        return cdn_error_field(
            err, ERANGE, "step", "step %llu: trajectory '%s' has %llu steps, the next is %llu",
            (unsigned long long) k, t->id, (unsigned long long) t->n, (unsigned long long) t->n);
    }
    if (has_k && k < t->n) {
        json_t *rec = read_step(t, k, err);
        if (!rec) {
            *status = 500;
            return -err->errnum;
        }
        const char *was = json_string_value(json_object_get(rec, "digest"));
        const char *was_kind = json_string_value(json_object_get(rec, "kind"));
        if (was && strcmp(was, digest) == 0 && was_kind && strcmp(was_kind, kind) == 0) {
            *ret_recorded = rec;
            return TRAJ_REPLAY;
        }
        _cleanup_free_ char *what = json_dumps(json_object_get(rec, "request"), JSON_COMPACT);
        json_decref(rec);
        *code = "step_mismatch";
        return cdn_error_field(
            err, EEXIST, "step",
            "step %llu of trajectory '%s' was another request (%.200s): a recorded step is "
            "answered only to the same request",
            (unsigned long long) k, t->id, what ? what : "?");
    }
    if (t->off[t->n] >= LOG_MAX) {
        *status = 507;
        *code = "trajectory_full";
        return cdn_error_set(err, EFBIG, "trajectory '%s': its log is over 4 GiB", t->id);
    }
    t->busy = true;
    (void) snprintf(t->owner, sizeof t->owner, "%s", b->sb.id);
    *s = (struct traj_step){.t = t, .k = t->n, .request = TAKE_PTR(req), .started_unix = now_unix()};
    memcpy(s->digest, digest, sizeof digest);
    memcpy(s->violations, b->session.counts, sizeof s->violations);
    return TRAJ_RUN;
}

int cdn_api_traj_begin(struct evhttp_request *req, struct box *b, const char *kind, json_t *request,
                       bool has_k, uint64_t k, const char *bad_code, struct traj_step *s,
                       json_t **ret_recorded)
{
    *s = (struct traj_step){0};
    *ret_recorded = NULL;
    if (!request) {
        if (!has_k)
            return TRAJ_RUN;
        cdn_api_reply_error(req, 400, bad_code, "step",
                            "step: sandbox %s records no trajectory (create it with \"trajectory\")",
                            b->sb.id);
        return -1;
    }
    int status;
    const char *code;
    struct cdn_error err = {0};
    int t = cdn_traj_begin(b, kind, request, has_k, k, s, ret_recorded, &status, &code, &err);
    if (t < 0) {
        cdn_api_reply_cdn_error(req, status, code, &err);
        return -1;
    }
    return t;
}

void cdn_api_traj_replay(struct evhttp_request *req, json_t *recorded)
{
    json_t *res = json_deep_copy(json_object_get(recorded, "result"));
    if (res) {
        json_object_set(res, "step", json_object_get(recorded, "step"));
        json_object_set_new(res, "replayed", json_true());
    }
    json_decref(recorded);
    if (res)
        cdn_api_reply_json(req, 200, res);
    else
        cdn_api_reply_error(req, 500, "internal", NULL, "out of memory");
}

void cdn_traj_record_result(struct box *b, struct traj_step *s, const char *kind, json_t *res)
{
    uint64_t k = s->k;
    int r = cdn_traj_record(b, s, kind, json_deep_copy(res));
    json_object_set_new(res, "step", json_integer((json_int_t) k));
    if (r < 0) {
        json_object_set_new(res, "step_recorded", json_false());
        json_object_set_new(res, "step_error", json_string(strerror(-r)));
    }
}

void cdn_traj_abort(struct traj_step *s)
{
    if (s->t)
        s->t->busy = false;
    json_decref(s->request);
    *s = (struct traj_step){0};
}

int cdn_traj_record(struct box *b, struct traj_step *s, const char *kind, json_t *result)
{
    _cleanup_json_ json_t *res = result;
    struct trajectory *t = s->t;
    if (!t) {
        cdn_traj_abort(s);
        return -EINVAL;
    }
    json_t *viol = json_object();
    for (int i = 0; viol && i < _CDN_VK_MAX; i++)
        if (b->session.counts[i] > s->violations[i])
            json_object_set_new(viol, cdn_vk_name((enum cdn_vk) i),
                                json_integer((json_int_t) (b->session.counts[i] - s->violations[i])));
    double now = now_unix();
    _cleanup_json_ json_t *line =
        json_pack("{s:I, s:s, s:s, s:s, s:f, s:f, s:O, s:O, s:o}", "step", (json_int_t) s->k, "kind", kind,
                  "sandbox", b->sb.id, "digest", s->digest, "time", s->started_unix, "wall_ms",
                  (now - s->started_unix) * 1e3, "request", s->request, "result", res, "violations", viol);
    _cleanup_free_ char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
    int r = text ? 0 : -ENOMEM;
    size_t len = text ? strlen(text) : 0;
    if (r == 0 && len + 1 > LINE_MAX_LEN)
        r = -EFBIG;
    if (r == 0)
        text[len] = '\n'; /* json_dumps's NUL: the line's end */
    struct stat st;
    if (r == 0 && (fstat(t->fd, &st) < 0 || (uint64_t) st.st_size != t->off[t->n])) {
        t->broken = true; /* not the log the offsets describe */
        r = -EIO;
    }
    if (r == 0)
        r = cdn_write_all(t->fd, text, len + 1);
    if (r == 0 && fdatasync(t->fd) < 0)
        r = -errno;
    if (r == 0)
        r = push_off(t, t->off[t->n] + len + 1);
    if (r == 0) {
        t->n++;
        cdn_checkpoint_after_step(b);
    } else if (!t->broken &&
               ftruncate(t->fd, (off_t) t->off[t->n]) < 0) /* nothing of it stays: a re-issue runs */
        t->broken = true;
    t->busy = false;
    json_decref(s->request);
    *s = (struct traj_step){0};
    return r;
}

json_t *cdn_traj_json(const char *id, uint64_t from, uint64_t limit, struct cdn_error *err)
{
    if (!cdn_trajectory_id_valid(id)) {
        cdn_error_field(err, EINVAL, "id", "'%.64s' is not a trajectory's id", id);
        return NULL;
    }
    struct trajectory *t = open_traj(id, false, err);
    if (!t)
        return NULL;
    json_t *steps = json_array();
    uint64_t k = from < t->n ? from : t->n;
    for (; steps && k < t->n && k - from < limit; k++) {
        if (k > from && t->off[k + 1] - t->off[from] > CDN_TRAJ_PAGE_BYTES)
            break;
        json_t *o = read_step(t, k, err);
        if (!o) {
            json_decref(steps);
            return NULL;
        }
        json_array_append_new(steps, o);
    }
    const char *sandbox = NULL;
    struct box *b;
    LIST_FOREACH(b, &cdn_daemon->boxes, link)
    if (b->spec.trajectory && strcmp(b->spec.trajectory, id) == 0 && b->state == BOX_RUNNING && !b->dying)
        sandbox = b->sb.id;
    /* more: steps after this page; the next page starts at from + len(steps) */
    return json_pack("{s:s, s:o, s:I, s:b, s:I, s:s?, s:o}", "id", id, "steps", steps, "from",
                     (json_int_t) from, "more", k < t->n, "next_step", (json_int_t) t->n, "sandbox", sandbox,
                     "rolled_back", cdn_traj_rolled_back(id));
}

int cdn_traj_steps_quiet(const char *id, uint64_t *ret)
{
    char path[4400];
    struct stat st;
    struct trajectory *t = find(id);
    if (t) {
        *ret = t->n;
        return 0;
    }
    if (log_path(id, path, sizeof path) < 0)
        return -ENAMETOOLONG;
    if (stat(path, &st) < 0)
        return errno == ENOENT ? (*ret = 0, 0) : -errno;
    *ret = st.st_size > 0; /* only whether it has any: a fork's names skip those with steps */
    return 0;
}

int cdn_traj_steps(const char *id, uint64_t *ret, struct cdn_error *err)
{
    struct trajectory *t = open_traj(id, true, err);
    if (!t)
        return -(err->errnum ?: EIO);
    if (t->busy)
        return cdn_error_field(err, EBUSY, "trajectory", "trajectory '%s': a step is under way", id);
    *ret = t->n;
    return 0;
}

int cdn_traj_fork(const char *parent, uint64_t n, const char *child, struct cdn_error *err)
{
    struct trajectory *p = open_traj(parent, true, err);
    if (!p)
        return -(err->errnum ?: EIO);
    if (n > p->n)
        return cdn_error_field(err, ERANGE, "checkpoint", "trajectory '%s' has %llu steps, not %llu", parent,
                               (unsigned long long) p->n, (unsigned long long) n);
    if (p->busy)
        return cdn_error_field(err, EBUSY, "trajectory", "trajectory '%s': a step is under way", parent);
    p->busy = true; /* not the one the child's opening makes room by closing */
    struct trajectory *c = open_traj(child, true, err);
    p->busy = false;
    if (!c)
        return -(err->errnum ?: EIO);
    if (c->n)
        return cdn_error_field(err, EEXIST, "trajectory", "trajectory '%s' already has steps", child);
    /* The parent's first n lines, as they are: the child's steps 0…n-1. */
    off_t in = 0, len = (off_t) p->off[n];
    while (in < len) {
        char buf[65536];
        ssize_t w =
            pread(p->fd, buf, (size_t) (len - in) < sizeof buf ? (size_t) (len - in) : sizeof buf, in);
        if (w > 0 && cdn_write_all(c->fd, buf, (size_t) w) < 0)
            w = -1;
        in += w > 0 ? w : 0;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            (void) !ftruncate(c->fd, 0);
            return cdn_error_set(err, e, "trajectory '%s': copy the steps of '%s': %s", child, parent,
                                 strerror(e));
        }
    }
    if (fdatasync(c->fd) < 0) {
        int e = errno;
        (void) !ftruncate(c->fd, 0);
        return cdn_error_set(err, e, "trajectory '%s': %s", child, strerror(e));
    }
    for (uint64_t k = 1; k <= n; k++, c->n++)
        if (push_off(c, p->off[k]) < 0) {
            c->broken = true; /* its offsets are short of its lines: no step goes on */
            return cdn_error_set(err, ENOMEM, "out of memory");
        }
    return 0;
}

/* Where trajectory id keeps the steps a rollback took off it (one JSON line each). */
static int rolled_path(const char *id, char *buf, size_t size)
{
    return (size_t) snprintf(buf, size, "%s/trajectories/%s/" ROLLED_NAME, cdn_daemon->cfg.state_dir, id) >=
                   size
               ? -ENAMETOOLONG
               : 0;
}

int cdn_traj_rollback(const char *id, uint64_t k, const char *checkpoint, uint64_t *ret_n,
                      struct cdn_error *err)
{
    struct trajectory *t = open_traj(id, true, err);
    if (!t)
        return -(err->errnum ?: EIO);
    if (t->busy)
        return cdn_error_field(err, EBUSY, "trajectory", "trajectory '%s': a step is under way", id);
    if (t->broken)
        return cdn_error_set(err, EIO, "trajectory '%s': its log takes no more changes", id);
    *ret_n = 0;
    if (k >= t->n)
        return 0;
    char path[4400];
    if (rolled_path(id, path, sizeof path) < 0)
        return cdn_error_set(err, ENAMETOOLONG, "trajectory '%s': its path is too long", id);
    _cleanup_close_ int out = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (out < 0)
        return cdn_error_set(err, errno, "trajectory '%s': %m", id);
    /* Steps k… as they were, marked: appended and on disk before the log loses them. */
    double now = now_unix();
    for (uint64_t i = k; i < t->n; i++) {
        _cleanup_json_ json_t *o = read_step(t, i, err);
        if (!o || json_object_set_new(o, "rolled_back",
                                      json_pack("{s:s, s:f}", "checkpoint", checkpoint, "time", now)) < 0)
            return -(err->errnum ?: ENOMEM);
        _cleanup_free_ char *line = json_dumps(o, JSON_COMPACT);
        if (!line || cdn_write_all(out, line, strlen(line)) < 0 || cdn_write_all(out, "\n", 1) < 0)
            return cdn_error_set(err, errno ?: ENOMEM, "trajectory '%s': keep its rolled-back steps: %m", id);
    }
    if (fdatasync(out) < 0)
        return cdn_error_set(err, errno, "trajectory '%s': keep its rolled-back steps: %m", id);
    if (ftruncate(t->fd, (off_t) t->off[k]) < 0 || fdatasync(t->fd) < 0) {
        t->broken = true; /* its offsets may not be its lines any more */
        return cdn_error_set(err, errno, "trajectory '%s': cut its log: %m", id);
    }
    *ret_n = t->n - k;
    t->n = k;
    return 0;
}

json_t *cdn_traj_rolled_back(const char *id)
{
    char path[4400];
    json_t *all = json_array();
    if (!all || rolled_path(id, path, sizeof path) < 0)
        return all;
    FILE *f = fopen(path, "re");
    if (!f)
        return all;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0 && line[n - 1] == '\n') {
        json_t *o = json_loadb(line, (size_t) n, 0, NULL);
        if (json_is_object(o))
            json_array_append_new(all, o);
        else
            json_decref(o);
    }
    free(line);
    fclose(f);
    return all;
}
