/*
 * Resource exhaustion probes: each one pushes a single resource to a fixed bound well above the sandbox's
 * limit (pids 128, memory 256M, disk 64M, nofile 1024) and well below what hurts a host, then gives
 * everything back: children are killed and reaped, the memory hog exits, the disk file is unlinked as soon as
 * it is created, fds are closed. Plus cgroup_limit_write: can we raise our own limits?
 */
#include "probe.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define FORK_BOMB_MAX   2000
#define MEM_TARGET_MIB  2048u
#define MEM_CHUNK_MIB   64u
#define DISK_TARGET_MIB 512u
#define FD_TARGET       100000u
#define MIB             (1024u * 1024u)

static void kill_and_reap(const pid_t *pids, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        (void) kill(pids[i], SIGKILL);
    for (unsigned i = 0; i < n; i++)
        while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR)
            ;
}

/* A child that only waits to be killed, and dies with its parent even if nobody kills it. */
static _Noreturn void idle_child(pid_t parent)
{
    (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(0);
    for (;;)
        (void) pause();
}

/* Up to 2000 idle children, all killed and reaped before the verdict. contained iff fork fails before 2000.
 */
PROBE_FN(fork_bomb)
{
    pid_t *pids = calloc(FORK_BOMB_MAX, sizeof(*pids));
    pid_t self = getpid();
    unsigned n = 0;
    int err = 0;

    if (!pids) {
        probe_untested(res, "ENOMEM");
        return;
    }
    for (; n < FORK_BOMB_MAX; n++) {
        pid_t pid = fork();

        if (pid < 0) {
            err = errno;
            break;
        }
        if (pid == 0)
            idle_child(self);
        pids[n] = pid;
    }
    kill_and_reap(pids, n);
    free(pids);
    if (err)
        probe_contained(res, "fork-failed-after-%u:%s", n, probe_errname(err));
    else
        probe_escaped(res, "forked-%u", n);
}

/* Runs in a grandchild: volunteers for the OOM killer, then maps and touches memory, reporting MiB done. */
static _Noreturn void memory_hog(int out)
{
    int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);

    if (adj >= 0) {
        (void) !write(adj, "1000", 4);
        (void) close(adj);
    }
    for (unsigned mib = 0; mib < MEM_TARGET_MIB; mib += MEM_CHUNK_MIB) {
        void *p = mmap(NULL, (size_t) MEM_CHUNK_MIB * MIB, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        unsigned done = mib + MEM_CHUNK_MIB;

        if (p == MAP_FAILED)
            _exit(2);
        memset(p, 0xa5, (size_t) MEM_CHUNK_MIB * MIB);
        (void) !write(out, &done, sizeof(done));
    }
    _exit(0);
}

/*
 * Touch up to 2 GiB in a grandchild so that the OOM killer takes it and not the runner. contained iff the
 * grandchild is killed or mmap fails (ENOMEM, RLIMIT_AS) before 2 GiB.
 */
PROBE_FN(memory_2g)
{
    unsigned last = 0, v;
    int pfd[2], status = 0;
    pid_t pid;

    if (pipe2(pfd, O_CLOEXEC) < 0 || (pid = fork()) < 0) {
        probe_untested(res, probe_errname(errno));
        return;
    }
    if (pid == 0) {
        (void) close(pfd[0]);
        memory_hog(pfd[1]);
    }
    (void) close(pfd[1]);
    while (read(pfd[0], &v, sizeof(v)) == (ssize_t) sizeof(v))
        last = v;
    (void) close(pfd[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        probe_escaped(res, "touched-%uMiB", last);
    else if (WIFSIGNALED(status))
        probe_contained(res, "killed-by-signal-%d-after-%uMiB", WTERMSIG(status), last);
    else
        probe_contained(res, "mmap-failed-after-%uMiB", last);
}

static const char *disk_dir(const struct probe_ctx *ctx)
{
    const char *dirs[] = {ctx->disk_dir, "/workspace", "/tmp"};
    struct stat st;

    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        if (dirs[i] && stat(dirs[i], &st) == 0 && S_ISDIR(st.st_mode))
            return dirs[i];
    return NULL;
}

/* Writes whole MiB blocks with distinct contents (nothing to dedupe or compress). Returns MiB written;
 * *ret_err. */
static unsigned fill_disk(int fd, char *buf, int *ret_err)
{
    unsigned mib;

    *ret_err = 0;
    for (mib = 0; mib < DISK_TARGET_MIB; mib++) {
        size_t off = 0;

        for (size_t i = 0; i < MIB; i += 4096)
            (void) snprintf(buf + i, 32, "cordon-probe %u %zu", mib, i);
        while (off < MIB) {
            ssize_t n = write(fd, buf + off, MIB - off);

            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                *ret_err = n < 0 ? errno : ENOSPC;
                return mib;
            }
            off += (size_t) n;
        }
    }
    if (fsync(fd) < 0)
        *ret_err = errno;
    return mib;
}

/*
 * Up to 512 MiB into $CORDON_PROBE_DISK_DIR (else /workspace, else /tmp). The file is unlinked right after it
 * is created, so its blocks are freed when this child exits, whatever happens. contained iff a write or the
 * final fsync fails with ENOSPC/EDQUOT/EFBIG before 512 MiB, or the directory is not writable at all.
 */
PROBE_FN(disk_512m)
{
    const char *dir = disk_dir(ctx);
    char path[PATH_MAX], *buf;
    _cleanup_close_ int fd = -EBADF;
    unsigned mib;
    int err;

    if (!dir) {
        probe_contained(res, "no-disk-dir");
        return;
    }
    (void) signal(SIGXFSZ, SIG_IGN);
    (void) snprintf(path, sizeof(path), "%s/cordon-probe-disk.XXXXXX", dir);
    fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) {
        PROBE_JUDGE(res, dir, -1, errno, EROFS, EACCES, EPERM, ENOSPC, EDQUOT);
        return;
    }
    (void) unlink(path);
    buf = calloc(1, MIB);
    if (!buf) {
        probe_untested(res, "ENOMEM");
        return;
    }
    mib = fill_disk(fd, buf, &err);
    free(buf);
    if (err && PROBE_ERRNO_IN(err, ENOSPC, EDQUOT, EFBIG))
        probe_contained(res, "%s-after-%uMiB", probe_errname(err), mib);
    else if (err)
        probe_escaped(res, "%s-after-%uMiB(unexpected)", probe_errname(err), mib);
    else
        probe_escaped(res, "wrote-%uMiB-to-%s", mib, dir);
}

/*
 * Raises the soft RLIMIT_NOFILE to the hard limit (and tries to raise the hard one, which needs
 * CAP_SYS_RESOURCE), then duplicates one fd up to 100000 times. contained iff EMFILE/ENFILE before 100000.
 */
PROBE_FN(fd_exhaustion)
{
    struct rlimit rl, want = {.rlim_cur = FD_TARGET + 64, .rlim_max = FD_TARGET + 64};
    int *fds = calloc(FD_TARGET, sizeof(*fds));
    _cleanup_close_ int base = open("/", O_PATH | O_CLOEXEC);
    unsigned n = 0;
    int err = 0;

    if (!fds || base < 0) {
        free(fds);
        probe_untested(res, probe_errname(errno));
        return;
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && setrlimit(RLIMIT_NOFILE, &want) < 0) {
        rl.rlim_cur = rl.rlim_max;
        (void) setrlimit(RLIMIT_NOFILE, &rl);
    }
    for (; n < FD_TARGET; n++) {
        fds[n] = fcntl(base, F_DUPFD_CLOEXEC, 0);
        if (fds[n] < 0) {
            err = errno;
            break;
        }
    }
    for (unsigned i = 0; i < n; i++)
        (void) close(fds[i]);
    free(fds);
    if (!err)
        probe_escaped(res, "opened-%u", n);
    else if (PROBE_ERRNO_IN(err, EMFILE, ENFILE))
        probe_contained(res, "%s-after-%u", probe_errname(err), n);
    else
        probe_escaped(res, "%s-after-%u(unexpected)", probe_errname(err), n);
}

/* true when every controller of the comma list ctrls is one of the comma-separated superopts */
static bool opts_have_all(const char *superopts, const char *ctrls)
{
    char want[256], *save = NULL;
    size_t olen = strlen(superopts);

    (void) snprintf(want, sizeof(want), "%s", ctrls);
    for (char *c = strtok_r(want, ",", &save); c; c = strtok_r(NULL, ",", &save)) {
        size_t clen = strlen(c);
        const char *p = superopts;
        bool found = false;

        while (!found && (p = strstr(p, c))) {
            found = (p == superopts || p[-1] == ',') && (p + clen == superopts + olen || p[clen] == ',');
            p += clen;
        }
        if (!found)
            return false;
    }
    return true;
}

/* Our cgroup path in the hierarchy of mount m, from /proc/self/cgroup lines "id:controllers:path". */
static bool own_cgroup(const char *self_cgroup, const struct probe_mount *m, char *out, size_t len)
{
    bool v2 = strcmp(m->fstype, "cgroup2") == 0;
    char copy[8192], *save = NULL;

    (void) snprintf(copy, sizeof(copy), "%s", self_cgroup);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

        if (!c2)
            continue;
        *c2 = '\0';
        if (v2 ? strcmp(line, "0:") == 0 : (c1[1] != '\0' && opts_have_all(m->superopts, c1 + 1))) {
            (void) snprintf(out, len, "%s", c2 + 1);
            return true;
        }
    }
    return false;
}

