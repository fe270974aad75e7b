/* The container tier's writable layer on disk (spec "disk": "disk", the default): a filesystem of
 * exactly limits.disk_mb for each sandbox, so that a full layer is the kernel's ENOSPC and its pages
 * are ordinary, reclaimable page cache — not tmpfs pages charged to the memory cgroup, which made a
 * file larger than memory_mb an OOM kill.
 *
 * The host side runs in the creating process, root in the initial namespaces, before the clone
 * (cdn_writable_make), or ahead of time (the stock, cordond):
 *   a template ext4 image of that size, made once by mkfs.ext4 and cached (<cache>/writable/);
 *   → its data extents copied into an O_TMPFILE file of the state directory (a few hundred KiB);
 *   → a loop device on it (LO_FLAGS_AUTOCLEAR) → ext4 mounted on it by fsopen/fsmount, detached:
 *   → its root given to the slot's root uid, and the mount fd handed to the setup child, which moves
 *   it onto its scratch directory inside its own mount namespace (cdn_writable_attach).
 * Nothing of it is ever attached in the host's mount table and nothing has a name on the host: when
 * the sandbox's mount namespace dies (or a create fails half-way, or the creator crashes), the mount
 * goes, the loop device clears itself on its last close and the unlinked file is freed. There is no
 * teardown to do and nothing a crash can leak.
 *
 * Why not project quotas on one shared filesystem: they need CONFIG_XFS_QUOTA or CONFIG_QFMT_V2,
 * which kernels built for VMs (like this project's CI host) leave out; a filesystem per sandbox
 * needs only ext4 and loop. Its size is fixed at create, and the sandbox can change nothing of it:
 * it has no capability over the block device or the mount (the fs belongs to the initial user
 * namespace), and the root of the sandbox owns only the files in it. */
#include "container-internal.h"
#include "core/paths.h"
#include "core/sandbox.h"
#include "tiers/tier.h"
#include "shared/fd-util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <sched.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "confine/slot.h"

#define LOOP_ATTEMPTS 16 /* another process may take the free loop device we were told of */
/* linux/ext4.h (not in every uapi headers package): a file system shut down, its journal not flushed. */
#ifndef EXT4_IOC_SHUTDOWN
#define EXT4_IOC_SHUTDOWN _IOR('X', 125, uint32_t)
#endif
#define EXT4_GOING_FLAGS_NOLOGFLUSH 0x2

/* The image's size for disk_mb of files: ext4's inode tables (256 bytes per 16 KiB, 1/64 of the
 * image) on top, so that what df shows, and what the sandbox can fill, is disk_mb (a little less:
 * bitmaps, the root and lost+found). Never more: RLIMIT_FSIZE is 1 MiB above disk_mb, and ENOSPC
 * must come first. */
static off_t image_size(uint64_t disk_mb)
{
    uint64_t bytes = (disk_mb << 20) / 63 * 64;
    return (off_t) ((bytes + 4095) & ~4095ULL);
}

/* The cached template for size_mb of files: made aside, then renamed, so that a reader sees a whole one or
 * none; two makers at once both make one and the last rename wins (they are alike). */
static int template_path(uint64_t size_mb, char *path, size_t size, struct cdn_error *err)
{
    char dir[4096];
    cdn_cache_dir(dir, sizeof dir);
    if (strlen(dir) + sizeof "/writable" >= sizeof dir)
        return cdn_error_field(err, ENAMETOOLONG, "disk", "cache directory path too long");
    strcat(dir, "/writable");
    int r = cdn_mkdir_p(dir, 0700);
    if (r < 0)
        return cdn_error_field(err, -r, "disk", "mkdir %s: %s", dir, strerror(-r));
    (void) snprintf(path, size, "%s/ext4-%llum-v3.img", dir, (unsigned long long) size_mb);
    return 0;
}

static int template_make(const char *path, uint64_t size_mb, struct cdn_error *err)
{
    char tmp[4200];
    (void) snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int) gettid());
    _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || ftruncate(fd, image_size(size_mb)) < 0) {
        int e = errno;
        (void) unlink(tmp);
        return cdn_error_field(err, e, "disk", "make %s: %s", tmp, strerror(e));
    }
    /* No journal (a sandbox's layer does not outlive a crash of its host anyway), no blocks
     * reserved for root, inode tables left to be read as zeroes (lazy_itable_init; mounted with
     * noinit_itable so that nothing zeroes them later): the template is ~150 KiB of data. -T default:
     * 4 KiB blocks and an inode per 16 KiB whatever the size (mkfs's "small" type, under 512 MiB,
     * would give 1 KiB blocks and 4 times the inode tables). */
    static const char *const opts[] = {"mkfs.ext4",
                                       "-q",
                                       "-F",
                                       "-T",
                                       "default",
                                       "-m",
                                       "0",
                                       "-O",
                                       "^has_journal,^resize_inode",
                                       "-E",
                                       "lazy_itable_init=1,nodiscard",
                                       "-L",
                                       "cordon-rw"};
    char *argv[ELEMENTSOF(opts) + 2];
    memcpy(argv, opts, sizeof opts);
    argv[ELEMENTSOF(opts)] = tmp;
    argv[ELEMENTSOF(opts) + 1] = NULL;
    int r = cdn_run_wait(argv, true);
    if (r != 0) {
        (void) unlink(tmp);
        return r < 0
                   ? cdn_error_field(err, -r, "disk", "run mkfs.ext4 (Debian's e2fsprogs): %s", strerror(-r))
                   : cdn_error_field(err, EIO, "disk", "mkfs.ext4 of the writable layer failed (exit %d)", r);
    }
    if (rename(tmp, path) < 0) {
        int e = errno;
        (void) unlink(tmp);
        return cdn_error_field(err, e, "disk", "rename %s: %s", tmp, strerror(e));
    }
    return 0;
}

