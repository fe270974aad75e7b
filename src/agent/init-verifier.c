/* cordon-init: what a verifier step (CDN_EXEC_VERIFIER) gets that other commands do not.
 *
 * Runs in init (cdn_verifier_prepare, cdn_verifier_cleanup) and in the step's forked child
 * (cdn_verifier_child_env), after QUIESCE: no other process of the sandbox runs. Everything the
 * sandbox holds may have been written by the agent for this moment, so the step is given
 * nothing of it that the request did not name: a HOME made for it (empty, removed with
 * everything the step left there before the sandbox is the agent's again) and a PATH of system
 * directories its commands cannot write. The host has already left out what the spec's
 * environment would add (LD_*, PYTHON*, GIT_*, BASH_ENV, …; src/core/spec.c) and added
 * PYTHONNOUSERSITE and git's switches; a variable the request itself sets is the operator's and
 * is kept. What this cannot stop — code in the tree the step runs (a conftest.py, the repo's own
 * .git/config), in the working directory — is said in docs/events.md; the clean sibling is the
 * answer there. */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "init.h"
#include "shared/sysdirs.h"

static const char *const system_path[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                                          "/usr/bin",        "/sbin",          "/bin"};

/* The HOME made for the running (or last) step; "" when there is none. */
static char home[64];

static bool has_var(const struct cdn_exec_req *r, const char *name)
{
    size_t n = strlen(name);
    for (uint32_t i = 0; i < r->envc; i++)
        if (strncmp(r->envp[i], name, n) == 0 && r->envp[i][n] == '=')
            return true;
    return false;
}

static void refuse(uint32_t channel, int errnum, const char *msg)
{
    uint8_t buf[512];
    int n = cdn_errmsg_encode(buf, sizeof buf, errnum, msg);
    if (n > 0)
        cdn_agent_send(CDN_FRAME_ERROR, channel, buf, (uint32_t) n);
}

int cdn_verifier_prepare(const struct cdn_exec_req *r, uint32_t channel)
{
    char moved[256], msg[400];
    if (cdn_vm_protect_check(moved, sizeof moved) < 0) {
        (void) snprintf(msg, sizeof msg,
                        "protected path %s is not the mount bound there when the sandbox was made: "
                        "it was moved aside (with a parent, from outside the sandbox)",
                        moved);
        refuse(channel, CDN_VERIFIER_MOVED, msg);
        return -CDN_VERIFIER_MOVED;
    }
    cdn_verifier_cleanup(); /* a step that was cut short */
    if (has_var(r, "HOME"))
        return 0;
    /* mkdtemp makes a new directory (O_EXCL): nothing planted at a guessed name is used. */
    (void) snprintf(home, sizeof home, "/tmp/cordon-verifier-XXXXXX");
    if (!mkdtemp(home)) {
        int e = errno;
        home[0] = 0;
        (void) snprintf(msg, sizeof msg, "verifier: a HOME of its own in /tmp: %s", strerror(e));
        refuse(channel, e, msg);
        return -e;
    }
    return 0;
}

/* Whether the command's credentials may write path, or a parent of it below / (which could have
 * been replaced). access() judges by the calling uid, root here: a step that runs as another user
 * (spec or exec "user") is refused before it forks (init-exec.c lookup_user) rather than judged by
 * owner and mode — the simpler safe choice. / itself is left out: every tier keeps its entries from being
 * replaced (landlock; a read-only root in a guest) even where its mode says otherwise. */
static bool may_write(const char *path, bool system_ro)
{
    /* access() does not ask landlock: on a container the host vouches for it (CDN_EXEC_SYSTEM_RO) */
    return !(system_ro && cdn_path_in_system(path)) && access(path, W_OK) == 0;
}

static bool writable(const char *path, bool system_ro)
{
    char p[256];
    (void) snprintf(p, sizeof p, "%s", path);
    for (;;) {
        if (may_write(p, system_ro))
            return true;
        char *slash = strrchr(p, '/');
        if (!slash || slash == p)
            return false;
        *slash = 0;
    }
}

int cdn_verifier_child_env(const struct cdn_exec_req *r, const char *req_home)
{
    /* An in-place step cannot trust the dynamic loader if the sandbox could have told it what to
     * load into every process (the sibling mode starts from the image instead). */
    static const char *const loader[] = {"/etc/ld.so.preload", "/etc"};
    bool system_ro = r->flags & CDN_EXEC_SYSTEM_RO;
    for (size_t i = 0; i < sizeof loader / sizeof loader[0]; i++)
        if (may_write(loader[i], system_ro))
            return -CDN_VERIFIER_UNSAFE;
    (void) setenv("HOME", req_home ? req_home : home, 1);
    if (has_var(r, "PATH"))
        return 0;
    char path[256] = "";
    for (size_t i = 0; i < sizeof system_path / sizeof system_path[0]; i++)
        if (access(system_path[i], X_OK) == 0 && !writable(system_path[i], system_ro))
            (void) snprintf(path + strlen(path), sizeof path - strlen(path), "%s%s", path[0] ? ":" : "",
                            system_path[i]);
    (void) setenv("PATH", path, 1);
    return 0;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) st, (void) type, (void) ftw;
    (void) remove(path);
    return 0;
}

void cdn_verifier_cleanup(void)
{
    /* Only once no process is left (after QUIESCE): nothing can race the walk. FTW_PHYS: a
     * symlink the step made is removed, never followed. (Not FTW_MOUNT: an overlay's files report
     * the device of their layer, not the directory's; and a command cannot mount anything.) */
    if (home[0])
        (void) nftw(home, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    home[0] = 0;
}
