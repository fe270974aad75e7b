/* The sandbox's filesystem view, built by the setup child inside its own user
 * and mount namespaces (so every mount here dies with the sandbox, whatever
 * happens to the host process):
 *
 *   scratch (disk limit: writable.c's filesystem, or a tmpfs) ─ upper/, work/ ─┐
 *   image (read-only lower) ───────────────── overlay ─┴→ scratch/root  → pivot_root
 *   + host /usr read-only (host image), /proc with OCI masks, minimal /dev,
 *     user binds; then pivot_root and detach the old root.
 *
 * Trusts the spec (validated by the host) but not the image: paths inside the
 * new root are resolved with RESOLVE_IN_ROOT so an image's symlinks cannot
 * redirect a mount outside it. */
#include "container-internal.h"
#include "core/bind-policy.h"
#include "core/paths.h"
#include "core/protect.h"
#include "shared/fd-util.h"
#include "shared/mount-util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty", NULL};

#define CHECK(expr, ...)                                                                                     \
    do {                                                                                                     \
        if ((expr) < 0)                                                                                      \
            return cdn_error_set(err, errno, __VA_ARGS__);                                                   \
    } while (0)

/* Add attributes (MOUNT_ATTR_RDONLY, _NOSUID, …) to the mount at fd and the
 * mounts beneath it. mount_setattr() only adds what is asked, so the flags the
 * kernel locks on mounts copied from the host (atime, nodev…) are left alone,
 * which a MS_REMOUNT would have to repeat exactly. */
static int set_mount_attrs(int fd, uint64_t attrs, const char *what, struct cdn_error *err)
{
    struct mount_attr attr = {.attr_set = attrs};
    if (attrs && syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0)
        return cdn_error_set(err, errno, "set flags on %s: %m", what);
    return 0;
}

/* Bind src on the path dst, then give the new mount attrs. */
static int bind_mount(const char *src, const char *dst, uint64_t attrs, struct cdn_error *err)
{
    CHECK(mount(src, dst, NULL, MS_BIND | MS_REC, NULL), "bind %s on %s: %m", src, dst);
    if (!attrs)
        return 0;
    _cleanup_close_ int fd = open(dst, O_PATH | O_CLOEXEC); /* now names the new mount */
    if (fd < 0)
        return cdn_error_set(err, errno, "open %s: %m", dst);
    return set_mount_attrs(fd, attrs, dst, err);
}

/* Open (creating when missing) path beneath rootfd, never leaving the root.
 * dir selects whether the last component is created as a directory or file. */
static int open_in_root(int rootfd, const char *path, bool dir, mode_t mode);

/* path (a directory, made where missing), reached without following any symlink: -ELOOP if one is on
 * the way (one that made it through a symlink is refused too). */
static int open_no_symlinks(int rootfd, const char *path, mode_t mode)
{
    struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS};
    int fd = (int) syscall(SYS_openat2, rootfd, path, &how, sizeof how);
    if (fd >= 0 || errno != ENOENT)
        return fd >= 0 ? fd : -errno;
    int made = open_in_root(rootfd, path, true, mode);
    if (made < 0)
        return made;
    (void) close(made);
    fd = (int) syscall(SYS_openat2, rootfd, path, &how, sizeof how);
    return fd >= 0 ? fd : -errno;
}

static int open_in_root(int rootfd, const char *path, bool dir, mode_t mode)
{
    struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    int fd = (int) syscall(SYS_openat2, rootfd, path, &how, sizeof how);
    if (fd >= 0 || errno != ENOENT)
        return fd < 0 ? -errno : fd;
    char parent[4096];
    (void) snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    const char *leaf = slash ? slash + 1 : parent;
    if (slash == parent)
        parent[1] = 0, leaf = path + 1;
    else if (slash)
        *slash = 0;
    int pfd = open_in_root(rootfd, slash ? parent : "/", true, 0755);
    if (pfd < 0)
        return pfd;
    /* mkdirat/mknodat through an O_PATH directory fd work; RESOLVE_IN_ROOT already checked the parent. */
    int r = dir ? mkdirat(pfd, leaf, mode) : mknodat(pfd, leaf, S_IFREG | mode, 0);
    if (r < 0 && errno != EEXIST) {
        r = -errno;
        (void) close(pfd);
        return r;
    }
    how.resolve |= RESOLVE_NO_SYMLINKS;
    fd = (int) syscall(SYS_openat2, pfd, leaf, &how, sizeof how);
    r = fd < 0 ? -errno : fd;
    (void) close(pfd);
    return r;
}

