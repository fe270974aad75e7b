/* `cordon run`: what one run produced, and its JSON record (run-record.c). */
#pragma once

#include <stdbool.h>
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
};

/* One JSON line on stderr: exit, times, usage, limits. Full build only (jansson). */
void cdn_run_print_record(const struct cdn_sandbox *sb, const struct outcome *o, int status);
