/* cordond: the host daemon. Configuration, the loop, signals; dispatch only.
 *
 * Runs as root on the host (the container tier maps uid ranges and makes
 * cgroups). Listens on a unix socket (mode 0600) and, when asked, on TCP with
 * a bearer token. SIGTERM/SIGINT stop it: every sandbox is ended first. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "oci/resolve.h"
#include "confine/slot.h"
#include "core/paths.h"
#include "api.h"
#include "record.h"
#include "e2b.h"
#include "images.h"
#include "shared/fd-util.h"
#include "net/audit.h"
#include "shared/parse-util.h"
#include "tiers/tier.h"

#ifndef CDN_SYSCONFDIR
#define CDN_SYSCONFDIR "/usr/local/etc"
#endif
#define DEFAULT_CONFIG CDN_SYSCONFDIR "/cordon/cordond.conf"

struct daemon *cdn_daemon;
static struct daemon the_daemon;

/* Why the last option was refused, for its error message. */
static char option_why[160];

static int refuse(const char *why)
{
    (void) snprintf(option_why, sizeof option_why, "%s", why);
    return -EINVAL;
}

static int set_string(char *dst, size_t size, const char *v)
{
    if ((size_t) snprintf(dst, size, "%s", v) < size)
        return 0;
    (void) snprintf(option_why, sizeof option_why, "longer than %zu bytes", size - 1);
    return -ENAMETOOLONG;
}

/* A file or directory: absolute, as the configuration file's are (the command line makes a
 * relative one absolute first: parse_args). */
static int set_path(char *dst, size_t size, const char *v)
{
    return v[0] == '/' ? set_string(dst, size, v) : refuse("must be an absolute path");
}

/* A count from min to max. */
static int set_count(unsigned *dst, const char *v, unsigned min, unsigned max)
{
    uint64_t n;
    if (cdn_parse_u64(v, &n) < 0 || n < min || n > max) {
        (void) snprintf(option_why, sizeof option_why, "must be a whole number from %u to %u", min, max);
        return -EINVAL;
    }
    *dst = (unsigned) n;
    return 0;
}

static int set_size(uint64_t *dst, const char *v)
{
    return cdn_parse_size(v, dst) < 0 || *dst == 0
               ? refuse("must be a size above 0 (bytes, or with K, M, G, T)")
               : 0;
}

/* A comma-separated list; each use of the option adds to it. Items are host[:port] or paths:
 * no blanks or control bytes. */
static int add_list(char *dst, size_t size, const char *v)
{
    if (!v[0])
        return refuse("must not be empty");
    for (const char *p = v; *p; p++)
        if ((unsigned char) *p <= ' ' || *p == 0x7f)
            return refuse("must hold no blank or control character");
    size_t n = strlen(dst);
    if ((size_t) snprintf(dst + n, size - n, "%s%s", n ? "," : "", v) < size - n)
        return 0;
    (void) snprintf(option_why, sizeof option_why, "the list is longer than %zu bytes", size - 1);
    return -ENAMETOOLONG;
}

/* The image options (images.c): registry lists and the store's size cap. */
static int set_image_option(struct daemon_config *c, const char *name, const char *v)
{
    if (strcmp(name, "insecure-registries") == 0 || strcmp(name, "insecure_registries") == 0)
        return add_list(c->insecure_registries, sizeof c->insecure_registries, v);
    if (strcmp(name, "registry-ca-files") == 0 || strcmp(name, "registry_ca_files") == 0)
        return v[0] == '/' ? add_list(c->registry_ca_files, sizeof c->registry_ca_files, v)
                           : refuse("must be an absolute path");
    if (strcmp(name, "registry-mirrors") == 0 || strcmp(name, "registry_mirrors") == 0)
        return add_list(c->registry_mirrors, sizeof c->registry_mirrors, v);
    if (strcmp(name, "image-store-max") == 0 || strcmp(name, "image_store_max") == 0)
        return set_size(&c->image_store_max, v);
    return -ENOENT;
}

