/* The accelerator and the snapshot of a booted guest (qemu.h): one template per shape (memory,
 * vCPUs, accelerator, image), saved through QMP and restored copy-on-write. Runs in the host process
 * that owns the sandbox, as root; QMP replies and the agent's frames are QEMU's and the guest's. */
#include "qemu.h"
#include "proto/frame.h"
#include "core/paths.h"
#include "shared/fd-util.h"
#include "shared/macro.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int probe_kvm(const struct cdn_vm_assets *vm);

/* KVM where a guest runs under it, else TCG. $CORDON_VM_ACCEL=kvm|tcg decides; else KVM is tried
 * where /dev/kvm is there and the CPU does VMX/SVM ($CORDON_VM_ACCEL=probe: tried whatever the
 * CPU says): a cold boot under KVM must answer a PING. The answer is kept for this host boot in
 * <vm dir>/accel. vm NULL: never try, the kept answer or TCG (an adopted guest of an old record). */
const char *cdn_qemu_pick_accel(const struct cdn_vm_assets *vm)
{
    const char *env = getenv("CORDON_VM_ACCEL");
    if (env && (strcmp(env, "kvm") == 0 || strcmp(env, "tcg") == 0))
        return env;
    bool force = env && strcmp(env, "probe") == 0;
    if (access("/dev/kvm", R_OK | W_OK) < 0 || (!force && !cdn_vm_cpu_virt()))
        return "tcg";
    char boot[64] = "", path[4200], have[128] = "", want[128];
    (void) cdn_read_file_at(AT_FDCWD, "/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    boot[strcspn(boot, "\n")] = 0;
    (void) snprintf(path, sizeof path, "%s/accel", cdn_vm_dir());
    (void) cdn_read_file_at(AT_FDCWD, path, have, sizeof have);
    for (int i = 0; i < 2; i++) {
        (void) snprintf(want, sizeof want, "%s %s\n", boot, i ? "tcg" : "kvm");
        if (!force && strcmp(have, want) == 0)
            return i ? "tcg" : "kvm";
    }
    if (!vm)
        return "tcg";
    int r = probe_kvm(vm);
    if (r < 0)
        fprintf(stderr, "cordon: vm: a guest did not come up under KVM (%s): using TCG on this host\n",
                strerror(-r));
    (void) snprintf(want, sizeof want, "%s %s\n", boot, r < 0 ? "tcg" : "kvm");
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0)
        (void) cdn_write_all(fd, want, strlen(want));
    return r < 0 ? "tcg" : "kvm";
}

/* poll() of one fd for POLLIN, resumed after signals (cordond's SIGCHLD when another sandbox's QEMU
 * ends interrupted a restore's QMP exchange, which then failed) until timeout_ms in all. */
int cdn_qemu_poll_in(int fd, int timeout_ms)
{
    struct timespec t0, t;
    (void) clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        (void) clock_gettime(CLOCK_MONOTONIC, &t);
        long left = timeout_ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, left > 0 ? (int) left : 0);
        if (r >= 0 || errno != EINTR)
            return r;
    }
}

/* One QMP command over fd (a blocking socket); the reply's "return" is not looked at beyond success. */
static int qmp(int fd, const char *json, char *reply, size_t size)
{
    if (json && cdn_write_all(fd, json, strlen(json)) < 0)
        return -errno;
    size_t n = 0;
    for (;;) { /* lines until one with "return" or "error" (events come in between) */
        if (cdn_qemu_poll_in(fd, 60000) <= 0)
            return -ETIMEDOUT;
        ssize_t k = read(fd, reply + n, size - 1 - n);
        if (k <= 0)
            return -EPIPE;
        n += (size_t) k;
        reply[n] = 0;
        char *nl;
        while ((nl = strchr(reply, '\n'))) {
            *nl = 0;
            /* reply now holds one line: the answer (or greeting) ends the wait, an event is skipped */
            if (strstr(reply, "\"error\""))
                return -EIO;
            if (strstr(reply, "\"return\"") || strstr(reply, "\"QMP\""))
                return 0;
            n -= (size_t) (nl + 1 - reply);
            memmove(reply, nl + 1, n + 1);
        }
        if (n >= size - 1)
            n = 0;
    }
}

