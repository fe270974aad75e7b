/* `cordon run --json`: the result record. Linked into the full build only;
 * the lean one hands --json runs over to it (cli.h). */
#include "run.h"
#include "shared/macro.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A JSON string of text that may not be UTF-8 (error messages quote the
 * caller's argv): invalid input has its non-ASCII bytes shown as '?'. */
static json_t *json_text(const char *s)
{
    json_t *j = json_string(s);
    if (j)
        return j;
    _cleanup_free_ char *copy = strdup(s);
    if (!copy)
        return json_null();
    for (char *c = copy; *c; c++)
        if ((unsigned char) *c >= 0x80)
            *c = '?';
    j = json_string(copy);
    return j ? j : json_null();
}

void cdn_run_print_record(const struct cdn_sandbox *sb, const struct outcome *o, int status)
{
    /* CPU time: the command's own report (it includes the descendants it
     * waited for) or, when it never reported, init's rusage (everything init reaped). */
    double ut = o->have_exit ? (double) o->exit.user_us / 1e3
                             : (double) o->ru.ru_utime.tv_sec * 1e3 + (double) o->ru.ru_utime.tv_usec / 1e3;
    double st = o->have_exit ? (double) o->exit.sys_us / 1e3
                             : (double) o->ru.ru_stime.tv_sec * 1e3 + (double) o->ru.ru_stime.tv_usec / 1e3;
    const uint64_t *n = o->session.counts;
    json_t *rec = json_pack(
        "{s:s, s:s, s:i, s:o, s:o, s:b, s:b, s:f, s:f, s:f, s:I, s:I, s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I, "
        "s:I}}",
        "id", sb->id, "tier", sb->tier->name, "exit_code", status, "signal",
        o->have_exit && o->exit.signal ? json_integer(o->exit.signal) : json_null(), "error",
        o->setup_failed || o->exec_failed ? json_text(o->error.msg) : json_null(), "timed_out", o->timed_out,
        "oom_killed", o->usage.oom_kills > 0, "wall_ms", o->wall_ms, "cpu_user_ms", ut, "cpu_system_ms", st,
        "memory_peak_bytes", (json_int_t) o->usage.memory_peak_bytes, "pids_limit_hits",
        (json_int_t) o->usage.pids_max_hits, "limits",
        json_pack("{s:f, s:I, s:I, s:I}", "cpus", sb->spec->limits.cpus, "memory_mb",
                  (json_int_t) sb->spec->limits.memory_mb, "pids", (json_int_t) sb->spec->limits.pids,
                  "disk_mb", (json_int_t) sb->spec->limits.disk_mb),
        "violations", "egress", (json_int_t) n[CDN_VK_EGRESS], "syscall", (json_int_t) n[CDN_VK_SYSCALL],
        "oom", (json_int_t) o->usage.oom_kills, "pids", (json_int_t) o->usage.pids_max_hits, "protect",
        (json_int_t) n[CDN_VK_PROTECT], "kernel", (json_int_t) n[CDN_VK_KERNEL], "system_write",
        (json_int_t) n[CDN_VK_SYSTEM_WRITE]);
    if (!rec)
        return;
    if (sb->tier->describe) /* a VM tier's: what runs the guest, "kvm" or "tcg" */
        sb->tier->describe(sb, rec, CDN_DESCRIBE_RUN);
    char *s = json_dumps(rec, JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (s)
        fprintf(stderr, "%s\n", s);
    free(s);
    json_decref(rec);
}
