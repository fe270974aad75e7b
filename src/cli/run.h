/* `cordon run`: what one run produced, and its JSON record (run-record.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>

#include "proto/frame.h"
#include "core/sandbox.h"
#include "shared/error.h"
#include "supervise/session.h"
#include "tiers/tier.h"

#define EXIT_CORDON  125
#define EXIT_TIMEOUT 124

struct outcome {
    bool have_exit, timed_out, setup_failed, exec_failed;
    struct cdn_exit_msg exit;
    struct cdn_error error;
    struct rusage ru;
    struct cdn_usage usage;
    double wall_ms;
    /* The run's supervision (supervise/session.h): its violations, counted on the main thread
     * alone, and whether --on-violation kill acted (session.killed). */
    struct cdn_session session;
};

/* Egress of a run with network != none (run-egress.c, full build only):
 * prepare before the sandbox is created (its namespace, the proxy, the DNS
 * stub, the nftables table; sets sb->netns_fd), start once it is (the loop
 * thread), stop and free after it has ended. *ret stays NULL for network none.
 * Its thread counts nothing: each refused attempt adds one to an eventfd
 * (cdn_run_egress_violations_fd, -EBADF without egress: EFD_NONBLOCK, read
 * by the main loop, which counts them in the session); stop returns those it
 * had not read. */
struct run_egress;
int cdn_run_egress_prepare(struct cdn_sandbox *sb, struct run_egress **ret, struct cdn_error *err);
int cdn_run_egress_start(struct run_egress *e);
int cdn_run_egress_violations_fd(const struct run_egress *e);
uint64_t cdn_run_egress_stop(struct run_egress *e);
void cdn_run_egress_free(struct run_egress *e);

/* One JSON line on stderr: exit, times, usage, limits. Full build only (jansson). */
void cdn_run_print_record(const struct cdn_sandbox *sb, const struct outcome *o, int status);
