/* The root disks of images other than "host" on the VM tiers: a read-only erofs per image, made
 * once by mkfs.erofs (Debian's erofs-utils) and cached under <vm>/images/. An image directory's
 * disk is made from the directory; an OCI image's from its layers merged by a read-only overlay,
 * mounted in a child's own mount namespace. Runs in the host process that creates the sandbox (or
 * `cordon vm prepare`, `cordon image rm|prune`), as root; the image store's layers are trusted as
 * the store made them (oci/layer.c: whiteouts as overlayfs's, no device nodes). */
#include "vmprep.h"
#include "core/paths.h"
#include "image/image.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void say(bool progress, const char *what, const char *arg)
{
    if (progress)
        fprintf(stderr, "cordon: vm: %s%s …\n", what, arg);
}

static int write_file(const char *path, const char *s, mode_t mode)
{
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    return cdn_write_all(fd, s, strlen(s));
}

/* What identifies an image directory's content: it is taken as immutable (a changed image is a new
 * directory), so its path and its root directory's inode and times stand for it. */
static uint64_t image_key(const char *root, const struct stat *st)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    char buf[4400];
    int n =
        snprintf(buf, sizeof buf, "%s %llu %llu %lld.%09ld %lld.%09ld", root, (unsigned long long) st->st_dev,
                 (unsigned long long) st->st_ino, (long long) st->st_mtim.tv_sec, st->st_mtim.tv_nsec,
                 (long long) st->st_ctim.tv_sec, st->st_ctim.tv_nsec);
    for (int i = 0; i < n && i < (int) sizeof buf; i++)
        h = (h ^ (uint8_t) buf[i]) * 1099511628211ull;
    return h;
}

/* A disk (images/NAME.erofs, NAME.source) and the guest templates made with it (snap-…-NAME). */
static void remove_disk(const char *dir, const char *name)
{
    char p[4400];
    (void) snprintf(p, sizeof p, "%s/%s.source", dir, name);
    (void) unlink(p);
    (void) snprintf(p, sizeof p, "%s/%s.erofs", dir, name);
    (void) unlink(p);
    glob_t g;
    (void) snprintf(p, sizeof p, "%s/snap-*-%s", cdn_vm_dir(), name);
    if (glob(p, GLOB_NOSORT, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) {
            static const char *const files[] = {"state", "state.tmp", "mem", "key", "lock"};
            for (size_t f = 0; f < ELEMENTSOF(files); f++) {
                (void) snprintf(p, sizeof p, "%s/%s", g.gl_pathv[i], files[f]);
                (void) unlink(p);
            }
            (void) rmdir(g.gl_pathv[i]);
        }
    globfree(&g);
}

/* The disks of image directories gone or changed since, and their guests' templates: removed
 * whenever a new disk is made (under the images' lock), so that they do not pile up. */
static void prune_images(const char *dir)
{
    _cleanup_closedir_ DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n != 16 + 7 || strcmp(e->d_name + 16, ".source") != 0)
            continue;
        char p[4400], src[4096] = "", hash[17];
        struct stat st;
        (void) snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        (void) snprintf(hash, sizeof hash, "%.16s", e->d_name);
        if (cdn_read_file_at(AT_FDCWD, p, src, sizeof src) > 0 && stat(src, &st) == 0) {
            char now[17];
            (void) snprintf(now, sizeof now, "%016llx", (unsigned long long) image_key(src, &st));
            if (strcmp(now, hash) == 0)
                continue;
        }
        remove_disk(dir, hash);
    }
}

/* <vm>/images, made; its lock taken (an fd to close), or -errno (-EWOULDBLOCK: held, and !wait). */
static int lock_images(char *dir, size_t size, bool wait, struct cdn_error *err)
{
    (void) snprintf(dir, size, "%s/images", cdn_vm_dir());
    if (cdn_mkdir_p(dir, 0700) < 0)
        return cdn_error_set(err, errno, "create %s: %m", dir);
    char lock[4400];
    (void) snprintf(lock, sizeof lock, "%s/lock", dir);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) < 0) {
        int r = cdn_error_set(err, errno, "lock %s: %m", lock);
        if (fd >= 0)
            (void) close(fd);
        return r;
    }
    return fd;
}

/* Wait for the mkfs.erofs child; 0 if it succeeded, else tmp is removed and -EIO. */
static int wait_mkfs(pid_t pid, const char *tmp, const char *what, struct cdn_error *err)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return cdn_error_set(err, errno, "wait for mkfs.erofs: %m");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    (void) unlink(tmp);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        return cdn_error_set(err, ENOENT, "run mkfs.erofs (Debian's erofs-utils): not found");
    return cdn_error_field(err, EIO, "image", "image: mkfs.erofs of %s failed", what);
}

