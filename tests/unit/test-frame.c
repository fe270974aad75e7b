#include "proto/connect.h"
#include "proto/frame.h"
#include "tap.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TEST(header_roundtrip_and_rejects)
{
    uint8_t b[CDN_FRAME_HEADER];
    struct cdn_frame_header h = {.type = CDN_FRAME_EXEC, .flags = 3, .channel = 77, .length = 1234}, d;
    cdn_frame_header_encode(b, &h);
    CHECK_EQ_INT(cdn_frame_header_decode(b, &d), 0);
    CHECK_EQ_INT(d.type, CDN_FRAME_EXEC);
    CHECK_EQ_INT(d.channel, 77);
    CHECK_EQ_INT(d.length, 1234);
    b[0] ^= 1;
    CHECK_EQ_INT(cdn_frame_header_decode(b, &d), -EBADMSG);
    b[0] ^= 1;
    h.length = CDN_FRAME_MAX + 1;
    cdn_frame_header_encode(b, &h);
    CHECK_EQ_INT(cdn_frame_header_decode(b, &d), -EMSGSIZE);
}

TEST(exec_roundtrip)
{
    static uint8_t buf[4096];
    static struct cdn_exec_req r;
    char *argv[] = {"sh", "-c", "echo hi", NULL}, *envp[] = {"A=1", NULL};
    int n = cdn_exec_encode(buf, sizeof buf,
                            &(struct cdn_exec_args){.flags = CDN_EXEC_SHUTDOWN_ON_EXIT | CDN_EXEC_PTY,
                                                    .rows = 24,
                                                    .cols = 80,
                                                    .cwd = "/w",
                                                    .argv = argv,
                                                    .envp = envp});
    CHECK(n > 0);
    CHECK_EQ_INT(cdn_exec_decode(buf, (size_t) n, &r), 0);
    CHECK_EQ_INT(r.argc, 3);
    CHECK_STREQ(r.argv[2], "echo hi");
    CHECK(r.argv[3] == NULL);
    CHECK_STREQ(r.envp[0], "A=1");
    CHECK_STREQ(r.cwd, "/w");
    CHECK_EQ_INT(r.flags, CDN_EXEC_SHUTDOWN_ON_EXIT | CDN_EXEC_PTY);
    CHECK_EQ_INT(r.rows, 24);
    CHECK_EQ_INT(r.cols, 80);
    /* every truncation is rejected, never read past */
    for (int cut = 0; cut < n; cut++)
        CHECK(cdn_exec_decode(buf, (size_t) cut, &r) < 0);
    buf[n - 1] = 'x'; /* missing final NUL */
    CHECK(cdn_exec_decode(buf, (size_t) n, &r) < 0);
    CHECK_EQ_INT(cdn_exec_encode(buf, 8, &(struct cdn_exec_args){.cwd = "/", .argv = argv}), -ENOBUFS);
    CHECK_EQ_INT(cdn_exec_encode(buf, sizeof buf, &(struct cdn_exec_args){.cwd = "/", .argv = envp + 1}),
                 -EINVAL);
}

TEST(exec_user_roundtrip)
{
    static uint8_t buf[4096];
    static struct cdn_exec_req r;
    char *argv[] = {"id", NULL}, *envp[] = {"A=1", NULL};
    int n = cdn_exec_encode(
        buf, sizeof buf,
        &(struct cdn_exec_args){
            .flags = CDN_EXEC_PIPES, .cwd = "/w", .argv = argv, .envp = envp, .user = "app:dev"});
    CHECK(n > 0);
    CHECK_EQ_INT(cdn_exec_decode(buf, (size_t) n, &r), 0);
    CHECK_EQ_INT(r.flags, CDN_EXEC_PIPES | CDN_EXEC_USER);
    CHECK_STREQ(r.user, "app:dev");
    CHECK_STREQ(r.envp[0], "A=1");
    for (int cut = 0; cut < n; cut++)
        CHECK(cdn_exec_decode(buf, (size_t) cut, &r) < 0);
    /* the flag without its string, and an empty user, are refused */
    n = cdn_exec_encode(
        buf, sizeof buf,
        &(struct cdn_exec_args){.flags = CDN_EXEC_USER, .cwd = "/", .argv = argv, .envp = envp});
    CHECK(n > 0);
    CHECK_EQ_INT(cdn_exec_decode(buf, (size_t) n, &r), 0);
    CHECK(r.user == NULL); /* encode clears a flag it has no string for */
    buf[0] |= CDN_EXEC_USER;
    CHECK(cdn_exec_decode(buf, (size_t) n, &r) < 0);
    CHECK_EQ_INT(
        cdn_exec_encode(buf, sizeof buf, &(struct cdn_exec_args){.cwd = "/", .argv = argv, .user = ""}),
        -EINVAL);
}

