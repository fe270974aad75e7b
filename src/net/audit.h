/* The egress audit log: one JSON line per attempt (DESIGN §7) — time,
 * sandbox, labels, then the attempt's fields — appended to a file that is
 * rotated (to PATH.1) past CDN_AUDIT_ROTATE_BYTES. Shared by cordond and the
 * one-shot `cordon run`. */
#pragma once

#include <jansson.h>
#include <stdint.h>

#include "net/egress.h"

#define CDN_AUDIT_ROTATE_BYTES (64ULL << 20)

struct cdn_audit_log {
    int fd;
    uint64_t size;
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
/* One line; labels and fields are borrowed. */
void cdn_audit_log_write(struct cdn_audit_log *l, const char *sandbox, json_t *labels, json_t *fields);
