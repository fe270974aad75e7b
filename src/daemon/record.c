/* What cordond writes down about each sandbox so that a restarted cordond
 * can take it over: <sandbox_dir>/<id>.json next to <id>.sock, the socket
 * its init listens on. The directory is root's alone (0700); records are
 * written atomically (temporary file, rename) and still parsed as untrusted.
 *
 * {"id", "slot", "init_pid", "init_start", "created_at", "spec": {…}}
 * init_start is the process's start time (field 22 of /proc/PID/stat): a pid
 * reused by an unrelated process after a reboot-less restart is not adopted. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "registry.h"
#include "core/json-util.h"
#include "shared/macro.h"
#include "tiers/tier.h"
#include "record.h"
#include "shared/fd-util.h"

void cdn_record_path(const char *id, const char *ext, char *buf, size_t size)
{
    (void) snprintf(buf, size, "%s/%s.%s", cdn_daemon->cfg.sandbox_dir, id, ext);
}

uint64_t cdn_record_start_time(pid_t pid)
{
    char path[64], buf[1024];
    (void) snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
    if (!p)
        return 0;
    /* after ")": state is field 3; starttime is field 22 */
    unsigned long long start = 0;
    int field = 2;
    for (char *t = strtok(p + 1, " "); t; t = strtok(NULL, " "))
        if (++field == 22) {
            start = strtoull(t, NULL, 10);
            break;
        }
    return start;
}

int cdn_record_write(const struct box *b)
{
    _cleanup_free_ char *spec = cdn_spec_to_json(&b->spec);
    _cleanup_json_ json_t *o =
        spec ? json_pack("{s:s, s:i, s:i, s:I, s:f, s:b, s:i, s:o}", "id", b->sb.id, "slot", b->sb.slot,
                         "init_pid", (int) b->sb.init_pid, "init_start", (json_int_t) b->init_start,
                         "created_at", b->created_unix, "pooled", b->pool != NULL, "net_lease",
                         b->egress ? b->netns.lease : -1, "spec", json_loads(spec, 0, NULL))
             : NULL;
    char path[512], tmp[520];
    cdn_record_path(b->sb.id, "json", path, sizeof path);
    (void) snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (o) /* a reused cgroup directory's counts before it (slot.c): what it used is the rest */
        (void) json_object_update_new(o, json_pack("{s:I, s:I}", "oom_base", (json_int_t) b->sb.oom_base,
                                                   "cpu_base", (json_int_t) b->sb.cpu_base));
    if (o && b->attached) /* a runtime's container (cdn_box_attach) */
        (void) json_object_update_new(
            o, json_pack("{s:b, s:s, s:I, s:I}", "attached", true, "cgroup", b->cgroup_name, "ids_from",
                         (json_int_t) b->sb.root_ids_from, "ids_count", (json_int_t) b->sb.root_ids_count));
    if (o && b->sb.tier->describe) /* a VM's: what runs the guest, how it started */
        b->sb.tier->describe(&b->sb, o, CDN_DESCRIBE_RECORD);
    int r = o ? json_dump_file(o, tmp, JSON_COMPACT) : -1;
    if (r < 0 || rename(tmp, path) < 0) {
        (void) unlink(tmp);
        return -EIO;
    }
    return 0;
}

void cdn_record_remove(const char *id)
{
    char path[512];
    cdn_record_path(id, "json", path, sizeof path);
    (void) unlink(path);
    cdn_record_path(id, "sock", path, sizeof path);
    (void) unlink(path);
    cdn_record_path(id, "qmp", path, sizeof path);
    (void) unlink(path);
}

/* A socket for <id>.sock: *sa filled, the fd returned. */
static int sock_for(const char *id, struct sockaddr_un *sa)
{
    char path[512];
    cdn_record_path(id, "sock", path, sizeof path);
    *sa = (struct sockaddr_un){.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa->sun_path)
        return -ENAMETOOLONG;
    strcpy(sa->sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    return fd < 0 ? -errno : fd;
}

int cdn_record_listen(const char *id)
{
    struct sockaddr_un sa;
    _cleanup_close_ int fd = sock_for(id, &sa);
    if (fd < 0)
        return fd;
    (void) unlink(sa.sun_path);
    if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(fd, 4) < 0)
        return -errno;
    return TAKE_FD(fd);
}

