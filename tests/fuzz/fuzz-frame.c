/* Fuzz the agent frame decoders: what cordon-init reads from the host and
 * what the host reads from a (possibly compromised) sandbox. */
#include "proto/frame.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct cdn_exec_req req;
    struct cdn_frame_header h;
    struct cdn_exit_msg m;
    int e;
    const char *msg;
    if (size >= CDN_FRAME_HEADER)
        (void) cdn_frame_header_decode(data, &h);
    (void) cdn_exec_decode(data, size, &req);
    (void) cdn_exit_decode(data, size, &m);
    (void) cdn_errmsg_decode(data, size, &e, &msg);
    struct cdn_file_req f;
    if (cdn_file_decode(data, size, &f) == 0 && f.op != CDN_FILE_WRITE && size > 8) { /* round trip */
        static uint8_t out[CDN_FRAME_MAX];
        int n = f.to ? cdn_file_encode_to(out, sizeof out, f.op, f.path, f.to, f.opts.flags)
                     : cdn_file_encode_opts(out, sizeof out, f.op, f.mode, f.path, &f.opts);
        if (n >= 0 && f.user) /* CDN_FILE_AS_USER: the user after the path */
            n = cdn_file_set_user(out, sizeof out, (size_t) n, f.user);
        bool had_opts = size == 8 + strlen(f.path) + 1 + (f.user ? strlen(f.user) + 1 : 0) + CDN_FILE_OPTS +
                                    (f.to ? strlen(f.to) + 1 : 0);
        if (n < 0 || (had_opts && ((size_t) n != size || memcmp(out, data, size) != 0)))
            __builtin_trap();
    }
    uint32_t w;
    (void) cdn_window_decode(data, size, &w);
    static uint64_t ids[CDN_PROTECTED_MAX];
    uint32_t nids;
    if (cdn_protected_decode(data, size, ids, &nids) == 0) { /* round trip */
        static uint8_t out[4 + 8 * CDN_PROTECTED_MAX];
        int n = cdn_protected_encode(out, sizeof out, ids, nids);
        if (n != (int) size || memcmp(out, data, size) != 0)
            __builtin_trap();
    }
    struct cdn_identity id;
    if (cdn_identity_decode(data, size, &id) == 0) { /* round trip: what decodes encodes back the same */
        static uint8_t out[16384];
        int n = cdn_identity_encode(out, sizeof out, &id);
        if (n != (int) size || memcmp(out, data, size) != 0)
            __builtin_trap();
    }
    struct cdn_policy pol;
    (void) cdn_policy_decode(data, size, &pol);
    static struct cdn_violation_msg v;
    if (cdn_violation_decode(data, size, &v) == 0) { /* round trip */
        static uint8_t out[1024];
        int n = cdn_violation_encode(out, sizeof out, &v);
        if (n != (int) size || memcmp(out, data, size) != 0)
            __builtin_trap();
    }
    struct cdn_usage_msg u; /* a guest's USAGE: what it says is shown on the host */
    if (cdn_usage_decode(data, size, &u) == 0 && size == 49) {
        uint8_t out[64];
        if (cdn_usage_encode(out, sizeof out, &u) != 49 || memcmp(out, data, 49) != 0)
            __builtin_trap();
    }
    uint16_t port;
    uint32_t window;
    if (cdn_tcp_open_decode(data, size, &port, &window) == 0) { /* TCP (init-tcp.c) */
        uint8_t out[6];
        cdn_tcp_open_encode(out, port, window);
        if (memcmp(out, data, 6) != 0)
            __builtin_trap();
    }
    const char *pats[CDN_PROTECT_LIST_MAX];
    size_t n_pats;
    if (cdn_protect_list_decode(data, size, pats, &n_pats) == 0) { /* PROTECT (init-vm-protect.c) */
        static uint8_t out[4 + CDN_PROTECT_LIST_MAX * (CDN_PROTECT_PATTERN_MAX + 1)];
        int n = cdn_protect_list_encode(out, sizeof out, pats, n_pats);
        if (n < 0 || (size_t) n != size || memcmp(out, data, size) != 0)
            __builtin_trap();
    }
    struct cdn_file_stat st;
    for (int owned = 0; owned < 2; owned++) /* a LIST reply: entries back to back, owners or not */
        for (size_t off = 0; off < size;) {
            int n = owned ? cdn_file_stat_decode_owned(data + off, size - off, &st)
                          : cdn_file_stat_decode(data + off, size - off, &st);
            if (n <= 0)
                break;
            static uint8_t out[CDN_FRAME_MAX]; /* round trip: each entry encodes back the same */
            if (cdn_file_stat_encode(out, sizeof out, &st) != n || memcmp(out, data + off, (size_t) n) != 0)
                __builtin_trap();
            off += (size_t) n;
        }
    return 0;
}
