#include "paths.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef CDN_LIBEXECDIR
#define CDN_LIBEXECDIR "/usr/local/libexec/cordon"
#endif

static const char *env_dir(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && v[0] == '/' ? v : def;
}

const char *cdn_state_dir(void)
{
    return env_dir("CORDON_STATE_DIR", "/var/lib/cordon");
}

const char *cdn_run_dir(void)
{
    return env_dir("CORDON_RUN_DIR", "/run/cordon");
}

const char *cdn_vm_dir(void)
{
    static char buf[PATH_MAX];
    const char *v = getenv("CORDON_VM_DIR");
    if (v && v[0] == '/')
        return v;
    (void) snprintf(buf, sizeof buf, "%s/vm", cdn_state_dir());
    return buf;
}

void cdn_cache_dir(char *buf, unsigned size)
{
    (void) snprintf(buf, size, "%s/cache", cdn_state_dir());
}

int cdn_libexec_path(const char *name, char *buf, unsigned size)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            if ((unsigned) snprintf(buf, size, "%s/%s", exe, name) < size && access(buf, X_OK) == 0)
                return 0;
        }
    }
    if ((unsigned) snprintf(buf, size, "%s/%s", CDN_LIBEXECDIR, name) < size && access(buf, X_OK) == 0)
        return 0;
    return -ENOENT;
}

/* $env when it names an executable, else name beside us or in libexec. */
static int helper_path(const char *env_name, const char *name, char *buf, unsigned size)
{
    const char *env = getenv(env_name);
    if (env && env[0] == '/' && access(env, X_OK) == 0) {
        (void) snprintf(buf, size, "%s", env);
        return 0;
    }
    return cdn_libexec_path(name, buf, size);
}

int cdn_init_path(char *buf, unsigned size)
{
    return helper_path("CORDON_INIT", "cordon-init", buf, size);
}

int cdn_setup_path(char *buf, unsigned size)
{
    return helper_path("CORDON_SETUP", "cordon-setup", buf, size);
}

int cdn_worker_path(char *buf, unsigned size)
{
    return helper_path("CORDON_WORKER", "cordon-worker", buf, size);
}

int cdn_path_unsearchable(const char *path, char *buf, unsigned size, unsigned *mode)
{
    char p[PATH_MAX];
    if (path[0] != '/' || (size_t) snprintf(p, sizeof p, "%s", path) >= sizeof p)
        return 0;
    for (char *c = p + 1;; c++) {
        bool end = *c == 0;
        if (*c != '/' && !end)
            continue;
        *c = 0;
        struct stat st;
        if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode))
            return 0;
        if (!(st.st_mode & S_IXOTH)) {
            (void) snprintf(buf, size, "%s", p);
            *mode = st.st_mode & 07777;
            return 1;
        }
        if (end)
            return 0;
        *c = '/';
    }
}