TEST(file_request_roundtrip_and_rejects)
{
    uint8_t buf[256];
    struct cdn_file_req r;
    int n = cdn_file_encode(buf, sizeof buf, CDN_FILE_WRITE, 0644, "/workspace/a.txt", "hello", 5);
    CHECK(n > 0);
    CHECK_EQ_INT(cdn_file_decode(buf, (size_t) n, &r), 0);
    CHECK_EQ_INT(r.op, CDN_FILE_WRITE);
    CHECK_EQ_INT(r.mode, 0644);
    CHECK_STREQ(r.path, "/workspace/a.txt");
    CHECK_EQ_INT(r.data_len, 5);
    CHECK(memcmp(r.data, "hello", 5) == 0);
    for (int cut = 0; cut < 8 + 17; cut++) /* up to and including the path's NUL */
        CHECK(cdn_file_decode(buf, (size_t) cut, &r) < 0);
    n = cdn_file_encode(buf, sizeof buf, CDN_FILE_STAT, 0, "/x", "junk", 4); /* data only with WRITE */
    CHECK(cdn_file_decode(buf, (size_t) n, &r) < 0);
    n = cdn_file_encode(buf, sizeof buf, 99, 0, "/x", NULL, 0); /* unknown op */
    CHECK(cdn_file_decode(buf, (size_t) n, &r) < 0);
    n = cdn_file_encode(buf, sizeof buf, CDN_FILE_READ, 0, "", NULL, 0); /* empty path */
    CHECK(cdn_file_decode(buf, (size_t) n, &r) < 0);
    n = cdn_file_encode(buf, sizeof buf, CDN_FILE_MKDIR, 010000, "/d", NULL, 0); /* mode beyond 07777 */
    CHECK(cdn_file_decode(buf, (size_t) n, &r) < 0);
    CHECK_EQ_INT(cdn_file_encode(buf, 12, CDN_FILE_WRITE, 0, "/long/path", NULL, 0), -ENOBUFS);
}

TEST(file_request_as_user)
{
    uint8_t buf[256];
    struct cdn_file_req r;
    int n = cdn_file_encode(buf, sizeof buf, CDN_FILE_WRITE, 0644, "/home/user/a", "hi", 2);
    CHECK_EQ_INT(cdn_file_set_user(buf, sizeof buf, (size_t) n, ""), -EINVAL);
    n = cdn_file_set_user(buf, sizeof buf, (size_t) n, "user");
    CHECK_EQ_INT(n, 8 + 13 + 5 + 2);
    CHECK_EQ_INT(cdn_file_decode(buf, (size_t) n, &r), 0);
    CHECK(r.op == CDN_FILE_WRITE && r.data_len == 2 && memcmp(r.data, "hi", 2) == 0);
    CHECK_STREQ(r.path, "/home/user/a");
    CHECK_STREQ(r.user, "user");
    CHECK_EQ_INT(cdn_file_set_user(buf, sizeof buf, (size_t) n, "root"), -ENOBUFS); /* one user only */
    struct cdn_file_opts o = {.flags = CDN_FILE_NOREPLACE};
    n = cdn_file_encode_to(buf, sizeof buf, CDN_FILE_RENAME, "/a", "/b", o.flags);
    n = cdn_file_set_user(buf, sizeof buf, (size_t) n, "1000:1000");
    CHECK_EQ_INT(cdn_file_decode(buf, (size_t) n, &r), 0);
    CHECK(r.op == CDN_FILE_RENAME && r.opts.flags == CDN_FILE_NOREPLACE);
    CHECK_STREQ(r.user, "1000:1000");
    CHECK_STREQ(r.to, "/b");
    n = cdn_file_encode(buf, sizeof buf, CDN_FILE_STAT, 0, "/x", NULL, 0);
    CHECK(cdn_file_decode(buf, (size_t) n, &r) == 0 && r.user == NULL);
    buf[2] = 1; /* CDN_FILE_AS_USER with no user after the path */
    CHECK(cdn_file_decode(buf, (size_t) n, &r) < 0);
    CHECK_EQ_INT(cdn_file_set_user(buf, 16, 11, "someone"), -ENOBUFS);
}

