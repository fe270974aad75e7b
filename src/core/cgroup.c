/* Driver choice and the logic both cgroup drivers share. */
#include "cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

const char *cdn_cgroup_root(void)
{
    const char *r = getenv("CORDON_CGROUP_ROOT");
    return r && r[0] == '/' ? r : "/sys/fs/cgroup";
}

const struct cdn_cgroup_ops *cdn_cgroup_detect(void)
{
    struct statfs sfs;
    if (statfs(cdn_cgroup_root(), &sfs) == 0 && (unsigned long) sfs.f_type == CGROUP2_SUPER_MAGIC)
        return &cdn_cgroup_v2_ops;
    /* tmpfs at the root: v1 or hybrid. The cgroup2 mount at unified/ in the
     * hybrid layout carries no controllers we need, so v1 it is. */
    return &cdn_cgroup_v1_ops;
}

int cdn_cgroup_path(char *buf, size_t size, enum cdn_cgroup_version v, const char *ctrl, const char *name)
{
    const char *under = name[0] == '/' ? "" : "/cordon/";
    int n = v == CDN_CGROUP_V1 ? snprintf(buf, size, "%s/%s%s%s", cdn_cgroup_root(), ctrl, under, name)
                               : snprintf(buf, size, "%s%s%s", cdn_cgroup_root(), under, name);
    return n < 0 || (size_t) n >= size ? -ENAMETOOLONG : 0;
}

uint64_t cdn_cgroup_cpu_quota(double cpus, uint64_t period_us)
{
    double q = ceil(cpus * (double) period_us);
    return q < 1000 ? 1000 : (uint64_t) q; /* the kernel's minimum quota is 1 ms */
}

int cdn_cgroup_keyed_value(const char *text, const char *key, uint64_t *ret)
{
    size_t klen = strlen(key);
    for (const char *line = text; line && *line;) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(line + klen + 1, &end, 10);
            if (errno || end == line + klen + 1)
                return -EINVAL;
            *ret = v;
            return 0;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return -ENOENT;
}

void cdn_cgroup_init(struct cdn_cgroup *cg, const struct cdn_cgroup_ops *ops, const char *name)
{
    *cg = (struct cdn_cgroup){.ops = ops, .dirfd = -EBADF};
    (void) snprintf(cg->name, sizeof cg->name, "%s", name);
}

int cdn_cgroup_rmdir(const char *p)
{
    /* Tasks that were just killed stay counted until they have fully exited. */
    for (int i = 0; i < 1000; i++) {
        if (rmdir(p) == 0 || errno == ENOENT)
            return 0;
        if (errno != EBUSY)
            return -errno;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    return -EBUSY;
}

char *cdn_cgroup_read_procs(int dirfd, const char *path)
{
    int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *b = cap < (64u << 20) ? realloc(buf, cap * 2) : NULL;
            if (!b) {
                int e = cap < (64u << 20) ? ENOMEM : EFBIG;
                free(buf);
                buf = NULL;
                errno = e;
                break;
            }
            buf = b, cap *= 2;
        }
        ssize_t k = read(fd, buf + n, cap - 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int e = errno;
            free(buf);
            buf = NULL;
            errno = e;
            break;
        }
        if (k == 0) {
            buf[n] = 0;
            char *nl = strrchr(buf, '\n'); /* an entry without its newline is not one */
            if (nl)
                nl[1] = 0;
            else
                buf[0] = 0;
            break;
        }
        n += (size_t) k;
    }
    int e = errno;
    close(fd);
    errno = e;
    return buf;
}

int cdn_cgroup_kill_listed(const char *procs)
{
    int n = 0;
    for (const char *s = procs; *s;) {
        char *e;
        long pid = strtol(s, &e, 10);
        if (e == s)
            break;
        if (pid > 1 && kill((pid_t) pid, SIGKILL) == 0) /* never the host's init, whatever the file says */
            n++;
        s = e;
    }
    return n;
}
