/* The DNS stub, in-process on loopback: a fake upstream server (evdns server
 * port on 127.0.0.1), the stub resolving through it, and clients on 127.0.0.x
 * (an evdns_base, or raw packets where evdns would hide the rcode or cannot
 * ask the question). Nothing leaves the loopback interface. */
#include "net/dns-stub.h"
#include "tap.h"

#include <arpa/inet.h>
#include <event2/dns_struct.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define LOCALHOST 0x7f000001u
#define WAIT_MS   5000

struct audit_rec {
    char proto[8], name[256], qtype[16], reason[64], answers[256];
    bool allowed, has_answers;
    uint32_t dst_ip;
    uint16_t dst_port;
};

struct answer {
    int done, err, type, count, ttl;
    uint32_t addrs[8]; /* host byte order */
};

struct fixture {
    struct event_base *base;
    struct event *tick, *raw_ev;
    struct evdns_base *upstream, *client;
    struct evdns_server_port *fake;
    struct evdns_server_request *held; /* the fake's delayed answer */
    int fake_queries;
    struct cdn_dns_stub *stub;
    struct cdn_egress_box box;
    bool box_gone;
    int lookups;
    struct audit_rec audits[128];
    int n_audits;
    char flags[8][16], flag_detail[8][256];
    long flag_names[8], flag_bytes[8]; /* a dns-budget alert's counts */
    int n_flags;
    struct cdn_dns_budget_cfg budget;
    struct answer ans;
    int raw_fd, raw_replies;
    uint8_t raw_reply[1500];
    ssize_t raw_len;
};

/* --- the fake upstream -------------------------------------------------- */

static const struct {
    const char *name;
    const char *addrs[2];
    int ttl;
} zone[] = {
    {"pypi.org", {"151.101.0.223"}, 3600},
    {"www.example.com", {"93.184.216.34", "93.184.216.35"}, 30},
    {"meta.example.com", {"169.254.169.254"}, 30},
    {"mixed.example.com", {"93.184.216.36", "10.0.0.5"}, 30},
    {"open.test.org", {"151.101.64.223"}, 30},
};

static void fake_answer(struct evdns_server_request *req, const char *a0, const char *a1, int ttl)
{
    uint32_t addrs[2];
    int n = 0;
    if (a0)
        (void) inet_pton(AF_INET, a0, &addrs[n++]);
    if (a1)
        (void) inet_pton(AF_INET, a1, &addrs[n++]);
    (void) evdns_server_request_add_a_reply(req, req->questions[0]->name, n, addrs, ttl);
    (void) evdns_server_request_respond(req, 0);
}

static void fake_cb(struct evdns_server_request *req, void *arg)
{
    struct fixture *f = arg;
    f->fake_queries++;
    if (req->nquestions != 1 || req->questions[0]->type != EVDNS_TYPE_A) {
        (void) evdns_server_request_respond(req, DNS_ERR_FORMAT);
        return;
    }
    const char *name = req->questions[0]->name; /* 0x20-randomised by the stub's resolver */
    for (size_t i = 0; i < ELEMENTSOF(zone); i++)
        if (strcasecmp(name, zone[i].name) == 0) {
            fake_answer(req, zone[i].addrs[0], zone[i].addrs[1], zone[i].ttl);
            return;
        }
    if (strcasecmp(name, "broken.example.com") == 0)
        (void) evdns_server_request_respond(req, DNS_ERR_SERVERFAILED);
    else if (strcasecmp(name, "slow.example.com") == 0 && !f->held)
        f->held = req;
    else
        (void) evdns_server_request_respond(req, DNS_ERR_NOTEXIST);
}

/* --- the owner's side (ops) --------------------------------------------- */

static struct cdn_egress_box *op_lookup(void *arg, uint32_t src)
{
    struct fixture *f = arg;
    f->lookups++;
    return src == LOCALHOST && !f->box_gone ? &f->box : NULL;
}

static void op_audit(void *arg, struct cdn_egress_box *b, const struct cdn_audit *a)
{
    struct fixture *f = arg;
    CHECK(b == &f->box);
    if (f->n_audits < (int) ELEMENTSOF(f->audits)) {
        struct audit_rec *r = &f->audits[f->n_audits];
        snprintf(r->proto, sizeof r->proto, "%s", a->proto ? a->proto : "");
        snprintf(r->name, sizeof r->name, "%s", a->name ? a->name : "");
        snprintf(r->qtype, sizeof r->qtype, "%s", a->qtype ? a->qtype : "");
        snprintf(r->reason, sizeof r->reason, "%s", a->reason ? a->reason : "");
        snprintf(r->answers, sizeof r->answers, "%s", a->answers ? a->answers : "");
        r->has_answers = a->answers != NULL;
        r->allowed = a->allowed;
        r->dst_ip = a->dst_ip;
        r->dst_port = a->dst_port;
    }
    f->n_audits++;
}