/* QMP's getfd: the command with fd attached (SCM_RIGHTS), so that `migrate` can name it. */
static int qmp_getfd(int qmpfd, int fd, const char *name, char *reply, size_t size)
{
    char cmd[128];
    int n = snprintf(cmd, sizeof cmd, "{\"execute\":\"getfd\",\"arguments\":{\"fdname\":\"%s\"}}\n", name);
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } c = {0};
    struct iovec iov = {cmd, (size_t) n};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.b, .msg_controllen = sizeof c.b};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof fd);
    if (sendmsg(qmpfd, &m, MSG_NOSIGNAL) != n)
        return -errno;
    return qmp(qmpfd, NULL, reply, size);
}

/* Wait for init's PONG on the agent socket (what init says first, its USAGE, goes by). */
static int wait_pong(int agent, int timeout_ms)
{
    static uint8_t buf[CDN_FRAME_MAX];
    if (cdn_frame_send(agent, CDN_FRAME_PING, 1, "ready", 5) < 0)
        return -EPIPE;
    for (int frames = 0; frames < 16; frames++) {
        if (cdn_qemu_poll_in(agent, timeout_ms) <= 0)
            return -ETIMEDOUT;
        struct cdn_frame_header h;
        int n = cdn_frame_recv(agent, &h, buf, sizeof buf);
        if (n < 0)
            return n;
        if (h.type == CDN_FRAME_PONG)
            return 0;
    }
    return -EPROTO;
}

/* A cold boot under KVM of the smallest guest (-M microvm, the plain initramfs), which must answer a
 * PING within 20 s. 0 or -errno. */
static int probe_kvm(const struct cdn_vm_assets *vm)
{
    _cleanup_close_pair_ int ag[2] = {-EBADF, -EBADF};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ag) < 0)
        return -errno;
    struct cdn_qemu_cmd q = {0};
    cdn_qemu_cmd_build(&q, &(struct cdn_qemu_opts){.vm = vm,
                                                   .accel = "kvm",
                                                   .mem_mb = 128,
                                                   .smp = 1,
                                                   .boot = CDN_QEMU_COLD,
                                                   .initramfs = vm->initramfs,
                                                   .append = ""});
    _cleanup_close_ int pidfd = -EBADF;
    pid_t pid = cdn_qemu_spawn(
        &q, &(struct cdn_qemu_fds){.agent = ag[1], .fd4 = -1, .fd5 = -1, .tap = -1, .disk = -1, .netns = -1},
        &pidfd, NULL);
    ag[1] = safe_close(ag[1]);
    int r = pid < 0 ? (int) pid : wait_pong(ag[0], 20000);
    if (pid > 0) {
        (void) kill(pid, SIGKILL);
        (void) waitpid(pid, NULL, 0);
    }
    return r;
}

/* QMP's commands that make a guest's RAM the file's, not the migration stream's. */
#define QMP_IGNORE_SHARED                                                                                    \
    "{\"execute\":\"migrate-set-capabilities\",\"arguments\":{\"capabilities\":"                             \
    "[{\"capability\":\"x-ignore-shared\",\"state\":true}]}}\n"

/* A booted template's state out to sfd, through QMP (qm) once its init answers (agent). */
static int save_state(int agent, int qm, int sfd, struct cdn_error *err)
{
    char reply[8192] = "";
    int r = wait_pong(agent, 120000);
    if (r < 0)
        return cdn_error_set(err, -r, "the template guest did not come up: %s", strerror(-r));
    /* The state file goes to QEMU through QMP's getfd, for migrate's "fd:state". */
    if ((r = qmp(qm, NULL, reply, sizeof reply)) < 0 ||
        (r = qmp(qm, "{\"execute\":\"qmp_capabilities\"}\n", reply, sizeof reply)) < 0 ||
        (r = qmp(qm, QMP_IGNORE_SHARED, reply, sizeof reply)) < 0 ||
        (r = qmp_getfd(qm, sfd, "state", reply, sizeof reply)) < 0 ||
        (r = qmp(qm, "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"fd:state\"}}\n", reply,
                 sizeof reply)) < 0)
        return cdn_error_set(err, -r, "QMP: %s", reply);
    for (int i = 0;; i++) { /* until the state is out */
        if ((r = qmp(qm, "{\"execute\":\"query-migrate\"}\n", reply, sizeof reply)) < 0)
            return cdn_error_set(err, -r, "QMP query-migrate: %s", reply);
        if (strstr(reply, "\"completed\""))
            return 0;
        if (strstr(reply, "\"failed\"") || i > 6000)
            return cdn_error_set(err, EIO, "saving the template's state failed: %s", reply);
        (void) usleep(10000);
    }
}

