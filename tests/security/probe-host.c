/*
 * Host file and privilege baseline probes. The harness writes a canary file (mode 0600) on the host and
 * passes its path and content; every probe here tries another way to read it, or checks a property the
 * sandbox promises (no_new_privs, no capabilities, a seccomp filter, uid 0 not mapped to host uid 0). Nothing
 * is written on the host except a symlink inside a scratch directory, removed at once.
 */
#include "probe.h"

#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>

static bool canary_inputs(const struct probe_ctx *ctx, struct probe_result *res)
{
    if (!ctx->canary_path || ctx->canary_path[0] != '/' || !ctx->canary_text || !*ctx->canary_text) {
        probe_untested(res, "CORDON_PROBE_CANARY(_TEXT)-unset");
        return false;
    }
    return true;
}

/* contained iff the canary text cannot be read through path (any error, or other content) */
static void judge_canary(const struct probe_ctx *ctx, struct probe_result *res, int dirfd, const char *path,
                         const char *what)
{
    _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    char buf[4096];
    ssize_t n;

    if (fd < 0) {
        probe_contained(res, "%s:%s", what, probe_errname(errno));
        return;
    }
    n = probe_read_fd(fd, buf, sizeof(buf));
    if (n >= 0 && strstr(buf, ctx->canary_text))
        probe_escaped(res, "%s:canary-read", what);
    else
        probe_contained(res, "%s:%s", what, n < 0 ? probe_errname((int) -n) : "other-content");
}

PROBE_FN(canary_direct)
{
    if (canary_inputs(ctx, res))
        judge_canary(ctx, res, AT_FDCWD, ctx->canary_path, "direct");
}

/* A symlink made inside the sandbox resolves inside it too; the trick matters where links are followed by a
 * host process. Contained iff the canary text cannot be read through it. */
PROBE_FN(canary_symlink)
{
    char dir[PATH_MAX], link[PATH_MAX + 8];

    if (!canary_inputs(ctx, res))
        return;
    if (probe_scratch_make(ctx, dir, sizeof(dir)) < 0) {
        probe_contained(res, "no-writable-dir");
        return;
    }
    (void) snprintf(link, sizeof(link), "%s/link", dir);
    if (symlink(ctx->canary_path, link) < 0)
        probe_contained(res, "symlink:%s", probe_errname(errno));
    else
        judge_canary(ctx, res, AT_FDCWD, link, "symlink");
    probe_scratch_remove(dir);
}

static void judge_canary_under(const struct probe_ctx *ctx, struct probe_result *res, const char *prefix)
{
    char path[PATH_MAX];

    if (!canary_inputs(ctx, res))
        return;
    (void) snprintf(path, sizeof(path), "%s%s", prefix, ctx->canary_path);
    judge_canary(ctx, res, AT_FDCWD, path, prefix);
}

PROBE_FN(canary_proc1_root)
{
    judge_canary_under(ctx, res, "/proc/1/root");
}

PROBE_FN(canary_proc_self_root)
{
    judge_canary_under(ctx, res, "/proc/self/root");
}

PROBE_FN(canary_host_pid_root)
{
    pid_t pid = probe_parse_pid(ctx->host_pid);
    char prefix[64];

    if (pid == 0) {
        probe_untested(res, "CORDON_PROBE_HOST_PID-unset");
        return;
    }
    (void) snprintf(prefix, sizeof(prefix), "/proc/%d/root", (int) pid);
    judge_canary_under(ctx, res, prefix);
}

/* "../../..(16 times)/abs-without-leading-slash": climbs to the root of whatever tree dirfd lives in. */
static void climb_path(const char *abs, char *out, size_t len)
{
    size_t used = 0;

    out[0] = '\0';
    for (int i = 0; i < 16 && used + 4 < len; i++)
        used += (size_t) snprintf(out + used, len - used, "../");
    (void) snprintf(out + used, len - used, "%s", abs + 1);
}

/*
 * CVE-2024-21626: a directory fd leaked from the host (or a cwd outside our root) lets openat(fd, "../../..")
 * walk to the host root. contained iff no fd the runner inherited is a directory, the cwd is reachable from
 * our root, and the canary cannot be read relative to any inherited fd.
 */