static void op_flag(void *arg, struct cdn_egress_box *b, const char *what, const char *detail, json_t *fields)
{
    struct fixture *f = arg;
    CHECK(b == &f->box);
    if (f->n_flags < (int) ELEMENTSOF(f->flags)) {
        snprintf(f->flags[f->n_flags], sizeof f->flags[0], "%s", what);
        snprintf(f->flag_detail[f->n_flags], sizeof f->flag_detail[0], "%s", detail);
        f->flag_names[f->n_flags] = fields ? (long) json_integer_value(json_object_get(fields, "names")) : -1;
        f->flag_bytes[f->n_flags] = fields ? (long) json_integer_value(json_object_get(fields, "bytes")) : -1;
    }
    f->n_flags++;
}

/* --- plumbing ----------------------------------------------------------- */

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what, (void) arg;
}

static void quiet_log(int severity, const char *msg)
{
    (void) severity, (void) msg; /* "All nameservers have failed" after a REFUSED: expected here */
}

static void raw_cb(evutil_socket_t fd, short what, void *arg)
{
    struct fixture *f = arg;
    (void) what;
    ssize_t n = recv(fd, f->raw_reply, sizeof f->raw_reply, 0);
    if (n > 0) {
        f->raw_len = n;
        f->raw_replies++;
    }
}

/* Run the loop until *v reaches target; false after WAIT_MS. */
static bool wait_for(struct fixture *f, const int *v, int target)
{
    uint64_t deadline = cdn_now_ms() + WAIT_MS;
    while (*v < target) {
        if (cdn_now_ms() > deadline)
            return false;
        (void) event_base_loop(f->base, EVLOOP_ONCE);
    }
    return true;
}

/* Run the loop for ms, for what must not happen. */
static void run_for(struct fixture *f, int ms)
{
    uint64_t end = cdn_now_ms() + (uint64_t) ms;
    while (cdn_now_ms() < end)
        (void) event_base_loop(f->base, EVLOOP_ONCE);
}

static int udp_socket(uint32_t addr, uint16_t *ret_port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(addr)};
    socklen_t len = sizeof sin;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *) &sin, sizeof sin) < 0 ||
        getsockname(fd, (struct sockaddr *) &sin, &len) < 0) {
        close(fd);
        return -1;
    }
    if (ret_port)
        *ret_port = ntohs(sin.sin_port);
    return fd;
}

static struct evdns_base *resolver(struct fixture *f, uint16_t port)
{
    char ns[32];
    struct evdns_base *d = evdns_base_new(f->base, 0);
    snprintf(ns, sizeof ns, "127.0.0.1:%u", port);
    CHECK(d && evdns_base_nameserver_ip_add(d, ns) == 0);
    /* No probe of a server marked down during a test (it would be a question). */
    CHECK(evdns_base_set_option(d, "initial-probe-timeout:", "3600") == 0);
    return d;
}

static int set_allow(struct cdn_allowlist *l, const char *const *entries)
{
    struct cdn_strv v = {0};
    struct cdn_error err = {0};
    int r = 0;
    for (size_t i = 0; entries[i] && r >= 0; i++)
        r = cdn_strv_push(&v, entries[i]);
    if (r >= 0) {
        cdn_allowlist_free(l);
        r = cdn_allowlist_parse(&v, l, &err);
    }
    cdn_strv_free(&v);
    return r;
}