/* Boot t's guest of this shape, let it settle, save its state into dir (RAM: dir/mem, by QEMU). */
static int make_template(const struct cdn_qemu_tier *t, const struct cdn_vm_assets *vm, const char *accel,
                         uint64_t mem_mb, int smp, const char *disk, const char *dir, struct cdn_error *err)
{
    /* A one-off the caller cannot foresee, that takes seconds (docs/error-handling.md). */
    fprintf(stderr, "cordon: vm: booting a guest to snapshot (%llu MiB, %d vCPU, %s) …\n",
            (unsigned long long) mem_mb, smp, accel);
    char state[4300];
    (void) snprintf(state, sizeof state, "%s/state.tmp", dir);
    _cleanup_close_ int sfd = open(state, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    _cleanup_close_pair_ int ag[2] = {-EBADF, -EBADF}, qm[2] = {-EBADF, -EBADF};
    if (sfd < 0)
        return cdn_error_set(err, errno, "create %s: %m", state);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ag) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, qm) < 0)
        return cdn_error_set(err, errno, "socketpair: %m");
    struct cdn_qemu_disk d = {.path = disk};
    struct cdn_qemu_cmd q = {0};
    cdn_qemu_cmd_build(&q, &(struct cdn_qemu_opts){.vm = vm,
                                                   .accel = accel,
                                                   .mem_mb = mem_mb,
                                                   .smp = smp,
                                                   .boot = CDN_QEMU_TEMPLATE,
                                                   .memdir = dir,
                                                   .pci = t->pci,
                                                   .initramfs = t->initramfs(vm, &d),
                                                   .append = t->append,
                                                   .disk = d});
    /* QMP on fd 4. */
    _cleanup_close_ int pidfd = -EBADF;
    pid_t pid = cdn_qemu_spawn(
        &q,
        &(struct cdn_qemu_fds){.agent = ag[1], .fd4 = qm[1], .fd5 = -1, .tap = -1, .disk = -1, .netns = -1},
        &pidfd, err);
    ag[1] = safe_close(ag[1]);
    qm[1] = safe_close(qm[1]);
    int r = pid < 0 ? (int) pid : save_state(ag[0], qm[0], sfd, err);
    if (pid > 0) {
        char reply[8192];
        if (r == 0)
            (void) qmp(qm[0], "{\"execute\":\"quit\"}\n", reply, sizeof reply);
        else
            (void) kill(pid, SIGKILL);
        (void) waitpid(pid, NULL, 0);
    }
    char final[4300];
    (void) snprintf(final, sizeof final, "%s/state", dir);
    if (r == 0 && (fsync(sfd) < 0 || rename(state, final) < 0))
        r = cdn_error_set(err, errno, "keep the template's state: %m");
    if (r < 0)
        (void) unlink(state);
    return r;
}

