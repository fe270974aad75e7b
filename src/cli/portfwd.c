/* cordon port-forward ID [LOCAL:]REMOTE: a port of ours (127.0.0.1 only) to a TCP port inside a
 * sandbox, as kubectl port-forward does. Each connection accepted here is one tunnel through
 * cordond (GET …/ports/REMOTE with "Upgrade: cordon-tcp", docs/cordond.md): cordond connects to
 * 127.0.0.1:REMOTE from inside the sandbox's network namespace, and bytes pass both ways, each
 * direction ended on its own. One thread per connection. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli.h"
#include "shared/macro.h"

#define HEAD_MAX (16u << 10)

struct conn {
    int client;
    char request[256];
};

static const char *socket_path(void)
{
    const char *p = getenv("CORDON_SOCKET");
    return p && p[0] ? p : "/run/cordon/cordond.sock";
}

/* A tunnel to the sandbox's port: the connection to cordond once it answered 101 (what came after
 * its head is written to client), or -1 (said why). */
static int open_tunnel(const struct conn *c)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    const char *path = socket_path();
    if (strlen(path) >= sizeof sun.sun_path) {
        fprintf(stderr, "cordon port-forward: socket path too long: %s\n", path);
        return -1;
    }
    memcpy(sun.sun_path, path, strlen(path));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *) &sun, sizeof sun) < 0 ||
        send(fd, c->request, strlen(c->request), MSG_NOSIGNAL) != (ssize_t) strlen(c->request)) {
        fprintf(stderr, "cordon port-forward: cannot reach cordond at %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            (void) close(fd);
        return -1;
    }
    _cleanup_free_ char *head = malloc(HEAD_MAX + 1);
    size_t n = 0;
    char *end = NULL;
    while (head && n < HEAD_MAX && !end) {
        ssize_t k = recv(fd, head + n, HEAD_MAX - n, 0);
        if (k <= 0)
            break;
        n += (size_t) k;
        head[n] = 0;
        end = strstr(head, "\r\n\r\n");
    }
    if (!end || strncmp(head, "HTTP/1.1 101", 12) != 0) {
        const char *msg = head && n ? (end ? end + 4 : head) : "no answer";
        fprintf(stderr, "cordon port-forward: %.*s\n", (int) strcspn(msg, "\n"), msg);
        (void) close(fd);
        return -1;
    }
    size_t after = n - (size_t) (end + 4 - head);
    if (after && send(c->client, end + 4, after, MSG_NOSIGNAL) < 0) {
        (void) close(fd);
        return -1;
    }
    return fd;
}

static void *serve(void *arg)
{
    struct conn *c = arg;
    int t = open_tunnel(c);
    bool open[2] = {true, true}; /* client → tunnel, tunnel → client */
    char buf[64 << 10];
    while (t >= 0 && (open[0] || open[1])) {
        struct pollfd p[2] = {{.fd = open[0] ? c->client : -1, .events = POLLIN},
                              {.fd = open[1] ? t : -1, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (!open[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int from = i ? t : c->client, to = i ? c->client : t;
            ssize_t k = recv(from, buf, sizeof buf, 0);
            if (k > 0) {
                for (ssize_t off = 0, w; off < k; off += w)
                    if ((w = send(to, buf + off, (size_t) (k - off), MSG_NOSIGNAL)) <= 0) {
                        open[0] = open[1] = false;
                        break;
                    }
                continue;
            }
            open[i] = false; /* this way ended: so does its continuation */
            (void) shutdown(to, SHUT_WR);
            if (k < 0)
                open[0] = open[1] = false;
        }
    }
    if (t >= 0)
        (void) close(t);
    (void) close(c->client);
    free(c);
    return NULL;
}

int cdn_cli_port_forward(int argc, char *const *argv)
{
    char *end = NULL;
    unsigned long local = 0, remote = 0;
    const char *colon = argc == 2 ? strchr(argv[1], ':') : NULL;
    if (argc == 2) {
        remote = strtoul(colon ? colon + 1 : argv[1], &end, 10);
        if (end && !*end && colon) {
            local = strtoul(argv[1], &end, 10);
            end = end == colon ? (char *) "" : (char *) "x";
        } else if (end && !*end)
            local = remote;
    }
    if (argc != 2 || !end || *end || !remote || remote > 65535 || local > 65535) {
        fprintf(stderr,
                "usage: cordon port-forward ID [LOCAL:]REMOTE   (LOCAL 0: any free port; on 127.0.0.1)\n");
        return 125;
    }
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t) local),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sin;
    if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(ls, (struct sockaddr *) &sin, sizeof sin) < 0 || listen(ls, 128) < 0 ||
        getsockname(ls, (struct sockaddr *) &sin, &len) < 0) {
        fprintf(stderr, "cordon port-forward: 127.0.0.1:%lu: %s\n", local, strerror(errno));
        return 125;
    }
    (void) signal(SIGPIPE, SIG_IGN);
    printf("Forwarding from 127.0.0.1:%u -> %lu\n", ntohs(sin.sin_port), remote);
    fflush(stdout);
    for (;;) {
        int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            fprintf(stderr, "cordon port-forward: accept: %s\n", strerror(errno));
            return 125;
        }
        struct conn *c = calloc(1, sizeof *c);
        pthread_t th;
        if (c) {
            c->client = fd;
            (void) snprintf(c->request, sizeof c->request,
                            "GET /v1/sandboxes/%.64s/ports/%lu HTTP/1.1\r\nHost: cordond\r\n"
                            "Upgrade: cordon-tcp\r\nConnection: Upgrade\r\n\r\n",
                            argv[0], remote);
        }
        if (!c || pthread_create(&th, NULL, serve, c) != 0) {
            (void) close(fd);
            free(c);
            continue;
        }
        (void) pthread_detach(th);
    }
}
