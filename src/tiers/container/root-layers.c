/* The root of a container whose engine mounted it as an overlay (cordon-runtime under podman or
 * containerd: cdn_sandbox.root_layers). Host side, root in the initial namespaces, between clone3
 * and the setup child's go, once the child's id maps are written.
 *
 * Overlay cannot be idmapped, its layers can: their common directory is idmapped once through the
 * sandbox's user namespace, and a new overlay of the same layers, mounted here by host root, is the
 * container's root. Its files keep their owners (the image's uid 0 is the container's root, an
 * unprivileged host uid), and copy-ups write the upper as the engine's own mount does (trusted
 * xattrs, which an overlay mounted inside the user namespace could not). The engine's mount of the
 * same layers stays, as it does under runc: index=off lets both share the upper, which is what an
 * engine's `cp` into a running container already relies on. */
#include "container-internal.h"
#include "core/sandbox.h"
#include "shared/fd-util.h"
#include "shared/mount-util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int set(int fs, const char *key, const char *value, struct cdn_error *err)
{
    if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, key, value, 0) < 0)
        return cdn_error_field(err, errno, "root.path", "root.path: overlay %s=%s: %m", key, value);
    return 0;
}

/* One layer's path through the idmapped tree: /proc/self/fd/N/REL (fsconfig takes 256 bytes). */
static int layer(int fs, const char *key, int tree, const char *rel, struct cdn_error *err)
{
    char path[256];
    int n = snprintf(path, sizeof path, "/proc/self/fd/%d/%s", tree, rel);
    if (n < 0 || (size_t) n >= sizeof path)
        return cdn_error_field(err, ENAMETOOLONG, "root.path", "root.path: overlay layer %s: path too long",
                               rel);
    return set(fs, key, path, err);
}

/* The overlay acts on its layers with its mounter's credentials (copy-up, its work directory): through
 * the idmapped layers those must be ids the idmap maps, so it is mounted with the sandbox root's
 * host uid and gid as this thread's fsuid and fsgid, its capabilities kept (a change of fsuid from 0
 * drops the file ones, which copy-up needs to keep owners and modes). Raw syscalls: this thread
 * only. on: take them; off: back to root's. 0, or -errno. */
static int as_sandbox_root(uint32_t base, bool on)
{
    if (on) {
        (void) syscall(SYS_setfsgid, base);
        (void) syscall(SYS_setfsuid, base);
    } else {
        (void) syscall(SYS_setfsuid, 0);
        (void) syscall(SYS_setfsgid, 0);
    }
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct caps[2];
    if (syscall(SYS_capget, &h, caps) < 0)
        return -errno;
    caps[0].effective = caps[0].permitted;
    caps[1].effective = caps[1].permitted;
    if (syscall(SYS_capset, &h, caps) < 0)
        return -errno;
    return (uint32_t) syscall(SYS_setfsuid, -1) == (on ? base : 0) ? 0 : -EPERM;
}

/* tree: the layers' idmapped view; lower_tree: the lower layers' when they need another (sandbox.h
 * lowers_from_zero), else tree. */
static int create_overlay(int fs, int tree, int lower_tree, const struct cdn_root_layers *l, bool writable,
                          struct cdn_error *err)
{
    int r = set(fs, "index", "off", err);
    if (r >= 0 && l->metacopy[0])
        r = set(fs, "metacopy", l->metacopy, err);
    if (r >= 0 && l->redirect_dir[0])
        r = set(fs, "redirect_dir", l->redirect_dir, err);
    if (r >= 0 && l->volatile_upper && writable &&
        syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "volatile", NULL, 0) < 0)
        r = cdn_error_field(err, errno, "root.path", "root.path: overlay volatile: %m");
    /* Read-only: the upper is the top lower layer, so that what the engine put there shows. */
    if (r >= 0 && l->upper && !writable)
        r = layer(fs, "lowerdir+", tree, l->upper, err);
    for (size_t i = 0; r >= 0 && i < l->n_lower; i++)
        r = layer(fs, "lowerdir+", lower_tree, l->lower[i], err);
    if (r >= 0 && l->upper && writable && (r = layer(fs, "upperdir", tree, l->upper, err)) >= 0)
        r = layer(fs, "workdir", tree, l->work, err);
    if (r < 0)
        return r;
    if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return cdn_error_field(err, errno, "root.path", "root.path: mount the overlay of %s: %m", l->base);
    return 0;
}

int cdn_root_layers_mount(int userns, int lower_userns, uint32_t uid_base, const struct cdn_root_layers *l,
                          bool writable, struct cdn_error *err)
{
    _cleanup_close_ int tree =
        cdn_idmapped_tree(l->base, userns, MOUNT_ATTR_NODEV); /* userns < 0: a plain clone */
    _cleanup_close_ int lower_tree =
        tree >= 0 && lower_userns >= 0 ? cdn_idmapped_tree(l->base, lower_userns, MOUNT_ATTR_NODEV) : -EBADF;
    if (tree >= 0 && lower_userns >= 0 && lower_tree < 0)
        tree = safe_close(tree), tree = lower_tree;
    if (tree < 0)
        return cdn_error_field(err, -tree, "root.path", "root.path: idmap the overlay's layers under %s: %s",
                               l->base, strerror(-tree));
    int r = as_sandbox_root(uid_base, true);
    _cleanup_close_ int fs = r < 0 ? r : (int) syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
    if (r >= 0 && fs < 0)
        r = cdn_error_set(err, errno, "fsopen overlay: %m");
    else if (r < 0)
        cdn_error_set(err, -r, "take the sandbox root's ids to mount its overlay: %s", strerror(-r));
    if (r >= 0)
        r = create_overlay(fs, tree, lower_tree >= 0 ? lower_tree : tree, l, writable, err);
    if (as_sandbox_root(0, false) < 0)
        abort(); /* never go on with another fsuid */
    if (r < 0)
        return r;
    int mnt = (int) syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                            MOUNT_ATTR_NODEV | (writable ? 0 : MOUNT_ATTR_RDONLY));
    if (mnt < 0)
        return cdn_error_set(err, errno, "fsmount overlay: %m");
    return mnt;
}