TEST(file_options_roundtrip_and_rejects)
{
    uint8_t buf[256];
    struct cdn_file_req r;
    struct cdn_file_opts o = {.window = 2u << 20, .max_bytes = 3ULL << 30};
    int n = cdn_file_encode_opts(buf, sizeof buf, CDN_FILE_READ, 0, "/w/big", &o);
    CHECK_EQ_INT(n, 8 + 7 + 16);
    CHECK_EQ_INT(cdn_file_decode(buf, (size_t) n, &r), 0);
    CHECK(r.op == CDN_FILE_READ && r.opts.flags == 0 && r.opts.window == 2u << 20 &&
          r.opts.max_bytes == 3ULL << 30 && r.data_len == 0);
    CHECK_STREQ(r.path, "/w/big");
    for (int cut = 8 + 7 + 1; cut < n; cut++) /* options cut short */
        CHECK(cdn_file_decode(buf, (size_t) cut, &r) < 0);
    CHECK(cdn_file_decode(buf, (size_t) n - 16, &r) == 0 && r.opts.window == 0 && r.opts.max_bytes == 0);
    n = cdn_file_encode_opts(buf, sizeof buf, CDN_FILE_STAT, 0, "/l",
                             &(struct cdn_file_opts){.flags = CDN_FILE_NOFOLLOW});
    CHECK(cdn_file_decode(buf, (size_t) n, &r) == 0 && r.opts.flags == CDN_FILE_NOFOLLOW);
    n = cdn_file_encode_opts(buf, sizeof buf, CDN_FILE_STAT, 0, "/l",
                             &(struct cdn_file_opts){.flags = CDN_FILE_NOREPLACE});
    CHECK(cdn_file_decode(buf, (size_t) n, &r) < 0); /* another op's flag */
    n = cdn_file_encode_opts(buf, sizeof buf, CDN_FILE_STAT, 0, "/l",
                             &(struct cdn_file_opts){.flags = 1u << 7});
    CHECK(cdn_file_decode(buf, (size_t) n, &r) < 0); /* an unknown flag */
    buf[n] = 0;
    CHECK(cdn_file_decode(buf, (size_t) n + 1, &r) < 0); /* a byte past the options */
    CHECK_EQ_INT(cdn_file_encode_opts(buf, sizeof buf, CDN_FILE_WRITE, 0, "/x", &o), -EINVAL);
    CHECK_EQ_INT(cdn_file_encode_opts(buf, 20, CDN_FILE_READ, 0, "/x", &o), -ENOBUFS);
}

TEST(window_and_protected_payloads)
{
    uint32_t w;
    CHECK(cdn_window_decode((const uint8_t[]){0, 0, 4, 0}, 4, &w) == 0 && w == 1u << 18);
    CHECK(cdn_window_decode((const uint8_t[]){0, 0, 0, 0}, 4, &w) < 0); /* nothing granted */
    CHECK(cdn_window_decode((const uint8_t[]){1, 0, 0}, 3, &w) < 0);
    CHECK(cdn_window_decode((const uint8_t[]){1, 0, 0, 0, 0}, 5, &w) < 0);

    static uint64_t ids[CDN_PROTECTED_MAX], back[CDN_PROTECTED_MAX];
    static uint8_t buf[4 + 8 * (CDN_PROTECTED_MAX + 1)];
    ids[0] = 31, ids[1] = 1ULL << 40, ids[2] = 7;
    uint32_t n = 0;
    int len = cdn_protected_encode(buf, sizeof buf, ids, 3);
    CHECK_EQ_INT(len, 4 + 24);
    CHECK(cdn_protected_decode(buf, (size_t) len, back, &n) == 0 && n == 3 && back[1] == 1ULL << 40 &&
          back[2] == 7);
    CHECK(cdn_protected_decode(buf, (size_t) len - 1, back, &n) < 0); /* fewer ids than announced */
    CHECK(cdn_protected_decode(buf, (size_t) len + 8, back, &n) < 0); /* more */
    CHECK(cdn_protected_decode(buf, 3, back, &n) < 0);
    len = cdn_protected_encode(buf, sizeof buf, ids, 0);
    CHECK(cdn_protected_decode(buf, (size_t) len, back, &n) == 0 && n == 0);
    CHECK_EQ_INT(cdn_protected_encode(buf, sizeof buf, ids, CDN_PROTECTED_MAX + 1), -ENOBUFS);
    buf[0] = (uint8_t) (CDN_PROTECTED_MAX + 1), buf[1] = (uint8_t) ((CDN_PROTECTED_MAX + 1) >> 8);
    CHECK(cdn_protected_decode(buf, 4 + 8 * (CDN_PROTECTED_MAX + 1), back, &n) < 0); /* too many */
}

