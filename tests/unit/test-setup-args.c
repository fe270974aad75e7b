/* The setup child's args as bytes (tiers/container/setup-args.c): what the host packs is what
 * cordon-setup reads back, field by field, and bytes cut short or changed read as an error with
 * nothing kept (the sanitizer build checks the frees). */
#include "tiers/container/container-internal.h"
#include "tap.h"

#include <errno.h>
#include <linux/filter.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static struct cdn_mount mounts[] = {{"/src/a", "/workspace/a", true, false, false},
                                    {"/src/b", "/data", false, true, true}};
static char *protect[] = {"/tests", "/answers", NULL};
static char *sysctls[] = {"net.ipv4.ip_forward=1", NULL};
static char *masked[] = {"/proc/kcore", NULL};
static char *opts[] = {"nosuid", "mode=755", NULL};
static struct cdn_fs_mount fs[] = {{"sysfs", "/sys", NULL, 3}, {"tmpfs", "/run", opts, 5}};

/* A spec and args with every field the packer writes set to something that is not its zero. */
struct sample {
    struct cdn_spec spec;
    struct cdn_image img;
    struct cdn_seccomp_prog prog;
    struct rlimit rl[RLIM_NLIMITS];
    struct sock_filter extra[1];
    struct cdn_cgroup cg;
    struct cdn_setup_args a;
};

static void sample_init(struct sample *x)
{
    struct cdn_spec *spec = &x->spec;
    struct cdn_image *img = &x->img;
    struct cdn_seccomp_prog *prog = &x->prog;
    struct rlimit *rl = x->rl;
    struct sock_filter *extra = x->extra;
    struct cdn_cgroup *cg = &x->cg;
    struct cdn_setup_args *a = &x->a;
    *spec = (struct cdn_spec){.hostname = "box",
                              .workdir = "/workspace",
                              .user = "1000:1000",
                              .writable_system = true,
                              .read_only_root = true,
                              .checkpoints = true,
                              .mounts = mounts,
                              .n_mounts = 2,
                              .protect = {protect, 2}};
    spec->limits.disk_mb = 512, spec->limits.ptys = 7, spec->limits.nofile = 4096;
    memset(img, 0, sizeof *img);
    strcpy(img->lower, "/var/lib/cordon/images/x");
    img->n_layers = 2;
    strcpy(img->layers[1], "sha256-abc");
    img->host = true;
    static struct sock_filter insns[5] = {{0x06, 0, 0, 0x7fff0000}};
    *prog = (struct cdn_seccomp_prog){.len = {3, 2}, .insns = insns};
    for (int i = 0; i < RLIM_NLIMITS; i++)
        rl[i] = (struct rlimit){(rlim_t) i, (rlim_t) i + 1};
    extra[0] = (struct sock_filter){0x06, 0, 0, 0x00050001};
    cdn_cgroup_init(cg, &cdn_cgroup_v1_ops, "slot-42");
    *a = (struct cdn_setup_args){.spec = spec,
                                 .image = img,
                                 .seccomp = prog,
                                 .scratch = "/run/cordon/mnt",
                                 .go_fd = 20,
                                 .err_fd = 21,
                                 .agent_fd = 22,
                                 .init_fd = 23,
                                 .stdio_fd = -1,
                                 .persistent = true,
                                 .listen_fd = 24,
                                 .slot_fd = 25,
                                 .fanotify_fd = -1,
                                 .cgroup = cg,
                                 .netns_given = true,
                                 .resolver_ip = 0xc6120001,
                                 .writable_fd = 26,
                                 .root_in_place = true,
                                 .rlimits = rl,
                                 .sysctls = sysctls,
                                 .masked_paths = masked,
                                 .readonly_paths = NULL,
                                 .fs_mounts = fs,
                                 .n_fs_mounts = 2,
                                 .seccomp_extra = extra,
                                 .seccomp_extra_len = 1,
                                 .restored = true,
                                 .uid_base = 0x40010000,
                                 .into_cgroup_fd = -1,
                                 .netns_fd = 27,
                                 .sigmask = 0x4002};
}

