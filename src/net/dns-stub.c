/* The DNS stub (dns-stub.h). Runs in the owner's process (cordond or the
 * one-shot CLI) on its event loop; it trusts nothing in a question. Questions
 * come from sandboxes, identified only by their IPv4 source address, which the
 * host side of each veth guarantees (DESIGN §7). One question per request:
 *
 *   A, allowed name       resolved upstream, reserved addresses filtered out,
 *                         the rest answered (TTL ≤ 60 s) and pinned
 *   AAAA, allowed name    NOERROR, no records (no IPv6 inside)
 *   other types           REFUSED
 *   name not allowed      REFUSED
 *   invalid name / class  REFUSED
 *   several questions     FORMERR (each question audited as refused)
 *   unknown source        no answer, no audit
 *
 * Every policy refusal is REFUSED, never NOTIMP, so a client sees one kind of
 * "no" whatever the reason; the audit log says which.
 *
 * Ownership: the evdns server port owns the UDP socket. Each upstream lookup
 * has a struct pending that owns the client's evdns_server_request until it is
 * answered or dropped. libevent calls a lookup's callback exactly once, from
 * its loop, even after evdns_cancel_request (it is deferred), so the callback
 * is what frees a pending; cdn_dns_stub_free only detaches them. */
#include "net/dns-stub.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/dns_struct.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "shared/macro.h"

#define ANSWER_TTL_MAX_S 60    /* what a client may cache: the allowlist can change under it */
#define PIN_TTL_MAX_S    86400 /* an upstream TTL beyond this does not make a pin live longer */
#define LONG_LABEL       50

/* libevent's rcode values for evdns_server_request_respond are the wire rcodes. */
enum {
    RCODE_NOERROR = 0,
    RCODE_FORMERR = DNS_ERR_FORMAT,
    RCODE_SERVFAIL = DNS_ERR_SERVERFAILED,
    RCODE_NXDOMAIN = DNS_ERR_NOTEXIST,
    RCODE_REFUSED = DNS_ERR_REFUSED
};

struct cdn_dns_stub {
    struct event_base *base;
    struct evdns_base *upstream;
    struct evdns_server_port *port;
    uint16_t port_num;
    struct cdn_egress_ops ops;
    struct pending *pending; /* lookups in flight, doubly linked */
};

/* One A question waiting for its upstream answer. The box is found again by
 * src when the answer arrives: it may have gone, or its allowlist changed. */
struct pending {
    struct cdn_dns_stub *stub; /* NULL once the stub was freed: the callback only frees */
    struct evdns_server_request *req;
    struct evdns_request *lookup; /* valid until lookup_done runs */
    uint32_t src;
    uint64_t start_ms;
    char name[256]; /* normalised */
    struct pending *prev, *next;
};

static const char *qtype_name(int type, char buf[static 16])
{
    static const struct {
        int type;
        const char *name;
    } table[] = {
        {EVDNS_TYPE_A, "A"},
        {EVDNS_TYPE_NS, "NS"},
        {EVDNS_TYPE_CNAME, "CNAME"},
        {EVDNS_TYPE_SOA, "SOA"},
        {EVDNS_TYPE_PTR, "PTR"},
        {EVDNS_TYPE_MX, "MX"},
        {EVDNS_TYPE_TXT, "TXT"},
        {EVDNS_TYPE_AAAA, "AAAA"},
        {33, "SRV"},
        {64, "SVCB"},
        {65, "HTTPS"},
        {EVDNS_QTYPE_AXFR, "AXFR"},
        {EVDNS_QTYPE_ALL, "ANY"},
    };
    for (size_t i = 0; i < ELEMENTSOF(table); i++)
        if (table[i].type == type)
            return table[i].name;
    (void) snprintf(buf, 16, "TYPE%d", type); /* RFC 3597 */
    return buf;
}