TEST(file_rename_roundtrip_and_rejects)
{
    uint8_t buf[256];
    struct cdn_file_req r;
    int n = cdn_file_encode_to(buf, sizeof buf, CDN_FILE_RENAME, "/w/a", "/w/d/b", CDN_FILE_NOREPLACE);
    CHECK(n > 0);
    CHECK_EQ_INT(cdn_file_decode(buf, (size_t) n, &r), 0);
    CHECK(r.op == CDN_FILE_RENAME && strcmp(r.path, "/w/a") == 0 && strcmp(r.to, "/w/d/b") == 0 &&
          r.opts.flags == CDN_FILE_NOREPLACE && r.data_len == 0);
    for (int cut = 0; cut < n; cut++) /* every prefix: the destination or its NUL missing */
        CHECK(cdn_file_decode(buf, (size_t) cut, &r) < 0);
    buf[n] = 'x';
    CHECK(cdn_file_decode(buf, (size_t) n + 1, &r) < 0); /* a byte past the destination */
    n = cdn_file_encode_to(buf, sizeof buf, CDN_FILE_RENAME, "/w/a", "/b", CDN_FILE_NOFOLLOW);
    CHECK(cdn_file_decode(buf, (size_t) n, &r) < 0); /* STAT's flag */
    CHECK_EQ_INT(cdn_file_encode_to(buf, sizeof buf, CDN_FILE_RENAME, "/w/a", "", 0), -ENOBUFS);
    CHECK_EQ_INT(cdn_file_encode_to(buf, 30, CDN_FILE_RENAME, "/w/a", "/a/destination/too/long/for/it", 0),
                 -ENOBUFS);
    n = cdn_file_encode_to(buf, sizeof buf, CDN_FILE_SYMLINK, "/w/l", "../t", 0);
    CHECK(cdn_file_decode(buf, (size_t) n, &r) == 0 && r.op == CDN_FILE_SYMLINK && strcmp(r.to, "../t") == 0);
    CHECK_EQ_INT(cdn_file_encode_to(buf, sizeof buf, CDN_FILE_SYMLINK, "/w/l", "t", CDN_FILE_NOREPLACE), 31);
    CHECK(cdn_file_decode(buf, 31, &r) < 0); /* RENAME's flag */
    CHECK_EQ_INT(cdn_file_encode_to(buf, sizeof buf, CDN_FILE_STAT, "/w/l", "t", 0), -EINVAL);
    n = cdn_file_encode(buf, sizeof buf, CDN_FILE_CHMOD, 0755, "/w/x", NULL, 0);
    CHECK(cdn_file_decode(buf, (size_t) n, &r) == 0 && r.mode == 0755 && r.to == NULL);
}

TEST(file_stat_entries)
{
    uint8_t buf[256];
    struct cdn_file_stat st = {.mode = 040755, .size = 1ULL << 40, .mtime = -5, .name = "dir"}, d;
    int n = cdn_file_stat_encode(buf, sizeof buf, &st);
    CHECK_EQ_INT(n, 20 + 4);
    int m = cdn_file_stat_encode(buf + n, sizeof buf - (size_t) n, &(struct cdn_file_stat){.mode = 0100644});
    CHECK_EQ_INT(m, 21);
    CHECK_EQ_INT(cdn_file_stat_decode(buf, (size_t) (n + m), &d), n);
    CHECK_EQ_INT(d.mode, 040755);
    CHECK(d.size == 1ULL << 40 && d.mtime == -5);
    CHECK_STREQ(d.name, "dir");
    CHECK_EQ_INT(cdn_file_stat_decode(buf + n, (size_t) m, &d), m);
    CHECK_STREQ(d.name, "");
    for (int cut = 0; cut < n; cut++)
        CHECK(cdn_file_stat_decode(buf, (size_t) cut, &d) < 0);
    /* with its owner (CDN_FILE_OWNERS) */
    st = (struct cdn_file_stat){
        .mode = 0100600, .name = "f", .uid = 1000, .gid = 5, .owner = "user", .group = "tty"};
    n = cdn_file_stat_encode(buf, sizeof buf, &st);
    CHECK_EQ_INT(n, 20 + 2 + 8 + 5 + 4);
    CHECK_EQ_INT(cdn_file_stat_decode_owned(buf, (size_t) n, &d), n);
    CHECK(d.uid == 1000 && d.gid == 5 && d.mode == 0100600);
    CHECK_STREQ(d.owner, "user");
    CHECK_STREQ(d.group, "tty");
    CHECK_STREQ(d.name, "f");
    CHECK_EQ_INT(cdn_file_stat_decode(buf, (size_t) n, &d), 22); /* without: the owner is left over */
    CHECK(d.owner == NULL);
    for (int cut = 0; cut < n; cut++)
        CHECK(cdn_file_stat_decode_owned(buf, (size_t) cut, &d) < 0);
    CHECK_EQ_INT(cdn_file_stat_encode(buf, 30, &st), -ENOBUFS);
}

