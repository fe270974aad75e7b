/* bench/run-startup's floor of a writable layer on disk: what the kernel takes to make one ext4 of
 * its own on a loop device, step by step, with nothing of cordon around it. The same steps as
 * docs/disk.md lists (an unnamed copy of the template's extents, a loop device that clears itself,
 * ext4 mounted detached, its first directory), each timed, N times; then the release (the last
 * close: unmount, loop device cleared, file freed), timed apart since `cordon run` does not wait
 * for it. Prints one JSON object of medians in ms.
 *
 *   cordon-bench-layer TEMPLATE DIR N
 *
 * TEMPLATE: a layer template cordon made (<state>/cache/writable/ext4-<mb>m-v*.img); DIR: where the
 * unnamed copies go (cordon's <state>/writable, same filesystem). Root only. */
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { COPY, LOOP, MOUNT, FIRST_DIR, TOTAL, RELEASE, STEPS };
static const char *const names[STEPS] = {"copy", "loop", "mount", "first_dir", "create", "release"};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static void die(const char *what)
{
    fprintf(stderr, "cordon-bench-layer: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void copy_extents(int in, int out, off_t size)
{
    if (ftruncate(out, size) < 0)
        die("ftruncate");
    for (off_t pos = 0; pos < size;) {
        off_t data = lseek(in, pos, SEEK_DATA);
        if (data < 0)
            break; /* no data after pos */
        off_t hole = lseek(in, data, SEEK_HOLE);
        for (off_t o = data, p = data; o < hole;) {
            ssize_t n = copy_file_range(in, &o, out, &p, (size_t) (hole - o), 0);
            if (n <= 0)
                die("copy_file_range");
        }
        pos = hole;
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return fprintf(stderr, "usage: cordon-bench-layer TEMPLATE DIR N\n"), 2;
    int n = atoi(argv[3]);
    if (n < 1)
        return 2;
    int in = open(argv[1], O_RDONLY | O_CLOEXEC);
    struct stat st;
    int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (in < 0 || fstat(in, &st) < 0 || ctl < 0)
        die(argv[1]);
    double *t[STEPS];
    for (int s = 0; s < STEPS; s++)
        if (!(t[s] = calloc((size_t) n, sizeof(double))))
            die("calloc");
    for (int i = 0; i < n; i++) {
        double t0 = now_ms();
        int file = open(argv[2], O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (file < 0)
            die(argv[2]);
        copy_extents(in, file, st.st_size);
        double t1 = now_ms();
        int nr = ioctl(ctl, LOOP_CTL_GET_FREE);
        char dev[32];
        snprintf(dev, sizeof dev, "/dev/loop%d", nr);
        int loop = nr < 0 ? -1 : open(dev, O_RDWR | O_CLOEXEC);
        struct loop_config cfg = {.fd = (unsigned) file, .info = {.lo_flags = LO_FLAGS_AUTOCLEAR}};
        snprintf((char *) cfg.info.lo_file_name, sizeof cfg.info.lo_file_name, "cordon-bench-layer");
        if (loop < 0 || ioctl(loop, LOOP_CONFIGURE, &cfg) < 0)
            die("loop device");
        double t2 = now_ms();
        int fs = (int) syscall(SYS_fsopen, "ext4", FSOPEN_CLOEXEC);
        if (fs < 0 || syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL, 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "nobarrier", NULL, 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
            die("mount ext4");
        int mnt = (int) syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        if (mnt < 0)
            die("fsmount");
        double t3 = now_ms();
        if (mkdirat(mnt, "warm", 0700) < 0 || unlinkat(mnt, "warm", AT_REMOVEDIR) < 0)
            die("first directory");
        double t4 = now_ms();
        close(fs), close(file), close(loop);
        close(mnt); /* the last reference: the unmount, then the loop device clears itself */
        double t5 = now_ms();
        t[COPY][i] = t1 - t0, t[LOOP][i] = t2 - t1, t[MOUNT][i] = t3 - t2, t[FIRST_DIR][i] = t4 - t3;
        t[TOTAL][i] = t4 - t0, t[RELEASE][i] = t5 - t4;
    }
    printf("{\"runs\": %d", n);
    for (int s = 0; s < STEPS; s++) {
        qsort(t[s], (size_t) n, sizeof(double), cmp);
        printf(", \"%s_ms\": %.3f", names[s], t[s][n / 2]);
    }
    printf("}\n");
    return 0;
}
