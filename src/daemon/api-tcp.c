/* cordond's TCP listener: a client is authenticated on its first request's header block, before
 * evhttp reads anything else from it.
 *
 * Runs in the loop. A TCP client is anyone who can reach the port: until its first header block
 * has ended with the right "Authorization: Bearer <token>" it is a stranger, and what it may cost
 * is bounded here — at most max_unauthenticated such connections (a new one evicts the oldest),
 * each for auth_timeout seconds at most, each holding at most GATE_HEADER_MAX bytes; and at most
 * max_connections connections in all (503 beyond). evhttp (libevent
 * 2.1) reads a whole request, body included, before any callback of ours sees it, and has no hook
 * between its headers and its body (evhttp_set_newreqcb is 2.2). So the connection's bufferevent is
 * ours (evhttp_set_bevcb): right after evhttp has set it up — in the same pass of the loop, before
 * any byte is read — the gate takes over its callbacks, reads the header block itself, and then
 * either gives the callbacks back to evhttp with the bytes still unread in the buffer (evhttp parses
 * the request as if it had read them) or answers 401 and has evhttp drop the connection without
 * having read its body. A connection that passed is trusted like the unix socket's: evhttp serves
 * it, and route() still checks the token of each request on it.
 *
 * The unix socket (mode 0600) has no gate: its access control is the file's mode. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "api.h"
#include "e2b.h"

#define GATE_HEADER_MAX (16u << 10) /* a first header block longer than this is refused (431) */

struct gate {
    struct bufferevent *bev;
    /* evhttp's callbacks of the connection, given back when the gate is done */
    bufferevent_data_cb http_read, http_write;
    bufferevent_event_cb http_event;
    void *http_arg;
    struct event *attach_ev, *deadline_ev;
    size_t scanned; /* bytes of the header block looked at */
    int eol;        /* 0: inside a line; 1: after '\n'; 2: after "\n\r" */
    bool attached;  /* evhttp's callbacks are ours now */
    bool doomed;    /* evicted before it was attached: close it once it is */
    TAILQ_ENTRY(gate) link;
};

static TAILQ_HEAD(, gate) gates = TAILQ_HEAD_INITIALIZER(gates);
static unsigned n_gates, n_doomed;

/* Every TCP connection evhttp holds, authenticated or not, by its socket's identity: evhttp tells
 * nobody when it closes one, but a closed fd no longer names the same socket (device and inode),
 * so the list is pruned when it is full. */
static struct conn_id {
    int fd;
    dev_t dev;
    ino_t ino;
} * conns;
static size_t n_conns, cap_conns;