/* One option, from the command line (--name value) or the config file (name = value). */
static int set_option(struct daemon_config *c, const char *name, const char *v)
{
    if (strcmp(name, "socket") == 0)
        return strlen(v) >= sizeof((struct sockaddr_un *) 0)->sun_path
                   ? refuse("longer than a unix socket's path may be (107 bytes)")
                   : set_path(c->socket_path, sizeof c->socket_path, v);
    if (strcmp(name, "listen") == 0)
        return set_string(c->listen, sizeof c->listen, v);
    if (strcmp(name, "token-file") == 0 || strcmp(name, "token_file") == 0)
        return set_string(c->token_file, sizeof c->token_file, v);
    if (strcmp(name, "state-dir") == 0 || strcmp(name, "state_dir") == 0)
        return set_path(c->state_dir, sizeof c->state_dir, v);
    if (strcmp(name, "sandbox-dir") == 0 || strcmp(name, "sandbox_dir") == 0)
        return set_path(c->sandbox_dir, sizeof c->sandbox_dir, v);
    if (strcmp(name, "stop-sandboxes") == 0 || strcmp(name, "stop_sandboxes") == 0) {
        if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0)
            return refuse("must be true or false");
        c->stop_sandboxes = strcmp(v, "true") == 0;
        return 0;
    }
    if (strcmp(name, "pool") == 0) {
        if (c->n_pools >= sizeof c->pools / sizeof c->pools[0]) {
            (void) snprintf(option_why, sizeof option_why, "at most %zu pools", ELEMENTSOF(c->pools));
            return -E2BIG;
        }
        return set_string(c->pools[c->n_pools++], sizeof c->pools[0], v);
    }
    if (strcmp(name, "e2b-template") == 0 || strcmp(name, "e2b_template") == 0) {
        if (c->n_e2b_templates >= ELEMENTSOF(c->e2b_templates)) {
            (void) snprintf(option_why, sizeof option_why, "at most %zu templates",
                            ELEMENTSOF(c->e2b_templates));
            return -E2BIG;
        }
        return set_string(c->e2b_templates[c->n_e2b_templates++], sizeof c->e2b_templates[0], v);
    }
    if (strcmp(name, "net-pool") == 0 || strcmp(name, "net_pool") == 0)
        return set_count(&c->net_pool, v, 0, 4096);
    if (strcmp(name, "writable-stock") == 0 || strcmp(name, "writable_stock") == 0)
        return set_count(&c->writable_stock, v, 0, 64);
    if (strcmp(name, "checkpoint-store-size") == 0 || strcmp(name, "checkpoint_store_size") == 0)
        return set_size(&c->checkpoint_store_bytes, v);
    if (strcmp(name, "writable-pool") == 0 || strcmp(name, "writable_pool") == 0)
        return strcmp(v, "auto") == 0    ? (c->writable_pool = CDN_POOL_AUTO, 0)
               : strcmp(v, "btrfs") == 0 ? (c->writable_pool = CDN_POOL_BTRFS, 0)
               : strcmp(v, "off") == 0   ? (c->writable_pool = CDN_POOL_OFF, 0)
                                         : refuse("must be auto, btrfs or off");
    if (strcmp(name, "writable-pool-size") == 0 || strcmp(name, "writable_pool_size") == 0)
        return set_size(&c->writable_pool_bytes, v);
    if (strcmp(name, "every-step-keep") == 0 || strcmp(name, "every_step_keep") == 0)
        return set_count(&c->every_step_keep, v, 0, 1000000);
    if (strcmp(name, "bind-allow") == 0 || strcmp(name, "bind_allow") == 0) {
        if (c->n_bind_allow >= ELEMENTSOF(c->bind_allow)) {
            (void) snprintf(option_why, sizeof option_why, "at most %zu directories",
                            ELEMENTSOF(c->bind_allow));
            return -E2BIG;
        }
        int r = set_path(c->bind_allow[c->n_bind_allow], sizeof c->bind_allow[0], v);
        c->n_bind_allow += r == 0;
        return r;
    }
    if (strcmp(name, "monitor-rules") == 0 || strcmp(name, "monitor_rules") == 0)
        return set_path(c->monitor_rules, sizeof c->monitor_rules, v);
    if (strcmp(name, "audit-rate") == 0 || strcmp(name, "audit_rate") == 0)
        return set_count(&c->audit_rate, v, 0, 1000000);
    if (strcmp(name, "audit-rotate") == 0 || strcmp(name, "audit_rotate") == 0)
        return set_size(&c->audit_rotate, v);
    if (strcmp(name, "dns-budget") == 0 || strcmp(name, "dns_budget") == 0) {
        struct cdn_error err = {0};
        if (cdn_dns_budget_parse(v, &c->dns_budget, &err) < 0) {
            (void) snprintf(option_why, sizeof option_why, "%s", err.msg);
            return -EINVAL;
        }
        return 0;
    }
    if (strcmp(name, "dns-upstream") == 0 || strcmp(name, "dns_upstream") == 0)
        return set_string(c->dns_upstream, sizeof c->dns_upstream, v);
    if (strcmp(name, "max-body") == 0 || strcmp(name, "max_body") == 0)
        return set_size(&c->max_body_bytes, v);
    if (strcmp(name, "max-output") == 0 || strcmp(name, "max_output") == 0)
        return set_size(&c->max_output_bytes, v);
    if (strcmp(name, "agent-timeout") == 0 || strcmp(name, "agent_timeout") == 0)
        return set_count(&c->agent_timeout_s, v, 1, 86400);
    if (strcmp(name, "auth-timeout") == 0 || strcmp(name, "auth_timeout") == 0)
        return set_count(&c->auth_timeout_s, v, 1, 3600);
    if (strcmp(name, "max-unauthenticated") == 0 || strcmp(name, "max_unauthenticated") == 0)
        return set_count(&c->max_unauthenticated, v, 1, 65536);
    if (strcmp(name, "max-connections") == 0 || strcmp(name, "max_connections") == 0)
        return set_count(&c->max_connections, v, 1, 1000000);
    if (strcmp(name, "max-read") == 0 || strcmp(name, "max_read") == 0)
        return set_size(&c->max_read_bytes, v);
    if (strcmp(name, "max-sandboxes") == 0 || strcmp(name, "max_sandboxes") == 0)
        return set_count(&c->max_sandboxes, v, 1, 1000000);
    if (strcmp(name, "retention") == 0)
        return set_count(&c->retention_s, v, 0, 604800);
    return set_image_option(c, name, v);
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        *--e = 0;
    return s;
}

