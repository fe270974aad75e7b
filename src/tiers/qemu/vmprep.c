/* Prepare the VM tiers' kernel and initramfs (vmprep.h). Only here do
 * libarchive (the .deb: an ar archive holding data.tar.xz; the newc cpio) and
 * liblzma (the kernel's XZ payload) come in. */
#include "vmprep.h"
#include "qemu.h"
#include "core/paths.h"
#include "image/image.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <lzma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The guest's modules, in load order (each after what it needs): the
 * agent's virtio-serial port on the microvm machine (virtio-mmio), 9p over
 * virtio for the host image's /usr, virtio-net for the sandbox's network, and
 * virtio-blk, erofs and overlay for any other image's root disk. */
static const char *const modules[] = {
    "kernel/drivers/virtio/virtio_ring.ko",
    "kernel/drivers/virtio/virtio.ko",
    "kernel/drivers/virtio/virtio_mmio.ko",
    "kernel/drivers/char/virtio_console.ko",
    "kernel/fs/netfs/netfs.ko",
    "kernel/fs/fscache/fscache.ko",
    "kernel/net/9p/9pnet.ko",
    "kernel/net/9p/9pnet_virtio.ko",
    "kernel/fs/9p/9p.ko",
    /* From here: the network's (.modules/net/), loaded by a cold boot only when it has one. */
    "kernel/net/core/failover.ko",
    "kernel/drivers/net/net_failover.ko",
    "kernel/drivers/net/virtio_net.ko",
    /* From here: an image's root disk, loaded only by guests that have one (.modules/disk/). */
    "kernel/drivers/block/virtio_blk.ko",
    "kernel/crypto/crc32c_generic.ko", /* what libcrc32c asks the crypto API for */
    "kernel/lib/libcrc32c.ko",
    "kernel/fs/erofs/erofs.ko",
    "kernel/fs/overlayfs/overlay.ko",
    /* From here: a full VM's (tier vm: q35), .modules/vm/: virtio over PCI, and ext4 for the
     * writable root disks that images of that tier have. */
    "kernel/drivers/virtio/virtio_pci_legacy_dev.ko",
    "kernel/drivers/virtio/virtio_pci_modern_dev.ko",
    "kernel/drivers/virtio/virtio_pci.ko",
    "kernel/lib/crc16.ko",
    "kernel/fs/mbcache.ko",
    "kernel/fs/jbd2/jbd2.ko",
    "kernel/fs/ext4/ext4.ko",
};
#define FIRST_NET_MODULE  9
#define FIRST_DISK_MODULE 12
#define FIRST_VM_MODULE   17
/* What is unpacked from the kernel package; a change here must bump it. */
#define KERNEL_FORMAT "6"

/* What goes into the initramfs; a change here must bump it (the cached one is then rebuilt). */
#define INITRAMFS_FORMAT "cordon-initramfs 7"

static void say(bool progress, const char *what, const char *arg)
{
    if (progress)
        fprintf(stderr, "cordon: vm: %s%s …\n", what, arg);
}

static int run_sh(const char *script, struct cdn_error *err)
{
    char *const argv[] = {"/bin/sh", "-c", (char *) script, NULL};
    int r = cdn_run_wait(argv, false);
    if (r < 0)
        return cdn_error_set(err, -r, "spawn /bin/sh: %s", strerror(-r));
    if (r != 0)
        return cdn_error_set(err, EIO, "`%s` failed", script);
    return 0;
}

