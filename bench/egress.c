/* bench/egress: the client and the servers of bench/run-egress, built by that
 * script with gcc at run time (no meson target: nothing in cordon links it).
 * The same binary runs as the client inside a cordon sandbox (through the
 * egress proxy) and in the plain network namespaces of the baseline, so both
 * sides of the comparison run exactly the same code.
 *
 *   egress serve IP DNS_IP HTTP_PORT BANNER_PORT
 *       the fake origin, in the fake internet's namespace: HTTP on
 *       0.0.0.0:HTTP_PORT (GET /small; GET /bytes/N; PUT /upload with a
 *       Content-Length body), a "server speaks first" banner on BANNER_PORT,
 *       and DNS on DNS_IP:53 answering A = IP for every *.bench.test name.
 *       Connections are served one at a time, in the order they come (the
 *       benchmark's client is sequential). Prints "ready" on stdout.
 *   egress dns    RESOLVER NAME COUNT WARMUP            A queries, one after another
 *   egress http   RESOLVER NAME PORT COUNT WARMUP       connect, GET /small, read to EOF
 *   egress banner RESOLVER NAME PORT COUNT WARMUP       connect, read the banner to EOF
 *   egress get    RESOLVER NAME PORT BYTES              one download of BYTES
 *   egress put    RESOLVER NAME PORT BYTES              one upload of BYTES
 *
 * Every client mode first resolves NAME with one A query to RESOLVER:53 (a
 * hand-made query, so nothing depends on the caller's /etc/resolv.conf); in
 * a sandbox that is cordon's DNS stub, whose answer is what lets the proxy
 * admit the connection. Output: one JSON object on stdout; latency samples
 * in microseconds (connect() returned, first response byte, EOF). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define IOBUF (256u << 10) /* the client's read and write size, both paths alike */

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t) t.tv_sec * 1000000000u + (uint64_t) t.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "egress: %s: %s\n", what, errno ? strerror(errno) : "failed");
    exit(1);
}

static void set_timeouts(int fd, int seconds)
{
    struct timeval tv = {.tv_sec = seconds};
    (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t) w;
    }
    return 0;
}

/* ------------------------------------------------------------------ DNS -- */

static size_t put_name(uint8_t *out, const char *name)
{
    size_t o = 0;
    const char *p = name;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t) (dot - p) : strlen(p);
        out[o++] = (uint8_t) n;
        memcpy(out + o, p, n);
        o += n;
        p += n + (dot ? 1 : 0);
    }
    out[o++] = 0;
    return o;
}

/* Skip a (possibly compressed) name at off; the offset after it, or 0. */
static size_t skip_name(const uint8_t *m, size_t len, size_t off)
{
    while (off < len) {
        if (m[off] == 0)
            return off + 1;
        if ((m[off] & 0xc0) == 0xc0)
            return off + 2 <= len ? off + 2 : 0;
        off += 1 + m[off];
    }
    return 0;
}

/* One A query over UDP; the first address (network order), or 0. */
static uint32_t dns_query(int fd, const char *name, uint16_t id)
{
    uint8_t q[512] = {0};
    q[0] = (uint8_t) (id >> 8), q[1] = (uint8_t) id, q[2] = 0x01; /* RD */
    q[5] = 1;                                                     /* QDCOUNT */
    size_t n = 12 + put_name(q + 12, name);
    q[n++] = 0, q[n++] = 1, q[n++] = 0, q[n++] = 1; /* A, IN */
    if (send(fd, q, n, 0) != (ssize_t) n)
        return 0;
    uint8_t r[1500];
    for (;;) {
        ssize_t got = recv(fd, r, sizeof r, 0);
        if (got < 12)
            return 0;
        if (r[0] != q[0] || r[1] != q[1])
            continue; /* a late answer to an earlier query */
        size_t len = (size_t) got, off = skip_name(r, len, 12);
        if (!off || (r[3] & 0x0f) != 0)
            return 0;
        off += 4;
        unsigned an = (unsigned) r[6] << 8 | r[7];
        for (unsigned i = 0; i < an && off; i++) {
            off = skip_name(r, len, off);
            if (!off || off + 10 > len)
                return 0;
            unsigned type = (unsigned) r[off] << 8 | r[off + 1],
                     rdlen = (unsigned) r[off + 8] << 8 | r[off + 9];
            off += 10;
            if (off + rdlen > len)
                return 0;
            if (type == 1 && rdlen == 4) {
                uint32_t a;
                memcpy(&a, r + off, 4);
                return a;
            }
            off += rdlen;
        }
        return 0;
    }
}