static int load_config(struct daemon_config *c, const char *path, bool required)
{
    _cleanup_fclose_ FILE *f = fopen(path, "re");
    if (!f) {
        if (!required && errno == ENOENT)
            return 0;
        fprintf(stderr, "cordond: %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[1024];
    int lineno = 0, ret = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *s = trim(line);
        if (!s[0] || s[0] == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            fprintf(stderr, "cordond: %s:%d: expected 'name = value'\n", path, lineno);
            ret = -1;
            continue;
        }
        *eq = 0;
        char *name = trim(s), *value = trim(eq + 1);
        option_why[0] = 0;
        int r = set_option(c, name, value);
        if (r < 0) {
            fprintf(stderr, "cordond: %s:%d: %s '%s': %s\n", path, lineno, name, value,
                    r == -ENOENT    ? "unknown option"
                    : option_why[0] ? option_why
                                    : "invalid value");
            ret = -1;
        }
    }
    return ret;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: cordond [--config FILE] [--socket PATH] [--listen HOST:PORT --token-file F]\n"
        "               [--auth-timeout SECONDS] [--max-unauthenticated N] [--max-connections N]\n"
        "               [--state-dir DIR] [--sandbox-dir DIR] [--stop-sandboxes true|false]\n"
        "               [--max-body SIZE] [--max-output SIZE] [--max-read SIZE] [--max-sandboxes N]\n"
        "               [--retention SECONDS]\n"
        "               [--pool SIZE[:SPECFILE]]… [--e2b-template NAME:SPECFILE]…\n"
        "               [--dns-upstream IP[:PORT]] [--net-pool N] [--audit-rotate SIZE] [--audit-rate N]\n"
        "               [--monitor-rules FILE] [--agent-timeout SECONDS] [--bind-allow DIR[:ro]]…\n"
        "               [--dns-budget off|names=N,bytes=N,window=T,action=A]\n"
        "               [--insecure-registries H[:P],…] [--registry-ca-files F,…] [--registry-mirrors H,…]\n"
        "               [--image-store-max SIZE]\n"
        "Defaults and the config file format: docs/cordond.md (config: %s)\n",
        DEFAULT_CONFIG);
}

/* The options that name one file or directory: on the command line a relative one is taken from
 * the working directory (the configuration file wants them absolute). */
static bool is_path_option(const char *name)
{
    static const char *const paths[] = {"socket",     "state-dir",     "sandbox-dir",  "bind-allow",
                                        "token-file", "monitor-rules", "state_dir",    "sandbox_dir",
                                        "bind_allow", "token_file",    "monitor_rules"};
    for (size_t i = 0; i < ELEMENTSOF(paths); i++)
        if (strcmp(name, paths[i]) == 0)
            return true;
    return false;
}

