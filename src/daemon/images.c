/* Image pulls and prunes in forked children, shared by their waiters; creates that wait for their
 * image (images.h).
 *
 * The loop (cordond, root) forks a job's child and reads its pipe; it never waits on the store
 * longer than a small file's read. The child runs as root on the host with nothing of cordond's but
 * fds 0-2 and its pipe (fd 3): it must not hold a copy of a sandbox's agent socket or slot lock.
 * It dies with cordond (PR_SET_PDEATHSIG); a pull killed halfway leaves only tmp/ work, which the
 * store's next first opener sweeps. The references are the operator's (trusted, still parsed);
 * what registries send is checked by oci/. */
#include "images.h"
#include "tiers/tier.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/json-util.h"
#include "oci/resolve.h"
#include "oci/store.h"
#include "shared/fd-util.h"
#include "shared/strv.h"
#include "tiers/qemu/vmprep.h"

enum job_kind { JOB_PULL, JOB_PRUNE, JOB_SIZE, JOB_PREPARE };

struct image_job {
    enum job_kind kind;
    char *canon;                 /* JOB_PULL: the reference; JOB_PREPARE: what it prepares (prepare_key) */
    const struct cdn_spec *spec; /* JOB_PREPARE: the spec, for the child (valid until the fork) */
    char *digests; /* JOB_PULL, JOB_PRUNE: what live sandboxes use, sorted (the child's in_use) */
    size_t n_digests;
    pid_t pid;
    int pidfd, fd;
    struct event *ev;
    struct evbuffer *in;
    char *resolved; /* the last "resolved" line, for late joiners */
    json_t *result;
    struct image_waiter *waiters;
    size_t n_waiters;
    LIST_ENTRY(image_job) link;
};

static LIST_HEAD(, image_job) jobs = LIST_HEAD_INITIALIZER(jobs);

/* ---- references ---- */

int cdn_images_canonical(const char *name, const char *field, char out[CDN_IMAGE_REF_MAX],
                         struct cdn_error *err)
{
    struct cdn_image_ref ref;
    int r = cdn_image_ref_parse(name, &ref, err);
    if (r < 0) {
        if (err)
            (void) snprintf(err->field, sizeof err->field, "%s", field);
        return r;
    }
    if (!cdn_image_ref_is_oci(&ref))
        return cdn_error_field(err, EINVAL, field, "%s: '%.200s' is not an OCI image reference", field, name);
    if (cdn_image_ref_format(&ref, out, CDN_IMAGE_REF_MAX) < 0 || strlen(out) > CDN_STORE_REF_MAX)
        return cdn_error_field(err, ENAMETOOLONG, field, "%s: reference too long", field);
    return 0;
}

int cdn_images_check_source(const char *name, const char *field, struct cdn_error *err)
{
    struct cdn_image_ref ref;
    if (cdn_image_ref_parse(name, &ref, NULL) < 0 ||
        (ref.kind != CDN_REF_OCI_LAYOUT && ref.kind != CDN_REF_OCI_ARCHIVE &&
         ref.kind != CDN_REF_DOCKER_ARCHIVE))
        return 0; /* parse errors are told where the reference is used */
    return cdn_bind_policy_check_path(&cdn_daemon->bind_policy, ref.path, field, err);
}

int cdn_images_lookup(const char *canon, char manifest[CDN_DIGEST_MAX], struct cdn_error *err)
{
    return cdn_oci_stored(canon, manifest, NULL, NULL, err);
}

/* The manifest b runs on: noted at its create, else (adopted after a restart) looked up now. */
static const char *box_manifest(struct box *b)
{
    char canon[CDN_IMAGE_REF_MAX];
    if (!b->image_manifest[0] && cdn_oci_is_reference(b->spec.image) &&
        cdn_images_canonical(b->spec.image, "image", canon, NULL) >= 0)
        (void) cdn_images_lookup(canon, b->image_manifest, NULL);
    return b->image_manifest;
}

/* The listed sandboxes on the image (a deleted one, killed, runs nothing on it any more, though
 * a prune keeps its layers until its teardown ends: used_digests). */
unsigned cdn_images_users(const char *manifest, char first_id[64])
{
    unsigned n = 0;
    struct box *b;
    LIST_FOREACH(b, &cdn_daemon->boxes, link)
    if (!b->cleaned && strcmp(box_manifest(b), manifest) == 0 && n++ == 0 && first_id)
        (void) snprintf(first_id, 64, "%s", b->sb.id);
    return n;
}

