/* cordon exec -i / -t: a command we talk to, as docker exec -i / -it.
 *
 * The command runs as a background process of the sandbox (…/processes,
 * docs/cordond.md) with its stdin kept open, and with -t on a terminal the
 * size of ours. This end forwards what we read on stdin (each write answered
 * only once the sandbox's init has passed it on: a fast producer waits for a
 * slow reader, nothing is dropped), follows its output from position 0 on
 * (a thread of its own, so that a command that prints while we wait for
 * input is shown at once), passes on our window's size and, without a
 * terminal, SIGINT, SIGTERM and SIGHUP; and exits with its status. With -t on
 * a terminal, ours is raw: every key (Ctrl-C, Ctrl-D, Ctrl-Z) goes to the
 * sandbox's terminal, whose line discipline makes of it what a local one would. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "core/json-util.h"
#include "shared/base64.h"
#include "shared/macro.h"

#define STDIN_CHUNK (64u << 10)

static int wake[2] = {-1, -1}; /* signal handlers and the output thread → the main loop */

static void on_signal(int sig)
{
    uint8_t b = (uint8_t) sig;
    int e = errno;
    (void) !write(wake[1], &b, 1);
    errno = e;
}

struct follow {
    char path[300];
    uint64_t next;
    bool ended;
    int exit_code;
    char error[200];
};

static void write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w, n -= (size_t) w;
    }
}

static void on_line(const char *line, size_t len, void *arg)
{
    struct follow *f = arg;
    _cleanup_json_ json_t *o = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(o, "type"));
    if (!type)
        return;
    if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
        const char *b64 = json_string_value(json_object_get(o, "data_b64"));
        size_t n = b64 ? strlen(b64) : 0;
        _cleanup_free_ uint8_t *d = malloc(n / 4 * 3 + 3);
        long k = d ? cdn_base64_decode(b64 ? b64 : "", n, d) : -1;
        if (k > 0) {
            write_all(type[3] == 'o' ? 1 : 2, d, (size_t) k);
            f->next = (uint64_t) json_integer_value(json_object_get(o, "pos")) + (uint64_t) k;
        }
    } else if (strcmp(type, "dropped") == 0) {
        fprintf(stderr, "\r\ncordon exec: %lld bytes of output were dropped before they were shown\r\n",
                (long long) (json_integer_value(json_object_get(o, "to")) -
                             json_integer_value(json_object_get(o, "from"))));
    } else if (strcmp(type, "exit") == 0) {
        f->ended = true;
        json_t *code = json_object_get(o, "exit_code");
        f->exit_code = json_is_integer(code) ? (int) json_integer_value(code) : 125;
        if (!json_is_integer(code))
            (void) snprintf(f->error, sizeof f->error, "%s",
                            json_string_value(json_object_get(o, "error"))
                                ? json_string_value(json_object_get(o, "error"))
                                : "the sandbox ended");
    }
}

static void *follow_thread(void *arg)
{
    struct follow *f = arg;
    cordon_client *c = cordon_client_new(NULL);
    int r = c ? 0 : -ENOMEM;
    for (int round = 0; c && !f->ended && round < 100000;
         round++) { /* "cut": a slow terminal; on from next */
        char path[400];
        (void) snprintf(path, sizeof path, "%s&since=%llu", f->path, (unsigned long long) f->next);
        if ((r = cordon_request_lines(c, "GET", path, on_line, f)) < 0)
            break;
    }
    if (!f->ended) {
        const struct cordon_error *e = c ? cordon_last_error(c) : NULL;
        (void) snprintf(f->error, sizeof f->error, "%s",
                        e && e->message[0] ? e->message : strerror(r < 0 ? -r : EPROTO));
        f->exit_code = 125;
    }
    cordon_client_free(c);
    on_signal(0); /* 0: the output ended */
    return NULL;
}

static void window(uint16_t *rows, uint16_t *cols)
{
    struct winsize ws = {0};
    if ((ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0 && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) < 0) ||
        !ws.ws_row || !ws.ws_col)
        ws.ws_row = 24, ws.ws_col = 80;
    *rows = ws.ws_row > 999 ? 999 : ws.ws_row;
    *cols = ws.ws_col > 999 ? 999 : ws.ws_col;
}

static struct termios saved;
static bool raw;

static void restore_terminal(void)
{
    if (raw)
        (void) tcsetattr(STDIN_FILENO, TCSADRAIN, &saved);
    raw = false;
}

static int post(cordon_client *c, const char *path, const void *body, size_t len, const char *type)
{
    char *out = NULL;
    size_t n = 0;
    int r = cordon_request(c, "POST", path, body, len, type, NULL, &out, &n);
    free(out);
    return r;
}