/* The kernel package: the environment's, one already here, or downloaded. */
static int find_deb(const char *dir, char *deb, size_t size, bool progress, struct cdn_error *err)
{
    const char *env = getenv("CORDON_VM_KERNEL_DEB");
    if (env && *env) {
        (void) snprintf(deb, size, "%s", env);
        return access(deb, R_OK) == 0 ? 0 : cdn_error_set(err, errno, "CORDON_VM_KERNEL_DEB %s: %m", deb);
    }
    char pat[4200];
    (void) snprintf(pat, sizeof pat, "%s/linux-image-*.deb", dir);
    for (int round = 0; round < 2; round++) {
        _cleanup_(globfree) glob_t g = {0};
        if (glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0) {
            (void) snprintf(deb, size, "%s",
                            g.gl_pathv[g.gl_pathc - 1]); /* sorted: the newest version last */
            return 0;
        }
        if (round)
            break;
        say(progress, "downloading the guest kernel package: ", "linux-image-amd64");
        char script[4600];
        (void) snprintf(script, sizeof script,
                        "cd '%s' && apt-get download -q \"$(apt-cache depends linux-image-amd64 | "
                        "awk '/Depends: linux-image-/ {print $2; exit}')\" >/dev/null 2>&1",
                        dir);
        int r = run_sh(script, err);
        if (r < 0)
            return cdn_error_prefix(err, r, "download the guest kernel (apt-get download linux-image-*)");
    }
    return cdn_error_set(err, ENOENT, "no linux-image-*.deb in %s", dir);
}

/* The XZ stream inside a bzImage, decompressed to path. */
static int write_vmlinux(const uint8_t *bz, size_t n, const char *path, struct cdn_error *err)
{
    static const uint8_t magic[6] = {0xfd, '7', 'z', 'X', 'Z', 0};
    const uint8_t *p = memmem(bz, n, magic, sizeof magic);
    if (!p)
        return cdn_error_set(err, EINVAL, "the kernel image has no XZ payload");
    lzma_stream s = LZMA_STREAM_INIT;
    if (lzma_stream_decoder(&s, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK)
        return cdn_error_set(err, ENOMEM, "lzma decoder");
    char tmp[4200];
    (void) snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int) getpid());
    _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        lzma_end(&s);
        return cdn_error_set(err, errno, "create %s: %m", tmp);
    }
    static uint8_t out[1 << 20];
    s.next_in = p;
    s.avail_in = n - (size_t) (p - bz);
    lzma_ret ret = LZMA_OK;
    int r = 0;
    while (ret == LZMA_OK) {
        s.next_out = out;
        s.avail_out = sizeof out;
        ret = lzma_code(&s, LZMA_FINISH);
        size_t got = sizeof out - s.avail_out;
        if (got && cdn_write_all(fd, out, got) < 0) {
            r = cdn_error_set(err, errno, "write %s: %m", tmp);
            break;
        }
    }
    lzma_end(&s);
    /* The payload is followed by padding and the rest of the bzImage: data
     * after the stream's end is expected. */
    if (r == 0 && ret != LZMA_STREAM_END && ret != LZMA_DATA_ERROR)
        r = cdn_error_set(err, EINVAL, "decompress the kernel: lzma error %d", (int) ret);
    if (r == 0 && rename(tmp, path) < 0)
        r = cdn_error_set(err, errno, "rename %s: %m", tmp);
    if (r < 0)
        (void) unlink(tmp);
    return r;
}

static int read_entry(struct archive *a, uint8_t **buf, size_t *n)
{
    size_t cap = 1 << 20, len = 0;
    _cleanup_free_ uint8_t *b = malloc(cap);
    for (;;) {
        if (!b)
            return -ENOMEM;
        if (len == cap) {
            uint8_t *nb = realloc(b, cap *= 2);
            if (!nb)
                return -ENOMEM;
            b = nb;
        }
        la_ssize_t k = archive_read_data(a, b + len, cap - len);
        if (k < 0)
            return -EIO;
        if (k == 0)
            break;
        len += (size_t) k;
    }
    *buf = TAKE_PTR(b), *n = len;
    return 0;
}

/* Drop a module's appended signature. The guest kernel does not enforce
 * signatures (no Secure Boot lockdown in a microvm); it only checks them and
 * under TCG that RSA check costs more than the rest of loading: 0.65 s of a
 * 3.2 s cold boot for the nine modules. The guest is tainted "E" instead. */