static int digest_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* Every digest (manifest, config, layer blobs and diff_ids) of the images live sandboxes run on,
 * sorted: a prune keeps them even when their record was removed behind cordond's back. */
static int used_digests(char **ret, size_t *ret_n)
{
    _cleanup_store_ struct cdn_store *s = NULL;
    size_t n = 0, cap = 0;
    char *d = NULL;
    struct box *lists[2] = {LIST_FIRST(&cdn_daemon->boxes), LIST_FIRST(&cdn_daemon->dying)};
    for (int l = 0; l < 2; l++)
        for (struct box *b = lists[l]; b; b = LIST_NEXT(b, link)) {
            if (b->cleaned) /* an ended one kept for its retention runs nothing */
                continue;
            const char *m = box_manifest(b);
            struct cdn_image_record rec = {0};
            if (!m[0] || (!s && cdn_store_open(cdn_daemon->cfg.state_dir, &s, NULL) < 0) ||
                cdn_store_image_get(s, m, &rec, NULL) < 0)
                continue;
            size_t need = n + 2 + 2 * rec.n_layers;
            if (need > cap) {
                cap = need * 2;
                char *nd = realloc(d, cap * CDN_DIGEST_MAX);
                if (!nd) {
                    cdn_image_record_done(&rec);
                    free(d);
                    return -ENOMEM;
                }
                d = nd;
            }
            memcpy(d + n++ * CDN_DIGEST_MAX, rec.manifest, CDN_DIGEST_MAX);
            memcpy(d + n++ * CDN_DIGEST_MAX, rec.config, CDN_DIGEST_MAX);
            for (size_t i = 0; i < rec.n_layers; i++) {
                memcpy(d + n++ * CDN_DIGEST_MAX, rec.diff_ids[i], CDN_DIGEST_MAX);
                memcpy(d + n++ * CDN_DIGEST_MAX, rec.blobs[i], CDN_DIGEST_MAX);
            }
            cdn_image_record_done(&rec);
        }
    if (n)
        qsort(d, n, CDN_DIGEST_MAX, digest_cmp);
    *ret = d, *ret_n = n;
    return 0;
}

/* ---- the child ---- */

struct child {
    int fd;
    struct image_job *job;
    uint64_t fetched[CDN_OCI_LAYERS_MAX]; /* bytes of each layer's blob fetched */
    uint64_t last_ns[CDN_OCI_LAYERS_MAX];
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    (void) clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* One line on the pipe (steals o). Lines are short (< PIPE_BUF) and written one at a time. */
static void put_line(int fd, json_t *o)
{
    _cleanup_free_ char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s)
        return;
    size_t n = strlen(s);
    s[n] = '\n'; /* over the NUL: written by length */
    (void) cdn_write_all(fd, s, n + 1);
}

/* oci/pull.h's progress hook, called by the pulling threads one at a time: byte counts at most
 * every 100 ms per layer (the registry client reports every 64 KiB). */
static void on_progress(void *data, const struct cdn_pull_event *ev)
{
    static const char *const names[] = {"resolved", "fetch", "cached", "unpacked", "done"};
    struct child *c = data;
    if (ev->phase == CDN_PULL_DONE)
        return; /* the last line is the job's own */
    if (ev->phase == CDN_PULL_RESOLVED) {
        put_line(c->fd, json_pack("{s:s, s:s, s:I, s:I}", "status", "resolved", "digest", ev->digest,
                                  "layers", (json_int_t) ev->n_layers, "total", (json_int_t) ev->total));
        return;
    }
    if (ev->layer >= CDN_OCI_LAYERS_MAX)
        return;
    if (ev->phase == CDN_PULL_FETCH) {
        c->fetched[ev->layer] = ev->done;
        uint64_t t = now_ns();
        if (ev->done < ev->total && t - c->last_ns[ev->layer] < 100000000u)
            return;
        c->last_ns[ev->layer] = t;
    }
    put_line(c->fd, json_pack("{s:s, s:I, s:I, s:s, s:I, s:I}", "status", names[ev->phase], "layer",
                              (json_int_t) ev->layer, "layers", (json_int_t) ev->n_layers, "digest",
                              ev->digest, "done", (json_int_t) ev->done, "total", (json_int_t) ev->total));
}

