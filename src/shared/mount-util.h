/* Mounts made by the host for a sandbox. Runs on the host as root (the initial user namespace:
 * mount_setattr with MOUNT_ATTR_IDMAP needs CAP_SYS_ADMIN there). */
#pragma once

#include <stdint.h>

/* A detached copy of dir's mount, idmapped through the user namespace userns_fd (a file on disk
 * owned by uid N shows as the namespace's N; userns_fd < 0: not idmapped), with the mount attributes attrs
 * (MOUNT_ATTR_RDONLY, _NOSUID, _NODEV…) added. Its fd (close-on-exec), or -errno: -EINVAL when the kernel or
 * the file system cannot idmap. Nothing is mounted anywhere until the fd is moved (move_mount). */
int cdn_idmapped_tree(const char *dir, int userns_fd, uint64_t attrs);

/* Bind what fd (O_PATH) names on itself, with what is mounted beneath it (as mount --rbind PATH
 * PATH), without a path: it works where /proc/self is not this process's (a host process in a
 * sandbox's mount namespace). attrs (MOUNT_ATTR_*) are set on the whole copy before it is moved
 * there, and ret_mnt_id (if not NULL) is its mount id: nothing is looked up by path afterwards. 0 or
 * -errno. */
int cdn_bind_on_itself(int fd, uint64_t attrs, uint64_t *ret_mnt_id);