TEST(owners_flag_where_it_means_something)
{
    uint8_t buf[256];
    struct cdn_file_req r;
    struct cdn_file_opts o = {.flags = CDN_FILE_OWNERS};
    const uint32_t with[] = {CDN_FILE_STAT, CDN_FILE_LIST, CDN_FILE_MKDIR};
    for (size_t i = 0; i < 3; i++) {
        int n = cdn_file_encode_opts(buf, sizeof buf, with[i], 0, "/x", &o);
        CHECK(cdn_file_decode(buf, (size_t) n, &r) == 0 && r.opts.flags == CDN_FILE_OWNERS);
    }
    int n = cdn_file_encode_to(buf, sizeof buf, CDN_FILE_RENAME, "/a", "/b",
                               CDN_FILE_OWNERS | CDN_FILE_NOREPLACE);
    CHECK_EQ_INT(cdn_file_decode(buf, (size_t) n, &r), 0);
    n = cdn_file_encode_opts(buf, sizeof buf, CDN_FILE_READ, 0, "/x", &o); /* a read has no entries */
    CHECK(cdn_file_decode(buf, (size_t) n, &r) < 0);
    n = cdn_file_encode_to(buf, sizeof buf, CDN_FILE_SYMLINK, "/a", "/b", CDN_FILE_OWNERS);
    CHECK(cdn_file_decode(buf, (size_t) n, &r) < 0);
}

TEST(exit_and_error_payloads)
{
    uint8_t buf[512];
    struct cdn_exit_msg m = {.exit_code = 3, .signal = 0, .user_us = 5, .sys_us = 6, .maxrss_kb = 7}, d;
    int n = cdn_exit_encode(buf, sizeof buf, &m);
    CHECK_EQ_INT(n, 32);
    CHECK_EQ_INT(cdn_exit_decode(buf, (size_t) n, &d), 0);
    CHECK_EQ_INT(d.exit_code, 3);
    CHECK_EQ_INT(d.maxrss_kb, 7);
    CHECK(cdn_exit_decode(buf, 31, &d) < 0);
    buf[4] = 200; /* signal out of range */
    CHECK(cdn_exit_decode(buf, 32, &d) < 0);
    int e;
    const char *msg;
    n = cdn_errmsg_encode(buf, sizeof buf, ENOENT, "nope");
    CHECK_EQ_INT(cdn_errmsg_decode(buf, (size_t) n, &e, &msg), 0);
    CHECK_EQ_INT(e, ENOENT);
    CHECK_STREQ(msg, "nope");
    CHECK(cdn_errmsg_decode(buf, (size_t) n - 1, &e, &msg) < 0);
}

TEST(send_recv_over_socketpair)
{
    int sv[2];
    CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    CHECK_EQ_INT(cdn_frame_send(sv[0], CDN_FRAME_PING, 9, "abc", 3), 0);
    uint8_t buf[16];
    struct cdn_frame_header h;
    CHECK_EQ_INT(cdn_frame_recv(sv[1], &h, buf, sizeof buf), 3);
    CHECK_EQ_INT(h.type, CDN_FRAME_PING);
    CHECK_EQ_INT(h.channel, 9);
    CHECK(memcmp(buf, "abc", 3) == 0);
    close(sv[0]);
    CHECK_EQ_INT(cdn_frame_recv(sv[1], &h, buf, sizeof buf), -ECONNRESET);
    close(sv[1]);
}