static bool child_in_use(const char *kind, const char *digest, void *data)
{
    (void) kind;
    struct image_job *j = data;
    return j->n_digests && bsearch(digest, j->digests, j->n_digests, CDN_DIGEST_MAX, digest_cmp);
}

/* The configured registry lists join the environment's (oci/resolve.h reads them there). */
static void merge_env(const char *name, const char *configured)
{
    const char *old = getenv(name);
    if (!configured[0])
        return;
    _cleanup_free_ char *v = NULL;
    if (asprintf(&v, "%s%s%s", old ? old : "", old && old[0] ? "," : "", configured) >= 0)
        (void) setenv(name, v, 1);
}

static json_t *error_line(const struct cdn_error *e, int r, const char *code)
{
    const char *msg = e->msg[0] ? e->msg : strerror(-r);
    return json_pack("{s:s, s:{s:s, s:s, s:s}, s:i}", "status", "error", "error", "code", code, "message",
                     msg, "field", e->field[0] ? e->field : "image", "errno", -r);
}

static uint64_t bytes_of(const struct child *c)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < CDN_OCI_LAYERS_MAX; i++)
        sum += c->fetched[i];
    return sum;
}

static void run_pull(struct child *c)
{
    const struct daemon_config *cfg = &cdn_daemon->cfg;
    merge_env("CORDON_INSECURE_REGISTRIES", cfg->insecure_registries);
    merge_env("CORDON_REGISTRY_CA_FILES", cfg->registry_ca_files);
    merge_env("CORDON_REGISTRY_MIRRORS", cfg->registry_mirrors);
    struct cdn_pull_env env = {0};
    struct cdn_pull_options o;
    struct cdn_error err = {0};
    int r = cdn_pull_options_from_env(&o, &env);
    o.progress = on_progress, o.progress_data = c;
    if (r >= 0)
        r = cdn_oci_ensure(c->job->canon, CDN_PULL_ALWAYS, &o, NULL, &err);
    cdn_pull_env_free(&env);
    _cleanup_store_ struct cdn_store *s = NULL;
    char manifest[CDN_DIGEST_MAX];
    struct cdn_image_record rec = {0};
    if (r >= 0 && (r = cdn_store_open(cfg->state_dir, &s, &err)) >= 0 &&
        (r = cdn_store_ref_get(s, c->job->canon, manifest, &err)) >= 0)
        r = cdn_store_image_get(s, manifest, &rec, &err);
    if (r < 0) {
        json_t *e = error_line(&err, r, r == -ENOENT ? "image_not_found" : "pull_failed");
        json_object_set_new(e, "bytes_pulled", json_integer((json_int_t) bytes_of(c)));
        return put_line(c->fd, e);
    }
    uint64_t size = 0, freed = 0;
    bool known = cdn_store_size(s, &size, NULL) >= 0;
    if (known && cfg->image_store_max && size > cfg->image_store_max &&
        cdn_store_prune(s, child_in_use, c->job, &freed, NULL) >= 0)
        known = cdn_store_size(s, &size, NULL) >= 0;
    json_t *done = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "status", "done", "ref",
                             c->job->canon, "digest", manifest, "size", (json_int_t) rec.size, "layers",
                             (json_int_t) rec.n_layers, "created", (json_int_t) rec.created, "bytes_pulled",
                             (json_int_t) bytes_of(c), "pruned_bytes", (json_int_t) freed);
    if (done && known)
        json_object_set_new(done, "store_size", json_integer((json_int_t) size));
    cdn_image_record_done(&rec);
    put_line(c->fd, done);
}

void cdn_images_prune_disks(struct cdn_store *s)
{
    struct cdn_error err = {0};
    struct cdn_strv named = {0};
    if (cdn_oci_named_manifests(s, &named, &err) >= 0)
        (void) cdn_vm_prune_image_disks(cdn_oci_named, &named, &err);
    cdn_strv_free(&named);
}

/* A tier's make-once assets for a create (tier.h prepare), made here rather than in the loop. */
static void run_prepare(struct child *c)
{
    struct cdn_error err = {0};
    const struct cdn_tier_ops *t = cdn_tier_lookup(c->job->spec->tier);
    int r = t && t->prepare ? t->prepare(c->job->spec, true, &err) : 1;
    if (r < 0)
        return put_line(c->fd, error_line(&err, r, "sandbox_failed"));
    put_line(c->fd, json_pack("{s:s}", "status", "done"));
}