static int dns_socket(const char *resolver)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(53)};
    if (inet_pton(AF_INET, resolver, &sin.sin_addr) != 1) {
        errno = EINVAL;
        die("resolver address");
    }
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *) &sin, sizeof sin) < 0)
        die("DNS socket");
    set_timeouts(fd, 3);
    return fd;
}

static uint32_t resolve(const char *resolver, const char *name)
{
    int fd = dns_socket(resolver);
    uint32_t a = 0;
    for (int i = 0; i < 3 && !a; i++)
        a = dns_query(fd, name, (uint16_t) (getpid() + i));
    close(fd);
    if (!a) {
        fprintf(stderr, "egress: could not resolve %s via %s\n", name, resolver);
        exit(2);
    }
    return a;
}

/* --------------------------------------------------------------- server -- */

static uint32_t answer_ip;

static void *dns_server(void *arg)
{
    int fd = *(int *) arg;
    uint8_t m[1500];
    for (;;) {
        struct sockaddr_in peer;
        socklen_t plen = sizeof peer;
        ssize_t got = recvfrom(fd, m, sizeof m - 16, 0, (struct sockaddr *) &peer, &plen);
        if (got < 17)
            continue;
        size_t len = (size_t) got, end = skip_name(m, len, 12);
        if (!end || end + 4 > len || (m[12] & 0xc0))
            continue;
        char name[256];
        size_t o = 0;
        for (size_t p = 12; m[p] && o < sizeof name - 66; p += 1 + m[p]) {
            if (o)
                name[o++] = '.';
            memcpy(name + o, m + p + 1, m[p]);
            o += m[p];
        }
        name[o] = 0;
        unsigned qtype = (unsigned) m[end] << 8 | m[end + 1];
        size_t sfx = strlen(".bench.test");
        bool ours = o > sfx && strcasecmp(name + o - sfx, ".bench.test") == 0;
        m[2] = 0x84 | (m[2] & 0x01); /* QR, AA, RD copied */
        m[3] = ours ? 0x80 : 0x83;   /* RA; NXDOMAIN for other names */
        m[6] = m[7] = m[8] = m[9] = m[10] = m[11] = 0;
        m[4] = 0, m[5] = 1;
        size_t n = end + 4;
        if (ours && qtype == 1) {
            m[7] = 1;
            const uint8_t rr[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4}; /* TTL 3600 */
            memcpy(m + n, rr, sizeof rr);
            memcpy(m + n + sizeof rr, &answer_ip, 4);
            n += sizeof rr + 4;
        }
        (void) sendto(fd, m, n, 0, (struct sockaddr *) &peer, plen);
    }
    return NULL;
}

static int listen_on(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = INADDR_ANY};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *) &sin, sizeof sin) < 0 || listen(fd, 512) < 0)
        die("listen");
    return fd;
}

static char zeros[1u << 20];

static void serve_http(int c)
{
    char head[8192];
    size_t n = 0;
    char *end = NULL;
    while (!end) {
        if (n == sizeof head - 1)
            return;
        ssize_t r = recv(c, head + n, sizeof head - 1 - n, 0);
        if (r <= 0)
            return;
        n += (size_t) r;
        head[n] = 0;
        end = strstr(head, "\r\n\r\n");
    }
    size_t head_len = (size_t) (end + 4 - head), extra = n - head_len;
    char method[8] = "", path[256] = "";
    if (sscanf(head, "%7s %255s", method, path) != 2)
        return;
    if (strcmp(method, "GET") == 0 && strcmp(path, "/small") == 0) {
        static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n"
                                   "Connection: close\r\n\r\nhello, bench\n";
        (void) write_all(c, resp, sizeof resp - 1);
    } else if (strcmp(method, "GET") == 0 && strncmp(path, "/bytes/", 7) == 0) {
        unsigned long long left = strtoull(path + 7, NULL, 10);
        char h[160];
        int hn =
            snprintf(h, sizeof h,
                     "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %llu\r\n"
                     "Connection: close\r\n\r\n",
                     left);
        if (write_all(c, h, (size_t) hn) < 0)
            return;
        while (left) {
            size_t k = left < sizeof zeros ? (size_t) left : sizeof zeros;
            if (write_all(c, zeros, k) < 0)
                return;
            left -= k;
        }
    } else if (strcmp(method, "PUT") == 0) {
        const char *cl = strcasestr(head, "\r\ncontent-length:");
        unsigned long long want = cl ? strtoull(cl + 17, NULL, 10) : 0, got = extra;
        while (got < want) {
            ssize_t r = recv(c, zeros, sizeof zeros, 0);
            if (r <= 0)
                return;
            got += (unsigned long long) r;
        }
        char h[160];
        int hn =
            snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%llu\n",
                     snprintf(NULL, 0, "%llu\n", got), got);
        (void) write_all(c, h, (size_t) hn);
    } else {
        static const char resp[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        (void) write_all(c, resp, sizeof resp - 1);
    }
}