TEST(identity_roundtrip_and_rejects)
{
    struct cdn_identity id = {.time_ns = 1234567890123456789ull,
                              .ip = 0x0a000102,
                              .gateway = 0x0a000101,
                              .resolver = 0x0a000101,
                              .prefix = 30,
                              .hostname = "guest",
                              .workdir = "/srv/work",
                              .n_paths = 2,
                              .paths = {{CDN_PATH_BIND_RO, "/probe"}, {CDN_PATH_PROTECT, "/srv/tests"}}},
                        d;
    memset(id.seed, 0xab, sizeof id.seed);
    memset(id.machine_id, 0x5a, sizeof id.machine_id);
    static uint8_t buf[16384];
    int n = cdn_identity_encode(buf, sizeof buf, &id);
    CHECK(n > 0);
    CHECK_EQ_INT(cdn_identity_decode(buf, (size_t) n, &d), 0);
    CHECK(d.time_ns == id.time_ns && d.ip == id.ip && d.gateway == id.gateway && d.resolver == id.resolver);
    CHECK_EQ_INT(d.prefix, 30);
    CHECK(memcmp(d.seed, id.seed, sizeof id.seed) == 0 && memcmp(d.machine_id, id.machine_id, 16) == 0);
    CHECK_STREQ(d.hostname, "guest");
    CHECK_STREQ(d.workdir, "/srv/work");
    CHECK_EQ_INT(d.n_paths, 2);
    CHECK(d.paths[0].kind == CDN_PATH_BIND_RO && d.paths[1].kind == CDN_PATH_PROTECT);
    CHECK_STREQ(d.paths[0].path, "/probe");
    CHECK_STREQ(d.paths[1].path, "/srv/tests");
    CHECK(cdn_identity_decode(buf, (size_t) n - 1, &d) < 0); /* no final NUL */
    CHECK(cdn_identity_decode(buf, (size_t) n + 1, &d) < 0); /* a byte after the last path */
    buf[n - 1 - strlen("/srv/tests")] = 'x';                 /* a relative path */
    CHECK_EQ_INT(cdn_identity_decode(buf, (size_t) n, &d), -EBADMSG);
    buf[n - 1 - strlen("/srv/tests")] = '/';
    buf[n - 2 - strlen("/srv/tests")] = 9; /* an unknown kind */
    CHECK_EQ_INT(cdn_identity_decode(buf, (size_t) n, &d), -EBADMSG);
    id.prefix = 31;
    CHECK(cdn_identity_encode(buf, sizeof buf, &id) < 0);
    id.prefix = 30;
    /* The spec's user: a name, not a path; empty or with a '/' it is refused both ways. */
    id.n_paths = 3;
    id.paths[2].kind = CDN_PATH_USER;
    (void) snprintf(id.paths[2].path, sizeof id.paths[2].path, "dev:1000");
    CHECK((n = cdn_identity_encode(buf, sizeof buf, &id)) > 0);
    CHECK_EQ_INT(cdn_identity_decode(buf, (size_t) n, &d), 0);
    CHECK(d.n_paths == 3 && d.paths[2].kind == CDN_PATH_USER);
    CHECK_STREQ(d.paths[2].path, "dev:1000");
    buf[n - 2] = '/'; /* "dev:100/" */
    CHECK_EQ_INT(cdn_identity_decode(buf, (size_t) n, &d), -EBADMSG);
    id.paths[2].path[0] = 0;
    CHECK(cdn_identity_encode(buf, sizeof buf, &id) < 0);
    (void) snprintf(id.paths[2].path, sizeof id.paths[2].path, "a/b");
    CHECK(cdn_identity_encode(buf, sizeof buf, &id) < 0);
    id.n_paths = 2;
    id.workdir[0] = 0; /* a workdir is required */
    CHECK(cdn_identity_encode(buf, sizeof buf, &id) < 0);
}