static size_t strip_signature(const uint8_t *b, size_t n)
{
    static const char magic[] = "~Module signature appended~\n";
    const size_t ml = sizeof magic - 1,
                 info = 12; /* struct module_signature: sig_len is its last 4 bytes, BE */
    if (n < ml + info || memcmp(b + n - ml, magic, ml) != 0)
        return n;
    const uint8_t *s = b + n - ml - 4;
    size_t sig = (size_t) s[0] << 24 | (size_t) s[1] << 16 | (size_t) s[2] << 8 | s[3];
    return sig <= n - ml - info ? n - ml - info - sig : n;
}

static int write_file(const char *path, const uint8_t *b, size_t n, mode_t mode)
{
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    return cdn_write_all(fd, b, n);
}

/* From data.tar.xz (in memory): vmlinux and the modules, into kdir. */
static void archive_read_freep(struct archive **a)
{
    if (*a)
        (void) archive_read_free(*a);
}

static int unpack_data(const uint8_t *tar, size_t n, const char *kdir, char *release, size_t rsize,
                       struct cdn_error *err)
{
    _cleanup_(archive_read_freep) struct archive *a = archive_read_new();
    if (!a)
        return cdn_error_set(err, ENOMEM, "libarchive");
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    int r = 0, found = 0;
    if (archive_read_open_memory(a, tar, n) != ARCHIVE_OK)
        r = cdn_error_set(err, EINVAL, "the kernel package's data: %s", archive_error_string(a));
    struct archive_entry *e;
    while (r == 0 && archive_read_next_header(a, &e) == ARCHIVE_OK) {
        const char *name = archive_entry_pathname(e);
        if (name[0] == '.')
            name++;
        char out[4300];
        if (strncmp(name, "/boot/vmlinuz-", 14) == 0) {
            (void) snprintf(release, rsize, "%s", name + 14);
            _cleanup_free_ uint8_t *bz = NULL;
            size_t bn;
            if (read_entry(a, &bz, &bn) < 0) {
                r = cdn_error_set(err, EIO, "read %s: %s", name, archive_error_string(a));
                break;
            }
            (void) snprintf(out, sizeof out, "%s/vmlinux", kdir);
            r = write_vmlinux(bz, bn, out, err);
            found++;
            continue;
        }
        for (size_t i = 0; i < ELEMENTSOF(modules); i++) {
            const char *m = strstr(name, modules[i]);
            if (!m || strncmp(name, "/lib/modules/", 13) != 0 || strlen(m) != strlen(modules[i]))
                continue;
            _cleanup_free_ uint8_t *b = NULL;
            size_t bn;
            if (read_entry(a, &b, &bn) < 0) {
                r = cdn_error_set(err, EIO, "read %s", name);
                break;
            }
            (void) snprintf(out, sizeof out, "%s/%zu.ko", kdir, i);
            if (write_file(out, b, strip_signature(b, bn), 0644) < 0)
                r = cdn_error_set(err, errno, "write %s: %m", out);
            found++;
        }
    }
    if (r == 0 && found != (int) ELEMENTSOF(modules) + 1)
        r = cdn_error_set(err, ENOENT, "the kernel package lacks the kernel or one of the guest's modules");
    return r;
}

static int unpack_deb(const char *deb, const char *kdir, char *release, size_t rsize, struct cdn_error *err)
{
    _cleanup_(archive_read_freep) struct archive *a = archive_read_new();
    if (!a)
        return cdn_error_set(err, ENOMEM, "libarchive");
    archive_read_support_format_ar(a);
    int r = -ENOENT;
    if (archive_read_open_filename(a, deb, 1 << 16) != ARCHIVE_OK)
        r = cdn_error_set(err, EIO, "open %s: %s", deb, archive_error_string(a));
    struct archive_entry *e;
    while (r == -ENOENT && archive_read_next_header(a, &e) == ARCHIVE_OK) {
        if (strncmp(archive_entry_pathname(e), "data.tar", 8) != 0)
            continue;
        _cleanup_free_ uint8_t *tar = NULL;
        size_t n;
        if (read_entry(a, &tar, &n) < 0) {
            r = cdn_error_set(err, EIO, "read data.tar of %s", deb);
            break;
        }
        r = unpack_data(tar, n, kdir, release, rsize, err);
    }
    if (r == -ENOENT)
        r = cdn_error_set(err, ENOENT, "%s: no data.tar inside", deb);
    return r;
}