/* The snapshot directory for this shape, made (under a lock) when missing or stale. */
int cdn_qemu_snapshot_dir(const struct cdn_qemu_tier *t, const struct cdn_vm_assets *vm, const char *accel,
                          uint64_t mem_mb, int smp, const char *disk, unsigned how, char *dir, size_t size,
                          struct cdn_error *err)
{
    struct stat st;
    const char *initramfs = t->initramfs(vm, &(struct cdn_qemu_disk){.path = disk});
    if (stat(initramfs, &st) < 0)
        return cdn_error_set(err, errno, "%s: %m", initramfs);
    /* One template per image too: an image's guest has its disk, mounted as its root at boot. */
    const char *img = disk ? strrchr(disk, '/') + 1 : NULL;
    char key[4800];
    (void) snprintf(key, sizeof key,
                    "%s initramfs %lld.%09ld mem %llu smp %d accel %s cpu %s devices " CDN_QEMU_DEVICES
                    " disk %s\n",
                    vm->release, (long long) st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                    (unsigned long long) mem_mb, smp, accel, cdn_qemu_cpu_model(accel), disk ? disk : "none");
    (void) snprintf(dir, size, "%s/snap-%llum-%d-%s%s%.*s", cdn_vm_dir(), (unsigned long long) mem_mb, smp,
                    accel, img ? "-" : "", img ? (int) strcspn(img, ".") : 0, img ? img : "");
    char p[4300], have[4800] = "";
    if (how & CDN_VM_LOOK) { /* the key is written last: a template being made has none yet */
        (void) snprintf(p, sizeof p, "%s/key", dir);
        (void) cdn_read_file_at(AT_FDCWD, p, have, sizeof have);
        return strcmp(have, key) == 0 ? 0 : -EAGAIN;
    }
    if (cdn_mkdir_p(dir, 0700) < 0)
        return cdn_error_set(err, errno, "create %s: %m", dir);
    (void) snprintf(p, sizeof p, "%s/lock", dir);
    _cleanup_close_ int lock = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0 || flock(lock, LOCK_EX) < 0)
        return cdn_error_set(err, errno, "lock %s: %m", p);
    (void) snprintf(p, sizeof p, "%s/key", dir);
    (void) cdn_read_file_at(AT_FDCWD, p, have, sizeof have);
    if (strcmp(have, key) == 0)
        return 0;
    (void) unlink(p);
    int r = make_template(t, vm, accel, mem_mb, smp, disk, dir, err);
    if (r < 0)
        return r;
    _cleanup_close_ int kfd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (kfd < 0 || cdn_write_all(kfd, key, strlen(key)) < 0)
        return cdn_error_set(err, errno, "write %s: %m", p);
    return 0;
}

/* How a QEMU that stopped answering ended, for an error message ("" while it runs on). */
static const char *qemu_end(int pidfd)
{
    static char buf[64];
    siginfo_t si = {0};
    buf[0] = 0;
    if (cdn_qemu_poll_in(pidfd, 1000) == 1 && waitid(P_PIDFD, (id_t) pidfd, &si, WEXITED | WNOWAIT) == 0 &&
        si.si_pid)
        (void) snprintf(buf, sizeof buf,
                        si.si_code == CLD_EXITED ? "; QEMU exited %d" : "; QEMU killed by signal %d",
                        si.si_status);
    return buf;
}

int cdn_qemu_qmp_open(int qm, struct cdn_error *err)
{
    char reply[4096] = "";
    int r;
    if ((r = qmp(qm, NULL, reply, sizeof reply)) < 0 ||
        (r = qmp(qm, "{\"execute\":\"qmp_capabilities\"}\n", reply, sizeof reply)) < 0)
        return cdn_error_set(err, -r, "QMP: %s: %s", strerror(-r), reply);
    return 0;
}