TEST(usage_payload_old_and_new)
{
    struct cdn_usage_msg u = {.memory_peak_bytes = 7,
                              .oom_kills = 1,
                              .pids_max_hits = 2,
                              .disk_full = true,
                              .pids = 12,
                              .disk_used_bytes = 4096,
                              .disk_size_bytes = 1 << 20},
                         d;
    uint8_t b[64];
    int n = cdn_usage_encode(b, sizeof b, &u);
    CHECK_EQ_INT(n, 49);
    CHECK_EQ_INT(cdn_usage_decode(b, (size_t) n, &d), 0);
    CHECK(d.now_known && d.pids == 12 && d.disk_used_bytes == 4096 && d.disk_size_bytes == 1 << 20);
    CHECK_EQ_INT(cdn_usage_decode(b, 25, &d), 0); /* an older init's report */
    CHECK(!d.now_known && d.oom_kills == 1 && d.disk_full);
    CHECK(cdn_usage_decode(b, 30, &d) < 0);
    u.disk_used_bytes = u.disk_size_bytes + 1; /* more used than there is */
    n = cdn_usage_encode(b, sizeof b, &u);
    CHECK_EQ_INT(cdn_usage_decode(b, (size_t) n, &d), -EBADMSG);
}

TEST(tcp_open_payload)
{
    uint8_t p[6];
    uint16_t port;
    uint32_t window;
    cdn_tcp_open_encode(p, 8000, 1u << 18);
    CHECK_EQ_INT(cdn_tcp_open_decode(p, sizeof p, &port, &window), 0);
    CHECK(port == 8000 && window == 1u << 18);
    CHECK_EQ_INT(cdn_tcp_open_decode(p, sizeof p - 1, &port, &window), -EBADMSG);
    cdn_tcp_open_encode(p, 0, 1);
    CHECK_EQ_INT(cdn_tcp_open_decode(p, sizeof p, &port, &window), -EBADMSG); /* port 0 */
    cdn_tcp_open_encode(p, 1, 0);
    CHECK_EQ_INT(cdn_tcp_open_decode(p, sizeof p, &port, &window), -EBADMSG); /* no window */
    uint8_t w[4];
    uint32_t more;
    cdn_window_encode(w, 65536);
    CHECK_EQ_INT(cdn_window_decode(w, sizeof w, &more), 0);
    CHECK(more == 65536);
}

TEST(connect_envelopes)
{
    uint8_t b[64];
    struct cdn_connect_envelope e;
    cdn_connect_header(b, 0, 11);
    memcpy(b + 5, "{\"a\":true}", 11);
    CHECK_EQ_INT(cdn_connect_decode(b, 16, &e), 16);
    CHECK(e.flags == 0 && e.len == 11 && e.data == b + 5);
    CHECK_EQ_INT(cdn_connect_decode(b, 15, &e), 0); /* part of it */
    CHECK_EQ_INT(cdn_connect_decode(b, 4, &e), 0);
    cdn_connect_header(b, CDN_CONNECT_END_STREAM, 0);
    CHECK_EQ_INT(cdn_connect_decode(b, 5, &e), 5);
    CHECK(e.flags == CDN_CONNECT_END_STREAM && e.len == 0);
    cdn_connect_header(b, CDN_CONNECT_COMPRESSED, 0);
    CHECK_EQ_INT(cdn_connect_decode(b, 5, &e), -ENOTSUP);
    cdn_connect_header(b, 0x80, 0);
    CHECK_EQ_INT(cdn_connect_decode(b, 5, &e), -EBADMSG);
    cdn_connect_header(b, 0, CDN_CONNECT_MAX + 1);
    CHECK_EQ_INT(cdn_connect_decode(b, 5, &e), -E2BIG); /* refused before its bytes arrive */
    cdn_connect_header(b, 0, 0xffffffffu);
    CHECK(b[1] == 0xff && b[4] == 0xff);
    CHECK_EQ_INT(cdn_connect_decode(b, 5, &e), -E2BIG);
}

