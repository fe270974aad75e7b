#include "landlock.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif

int cdn_landlock_abi(void)
{
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    return abi < 0 ? 0 : (int) abi;
}

/* Write-type rights known to each ABI; reads and execution stay unrestricted
 * by Landlock (the mount layout and seccomp cover those). */
static uint64_t write_rights(int abi)
{
    uint64_t r = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
                 LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                 LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
    if (abi >= 2)
        r |= LANDLOCK_ACCESS_FS_REFER;
    if (abi >= 3)
        r |= LANDLOCK_ACCESS_FS_TRUNCATE;
    return r;
}

static int add_path(int ruleset, const char *path, uint64_t rights)
{
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno; /* optional paths may be absent in an image */
    struct landlock_path_beneath_attr pb = {.allowed_access = rights, .parent_fd = fd};
    long r = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
    int e = errno;
    (void) close(fd);
    return r < 0 ? -e : 0;
}

/* The ruleset's rules are all in (r >= 0): enforce it on the calling process. */
static int restrict_self(int ruleset, int r)
{
    if (r >= 0 && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        r = -errno;
    if (r >= 0 && syscall(SYS_landlock_restrict_self, ruleset, 0) < 0)
        r = -errno;
    (void) close(ruleset);
    return r;
}

int cdn_landlock_restrict_writes(const char *const *dirs, const char *const *write_only)
{
    int abi = cdn_landlock_abi();
    if (abi <= 0)
        return 1;
    uint64_t rights = write_rights(abi);
    struct landlock_ruleset_attr attr = {.handled_access_fs = rights};
    int ruleset = (int) syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (ruleset < 0)
        return errno == ENOSYS || errno == EOPNOTSUPP ? 1 : -errno;
    int r = 0;
    for (size_t i = 0; r >= 0 && dirs && dirs[i]; i++)
        r = add_path(ruleset, dirs[i], rights);
    uint64_t file_rights = LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0);
    for (size_t i = 0; r >= 0 && write_only && write_only[i]; i++)
        r = add_path(ruleset, write_only[i], file_rights);
    return restrict_self(ruleset, r);
}

/* Every right of the ABI, reads and execution included. */
static uint64_t all_rights(int abi)
{
    return write_rights(abi) | LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE |
           LANDLOCK_ACCESS_FS_READ_DIR;
}

int cdn_landlock_restrict_paths(const char *const *read, const char *const *own, const char *const *devices)
{
    int abi = cdn_landlock_abi();
    if (abi <= 0)
        return 1;
    uint64_t rights = all_rights(abi);
    struct landlock_ruleset_attr attr = {.handled_access_fs = rights};
    int ruleset = (int) syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (ruleset < 0)
        return errno == ENOSYS || errno == EOPNOTSUPP ? 1 : -errno;
    const uint64_t ro =
        LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
    const uint64_t dev = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE |
                         (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0);
    int r = 0;
    for (size_t i = 0; r >= 0 && read && read[i]; i++)
        r = add_path(ruleset, read[i], ro);
    for (size_t i = 0; r >= 0 && own && own[i]; i++)
        r = add_path(ruleset, own[i], rights);
    for (size_t i = 0; r >= 0 && devices && devices[i]; i++)
        r = add_path(ruleset, devices[i], dev);
    return restrict_self(ruleset, r);
}