static int fd_path(char buf[64], int fd)
{
    return snprintf(buf, 64, "/proc/self/fd/%d", fd);
}

/* Directories the sandbox must be able to write: the workdir, root's home, the
 * temp dirs. */
static const struct {
    const char *path; /* NULL: the workdir */
    mode_t mode;
} writable_dirs[] = {{NULL, 0755},    {"/tmp", 01777}, {"/var/tmp", 01777},
                     {"/root", 0700}, {"/home", 0755}, {"/run", 0755}};

static const char *writable_path(const struct cdn_setup_args *a, size_t i)
{
    return writable_dirs[i].path ? writable_dirs[i].path : a->spec->workdir;
}

/* lstat rel in the image: in its root directory, or in its layers from the top down (an overlay
 * whiteout, char 0/0, hides what the layers below have). */
static int lower_lstat(const struct cdn_image *img, const char *rel, struct stat *st)
{
    char p[8400];
    if (img->n_layers == 0) {
        (void) snprintf(p, sizeof p, "%s%s", img->lower, rel);
        return lstat(p, st);
    }
    for (size_t i = 0; i < img->n_layers; i++) {
        (void) snprintf(p, sizeof p, "%s/%s%s", img->lower, img->layers[i], rel);
        if (lstat(p, st) == 0)
            return S_ISCHR(st->st_mode) && st->st_rdev == 0 ? -1 : 0;
    }
    return -1;
}

/* Make path (and its parents) in the upper layer before the overlay is
 * mounted. Image directories belong to host uids the sandbox cannot map, so
 * it could not create anything inside them later; a directory present in the
 * upper layer lends the merged directory its owner (the sandbox's root) while
 * the image's contents stay visible. Components the image has as something
 * other than a directory (the /lib -> usr/lib symlink…) are not shadowed:
 * then nothing is made here and the caller's later checks decide. */
static void precreate_in_upper(const struct cdn_setup_args *a, const char *path, bool dir, mode_t mode)
{
    char rel[4096];
    size_t n = strlen(path);
    if (n >= sizeof rel || path[0] != '/')
        return;
    memcpy(rel, path, n + 1);
    for (char *c = rel + 1;; c++) {
        bool leaf = *c == 0;
        if (*c != '/' && !leaf)
            continue;
        *c = 0;
        char upper[8400];
        struct stat st;
        (void) snprintf(upper, sizeof upper, "%s/upper%s", a->scratch, rel);
        bool in_lower = lower_lstat(a->image, rel, &st) == 0;
        if (in_lower && !S_ISDIR(st.st_mode))
            return; /* a file or symlink in the image: leave the image's shape alone */
        /* A layer restored from a checkpoint (writable.c) holds what the sandbox wrote before:
         * never through its symlinks (this is the setup child, in the host's view of paths). */
        if (lstat(upper, &st) == 0 && !S_ISDIR(st.st_mode))
            return;
        if (leaf && !dir) {
            if (!in_lower)
                (void) mknod(upper, S_IFREG | mode, 0);
            return;
        }
        if (mkdir(upper, leaf ? mode : 0755) == 0 && leaf)
            (void) chmod(upper, mode); /* past the umask: 1777 for the temp dirs */
        if (leaf)
            return;
        *c = '/';
    }
}

/* The idmapped image root (lower_fd, from the host) under scratch/lower, in this mount namespace:
 * overlay takes private clones of its layers, which must be mounts of the caller's namespace. */
static bool attach_lower(const struct cdn_setup_args *a, int lower_fd, char *base, size_t size)
{
    (void) snprintf(base, size, "%s/lower", a->scratch);
    if (lower_fd < 0 || mkdir(base, 0700) < 0 ||
        syscall(SYS_move_mount, lower_fd, "", AT_FDCWD, base, MOVE_MOUNT_F_EMPTY_PATH) < 0) {
        (void) snprintf(base, size, "%s", a->image->lower);
        return false;
    }
    return true;
}

/* lowerdir=: the root directory, or the layers as short links (scratch/l/N) so that even
 * CDN_IMAGE_LAYERS_MAX of them fit the one page mount(2) copies; the mount runs in scratch. */