int cdn_cli_exec_attached(const char *id, const char *const *cmd, json_t *body, bool in, bool tty)
{
    uint16_t rows = 24, cols = 80;
    if (tty) {
        window(&rows, &cols);
        json_object_set_new(body, "pty", json_pack("{s:i, s:i}", "rows", rows, "cols", cols));
    }
    json_t *argv = json_array();
    for (size_t i = 0; cmd[i]; i++)
        json_array_append_new(argv, json_string(cmd[i]));
    json_object_set_new(body, "cmd", argv);
    json_object_set_new(body, "background", json_true());
    if (in && !tty)
        json_object_set_new(body, "keep_stdin", json_true());
    _cleanup_free_ char *text = json_dumps(body, JSON_COMPACT);
    cordon_client *c = cdn_cli_connect();
    if (!c || !text) {
        cordon_client_free(c);
        return 125;
    }
    char path[300], *out = NULL;
    size_t n = 0;
    (void) snprintf(path, sizeof path, "/v1/sandboxes/%.64s/exec", id);
    int r = cordon_request(c, "POST", path, text, strlen(text), "application/json", NULL, &out, &n);
    _cleanup_json_ json_t *started = r < 0 ? NULL : json_loadb(out, n, 0, NULL);
    free(out);
    json_int_t pid = json_integer_value(json_object_get(started, "pid"));
    if (r < 0 || pid <= 0) {
        int ret = r < 0 ? cdn_cli_fail(c, r, "exec")
                        : (fprintf(stderr, "cordon exec: no pid in the answer\n"), 125);
        cordon_client_free(c);
        return ret;
    }
    char base[200];
    (void) snprintf(base, sizeof base, "/v1/sandboxes/%.64s/processes/%lld", id, (long long) pid);
    static struct follow f;
    (void) snprintf(f.path, sizeof f.path, "%s/output?follow=true&encoding=base64", base);
    pthread_t thread;
    if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) < 0 || pthread_create(&thread, NULL, follow_thread, &f) != 0) {
        fprintf(stderr, "cordon exec: %s\n", strerror(errno));
        cordon_client_free(c);
        return 125;
    }
    bool local_tty = tty && isatty(STDIN_FILENO);
    if (local_tty && tcgetattr(STDIN_FILENO, &saved) == 0) {
        struct termios t = saved;
        cfmakeraw(&t);
        raw = tcsetattr(STDIN_FILENO, TCSADRAIN, &t) == 0;
        atexit(restore_terminal);
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    (void) sigaction(SIGWINCH, &sa, NULL);
    if (!raw) { /* a terminal's keys go through it; without one, our signals are the process's */
        (void) sigaction(SIGINT, &sa, NULL);
        (void) sigaction(SIGTERM, &sa, NULL);
        (void) sigaction(SIGHUP, &sa, NULL);
    }
    bool reading = in;
    _cleanup_free_ uint8_t *buf = malloc(STDIN_CHUNK);
    char stdin_path[240], eof_path[240], resize_path[240], signal_path[240];
    (void) snprintf(stdin_path, sizeof stdin_path, "%s/stdin", base);
    (void) snprintf(eof_path, sizeof eof_path, "%s/stdin?eof=true", base);
    (void) snprintf(resize_path, sizeof resize_path, "%s/resize", base);
    (void) snprintf(signal_path, sizeof signal_path, "%s/signal", base);
    for (bool done = !buf; !done;) {
        struct pollfd p[2] = {{.fd = wake[0], .events = POLLIN}, {.fd = STDIN_FILENO, .events = POLLIN}};
        if (poll(p, reading ? 2 : 1, -1) < 0 && errno != EINTR)
            break;
        uint8_t sig;
        while (read(wake[0], &sig, 1) == 1) {
            if (sig == 0) {
                done = true;
            } else if (sig == SIGWINCH && tty) {
                uint16_t nr, nc;
                window(&nr, &nc);
                char rc[64];
                int k = snprintf(rc, sizeof rc, "{\"rows\": %u, \"cols\": %u}", nr, nc);
                (void) post(c, resize_path, rc, (size_t) k, "application/json");
            } else if (sig != SIGWINCH) {
                char s[32];
                int k = snprintf(s, sizeof s, "{\"signal\": %u}", sig);
                (void) post(c, signal_path, s, (size_t) k, "application/json");
            }
        }
        if (done || !reading || !(p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t got = read(STDIN_FILENO, buf, STDIN_CHUNK);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got <= 0) { /* our input ended: so does its (a terminal's: ^D, as a local one would) */
            reading = false;
            (void) post(c, eof_path, NULL, 0, "application/octet-stream");
        } else if (post(c, stdin_path, buf, (size_t) got, "application/octet-stream") < 0) {
            reading = false; /* it no longer reads (it ended, or closed its stdin) */
        }
    }
    restore_terminal();
    (void) pthread_join(thread, NULL);
    if (f.error[0])
        fprintf(stderr, "cordon exec: %s\n", f.error);
    char *gone = NULL;
    size_t gone_len = 0;
    (void) cordon_request(c, "DELETE", base, NULL, 0, NULL, NULL, &gone, &gone_len); /* its record */
    free(gone);
    cordon_client_free(c);
    return f.exit_code;
}