/* A question's name as the audit log may quote it: printable ASCII only. */
static void sanitize(const char *in, char out[static 256])
{
    size_t i;
    for (i = 0; in[i] && i < 255; i++)
        out[i] = in[i] > 0x20 && in[i] < 0x7f ? in[i] : '?';
    out[i] = '\0';
}

static const char *upstream_reason(int err)
{
    switch (err) {
    case DNS_ERR_FORMAT:
        return "upstream:format";
    case DNS_ERR_SERVERFAILED:
        return "upstream:servfail";
    case DNS_ERR_NOTIMPL:
        return "upstream:notimp";
    case DNS_ERR_REFUSED:
        return "upstream:refused";
    case DNS_ERR_TRUNCATED:
        return "upstream:truncated";
    case DNS_ERR_TIMEOUT: /* libevent also reports an upstream SERVFAIL this way, after its retries */
        return "upstream:timeout";
    case DNS_ERR_SHUTDOWN:
        return "upstream:shutdown";
    default:
        return "upstream:error";
    }
}

/* Respond, or drop the request if libevent could not format or send the
 * reply: respond frees the request only when it succeeds. */
static void respond(struct evdns_server_request *req, int rcode)
{
    /* EVDNS_FLAGS_RD is 0x80, which is RA in the header: we do recurse for the client. */
    evdns_server_request_set_flags(req, EVDNS_FLAGS_RD);
    if (evdns_server_request_respond(req, rcode) < 0)
        (void) evdns_server_request_drop(req);
}

static void audit(struct cdn_dns_stub *s, struct cdn_egress_box *box, const char *name, const char *qtype,
                  bool allowed, const char *reason, const char *answers, uint64_t start_ms)
{
    if (!s->ops.audit)
        return;
    struct cdn_audit a = {
        .proto = "dns",
        .dst_ip = 0,
        .dst_port = 53,
        .name = name,
        .allowed = allowed,
        .reason = reason,
        .duration_ms = (double) (cdn_now_ms() - start_ms),
        .qtype = qtype,
        .answers = answers,
    };
    s->ops.audit(s->ops.arg, box, &a);
}

static void flag(struct cdn_dns_stub *s, struct cdn_egress_box *box, const char *what, const char *detail)
{
    if (s->ops.flag)
        s->ops.flag(s->ops.arg, box, what, detail, NULL);
}

/* Tunnelling heuristics, on every question a known box asks. */
static void count_question(struct cdn_dns_stub *s, struct cdn_egress_box *box, uint64_t now)
{
    if (now < box->dns_window_start_ms || now - box->dns_window_start_ms >= CDN_DNS_RATE_WINDOW) {
        box->dns_window_start_ms = now;
        box->dns_in_window = 0;
        box->dns_flagged = false;
    }
    if (++box->dns_in_window > CDN_DNS_RATE_MAX && !box->dns_flagged) {
        char detail[96];
        box->dns_flagged = true;
        (void) snprintf(detail, sizeof detail, "more than %d questions in %d ms", CDN_DNS_RATE_MAX,
                        CDN_DNS_RATE_WINDOW);
        flag(s, box, "dns-rate", detail);
    }
}

static void check_long_name(struct cdn_dns_stub *s, struct cdn_egress_box *box, const char *name)
{
    size_t len = strlen(name), label = 0, longest = 0;
    for (const char *c = name; *c; c++) {
        label = *c == '.' ? 0 : label + 1;
        if (label > longest)
            longest = label;
    }
    if (len > 0 && name[len - 1] == '.')
        len--;
    if (len < CDN_DNS_LONG_NAME && longest < LONG_LABEL)
        return;

    char clean[256], detail[160];
    sanitize(name, clean);
    (void) snprintf(detail, sizeof detail, "long name (%zu chars, longest label %zu): %.80s%s", len, longest,
                    clean, strlen(clean) > 80 ? "…" : "");
    flag(s, box, "dns-tunnel", detail);
}