static void run_store(struct child *c)
{
    struct cdn_error err = {0};
    _cleanup_store_ struct cdn_store *s = NULL;
    uint64_t freed = 0, size = 0;
    int r = cdn_store_open(cdn_daemon->cfg.state_dir, &s, &err);
    if (r >= 0 && c->job->kind == JOB_PRUNE &&
        (r = cdn_store_prune(s, child_in_use, c->job, &freed, &err)) >= 0)
        cdn_images_prune_disks(s);
    if (r >= 0)
        r = cdn_store_size(s, &size, &err);
    if (r < 0)
        return put_line(c->fd, error_line(&err, r, "store_failed"));
    put_line(c->fd, json_pack("{s:s, s:I, s:I}", "status", "done", "freed_bytes", (json_int_t) freed,
                              "store_size", (json_int_t) size));
}

/* In the forked child: nothing of cordond's but fds 0-2 and the pipe, default signals. */
static _Noreturn void child_main(struct image_job *j, int wfd, pid_t parent)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
        _exit(1);
    (void) prctl(PR_SET_NAME, j->kind == JOB_PULL      ? "cordond-pull"
                              : j->kind == JOB_PREPARE ? "cordond-prepare"
                                                       : "cordond-store");
    int sigs[] = {SIGTERM, SIGINT, SIGCHLD, SIGHUP};
    for (size_t i = 0; i < ELEMENTSOF(sigs); i++)
        (void) signal(sigs[i], SIG_DFL);
    if ((wfd != 3 && dup2(wfd, 3) < 0) || syscall(SYS_close_range, 4, ~0U, 0) < 0)
        _exit(1);
    static struct child c; /* big: not on the stack */
    c.fd = 3, c.job = j;
    if (j->kind == JOB_PULL)
        run_pull(&c);
    else if (j->kind == JOB_PREPARE)
        run_prepare(&c);
    else
        run_store(&c);
    _exit(0);
}

/* ---- the loop's side ---- */

static void job_free(struct image_job *j)
{
    if (j->ev)
        event_free(j->ev);
    if (j->in)
        evbuffer_free(j->in);
    safe_close(j->fd);
    safe_close(j->pidfd);
    json_decref(j->result);
    free(j->canon);
    free(j->digests);
    free(j->resolved);
    free(j->waiters);
    free(j);
}

static void count(struct image_job *j)
{
    json_t *r = j->result;
    bool ok = strcmp(json_string_value(json_object_get(r, "status")) ?: "", "done") == 0;
    json_t *size = json_object_get(r, "store_size");
    if (json_is_integer(size)) {
        cdn_daemon->image_store_bytes = (uint64_t) json_integer_value(size);
        cdn_daemon->image_store_known = true;
    }
    if (j->kind != JOB_PULL)
        return;
    if (ok)
        cdn_daemon->pulls_total++;
    else
        cdn_daemon->pull_errors++;
    cdn_daemon->pull_bytes += (uint64_t) json_integer_value(json_object_get(r, "bytes_pulled"));
}

/* The job is over (its pipe ended, or cordond stops): its waiters hear the result, once. */
static void job_end(struct image_job *j, const char *why)
{
    LIST_REMOVE(j, link);
    if (!j->result)
        j->result = json_pack("{s:s, s:{s:s, s:s, s:s}, s:i}", "status", "error", "error", "code",
                              why ? "stopping" : "pull_failed", "message",
                              why ? why : "the image process ended without a result", "field", "image",
                              "errno", why ? ESHUTDOWN : EIO);
    count(j);
    for (size_t i = 0; i < j->n_waiters; i++)
        j->waiters[i].done(j->waiters[i].arg, j->result);
    job_free(j);
}

static void job_line(struct image_job *j, char *line, size_t len)
{
    json_t *o = json_loadb(line, len, 0, NULL);
    const char *status = json_string_value(json_object_get(o, "status"));
    if (!status) {
        json_decref(o);
        return;
    }
    if (strcmp(status, "done") == 0 || strcmp(status, "error") == 0) {
        json_decref(j->result);
        j->result = o;
        return;
    }
    bool resolved = strcmp(status, "resolved") == 0;
    json_decref(o);   /* status with it */
    line[len] = '\n'; /* evbuffer_readln's NUL: the line is sent with its newline */
    if (resolved) {
        free(j->resolved);
        j->resolved = strndup(line, len + 1);
    }
    for (size_t i = 0; i < j->n_waiters; i++)
        if (j->waiters[i].line)
            j->waiters[i].line(j->waiters[i].arg, line, len + 1);
}