static int parse_args(int argc, char **argv, struct daemon_config *c)
{
    const char *config = NULL;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            config = argv[++i];
    if (load_config(c, config ? config : DEFAULT_CONFIG, config != NULL) < 0)
        return -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--config") == 0) {
            i++;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || i + 1 >= argc) {
            fprintf(stderr, "cordond: unexpected argument '%s'\n", a);
            usage(stderr);
            return -1;
        }
        const char *v = argv[++i];
        char abs[PATH_MAX];
        if (is_path_option(a + 2) && v[0] && v[0] != '/') { /* as the shell's user meant it: from here */
            if (!getcwd(abs, sizeof abs) || (size_t) snprintf(abs + strlen(abs), sizeof abs - strlen(abs),
                                                              "/%s", v) >= sizeof abs - strlen(abs)) {
                fprintf(stderr, "cordond: %s '%s': cannot make it absolute: %s\n", a, v, strerror(errno));
                return -1;
            }
            v = abs;
        }
        option_why[0] = 0;
        int r = set_option(c, a + 2, v);
        if (r < 0) {
            fprintf(stderr, "cordond: %s '%s': %s\n", a, argv[i],
                    r == -ENOENT    ? "unknown option"
                    : option_why[0] ? option_why
                                    : "invalid value");
            return -1;
        }
    }
    if (c->listen[0] && !c->token_file[0]) {
        fprintf(stderr, "cordond: --listen needs --token-file: TCP clients must present a bearer token\n");
        return -1;
    }
    return 0;
}

static int read_token(struct daemon *d)
{
    _cleanup_fclose_ FILE *f = fopen(d->cfg.token_file, "re");
    if (!f || !fgets(d->token, sizeof d->token, f)) {
        fprintf(stderr, "cordond: token file %s: %s\n", d->cfg.token_file, f ? "empty" : strerror(errno));
        return -1;
    }
    char *t = trim(d->token);
    memmove(d->token, t, strlen(t) + 1);
    if (strlen(d->token) < 16) {
        fprintf(stderr, "cordond: token in %s is shorter than 16 characters\n", d->cfg.token_file);
        return -1;
    }
    return 0;
}

/* Refuse to start over a live daemon's socket. */
static int socket_in_use(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    (void) snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    return connect(fd, (struct sockaddr *) &sa, sizeof sa) == 0;
}

static void on_stop_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what, (void) arg;
    fprintf(stderr, "cordond: sandboxes still ending after 20 s; the next cordond cleans them up\n");
    event_base_loopbreak(cdn_daemon->base);
}

/* Stop: our side of every sandbox goes; the sandboxes stay for the next
 * cordond unless stop_sandboxes is set, and then we wait (20 s at most) for
 * their teardown, so that nothing is left when we are gone. */
static void on_stop(evutil_socket_t sig, short what, void *arg)
{
    (void) what, (void) arg;
    if (cdn_daemon->stopping)
        return;
    fprintf(stderr, "cordond: signal %d, stopping\n", (int) sig);
    cdn_daemon->stopping = true;
    cdn_images_stop(); /* creates waiting for a pull are told first */
    cdn_box_release_all();
    cdn_pool_drain();
    if (LIST_EMPTY(&cdn_daemon->dying)) {
        event_base_loopbreak(cdn_daemon->base);
        return;
    }
    struct timeval tv = {.tv_sec = 20};
    (void) event_base_once(cdn_daemon->base, -1, EV_TIMEOUT, on_stop_timeout, NULL, &tv);
}

/* Every child is a sandbox's init or reaper; reap them all. */
static void on_child(evutil_socket_t sig, short what, void *arg)
{
    (void) sig, (void) what, (void) arg;
    while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
        ;
}

/* How many fds this process has open. */
static unsigned open_fds(void)
{
    unsigned n = 0;
    DIR *dir = opendir("/proc/self/fd");
    for (struct dirent *e; dir && (e = readdir(dir));)
        n += e->d_name[0] != '.';
    if (dir)
        (void) closedir(dir);
    return n ? n - 1 : 0; /* not the directory's own */
}

/* cordond's own fds: RLIMIT_NOFILE raised to what max_sandboxes needs (it is root: up to
 * fs.nr_open), and how much of what it got the sandboxes may hold (d->fd_budget; a create past it is
 * refused, box.c), so that no fd runs out under a sandbox, a client or a pull. */
