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
    struct mount_attr attr = {.attr_set = (userns_fd >= 0 ? MOUNT_ATTR_IDMAP : 0) | attrs,
                              .userns_fd = userns_fd >= 0 ? (uint64_t) userns_fd : 0};
    if (attr.attr_set && syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
        return -errno;
    return TAKE_FD(tree);
}

int cdn_bind_on_itself(int fd, uint64_t attrs, uint64_t *ret_mnt_id)
{
    _cleanup_close_ int tree = (int) syscall(
        SYS_open_tree, fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
    if (tree < 0)
        return -errno;
    struct mount_attr attr = {.attr_set = attrs};
    if (attrs && syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0)
        return -errno;
    int r = ret_mnt_id ? cdn_mount_of(tree, "", AT_EMPTY_PATH, ret_mnt_id, NULL) : 0;
    if (r < 0)
        return r;
    if (syscall(SYS_move_mount, tree, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        return -errno;
    return 0;
}