struct cg_walk {
    struct probe_result *res;
    char self_cgroup[8192];
    unsigned files;
};

static int judge_cgroup_mount(const struct probe_mount *m, void *userdata)
{
    static const char *const knobs[] = {"memory.max",
                                        "memory.swap.max",
                                        "pids.max",
                                        "cpu.max",
                                        "io.max",
                                        "memory.limit_in_bytes",
                                        "memory.memsw.limit_in_bytes",
                                        "cpu.cfs_quota_us"};
    struct cg_walk *w = userdata;
    char cg[PATH_MAX], path[PATH_MAX * 2 + 64];
    size_t rlen = strlen(m->root);
    const char *rel;

    if ((strcmp(m->fstype, "cgroup") != 0 && strcmp(m->fstype, "cgroup2") != 0) ||
        !own_cgroup(w->self_cgroup, m, cg, sizeof(cg)))
        return 0;
    if (strcmp(m->root, "/") == 0)
        rel = cg;
    else if (strncmp(cg, m->root, rlen) == 0 && (cg[rlen] == '/' || cg[rlen] == '\0'))
        rel = cg + rlen;
    else
        return 0;
    for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
        struct stat st;

        (void) snprintf(path, sizeof(path), "%s%s/%s", m->target, strcmp(rel, "/") == 0 ? "" : rel, knobs[i]);
        if (stat(path, &st) < 0)
            continue;
        w->files++;
        PROBE_JUDGE_OPEN(w->res, path, O_WRONLY, EROFS, EACCES, EPERM);
    }
    return 0;
}

/*
 * The limit files of our own cgroup (memory, pids, cpu, io on v2; their v1 names), opened for write and
 * closed. contained iff none opens (EROFS/EACCES/EPERM), or no cgroup filesystem is visible at all.
 */
PROBE_FN(cgroup_limit_write)
{
    struct cg_walk w = {.res = res};
    int r;

    if (probe_read_file("/proc/self/cgroup", w.self_cgroup, sizeof(w.self_cgroup)) < 0) {
        probe_contained(res, "no-/proc/self/cgroup");
        return;
    }
    r = probe_for_each_mount(judge_cgroup_mount, &w);
    if (r < 0)
        probe_contained(res, "mountinfo:%s", probe_errname(-r));
    else if (w.files == 0)
        probe_contained(res, "no-limit-files-visible");
}

const struct probe_def probe_defs_res[] = {
    PROBE_ENTRY("resources", cgroup_limit_write),  PROBE_ENTRY_T("resources", fork_bomb, 60),
    PROBE_ENTRY_T("resources", memory_2g, 120),    PROBE_ENTRY_T("resources", disk_512m, 120),
    PROBE_ENTRY_T("resources", fd_exhaustion, 60), {0},
};