/* The disk made aside (NAME.erofs.tmp) is kept as NAME.erofs with NAME.source naming what it is of. */
static int keep_disk(const char *out, const char *tmp, const char *source, struct cdn_error *err)
{
    char p[4400];
    (void) snprintf(p, sizeof p, "%.*s.source", (int) (strlen(out) - 6), out);
    if (write_file(p, source, 0600) < 0 || rename(tmp, out) < 0) {
        int r = cdn_error_set(err, errno, "keep %s: %m", out);
        (void) unlink(tmp);
        return r;
    }
    return 0;
}

/* Uncompressed: nothing to decompress in the guest, which under TCG is slow. Owners, modes and
 * xattrs as in the directory. */
static int mkfs_dir(const char *root, const char *tmp, struct cdn_error *err)
{
    char *const argv[] = {"mkfs.erofs", "--quiet", (char *) tmp, (char *) root, NULL};
    int r = cdn_run_wait(argv, true);
    if (r < 0)
        return cdn_error_set(err, -r, "run mkfs.erofs (Debian's erofs-utils): %s", strerror(-r));
    if (r != 0) {
        (void) unlink(tmp);
        return cdn_error_field(err, EIO, "image", "image: mkfs.erofs of %s failed", root);
    }
    return 0;
}

/* The scratch of an OCI image's build (NAME.work: the layers' short links 0…N-1, the mount point
 * "root" and, for an image of one layer, the empty bottom layer "e"), removed before and after, so
 * that a killed build leaves nothing that lasts. */
static void remove_work(const char *work)
{
    char p[4400];
    for (int i = 0; i < CDN_IMAGE_LAYERS_MAX; i++) {
        (void) snprintf(p, sizeof p, "%s/%d", work, i);
        (void) unlink(p);
    }
    (void) snprintf(p, sizeof p, "%s/root", work);
    (void) rmdir(p);
    (void) snprintf(p, sizeof p, "%s/e", work);
    (void) rmdir(p);
    (void) rmdir(work);
}

/* In a forked child of the host process (root, the host's namespaces but a mount namespace of its
 * own, so the overlay is seen by nobody else and goes when it exits): the image's layers (topmost
 * first, through the short links in work so that 128 fit a page of options) as one read-only
 * overlay, the merged tree mkfs.erofs reads. The store keeps owners as the image says (no shift),
 * and overlayfs applies the layers' whiteouts and opaque directories and hides its own trusted.*
 * xattrs; hard links within a layer are one inode in the merge, as mkfs.erofs needs. */
static _Noreturn void mkfs_layers_child(const char *opts, const char *work, const char *tmp)
{
    /* After fork in a process that may have threads: no stdio, no allocation. */
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        chdir(work) < 0 || mount("overlay", "root", "overlay", MS_RDONLY | MS_NODEV | MS_NOSUID, opts) < 0) {
        dprintf(STDERR_FILENO, "cordon: vm: mount the image's layers as one overlay: %s\n", strerror(errno));
        _exit(126);
    }
    (void) dup2(STDERR_FILENO, STDOUT_FILENO); /* mkfs.erofs's output is not the caller's */
    char *const argv[] = {"mkfs.erofs", "--quiet", (char *) tmp, "root", NULL};
    execvp(argv[0], argv);
    _exit(127);
}

static int mkfs_layers(const struct cdn_image *img, const char *work, const char *tmp, struct cdn_error *err)
{
    remove_work(work);
    char p[4400];
    (void) snprintf(p, sizeof p, "%s/root", work);
    if (mkdir(work, 0700) < 0 || mkdir(p, 0700) < 0)
        return cdn_error_set(err, errno, "create %s: %m", p);
    for (size_t i = 0; i < img->n_layers; i++) {
        char target[4200];
        (void) snprintf(target, sizeof target, "%s/%s", img->lower, img->layers[i]);
        (void) snprintf(p, sizeof p, "%s/%zu", work, i);
        if (symlink(target, p) < 0) {
            int r = cdn_error_set(err, errno, "link layer %zu: %m", i);
            remove_work(work);
            return r;
        }
    }
    char opts[4096];
    size_t off = (size_t) snprintf(opts, sizeof opts, "lowerdir=");
    for (size_t i = 0; i < img->n_layers && off < sizeof opts; i++)
        off += (size_t) snprintf(opts + off, sizeof opts - off, "%s%zu", i ? ":" : "", i);
    /* A read-only overlay needs two lower layers: an image of one gets an empty one beneath it. */
    (void) snprintf(p, sizeof p, "%s/e", work);
    if (img->n_layers == 1) {
        if (mkdir(p, 0755) < 0) {
            int r = cdn_error_set(err, errno, "create %s: %m", p);
            remove_work(work);
            return r;
        }
        (void) snprintf(opts + off, sizeof opts - off, ":e"); /* "lowerdir=0" is far from full */
    }
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        remove_work(work);
        return cdn_error_set(err, errno, "fork: %m");
    }
    if (pid == 0)
        mkfs_layers_child(opts, work, tmp);
    int r = wait_mkfs(pid, tmp, img->digest, err);
    remove_work(work);
    return r;
}