int cdn_record_connect(const char *id)
{
    struct sockaddr_un sa;
    _cleanup_close_ int fd = sock_for(id, &sa);
    if (fd < 0)
        return fd;
    if (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
        return -errno;
    return TAKE_FD(fd);
}

static bool valid_id(const char *s)
{
    if (strlen(s) != CDN_ID_LEN)
        return false;
    for (const char *c = s; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return false;
    return true;
}

int cdn_record_load(const char *path, struct record *ret, struct cdn_error *err)
{
    json_error_t jerr;
    _cleanup_json_ json_t *o = json_load_file(path, 0, &jerr);
    if (!o)
        return cdn_error_set(err, EBADMSG, "%s: %s", path, jerr.text);
    const char *id = NULL;
    int slot = -1, pid = 0;
    json_int_t start = 0;
    double created = 0;
    json_t *spec = NULL;
    int pooled = 0, lease = -1;
    int r = json_unpack(o, "{s:s, s:i, s:i, s:I, s:F, s?b, s?i, s:o}", "id", &id, "slot", &slot, "init_pid",
                        &pid, "init_start", &start, "created_at", &created, "pooled", &pooled, "net_lease",
                        &lease, "spec", &spec);
    /* slot -1: a tier's whose records name no slot (checked against the spec's tier below) */
    if (r < 0 || !valid_id(id) || slot < -1 || pid <= 1 || start <= 0)
        return cdn_error_set(err, EBADMSG, "%s: not a sandbox record", path);
    json_int_t oom_base = 0, cpu_base = 0; /* absent in a record of an older cordond: 0 */
    (void) json_unpack(o, "{s?I, s?I}", "oom_base", &oom_base, "cpu_base", &cpu_base);
    const char *cgroup = "";
    int attached = 0;
    json_int_t ids_from = 0, ids_count = 0;
    if (json_unpack(o, "{s?b, s?s, s?I, s?I}", "attached", &attached, "cgroup", &cgroup, "ids_from",
                    &ids_from, "ids_count", &ids_count) < 0 ||
        ids_from < 0 || ids_from >= (1 << 30) || ids_count < 0 || ids_count > 65536 ||
        strlen(cgroup) >= CDN_CGROUP_NAME_MAX || (cgroup[0] && cgroup[0] != '/') || strstr(cgroup, ".."))
        return cdn_error_set(err, EBADMSG, "%s: not a sandbox record (cgroup)", path);
    *ret = (struct record){.slot = slot,
                           .oom_base = oom_base > 0 ? (uint64_t) oom_base : 0,
                           .cpu_base = cpu_base > 0 ? (uint64_t) cpu_base : 0,
                           .init_pid = pid,
                           .init_start = (uint64_t) start,
                           .created_unix = created,
                           .pooled = pooled,
                           .net_lease = lease,
                           .attached = attached,
                           .ids_from = (uint32_t) ids_from,
                           .ids_count = (uint32_t) ids_count};
    (void) snprintf(ret->cgroup, sizeof ret->cgroup, "%s", cgroup);
    (void) snprintf(ret->id, sizeof ret->id, "%s", id);
    _cleanup_free_ char *s = json_dumps(spec, JSON_COMPACT);
    if (!s || cdn_spec_init(&ret->spec) < 0)
        return cdn_error_set(err, ENOMEM, "out of memory");
    r = cdn_spec_from_json(&ret->spec, s, strlen(s), err);
    const struct cdn_tier_ops *t = r == 0 ? cdn_tier_lookup(ret->spec.tier) : NULL;
    if (r == 0 && t && t->slot_in_record != (slot >= 0))
        r = cdn_error_set(err, EBADMSG, "%s: not a sandbox record (slot %d, tier %s)", path, slot,
                          cdn_tier_to_string(ret->spec.tier));
    if (r < 0) {
        cdn_spec_free(&ret->spec);
        return r;
    }
    ret->json = TAKE_PTR(o);
    return 0;
}

static int scan(const char *ext, void (*fn)(const char *id, const char *path))
{
    _cleanup_closedir_ DIR *d = opendir(cdn_daemon->cfg.sandbox_dir);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    struct dirent *de;
    size_t el = strlen(ext);
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n != CDN_ID_LEN + 1 + el || de->d_name[CDN_ID_LEN] != '.' ||
            strcmp(de->d_name + CDN_ID_LEN + 1, ext) != 0)
            continue;
        char id[CDN_ID_LEN + 1], path[512];
        memcpy(id, de->d_name, CDN_ID_LEN);
        id[CDN_ID_LEN] = 0;
        if (!valid_id(id))
            continue;
        cdn_record_path(id, ext, path, sizeof path);
        fn(id, path);
    }
    return 0;
}

int cdn_record_scan(void (*fn)(const char *id, const char *path))
{
    return scan("json", fn);
}

int cdn_record_scan_ended(void (*fn)(const char *id, const char *path))
{
    return scan("ended", fn);
}

int cdn_record_write_ended(const struct box *b, const char *events, size_t len)
{
    _cleanup_free_ char *spec = cdn_spec_to_json(&b->spec);
    _cleanup_json_ json_t *o =
        json_pack("{s:s, s:o?, s:f, s:f, s:s, s:I, s:O?, s:o, s:s%}", "id", b->sb.id, "spec",
                  spec ? json_loads(spec, 0, NULL) : NULL, "created_at", b->created_unix, "ended_at",
                  b->ended_unix, "exit_reason", b->exit_reason, "execs", (json_int_t) b->execs, "usage",
                  b->final_usage, "violations", cdn_box_violations_json(b), "events", events, len);
    if (!o || !json_object_get(o, "spec"))
        return -ENOMEM;
    char path[512], tmp[520];
    cdn_record_path(b->sb.id, "ended", path, sizeof path);
    (void) snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (json_dump_file(o, tmp, JSON_COMPACT) < 0 || chmod(tmp, 0600) < 0 || rename(tmp, path) < 0) {
        int e = errno ? errno : EIO;
        (void) unlink(tmp);
        return -e;
    }
    return 0;
}

void cdn_record_remove_ended(const char *id)
{
    char path[512];
    cdn_record_path(id, "ended", path, sizeof path);
    (void) unlink(path);
}