static void fd_budget(struct daemon *d)
{
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) < 0) {
        d->fd_budget = UINT64_MAX;
        return;
    }
    rlim_t want = (rlim_t) d->cfg.max_sandboxes * CDN_FDS_TYPICAL + CDN_FDS_RESERVE;
    char buf[32] = "";
    int fd = open("/proc/sys/fs/nr_open", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        (void) close(fd);
    rlim_t nr_open = n > 0 ? (rlim_t) strtoull(buf, NULL, 10) : 0;
    if (nr_open && want > nr_open)
        want = nr_open;
    if (want > nofile.rlim_max) { /* a raise of the hard limit: CAP_SYS_RESOURCE */
        struct rlimit more = {want, want};
        if (setrlimit(RLIMIT_NOFILE, &more) == 0)
            nofile = more;
    }
    if (nofile.rlim_cur < want && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = want < nofile.rlim_max ? want : nofile.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &nofile) < 0)
            (void) getrlimit(RLIMIT_NOFILE, &nofile);
    }
    /* What clients, exec pipes and pulls take beside the sandboxes': a sixteenth, 64 to 4,096 fds;
     * and what cordond holds for itself: what is open now, its stocks of network namespaces and
     * writable layers (of four sizes at most: writable.c STOCK_SIZES), the files of its holds of
     * slots (confine/slot.h), cordon-setup's socket, and its sockets, log and event loop. */
    rlim_t reserve = nofile.rlim_cur / 16 < 64                ? 64
                     : nofile.rlim_cur / 16 > CDN_FDS_RESERVE ? CDN_FDS_RESERVE
                                                              : nofile.rlim_cur / 16;
    const unsigned held =
        d->cfg.max_sandboxes < CDN_SLOT_HELD_FILES ? d->cfg.max_sandboxes : CDN_SLOT_HELD_FILES;
    d->fd_standing = open_fds() + 2 * d->cfg.net_pool + 4 * d->cfg.writable_stock + held + 24;
    d->fd_limit = (uint64_t) nofile.rlim_cur;
    d->fd_budget = nofile.rlim_cur > reserve + d->fd_standing
                       ? (uint64_t) (nofile.rlim_cur - reserve - d->fd_standing)
                       : 0;
    uint64_t fit = d->fd_budget / CDN_FDS_TYPICAL;
    if (fit < d->cfg.max_sandboxes)
        fprintf(stderr,
                "cordond: warning: RLIMIT_NOFILE %llu (fs.nr_open %llu; raising it needs CAP_SYS_RESOURCE) "
                "serves about %llu sandboxes of %d fds, fewer than max_sandboxes %u: creates past it are "
                "refused (429)\n",
                (unsigned long long) nofile.rlim_cur, (unsigned long long) nr_open, (unsigned long long) fit,
                CDN_FDS_TYPICAL, d->cfg.max_sandboxes);
}

/* The bind sources the API accepts (core/bind-policy.h): the configured allowlist, and besides
 * the core's refusals what is this daemon's own — its records and sockets, its token. */
