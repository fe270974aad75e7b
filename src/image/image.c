#include "image.h"
#include "core/paths.h"
#include "shared/fd-util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define HOST_IMAGE_VERSION "2"

const char *const cdn_image_host_dirs[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32", NULL};

/* Files and trees of the host's /etc that programs need to run: the dynamic
 * linker's cache, Debian's alternatives symlinks, CA certificates, time zone. */
static const char *const etc_copy[] = {
    "ld.so.cache", "ld.so.conf",  "ld.so.conf.d",   "alternatives", "ssl",      "ca-certificates",
    "localtime",   "os-release",  "debian_version", "protocols",    "services", "mime.types",
    "shells",      "bash.bashrc", "profile",        "inputrc",      "python3",  "python3.11",
    "perl",        "gai.conf",    "host.conf",      NULL,
};

static const struct {
    const char *name, *text;
} etc_write[] = {
    {"passwd", "root:x:0:0:root:/root:/bin/sh\n"
               "user:x:1000:1000:user:/home/user:/bin/sh\n"
               "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
    {"group", "root:x:0:\ntty:x:5:\nuser:x:1000:\nnogroup:x:65534:\n"},
    {"hosts", "127.0.0.1\tlocalhost cordon\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
    {"hostname", "cordon\n"},
    {"resolv.conf", "# cordon: no network unless the sandbox's spec allows it\nnameserver 127.0.0.1\n"},
    {"nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
                      "protocols: files\nservices: files\n"},
    {"cordon-image", "host " HOST_IMAGE_VERSION "\n"},
};

static int copy_file(int sdir, int ddir, const char *name, const struct stat *st)
{
    _cleanup_close_ int in = openat(sdir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (in < 0)
        return -errno;
    _cleanup_close_ int out = openat(ddir, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st->st_mode & 0755);
    if (out < 0)
        return -errno;
    char buf[65536];
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0)
            return -errno;
        if (n == 0)
            return 0;
        int r = cdn_write_all(out, buf, (size_t) n);
        if (r < 0)
            return r;
    }
}

/* Copy name from sdir into ddir: symlinks as symlinks, directories recursively,
 * small regular files by content. Other types and unreadable entries are skipped. */
static int copy_tree(int sdir, int ddir, const char *name, int depth)
{
    struct stat st;
    if (depth > 8 || fstatat(sdir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return 0;
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlinkat(sdir, name, target, sizeof target - 1);
        if (n < 0)
            return 0;
        target[n] = 0;
        return symlinkat(target, ddir, name) < 0 && errno != EEXIST ? -errno : 0;
    }
    if (S_ISREG(st.st_mode))
        return st.st_size > (16 << 20) || (st.st_mode & 0004) == 0 ? 0 : copy_file(sdir, ddir, name, &st);
    if (!S_ISDIR(st.st_mode))
        return 0;
    if (mkdirat(ddir, name, 0755) < 0 && errno != EEXIST)
        return -errno;
    _cleanup_close_ int s = openat(sdir, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    _cleanup_close_ int d = openat(ddir, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (s < 0 || d < 0)
        return s < 0 ? 0 : -errno;
    DIR *dir = fdopendir(TAKE_FD(s));
    if (!dir)
        return -errno;
    int r = 0;
    for (struct dirent *de; r >= 0 && (de = readdir(dir));)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            r = copy_tree(dirfd(dir), d, de->d_name, depth + 1);
    closedir(dir);
    return r;
}

static int populate(const char *root, struct cdn_error *err)
{
    static const struct {
        const char *path;
        mode_t mode;
    } dirs[] = {{"usr", 0755},  {"etc", 0755}, {"proc", 0555},     {"dev", 0755}, {"sys", 0555},
                {"tmp", 01777}, {"var", 0755}, {"var/tmp", 01777}, {"mnt", 0755}, {"opt", 0755}};
    /* No /root, /workspace, /run or /home here: directories of the image
     * belong to a host uid the sandbox cannot write as, so those are made at
     * sandbox creation, owned by the sandbox's root. */
    _cleanup_close_ int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        return cdn_error_set(err, errno, "image host: open %s: %m", root);
    for (size_t i = 0; i < ELEMENTSOF(dirs); i++)
        if (mkdirat(rfd, dirs[i].path, dirs[i].mode) < 0 || fchmodat(rfd, dirs[i].path, dirs[i].mode, 0) < 0)
            return cdn_error_set(err, errno, "image host: mkdir %s: %m", dirs[i].path);
    for (size_t i = 0; cdn_image_host_dirs[i]; i++) {
        char target[256], path[64];
        (void) snprintf(path, sizeof path, "/%s", cdn_image_host_dirs[i]);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n > 0) { /* merged /usr: keep the same symlink; real directories are bind-mounted at run time */
            target[n] = 0;
            if (symlinkat(target, rfd, cdn_image_host_dirs[i]) < 0)
                return cdn_error_set(err, errno, "image host: symlink %s: %m", path);
        } else if (access(path, F_OK) == 0 && mkdirat(rfd, cdn_image_host_dirs[i], 0755) < 0)
            return cdn_error_set(err, errno, "image host: mkdir %s: %m", path);
    }
    _cleanup_close_ int etc = openat(rfd, "etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    _cleanup_close_ int hetc = open("/etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (etc < 0 || hetc < 0)
        return cdn_error_set(err, errno, "image host: open etc: %m");
    for (size_t i = 0; etc_copy[i]; i++) {
        int r = copy_tree(hetc, etc, etc_copy[i], 0);
        if (r < 0)
            return cdn_error_set(err, r, "image host: copy /etc/%s: %s", etc_copy[i], strerror(-r));
    }
    for (size_t i = 0; i < ELEMENTSOF(etc_write); i++) {
        _cleanup_close_ int fd =
            openat(etc, etc_write[i].name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || cdn_write_all(fd, etc_write[i].text, strlen(etc_write[i].text)) < 0)
            return cdn_error_set(err, errno, "image host: write /etc/%s: %m", etc_write[i].name);
    }
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) st, (void) ftw;
    return (type == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT ? -1 : 0;
}

/* Remove a directory tree of our own (a failed or superseded build); a missing one is fine. */
static int rm_rf(const char *path)
{
    if (nftw(path, remove_entry, 32, FTW_DEPTH | FTW_PHYS) == 0 || errno == ENOENT)
        return 0;
    return -errno;
}

int cdn_image_build_host(bool verbose, struct cdn_error *err)
{
    char dir[4096], tmp[4200], old[4200];
    (void) snprintf(dir, sizeof dir, "%s/images", cdn_state_dir());
    int r = cdn_mkdir_p(dir, 0755);
    if (r < 0)
        return cdn_error_set(err, r, "image host: mkdir %s: %s", dir, strerror(-r));
    /* The state dir must be searchable by the unprivileged uids sandboxes run as. */
    (void) chmod(cdn_state_dir(), 0755);
    (void) chmod(dir, 0755);
    (void) snprintf(tmp, sizeof tmp, "%s/.host-%d", dir, (int) getpid());
    if (verbose)
        fprintf(stderr, "cordon: building the host image skeleton in %s/host\n", dir);
    (void) rm_rf(tmp);
    if (mkdir(tmp, 0755) < 0)
        return cdn_error_set(err, errno, "image host: mkdir %s: %m", tmp);
    r = populate(tmp, err);
    if (r < 0) {
        (void) rm_rf(tmp);
        return r;
    }
    (void) snprintf(dir, sizeof dir, "%s/images/host", cdn_state_dir());
    (void) snprintf(old, sizeof old, "%s/images/.old-host-%d", cdn_state_dir(), (int) getpid());
    (void) rename(dir, old); /* a concurrent reader keeps its open files; a new one sees the new tree */
    if (rename(tmp, dir) < 0 && errno != ENOTEMPTY && errno != EEXIST) {
        r = cdn_error_set(err, errno, "image host: rename into place: %m");
        (void) rm_rf(tmp);
        return r;
    }
    (void) rm_rf(tmp);
    (void) rm_rf(old);
    if (verbose)
        fprintf(stderr, "cordon: host image ready\n");
    return 0;
}

/* The /dev every sandbox sees, made once by host root: the six harmless
 * device nodes, mount points for pts and shm, and the usual symlinks. One bind
 * of it replaces a dozen mounts per sandbox. Device nodes only work through a
 * mount without nodev, so a state dir on a nodev filesystem gets none (""). */
static void ensure_dev(char *ret, size_t size)
{
    static const struct {
        const char *name;
        unsigned maj, min;
    } nodes[] = {{"null", 1, 3},   {"zero", 1, 5},    {"full", 1, 7},
                 {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};
    static const char *const links[][2] = {{"pts/ptmx", "ptmx"},
                                           {"/proc/self/fd", "fd"},
                                           {"/proc/self/fd/0", "stdin"},
                                           {"/proc/self/fd/1", "stdout"},
                                           {"/proc/self/fd/2", "stderr"}};
    char tmp[4200];
    struct statvfs sv;
    ret[0] = 0;
    (void) snprintf(tmp, sizeof tmp, "%s/dev.v2", cdn_state_dir());
    if (statvfs(cdn_state_dir(), &sv) < 0 || (sv.f_flag & ST_NODEV))
        return;
    if (access(tmp, F_OK) == 0) {
        (void) snprintf(ret, size, "%s", tmp);
        return;
    }
    (void) snprintf(tmp, sizeof tmp, "%s/.dev-%d", cdn_state_dir(), (int) getpid());
    (void) rm_rf(tmp);
    if (mkdir(tmp, 0755) < 0)
        return;
    _cleanup_close_ int d = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok = d >= 0 && mkdirat(d, "pts", 0755) == 0 && mkdirat(d, "shm", 01777) == 0 &&
              mkdirat(d, "mqueue", 0755) == 0 && fchmodat(d, "shm", 01777, 0) == 0;
    for (size_t i = 0; ok && i < ELEMENTSOF(nodes); i++)
        ok = mknodat(d, nodes[i].name, S_IFCHR | 0666, makedev(nodes[i].maj, nodes[i].min)) == 0 &&
             fchmodat(d, nodes[i].name, 0666, 0) == 0;
    for (size_t i = 0; ok && i < ELEMENTSOF(links); i++)
        ok = symlinkat(links[i][0], d, links[i][1]) == 0;
    char final[4200];
    (void) snprintf(final, sizeof final, "%s/dev.v2", cdn_state_dir());
    if (!ok || (rename(tmp, final) < 0 && errno != ENOTEMPTY && errno != EEXIST)) {
        (void) rm_rf(tmp);
        return;
    }
    (void) rm_rf(tmp); /* lost a race with a concurrent builder: theirs is as good */
    (void) snprintf(ret, size, "%s", final);
}

int (*cdn_image_resolve_oci)(const char *name, struct cdn_image *ret, struct cdn_error *err);
int (*cdn_image_hold_oci)(const char *manifest, struct cdn_error *err);

int cdn_image_hold(const struct cdn_image *img, int *ret_fd, struct cdn_error *err)
{
    *ret_fd = -EBADF;
    if (!img->digest[0] || !cdn_image_hold_oci)
        return 0;
    int fd = cdn_image_hold_oci(img->digest, err);
    if (fd < 0)
        return fd;
    *ret_fd = fd;
    return 0;
}

int cdn_image_resolve(const char *name, struct cdn_image *ret, struct cdn_error *err)
{
    struct stat st;
    ret->n_layers = 0;
    ret->digest[0] = '\0';
    ensure_dev(ret->dev, sizeof ret->dev);
    if (strcmp(name, "host") == 0) {
        (void) snprintf(ret->lower, sizeof ret->lower, "%s/images/host", cdn_state_dir());
        ret->host = true;
        char stamp[4200], buf[64];
        (void) snprintf(stamp, sizeof stamp, "%s/etc/cordon-image", ret->lower);
        if (cdn_read_file_at(AT_FDCWD, stamp, buf, sizeof buf) < 0 ||
            strcmp(buf, "host " HOST_IMAGE_VERSION "\n")) {
            int r = cdn_image_build_host(false, err);
            if (r < 0)
                return r;
        }
        return 0;
    }
    if (name[0] != '/' && cdn_image_resolve_oci)
        return cdn_image_resolve_oci(name, ret, err);
    if (strpbrk(name, ",:\\"))
        return cdn_error_field(err, EINVAL, "image", "image: '%s' contains ',', ':' or '\\'", name);
    if (stat(name, &st) < 0)
        return cdn_error_field(err, errno, "image", "image: '%s': %m", name);
    if (!S_ISDIR(st.st_mode))
        return cdn_error_field(err, ENOTDIR, "image",
                               "image: '%s' is not a directory holding a root filesystem", name);
    (void) snprintf(ret->lower, sizeof ret->lower, "%s", name);
    ret->host = false;
    return 0;
}

/* Bytes under root (st_blocks: what is allocated), for a disk's size. */
static unsigned long long tree_bytes;
static int count_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) path, (void) type, (void) ftw;
    tree_bytes += (unsigned long long) st->st_blocks * 512;
    return 0;
}

int cdn_image_debootstrap(const struct cdn_image_build *b, struct cdn_error *err)
{
    struct stat st;
    if (b->dir[0] != '/')
        return cdn_error_field(err, EINVAL, "dir",
                               "image build: '%s': the directory must be an absolute path", b->dir);
    if (lstat(b->dir, &st) == 0)
        return cdn_error_field(err, EEXIST, "dir", "image build: '%s' exists already", b->dir);
    if (b->disk && b->disk[0] != '/')
        return cdn_error_field(err, EINVAL, "disk", "--disk '%s': must be an absolute path", b->disk);
    if (b->disk && lstat(b->disk, &st) == 0)
        return cdn_error_field(err, EEXIST, "disk", "--disk '%s' exists already", b->disk);
    char tmp[4200], include[1024];
    (void) snprintf(tmp, sizeof tmp, "%s.tmp", b->dir);
    (void) snprintf(include, sizeof include, "--include=systemd-sysv,udev%s%s", b->include ? "," : "",
                    b->include ? b->include : "");
    char *const argv[] = {"debootstrap", "--variant=minbase",
                          include,       (char *) (b->suite ? b->suite : "bookworm"),
                          tmp,           (char *) (b->mirror ? b->mirror : "http://deb.debian.org/debian"),
                          NULL};
    fprintf(stderr, "cordon: image: debootstrap of %s into %s …\n", argv[3], b->dir);
    int r = cdn_run_wait(argv, true);
    if (r < 0)
        return cdn_error_set(err, -r, "run debootstrap (Debian's debootstrap package): %s", strerror(-r));
    if (r != 0)
        return cdn_error_set(err, EIO, "debootstrap failed (exit %d); its work is left in %s", r, tmp);
    /* Each sandbox gets its own machine id (the VM tiers write it; systemd makes one where the file
     * is empty): the image holds none, as Debian's own images do. */
    char p[4300];
    (void) snprintf(p, sizeof p, "%s/etc/machine-id", tmp);
    if (truncate(p, 0) < 0 && errno != ENOENT)
        return cdn_error_set(err, errno, "empty %s: %m", p);
    if (rename(tmp, b->dir) < 0)
        return cdn_error_set(err, errno, "rename %s: %m", tmp);
    fprintf(stderr, "cordon: image: root ready: %s\n", b->dir);
    if (!b->disk)
        return 0;
    unsigned long long mb = b->disk_mb;
    if (!mb) {
        tree_bytes = 0;
        (void) nftw(b->dir, count_entry, 16, FTW_PHYS);
        mb = (tree_bytes >> 20) + 1024;
    }
    fprintf(stderr, "cordon: image: making %s (ext4, %llu MiB) …\n", b->disk, mb);
    char size[32];
    (void) snprintf(size, sizeof size, "%lluM", mb);
    char *const mkfs[] = {"mkfs.ext4",      "-q", "-L", "cordon-root", "-d", (char *) b->dir,
                          (char *) b->disk, size, NULL};
    if ((r = cdn_run_wait(mkfs, true)) != 0) {
        (void) unlink(b->disk);
        return r < 0 ? cdn_error_set(err, -r, "run mkfs.ext4 (Debian's e2fsprogs): %s", strerror(-r))
                     : cdn_error_field(err, EIO, "disk", "--disk: mkfs.ext4 failed (exit %d)", r);
    }
    fprintf(stderr, "cordon: image: disk ready: %s (boot it with --tier vm --image %s)\n", b->disk, b->disk);
    return 0;
}