/* Copy the template's data extents (its holes stay holes) into out. */
static int copy_extents(int in, int out, off_t size)
{
    if (ftruncate(out, size) < 0)
        return -errno;
    for (off_t pos = 0; pos < size;) {
        off_t data = lseek(in, pos, SEEK_DATA);
        if (data < 0)
            return errno == ENXIO ? 0 : -errno;
        off_t hole = lseek(in, data, SEEK_HOLE);
        if (hole < 0)
            return -errno;
        loff_t src = data, dst = data;
        while (src < hole) {
            ssize_t n = copy_file_range(in, &src, out, &dst, (size_t) (hole - src), 0);
            if (n < 0 && errno == EXDEV) { /* another file system's: by hand */
                char buf[65536];
                size_t want = (size_t) (hole - src) < sizeof buf ? (size_t) (hole - src) : sizeof buf;
                n = pread(in, buf, want, src);
                if (n > 0 && pwrite(out, buf, (size_t) n, dst) != n)
                    return -errno ?: -EIO;
                src += n > 0 ? n : 0;
                dst += n > 0 ? n : 0;
            }
            if (n <= 0)
                return n < 0 ? -errno : -EIO;
        }
        pos = hole;
    }
    return 0;
}

/* Not even room for one layer of size_mb on the file system of dir: refused. */
static int room_for(const char *dir, uint64_t size_mb, struct cdn_error *err)
{
    struct statfs host;
    if (statfs(dir, &host) == 0 && (uint64_t) host.f_bavail * (uint64_t) host.f_bsize < (size_mb << 20)) {
        return cdn_error_field(
            err, ENOSPC, "limits.disk_mb",
            "limits.disk_mb: %llu MiB, but the filesystem of %s has %llu MiB free",
            (unsigned long long) size_mb, dir,
            (unsigned long long) ((uint64_t) host.f_bavail * (uint64_t) host.f_bsize >> 20));
    }
    return 0;
}