static void on_job_read(evutil_socket_t fd, short what, void *arg)
{
    (void) what;
    struct image_job *j = arg;
    int n;
    while ((n = evbuffer_read(j->in, fd, 1 << 16)) > 0)
        ;
    bool over = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
    size_t len;
    char *line;
    while ((line = evbuffer_readln(j->in, &len, EVBUFFER_EOL_LF))) {
        job_line(j, line, len);
        free(line);
    }
    if (over || evbuffer_get_length(j->in) > (1u << 20)) /* no line is that long */
        job_end(j, NULL);
}

static int add_waiter(struct image_job *j, struct image_waiter w)
{
    struct image_waiter *v = realloc(j->waiters, (j->n_waiters + 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    j->waiters = v;
    v[j->n_waiters++] = w;
    if (j->resolved && w.line)
        w.line(w.arg, j->resolved, strlen(j->resolved));
    return 0;
}

static struct image_job *job_find(enum job_kind kind, const char *canon)
{
    struct image_job *j;
    LIST_FOREACH(j, &jobs, link)
    if (j->kind == kind && (!canon || strcmp(j->canon, canon) == 0))
        return j;
    return NULL;
}

/* Fork the job's child; the loop reads its pipe from now on. */
static int job_start(struct image_job *j, struct cdn_error *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return cdn_error_set(err, errno, "image job: pipe: %m");
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]), close(p[1]);
        return cdn_error_set(err, e, "image job: fork: %m");
    }
    if (pid == 0) {
        cdn_writable_stock_drop(); /* its copies would keep a used layer alive past its sandbox */
        /* and its copies of the sandboxes' image holds an image past its last user (a pool's stay) */
        struct box *lists[2] = {LIST_FIRST(&cdn_daemon->boxes), LIST_FIRST(&cdn_daemon->dying)};
        for (int l = 0; l < 2; l++)
            for (struct box *b = lists[l]; b; b = LIST_NEXT(b, link))
                b->sb.image_fd = safe_close(b->sb.image_fd);
        child_main(j, p[1], parent);
    }
    close(p[1]);
    j->pid = pid;
    j->pidfd = (int) syscall(SYS_pidfd_open, pid, 0); /* not reaped yet: SIGCHLD waits for the loop */
    j->fd = p[0];
    (void) fcntl(j->fd, F_SETFL, O_NONBLOCK);
    j->in = evbuffer_new();
    j->ev = j->in ? event_new(cdn_daemon->base, j->fd, EV_READ | EV_PERSIST, on_job_read, j) : NULL;
    LIST_INSERT_HEAD(&jobs, j, link);
    if (!j->ev || event_add(j->ev, NULL) < 0) {
        if (j->pidfd >= 0)
            (void) syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
        LIST_REMOVE(j, link);
        return cdn_error_set(err, ENOMEM, "image job: out of memory");
    }
    return 0;
}

static int job_join(enum job_kind kind, const char *canon, const struct cdn_spec *spec, struct image_waiter w,
                    struct cdn_error *err)
{
    if (cdn_daemon->stopping)
        return cdn_error_set(err, ESHUTDOWN, "cordond is stopping");
    struct image_job *j = kind == JOB_SIZE ? NULL : job_find(kind, canon);
    if (j)
        return add_waiter(j, w) < 0 ? cdn_error_set(err, ENOMEM, "out of memory") : 0;
    j = calloc(1, sizeof *j);
    if (!j)
        return cdn_error_set(err, ENOMEM, "out of memory");
    *j = (struct image_job){.kind = kind, .spec = spec, .pidfd = -EBADF, .fd = -EBADF};
    int r = (canon && !(j->canon = strdup(canon))) ? -ENOMEM : 0;
    if (r >= 0 && (kind == JOB_PULL || kind == JOB_PRUNE))
        r = used_digests(&j->digests, &j->n_digests);
    if (r >= 0 && w.done)
        r = add_waiter(j, w);
    if (r < 0) {
        job_free(j);
        return cdn_error_set(err, ENOMEM, "out of memory");
    }
    if ((r = job_start(j, err)) < 0)
        job_free(j);
    return r;
}