static int lowerdir_option(const struct cdn_setup_args *a, const char *base, char *opts, size_t size,
                           struct cdn_error *err)
{
    const struct cdn_image *img = a->image;
    if (img->n_layers == 0) {
        (void) snprintf(opts, size, "lowerdir=%s", base);
        return 0;
    }
    char dir[4200], link[4300], target[8400];
    (void) snprintf(dir, sizeof dir, "%s/l", a->scratch);
    CHECK(mkdir(dir, 0700), "mkdir %s: %m", dir);
    size_t off = (size_t) snprintf(opts, size, "lowerdir=");
    for (size_t i = 0; i < img->n_layers && off < size; i++) {
        (void) snprintf(link, sizeof link, "%s/%zu", dir, i);
        (void) snprintf(target, sizeof target, "%s/%s", base, img->layers[i]);
        CHECK(symlink(target, link), "link layer %zu: %m", i);
        off += (size_t) snprintf(opts + off, size - off, "%sl/%zu", i ? ":" : "", i);
    }
    return 0;
}

/* The scratch: the writable layer on disk the host made (writable.c), or a tmpfs of disk_mb
 * (spec "disk": "memory"). */
static int mount_scratch(const struct cdn_setup_args *a, struct cdn_error *err)
{
    if (a->writable_fd >= 0)
        return cdn_writable_attach(CDN_FD_WRITABLE, a->scratch, err);
    char opts[64];
    (void) snprintf(opts, sizeof opts, "size=%llum,mode=0755", (unsigned long long) a->spec->limits.disk_mb);
    CHECK(mount("cordon-scratch", a->scratch, "tmpfs", MS_NOSUID | MS_NODEV, opts),
          "mount scratch tmpfs: %m");
    return 0;
}

/* A lookup of path by the sandbox's root failed with errnum: when that is EACCES because a directory
 * on the way is closed to others (the sandbox's uids are others on the host: a state directory or
 * bind source under a 0700 /root), say which and what to change; else the plain message (fmt). */
static int lookup_failed(struct cdn_error *err, int errnum, const char *field, const char *what,
                         const char *path)
{
    char dir[160];
    unsigned mode;
    if (errnum == EACCES && cdn_path_unsearchable(path, dir, sizeof dir, &mode))
        return cdn_error_field(
            err, errnum, field,
            "%s '%s': the sandbox's users cannot search %s (mode %04o): chmod o+x %s, or keep "
            "it under directories others may search",
            what, path, dir, mode, dir);
    return cdn_error_field(err, errnum, field, "%s '%s': %s", what, path, strerror(errnum));
}