PROBE_FN(leaked_fds)
{
    char cwd[PATH_MAX], rel[PATH_MAX], list[64] = "";
    size_t dirs = 0, used = 0;

    if (!getcwd(cwd, sizeof(cwd)) || cwd[0] != '/')
        probe_escaped(res, "cwd-outside-root");
    for (size_t i = 0; i < ctx->n_inherited_fds; i++) {
        int fd = ctx->inherited_fds[i];
        struct stat st;
        char what[32];

        if (used + 12 < sizeof(list))
            used += (size_t) snprintf(list + used, sizeof(list) - used, "%s%d", used ? "+" : "", fd);
        if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode))
            continue;
        dirs++;
        (void) snprintf(what, sizeof(what), "fd%d", fd);
        probe_escaped(res, "%s:inherited-directory", what);
        if (ctx->canary_path && ctx->canary_path[0] == '/' && ctx->canary_text && *ctx->canary_text) {
            climb_path(ctx->canary_path, rel, sizeof(rel));
            judge_canary(ctx, res, fd, rel, what);
        }
    }
    if (res->verdict == PROBE_CONTAINED)
        probe_contained(res, "inherited-fds=%s,%zu-directories", used ? list : "none", dirs);
}

/*
 * Shocker (2014): open_by_handle_at with a guessed handle for inode 2 (the root of ext2/3/4) relative to any
 * fd on a host filesystem, such as our own bind-mounted binary. Needs CAP_DAC_READ_SEARCH in the initial
 * namespace. contained iff every attempt fails with EPERM/EACCES/ENOSYS; ESTALE/EINVAL mean the capability
 * check passed.
 */
PROBE_FN(open_by_handle_root)
{
    const char *anchors[] = {"/proc/self/exe", "/", "/usr", "/etc", "/tmp", "/workspace", ctx->disk_dir};
    struct file_handle *fh = calloc(1, sizeof(*fh) + 8);
    uint32_t ino_gen[2] = {2, 0};
    unsigned denied = 0;

    if (!fh) {
        probe_untested(res, "ENOMEM");
        return;
    }
    fh->handle_bytes = 8;
    fh->handle_type = 1; /* FILEID_INO32_GEN */
    memcpy(fh->f_handle, ino_gen, sizeof(ino_gen));
    for (size_t i = 0; i < sizeof(anchors) / sizeof(anchors[0]); i++) {
        _cleanup_close_ int mfd = anchors[i] ? open(anchors[i], O_RDONLY | O_CLOEXEC | O_NOCTTY) : -EBADF;
        int fd, err;

        if (mfd < 0)
            continue;
        fd = open_by_handle_at(mfd, fh, O_RDONLY | O_CLOEXEC);
        err = errno;
        if (fd >= 0) {
            probe_escaped(res, "via-%s:opened-inode-2", anchors[i]);
            (void) close(fd);
        } else if (PROBE_ERRNO_IN(err, EPERM, EACCES, ENOSYS)) {
            denied++;
        } else {
            probe_escaped(res, "via-%s:%s(reached-kernel)", anchors[i], probe_errname(err));
        }
    }
    free(fh);
    if (res->verdict == PROBE_CONTAINED)
        probe_contained(res, "%u-anchors-denied", denied);
}

/* The value of "Key:" in /proc/self/status, or NULL. */
static const char *status_field(const char *status, const char *key, char *out, size_t len)
{
    size_t klen = strlen(key);
    const char *line = status;

    while (line && *line) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            const char *v = line + klen + 1 + strspn(line + klen + 1, " \t");
            size_t n = strcspn(v, "\n");

            if (n >= len)
                n = len - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return out;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return NULL;
}

static const char *self_status(char *buf, size_t len)
{
    return probe_read_file("/proc/self/status", buf, len) > 0 ? buf : NULL;
}

/* contained iff prctl(PR_GET_NO_NEW_PRIVS) is 1 and /proc/self/status (when readable) says NoNewPrivs: 1 */
PROBE_FN(no_new_privs)
{
    char status[8192], v[32];
    int nnp = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);

    if (nnp != 1)
        probe_escaped(res, "prctl=%d", nnp);
    if (self_status(status, sizeof(status)) && status_field(status, "NoNewPrivs", v, sizeof(v)) &&
        strcmp(v, "1") != 0)
        probe_escaped(res, "NoNewPrivs=%s", v);
    if (res->verdict == PROBE_CONTAINED)
        probe_contained(res, "NoNewPrivs=1");
}