/* Milliseconds since t0. */
static long ms_since(const struct timespec *t0)
{
    struct timespec t;
    (void) clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

int cdn_qemu_save(int qm, int out, struct cdn_error *err)
{
    /* Paused, then saved in one pass: a live save would chase a guest that dirties its RAM faster
     * than it goes out (the guest's to choose) for ever. The guest restored from the template maps
     * its RAM copy-on-write (not shared): the whole of it goes into the file, which then restores
     * on its own. No bandwidth cap (QEMU's default, 128 MiB/s, is for a network shared with other
     * guests). A minute at most (a GiB of RAM takes about one second here). */
    char reply[8192] = "";
    struct timespec t0;
    (void) clock_gettime(CLOCK_MONOTONIC, &t0);
    int r;
    bool started = false;
    if ((r = qmp(qm,
                 "{\"execute\":\"migrate-set-parameters\",\"arguments\":{\"max-bandwidth\":"
                 "1099511627776}}\n",
                 reply, sizeof reply)) < 0 ||
        (r = qmp(qm, "{\"execute\":\"stop\"}\n", reply, sizeof reply)) < 0) {
        cdn_error_set(err, -r, "pause the guest (QMP: %s): %s", strerror(-r), reply);
    } else if ((r = qmp_getfd(qm, out, "ck", reply, sizeof reply)) < 0 ||
               (r = qmp(qm, "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"fd:ck\"}}\n", reply,
                        sizeof reply)) < 0) {
        cdn_error_set(err, -r, "save the guest (QMP: %s): %s", strerror(-r), reply);
    } else {
        for (started = true;;) {
            if ((r = qmp(qm, "{\"execute\":\"query-migrate\"}\n", reply, sizeof reply)) < 0) {
                cdn_error_set(err, -r, "save the guest (QMP query-migrate: %s): %s", strerror(-r), reply);
                break;
            }
            if (strstr(reply, "\"completed\""))
                break;
            if (strstr(reply, "\"failed\"") || strstr(reply, "\"cancelled\"")) {
                r = cdn_error_set(err, EIO, "saving the guest failed: %s", reply);
                break;
            }
            if (ms_since(&t0) > 60000) {
                r = cdn_error_set(err, ETIMEDOUT, "saving the guest took more than a minute");
                break;
            }
            (void) usleep(200);
        }
    }
    /* It runs on, saved or not: a save given up on is cancelled first (else, finished later, it
     * would leave the guest paused), a descriptor QEMU did not take is closed. */
    char spare[1024];
    if (r < 0 && started) {
        (void) qmp(qm, "{\"execute\":\"migrate_cancel\"}\n", spare, sizeof spare);
        for (int i = 0; i < 500; i++) {
            if (qmp(qm, "{\"execute\":\"query-migrate\"}\n", spare, sizeof spare) < 0 ||
                (!strstr(spare, "\"active\"") && !strstr(spare, "\"cancelling\"")))
                break;
            (void) usleep(2000);
        }
    }
    if (r < 0)
        (void) qmp(qm, "{\"execute\":\"closefd\",\"arguments\":{\"fdname\":\"ck\"}}\n", spare, sizeof spare);
    int c = qmp(qm, "{\"execute\":\"cont\"}\n", spare, sizeof spare);
    if (r == 0 && c < 0)
        r = cdn_error_set(err, -c, "resume the guest after saving it (QMP: %s): %s", strerror(-c), spare);
    return r;
}

int cdn_qemu_resume_paused(int qm)
{
    /* A guest a cordond left paused (killed in the middle of a memory checkpoint). */
    char reply[4096];
    int r = qmp(qm, "{\"execute\":\"query-status\"}\n", reply, sizeof reply);
    if (r < 0 || strstr(reply, "\"running\""))
        return r;
    (void) qmp(qm, "{\"execute\":\"migrate_cancel\"}\n", reply, sizeof reply);
    return qmp(qm, "{\"execute\":\"cont\"}\n", reply, sizeof reply);
}

int cdn_qemu_restore(int qm, int pidfd, struct cdn_error *err)
{
    /* Load the state; the guest resumes by itself when it is in. */
    char reply[4096] = "";
    int r;
    if ((r = qmp(qm, NULL, reply, sizeof reply)) < 0 ||
        (r = qmp(qm, "{\"execute\":\"qmp_capabilities\"}\n", reply, sizeof reply)) < 0 ||
        (r = qmp(qm, QMP_IGNORE_SHARED, reply, sizeof reply)) < 0 ||
        (r = qmp(qm, "{\"execute\":\"migrate-incoming\",\"arguments\":{\"uri\":\"fd:4\"}}\n", reply,
                 sizeof reply)) < 0)
        return cdn_error_set(err, -r, "restore the snapshot (QMP: %s): %s%s", strerror(-r), reply,
                             qemu_end(pidfd));
    return 0;
}