static bool conn_alive(const struct conn_id *c)
{
    struct stat st;
    return fstat(c->fd, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino;
}

static void prune_conns(void)
{
    size_t k = 0;
    for (size_t i = 0; i < n_conns; i++)
        if (conn_alive(&conns[i]))
            conns[k++] = conns[i];
    n_conns = k;
}

/* Count the connection on fd; false when max_connections are open already (or out of memory). */
static bool conn_admit(int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return false;
    for (size_t i = 0; i < n_conns; i++)
        if (conns[i].fd == fd) { /* its fd was closed and reused: that connection is gone */
            conns[i] = (struct conn_id){fd, st.st_dev, st.st_ino};
            return true;
        }
    if (n_conns >= cdn_daemon->cfg.max_connections)
        prune_conns();
    if (n_conns >= cdn_daemon->cfg.max_connections)
        return false;
    if (n_conns == cap_conns) {
        size_t cap = cap_conns ? cap_conns * 2 : 64;
        struct conn_id *v = realloc(conns, cap * sizeof *v);
        if (!v)
            return false;
        conns = v, cap_conns = cap;
    }
    conns[n_conns++] = (struct conn_id){fd, st.st_dev, st.st_ino};
    return true;
}

static void gate_free(struct gate *g)
{
    TAILQ_REMOVE(&gates, g, link);
    n_gates--;
    n_doomed -= g->doomed;
    if (g->attach_ev)
        event_free(g->attach_ev);
    if (g->deadline_ev)
        event_free(g->deadline_ev);
    bufferevent_decref(g->bev); /* the reference taken in new_conn */
    free(g);
}

/* evhttp's callbacks back on the connection; the gate is gone after it. */
static struct bufferevent *gate_release(struct gate *g)
{
    struct bufferevent *bev = g->bev;
    if (g->attached)
        bufferevent_setcb(bev, g->http_read, g->http_write, g->http_event, g->http_arg);
    bufferevent_setwatermark(bev, EV_READ, 0, 0);
    gate_free(g);
    return bev;
}

/* Drop the connection, after a short answer when status is not 0 (written straight to the socket:
 * the bufferevent goes with the connection). evhttp frees the connection, from the loop: it has not
 * handed any request of it to us, so it drops it without a reply of its own. */
static void gate_close(struct gate *g, int status, const char *why)
{
    if (!g->attached) {
        n_doomed += !g->doomed;
        g->doomed = true;
        return;
    }
    struct bufferevent *bev = g->bev;
    if (status) {
        const char *reason = status == 401   ? "Unauthorized"
                             : status == 408 ? "Request Timeout"
                             : status == 503 ? "Service Unavailable"
                                             : "Request Header Fields Too Large";
        json_t *body = cdn_api_error_json(status == 401   ? "unauthorized"
                                          : status == 503 ? "too_many_connections"
                                                          : "bad_request",
                                          NULL, why);
        _cleanup_free_ char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        char msg[1024];
        int n = snprintf(msg, sizeof msg,
                         "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\n\r\n%s\n",
                         status, reason, s ? strlen(s) + 1 : 1, s ? s : "");
        if (n > 0 && (size_t) n < sizeof msg)
            (void) send(bufferevent_getfd(bev), msg, (size_t) n, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (status >= 400)
        cdn_daemon->http_errors++;
    gate_release(g);
    bufferevent_disable(bev, EV_READ);
    (void) evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
    bufferevent_trigger_event(bev, BEV_EVENT_ERROR | BEV_EVENT_READING, BEV_TRIG_DEFER_CALLBACKS);
}

/* The first header block h (n bytes, ending with its empty line) carries the token: "Authorization:
 * Bearer", or an E2B client's X-API-KEY, or its X-Access-Token for the sandbox E2b-Sandbox-Id names
 * (e2b.h). Compared in constant time; the first field of each name counts, as evhttp_find_header()
 * takes it. */
static bool header_authorized(const char *h, size_t n)
{
    static const char *const names[] = {"authorization:", "x-api-key:", "x-access-token:", "e2b-sandbox-id:"};
    char val[4][300] = {"", "", "", ""};
    bool seen[4] = {false};
    const char *end = h + n, *line = memchr(h, '\n', n); /* after the request line */
    while (line && ++line < end) {
        const char *eol = memchr(line, '\n', (size_t) (end - line));
        size_t len = eol ? (size_t) (eol - line) : (size_t) (end - line);
        for (size_t k = 0; k < 4; k++) {
            size_t nl = strlen(names[k]);
            if (seen[k] || len < nl || strncasecmp(line, names[k], nl) != 0)
                continue;
            const char *v = line + nl, *ve = line + len;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t' || ve[-1] == '\r'))
                ve--;
            seen[k] = true;
            if ((size_t) (ve - v) < sizeof val[k])
                (void) snprintf(val[k], sizeof val[k], "%.*s", (int) (ve - v), v);
        }
        line = eol;
    }
    char want[300];
    int w = snprintf(want, sizeof want, "Bearer %s", cdn_daemon->token);
    bool bearer = false;
    if (w > 0 && strlen(val[0]) == (size_t) w) {
        unsigned diff = 0; /* constant time: the token is a secret */
        for (int i = 0; i < w; i++)
            diff |= (unsigned) (val[0][i] ^ want[i]);
        bearer = diff == 0;
    }
    return bearer || cdn_e2b_authorized(val[1], val[2], seen[3] ? val[3] : NULL);
}

/* Scan the bytes not looked at yet for the empty line that ends the header block ("\n\n" or
 * "\n\r\n": evhttp takes lines ending in LF alone too). Returns the block's length, or 0. */
static size_t header_end(struct gate *g, struct evbuffer *in)
{
    size_t len = evbuffer_get_length(in);
    struct evbuffer_ptr from;
    if (evbuffer_ptr_set(in, &from, g->scanned, EVBUFFER_PTR_SET) < 0)
        return 0;
    struct evbuffer_iovec v[8];
    while (g->scanned < len) {
        int k = evbuffer_peek(in, (ev_ssize_t) (len - g->scanned), &from, v, 8);
        for (int i = 0; i < k && i < 8; i++)
            for (size_t j = 0; j < v[i].iov_len; j++) {
                char c = ((const char *) v[i].iov_base)[j];
                g->scanned++;
                if (c == '\n' && g->eol)
                    return g->scanned;
                g->eol = c == '\n' ? 1 : c == '\r' && g->eol == 1 ? 2 : 0;
            }
        if (evbuffer_ptr_set(in, &from, g->scanned, EVBUFFER_PTR_SET) < 0)
            break;
    }
    return 0;
}

static void gate_read(struct bufferevent *bev, void *arg)
{
    struct gate *g = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t n = header_end(g, in);
    if (!n) {
        if (evbuffer_get_length(in) >= GATE_HEADER_MAX)
            gate_close(g, 431, "the request's header block is larger than 16 KiB");
        return;
    }
    const char *h = (const char *) evbuffer_pullup(in, (ev_ssize_t) n);
    if (!h || !header_authorized(h, n)) {
        gate_close(g, 401, "missing or wrong bearer token");
        return;
    }
    /* Trusted from now on: evhttp parses what is buffered, body included, and reads on. */
    bufferevent_data_cb read = g->http_read;
    void *http_arg = g->http_arg;
    gate_release(g);
    if (read)
        read(bev, http_arg);
}

static void gate_event(struct bufferevent *bev, short what, void *arg)
{
    struct gate *g = arg;
    bufferevent_event_cb event = g->http_event;
    void *http_arg = g->http_arg;
    gate_release(g);
    if (event)
        event(bev, what, http_arg); /* the client left, or an error: evhttp drops the connection */
}

static void gate_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    char why[128];
    (void) snprintf(why, sizeof why, "no complete request header with a valid token within %u s",
                    cdn_daemon->cfg.auth_timeout_s);
    gate_close(arg, 408, why);
}

/* After evhttp set the connection up (its callbacks are on the bufferevent): take them over. */
static void gate_attach(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct gate *g = arg;
    bufferevent_getcb(g->bev, &g->http_read, &g->http_write, &g->http_event, &g->http_arg);
    if (!g->http_event) { /* evhttp gave up on it (out of memory) and freed its side */
        gate_free(g);
        return;
    }
    g->attached = true;
    /* Streamed answers are small writes one after another (a process's start, its output, its end):
     * Nagle would hold each behind the client's delayed ACK of the one before, 40 ms apiece. */
    int one = 1;
    (void) setsockopt(bufferevent_getfd(g->bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    bufferevent_setcb(g->bev, gate_read, NULL, gate_event, g);
    bufferevent_setwatermark(g->bev, EV_READ, 0, GATE_HEADER_MAX);
    if (!g->doomed && !conn_admit(bufferevent_getfd(g->bev))) {
        char why[128];
        (void) snprintf(why, sizeof why, "%u connections are open, the configured maximum (max_connections)",
                        cdn_daemon->cfg.max_connections);
        gate_close(g, 503, why);
        return;
    }
    struct timeval tv = {.tv_sec = (time_t) cdn_daemon->cfg.auth_timeout_s};
    if (g->doomed || !(g->deadline_ev = evtimer_new(cdn_daemon->base, gate_deadline, g)) ||
        evtimer_add(g->deadline_ev, &tv) < 0)
        gate_close(g, 0, NULL);
}

/* evhttp's bevcb: a new TCP connection. Its bufferevent is made as evhttp would make it. */
static struct bufferevent *new_conn(struct event_base *base, void *arg)
{
    (void) arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
    struct gate *g = bev ? calloc(1, sizeof *g) : NULL;
    if (g)
        g->attach_ev = event_new(base, -1, 0, gate_attach, g);
    if (!g || !g->attach_ev) {
        /* No gate: the connection is dropped as soon as evhttp has set it up (an error event from
         * the loop), rather than served without one. */
        if (g)
            free(g);
        if (bev)
            bufferevent_trigger_event(bev, BEV_EVENT_ERROR | BEV_EVENT_READING, BEV_TRIG_DEFER_CALLBACKS);
        return bev;
    }
    g->bev = bev;
    bufferevent_incref(bev); /* until the gate is gone, whatever evhttp does */
    TAILQ_INSERT_TAIL(&gates, g, link);
    n_gates++;
    /* Same priority as the listener's event, activated from within it: runs in this pass of the
     * loop, after evhttp_get_request() has returned and before the socket is first read. */
    event_active(g->attach_ev, EV_TIMEOUT, 0);
    while (n_gates - n_doomed > cdn_daemon->cfg.max_unauthenticated) { /* the oldest stranger makes room */
        struct gate *old = TAILQ_FIRST(&gates);
        while (old->doomed)
            old = TAILQ_NEXT(old, link);
        gate_close(old, 0, NULL);
    }
    return bev;
}

void cdn_api_tcp_gate(struct evhttp *http)
{
    evhttp_set_bevcb(http, new_conn, NULL);
}

unsigned cdn_api_tcp_unauthenticated(void)
{
    return n_gates - n_doomed;
}

unsigned cdn_api_tcp_connections(void)
{
    prune_conns();
    return (unsigned) n_conns;
}