static void setup(struct fixture *f)
{
    static const char *const allow[] = {"pypi.org:443", "*.example.com", NULL};
    uint16_t fake_port = 0, raw_port = 0;
    int fd;

    *f = (struct fixture){.raw_fd = -1};
    evdns_set_log_fn(quiet_log);
    f->base = event_base_new();
    CHECK(f->base);
    f->tick = event_new(f->base, -1, EV_PERSIST, tick_cb, NULL);
    CHECK(f->tick && event_add(f->tick, &(struct timeval){0, 10000}) == 0);

    fd = udp_socket(LOCALHOST, &fake_port);
    CHECK(fd >= 0);
    f->fake = evdns_add_server_port_with_base(f->base, fd, 0, fake_cb, f);
    CHECK(f->fake);
    f->upstream = resolver(f, fake_port);

    f->box = (struct cdn_egress_box){.id = "box1", .sandbox_ip = LOCALHOST, .mode = CDN_NET_ALLOWLIST};
    f->box.pins = cdn_pins_new(64);
    CHECK(f->box.pins);
    CHECK_EQ_INT(set_allow(&f->box.allow, allow), 0);

    f->budget = CDN_DNS_BUDGET_DEFAULT;
    struct cdn_egress_ops ops = {
        .lookup = op_lookup, .audit = op_audit, .flag = op_flag, .arg = f, .dns_budget = &f->budget};
    f->stub = cdn_dns_stub_new(f->base, f->upstream, 0, &ops);
    CHECK(f->stub && cdn_dns_stub_port(f->stub) != 0);
    f->client = resolver(f, cdn_dns_stub_port(f->stub));
    CHECK(evdns_base_set_option(f->client, "attempts:", "1") == 0);

    f->raw_fd = udp_socket(LOCALHOST, &raw_port);
    CHECK(f->raw_fd >= 0);
    f->raw_ev = event_new(f->base, f->raw_fd, EV_READ | EV_PERSIST, raw_cb, f);
    CHECK(f->raw_ev && event_add(f->raw_ev, NULL) == 0);
}

static void teardown(struct fixture *f)
{
    cdn_dns_stub_free(f->stub);
    /* Let libevent run the callbacks of lookups cancelled just now. */
    for (int i = 0; i < 3; i++)
        (void) event_base_loop(f->base, EVLOOP_NONBLOCK);
    if (f->held)
        (void) evdns_server_request_drop(f->held);
    evdns_close_server_port(f->fake);
    evdns_base_free(f->client, 0);
    evdns_base_free(f->upstream, 0);
    event_free(f->raw_ev);
    event_free(f->tick);
    if (f->raw_fd >= 0)
        close(f->raw_fd);
    event_base_free(f->base);
    cdn_allowlist_free(&f->box.allow);
    cdn_pins_free(f->box.pins);
}

static void client_cb(int result, char type, int count, int ttl, void *addresses, void *arg)
{
    struct answer *a = arg;
    a->err = result;
    a->type = type;
    a->count = count;
    a->ttl = ttl;
    for (int i = 0; result == DNS_ERR_NONE && type == DNS_IPv4_A && i < count && i < 8; i++)
        a->addrs[i] = ntohl(((const uint32_t *) addresses)[i]);
    a->done++;
}

/* Ask the stub through the evdns client; the answer is in f->ans. */
static bool resolve(struct fixture *f, const char *name, bool aaaa)
{
    f->ans = (struct answer){0};
    struct evdns_request *r =
        aaaa ? evdns_base_resolve_ipv6(f->client, name, DNS_QUERY_NO_SEARCH, client_cb, &f->ans)
             : evdns_base_resolve_ipv4(f->client, name, DNS_QUERY_NO_SEARCH, client_cb, &f->ans);
    return r && wait_for(f, &f->ans.done, 1);
}

/* A raw query of n questions, sent from the fixture's raw socket, or from a
 * new one bound to src when src is not 127.0.0.1. */
static void raw_send(struct fixture *f, uint32_t src, uint16_t id, const char *const *names,
                     const uint16_t *types, int n)
{
    uint8_t pkt[1500] = {id >> 8, id & 0xff, 0x01, 0x00, 0, (uint8_t) n, 0, 0, 0, 0, 0, 0};
    size_t len = 12;
    for (int i = 0; i < n; i++) {
        const char *s = names[i];
        while (*s) {
            size_t l = strcspn(s, ".");
            pkt[len++] = (uint8_t) l;
            memcpy(pkt + len, s, l);
            len += l;
            s += l + (s[l] == '.');
        }
        pkt[len++] = 0;
        uint8_t tail[4] = {types[i] >> 8, types[i] & 0xff, 0, 1};
        memcpy(pkt + len, tail, 4);
        len += 4;
    }
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons(cdn_dns_stub_port(f->stub)),
                             .sin_addr.s_addr = htonl(LOCALHOST)};
    int fd = src == LOCALHOST ? f->raw_fd : udp_socket(src, NULL);
    CHECK(fd >= 0);
    CHECK(sendto(fd, pkt, len, 0, (struct sockaddr *) &to, sizeof to) == (ssize_t) len);
    if (fd != f->raw_fd) {
        run_for(f, 300); /* an answer, if any, would be back by now */
        char buf[512];
        CHECK(recv(fd, buf, sizeof buf, MSG_DONTWAIT) < 0);
        close(fd);
    }
}