/* Does box's policy admit name? reason: why, for the audit log. */
static bool name_allowed(const struct cdn_egress_box *box, const char *name, const char **ret_reason)
{
    if (box->mode != CDN_NET_NONE && cdn_allowlist_match_name(&box->allow, name, 0)) {
        *ret_reason = "allowlist";
        return true;
    }
    if (box->mode == CDN_NET_OPEN) {
        *ret_reason = "open";
        return true;
    }
    *ret_reason = "not-allowlisted";
    return false;
}

static void pending_unlink(struct cdn_dns_stub *s, struct pending *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        s->pending = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->prev = p->next = NULL;
}

/* Filter the upstream addresses (network byte order) of an A answer, pin and
 * answer what is left, audit. */
static void answer_a(struct cdn_dns_stub *s, struct cdn_egress_box *box, struct pending *p,
                     const uint32_t *addrs, int count, int ttl, const char *allow_reason)
{
    uint32_t kept[32];
    int n = 0;
    const char *dropped = NULL;
    char answers[32 * 17] = "", reason[64];
    uint64_t now = cdn_now_ms();
    uint32_t pin_s = (uint32_t) ttl;

    if (pin_s > PIN_TTL_MAX_S)
        pin_s = PIN_TTL_MAX_S;
    if (pin_s < CDN_DNS_PIN_MIN_S)
        pin_s = CDN_DNS_PIN_MIN_S;
    for (int i = 0; i < count && n < (int) ELEMENTSOF(kept); i++) {
        uint32_t a = ntohl(addrs[i]);
        const char *why = cdn_ip_reserved(a);
        if (why && !cdn_allowlist_admits_ip(&box->allow, a, 0)) {
            dropped = why; /* DNS rebinding: a public name must not lead inside */
            continue;
        }
        kept[n++] = addrs[i];
        if (box->pins)
            cdn_pins_add(box->pins, p->name, a, now + (uint64_t) pin_s * 1000);
        char ip[INET_ADDRSTRLEN];
        (void) inet_ntop(AF_INET, &addrs[i], ip, sizeof ip);
        size_t used = strlen(answers);
        (void) snprintf(answers + used, sizeof answers - used, "%s%s", used ? "," : "", ip);
    }

    if (n == 0) {
        (void) snprintf(reason, sizeof reason, "rebinding:%s", dropped ? dropped : "none");
        respond(p->req, RCODE_REFUSED);
        audit(s, box, p->name, "A", false, reason, NULL, p->start_ms);
        return;
    }
    if (evdns_server_request_add_a_reply(p->req, p->req->questions[0]->name, n, kept,
                                         ttl < ANSWER_TTL_MAX_S ? ttl : ANSWER_TTL_MAX_S) < 0) {
        respond(p->req, RCODE_SERVFAIL);
        audit(s, box, p->name, "A", true, "local-error", NULL, p->start_ms);
        return;
    }
    respond(p->req, RCODE_NOERROR);
    audit(s, box, p->name, "A", true, allow_reason, answers, p->start_ms);
}

/* libevent's callback for an upstream lookup: exactly once per lookup, from
 * the loop, also after evdns_cancel_request (result DNS_ERR_CANCEL). */
