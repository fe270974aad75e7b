#include "sysdirs.h"

#include <string.h>

static bool in(const char *const *list, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(list[i]) == len && strncmp(name, list[i], len) == 0)
            return true;
    return false;
}

bool cdn_system_top(const char *name, size_t len)
{
    static const char *const system[] = {"usr",   "bin",    "sbin", "lib", "lib32",
                                         "lib64", "libx32", "boot", "etc"};
    return in(system, sizeof system / sizeof system[0], name, len);
}

bool cdn_kernel_top(const char *name, size_t len)
{
    static const char *const kernel[] = {"proc", "sys", "dev"};
    return in(kernel, sizeof kernel / sizeof kernel[0], name, len);
}

bool cdn_read_only_top(const char *name, bool writable_system)
{
    size_t n = strlen(name);
    return cdn_kernel_top(name, n) || (!writable_system && cdn_system_top(name, n));
}

bool cdn_path_in_system(const char *path)
{
    return path[0] == '/' && cdn_system_top(path + 1, strcspn(path + 1, "/"));
}