static int raw_rcode(const struct fixture *f)
{
    return f->raw_len >= 12 ? f->raw_reply[3] & 0x0f : -1;
}

static int raw_ancount(const struct fixture *f)
{
    return f->raw_len >= 12 ? f->raw_reply[6] << 8 | f->raw_reply[7] : -1;
}

static bool pinned(const struct fixture *f, const char *name, const char *ip)
{
    struct in_addr a;
    (void) inet_pton(AF_INET, ip, &a);
    return cdn_pins_check(f->box.pins, name, ntohl(a.s_addr), cdn_now_ms());
}

static uint32_t ip(const char *s)
{
    struct in_addr a;
    (void) inet_pton(AF_INET, s, &a);
    return ntohl(a.s_addr);
}

/* --- tests -------------------------------------------------------------- */

TEST(allowed_name_answered_pinned_audited)
{
    struct fixture f;
    setup(&f);
    CHECK(resolve(&f, "PyPI.org", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_NONE);
    CHECK_EQ_INT(f.ans.count, 1);
    CHECK_EQ_INT(f.ans.addrs[0], ip("151.101.0.223"));
    CHECK_EQ_INT(f.ans.ttl, 60); /* upstream said 3600 */
    CHECK(pinned(&f, "pypi.org", "151.101.0.223"));
    CHECK(!pinned(&f, "pypi.org", "93.184.216.34"));
    CHECK_EQ_INT(f.n_audits, 1);
    struct audit_rec *r = &f.audits[0];
    CHECK_STREQ(r->proto, "dns");
    CHECK_STREQ(r->name, "pypi.org");
    CHECK_STREQ(r->qtype, "A");
    CHECK(r->allowed);
    CHECK_STREQ(r->reason, "allowlist");
    CHECK_STREQ(r->answers, "151.101.0.223");
    CHECK_EQ_INT(r->dst_ip, 0);
    CHECK_EQ_INT(r->dst_port, 53);
    CHECK_EQ_INT(f.n_flags, 0);
    teardown(&f);
}

TEST(glob_answers_every_address)
{
    struct fixture f;
    setup(&f);
    CHECK(resolve(&f, "www.example.com", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_NONE);
    CHECK_EQ_INT(f.ans.count, 2);
    CHECK_EQ_INT(f.ans.ttl, 30);
    CHECK(pinned(&f, "www.example.com", "93.184.216.34"));
    CHECK(pinned(&f, "www.example.com", "93.184.216.35"));
    CHECK_EQ_INT(f.n_audits, 1);
    CHECK_STREQ(f.audits[0].answers, "93.184.216.34,93.184.216.35");
    /* "*.example.com" is strictly below: not example.com itself. */
    CHECK(resolve(&f, "example.com", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_REFUSED);
    CHECK_EQ_INT(f.n_audits, 2);
    CHECK_STREQ(f.audits[1].reason, "not-allowlisted");
    CHECK_EQ_INT(f.fake_queries, 1);
    teardown(&f);
}

TEST(not_allowed_refused_never_asked_upstream)
{
    struct fixture f;
    setup(&f);
    CHECK(resolve(&f, "evil.org", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_REFUSED);
    CHECK_EQ_INT(f.fake_queries, 0);
    CHECK_EQ_INT(f.n_audits, 1);
    CHECK_STREQ(f.audits[0].name, "evil.org");
    CHECK(!f.audits[0].allowed);
    CHECK_STREQ(f.audits[0].reason, "not-allowlisted");
    CHECK(!f.audits[0].has_answers);
    CHECK_EQ_INT(cdn_pins_count(f.box.pins), 0);
    teardown(&f);
}

TEST(aaaa_is_empty_noerror_and_other_types_refused)
{
    struct fixture f;
    setup(&f);
    CHECK(resolve(&f, "pypi.org", true));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_NODATA); /* NOERROR without an answer */
    CHECK_EQ_INT(f.n_audits, 1);
    CHECK_STREQ(f.audits[0].qtype, "AAAA");
    CHECK(f.audits[0].allowed);
    CHECK_STREQ(f.audits[0].reason, "no-ipv6");

    CHECK(resolve(&f, "evil.org", true));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_REFUSED);

    const char *name[] = {"pypi.org"};
    const uint16_t txt[] = {EVDNS_TYPE_TXT}, type99[] = {99};
    raw_send(&f, LOCALHOST, 1, name, txt, 1);
    CHECK(wait_for(&f, &f.raw_replies, 1));
    CHECK_EQ_INT(raw_rcode(&f), DNS_ERR_REFUSED);
    CHECK_EQ_INT(raw_ancount(&f), 0);
    raw_send(&f, LOCALHOST, 2, name, type99, 1);
    CHECK(wait_for(&f, &f.raw_replies, 2));
    CHECK_EQ_INT(raw_rcode(&f), DNS_ERR_REFUSED);
    CHECK_EQ_INT(f.n_audits, 4);
    CHECK_STREQ(f.audits[2].qtype, "TXT");
    CHECK(!f.audits[2].allowed);
    CHECK_STREQ(f.audits[2].reason, "qtype");
    CHECK_STREQ(f.audits[3].qtype, "TYPE99");
    CHECK_EQ_INT(f.fake_queries, 0);
    teardown(&f);
}

TEST(rebinding_answer_dropped_unless_a_cidr_admits_it)
{
    static const char *const with_cidr[] = {"*.example.com", "169.254.0.0/16", NULL};
    struct fixture f;
    setup(&f);
    CHECK(resolve(&f, "meta.example.com", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_REFUSED);
    CHECK_EQ_INT(f.n_audits, 1);
    CHECK(!f.audits[0].allowed);
    CHECK_STREQ(f.audits[0].reason, "rebinding:link-local");
    CHECK(!f.audits[0].has_answers);
    CHECK(!pinned(&f, "meta.example.com", "169.254.169.254"));

    CHECK_EQ_INT(set_allow(&f.box.allow, with_cidr), 0);
    CHECK(resolve(&f, "meta.example.com", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_NONE);
    CHECK_EQ_INT(f.ans.addrs[0], ip("169.254.169.254"));
    CHECK(pinned(&f, "meta.example.com", "169.254.169.254"));
    CHECK_STREQ(f.audits[1].answers, "169.254.169.254");
    teardown(&f);
}

TEST(mixed_answer_filtered_to_public)
{
    struct fixture f;
    setup(&f);
    CHECK(resolve(&f, "mixed.example.com", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_NONE);
    CHECK_EQ_INT(f.ans.count, 1);
    CHECK_EQ_INT(f.ans.addrs[0], ip("93.184.216.36"));
    CHECK(pinned(&f, "mixed.example.com", "93.184.216.36"));
    CHECK(!pinned(&f, "mixed.example.com", "10.0.0.5"));
    CHECK_EQ_INT(f.n_audits, 1);
    CHECK(f.audits[0].allowed);
    CHECK_STREQ(f.audits[0].answers, "93.184.216.36");
    teardown(&f);
}

TEST(upstream_failures)
{
    struct fixture f;
    setup(&f);
    const char *name[] = {"broken.example.com"};
    const uint16_t a[] = {EVDNS_TYPE_A};
    raw_send(&f, LOCALHOST, 7, name, a, 1);
    CHECK(wait_for(&f, &f.raw_replies, 1));
    CHECK_EQ_INT(raw_rcode(&f), DNS_ERR_SERVERFAILED);
    CHECK_EQ_INT(f.raw_reply[0] << 8 | f.raw_reply[1], 7);
    CHECK((f.raw_reply[2] & 0x80) && (f.raw_reply[3] & 0x80)); /* QR, RA */
    CHECK_EQ_INT(f.n_audits, 1);
    CHECK(f.audits[0].allowed);
    CHECK(strncmp(f.audits[0].reason, "upstream:", 9) == 0);

    CHECK(resolve(&f, "nx.example.com", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_NOTEXIST);
    CHECK_EQ_INT(f.n_audits, 2);
    CHECK_STREQ(f.audits[1].reason, "nxdomain");
    teardown(&f);
}

TEST(open_mode_resolves_any_name)
{
    struct fixture f;
    setup(&f);
    f.box.mode = CDN_NET_OPEN;
    CHECK(resolve(&f, "open.test.org", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_NONE);
    CHECK_EQ_INT(f.ans.addrs[0], ip("151.101.64.223"));
    CHECK_STREQ(f.audits[0].reason, "open");
    CHECK(resolve(&f, "pypi.org", false));
    CHECK_STREQ(f.audits[1].reason, "allowlist");
    teardown(&f);
}

TEST(malformed_questions)
{
    struct fixture f;
    setup(&f);
    const char *two[] = {"pypi.org", "evil.org"}, *bad[] = {"bad!name.example.com"};
    const uint16_t a2[] = {EVDNS_TYPE_A, EVDNS_TYPE_A};
    raw_send(&f, LOCALHOST, 3, two, a2, 2);
    CHECK(wait_for(&f, &f.raw_replies, 1));
    CHECK_EQ_INT(raw_rcode(&f), DNS_ERR_FORMAT);
    CHECK_EQ_INT(f.n_audits, 2); /* one per question */
    CHECK_STREQ(f.audits[0].name, "pypi.org");
    CHECK_STREQ(f.audits[1].name, "evil.org");
    CHECK_STREQ(f.audits[1].reason, "multiple-questions");
    CHECK(!f.audits[0].allowed && !f.audits[1].allowed);

    raw_send(&f, LOCALHOST, 4, bad, a2, 1);
    CHECK(wait_for(&f, &f.raw_replies, 2));
    CHECK_EQ_INT(raw_rcode(&f), DNS_ERR_REFUSED);
    CHECK_EQ_INT(f.n_audits, 3);
    CHECK_STREQ(f.audits[2].reason, "invalid-name");
    CHECK_EQ_INT(f.fake_queries, 0);
    teardown(&f);
}

TEST(unknown_source_gets_nothing)
{
    struct fixture f;
    setup(&f);
    const char *name[] = {"pypi.org"};
    const uint16_t a[] = {EVDNS_TYPE_A};
    raw_send(&f, 0x7f000002u, 5, name, a, 1); /* waits, and checks no reply came */
    CHECK_EQ_INT(f.n_audits, 0);
    CHECK_EQ_INT(f.fake_queries, 0);
    CHECK(f.lookups >= 1);
    teardown(&f);
}

TEST(long_names_flagged)
{
    struct fixture f;
    char label55[128], long_name[160], label49[128];
    setup(&f);
    snprintf(label55, sizeof label55, "%.55s.example.com",
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    snprintf(label49, sizeof label49, "%.49s.example.com",
             "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    snprintf(long_name, sizeof long_name, "%s.example.com",
             "c0123456.c0123456.c0123456.c0123456.c0123456.c0123456.c0123456.c0123456.c0123456.c0123456");
    CHECK(strlen(long_name) >= CDN_DNS_LONG_NAME);

    CHECK(resolve(&f, label49, false));
    CHECK_EQ_INT(f.n_flags, 0);
    CHECK(resolve(&f, label55, false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_NOTEXIST); /* still resolved: a flag is not a refusal */
    CHECK_EQ_INT(f.n_flags, 1);
    CHECK_STREQ(f.flags[0], "dns-tunnel");
    CHECK(strstr(f.flag_detail[0], "long name") != NULL);
    CHECK(resolve(&f, long_name, false));
    CHECK_EQ_INT(f.n_flags, 2);
    CHECK_STREQ(f.flags[1], "dns-tunnel");
    CHECK_EQ_INT(f.n_audits, 3);
    teardown(&f);
}

TEST(question_rate_flagged_once_per_window)
{
    struct fixture f;
    setup(&f);
    const char *name[] = {"evil.org"};
    const uint16_t a[] = {EVDNS_TYPE_A};
    int n = CDN_DNS_RATE_MAX + 10;
    uint64_t start = cdn_now_ms();
    for (int i = 0; i < n; i++)
        raw_send(&f, LOCALHOST, (uint16_t) (100 + i), name, a, 1);
    CHECK(wait_for(&f, &f.n_audits, n));
    CHECK(wait_for(&f, &f.raw_replies, n));
    if (cdn_now_ms() - start >= CDN_DNS_RATE_WINDOW) {
        tap_skip("the questions took longer than one rate window");
        teardown(&f);
        return;
    }
    CHECK_EQ_INT(f.n_flags, 1);
    CHECK_STREQ(f.flags[0], "dns-rate");
    CHECK(f.box.dns_flagged);
    teardown(&f);
}

TEST(box_gone_or_changed_while_resolving)
{
    static const char *const other[] = {"pypi.org:443", NULL};
    struct fixture f;
    setup(&f);
    /* The allowlist changes while the lookup is in flight: refused. */
    f.ans = (struct answer){0};
    CHECK(evdns_base_resolve_ipv4(f.client, "slow.example.com", DNS_QUERY_NO_SEARCH, client_cb, &f.ans));
    CHECK(wait_for(&f, &f.fake_queries, 1) && f.held);
    CHECK_EQ_INT(set_allow(&f.box.allow, other), 0);
    fake_answer(f.held, "93.184.216.40", NULL, 30);
    f.held = NULL;
    CHECK(wait_for(&f, &f.ans.done, 1));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_REFUSED);
    CHECK_EQ_INT(f.n_audits, 1);
    CHECK_STREQ(f.audits[0].reason, "not-allowlisted");
    CHECK(!pinned(&f, "slow.example.com", "93.184.216.40"));

    /* The box goes away while the lookup is in flight: the answer is dropped. */
    static const char *const back[] = {"*.example.com", NULL};
    CHECK_EQ_INT(set_allow(&f.box.allow, back), 0);
    f.ans = (struct answer){0};
    int queries = f.fake_queries;
    CHECK(evdns_base_resolve_ipv4(f.client, "slow.example.com", DNS_QUERY_NO_SEARCH, client_cb, &f.ans));
    CHECK(wait_for(&f, &f.fake_queries, queries + 1) && f.held);
    f.box_gone = true;
    int lookups = f.lookups;
    fake_answer(f.held, "93.184.216.40", NULL, 30);
    f.held = NULL;
    CHECK(wait_for(&f, &f.lookups, lookups + 1));
    run_for(&f, 50);
    CHECK_EQ_INT(f.ans.done, 0);
    CHECK_EQ_INT(f.n_audits, 1);
    teardown(&f);
}

TEST(free_with_lookup_in_flight)
{
    struct fixture f;
    setup(&f);
    f.ans = (struct answer){0};
    CHECK(evdns_base_resolve_ipv4(f.client, "slow.example.com", DNS_QUERY_NO_SEARCH, client_cb, &f.ans));
    CHECK(wait_for(&f, &f.fake_queries, 1) && f.held);
    cdn_dns_stub_free(f.stub);
    f.stub = NULL;
    CHECK_EQ_INT(f.n_audits, 1);
    CHECK_STREQ(f.audits[0].reason, "shutdown");
    /* The cancelled lookup's callback runs from the loop; the fake's late answer finds no one. */
    fake_answer(f.held, "93.184.216.40", NULL, 30);
    f.held = NULL;
    run_for(&f, 50);
    CHECK_EQ_INT(f.ans.done, 0);
    CHECK_EQ_INT(f.n_audits, 1);
    teardown(&f); /* ASan: no leak, no use after free */
}

/* --- the DNS budget (dns-budget.h) --------------------------------------- */

TEST(budget_counts_new_names_under_a_wildcard)
{
    struct fixture f;
    setup(&f);
    f.budget = (struct cdn_dns_budget_cfg){.names = 4, .bytes = 1000, .window_s = 60};
    /* A fixed name (exact entry) is never counted, however often. */
    for (int i = 0; i < 6; i++)
        CHECK(resolve(&f, "pypi.org", false));
    /* Names under *.example.com: each new one counts; asking again does not. */
    static const char *const names[] = {"a1.example.com", "a2.example.com", "a1.example.com",
                                        "a3.example.com", "a4.example.com", "a2.example.com"};
    for (size_t i = 0; i < ELEMENTSOF(names); i++)
        CHECK(resolve(&f, names[i], false));
    CHECK_EQ_INT(f.n_flags, 0);
    CHECK_EQ_INT(f.box.dns_budget.names, 4);
    CHECK_EQ_INT(f.box.dns_budget.bytes, 8); /* "a1".."a4": what lies below the wildcard's suffix */
    CHECK(resolve(&f, "a5.example.com", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_NOTEXIST); /* an alert, not a refusal: still resolved */
    CHECK_EQ_INT(f.n_flags, 1);
    CHECK_STREQ(f.flags[0], "dns-budget");
    CHECK_EQ_INT(f.flag_names[0], 5);
    CHECK_EQ_INT(f.flag_bytes[0], 10);
    CHECK(strstr(f.flag_detail[0], "last: a5.example.com") != NULL);
    /* Next alert when the count has doubled: at 10 names, not before. */
    char name[64];
    for (int i = 6; i <= 9; i++) {
        snprintf(name, sizeof name, "a%d.example.com", i);
        CHECK(resolve(&f, name, false));
    }
    CHECK_EQ_INT(f.n_flags, 1);
    CHECK(resolve(&f, "a10.example.com", false));
    CHECK_EQ_INT(f.n_flags, 2);
    CHECK_EQ_INT(f.flag_names[1], 10);
    /* AAAA and refused questions never go upstream: not counted. */
    CHECK(resolve(&f, "b1.example.com", true));
    CHECK(resolve(&f, "b2.evil.org", false));
    CHECK_EQ_INT(f.box.dns_budget.names, 10);
    teardown(&f);
}

TEST(budget_counts_bytes_a_tunnel_cannot_avoid)
{
    struct fixture f;
    setup(&f);
    f.box.mode = CDN_NET_OPEN;
    f.budget = (struct cdn_dns_budget_cfg){.names = 64, .bytes = 100, .window_s = 60};
    /* Open mode: what lies below the last two labels is the sandbox's choice. */
    CHECK(resolve(&f, "open.test.org", false));
    CHECK_EQ_INT(f.box.dns_budget.bytes, 4);
    CHECK(resolve(&f, "test.org", false));
    CHECK_EQ_INT(f.box.dns_budget.bytes, 4);
    CHECK_EQ_INT(f.box.dns_budget.names, 2);
    /* Short labels, short names, a slow pace: the old heuristics say nothing; the bytes add up. */
    char name[128];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%02d%s.%s.t.example.org", i, "0123456789abcdefghijklmn",
                 "0123456789abcdefghijklmn");
        CHECK(resolve(&f, name, false));
    }
    /* 4 + 0 + 53 + 53 crosses 100; the next alert comes when that doubled (4 + 0 + 4 * 53 >= 202). */
    CHECK_EQ_INT(f.n_flags, 2);
    CHECK_STREQ(f.flags[0], "dns-budget");
    CHECK_EQ_INT(f.flag_bytes[0], 110);
    CHECK_EQ_INT(f.flag_bytes[1], 216);
    CHECK_EQ_INT(f.flag_names[1], 6);
    teardown(&f);
}

TEST(budget_refuse_mode_and_window)
{
    struct fixture f;
    setup(&f);
    f.budget = (struct cdn_dns_budget_cfg){.names = 2, .bytes = 1000, .window_s = 1, .refuse = true};
    CHECK(resolve(&f, "c1.example.com", false));
    CHECK(resolve(&f, "c2.example.com", false));
    CHECK_EQ_INT(f.fake_queries, 2);
    CHECK(resolve(&f, "c3.example.com", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_REFUSED);
    CHECK_EQ_INT(f.fake_queries, 2); /* never went upstream */
    CHECK_STREQ(f.audits[f.n_audits - 1].reason, "dns-budget");
    CHECK(!f.audits[f.n_audits - 1].allowed);
    CHECK_EQ_INT(f.n_flags, 1);
    CHECK_EQ_INT(f.flag_names[0], 3);
    /* A name of the window still resolves; the refused one stays refused. */
    CHECK(resolve(&f, "c1.example.com", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_NOTEXIST);
    CHECK(resolve(&f, "c3.example.com", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_REFUSED);
    /* The next window starts afresh. */
    run_for(&f, 1100);
    CHECK(resolve(&f, "c3.example.com", false));
    CHECK_EQ_INT(f.ans.err, DNS_ERR_NOTEXIST);
    CHECK_EQ_INT(f.box.dns_budget.names, 1);
    teardown(&f);
}

TEST(budget_config)
{
    struct cdn_dns_budget_cfg c;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_dns_budget_parse("names=10,bytes=2000,window=5m,action=refuse", &c, &err), 0);
    CHECK(c.names == 10 && c.bytes == 2000 && c.window_s == 300 && c.refuse);
    CHECK_EQ_INT(cdn_dns_budget_parse("bytes=64", &c, &err), 0);
    CHECK(c.names == 64 && c.bytes == 64 && c.window_s == 60 && !c.refuse);
    CHECK_EQ_INT(cdn_dns_budget_parse("off", &c, &err), 0);
    CHECK_EQ_INT(c.names, 0);
    static const char *const bad[] = {"",           "names=0",     "names=257", "bytes=x",
                                      "window=0",   "window=1.5s", "window=2d", "action=kill",
                                      "colour=red", "names",       "names=1,,"};
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        err = (struct cdn_error){0};
        int r = cdn_dns_budget_parse(bad[i], &c, &err);
        if (r != -EINVAL)
            printf("# \"%s\": %d\n", bad[i], r);
        CHECK_EQ_INT(r, -EINVAL);
        CHECK(err.msg[0] != 0);
    }
}
