/* Host-made mounts for sandboxes (mount-util.h). */
#include "mount-util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fd-util.h"
#include "macro.h"

int cdn_idmapped_tree(const char *dir, int userns_fd, uint64_t attrs)
{
    _cleanup_close_ int tree =
        (int) syscall(SYS_open_tree, AT_FDCWD, dir, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0)
        return -errno;
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP | attrs, .userns_fd = (uint64_t) userns_fd};
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
        return -errno;
    return TAKE_FD(tree);
}