static int add_file(struct archive *w, const char *name, mode_t mode, const void *data, size_t n,
                    const char *link)
{
    struct archive_entry *e = archive_entry_new();
    if (!e)
        return -ENOMEM;
    archive_entry_set_pathname(e, name);
    archive_entry_set_mode(e, mode);
    archive_entry_set_size(e, (la_int64_t) n);
    if (link)
        archive_entry_set_symlink(e, link);
    int r = archive_write_header(w, e) == ARCHIVE_OK ? 0 : -EIO;
    if (r == 0 && n && archive_write_data(w, data, n) != (la_ssize_t) n)
        r = -EIO;
    archive_entry_free(e);
    return r;
}

/* The whole of a file, in a buffer of its own (*ret, freed by the caller). 0 or -errno. */
static int read_file(const char *path, uint8_t **ret, size_t *n)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return -errno;
    _cleanup_free_ uint8_t *b = malloc((size_t) st.st_size + 1);
    if (!b)
        return -ENOMEM;
    if (cdn_read_full(fd, b, (size_t) st.st_size) != st.st_size)
        return -EIO;
    *ret = TAKE_PTR(b);
    *n = (size_t) st.st_size;
    return 0;
}

static int add_path(struct archive *w, const char *name, const char *src, mode_t mode)
{
    _cleanup_free_ uint8_t *b = NULL;
    size_t n = 0;
    int r = read_file(src, &b, &n);
    if (r == 0)
        r = add_file(w, name, mode, b, n, NULL);
    return r;
}

/* The host image's skeleton (its /etc, the merged-/usr symlinks, mount points) into the
 * initramfs, so that a guest of the host image sees the root a container of it sees. */
static struct archive *tree_w;
static size_t tree_skip;
static int add_tree_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) ftw;
    const char *name = path + tree_skip;
    if (!*name)
        return 0; /* the root itself */
    name++;
    if (type == FTW_D || type == FTW_DP)
        return add_file(tree_w, name, AE_IFDIR | (st->st_mode & 07777), NULL, 0, NULL);
    if (type == FTW_SL) {
        char link[4096];
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n < 0)
            return -errno;
        link[n] = 0;
        return add_file(tree_w, name, AE_IFLNK | 0777, NULL, 0, link);
    }
    if (type == FTW_F && S_ISREG(st->st_mode))
        return add_path(tree_w, name, path, AE_IFREG | (st->st_mode & 07777));
    return 0; /* nothing else belongs in a skeleton */
}

static int add_tree(struct archive *w, const char *root)
{
    tree_w = w;
    tree_skip = strlen(root);
    int r = nftw(root, add_tree_entry, 16, FTW_PHYS); /* an entry's -errno, or nftw's own -1 */
    return r == -1 ? -errno : r;
}

/* Modules [from, to) of kdir into w, under dir. */
static int add_modules(struct archive *w, const char *kdir, size_t from, size_t to, const char *dir)
{
    int r = 0;
    for (size_t i = from; r == 0 && i < to; i++) {
        char src[4300], name[64];
        (void) snprintf(src, sizeof src, "%s/%zu.ko", kdir, i);
        /* cordon-init loads a directory's in number order */
        (void) snprintf(name, sizeof name, "%s/%zu.ko", dir, i - from);
        r = add_path(w, name, src, AE_IFREG | 0644);
    }
    return r;
}

