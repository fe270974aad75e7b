/* The egress audit log: see audit.h. */
#include "net/audit.h"
#include "shared/fd-util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cdn_audit_log_open(struct cdn_audit_log *l, const char *path)
{
    if ((size_t) snprintf(l->path, sizeof l->path, "%s", path) >= sizeof l->path)
        return -ENAMETOOLONG;
    char dir[512];
    (void) snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        (void) cdn_mkdir_p(dir, 0700);
    }
    l->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (l->fd < 0)
        return -errno;
    struct stat st;
    l->size = fstat(l->fd, &st) == 0 ? (uint64_t) st.st_size : 0;
    return 0;
}

void cdn_audit_log_close(struct cdn_audit_log *l)
{
    l->fd = safe_close(l->fd);
}

static json_t *ip_string(uint32_t ip)
{
    char s[16];
    (void) snprintf(s, sizeof s, "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255);
    return json_string(s);
}

/* Names come from the sandbox: never trust them to be UTF-8. */
static json_t *text(const char *s)
{
    json_t *j = json_string(s);
    if (j)
        return j;
    char *copy = strdup(s);
    if (!copy)
        return json_null();
    for (char *c = copy; *c; c++)
        if ((unsigned char) *c >= 0x80)
            *c = '?';
    j = json_string(copy);
    free(copy);
    return j ? j : json_null();
}

json_t *cdn_audit_fields(const struct cdn_audit *a)
{
    json_t *f =
        json_pack("{s:s, s:o, s:i, s:s, s:s, s:I, s:I, s:f}", "proto", a->proto, "dst_ip",
                  ip_string(a->dst_ip), "dst_port", (int) a->dst_port, "decision",
                  a->allowed ? "allow" : "deny", "reason", a->reason, "bytes_up", (json_int_t) a->bytes_up,
                  "bytes_down", (json_int_t) a->bytes_down, "duration_ms", a->duration_ms);
    if (!f)
        return NULL;
    if (a->name)
        json_object_set_new(f, "name", text(a->name));
    if (a->via)
        json_object_set_new(f, "via", json_string(a->via));
    if (a->qtype)
        json_object_set_new(f, "qtype", json_string(a->qtype));
    if (a->answers)
        json_object_set_new(f, "answers", json_string(a->answers));
    return f;
}

bool cdn_audit_is_violation(const struct cdn_audit *a)
{
    static const char *const exact[] = {"not-allowlisted", "ip-mismatch",  "no-sni",
                                        "no-host",         "no-name",      "bad-tls",
                                        "bad-http",        "invalid-name", "dns-budget"};
    if (a->allowed || !a->reason)
        return false;
    if (strncmp(a->reason, "reserved:", 9) == 0 || strncmp(a->reason, "rebinding:", 10) == 0)
        return true;
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strcmp(a->reason, exact[i]) == 0)
            return true;
    return false;
}

bool cdn_audit_admit(struct cdn_egress_box *b, uint64_t now_ms, unsigned rate, uint64_t *flush)
{
    *flush = 0;
    if (now_ms - b->audit_window_ms >= 1000) {
        *flush = b->audit_suppressed;
        b->audit_suppressed = 0;
        b->audit_window_ms = now_ms;
        b->audit_in_window = 0;
    }
    if (rate && b->audit_in_window >= rate) {
        b->audit_suppressed++;
        return false;
    }
    b->audit_in_window++;
    return true;
}

json_t *cdn_audit_suppressed_fields(uint64_t n)
{
    return json_pack("{s:s, s:s, s:s, s:I}", "proto", "audit", "decision", "suppressed", "reason",
                     "rate-limited", "suppressed", (json_int_t) n);
}

void cdn_audit_log_write(struct cdn_audit_log *l, const char *sandbox, json_t *labels, json_t *fields)
{
    if (l->fd < 0 || !fields)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    json_t *line = json_pack("{s:f, s:s, s:o}", "time", (double) ts.tv_sec + (double) ts.tv_nsec / 1e9,
                             "sandbox", sandbox, "labels", labels ? json_incref(labels) : json_object());
    if (!line)
        return;
    (void) json_object_update(line, fields);
    char *s = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(line);
    if (!s)
        return;
    size_t n = strlen(s);
    s[n] = '\n';
    if (l->size + n + 1 > (l->max_bytes ? l->max_bytes : CDN_AUDIT_ROTATE_BYTES)) {
        /* PATH.2 → PATH.3, PATH.1 → PATH.2, PATH → PATH.1; then a new PATH. */
        char path[sizeof l->path], from[530], to[530];
        memcpy(path, l->path, sizeof path); /* cdn_audit_log_open writes l->path */
        for (int i = CDN_AUDIT_KEEP; i > 0; i--) {
            if (i > 1)
                (void) snprintf(from, sizeof from, "%s.%d", path, i - 1);
            else
                (void) snprintf(from, sizeof from, "%s", path);
            (void) snprintf(to, sizeof to, "%s.%d", path, i);
            (void) rename(from, to);
        }
        (void) close(l->fd);
        l->fd = -1;
        if (cdn_audit_log_open(l, path) < 0) {
            free(s);
            return;
        }
    }
    if (write(l->fd, s, n + 1) == (ssize_t) (n + 1))
        l->size += n + 1;
    free(s);
}