/* Returns 1 when the image's files keep their owners inside (idmapped), 0 when they are nobody's. */
static int mount_overlay(const struct cdn_setup_args *a, const char *root, int lower_fd,
                         struct cdn_error *err)
{
    char opts[8400], path[4200], base[4200];
    int r = mount_scratch(a, err);
    if (r < 0)
        return r;
    const char *sub[] = {"upper", "work", "root"};
    bool fresh = true;
    for (size_t i = 0; i < ELEMENTSOF(sub); i++) {
        struct stat st;
        (void) snprintf(path, sizeof path, "%s/%s", a->scratch, sub[i]);
        /* A restored layer (writable.c) has them: the layer's root is cordon's, never the sandbox's. */
        int made = mkdir(path, 0755);
        if (made < 0 && (errno != EEXIST || lstat(path, &st) < 0 || !S_ISDIR(st.st_mode)))
            return cdn_error_set(err, errno ?: EEXIST, "mkdir %s: %m", path);
        fresh = fresh && made == 0;
    }
    bool idmapped = attach_lower(a, lower_fd, base, sizeof base);
    /* Without idmapping the image's directories belong to uids the sandbox cannot map: what it
     * must write is made in the upper layer first. With it they are its own as the image says. */
    if (!idmapped && !a->spec->read_only_root)
        for (size_t i = 0; i < ELEMENTSOF(writable_dirs); i++)
            precreate_in_upper(a, writable_path(a, i), true, writable_dirs[i].mode);
    for (size_t i = 0; !idmapped && i < a->spec->n_mounts; i++) {
        struct stat st;
        if (stat(a->spec->mounts[i].source, &st) == 0)
            precreate_in_upper(a, a->spec->mounts[i].target, S_ISDIR(st.st_mode),
                               S_ISDIR(st.st_mode) ? 0755 : 0644);
    }
    if ((r = lowerdir_option(a, base, opts, sizeof opts, err)) < 0)
        return r;
    size_t off = strlen(opts);
    /* volatile: the overlay passes no sync to its upper layer, at its unmount either. That unmount
     * (init's exit) would otherwise write a layer's dirty pages out just before the layer is thrown
     * away, and in the layer pool commit the whole btrfs: ~0.4 ms of CPU and a wait on the disk per
     * sandbox (docs/performance.md). Only for a layer that is mounted once: overlay leaves
     * work/incompat/volatile behind and refuses a second mount of it, which a checkpointable layer
     * (restored, forked) gets; a checkpoint syncs the layer itself, not the overlay. In the sandbox,
     * sync, syncfs and fsync of its files then return at once: its layer ends with it in any case. */
    (void) snprintf(opts + off, sizeof opts - off, ",upperdir=upper,workdir=work,userxattr%s",
                    fresh && !a->spec->checkpoints ? ",volatile" : "");
    CHECK(chdir(a->scratch), "chdir %s: %m", a->scratch);
    if (mount("overlay", root, "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
        return lookup_failed(err, errno, "image", "mount overlay on image", a->image->lower);
    /* The overlay holds its own clones of the layers. The idmapped mount under scratch/lower is
     * left where it is: it is in the old root's tree, which pivot() detaches whole, the sandbox
     * never sees it, and an umount of its own would cost a second RCU grace period per create. */
    CHECK(chdir("/"), "chdir /: %m");
    return idmapped;
}

/* The image's directory as the root itself (cdn_sandbox.root_in_place): its idmapped mount from the
 * host moved to scratch/root, over a tmpfs scratch (for the masks of /proc). A root that cannot be
 * idmapped is refused: its files would be nobody's inside, and the container's root could not write
 * its own root file system. Returns 1 (the files keep their owners inside). */
static int mount_in_place(const struct cdn_setup_args *a, const char *root, int lower_fd,
                          struct cdn_error *err)
{
    int r = mount_scratch(a, err);
    if (r < 0)
        return r;
    if (lower_fd < 0)
        return cdn_error_field(err, EOPNOTSUPP, "root.path",
                               "root.path '%s': its file system cannot be idmapped (this kernel's %s)",
                               a->image->lower, "mount_setattr MOUNT_ATTR_IDMAP");
    CHECK(mkdir(root, 0755), "mkdir %s: %m", root);
    CHECK(syscall(SYS_move_mount, lower_fd, "", AT_FDCWD, root, MOVE_MOUNT_F_EMPTY_PATH),
          "mount the root %s: %m", a->image->lower);
    return 1;
}

static int mount_host_usr(const char *root, struct cdn_error *err)
{
    char dst[4200];
    (void) snprintf(dst, sizeof dst, "%s/usr", root);
    const uint64_t ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    int r = bind_mount("/usr", dst, ro, err);
    if (r < 0)
        return r;
    for (size_t i = 0; cdn_image_host_dirs[i]; i++) {
        char src[64];
        struct stat st;
        (void) snprintf(src, sizeof src, "/%s", cdn_image_host_dirs[i]);
        if (lstat(src, &st) < 0 || !S_ISDIR(st.st_mode))
            continue; /* merged /usr: the skeleton already has the symlink */
        (void) snprintf(dst, sizeof dst, "%s/%s", root, cdn_image_host_dirs[i]);
        r = bind_mount(src, dst, ro, err);
        if (r < 0)
            return r;
    }
    return 0;
}

static int mount_proc(const struct cdn_setup_args *a, int rootfd, const char *root, struct cdn_error *err)
{
    char fdp[64], mask[4200], mask_dir[4200];
    int r;
    (void) snprintf(mask, sizeof mask, "%s/mask", a->scratch);
    _cleanup_close_ int mfd = open(mask, O_CREAT | O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0444);
    if (mfd < 0)
        return cdn_error_set(err, errno, "create the mask file: %m");
    /* Made anew, so empty: a restored layer's went in layer_refresh (writable.c); any other left one is
     * removed here, and were it not empty, rmdir and then mkdir would fail. */
    (void) snprintf(mask_dir, sizeof mask_dir, "%s/mask.d", a->scratch);
    (void) rmdir(mask_dir);
    CHECK(mkdir(mask_dir, 0555), "create the mask directory: %m");
    /* No symlink on the way: the masks below go by path from our root, where an image's /proc -> /p
     * would name nothing, and proc would stand unmasked at /p. */
    int fd = open_no_symlinks(rootfd, "/proc", 0555);
    if (fd < 0)
        return cdn_error_field(err, -fd, "image", "image: /proc%s: %s", fd == -ELOOP ? " is a symlink" : "",
                               strerror(-fd));
    (void) fd_path(fdp, fd);
    r = mount("proc", fdp, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    (void) close(fd);
    CHECK(r, "mount /proc: %m");
    return cdn_proc_mask(root, mask, mask_dir, err);
}

/* The sandbox's own devpts instance, of at most limits.ptys terminals: the kernel's pool
 * (kernel.pty.max less the pty.reserve kept for the host's instance) is shared by every other
 * instance, so without max= one sandbox could take all of it and leave the next PTY exec none. */
static int mount_devpts(const struct cdn_setup_args *a, const char *path, struct cdn_error *err)
{
    char opts[96];
    (void) snprintf(opts, sizeof opts, "newinstance,ptmxmode=0666,mode=0620,gid=5,max=%llu",
                    (unsigned long long) a->spec->limits.ptys);
    CHECK(mount("devpts", path, "devpts", MS_NOSUID | MS_NOEXEC, opts), "mount /dev/pts: %m");
    return 0;
}

/* /dev from the prepared tree: one bind, devpts and shm on top, then read-only. */
static int mount_dev_prepared(const struct cdn_setup_args *a, int rootfd, int fd, struct cdn_error *err)
{
    char fdp[64];
    (void) fd_path(fdp, fd);
    if (mount(a->image->dev, fdp, NULL, MS_BIND, NULL) < 0)
        return lookup_failed(err, errno, "image", "bind on /dev", a->image->dev);
    _cleanup_close_ int dev = open_in_root(rootfd, "/dev", true, 0);
    if (dev < 0)
        return cdn_error_set(err, dev, "reopen /dev: %s", strerror(-dev));
    (void) fd_path(fdp, dev);
    char p[96];
    (void) snprintf(p, sizeof p, "%s/pts", fdp);
    int r = mount_devpts(a, p, err);
    if (r < 0)
        return r;
    (void) snprintf(p, sizeof p, "%s/shm", fdp);
    CHECK(mount("shm", p, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64m,mode=1777"),
          "mount /dev/shm: %m");
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC};
    CHECK(syscall(SYS_mount_setattr, dev, "", AT_EMPTY_PATH, &attr, sizeof attr), "make /dev read-only: %m");
    return 0;
}

static int mount_dev(const struct cdn_setup_args *a, int rootfd, const char *root, struct cdn_error *err)
{
    char dev[4200], p[4300], fdp[64];
    int fd = open_no_symlinks(rootfd, "/dev", 0755); /* its nodes are made by path, as /proc's masks */
    if (fd < 0)
        return cdn_error_field(err, -fd, "image", "image: /dev%s: %s", fd == -ELOOP ? " is a symlink" : "",
                               strerror(-fd));
    if (a->image->dev[0]) {
        int r = mount_dev_prepared(a, rootfd, fd, err);
        (void) close(fd);
        return r;
    }
    (void) fd_path(fdp, fd);
    int r = mount("cordon-dev", fdp, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755");
    (void) close(fd);
    CHECK(r, "mount /dev: %m");
    (void) snprintf(dev, sizeof dev, "%s/dev", root);
    for (size_t i = 0; dev_nodes[i]; i++) {
        char src[32];
        (void) snprintf(src, sizeof src, "/dev/%s", dev_nodes[i]);
        (void) snprintf(p, sizeof p, "%s/%s", dev, dev_nodes[i]);
        CHECK(mknod(p, S_IFREG | 0666, 0), "create %s: %m", p);
        CHECK(mount(src, p, NULL, MS_BIND, NULL), "bind %s: %m", src);
    }
    (void) snprintf(p, sizeof p, "%s/pts", dev);
    CHECK(mkdir(p, 0755), "mkdir /dev/pts: %m");
    if ((r = mount_devpts(a, p, err)) < 0)
        return r;
    (void) snprintf(p, sizeof p, "%s/shm", dev);
    CHECK(mkdir(p, 01777), "mkdir /dev/shm: %m");
    CHECK(mount("shm", p, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64m,mode=1777"),
          "mount /dev/shm: %m");
    static const char *const links[][2] = {{"pts/ptmx", "ptmx"},
                                           {"/proc/self/fd", "fd"},
                                           {"/proc/self/fd/0", "stdin"},
                                           {"/proc/self/fd/1", "stdout"},
                                           {"/proc/self/fd/2", "stderr"}};
    for (size_t i = 0; i < ELEMENTSOF(links); i++) {
        (void) snprintf(p, sizeof p, "%s/%s", dev, links[i][1]);
        CHECK(symlink(links[i][0], p), "symlink %s: %m", p);
    }
    /* Where an engine's mqueue goes (mount_engine_fs), once /dev is read-only; as the prepared /dev. */
    (void) snprintf(p, sizeof p, "%s/mqueue", dev);
    CHECK(mkdir(p, 0755), "mkdir /dev/mqueue: %m");
    /* No new nodes or files in /dev; the device binds on top keep their own flags. */
    CHECK(mount(NULL, dev, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL),
          "remount /dev read-only: %m");
    return 0;
}

/* tmpfs's options from a bundle's: its flags, and what goes to the file system (size=, mode=, …). */
static unsigned long tmpfs_options(char *const *opts, char *data, size_t size)
{
    static const char *const keys[] = {"size=", "mode=", "nr_inodes=", "nr_blocks=", "uid=", "gid="};
    static const struct {
        const char *name;
        unsigned long flag;
    } flags[] = {{"ro", MS_RDONLY},         {"nosuid", MS_NOSUID},           {"nodev", MS_NODEV},
                 {"noexec", MS_NOEXEC},     {"noatime", MS_NOATIME},         {"nodiratime", MS_NODIRATIME},
                 {"relatime", MS_RELATIME}, {"strictatime", MS_STRICTATIME}, {"sync", MS_SYNCHRONOUS}};
    unsigned long f = MS_NODEV; /* nothing of a bundle's makes devices */
    size_t used = 0;
    data[0] = 0;
    for (size_t i = 0; opts && opts[i]; i++) {
        for (size_t k = 0; k < ELEMENTSOF(flags); k++)
            if (strcmp(opts[i], flags[k].name) == 0)
                f |= flags[k].flag;
        for (size_t k = 0; k < ELEMENTSOF(keys); k++)
            if (strncmp(opts[i], keys[k], strlen(keys[k])) == 0 && used + strlen(opts[i]) + 2 < size)
                used += (size_t) snprintf(data + used, size - used, "%s%s", used ? "," : "", opts[i]);
    }
    return f;
}

/* The bundle's kernel file systems (sandbox.h fs_mounts) but cgroup's, which waits for the cgroup
 * namespace (cdn_engine_cgroup). Each destination is reached (and made) without following a symlink:
 * a root written in place holds what an earlier run of the container left there. */
static int mount_engine_fs(const struct cdn_setup_args *a, int rootfd, int sysfs_fd, struct cdn_error *err)
{
    for (size_t i = 0; i < a->n_fs_mounts; i++) {
        const struct cdn_fs_mount *m = &a->fs_mounts[i];
        char field[32], fdp[64], data[512];
        (void) snprintf(field, sizeof field, "mounts[%u]", m->index);
        if (strcmp(m->type, "cgroup") == 0 || strcmp(m->type, "cgroup2") == 0)
            continue;
        _cleanup_close_ int fd = open_no_symlinks(rootfd, m->destination, 0755);
        if (fd < 0)
            return cdn_error_field(err, -fd, field, "%s: %s %s%s: %s", field, m->type, m->destination,
                                   fd == -ELOOP ? " is reached through a symlink" : "", strerror(-fd));
        (void) fd_path(fdp, fd);
        int r;
        if (strcmp(m->type, "sysfs") == 0 && sysfs_fd >= 0)
            r = (int) syscall(SYS_move_mount, sysfs_fd, "", fd, "",
                              MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
        else if (strcmp(m->type, "sysfs") == 0)
            r = mount("sysfs", fdp, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
        else if (strcmp(m->type, "mqueue") == 0)
            r = mount("mqueue", fdp, "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
        else
            r = mount("tmpfs", fdp, "tmpfs", tmpfs_options(m->options, data, sizeof data), data);
        if (r < 0)
            return cdn_error_field(err, errno, field, "%s: %s on %s: %m", field, m->type, m->destination);
    }
    return 0;
}

/* Bind src onto the (already resolved) target fd. Flags go on the new mount
 * through a fresh fd of it: the old fd still names the directory underneath. */
static int bind_onto(int rootfd, const char *src, int target_fd, const char *target, bool readonly,
                     struct cdn_error *err)
{
    char fdp[64];
    (void) fd_path(fdp, target_fd);
    CHECK(mount(src, fdp, NULL, MS_BIND | MS_REC, NULL), "bind %s on %s: %m", src, target);
    _cleanup_close_ int fd = open_in_root(rootfd, target, true, 0); /* target_fd names what is underneath */
    if (fd < 0)
        return cdn_error_set(err, fd, "reopen %s: %s", target, strerror(-fd));
    return set_mount_attrs(fd, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (readonly ? MOUNT_ATTR_RDONLY : 0),
                           target, err);
}
/* The sources were resolved and judged by the host (core/bind-policy.h): each is opened without
 * following any symlink, and bound through that fd, so that a path changed since cannot redirect
 * the bind elsewhere. */
static int mount_binds(const struct cdn_setup_args *a, int rootfd, const int *bind_fds, struct cdn_error *err)
{
    for (size_t i = 0; i < a->spec->n_mounts; i++) {
        const struct cdn_mount *m = &a->spec->mounts[i];
        char field[32], srcp[64];
        struct stat st;
        (void) snprintf(field, sizeof field, "mounts[%zu]", i);
        if (bind_fds) { /* cloned by the host, its flags set: moved onto the target */
            if (fstat(bind_fds[i], &st) < 0)
                return cdn_error_field(err, errno, field, "bind source '%s': %m", m->source);
            _cleanup_close_ int fd =
                open_in_root(rootfd, m->target, S_ISDIR(st.st_mode), S_ISDIR(st.st_mode) ? 0755 : 0644);
            if (fd < 0)
                return cdn_error_field(err, fd, field, "bind target '%s': %s", m->target, strerror(-fd));
            if (syscall(SYS_move_mount, bind_fds[i], "", fd, "",
                        MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                return cdn_error_field(err, errno, field, "bind '%s' on '%s': %m", m->source, m->target);
            continue;
        }
        _cleanup_close_ int src = cdn_bind_source_open(m->source);
        if (src < 0 || fstat(src, &st) < 0)
            return lookup_failed(err, src < 0 ? -src : errno, field, "--bind source", m->source);
        int fd = open_in_root(rootfd, m->target, S_ISDIR(st.st_mode), S_ISDIR(st.st_mode) ? 0755 : 0644);
        if (fd < 0)
            return cdn_error_field(err, fd, field, "--bind target '%s': %s", m->target, strerror(-fd));
        (void) fd_path(srcp, src);
        int r = bind_onto(rootfd, srcp, fd, m->target, m->readonly, err);
        (void) close(fd);
        if (r < 0)
            return cdn_error_prefix(err, r, "%s", field);
    }
    return 0;
}

/* With egress, the resolver is the host's end of the veth (any UDP 53 goes to
 * the DNS stub anyway): a read-only file bound over the image's. */
static int mount_resolv_conf(const struct cdn_setup_args *a, int rootfd, struct cdn_error *err)
{
    char src[4200], text[128];
    (void) snprintf(src, sizeof src, "%s/resolv.conf", a->scratch);
    uint32_t ip = a->resolver_ip;
    (void) snprintf(text, sizeof text, "nameserver %u.%u.%u.%u\noptions timeout:2 attempts:2\n", ip >> 24,
                    (ip >> 16) & 255, (ip >> 8) & 255, ip & 255);
    _cleanup_close_ int out = open(src, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (out < 0 || cdn_write_all(out, text, strlen(text)) < 0)
        return cdn_error_set(err, errno, "write %s: %m", src);
    int r, fd = open_in_root(rootfd, "/etc/resolv.conf", false, 0644);
    if (fd < 0)
        return cdn_error_set(err, fd, "/etc/resolv.conf in the image: %s", strerror(-fd));
    r = bind_onto(rootfd, src, fd, "/etc/resolv.conf", true, err);
    (void) close(fd);
    return r;
}

static int make_writable_dirs(const struct cdn_setup_args *a, int rootfd, bool idmapped,
                              struct cdn_error *err)
{
    for (size_t i = 0; i < ELEMENTSOF(writable_dirs); i++) {
        const char *path = writable_path(a, i), *field = i ? "image" : "workdir";
        mode_t mode = writable_dirs[i].mode;
        struct stat st;
        /* In a restored layer the sandbox may have left a symlink there, to have a later sandbox's
         * directory bound over another of its tree (a read-only one of the image): none is followed. */
        _cleanup_close_ int fd =
            a->restored ? open_no_symlinks(rootfd, path, mode) : open_in_root(rootfd, path, true, mode);
        if (fd < 0)
            return cdn_error_field(err, fd, field, "%s %s: cannot create it: %s%s", field, path,
                                   strerror(-fd),
                                   fd == -ELOOP ? " (a symlink the sandbox left in its checkpoint)" : "");
        if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode))
            return cdn_error_field(err, ENOTDIR, field, "%s %s: not a directory in the image", field, path);
        /* Made in the upper layer (see precreate_in_upper) it is ours; otherwise, and
         * always under a read-only root, a directory of the scratch tmpfs is bound over it. */
        if ((st.st_uid == 0 || idmapped) && !a->spec->read_only_root)
            continue;
        /* A bind of the spec's there already (--bind DIR:/workspace): it is what was asked for. */
        bool bound = false;
        for (size_t m = 0; m < a->spec->n_mounts && !bound; m++)
            bound = strcmp(a->spec->mounts[m].target, path) == 0;
        if (bound)
            continue;
        char src[4200], fdp[64];
        (void) snprintf(src, sizeof src, "%s/rw%zu", a->scratch, i);
        (void) fd_path(fdp, fd);
        /* A restored layer (writable.c) has it, with the sandbox's files. */
        if ((mkdir(src, mode) < 0 && errno != EEXIST) || chmod(src, mode) < 0)
            return cdn_error_field(err, errno, field, "%s %s: %m", field, path);
        int r = bind_mount(src, fdp, 0, err);
        if (r < 0)
            return cdn_error_prefix(err, r, "%s %s", field, path);
    }
    return 0;
}

static int pivot(const char *root, struct cdn_error *err)
{
    CHECK(chdir(root), "chdir %s: %m", root);
    CHECK(syscall(SYS_pivot_root, ".", "."), "pivot_root: %m");
    CHECK(umount2(".", MNT_DETACH), "detach the old root: %m");
    CHECK(chdir("/"), "chdir /: %m");
    return 0;
}

int cdn_rootfs_prepare(const struct cdn_setup_args *a, int lower_fd, const int *bind_fds, int sysfs_fd,
                       struct cdn_error *err)
{
    char root[4200];
    (void) snprintf(root, sizeof root, "%s/root", a->scratch);
    /* Nothing we mount may propagate back to the host. */
    CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), "make / private: %m");
    int r = a->root_in_place ? mount_in_place(a, root, lower_fd, err) : mount_overlay(a, root, lower_fd, err);
    if (r < 0)
        return r;
    const bool idmapped = r == 1;
    _cleanup_close_ int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return cdn_error_set(err, errno, "open new root: %m");
    if (a->image->host && (r = mount_host_usr(root, err)) < 0)
        return r;
    if ((r = mount_proc(a, rootfd, root, err)) < 0 || (r = mount_dev(a, rootfd, root, err)) < 0 ||
        (r = mount_engine_fs(a, rootfd, sysfs_fd, err)) < 0 ||
        (r = mount_binds(a, rootfd, bind_fds, err)) < 0)
        return r;
    r = a->root_in_place ? 0 : make_writable_dirs(a, rootfd, idmapped, err);
    if (r < 0 || (a->resolver_ip && (r = mount_resolv_conf(a, rootfd, err)) < 0))
        return r;
    if ((r = cdn_protect_bind(rootfd, &a->spec->protect, NULL, NULL, err)) < 0)
        return r;
    if (a->spec->read_only_root)
        CHECK(mount(NULL, root, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL),
              "remount root read-only: %m");
    return 0;
}

int cdn_rootfs_pivot(const struct cdn_setup_args *a, struct cdn_error *err)
{
    char root[4200];
    (void) snprintf(root, sizeof root, "%s/root", a->scratch);
    return pivot(root, err);
}