/* Capability sets straight from the kernel, for when /proc/self/status is masked. */
static void caps_from_prctl(struct probe_result *res)
{
    unsigned bnd = 0, amb = 0;

    for (int c = 0; c < 64; c++) {
        bnd += prctl(PR_CAPBSET_READ, c, 0, 0, 0) == 1;
        amb += prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, c, 0, 0) == 1;
    }
    if (bnd)
        probe_escaped(res, "bounding:%u-caps", bnd);
    if (amb)
        probe_escaped(res, "ambient:%u-caps", amb);
}

/*
 * contained iff CapInh, CapPrm, CapEff, CapBnd and CapAmb in /proc/self/status are all 0 (if status is
 * unreadable: an empty bounding and ambient set, which bound the others after exec).
 */
PROBE_FN(capabilities)
{
    static const char *const keys[] = {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"};
    char status[8192], v[32];

    if (!self_status(status, sizeof(status))) {
        caps_from_prctl(res);
    } else {
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
            if (!status_field(status, keys[i], v, sizeof(v)))
                probe_escaped(res, "%s-missing", keys[i]);
            else if (strtoull(v, NULL, 16) != 0)
                probe_escaped(res, "%s=%s", keys[i], v);
    }
    if (res->verdict == PROBE_CONTAINED)
        probe_contained(res, "all-zero");
}

/* contained iff Seccomp: 2 (a filter is installed), or PR_GET_SECCOMP says 2 when status is unreadable */
PROBE_FN(seccomp_mode)
{
    char status[8192], v[32];
    const char *mode =
        self_status(status, sizeof(status)) ? status_field(status, "Seccomp", v, sizeof(v)) : NULL;

    if (!mode) {
        int m = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
        (void) snprintf(v, sizeof(v), "%d", m);
        mode = v;
    }
    if (strcmp(mode, "2") == 0)
        probe_contained(res, "Seccomp=2");
    else
        probe_escaped(res, "Seccomp=%s", mode);
}

/*
 * contained iff no line of the map sends id 0 inside to id 0 of the parent namespace (the host), i.e. our
 * root is not the host's root. An unreadable map (no user namespaces) fails closed.
 */
static void judge_id_map(struct probe_result *res, const char *path)
{
    FILE *f = fopen(path, "re");
    unsigned long in, out, count;
    bool zero_mapped = false;

    if (!f) {
        probe_untested(res, path);
        return;
    }
    while (fscanf(f, "%lu %lu %lu", &in, &out, &count) == 3)
        if (in == 0 && count > 0) {
            zero_mapped = true;
            if (out == 0)
                probe_escaped(res, "0->host-0(count=%lu)", count);
            else
                probe_contained(res, "0->host-%lu", out);
        }
    (void) fclose(f);
    if (!zero_mapped)
        probe_contained(res, "0-unmapped");
}

PROBE_FN(uid_map_root)
{
    judge_id_map(res, "/proc/self/uid_map");
}

PROBE_FN(gid_map_root)
{
    judge_id_map(res, "/proc/self/gid_map");
}

const struct probe_def probe_defs_host[] = {
    PROBE_ENTRY("host-files", open_by_handle_root),
    PROBE_ENTRY("host-files", canary_direct),
    PROBE_ENTRY("host-files", canary_symlink),
    PROBE_ENTRY("host-files", canary_proc1_root),
    PROBE_ENTRY("host-files", canary_proc_self_root),
    PROBE_ENTRY("host-files", canary_host_pid_root),
    PROBE_ENTRY("host-files", leaked_fds),
    PROBE_ENTRY("privileges", no_new_privs),
    PROBE_ENTRY("privileges", capabilities),
    PROBE_ENTRY("privileges", seccomp_mode),
    PROBE_ENTRY("privileges", uid_map_root),
    PROBE_ENTRY("privileges", gid_map_root),
    {0},
};
