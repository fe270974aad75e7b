/* `cordon run`: what one run produced, and its JSON record (run-record.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>

#include "agent/frame.h"
#include "core/sandbox.h"
#include "shared/error.h"
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
    uint64_t violations_egress;       /* denied egress attempts (run-egress.c) */
    bool violation_killed;            /* --on-violation kill acted */
    uint64_t violations_syscall;      /* watched syscalls denied (run.c) */
    uint64_t violations_protect;      /* opens of protected paths refused (run.c) */
    uint64_t violations_kernel;       /* opens of masked kernel files refused (run.c) */
    uint64_t violations_system_write; /* writes aimed at system paths (run.c) */
};

/* Egress of a run with network != none (run-egress.c, full build only):
 * prepare before the sandbox is created (its namespace, the proxy, the DNS
 * stub, the nftables table; sets sb->netns_fd), start once it is (the loop
 * thread), free after it has ended. *ret stays NULL for network none. */
struct run_egress;
int cdn_run_egress_prepare(struct cdn_sandbox *sb, struct outcome *out, struct run_egress **ret,
                           struct cdn_error *err);
int cdn_run_egress_start(struct run_egress *e);
void cdn_run_egress_free(struct run_egress *e);

/* One JSON line on stderr: exit, times, usage, limits. Full build only (jansson). */
void cdn_run_print_record(const struct cdn_sandbox *sb, const struct outcome *o, int status);
