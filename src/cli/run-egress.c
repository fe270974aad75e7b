/* Egress for the one-shot `cordon run --net allow=…|open` (DESIGN §7): the
 * same proxy, DNS stub, nftables table and per-sandbox namespace as cordond,
 * owned by this process for the run. The libevent loop runs in a thread of
 * its own, started after the sandbox is cloned (so the clone copies a
 * single-threaded process), and stopped once the sandbox has ended. That
 * thread touches no state of the run: a refused attempt is one more on an
 * eventfd, which the main loop counts in the run's session (run.c), so that
 * the policy and its counters live on one thread.
 *
 * The upstream resolver is $CORDON_DNS_UPSTREAM (IP[:PORT]) or the host's
 * /etc/resolv.conf; attempts go to <state dir>/egress.log; the DNS budget
 * (net/dns-budget.h) is $CORDON_DNS_BUDGET, as cordond's dns_budget. Full
 * build only. */
#include "run.h"

#include <errno.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/paths.h"
#include "net/audit.h"
#include "net/listeners.h"
#include "net/netns.h"
#include "net/nft.h"
#include "shared/fd-util.h"

struct run_egress {
    struct event_base *base;
    struct cdn_egress_listeners ls; /* resolver, stub, proxy, relay, table (net/listeners.h) */
    struct cdn_netns netns;
    struct cdn_egress_box box;
    struct cdn_audit_log log;
    struct cdn_dns_budget_cfg budget;
    json_t *labels;
    bool thread_started;
    int violations_fd; /* eventfd: refused attempts not yet counted by the main loop */
    pthread_t thread;
};

static struct cdn_egress_box *lookup(void *arg, uint32_t src)
{
    struct run_egress *e = arg;
    return src == e->box.sandbox_ip ? &e->box : NULL;
}

static void on_audit(void *arg, struct cdn_egress_box *b, const struct cdn_audit *a)
{
    struct run_egress *e = arg;
    /* Counted (and in kill mode acted on) by the main loop. An eventfd write fails only past 2^64-2. */
    if (cdn_audit_is_violation(a) && write(e->violations_fd, &(uint64_t){1}, sizeof(uint64_t)) < 0)
        fprintf(stderr, "cordon: egress: a refusal went uncounted: %s\n", strerror(errno));
    uint64_t flushed;
    bool write = cdn_audit_admit(b, cdn_now_ms(), CDN_AUDIT_RATE, &flushed);
    if (flushed) {
        json_t *s = cdn_audit_suppressed_fields(flushed);
        cdn_audit_log_write(&e->log, b->id, e->labels, s);
        json_decref(s);
    }
    if (!write)
        return;
    json_t *f = cdn_audit_fields(a);
    cdn_audit_log_write(&e->log, b->id, e->labels, f);
    json_decref(f);
}

static void on_flag(void *arg, struct cdn_egress_box *b, const char *what, const char *detail, json_t *fields)
{
    (void) arg, (void) b, (void) fields; /* the detail says the counts too */
    fprintf(stderr, "cordon: egress alert: %s: %s\n", what, detail);
}

static struct cdn_egress_ops ops = {.lookup = lookup, .audit = on_audit, .flag = on_flag};

int cdn_run_egress_violations_fd(const struct run_egress *e)
{
    return e ? e->violations_fd : -EBADF;
}

uint64_t cdn_run_egress_stop(struct run_egress *e)
{
    if (!e)
        return 0;
    if (e->thread_started) {
        (void) event_base_loopbreak(e->base);
        (void) pthread_join(e->thread, NULL);
        e->thread_started = false;
    }
    uint64_t n = 0;
    if (read(e->violations_fd, &n, sizeof n) != (ssize_t) sizeof n)
        n = 0; /* EAGAIN: none since the main loop's last look */
    return n;
}