static int serve(int argc, char **argv)
{
    if (argc != 6)
        return 64;
    struct sockaddr_in dns = {.sin_family = AF_INET, .sin_port = htons(53)};
    if (inet_pton(AF_INET, argv[2], &answer_ip) != 1 || inet_pton(AF_INET, argv[3], &dns.sin_addr) != 1)
        return 64;
    signal(SIGPIPE, SIG_IGN);
    int ufd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (ufd < 0 || bind(ufd, (struct sockaddr *) &dns, sizeof dns) < 0)
        die("DNS bind");
    pthread_t t;
    if (pthread_create(&t, NULL, dns_server, &ufd) != 0)
        die("pthread_create");
    int http = listen_on((uint16_t) atoi(argv[4])), banner = listen_on((uint16_t) atoi(argv[5]));
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(http, &rd);
        FD_SET(banner, &rd);
        if (select((http > banner ? http : banner) + 1, &rd, NULL, NULL, NULL) < 0) {
            if (errno == EINTR)
                continue;
            die("select");
        }
        if (FD_ISSET(banner, &rd)) {
            int c = accept4(banner, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0) {
                static const char hello[] = "220 bench ready\r\n";
                (void) write_all(c, hello, sizeof hello - 1);
                close(c);
            }
        }
        if (FD_ISSET(http, &rd)) {
            int c = accept4(http, NULL, NULL, SOCK_CLOEXEC), one = 1;
            if (c >= 0) {
                set_timeouts(c, 20);
                (void) setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                serve_http(c);
                close(c);
            }
        }
    }
}

/* --------------------------------------------------------------- client -- */

static int connect_to(uint32_t ip, uint16_t port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = ip};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket");
    set_timeouts(fd, 20);
    if (connect(fd, (struct sockaddr *) &sin, sizeof sin) < 0)
        die("connect");
    return fd;
}

struct sample {
    double connect_us, first_us, total_us;
};

static double rusage_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double) ru.ru_utime.tv_sec + (double) ru.ru_stime.tv_sec +
           ((double) ru.ru_utime.tv_usec + (double) ru.ru_stime.tv_usec) / 1e6;
}

static void print_series(const char *key, const struct sample *s, size_t n, size_t field)
{
    printf("\"%s\":[", key);
    for (size_t i = 0; i < n; i++) {
        const double *v = (const double *) &s[i];
        printf("%s%.1f", i ? "," : "", v[field]);
    }
    printf("]");
}

/* http / banner: COUNT + WARMUP sequential connections. */
static int latency(const char *mode, int argc, char **argv)
{
    if (argc != 7)
        return 64;
    const char *name = argv[3];
    uint16_t port = (uint16_t) atoi(argv[4]);
    long count = atol(argv[5]), warm = atol(argv[6]);
    uint32_t ip = resolve(argv[2], name);
    bool http = strcmp(mode, "http") == 0;
    char req[512];
    int rn = snprintf(req, sizeof req,
                      "GET /small HTTP/1.1\r\nHost: %s\r\nUser-Agent: cordon-bench\r\nAccept: */*\r\n"
                      "Connection: close\r\n\r\n",
                      name);
    struct sample *s = calloc((size_t) count, sizeof *s);
    if (!s)
        die("calloc");
    char buf[4096];
    size_t expect_min = http ? 64 : 10;
    double cpu0 = rusage_cpu_s();
    uint64_t wall0 = now_ns();
    for (long i = 0; i < count + warm; i++) {
        uint64_t t0 = now_ns();
        int fd = connect_to(ip, port);
        uint64_t t1 = now_ns();
        if (http && write_all(fd, req, (size_t) rn) < 0)
            die("send");
        uint64_t t2 = 0;
        size_t got = 0;
        for (;;) {
            ssize_t r = recv(fd, buf, sizeof buf, 0);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                die("recv");
            if (r == 0)
                break;
            if (!got)
                t2 = now_ns();
            if (!got && http && (r < 12 || memcmp(buf, "HTTP/1.1 200", 12) != 0)) {
                fprintf(stderr, "egress: unexpected answer: %.*s\n", (int) (r < 200 ? r : 200), buf);
                exit(3);
            }
            got += (size_t) r;
        }
        uint64_t t3 = now_ns();
        close(fd);
        if (got < expect_min) {
            fprintf(stderr, "egress: short answer (%zu bytes) on connection %ld\n", got, i);
            exit(3);
        }
        if (i >= warm)
            s[i - warm] =
                (struct sample){(double) (t1 - t0) / 1e3, (double) (t2 - t0) / 1e3, (double) (t3 - t0) / 1e3};
    }
    double wall = (double) (now_ns() - wall0) / 1e9;
    printf("{\"mode\":\"%s\",\"count\":%ld,\"warmup\":%ld,\"wall_s\":%.4f,\"cpu_s\":%.4f,", mode, count, warm,
           wall, rusage_cpu_s() - cpu0);
    print_series("connect_us", s, (size_t) count, 0);
    printf(",");
    print_series("first_byte_us", s, (size_t) count, 1);
    printf(",");
    print_series("total_us", s, (size_t) count, 2);
    printf("}\n");
    return 0;
}