/* Three initramfs files: out[0] (every guest's: the skeleton, init, the modules), out[1] the same
 * followed by a second archive with the root disk's modules (the kernel unpacks concatenated
 * archives in turn), out[2] that followed by a third with a full VM's. A host image's guest does
 * not unpack what only an image's needs: each MiB of initramfs costs tens of ms of a cold boot
 * under TCG. */
static int write_initramfs(const char *kdir, char out[3][4096], const char *init, const char *skeleton,
                           struct cdn_error *err)
{
    static const struct {
        const char *dir;
        size_t from, to;
    } extra[3] = {{NULL, 0, 0},
                  {".modules/disk", FIRST_DISK_MODULE, FIRST_VM_MODULE},
                  {".modules/vm", FIRST_VM_MODULE, ELEMENTSOF(modules)}};
    char tmp[3][4300];
    int r = 0;
    for (int part = 0; part < 3 && r == 0; part++) {
        /* Named after this process: two `vm prepare` at once each write their own, and the last
         * rename wins (they are alike). */
        (void) snprintf(tmp[part], sizeof tmp[part], "%s.%d.part", out[part], (int) getpid());
        struct archive *w = archive_write_new();
        if (!w)
            return cdn_error_set(err, ENOMEM, "libarchive");
        r = archive_write_set_format_cpio_newc(w) == ARCHIVE_OK &&
                    archive_write_open_filename(w, tmp[part]) == ARCHIVE_OK
                ? 0
                : -EIO;
        if (part == 0) {
            if (r == 0)
                r = add_tree(w, skeleton);
            static const char *const dirs[] = {"dev", "proc", "sys",      "tmp",
                                               "usr", "etc",  ".modules", ".modules/net"};
            for (size_t i = 0; r == 0 && i < ELEMENTSOF(dirs); i++)
                r = add_file(w, dirs[i], AE_IFDIR | (strcmp(dirs[i], "tmp") == 0 ? 01777 : 0755), NULL, 0,
                             NULL);
            if (r == 0)
                r = add_path(w, "init", init, AE_IFREG | 0755);
            if (r == 0)
                r = add_modules(w, kdir, 0, FIRST_NET_MODULE, ".modules");
            if (r == 0)
                r = add_modules(w, kdir, FIRST_NET_MODULE, FIRST_DISK_MODULE, ".modules/net");
        } else {
            if (r == 0)
                r = add_file(w, extra[part].dir, AE_IFDIR | 0755, NULL, 0, NULL);
            if (r == 0)
                r = add_modules(w, kdir, extra[part].from, extra[part].to, extra[part].dir);
        }
        if (r == 0 && archive_write_close(w) != ARCHIVE_OK)
            r = -EIO;
        if (r < 0)
            (void) cdn_error_set(err, -r, "write the initramfs %s: %s", tmp[part], archive_error_string(w));
        archive_write_free(w);
    }
    /* out[k]: parts 0 to k, one after the other. */
    for (int k = 0; k < 3 && r == 0; k++) {
        char t[4300];
        (void) snprintf(t, sizeof t, "%s.%d.tmp", out[k], (int) getpid());
        _cleanup_close_ int fd = open(t, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            r = cdn_error_set(err, errno, "create %s: %m", t);
        for (int part = 0; part <= k && r == 0; part++) {
            _cleanup_free_ uint8_t *b = NULL;
            size_t n = 0;
            if ((r = read_file(tmp[part], &b, &n)) < 0 || cdn_write_all(fd, b, n) < 0)
                r = cdn_error_set(err, r < 0 ? -r : errno, "write %s: %m", t);
        }
        if (r == 0 && rename(t, out[k]) < 0)
            r = cdn_error_set(err, errno, "rename %s: %m", t);
        if (r < 0)
            (void) unlink(t);
    }
    for (int part = 0; part < 3; part++)
        (void) unlink(tmp[part]);
    return r;
}

static bool newer(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 &&
           (stat(b, &sb) < 0 || sa.st_mtim.tv_sec > sb.st_mtim.tv_sec ||
            (sa.st_mtim.tv_sec == sb.st_mtim.tv_sec && sa.st_mtim.tv_nsec > sb.st_mtim.tv_nsec));
}

/* The paths of the assets in out, and whether the kernel is unpacked (its stamp, written last, read
 * into out->release): 1 yes, 0 no. */
static int asset_paths(struct cdn_vm_assets *out, char *kdir, size_t ksize, char *stamp, size_t ssize)
{
    const char *dir = cdn_vm_dir();
    (void) snprintf(kdir, ksize, "%s/kernel", dir);
    (void) snprintf(stamp, ssize, "%s/release-" KERNEL_FORMAT, kdir);
    (void) snprintf(out->kernel, sizeof out->kernel, "%s/vmlinux", kdir);
    (void) snprintf(out->initramfs, sizeof out->initramfs, "%s/initramfs.cpio", dir);
    (void) snprintf(out->initramfs_disk, sizeof out->initramfs_disk, "%s/initramfs-disk.cpio", dir);
    (void) snprintf(out->initramfs_vm, sizeof out->initramfs_vm, "%s/initramfs-vm.cpio", dir);
    out->release[0] = 0;
    return cdn_read_file_at(AT_FDCWD, stamp, out->release, sizeof out->release) > 0 &&
           access(out->kernel, R_OK) == 0;
}

/* Whether the initramfs images are current: there, not older than cordon-init (path init), and made
 * in this format for this kernel and the host image's skeleton (which `cordon image rebuild host`
 * makes anew: another inode), host: that image. want: the format line they must carry. 1 yes, 0 no, -errno.
 */
static int initramfs_current(const struct cdn_vm_assets *a, const char *init, struct cdn_image *host,
                             char *want, size_t wsize, struct cdn_error *err)
{
    struct stat sk;
    int r = cdn_image_resolve("host", host, err);
    if (r < 0)
        return r;
    if (stat(host->lower, &sk) < 0)
        return cdn_error_set(err, errno, "%s: %m", host->lower);
    char fmt[256] = "", fmtpath[4300];
    (void) snprintf(want, wsize, "%s kernel %s %s skeleton %llu %lld\n", INITRAMFS_FORMAT, KERNEL_FORMAT,
                    a->release, (unsigned long long) sk.st_ino, (long long) sk.st_mtim.tv_sec);
    (void) snprintf(fmtpath, sizeof fmtpath, "%s/initramfs.format", cdn_vm_dir());
    (void) cdn_read_file_at(AT_FDCWD, fmtpath, fmt, sizeof fmt);
    return !newer(init, a->initramfs) && access(a->initramfs, R_OK) == 0 &&
           access(a->initramfs_disk, R_OK) == 0 && access(a->initramfs_vm, R_OK) == 0 &&
           strcmp(fmt, want) == 0;
}

int cdn_vm_prepare(struct cdn_vm_assets *out, unsigned how, struct cdn_error *err)
{
    bool progress = how & CDN_VM_PROGRESS;
    char kdir[4200], stamp[4300], init[4096], deb[4096], want[256];
    if (cdn_mkdir_p(cdn_vm_dir(), 0755) < 0)
        return cdn_error_set(err, errno, "create %s: %m", cdn_vm_dir());
    /* The kernel: unpacked once (the release file is written last). */
    bool have = asset_paths(out, kdir, sizeof kdir, stamp, sizeof stamp);
    if (!have && (how & CDN_VM_LOOK))
        return -EAGAIN;
    if (!have) {
        int r = find_deb(cdn_vm_dir(), deb, sizeof deb, progress, err);
        if (r < 0)
            return r;
        say(progress, "unpacking the guest kernel and its modules from ", deb);
        if (cdn_mkdir_p(kdir, 0755) < 0)
            return cdn_error_set(err, errno, "create %s: %m", kdir);
        if ((r = unpack_deb(deb, kdir, out->release, sizeof out->release, err)) < 0)
            return r;
        if (write_file(stamp, (const uint8_t *) out->release, strlen(out->release), 0644) < 0)
            return cdn_error_set(err, errno, "write %s: %m", stamp);
        say(progress, "guest kernel ready: ", out->release);
    }
    if (cdn_init_path(init, sizeof init) < 0)
        return cdn_error_set(err, ENOENT, "cordon-init not found (set CORDON_INIT or install cordon)");
    struct cdn_image host;
    int cur = initramfs_current(out, init, &host, want, sizeof want, err);
    if (cur < 0)
        return cur;
    if (!cur && (how & CDN_VM_LOOK))
        return -EAGAIN;
    if (!cur) {
        say(progress, "building the initramfs: cordon-init, the host image's skeleton, the modules of ",
            out->release);
        char paths[3][4096], fmtpath[4300];
        memcpy(paths[0], out->initramfs, sizeof paths[0]);
        memcpy(paths[1], out->initramfs_disk, sizeof paths[1]);
        memcpy(paths[2], out->initramfs_vm, sizeof paths[2]);
        int r = write_initramfs(kdir, paths, init, host.lower, err);
        if (r < 0)
            return r;
        (void) snprintf(fmtpath, sizeof fmtpath, "%s/initramfs.format", cdn_vm_dir());
        if (write_file(fmtpath, (const uint8_t *) want, strlen(want), 0644) < 0)
            return cdn_error_set(err, errno, "write %s: %m", fmtpath);
    }
    return 0;
}

bool cdn_vm_cpu_virt(void)
{
    static char buf[1 << 16];
    ssize_t n = cdn_read_file_at(AT_FDCWD, "/proc/cpuinfo", buf, sizeof buf);
    return n > 0 && (strstr(buf, " vmx") || strstr(buf, " svm"));
}

int cdn_vm_find_qemu(char *out, size_t size)
{
    const char *path = getenv("PATH");
    char dirs[4096];
    (void) snprintf(dirs, sizeof dirs, "%s", path && *path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        (void) snprintf(out, size, "%s/" CDN_QEMU, d);
        if (d[0] == '/' && access(out, X_OK) == 0)
            return 0;
    }
    return -ENOENT;
}

int cdn_vm_status(struct cdn_vm_status *out, struct cdn_error *err)
{
    char kdir[4200], stamp[4300], init[4096], want[256];
    *out = (struct cdn_vm_status){0};
    if (cdn_vm_find_qemu(out->qemu, sizeof out->qemu) < 0)
        out->qemu[0] = 0;
    out->hw_virt = access("/dev/kvm", R_OK | W_OK) == 0 && cdn_vm_cpu_virt();
    out->kernel_ready = asset_paths(&out->assets, kdir, sizeof kdir, stamp, sizeof stamp);
    if (cdn_init_path(init, sizeof init) < 0)
        return cdn_error_set(err, ENOENT, "cordon-init not found (set CORDON_INIT or install cordon)");
    if (out->kernel_ready) {
        struct cdn_image host;
        int r = initramfs_current(&out->assets, init, &host, want, sizeof want, err);
        if (r < 0)
            return r;
        out->initramfs_ready = r;
    }
    return 0;
}

int cdn_qemu_ready(struct cdn_error *err)
{
    struct cdn_vm_status st;
    int r = cdn_vm_status(&st, err);
    if (r < 0)
        return r;
    if (!st.qemu[0])
        return cdn_error_set(err, ENOENT, "QEMU is not installed (qemu-system-x86)");
    if (!st.kernel_ready || !st.initramfs_ready)
        return cdn_error_set(err, ENOENT, "the VM tiers' guest is not prepared (cordon vm prepare)");
    return 0;
}