TEST(protect_list_payload)
{
    static uint8_t b[4 + CDN_PROTECT_LIST_MAX * (CDN_PROTECT_PATTERN_MAX + 1) + 8];
    const char *in[] = {"/workspace/answer.key", "/workspace/tests/**"}, *out[CDN_PROTECT_LIST_MAX];
    size_t n = 99;
    int len = cdn_protect_list_encode(b, sizeof b, in, 2);
    CHECK(len == 4 + 22 + 20);
    CHECK_EQ_INT(cdn_protect_list_decode(b, (size_t) len, out, &n), 0);
    CHECK(n == 2 && strcmp(out[0], in[0]) == 0 && strcmp(out[1], in[1]) == 0);
    CHECK_EQ_INT(cdn_protect_list_decode(b, (size_t) len - 1, out, &n), -EBADMSG); /* no NUL at the end */
    CHECK_EQ_INT(cdn_protect_list_decode(b, (size_t) len + 1, out, &n), -EBADMSG); /* bytes past the last */
    len = cdn_protect_list_encode(b, sizeof b, in, 0);
    CHECK_EQ_INT(cdn_protect_list_decode(b, (size_t) len, out, &n), 0);
    CHECK(n == 0);
    memcpy(b, "\x02\0\0\0/a\0\0", 8); /* an empty pattern */
    CHECK_EQ_INT(cdn_protect_list_decode(b, 8, out, &n), -EBADMSG);
    memcpy(b, "\x21\0\0\0", 4); /* 33 patterns */
    CHECK_EQ_INT(cdn_protect_list_decode(b, 4, out, &n), -EBADMSG);
    static char longp[CDN_PROTECT_PATTERN_MAX + 2];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/';
    const char *too_long[] = {longp};
    CHECK(cdn_protect_list_encode(b, sizeof b, too_long, 1) == -ENOBUFS);
    b[0] = 1, b[1] = b[2] = b[3] = 0;
    memcpy(b + 4, longp, sizeof longp); /* its NUL included: one byte past the limit */
    CHECK_EQ_INT(cdn_protect_list_decode(b, 4 + sizeof longp, out, &n), -EBADMSG);
}

TEST(policy_and_violation_payloads)
{
    uint8_t p[6 + 3 * 8] = {1, 0, 2, 0, 1, 0};
    struct cdn_policy pol;
    CHECK_EQ_INT(cdn_policy_decode(p, sizeof p, &pol), 0);
    CHECK(pol.flags == CDN_POLICY_KILL && pol.len[0] == 2 && pol.len[1] == 1 && pol.insns == p + 6);
    CHECK(cdn_policy_decode(p, sizeof p - 8, &pol) < 0); /* fewer instructions than announced */
    p[0] = 4;                                            /* an unknown flag */
    CHECK(cdn_policy_decode(p, sizeof p, &pol) < 0);
    p[0] = 0, p[2] = 0; /* an empty program */
    CHECK(cdn_policy_decode(p, sizeof p - 16, &pol) < 0);

    struct cdn_violation_msg v = {.kind = CDN_VIOLATION_MSG_SYSCALL,
                                  .nr = 272,
                                  .arch = 0xc000003e,
                                  .pid = 42,
                                  .args = {1, 2, 3, 4, 5, 6}},
                             d;
    (void) snprintf(v.cmd, sizeof v.cmd, "unshare -U true");
    uint8_t buf[1024];
    int n = cdn_violation_encode(buf, sizeof buf, &v);
    CHECK(n > 0);
    CHECK_EQ_INT(cdn_violation_decode(buf, (size_t) n, &d), 0);
    CHECK(d.kind == CDN_VIOLATION_MSG_SYSCALL && d.nr == 272 && d.arch == 0xc000003e && d.pid == 42 &&
          d.args[5] == 6);
    CHECK_STREQ(d.cmd, "unshare -U true");
    CHECK(d.path[0] == 0 && d.op[0] == 0);
    CHECK(cdn_violation_decode(buf, (size_t) n - 1, &d) < 0); /* no final NUL */
    CHECK(cdn_violation_decode(buf, (size_t) n + 1, &d) < 0); /* a byte after it */
    v.kind = CDN_VIOLATION_MSG_PROTECT;
    (void) snprintf(v.path, sizeof v.path, "/workspace/tests/secret");
    (void) snprintf(v.op, sizeof v.op, "open");
    n = cdn_violation_encode(buf, sizeof buf, &v);
    CHECK_EQ_INT(cdn_violation_decode(buf, (size_t) n, &d), 0);
    CHECK_STREQ(d.path, "/workspace/tests/secret");
    CHECK_STREQ(d.op, "open");
    v.kind = CDN_VIOLATION_MSG_SYMLINK; /* the files API: path reached, cmd the request's path */
    (void) snprintf(v.cmd, sizeof v.cmd, "/workspace/result.txt");
    (void) snprintf(v.op, sizeof v.op, "read");
    n = cdn_violation_encode(buf, sizeof buf, &v);
    CHECK(cdn_violation_decode(buf, (size_t) n, &d) == 0 && d.kind == CDN_VIOLATION_MSG_SYMLINK);
    CHECK_STREQ(d.cmd, "/workspace/result.txt");
    buf[0] = 9; /* an unknown kind */
    CHECK(cdn_violation_decode(buf, (size_t) n, &d) < 0);
}