int cdn_images_pull(const char *canon, struct image_waiter w, struct cdn_error *err)
{
    return job_join(JOB_PULL, canon, NULL, w, err);
}

int cdn_images_prune(struct image_waiter w, struct cdn_error *err)
{
    return job_join(JOB_PRUNE, NULL, NULL, w, err);
}

void cdn_images_start(void)
{
    struct cdn_error err = {0};
    if (job_join(JOB_SIZE, NULL, NULL, (struct image_waiter){0}, &err) < 0)
        fprintf(stderr, "cordond: measuring the image store: %s\n", err.msg);
}

void cdn_images_stop(void)
{
    while (!LIST_EMPTY(&jobs)) {
        struct image_job *j = LIST_FIRST(&jobs);
        if (j->pidfd >= 0)
            (void) syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
        job_end(j, "cordond is stopping");
    }
}

/* ---- creates that wait for their image ---- */

struct pending_create {
    struct cdn_spec spec;
    struct cdn_box_waiter w;
};

static void create_fail(struct cdn_spec *spec, struct cdn_box_waiter w, enum cdn_box_created how,
                        const struct cdn_error *err)
{
    cdn_spec_free(spec);
    w.done(w.arg, NULL, how, err);
}

/* The image's User is the spec's where the tier runs commands as users; elsewhere it is ignored
 * (as it was before any tier could), not a reason to refuse the image. */
static bool take_user(const struct cdn_spec *spec)
{
    const struct cdn_tier_ops *t = cdn_tier_lookup(spec->tier);
    return t && t->users;
}

/* The image is stored: its config under the spec, then the create itself. */
static void create_with_image(struct cdn_spec *spec, struct cdn_box_waiter w, const char *canon)
{
    struct cdn_error err = {0};
    struct cdn_oci_config c = {0};
    char manifest[CDN_DIGEST_MAX];
    int r = cdn_oci_stored(canon, manifest, NULL, &c, &err);
    if (r >= 0)
        r = cdn_oci_apply_config(&c, spec, spec->workdir_given, take_user(spec), &err);
    cdn_oci_config_free(&c);
    if (r < 0) {
        if (!err.field[0])
            (void) snprintf(err.field, sizeof err.field, "image");
        return create_fail(spec, w, r == -ENOENT ? CDN_BOX_INVALID_SPEC : CDN_BOX_FAILED, &err);
    }
    cdn_box_create_resolved(spec, w, manifest);
}

static void create_pulled(void *arg, json_t *result)
{
    struct pending_create *pc = arg;
    json_t *e = json_object_get(result, "error");
    if (!e) {
        create_with_image(&pc->spec, pc->w, json_string_value(json_object_get(result, "ref")));
    } else {
        struct cdn_error err = {.errnum = (int) json_integer_value(json_object_get(result, "errno"))};
        (void) snprintf(err.field, sizeof err.field, "image");
        (void) snprintf(err.msg, sizeof err.msg, "%s",
                        json_string_value(json_object_get(e, "message")) ?: "");
        enum cdn_box_created how = err.errnum == ESHUTDOWN                        ? CDN_BOX_STOPPING
                                   : err.errnum == ENOENT || err.errnum == EINVAL ? CDN_BOX_INVALID_SPEC
                                                                                  : CDN_BOX_FAILED;
        create_fail(&pc->spec, pc->w, how, &err);
    }
    free(pc);
}