TEST(round_trip)
{
    static struct sample x;
    sample_init(&x);
    const struct cdn_image img = x.img;
    const struct cdn_seccomp_prog prog = x.prog;
    void *buf = NULL;
    size_t len = 0;
    CHECK_EQ_INT(cdn_setup_args_pack(&x.a, &buf, &len), 0);
    static struct cdn_setup_unpacked u;
    CHECK_EQ_INT(cdn_setup_args_unpack(buf, len, &u), 0);
    const struct cdn_setup_args *b = &u.args;
    const struct cdn_spec *s = b->spec;
    CHECK_STREQ(s->hostname, "box");
    CHECK_STREQ(s->workdir, "/workspace");
    CHECK_STREQ(s->user, "1000:1000");
    CHECK(s->writable_system && s->read_only_root && s->checkpoints);
    CHECK(s->limits.disk_mb == 512 && s->limits.ptys == 7 && s->limits.nofile == 4096);
    CHECK_EQ_INT(s->n_mounts, 2);
    CHECK_STREQ(s->mounts[1].source, "/src/b");
    CHECK_STREQ(s->mounts[0].target, "/workspace/a");
    CHECK(s->mounts[0].readonly && !s->mounts[0].nonrecursive && !s->mounts[0].noexec);
    CHECK(!s->mounts[1].readonly && s->mounts[1].nonrecursive && s->mounts[1].noexec);
    CHECK(s->protect.n == 2 && !strcmp(s->protect.v[1], "/answers") && !s->protect.v[2]);
    CHECK(memcmp(b->image, &img, sizeof img) == 0);
    CHECK(u.seccomp.len[0] == 3 && u.seccomp.len[1] == 2);
    CHECK(memcmp(u.seccomp.insns, prog.insns, 5 * sizeof(struct sock_filter)) == 0);
    CHECK_STREQ(b->scratch, "/run/cordon/mnt");
    CHECK(b->persistent && b->netns_given && b->root_in_place && b->restored);
    CHECK(b->resolver_ip == 0xc6120001 && b->uid_base == 0x40010000 && b->sigmask == 0x4002);
    /* fds: the request carries those the host had (0 here: a place to fill), not the others */
    CHECK(b->agent_fd == 0 && b->init_fd == 0 && b->err_fd == 0 && b->go_fd == 0);
    CHECK(b->listen_fd == 0 && b->slot_fd == 0 && b->writable_fd == 0 && b->netns_fd == 0);
    CHECK(b->stdio_fd < 0 && b->fanotify_fd < 0 && b->into_cgroup_fd < 0);
    CHECK(b->cgroup && b->cgroup->ops == &cdn_cgroup_v1_ops && !strcmp(b->cgroup->name, "slot-42"));
    CHECK(memcmp(b->rlimits, x.rl, sizeof x.rl) == 0);
    CHECK(!strcmp(b->sysctls[0], "net.ipv4.ip_forward=1") && !b->sysctls[1]);
    CHECK(!strcmp(b->masked_paths[0], "/proc/kcore") && !b->readonly_paths);
    CHECK_EQ_INT(b->n_fs_mounts, 2);
    CHECK(!strcmp(b->fs_mounts[1].type, "tmpfs") && !strcmp(b->fs_mounts[1].destination, "/run"));
    CHECK(!b->fs_mounts[0].options && !strcmp(b->fs_mounts[1].options[1], "mode=755"));
    CHECK(b->fs_mounts[0].index == 3 && b->fs_mounts[1].index == 5);
    CHECK(b->seccomp_extra_len == 1 && memcmp(b->seccomp_extra, x.extra, sizeof x.extra) == 0);
    cdn_setup_args_free(&u);
    free(buf);
}

TEST(fds_in_request_order)
{
    struct cdn_setup_args a = {0};
    int *fds[CDN_SETUP_FDS];
    cdn_setup_args_fds(&a, fds);
    CHECK(fds[0] == &a.agent_fd && fds[3] == &a.go_fd && fds[10] == &a.into_cgroup_fd);
}

TEST(signal_masks_round_trip)
{
    sigset_t set, back;
    sigemptyset(&set);
    (void) sigaddset(&set, SIGCHLD);
    (void) sigaddset(&set, SIGTERM);
    (void) sigaddset(&set, SIGRTMIN + 1);
    uint64_t mask = cdn_sigset_to_mask(&set);
    CHECK(mask == ((1ULL << (SIGCHLD - 1)) | (1ULL << (SIGTERM - 1)) | (1ULL << (SIGRTMIN + 1 - 1))));
    cdn_sigset_from_mask(mask, &back);
    for (int sig = 1; sig < NSIG && sig <= 64; sig++)
        CHECK(sigismember(&back, sig) == sigismember(&set, sig));
}

/* Every cut and every changed byte: an error or args, never a crash, and nothing left allocated. */
TEST(damaged_bytes_are_refused)
{
    static struct sample x;
    sample_init(&x);
    x.a.cgroup = NULL; /* the v2 case: no cgroup to join */
    uint8_t *buf = NULL;
    size_t len = 0;
    CHECK_EQ_INT(cdn_setup_args_pack(&x.a, (void **) &buf, &len), 0);
    static struct cdn_setup_unpacked u;
    CHECK_EQ_INT(cdn_setup_args_unpack(buf, len, &u), 0);
    CHECK(u.args.cgroup == NULL);
    cdn_setup_args_free(&u);
    int refused = 0;
    for (size_t cut = 0; cut < len; cut += 7)
        refused += cdn_setup_args_unpack(buf, cut, &u) == -EINVAL;
    CHECK_EQ_INT(refused, (int) ((len + 6) / 7));
    for (size_t i = 0; i < len; i += 3) {
        buf[i] ^= 0xff;
        if (cdn_setup_args_unpack(buf, len, &u) == 0)
            cdn_setup_args_free(&u);
        buf[i] ^= 0xff;
    }
    free(buf);
}