static void lookup_done(int result, char type, int count, int ttl, void *addresses, void *arg)
{
    _cleanup_free_ struct pending *p = arg;
    struct cdn_dns_stub *s = p->stub;
    const char *reason;

    p->lookup = NULL; /* libevent frees the handle after this returns */
    if (!s)
        return; /* the stub was freed: the request was dropped then */
    pending_unlink(s, p);

    struct cdn_egress_box *box = s->ops.lookup(s->ops.arg, p->src);
    if (box && box->dns_inflight)
        box->dns_inflight--;
    if (!box) {
        (void) evdns_server_request_drop(p->req); /* the sandbox went away meanwhile */
        return;
    }
    if (!name_allowed(box, p->name, &reason)) { /* its allowlist changed meanwhile */
        respond(p->req, RCODE_REFUSED);
        audit(s, box, p->name, "A", false, reason, NULL, p->start_ms);
        return;
    }

    if (result == DNS_ERR_NONE && type == DNS_IPv4_A && count > 0)
        answer_a(s, box, p, addresses, count, ttl, reason);
    else if (result == DNS_ERR_NOTEXIST) {
        respond(p->req, RCODE_NXDOMAIN);
        audit(s, box, p->name, "A", true, "nxdomain", NULL, p->start_ms);
    } else if (result == DNS_ERR_NONE || result == DNS_ERR_NODATA) {
        respond(p->req, RCODE_NOERROR);
        audit(s, box, p->name, "A", true, "nodata", NULL, p->start_ms);
    } else {
        respond(p->req, RCODE_SERVFAIL);
        audit(s, box, p->name, "A", true, upstream_reason(result), NULL, p->start_ms);
    }
}

static void start_lookup(struct cdn_dns_stub *s, struct evdns_server_request *req, struct cdn_egress_box *box,
                         uint32_t src, const char *name, uint64_t now)
{
    if (box->dns_inflight >= CDN_DNS_INFLIGHT_MAX) { /* one sandbox must not starve the shared resolver */
        respond(req, RCODE_REFUSED);
        audit(s, box, name, "A", false, "rate-limited", NULL, now);
        return;
    }
    struct pending *p = calloc(1, sizeof *p);
    if (!p) {
        respond(req, RCODE_SERVFAIL);
        audit(s, box, name, "A", true, "local-error", NULL, now);
        return;
    }
    *p = (struct pending){.stub = s, .req = req, .src = src, .start_ms = now};
    memcpy(p->name, name, sizeof p->name);
    /* Never called back before this returns: libevent defers every callback. */
    p->lookup = evdns_base_resolve_ipv4(s->upstream, name, DNS_QUERY_NO_SEARCH, lookup_done, p);
    if (!p->lookup) {
        free(p);
        respond(req, RCODE_SERVFAIL);
        audit(s, box, name, "A", true, "upstream:error", NULL, now);
        return;
    }
    box->dns_inflight++;
    p->next = s->pending;
    if (p->next)
        p->next->prev = p;
    s->pending = p;
}

/* The one question of req, from box. Answers it or hands it to start_lookup. */
static void handle_question(struct cdn_dns_stub *s, struct evdns_server_request *req,
                            struct cdn_egress_box *box, uint32_t src, const struct evdns_server_question *q,
                            uint64_t now)
{
    char qbuf[16], name[256];
    const char *qtype = qtype_name(q->type, qbuf), *reason;

    check_long_name(s, box, q->name);
    if (!cdn_dns_name_normalize(q->name, name)) {
        sanitize(q->name, name);
        respond(req, RCODE_REFUSED);
        audit(s, box, name, qtype, false, "invalid-name", NULL, now);
        return;
    }
    if (q->dns_question_class != EVDNS_CLASS_INET) {
        respond(req, RCODE_REFUSED);
        audit(s, box, name, qtype, false, "class", NULL, now);
        return;
    }
    if (!name_allowed(box, name, &reason)) {
        respond(req, RCODE_REFUSED);
        audit(s, box, name, qtype, false, reason, NULL, now);
        return;
    }
    switch (q->type) {
    case EVDNS_TYPE_A:
        /* The one question that takes a name upstream: a name of the sandbox's
         * own choosing is counted against its budget (dns-budget.h). */
        if (!cdn_dns_budget_charge(box, &s->ops, name, now)) {
            respond(req, RCODE_REFUSED);
            audit(s, box, name, qtype, false, "dns-budget", NULL, now);
            return;
        }
        start_lookup(s, req, box, src, name, now);
        return;
    case EVDNS_TYPE_AAAA:
        respond(req, RCODE_NOERROR); /* no IPv6 inside: "no such record", not an error to retry */
        audit(s, box, name, qtype, true, "no-ipv6", NULL, now);
        return;
    default:
        respond(req, RCODE_REFUSED);
        audit(s, box, name, qtype, false, "qtype", NULL, now);
        return;
    }
}