static int bind_policy_setup(struct daemon *d)
{
    struct cdn_bind_policy *p = &d->bind_policy;
    const char *own[] = {d->cfg.state_dir, d->cfg.sandbox_dir, d->cfg.socket_path, d->cfg.token_file};
    int r = cdn_bind_policy_init(p);
    for (size_t i = 0; r >= 0 && i < ELEMENTSOF(own); i++)
        if (own[i][0])
            r = cdn_bind_policy_deny(p, own[i]);
    if (r < 0) {
        fprintf(stderr, "cordond: bind sources: %s\n", strerror(-r));
        return -1;
    }
    for (unsigned i = 0; i < d->cfg.n_bind_allow; i++) {
        struct cdn_error err = {0};
        if (cdn_bind_policy_allow(p, d->cfg.bind_allow[i], &err) < 0) {
            fprintf(stderr, "cordond: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

/* Each sandbox with protected paths holds a fanotify group of its own
 * (box-fanotify.c); the kernel's default of 128 groups per user would cap them. */
static void raise_fanotify_groups(void)
{
    const char *p = "/proc/sys/fs/fanotify/max_user_groups";
    char buf[32];
    if (cdn_read_file_at(AT_FDCWD, p, buf, sizeof buf) > 0 && atol(buf) < 65536 &&
        cdn_write_file_at(AT_FDCWD, p, "65536") == 0)
        fprintf(stderr, "cordond: fs.fanotify.max_user_groups raised from %ld to 65536\n", atol(buf));
}

/* The container tier's writable layers made ahead (docs/disk.md), so that a create takes a ready one
 * and pays no loop device and no mount. One at a time, at the loop's lowest priority, and only once
 * creates have paused for STOCK_QUIET: a fill (~2 ms of this thread) run while a create waits for its
 * sandbox's setup would delay that create by as much. */
#define STOCK_QUIET_US 25000
#define STOCK_NEXT_US  2000
static struct event *ev_stock;
static bool stock_failing;

static void stock_arm(long us)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = us};
    if (ev_stock)
        (void) evtimer_add(ev_stock, &tv); /* re-arming moves it later: creates keep it waiting */
}

static void stock_fill(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what, (void) arg;
    if (cdn_daemon->stopping)
        return;
    struct cdn_error err = {0};
    int r = cdn_writable_stock_fill(&err);
    if (r < 0 && !stock_failing)
        fprintf(stderr, "cordond: a writable layer made ahead: %s (creates make their own)\n", err.msg);
    stock_failing = r < 0;
    /* After a failure too: the size that failed is skipped until a create asks for it again
     * (writable.c), the others go on filling. */
    if (r != 0)
        stock_arm(STOCK_NEXT_US);
}

static struct event *ev_makers[CDN_LAYER_MAKERS]; /* the layer makers' answers (writable.c), while they run */
static unsigned n_makers;

static void stock_wanted(void)
{
    /* With the maker a fill only sends a request: asked at once, not by the timer, which runs at the
     * loop's lowest priority and so not at all while requests keep coming. */
    if (n_makers && !cdn_daemon->stopping)
        stock_fill(-1, 0, NULL);
    else
        stock_arm(STOCK_QUIET_US);
}

static void maker_answer(evutil_socket_t fd, short what, void *arg)
{
    (void) what;
    struct event **ev = arg;
    struct cdn_error err = {0};
    int r = cdn_writable_maker_answer(fd, &err);
    if (r == -EPIPE) {
        fprintf(stderr, "cordond: %s\n", err.msg);
        event_free(*ev);
        *ev = NULL;
        n_makers--;
    } else if (r < 0 && !stock_failing) {
        fprintf(stderr, "cordond: a writable layer made ahead: %s (creates make their own)\n", err.msg);
    }
    stock_failing = r < 0 && r != -EPIPE;
    if (!cdn_daemon->stopping)
        stock_fill(-1, 0, NULL); /* the next one, if the stock wants one */
}

/* "<socket>.layers": `cordon run` on this host takes a layer of the stock (writable.c). */
static char layers_path[sizeof(((struct sockaddr_un *) 0)->sun_path)];
static struct event *ev_layers;
static int layers_fd = -EBADF;

static void layers_request(evutil_socket_t fd, short what, void *arg)
{
    /* `cordon run` is not one of this loop's creates: no need to wait for them to pause, and one
     * run after another would otherwise find the stock empty. */
    if ((what & EV_READ) && cdn_writable_stock_serve(fd))
        stock_arm(STOCK_NEXT_US);
    event_free(arg);
    (void) close(fd);
}

static void layers_accept(evutil_socket_t fd, short what, void *arg)
{
    (void) what, (void) arg;
    int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0)
        return;
    struct event *ev = event_new(cdn_daemon->base, c, EV_READ, layers_request, event_self_cbarg());
    struct timeval tv = {.tv_sec = 1};
    if (!ev || event_add(ev, &tv) < 0) {
        if (ev)
            event_free(ev);
        (void) close(c);
    }
}

static void layers_listen(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if ((size_t) snprintf(layers_path, sizeof layers_path, "%s.layers", cdn_daemon->cfg.socket_path) >=
        sizeof layers_path) {
        layers_path[0] = '\0'; /* `cordon run` makes its own layers */
        return;
    }
    memcpy(sa.sun_path, layers_path, sizeof sa.sun_path);
    (void) unlink(layers_path);
    _cleanup_close_ int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    mode_t old = umask(0177);
    int r = l < 0 ? -1 : bind(l, (struct sockaddr *) &sa, sizeof sa);
    (void) umask(old);
    if (r < 0 || listen(l, 64) < 0 ||
        !(ev_layers = event_new(cdn_daemon->base, l, EV_READ | EV_PERSIST, layers_accept, NULL)) ||
        event_add(ev_layers, NULL) < 0) {
        fprintf(stderr, "cordond: %s: %m (cordon run makes its own writable layers)\n", layers_path);
        layers_path[0] = '\0';
        return;
    }
    layers_fd = TAKE_FD(l);
}

static void layers_stop(void)
{
    if (ev_layers)
        event_free(ev_layers);
    ev_layers = NULL;
    layers_fd = safe_close(layers_fd);
    if (layers_path[0])
        (void) unlink(layers_path);
}

static void stock_start(void)
{
    struct cdn_spec def;
    if (!cdn_daemon->cfg.writable_stock || cdn_spec_init(&def) < 0) {
        cdn_writable_stock_enable(0, 0, NULL); /* none, and never another cordond's */
        return;
    }
    layers_listen();
    ev_stock = evtimer_new(cdn_daemon->base, stock_fill, NULL);
    if (!ev_stock)
        return;
    (void) event_priority_set(ev_stock, 2);
    cdn_writable_stock_enable(cdn_daemon->cfg.writable_stock, def.limits.disk_mb, stock_wanted);
    cdn_spec_free(&def);
    int fds[CDN_LAYER_MAKERS];
    size_t n = cdn_writable_maker_start(fds);
    if (!n)
        fprintf(stderr, "cordond: no layer maker could start: the stock's layers are made in cordond\n");
    for (size_t i = 0; i < n; i++) {
        struct event **ev = &ev_makers[n_makers];
        if ((*ev = event_new(cdn_daemon->base, fds[i], EV_READ | EV_PERSIST, maker_answer, ev)) &&
            event_add(*ev, NULL) == 0)
            n_makers++;
        else if (*ev) {
            event_free(*ev);
            *ev = NULL;
        }
    }
    stock_arm(0);
}

/* writable_pool: the pool, before adoption (the adopted sandboxes' layers may be there). Where auto
 * can make none (no btrfs, no simple quotas, no btrfs-progs) the layers are ext4 images of their own.
 * A pool that is there already and cannot be opened stops the start in auto too: sandboxes about to be
 * adopted may have their layers in it, and without it their disk would be the pool's statfs, with no
 * disk violation counted (docs/disk.md). */
static int open_layer_pool(void)
{
    struct cdn_error err = {0};
    enum cdn_pool_mode mode = cdn_daemon->cfg.writable_pool;
    char path[4200];
    (void) snprintf(path, sizeof path, "%s/" CDN_LAYER_POOL_FILE, cdn_state_dir());
    const bool had = access(path, F_OK) == 0;
    if (mode == CDN_POOL_OFF ||
        cdn_layer_pool_open(cdn_daemon->cfg.writable_pool_bytes, cdn_daemon->cfg.sandbox_dir, &err) == 0)
        return 0;
    if (mode == CDN_POOL_AUTO && !had) {
        (void) unlink(path); /* made by this try (a kernel without simple quotas), and of no use */
        fprintf(stderr,
                "cordond: writable_pool auto: no layer pool (%s): each writable layer is an ext4 "
                "image of its own\n",
                err.msg);
        return 0;
    }
    fprintf(stderr, "cordond: writable_pool %s: %s\n", mode == CDN_POOL_AUTO ? "auto" : "btrfs", err.msg);
    return -1;
}

/* A sandbox this cordond has, or whose record is still there (one adoption could not take in: its
 * sandbox may run on, and its layer with it). */
static bool box_live(const char *id)
{
    char path[512];
    cdn_record_path(id, "json", path, sizeof path);
    return cdn_box_find(id) != NULL || access(path, F_OK) == 0;
}

int main(int argc, char **argv)
{
    cdn_oci_install_resolver(); /* OCI references as images (oci/resolve.h) */
    struct daemon *d = cdn_daemon = &the_daemon;
    d->listener = &cdn_api_box_listener; /* before any box exists (adoption makes events) */
    d->cfg = (struct daemon_config){
        .max_body_bytes = 256ULL << 20,
        .max_output_bytes = 16ULL << 20,
        .max_read_bytes = 256ULL << 20,
        .max_sandboxes = 4096,
        .retention_s = 600,
        .agent_timeout_s = 60,
        .auth_timeout_s = 10,
        .max_unauthenticated = 64,
        .max_connections = 1024,
        .net_pool = 4,
        .writable_stock = 4,
        .every_step_keep = 32,
        .audit_rotate = 64ULL << 20,
        .audit_rate = CDN_AUDIT_RATE,
        .dns_budget = CDN_DNS_BUDGET_DEFAULT,
    };
    (void) snprintf(d->cfg.socket_path, sizeof d->cfg.socket_path, "%s/cordond.sock", cdn_run_dir());
    (void) snprintf(d->cfg.state_dir, sizeof d->cfg.state_dir, "%s", cdn_state_dir());
    (void) snprintf(d->cfg.sandbox_dir, sizeof d->cfg.sandbox_dir, "%s/sandboxes", cdn_run_dir());
    if (parse_args(argc, argv, &d->cfg) < 0)
        return 2;
    if (geteuid() != 0) {
        fprintf(stderr, "cordond: must run as root (it maps uid ranges and makes cgroups)\n");
        return 1;
    }
    if (d->cfg.listen[0] && read_token(d) < 0)
        return 1;
    (void) setenv("CORDON_STATE_DIR", d->cfg.state_dir, 1); /* the core reads it */
    char closed[160];
    unsigned mode;
    if (cdn_path_unsearchable(d->cfg.state_dir, closed, sizeof closed, &mode))
        fprintf(stderr,
                "cordond: warning: the container tier's sandboxes cannot reach the state directory %s: %s "
                "(mode %04o) is closed to others; chmod o+x %s, or pick a --state-dir under directories "
                "others may search\n",
                d->cfg.state_dir, closed, mode, closed);
    if (bind_policy_setup(d) < 0)
        return 2;
    fd_budget(d);
    if (socket_in_use(d->cfg.socket_path)) {
        fprintf(stderr, "cordond: %s is served by a running cordond\n", d->cfg.socket_path);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    d->devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (d->devnull < 0)
        return 1;
    LIST_INIT(&d->boxes);
    LIST_INIT(&d->dying);
    /* IGNORE_ENV: no EVENT_* variable changes how fds are watched (api-ports.c relies on an fd's
     * epoll registration being gone when its event is deleted: no change list). */
    struct event_config *ec = event_config_new();
    if (ec)
        (void) event_config_set_flag(ec, EVENT_BASE_FLAG_IGNORE_ENV);
    d->base = ec ? event_base_new_with_config(ec) : NULL;
    if (ec)
        event_config_free(ec);
    /* priorities: 0 unused, 1 everything (the default for 3), 2 warm-pool refills */
    if (!d->base || event_base_priority_init(d->base, 3) < 0)
        return 1;
    for (unsigned i = 0; i < d->cfg.n_pools; i++) {
        struct cdn_error err = {0};
        if (cdn_pool_configure(d->cfg.pools[i], &err) < 0) {
            fprintf(stderr, "cordond: pool '%s': %s\n", d->cfg.pools[i], err.msg);
            return 2;
        }
    }
    for (unsigned i = 0; i < d->cfg.n_e2b_templates; i++) {
        struct cdn_error err = {0};
        if (cdn_e2b_template_configure(d->cfg.e2b_templates[i], &err) < 0) {
            fprintf(stderr, "cordond: %s\n", err.msg);
            return 2;
        }
    }
    struct event *ev_term = evsignal_new(d->base, SIGTERM, on_stop, NULL);
    struct event *ev_int = evsignal_new(d->base, SIGINT, on_stop, NULL);
    struct event *ev_chld = evsignal_new(d->base, SIGCHLD, on_child, NULL);
    if (!ev_term || !ev_int || !ev_chld || evsignal_add(ev_term, NULL) < 0 ||
        evsignal_add(ev_int, NULL) < 0 || evsignal_add(ev_chld, NULL) < 0)
        return 1;
    if (mkdir(d->cfg.sandbox_dir, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "cordond: mkdir %s: %s\n", d->cfg.sandbox_dir, strerror(errno));
        return 1;
    }
    {
        /* The rule file named, else the installed one if there is one, else the built-in copy of it. */
        struct cdn_error err = {0};
        const char *rules = d->cfg.monitor_rules;
        if (!rules[0] && access(CDN_SYSCONFDIR "/cordon/monitor-rules.json", R_OK) == 0)
            rules = CDN_SYSCONFDIR "/cordon/monitor-rules.json";
        if (cdn_monitor_load_rules(rules, &err) < 0) {
            fprintf(stderr, "cordond: %s\n", err.msg);
            return 2;
        }
    }
    (void) cdn_egress_start(); /* without it, network modes other than none are refused, with the reason */
    raise_fanotify_groups();
    (void) cdn_box_fanotify_global_start();
    cdn_layer_store_size(cdn_daemon->cfg.checkpoint_store_bytes);
    if (open_layer_pool() < 0)
        return 2;
    int adopted = cdn_box_adopt_all();
    cdn_layer_pool_sweep(box_live);
    cdn_checkpoint_sweep();
    int r = cdn_egress_forget_old_flows();
    if (r < 0)
        fprintf(stderr, "cordond: the adopted sandboxes' old flows stay misrouted until they end: %s\n",
                strerror(-r));
    /* What a crashed cordond kept for reuse (empty cgroups of now free slots) goes, and the
     * directories of its process-tier sandboxes (which died with it). */
    cdn_tier_sweep_slots();
    if (adopted)
        fprintf(stderr, "cordond: adopted %d sandboxes left by the previous cordond\n", adopted);
    if (cdn_api_start() < 0)
        return 1;
    stock_start();
    cdn_pool_start();
    cdn_images_start();
    fprintf(stderr, "cordond %s: listening on %s%s%s\n", CORDON_VERSION, d->cfg.socket_path,
            d->cfg.listen[0] ? " and " : "", d->cfg.listen);
    event_base_dispatch(d->base);
    cdn_box_drop_kept_slots();
    cdn_egress_stop();
    cdn_box_fanotify_global_stop();
    cdn_monitor_free();
    (void) unlink(d->cfg.socket_path);
    layers_stop();
    return 0;
}
