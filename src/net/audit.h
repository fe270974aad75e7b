/* The egress audit log: one JSON line per attempt (DESIGN §7) — time,
 * sandbox, labels, then the attempt's fields — appended to a file that is
 * rotated (to PATH.1) past CDN_AUDIT_ROTATE_BYTES. Shared by cordond and the
 * one-shot `cordon run`. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "net/egress.h"

#define CDN_AUDIT_ROTATE_BYTES (64ULL << 20)
#define CDN_AUDIT_KEEP         3 /* rotated files kept: PATH.1 … PATH.3 */

struct cdn_audit_log {
    int fd;
    uint64_t size;
    uint64_t max_bytes; /* rotate past this; 0 = CDN_AUDIT_ROTATE_BYTES */
    char path[512];
};

#define CDN_AUDIT_LOG_INIT                                                                                   \
    {                                                                                                        \
        .fd = -1                                                                                             \
    }

/* Open (append, 0600, directory made if missing); -errno. */
int cdn_audit_log_open(struct cdn_audit_log *l, const char *path);
void cdn_audit_log_close(struct cdn_audit_log *l);
/* The attempt's fields: proto, dst_ip, dst_port, decision, reason, bytes_up,
 * bytes_down, duration_ms and, when known, name, via, qtype, answers. */
json_t *cdn_audit_fields(const struct cdn_audit *a);
/* Does this refusal count as a violation (the sandbox tried to reach what the
 * policy forbids)? Refusals for limits, timeouts, closes, upstream failures
 * and operator changes (policy-change) do not. */
bool cdn_audit_is_violation(const struct cdn_audit *a);

/* Per-sandbox rate limit of audit lines: rate lines per second (0: no
 * limit), the rest counted in b->audit_suppressed. Returns whether to write
 * this one; *flush gets the count suppressed in the previous window (to be
 * written as one line) when a new window starts, else 0. */
#define CDN_AUDIT_RATE 1000 /* the default */
bool cdn_audit_admit(struct cdn_egress_box *b, uint64_t now_ms, unsigned rate, uint64_t *flush);

/* The record that stands for n lines the rate limit suppressed. */
json_t *cdn_audit_suppressed_fields(uint64_t n);

/* One line; labels and fields are borrowed. */
void cdn_audit_log_write(struct cdn_audit_log *l, const char *sandbox, json_t *labels, json_t *fields);