/* An OCI image's disk is named by its manifest digest: content-addressed, so a tag pulled again
 * with new content names a new disk, and the same content under two tags shares one. The name is a
 * path component: the digest must be ALGO:HEX, lowercase, nothing else. */
int cdn_vm_oci_disk_name(const char *digest, char *name, size_t size)
{
    const char *colon = strchr(digest, ':');
    if (!colon || colon == digest || !colon[1] ||
        strspn(colon + 1, "0123456789abcdef") != strlen(colon + 1) ||
        strspn(digest, "abcdefghijklmnopqrstuvwxyz0123456789") != (size_t) (colon - digest) ||
        (size_t) snprintf(name, size, "oci-%.*s-%s", (int) (colon - digest), digest, colon + 1) >= size)
        return -EINVAL;
    return 0;
}

int cdn_vm_oci_disk_digest(const char *file, char *digest, size_t size)
{
    size_t n = strlen(file);
    if (strncmp(file, "oci-", 4) != 0 || n <= 4 + 6 || strcmp(file + n - 6, ".erofs") != 0 ||
        (size_t) snprintf(digest, size, "%.*s", (int) (n - 4 - 6), file + 4) >= size)
        return -EINVAL;
    char *dash = strchr(digest, '-'), name[256];
    if (!dash)
        return -EINVAL;
    *dash = ':';
    /* only what cdn_vm_oci_disk_name makes, and makes back into the same name */
    if (cdn_vm_oci_disk_name(digest, name, sizeof name) < 0 || strncmp(name, file, n - 6) != 0 ||
        strlen(name) != n - 6)
        return -EINVAL;
    return 0;
}

int cdn_vm_image_disk(const struct cdn_image *img, unsigned how, char *out, size_t size,
                      struct cdn_error *err)
{
    struct stat st;
    char name[200];
    int r;
    if (img->n_layers > 0) {
        if (cdn_vm_oci_disk_name(img->digest, name, sizeof name) < 0)
            return cdn_error_field(err, EINVAL, "image", "image: bad manifest digest '%s'", img->digest);
    } else {
        if (stat(img->lower, &st) < 0)
            return cdn_error_field(err, errno, "image", "image: %s: %m", img->lower);
        if (!S_ISDIR(st.st_mode))
            return cdn_error_field(err, ENOTDIR, "image", "image: %s: not a directory", img->lower);
        (void) snprintf(name, sizeof name, "%016llx", (unsigned long long) image_key(img->lower, &st));
    }
    char dir[4200];
    (void) snprintf(dir, sizeof dir, "%s/images", cdn_vm_dir());
    (void) snprintf(out, size, "%s/%s.erofs", dir, name);
    if (access(out, R_OK) == 0)
        return 0;
    if (how & CDN_VM_LOOK)
        return -EAGAIN;
    bool progress = how & CDN_VM_PROGRESS;
    _cleanup_close_ int lfd = lock_images(dir, sizeof dir, true, err);
    if (lfd < 0)
        return lfd;
    if (access(out, R_OK) == 0) /* made while we waited */
        return 0;
    prune_images(dir);
    const char *what = img->n_layers ? img->digest : img->lower;
    say(progress, "building the image's root disk (erofs) from ", what);
    char tmp[4400], work[4400];
    (void) snprintf(tmp, sizeof tmp, "%s.tmp", out);
    (void) snprintf(work, sizeof work, "%s/%s.work", dir, name);
    r = img->n_layers ? mkfs_layers(img, work, tmp, err) : mkfs_dir(img->lower, tmp, err);
    if (r < 0 || (r = keep_disk(out, tmp, what, err)) < 0)
        return r;
    say(progress, "image root disk ready: ", out);
    return 0;
}

int cdn_vm_prune_image_disks(bool (*keep)(const char *digest, void *data), void *data, struct cdn_error *err)
{
    char dir[4200];
    _cleanup_close_ int lfd = lock_images(dir, sizeof dir, false, err);
    if (lfd == -EWOULDBLOCK)
        return 0; /* a disk is being made: this prune is skipped rather than waiting minutes */
    if (lfd < 0)
        return lfd;
    _cleanup_closedir_ DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        char p[4400];
        (void) snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
            (void) unlink(p); /* a killed build's: none runs while we hold the lock */
            continue;
        }
        if (n > 5 && strcmp(e->d_name + n - 5, ".work") == 0) {
            remove_work(p);
            continue;
        }
        char name[256], digest[256];
        if (cdn_vm_oci_disk_digest(e->d_name, digest, sizeof digest) < 0 || keep(digest, data))
            continue;
        (void) snprintf(name, sizeof name, "%.*s", (int) (n - 6), e->d_name);
        remove_disk(dir, name);
    }
    return 0;
}