/* The cached template of size_mb, open for reading (made first if there is none). */
static int template_open(uint64_t size_mb, struct cdn_error *err)
{
    char tpl[4200];
    int r = template_path(size_mb, tpl, sizeof tpl, err);
    if (r < 0)
        return r;
    int in = open(tpl, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (in < 0 && errno == ENOENT && (r = template_make(tpl, size_mb, err)) < 0)
        return r;
    if (in < 0 && (in = open(tpl, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
        return cdn_error_field(err, errno, "disk", "open %s: %m", tpl);
    return in;
}

/* The sandbox's image file: an unnamed copy of the template in the state directory. */
static int image_file(uint64_t size_mb, struct cdn_error *err)
{
    char dir[4200];
    (void) snprintf(dir, sizeof dir, "%s/writable", cdn_state_dir());
    int r = cdn_mkdir_p(dir, 0700);
    if (r < 0)
        return cdn_error_field(err, -r, "disk", "mkdir %s: %s", dir, strerror(-r));
    /* The image is sparse: its blocks are the host's as the sandbox writes them. A layer that could
     * not be filled would turn the sandbox's writes into I/O errors (and fill the host's disk): not
     * even room for one is refused here. (Room for all that run at once is the operator's to plan:
     * docs/disk.md.) */
    if ((r = room_for(dir, size_mb, err)) < 0)
        return r;
    _cleanup_close_ int in = template_open(size_mb, err);
    if (in < 0)
        return in;
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return cdn_error_field(err, errno, "disk", "an unnamed file in %s: %m", dir);
    if ((r = copy_extents(in, fd, image_size(size_mb))) < 0) {
        (void) close(fd);
        return cdn_error_field(err, -r, "disk", "copy the writable layer's template: %s", strerror(-r));
    }
    return fd;
}

int cdn_loop_attach(int file_fd, const char *name, uint32_t flags, int *ret_nr, struct cdn_error *err)
{
    _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return cdn_error_field(err, errno, "disk", "open /dev/loop-control: %m");
    for (int i = 0; i < LOOP_ATTEMPTS; i++) {
        int nr = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (nr < 0)
            return cdn_error_field(err, errno, "disk", "find a free loop device: %m");
        char dev[32];
        (void) snprintf(dev, sizeof dev, "/dev/loop%d", nr);
        int fd = open(dev, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            return cdn_error_field(err, errno, "disk", "open %s: %m", dev);
        /* Buffered, not LO_FLAGS_DIRECT_IO: direct I/O cached the sandbox's pages once instead of
         * twice, but cost each layer ~1.3 ms at create (the configure, ext4's mount and its first
         * metadata reads all waited on the disk) and ~1.2 ms at its end. The backing file's copies
         * are clean page cache once written back, and go with the unnamed file. */
        struct loop_config cfg = {.fd = (uint32_t) file_fd, .info = {.lo_flags = LO_FLAGS_AUTOCLEAR | flags}};
        /* Its name says whose it is (LOOP_GET_STATUS64), for the tests' leak checks and operators. */
        (void) snprintf((char *) cfg.info.lo_file_name, sizeof cfg.info.lo_file_name, "%s", name);
        int r = ioctl(fd, LOOP_CONFIGURE, &cfg);
        if (r == 0) {
            *ret_nr = nr;
            return fd;
        }
        int e = errno;
        (void) close(fd);
        if (e != EBUSY)
            return cdn_error_field(err, e, "disk", "configure %s: %s", dev, strerror(e));
    }
    return cdn_error_field(err, EBUSY, "disk", "no free loop device after %d attempts", LOOP_ATTEMPTS);
}

/* ext4 on /dev/loopNR, as a detached mount (no place in any mount table yet). */
static int mount_detached(int nr, struct cdn_error *err)
{
    char dev[32];
    (void) snprintf(dev, sizeof dev, "/dev/loop%d", nr);
    _cleanup_close_ int fs = (int) syscall(SYS_fsopen, "ext4", FSOPEN_CLOEXEC);
    if (fs < 0)
        return cdn_error_field(err, errno, "disk", "fsopen ext4: %m");
    if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
        syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL, 0) < 0 ||
        /* No cache flushes: through the buffered loop device each was an fsync of the backing file,
         * host disk I/O for a layer that never outlives its sandbox (its unmount waited on one). */
        syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "nobarrier", NULL, 0) < 0 ||
        syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return cdn_error_field(err, errno, "disk", "mount the writable layer (ext4 on %s): %m", dev);
    int mnt = (int) syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    if (mnt < 0)
        return cdn_error_field(err, errno, "disk", "fsmount the writable layer: %m");
    return mnt;
}

/* A layer of disk_mb whose root is still root's, on a loop device named name. */
static int layer_new(uint64_t disk_mb, const char *name, struct cdn_error *err)
{
    _cleanup_close_ int file = image_file(disk_mb, err);
    if (file < 0)
        return file;
    int nr = -1;
    _cleanup_close_ int loop = cdn_loop_attach(file, name, 0, &nr, err);
    if (loop < 0)
        return loop;
    return mount_detached(nr, err); /* the mount holds the loop device, which holds the file */
}

/* A new layer's first directory reads ext4's bitmaps and inode table through the loop device: done
 * here, not by the sandbox's setup (a directory made and removed leaves the
 * filesystem as it was, its metadata read). */
static void warm(int mnt)
{
    if (mkdirat(mnt, "warm", 0700) == 0)
        (void) unlinkat(mnt, "warm", AT_REMOVEDIR);
}

/* The stock (cordond): up to `target` layers of each of STOCK_SIZES sizes (the default spec's, pinned, and
 * the last others asked for), made
 * ahead by cdn_writable_stock_fill, so that a create takes one instead of paying the loop device and
 * the mount (~2 ms). A layer is used once: it is a fresh filesystem, never one a sandbox wrote to. */
#define STOCK_SIZES 4
#define STOCK_MAX   64
static struct stock {
    uint64_t mb;   /* 0: unused entry */
    uint64_t used; /* when last asked for (a counter): the least recent entry gives way */
    unsigned n;
    bool failing; /* its last fill failed: skipped by the fills until a create asks for it again */
    bool pinned;  /* the default spec's size: never gives way to another */
    int fds[STOCK_MAX];
} stock[STOCK_SIZES];
static unsigned stock_target;
static bool stock_owner; /* a process with a stock of its own, even of 0: never a client of another's */
static uint64_t stock_clock;
static void (*stock_wanted)(void);

/* The stock's makers (layer-maker.c), when this process started them: a fill asks a free one for a
 * layer, and its answer (cdn_writable_maker_answer) stocks it. Each makes one at a time; most of a
 * layer's making is waiting on the disk, so several overlap. */
static struct maker {
    int fd;             /* its socket, or -1 */
    struct stock *want; /* the entry its request is for, or NULL: free */
    uint64_t want_mb;   /* … and its size (the entry may go meanwhile) */
} makers[CDN_LAYER_MAKERS] = {[0 ... CDN_LAYER_MAKERS - 1] = {.fd = -1}};

static void maker_gone(struct maker *m)
{
    m->fd = safe_close(m->fd);
    m->want = NULL;
}

/* Requests out for s. */
static unsigned asked_for(const struct stock *s)
{
    unsigned n = 0;
    for (const struct maker *m = makers; m < makers + CDN_LAYER_MAKERS; m++)
        n += m->want == s && m->want_mb == s->mb;
    return n;
}

static void stock_clear(struct stock *s)
{
    for (unsigned i = 0; i < s->n; i++)
        (void) close(s->fds[i]);
    *s = (struct stock){0};
}

/* The entry for mb, made (in place of the least recently asked-for size but the pinned one) when
 * there is none. */
static struct stock *stock_entry(uint64_t mb)
{
    struct stock *lru = NULL;
    for (struct stock *s = stock; s < stock + STOCK_SIZES; s++) {
        if (s->mb == mb) {
            s->used = ++stock_clock;
            return s;
        }
        if (!s->pinned && (!lru || s->used < lru->used))
            lru = s;
    }
    stock_clear(lru);
    *lru = (struct stock){.mb = mb, .used = ++stock_clock};
    return lru;
}

void cdn_writable_stock_enable(unsigned target, uint64_t first_mb, void (*wanted)(void))
{
    stock_owner = true;
    stock_target = target < STOCK_MAX ? target : STOCK_MAX;
    stock_wanted = wanted;
    if (stock_target && first_mb)
        stock_entry(first_mb)->pinned = true;
}

void cdn_writable_stock_drop(void)
{
    for (struct maker *m = makers; m < makers + CDN_LAYER_MAKERS; m++)
        maker_gone(m); /* a forked child's copies: only cordond asks */
    for (struct stock *s = stock; s < stock + STOCK_SIZES; s++)
        stock_clear(s);
    stock_target = 0;
}

unsigned cdn_writable_stock_ready(void)
{
    unsigned n = 0;
    for (struct stock *s = stock; s < stock + STOCK_SIZES; s++)
        n += s->n;
    return n;
}

int cdn_layer_new_warm(uint64_t disk_mb, const char *name, struct cdn_error *err)
{
    int fd = layer_new(disk_mb, name, err);
    if (fd >= 0)
        warm(fd);
    return fd;
}

size_t cdn_writable_maker_start(int *fds)
{
    size_t n = 0;
    for (struct maker *m = makers; m < makers + CDN_LAYER_MAKERS; m++) {
        if (m->fd < 0)
            m->fd = cdn_layer_maker_fork();
        if (m->fd >= 0)
            fds[n++] = m->fd;
    }
    return n;
}

int cdn_writable_maker_answer(int fd, struct cdn_error *err)
{
    struct maker *m = makers;
    while (m < makers + CDN_LAYER_MAKERS && m->fd != fd)
        m++;
    if (m == makers + CDN_LAYER_MAKERS)
        return cdn_error_set(err, EPIPE, "not a layer maker's socket");
    struct cdn_layer_answer ans;
    int layer = -1;
    ssize_t r = cdn_recv_fd(m->fd, &ans, sizeof ans, &layer);
    if (r == -EAGAIN || r == -EINTR)
        return 0;
    char c = r == (ssize_t) sizeof ans ? ans.kind : 0;
    if (c != 'L' && c != 'E') {
        safe_close(layer);
        maker_gone(m);
        return cdn_error_set(err, EPIPE, "a layer maker is gone: the others (or cordond) make layers");
    }
    struct stock *s = m->want && m->want->mb == m->want_mb ? m->want : NULL; /* it may have gone since */
    m->want = NULL;
    if (c == 'E' || layer < 0) {
        safe_close(layer);
        *err = ans.err;
        if (c == 'L')
            cdn_error_set(err, EBADMSG, "a layer maker's answer came without its layer");
        err->msg[sizeof err->msg - 1] = err->field[sizeof err->field - 1] = 0;
        if (s)
            s->failing = true; /* the other sizes still fill */
        return -1;
    }
    if (!s || s->n >= stock_target) {
        (void) close(layer);
        return 0;
    }
    s->fds[s->n++] = layer;
    return 1;
}

/* The entry most recently asked for that wants more than it has and is asked for. */
static struct stock *to_fill(void)
{
    struct stock *s = NULL;
    for (struct stock *t = stock; t < stock + STOCK_SIZES && stock_target; t++)
        if (t->mb && !t->failing && t->n + asked_for(t) < stock_target && (!s || t->used > s->used))
            s = t;
    return s;
}

int cdn_writable_stock_fill(struct cdn_error *err)
{
    bool makers_on = false;
    for (struct maker *m = makers; m < makers + CDN_LAYER_MAKERS; m++) {
        makers_on |= m->fd >= 0;
        struct stock *s = m->fd >= 0 && !m->want ? to_fill() : NULL;
        if (!s)
            continue;
        if (send(m->fd, &s->mb, sizeof s->mb, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t) sizeof s->mb)
            m->want = s, m->want_mb = s->mb;
        else
            maker_gone(m);
    }
    struct stock *s = makers_on ? NULL : to_fill(); /* without makers: one made here */
    if (!s)
        return 0;
    /* Its name says whose it is until it is used (a sandbox that takes it keeps the name). */
    char name[64];
    (void) snprintf(name, sizeof name, "cordon-stock-%d", (int) getpid());
    int fd = layer_new(s->mb, name, err);
    s->failing = fd < 0; /* the other sizes still fill */
    if (fd < 0)
        return fd;
    warm(fd);
    s->fds[s->n++] = fd;
    return 1;
}

/* A layer of mb from the stock, or -1 (and the stock is asked to fill). */
static int stock_take(uint64_t mb)
{
    if (!stock_target)
        return -1;
    struct stock *s = stock_entry(mb);
    int fd = s->n ? s->fds[--s->n] : -1;
    s->failing = false;
    if (stock_wanted)
        stock_wanted();
    return fd;
}

/* The stock's hand-over to `cordon run` (a process without a stock of its own): cordond serves its
 * ready layers on a SOCK_SEQPACKET socket beside its API socket, "<socket>.layers" (root's, 0600).
 * One request per connection: struct layer_request; one answer: 'L' with the layer's mount fd
 * (SCM_RIGHTS), or 'N' (none of that size ready: the client makes its own). Both sides check that
 * the other is root: a layer is a sandbox's writable root, and one handed over by anyone else could
 * be any mount. */
#define LAYER_MAGIC "cdnlyr1"
struct layer_request {
    char magic[8];
    uint64_t disk_mb;
};
#define LAYER_ANSWER_MS 50 /* a cordond busy for longer: the client makes its own */

bool cdn_writable_stock_serve(int conn)
{
    struct layer_request req;
    struct ucred peer;
    socklen_t len = sizeof peer;
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &len) < 0 || peer.uid != 0 ||
        recv(conn, &req, sizeof req, MSG_DONTWAIT) != (ssize_t) sizeof req ||
        memcmp(req.magic, LAYER_MAGIC, sizeof req.magic) != 0)
        return false;
    /* Only a size the stock keeps: a client asking for others must not evict cordond's own. */
    int fd = -1;
    for (struct stock *s = stock; s < stock + STOCK_SIZES && fd < 0 && stock_target; s++)
        if (s->mb && s->mb == req.disk_mb) {
            s->used = ++stock_clock;
            fd = s->n ? s->fds[--s->n] : -1;
            if (stock_wanted)
                stock_wanted();
        }
    (void) cdn_send_byte_fd(conn, fd >= 0 ? 'L' : 'N', fd, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (fd < 0)
        return false;
    (void) close(fd); /* the client has its copy; a layer lost on the way goes with its last fd */
    return true;
}

static int stock_path(char *out, size_t size)
{
    const char *api = getenv("CORDON_SOCKET");
    char def[4096];
    if (!api || !api[0]) {
        (void) snprintf(def, sizeof def, "%s/cordond.sock", cdn_run_dir());
        api = def;
    }
    return (size_t) snprintf(out, size, "%s.layers", api) < size ? 0 : -ENAMETOOLONG;
}

/* A ready layer from the stock of a cordond on this host, or -1. */
static int stock_remote(uint64_t mb)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (stock_path(sa.sun_path, sizeof sa.sun_path) < 0)
        return -1;
    _cleanup_close_ int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct layer_request req = {.magic = LAYER_MAGIC, .disk_mb = mb};
    struct ucred peer;
    socklen_t len = sizeof peer;
    struct timeval tv = {.tv_usec = LAYER_ANSWER_MS * 1000};
    if (c < 0 || connect(c, (struct sockaddr *) &sa, sizeof sa) < 0 ||
        getsockopt(c, SOL_SOCKET, SO_PEERCRED, &peer, &len) < 0 || peer.uid != 0 ||
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
        send(c, &req, sizeof req, MSG_NOSIGNAL) != (ssize_t) sizeof req)
        return -1;
    char answer = 0;
    int fd;
    if (cdn_recv_byte_fd(c, &answer, &fd) != 1 || answer != 'L' || fd < 0) {
        safe_close(fd);
        return -1;
    }
    /* What a layer is: the root of an ext4 of its own, not a directory of some other filesystem. */
    struct statfs fs;
    struct stat st;
    if (fstatfs(fd, &fs) < 0 || fs.f_type != EXT4_SUPER_MAGIC || fstat(fd, &st) < 0 || st.st_ino != 2) {
        (void) close(fd);
        return -1;
    }
    return fd;
}

/* The sandbox's root owns the layer's root: it makes upper/, work/ and its other scratch there. */
static int layer_own(int mnt, uint32_t uid_base, struct cdn_error *err)
{
    if (fchownat(mnt, "", uid_base, uid_base, AT_EMPTY_PATH) < 0) {
        int e = errno;
        (void) close(mnt);
        return cdn_error_field(err, e, "disk", "chown the writable layer: %s", strerror(e));
    }
    return mnt;
}

/* A layer named after the slot, its metadata read, its root the sandbox's. */
static int layer_for_slot(uint64_t disk_mb, int slot, uint32_t uid_base, struct cdn_error *err)
{
    char name[64];
    (void) snprintf(name, sizeof name, "cordon-slot-%d", slot);
    int mnt = layer_new(disk_mb, name, err);
    if (mnt < 0)
        return mnt;
    warm(mnt);
    return layer_own(mnt, uid_base, err);
}

/* A user namespace whose uid and gid maps take from's range to to's: the idmapping of a layer that
 * another slot wrote (its files keep that slot's ids on disk) for the sandbox of this one. Its holder
 * is a child born in it that shares our memory (CLONE_VM: no copy of cordond's page tables) and waits
 * on a pipe, only syscalls, until the namespace is ours. */
static int userns_child(void *arg)
{
    const int *ready = arg;
    char c;
    (void) syscall(SYS_close, ready[1]); /* its copy of the write end: EOF once ours is closed */
    (void) syscall(SYS_read, ready[0], &c, 1);
    syscall(SYS_exit, 0);
    return 0;
}

int cdn_userns_mapping(uint32_t from, uint32_t to, uint32_t count)
{
    static char stack[16384] __attribute__((aligned(16)));
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid = clone(userns_child, stack + sizeof stack, CLONE_VM | CLONE_NEWUSER | SIGCHLD, ready);
    if (pid < 0) {
        int e = errno;
        (void) close(ready[0]);
        (void) close(ready[1]);
        return -e;
    }
    char path[64], map[64];
    int fd = -1, r = 0;
    (void) snprintf(map, sizeof map, "%u %u %u\n", from, to, count);
    const char *files[] = {"uid_map", "gid_map"};
    for (size_t i = 0; i < ELEMENTSOF(files) && r == 0; i++) {
        (void) snprintf(path, sizeof path, "/proc/%d/%s", (int) pid, files[i]);
        r = cdn_write_file_at(AT_FDCWD, path, map);
    }
    if (r == 0) {
        (void) snprintf(path, sizeof path, "/proc/%d/ns/user", (int) pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        r = fd < 0 ? -errno : 0;
    }
    (void) close(ready[1]);
    (void) close(ready[0]);
    while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
        ;
    return r < 0 ? r : fd;
}

#define XATTR_BASE "user.cordon.uid_base"
#define XATTR_LOOP "user.cordon.loop"

int cdn_layer_uid_base(int file, uint32_t *ret)
{
    char v[16] = {0};
    ssize_t n = fgetxattr(file, XATTR_BASE, v, sizeof v - 1);
    if (n <= 0)
        return n < 0 ? -errno : -EBADMSG;
    char *end;
    unsigned long b = strtoul(v, &end, 10);
    if (*end || b > UINT32_MAX)
        return -EBADMSG;
    *ret = (uint32_t) b;
    return 0;
}

int cdn_layer_set_uid_base(int file, uint32_t base)
{
    char v[16];
    int n = snprintf(v, sizeof v, "%u", base);
    return fsetxattr(file, XATTR_BASE, v, (size_t) n, 0) < 0 ? -errno : 0;
}

int cdn_layer_loop(int file)
{
    char v[16] = {0};
    struct stat st;
    if (fgetxattr(file, XATTR_LOOP, v, sizeof v - 1) <= 0 || fstat(file, &st) < 0)
        return -ENOENT;
    int nr = atoi(v);
    return cdn_loop_backs(nr, &st) ? nr : -ENOENT;
}

/* A restored layer's root as a new sandbox's setup expects it (rootfs.c): what setup makes there for
 * one sandbox (mount points, the image's layer links, the masks' file and directory, resolv.conf) goes;
 * upper/, work/ and the rwN directories of a read-only root (the sandbox's files) stay. The layer's root is
 * cordon's: a sandbox never sees it. */
static void layer_refresh(int mnt)
{
    static const char *const files[] = {"resolv.conf", "mask"}, *const dirs[] = {"lower", "root", "mask.d"};
    for (size_t i = 0; i < ELEMENTSOF(files); i++)
        (void) unlinkat(mnt, files[i], 0);
    for (size_t i = 0; i < ELEMENTSOF(dirs); i++)
        (void) unlinkat(mnt, dirs[i], AT_REMOVEDIR);
    _cleanup_close_ int l = openat(mnt, "l", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = l < 0 ? NULL : fdopendir(l);
    if (!d)
        return;
    l = -1; /* the DIR's now */
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            (void) unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
    (void) unlinkat(mnt, "l", AT_REMOVEDIR);
}

/* The template of size_mb in the checkpoint store, copied there once: a new layer is a reflink of it. */
static int store_template(int store, uint64_t size_mb, struct cdn_error *err)
{
    char name[64], tmp[80];
    (void) snprintf(name, sizeof name, "layers/ext4-%llum-v3.template", (unsigned long long) size_mb);
    int fd = openat(store, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0 || errno != ENOENT)
        return fd >= 0 ? fd
                       : cdn_error_field(err, errno, "disk", "open %s in the checkpoint store: %m", name);
    _cleanup_close_ int in = template_open(size_mb, err);
    if (in < 0)
        return in;
    (void) snprintf(tmp, sizeof tmp, "%s.%d", name, (int) getpid());
    _cleanup_close_ int out = openat(store, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    int r = out < 0 ? -errno : copy_extents(in, out, image_size(size_mb));
    if (r == 0 && renameat(store, tmp, store, name) < 0)
        r = -errno;
    if (r < 0) {
        (void) unlinkat(store, tmp, 0);
        return cdn_error_field(err, -r, "disk", "copy the layer template into the checkpoint store: %s",
                               strerror(-r));
    }
    return openat(store, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

/* Room in the state filesystem and the checkpoint store for a layer of mb. */
static int store_room(int store, uint64_t mb, struct cdn_error *err)
{
    char state[4200];
    (void) snprintf(state, sizeof state, "%s", cdn_state_dir());
    int r = room_for(state, mb, err);
    if (r < 0)
        return r;
    struct statfs sfs;
    if (fstatfs(store, &sfs) == 0 && (uint64_t) sfs.f_bavail * (uint64_t) sfs.f_bsize < (mb << 20))
        return cdn_error_field(err, ENOSPC, "limits.disk_mb",
                               "limits.disk_mb: %llu MiB, but the checkpoint store has %llu MiB free",
                               (unsigned long long) mb,
                               (unsigned long long) ((uint64_t) sfs.f_bavail * (uint64_t) sfs.f_bsize >> 20));
    return 0;
}

/* A reflink of in (a checkpoint's image when from, whose files keep the ids of slot base base; else
 * the template) as a new unnamed file of the store (*ret_file), on a loop device named for slot,
 * mounted and owned by the slot of uid_base: a layer of another slot's is idmapped onto it. The
 * root of its mount, detached. */
static int layer_clone(int store, int in, bool from, uint32_t base, int slot, uint32_t uid_base,
                       int *ret_file, struct cdn_error *err)
{
    _cleanup_close_ int file = openat(store, "layers", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (file < 0)
        return cdn_error_field(err, errno, "checkpoints", "an unnamed file in the checkpoint store: %m");
    int r;
    if (ioctl(file, FICLONE, in) < 0 && (r = -errno) < 0)
        return cdn_error_field(err, -r, from ? "checkpoint" : "disk", "%s the writable layer: %s",
                               from ? "clone the checkpoint into" : "copy the template of", strerror(-r));
    if ((r = cdn_layer_set_uid_base(file, base)) < 0)
        return cdn_error_field(err, -r, "checkpoints", "mark the writable layer: %s", strerror(-r));
    char name[64];
    (void) snprintf(name, sizeof name, "cordon-slot-%d", slot);
    int nr = -1;
    _cleanup_close_ int loop = cdn_loop_attach(file, name, 0, &nr, err);
    if (loop < 0)
        return loop;
    char v[16];
    int n = snprintf(v, sizeof v, "%d", nr);
    if (fsetxattr(file, XATTR_LOOP, v, (size_t) n, 0) < 0)
        return cdn_error_field(err, errno, "checkpoints", "mark the writable layer: %m");
    _cleanup_close_ int mnt = mount_detached(nr, err);
    if (mnt < 0)
        return mnt;
    warm(mnt);
    if (from)
        layer_refresh(mnt);
    if (base == uid_base) {
        if ((r = layer_own(TAKE_FD(mnt), uid_base, err)) >= 0)
            *ret_file = TAKE_FD(file);
        return r;
    }
    _cleanup_close_ int userns = cdn_userns_mapping(base, uid_base, CDN_UID_RANGE);
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t) userns};
    if (userns < 0 || syscall(SYS_mount_setattr, mnt, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) {
        int e = userns < 0 ? -userns : errno;
        return cdn_error_field(err, e, "checkpoint", "idmap the restored layer: %s", strerror(e));
    }
    *ret_file = TAKE_FD(file);
    return TAKE_FD(mnt);
}

/* A checkpointable layer (spec "checkpoints": true): its image is a file of the checkpoint store
 * (layer-store.c) named layers/<sandbox id>, a copy of the template or a reflink of the checkpoint
 * sb->layer_from_fd (or the one made ahead, sb->layer_ready). Its files keep the ids of the slot
 * that first wrote them (the xattr user.cordon.uid_base). */
static int store_layer(struct cdn_sandbox *sb, struct cdn_error *err)
{
    int store = cdn_layer_store(err), r;
    if (store < 0)
        return store;
    _cleanup_close_ int file = -EBADF, mnt = -EBADF;
    struct cdn_layer_ready *ready = sb->layer_ready;
    if (ready && ready->mnt >= 0 && ready->slot == sb->slot) {
        file = TAKE_FD(ready->file);
        mnt = TAKE_FD(ready->mnt);
    } else {
        const bool from = sb->layer_from_fd >= 0;
        const uint64_t mb = sb->spec->limits.disk_mb;
        _cleanup_close_ int in = from ? -EBADF : store_template(store, mb, err);
        if (!from && in < 0)
            return in;
        if ((r = store_room(store, mb, err)) < 0)
            return r;
        mnt = layer_clone(store, from ? sb->layer_from_fd : in, from,
                          from ? sb->layer_from_base : sb->uid_base, sb->slot, sb->uid_base, &file, err);
        if (mnt < 0)
            return mnt;
    }
    _cleanup_close_ int layers = openat(store, "layers", O_PATH | O_DIRECTORY | O_CLOEXEC);
    char proc[64];
    (void) snprintf(proc, sizeof proc, "/proc/self/fd/%d", file);
    if (layers < 0 || linkat(AT_FDCWD, proc, layers, sb->id, AT_SYMLINK_FOLLOW) < 0)
        return cdn_error_field(err, errno, "checkpoints", "name the writable layer %s: %m", sb->id);
    return TAKE_FD(mnt);
}

int cdn_layer_ready_make(int from_fd, uint32_t from_base, uint64_t disk_mb, int slot_hint,
                         struct cdn_layer_ready *ret, struct cdn_error *err)
{
    int store = cdn_layer_store(err), r;
    if (store < 0)
        return store;
    if ((r = store_room(store, disk_mb, err)) < 0)
        return r;
    int slot = -1;
    _cleanup_close_ int slot_fd = -EBADF, file = -EBADF;
    if ((r = cdn_slot_acquire(cdn_run_dir(), slot_hint, &slot, &slot_fd, err)) < 0)
        return r;
    int mnt = layer_clone(store, from_fd, true, from_base, slot, cdn_slot_uid_base(slot), &file, err);
    if (mnt < 0)
        return mnt;
    *ret = (struct cdn_layer_ready){
        .mnt = mnt, .file = TAKE_FD(file), .slot = slot, .slot_fd = TAKE_FD(slot_fd)};
    return 0;
}

void cdn_layer_ready_drop(struct cdn_layer_ready *r)
{
    r->mnt = safe_close(r->mnt);
    r->file = safe_close(r->file);
    r->slot_fd = safe_close(r->slot_fd);
    r->slot = -1;
}

void cdn_layer_forget(const char *id)
{
    int store = cdn_layer_store_fd();
    _cleanup_close_ int layers =
        store < 0 ? -EBADF : openat(store, "layers", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (layers >= 0)
        (void) unlinkat(layers, id, 0);
}

void cdn_layer_discard(int root)
{
    uint32_t how = EXT4_GOING_FLAGS_NOLOGFLUSH;
    if (root >= 0)
        (void) ioctl(root, EXT4_IOC_SHUTDOWN, &how);
}

int cdn_writable_make(struct cdn_sandbox *sb, struct cdn_error *err)
{
    const struct cdn_spec *spec = sb->spec;
    if (spec->checkpoints || sb->layer_from_fd >= 0)
        return store_layer(sb, err);
    if (cdn_layer_pool_fd() >= 0)
        return cdn_layer_pool_make(sb, err);
    int mnt = stock_owner ? stock_take(spec->limits.disk_mb) : stock_remote(spec->limits.disk_mb);
    return mnt >= 0 ? layer_own(mnt, sb->uid_base, err)
                    : layer_for_slot(spec->limits.disk_mb, sb->slot, sb->uid_base, err);
}

bool cdn_writable_full(const struct statfs *fs)
{
    return (uint64_t) fs->f_bavail * (uint64_t) fs->f_bsize < CDN_WRITABLE_FULL_MARGIN;
}

/* Runs in the setup child, root of its user namespace with its own mount namespace (made private):
 * moves the mount the host made onto scratch. fd is the host's detached mount; closed here. */
int cdn_writable_attach(int fd, const char *scratch, struct cdn_error *err)
{
    int r = (int) syscall(SYS_move_mount, fd, "", AT_FDCWD, scratch, MOVE_MOUNT_F_EMPTY_PATH);
    int e = errno;
    (void) close(fd);
    if (r < 0)
        return cdn_error_field(err, e, "disk", "attach the writable layer on %s: %s", scratch, strerror(e));
    return 0;
}