void cdn_run_egress_free(struct run_egress *e)
{
    if (!e)
        return;
    (void) cdn_run_egress_stop(e);
    cdn_egress_listeners_stop(&e->ls);
    if (e->base)
        event_base_free(e->base);
    cdn_netns_destroy(&e->netns);
    cdn_allowlist_free(&e->box.allow);
    cdn_pins_free(e->box.pins);
    cdn_audit_log_close(&e->log);
    json_decref(e->labels);
    (void) safe_close(e->violations_fd);
    free(e);
}

int cdn_run_egress_prepare(struct cdn_sandbox *sb, struct run_egress **ret, struct cdn_error *err)
{
    *ret = NULL;
    const struct cdn_spec *spec = sb->spec;
    if (spec->net_mode == CDN_NET_NONE)
        return 0;
    struct run_egress *e = calloc(1, sizeof *e);
    if (!e)
        return cdn_error_set(err, ENOMEM, "out of memory");
    e->netns = (struct cdn_netns) CDN_NETNS_INIT;
    e->log = (struct cdn_audit_log) CDN_AUDIT_LOG_INIT;
    e->violations_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ops.arg = e;
    ops.dns_budget = &e->budget;
    e->budget = CDN_DNS_BUDGET_DEFAULT;
    int r;
    const char *budget = getenv("CORDON_DNS_BUDGET");
    if (budget && *budget && (r = cdn_dns_budget_parse(budget, &e->budget, err)) < 0) {
        (void) cdn_error_prefix(err, EINVAL, "CORDON_DNS_BUDGET");
        goto fail;
    }
    if (e->violations_fd < 0 || evthread_use_pthreads() < 0 || !(e->base = event_base_new()) ||
        !(e->labels = cdn_strv_to_json_map(&spec->labels)) || !(e->box.pins = cdn_pins_new(1024))) {
        r = cdn_error_set(err, ENOMEM, "egress: event loop: out of memory");
        goto fail;
    }
    if ((r = cdn_allowlist_parse(&spec->net_allow, &e->box.allow, err)) < 0)
        goto fail;
    char table[40];
    (void) snprintf(table, sizeof table, "cordon_run_%d", (int) getpid());
    if ((r = cdn_egress_listeners_start(&e->ls, e->base, table, getenv("CORDON_DNS_UPSTREAM"),
                                        "CORDON_DNS_UPSTREAM=IP[:PORT]", &ops, err)) < 0)
        goto fail;
    if ((r = cdn_netns_create(&e->netns, true, err)) < 0 ||
        (r = cdn_nft_add_if(e->ls.table, e->netns.host_if, err)) < 0 ||
        (spec->net_mode == CDN_NET_OPEN &&
         (r = cdn_nft_set_open(e->ls.table, e->netns.host_if, true, err)) < 0))
        goto fail;
    char path[512];
    (void) snprintf(path, sizeof path, "%s/egress.log", cdn_state_dir());
    if (cdn_audit_log_open(&e->log, path) < 0)
        fprintf(stderr, "cordon: audit log %s: %s\n", path, strerror(errno));
    (void) snprintf(e->box.id, sizeof e->box.id, "%s", sb->id);
    e->box.sandbox_ip = e->netns.sandbox_ip;
    e->box.host_ip = e->netns.host_ip;
    e->box.mode = spec->net_mode;
    sb->netns_fd = e->netns.fd;
    sb->resolver_ip = e->netns.host_ip;
    sb->sandbox_ip = e->netns.sandbox_ip;
    *ret = e;
    return 0;
fail:
    cdn_run_egress_free(e);
    return r < 0 ? r : -EIO;
}

static void *loop_main(void *arg)
{
    struct run_egress *e = arg;
    (void) event_base_loop(e->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

int cdn_run_egress_start(struct run_egress *e)
{
    if (!e)
        return 0;
    int r = pthread_create(&e->thread, NULL, loop_main, e);
    if (r != 0)
        return -r;
    e->thread_started = true;
    return 0;
}