static int dns_latency(int argc, char **argv)
{
    if (argc != 6)
        return 64;
    long count = atol(argv[4]), warm = atol(argv[5]);
    int fd = dns_socket(argv[2]);
    double *s = calloc((size_t) count, sizeof *s);
    if (!s)
        die("calloc");
    for (long i = 0; i < count + warm; i++) {
        uint64_t t0 = now_ns();
        if (!dns_query(fd, argv[3], (uint16_t) i)) {
            fprintf(stderr, "egress: query %ld for %s via %s failed\n", i, argv[3], argv[2]);
            return 2;
        }
        if (i >= warm)
            s[i - warm] = (double) (now_ns() - t0) / 1e3;
    }
    printf("{\"mode\":\"dns\",\"count\":%ld,\"total_us\":[", count);
    for (long i = 0; i < count; i++)
        printf("%s%.1f", i ? "," : "", s[i]);
    printf("]}\n");
    return 0;
}

/* get / put: one transfer of BYTES, timed from before connect() to EOF. */
static int bulk(const char *mode, int argc, char **argv)
{
    if (argc != 6)
        return 64;
    const char *name = argv[3];
    uint16_t port = (uint16_t) atoi(argv[4]);
    unsigned long long bytes = strtoull(argv[5], NULL, 10);
    uint32_t ip = resolve(argv[2], name);
    bool get = strcmp(mode, "get") == 0;
    char *buf = malloc(IOBUF);
    if (!buf)
        die("malloc");
    memset(buf, 'x', IOBUF);
    char req[512];
    int rn = get ? snprintf(req, sizeof req,
                            "GET /bytes/%llu HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", bytes, name)
                 : snprintf(req, sizeof req,
                            "PUT /upload HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\n"
                            "Content-Length: %llu\r\nConnection: close\r\n\r\n",
                            name, bytes);
    double cpu0 = rusage_cpu_s();
    uint64_t t0 = now_ns();
    int fd = connect_to(ip, port);
    if (write_all(fd, req, (size_t) rn) < 0)
        die("send");
    if (!get) {
        for (unsigned long long left = bytes; left;) {
            size_t k = left < IOBUF ? (size_t) left : IOBUF;
            if (write_all(fd, buf, k) < 0)
                die("send body");
            left -= k;
        }
    }
    uint64_t t_sent = now_ns();
    unsigned long long got = 0, reads = 0;
    for (;;) {
        ssize_t r = recv(fd, buf, IOBUF, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            die("recv");
        if (r == 0)
            break;
        got += (unsigned long long) r;
        reads++;
    }
    uint64_t t1 = now_ns();
    close(fd);
    if (get ? got < bytes : got == 0) {
        fprintf(stderr, "egress: %s: received %llu bytes, expected %s%llu\n", mode, got,
                get ? "" : "an answer to ", bytes);
        return 3;
    }
    printf(
        "{\"mode\":\"%s\",\"bytes\":%llu,\"received\":%llu,\"reads\":%llu,\"seconds\":%.6f,\"send_s\":%.6f,"
        "\"cpu_s\":%.4f}\n",
        mode, bytes, got, reads, (double) (t1 - t0) / 1e9, (double) (t_sent - t0) / 1e9,
        rusage_cpu_s() - cpu0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 64;
    signal(SIGPIPE, SIG_IGN);
    const char *m = argv[1];
    int r = 64;
    if (strcmp(m, "serve") == 0)
        r = serve(argc, argv);
    else if (strcmp(m, "dns") == 0)
        r = dns_latency(argc, argv);
    else if (strcmp(m, "http") == 0 || strcmp(m, "banner") == 0)
        r = latency(m, argc, argv);
    else if (strcmp(m, "get") == 0 || strcmp(m, "put") == 0)
        r = bulk(m, argc, argv);
    if (r == 64)
        fprintf(stderr, "usage: see the comment at the top of bench/egress.c\n");
    return r;
}
