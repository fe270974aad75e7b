#include "agent/frame.h"
#include "tap.h"

#include <errno.h>
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
    int n = cdn_exec_encode(buf, sizeof buf, CDN_EXEC_SHUTDOWN_ON_EXIT, "/w", argv, envp);
    CHECK(n > 0);
    CHECK_EQ_INT(cdn_exec_decode(buf, (size_t) n, &r), 0);
    CHECK_EQ_INT(r.argc, 3);
    CHECK_STREQ(r.argv[2], "echo hi");
    CHECK(r.argv[3] == NULL);
    CHECK_STREQ(r.envp[0], "A=1");
    CHECK_STREQ(r.cwd, "/w");
    CHECK_EQ_INT(r.flags, CDN_EXEC_SHUTDOWN_ON_EXIT);
    /* every truncation is rejected, never read past */
    for (int cut = 0; cut < n; cut++)
        CHECK(cdn_exec_decode(buf, (size_t) cut, &r) < 0);
    buf[n - 1] = 'x'; /* missing final NUL */
    CHECK(cdn_exec_decode(buf, (size_t) n, &r) < 0);
    CHECK_EQ_INT(cdn_exec_encode(buf, 8, 0, "/", argv, envp), -ENOBUFS);
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
