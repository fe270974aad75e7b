/* Helpers shared by all probes: verdict notes, errno judging, scratch directories, small file reads. */
#include "probe.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void probe_note(struct probe_result *res, enum probe_verdict verdict, const char *fmt, ...)
{
    size_t used = strlen(res->detail);
    va_list ap;

    if (verdict == PROBE_ESCAPED)
        res->verdict = PROBE_ESCAPED;
    if (used + 2 >= sizeof(res->detail))
        return;
    if (used > 0)
        res->detail[used++] = ',';
    va_start(ap, fmt);
    (void) vsnprintf(res->detail + used, sizeof(res->detail) - used, fmt, ap);
    va_end(ap);
}

const char *probe_errname(int err)
{
    static char buf[16];
    const char *name = strerrorname_np(err);

    if (name)
        return name;
    (void) snprintf(buf, sizeof(buf), "E%d", err);
    return buf;
}

bool probe_errno_in(int err, const int *list)
{
    for (; *list != 0; list++)
        if (*list == err)
            return true;
    return false;
}

void probe_judge(struct probe_result *res, const char *what, long ret, int err, const int *denials)
{
    const char *sep = what ? ":" : "";

    if (!what)
        what = "";
    if (ret >= 0)
        probe_escaped(res, "%s%sallowed", what, sep);
    else if (probe_errno_in(err, denials))
        probe_contained(res, "%s%s%s", what, sep, probe_errname(err));
    else
        probe_escaped(res, "%s%s%s(reached-kernel)", what, sep, probe_errname(err));
}

void probe_judge_open(struct probe_result *res, const char *path, int flags, const int *denials)
{
    int fd = open(path, flags | O_CLOEXEC | O_NOCTTY);
    int err = errno;

    probe_judge(res, path, fd, err, denials);
    if (fd >= 0)
        (void) close(fd);
}

void probe_untested(struct probe_result *res, const char *why)
{
    probe_escaped(res, "untested:%s", why);
}

static int scratch_try(const char *base, char *buf, size_t len)
{
    struct stat st;

    if (!base || base[0] != '/' || stat(base, &st) < 0 || !S_ISDIR(st.st_mode))
        return -ENOENT;
    if ((size_t) snprintf(buf, len, "%s/cordon-probe.XXXXXX", base) >= len)
        return -ENAMETOOLONG;
    if (!mkdtemp(buf))
        return -errno;
    return 0;
}

int probe_scratch_make(const struct probe_ctx *ctx, char *buf, size_t len)
{
    const char *bases[] = {getenv("TMPDIR"), "/tmp", "/dev/shm", ctx->disk_dir, "/workspace", "/var/tmp"};
    int r = -ENOENT;

    for (size_t i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
        r = scratch_try(bases[i], buf, len);
        if (r == 0)
            return 0;
    }
    buf[0] = '\0';
    return r;
}

/* Only removes plain entries one level deep: a probe that left a mount behind makes rmdir fail, never
 * recurse. */
void probe_scratch_remove(const char *dir)
{
    DIR *d;
    struct dirent *de;

    if (!dir || dir[0] != '/')
        return;
    d = opendir(dir);
    if (d) {
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno == EISDIR)
                    (void) unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
        (void) closedir(d);
    }
    (void) rmdir(dir);
}

ssize_t probe_read_fd(int fd, char *buf, size_t len)
{
    size_t got = 0;

    while (got + 1 < len) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        got += (size_t) n;
    }
    buf[got] = '\0';
    return (ssize_t) got;
}

ssize_t probe_read_file(const char *path, char *buf, size_t len)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

    if (fd < 0)
        return -errno;
    return probe_read_fd(fd, buf, len);
}

pid_t probe_parse_pid(const char *s)
{
    char *end;
    long v;

    if (!s || !*s)
        return 0;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v <= 0 || v > INT_MAX)
        return 0;
    return (pid_t) v;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo; decode in place. */
static void unescape_octal(char *s)
{
    char *out = s;

    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' &&
            s[3] <= '7') {
            *out++ = (char) ((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *out++ = *s;
        }
    }
    *out = '\0';
}

/* "id parent maj:min root target opts [optional...] - fstype source superopts" */
static bool parse_mountinfo_line(char *line, struct probe_mount *m)
{
    char *fields[6], *save = NULL, *sep = strstr(line, " - ");
    char *tok;

    if (!sep)
        return false;
    *sep = '\0';
    tok = strtok_r(line, " ", &save);
    for (int i = 0; i < 5; i++, tok = strtok_r(NULL, " ", &save)) {
        if (!tok)
            return false;
        fields[i] = tok;
    }
    m->root = fields[3];
    m->target = fields[4];
    save = NULL;
    m->fstype = strtok_r(sep + 3, " ", &save);
    fields[5] = strtok_r(NULL, " ", &save);
    m->superopts = strtok_r(NULL, " \n", &save);
    if (!m->fstype || !fields[5] || !m->superopts)
        return false;
    unescape_octal(fields[3]);
    unescape_octal(fields[4]);
    return true;
}

int probe_for_each_mount(int (*cb)(const struct probe_mount *m, void *userdata), void *userdata)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    int r = 0;

    if (!f)
        return -errno;
    while (r == 0 && fgets(line, sizeof(line), f)) {
        struct probe_mount m;

        if (parse_mountinfo_line(line, &m))
            r = cb(&m, userdata);
    }
    (void) fclose(f);
    return r;
}