/* evdns server callback: a request from some source on the stub's port. */
static void on_request(struct evdns_server_request *req, void *arg)
{
    struct cdn_dns_stub *s = arg;
    struct sockaddr_storage ss;
    uint64_t now = cdn_now_ms();

    int r = evdns_server_request_get_requesting_addr(req, (struct sockaddr *) &ss, sizeof ss);
    if (r < (int) sizeof(struct sockaddr_in) || ss.ss_family != AF_INET) {
        (void) evdns_server_request_drop(req);
        return;
    }
    uint32_t src = ntohl(((const struct sockaddr_in *) &ss)->sin_addr.s_addr);
    struct cdn_egress_box *box = s->ops.lookup(s->ops.arg, src);
    if (!box) {
        (void) evdns_server_request_drop(req); /* not one of ours: say nothing */
        return;
    }

    for (int i = 0; i < req->nquestions; i++)
        count_question(s, box, now);
    if (req->nquestions == 1) {
        handle_question(s, req, box, src, req->questions[0], now);
        return;
    }
    /* Real resolvers never send several questions; refuse them all. */
    for (int i = 0; i < req->nquestions; i++) {
        char qbuf[16], name[256];
        check_long_name(s, box, req->questions[i]->name);
        sanitize(req->questions[i]->name, name);
        audit(s, box, name, qtype_name(req->questions[i]->type, qbuf), false, "multiple-questions", NULL,
              now);
    }
    respond(req, RCODE_FORMERR);
}

struct cdn_dns_stub *cdn_dns_stub_new(struct event_base *base, struct evdns_base *upstream, uint16_t port,
                                      const struct cdn_egress_ops *ops)
{
    _cleanup_close_ int fd = -EBADF;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = INADDR_ANY};
    socklen_t len = sizeof sin;

    if (!base || !upstream || !ops || !ops->lookup) {
        errno = EINVAL;
        return NULL;
    }
    _cleanup_free_ struct cdn_dns_stub *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    *s = (struct cdn_dns_stub){.base = base, .upstream = upstream, .ops = *ops};

    fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    if (bind(fd, (struct sockaddr *) &sin, sizeof sin) < 0 ||
        getsockname(fd, (struct sockaddr *) &sin, &len) < 0)
        return NULL;
    s->port_num = ntohs(sin.sin_port);

    s->port = evdns_add_server_port_with_base(base, fd, 0, on_request, s);
    if (!s->port) {
        errno = ENOMEM;
        return NULL;
    }
    TAKE_FD(fd); /* the server port closes it */
    return TAKE_PTR(s);
}

uint16_t cdn_dns_stub_port(const struct cdn_dns_stub *s)
{
    return s->port_num;
}

void cdn_dns_stub_free(struct cdn_dns_stub *s)
{
    if (!s)
        return;
    /* Each lookup's callback still runs once, later, from the loop: detach the
     * pending from the stub and leave the freeing to it. */
    while (s->pending) {
        struct pending *p = s->pending;
        struct cdn_egress_box *box = s->ops.lookup(s->ops.arg, p->src);

        pending_unlink(s, p);
        if (box)
            audit(s, box, p->name, "A", false, "shutdown", NULL, p->start_ms);
        (void) evdns_server_request_drop(p->req);
        p->req = NULL;
        p->stub = NULL;
        /* A no-op if the answer is already in and its callback scheduled. */
        evdns_cancel_request(s->upstream, p->lookup);
    }
    /* The last request dropped, this frees the port and closes its socket. */
    evdns_close_server_port(s->port);
    free(s);
}