void cdn_images_prepare_create(struct cdn_spec *spec, struct cdn_box_waiter w)
{
    struct cdn_error err = {0};
    char canon[CDN_IMAGE_REF_MAX], manifest[CDN_DIGEST_MAX];
    if (!cdn_oci_is_reference(spec->image))
        return cdn_box_create_resolved(spec, w, NULL);
    if (cdn_images_canonical(spec->image, "image", canon, &err) < 0)
        return create_fail(spec, w, CDN_BOX_INVALID_SPEC, &err);
    bool have = cdn_images_lookup(canon, manifest, NULL) >= 0;
    if (have && spec->pull != CDN_PULL_ALWAYS)
        return create_with_image(spec, w, canon);
    if (!have && spec->pull == CDN_PULL_NEVER) {
        (void) cdn_error_field(&err, ENOENT, "image",
                               "image: %s is not in the image store and pull is \"never\"", canon);
        return create_fail(spec, w, CDN_BOX_INVALID_SPEC, &err);
    }
    struct pending_create *pc = malloc(sizeof *pc);
    if (!pc) {
        (void) cdn_error_set(&err, ENOMEM, "out of memory");
        return create_fail(spec, w, CDN_BOX_FAILED, &err);
    }
    pc->spec = *spec, pc->w = w;
    *spec = (struct cdn_spec){0};
    if (cdn_images_pull(canon, (struct image_waiter){.done = create_pulled, .arg = pc}, &err) < 0) {
        create_fail(&pc->spec, pc->w, err.errnum == ESHUTDOWN ? CDN_BOX_STOPPING : CDN_BOX_FAILED, &err);
        free(pc);
    }
}

/* ---- creates that wait for their tier's make-once assets ---- */

struct pending_prepare {
    struct cdn_spec spec;
    struct cdn_box_waiter w;
    char manifest[CDN_DIGEST_MAX];
};

/* What one child prepares: creates that ask for the same join it. The assets are cached by tier,
 * image and shape (a guest's memory and CPUs). */
static char *prepare_key(const struct cdn_spec *spec)
{
    char *key = NULL;
    return asprintf(&key, "%d %s %llu %g", (int) spec->tier, spec->image,
                    (unsigned long long) spec->limits.memory_mb, spec->limits.cpus) < 0
               ? NULL
               : key;
}

static void create_prepared(void *arg, json_t *result)
{
    struct pending_prepare *pp = arg;
    json_t *e = json_object_get(result, "error");
    if (!e) {
        cdn_box_create_prepared(&pp->spec, pp->w, pp->manifest[0] ? pp->manifest : NULL);
    } else {
        struct cdn_error err = {.errnum = (int) json_integer_value(json_object_get(result, "errno"))};
        const char *field = json_string_value(json_object_get(e, "field"));
        bool spec_error = field && strcmp(field, "image") != 0;
        (void) snprintf(err.field, sizeof err.field, "%s", spec_error ? field : "");
        (void) snprintf(err.msg, sizeof err.msg, "%s",
                        json_string_value(json_object_get(e, "message")) ?: "");
        create_fail(&pp->spec, pp->w,
                    err.errnum == ESHUTDOWN ? CDN_BOX_STOPPING
                    : spec_error            ? CDN_BOX_INVALID_SPEC
                                            : CDN_BOX_FAILED,
                    &err);
    }
    free(pp);
}

int cdn_images_prepare(const struct cdn_spec *spec, struct image_waiter w, struct cdn_error *err)
{
    const struct cdn_tier_ops *t = cdn_tier_lookup(spec->tier);
    int r = t && t->prepare ? t->prepare(spec, false, err) : 1;
    if (r != 0)
        return r;
    _cleanup_free_ char *key = prepare_key(spec);
    if (!key)
        return cdn_error_set(err, ENOMEM, "out of memory");
    r = job_join(JOB_PREPARE, key, spec, w, err);
    return r < 0 ? r : 0;
}

bool cdn_images_prepare_tier(struct cdn_spec *spec, struct cdn_box_waiter w, const char *manifest)
{
    struct cdn_error err = {0};
    struct pending_prepare *pp = calloc(1, sizeof *pp);
    if (!pp) {
        (void) cdn_error_set(&err, ENOMEM, "out of memory");
        create_fail(spec, w, CDN_BOX_FAILED, &err);
        return true;
    }
    pp->spec = *spec, pp->w = w;
    (void) snprintf(pp->manifest, sizeof pp->manifest, "%s", manifest ?: "");
    int r = cdn_images_prepare(&pp->spec, (struct image_waiter){.done = create_prepared, .arg = pp}, &err);
    if (r > 0) {
        free(pp);
        return false;
    }
    *spec = (struct cdn_spec){0};
    if (r < 0) {
        create_fail(&pp->spec, w,
                    r == -ESHUTDOWN ? CDN_BOX_STOPPING
                    : err.field[0]  ? CDN_BOX_INVALID_SPEC
                                    : CDN_BOX_FAILED,
                    &err);
        free(pp);
    }
    return true;
}
