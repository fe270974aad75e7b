/* cordond's E2B-compatible surface (e2b.c, docs/e2b.md). */
#pragma once

#include <event2/http.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether path is one of E2B's (its control plane, its sandbox daemon's). */
bool cdn_e2b_path(const char *path);
/* Answer an E2B request; tcp: it came on the TCP listener (credentials checked here). */
void cdn_e2b_route(struct evhttp_request *req, const char *path, bool tcp);
/* The credentials of an E2B request on the TCP listener: X-API-KEY (cordond's token), or
 * X-Access-Token, the token of the sandbox that E2b-Sandbox-Id names (still after it ended: the
 * SDK asks /health then, and is told 502). Constant time. */
bool cdn_e2b_authorized(const char *api_key, const char *access_token, const char *sandbox_id);
/* A sandbox's envd access token: 64 hex digits ("" if it cannot be made). */
void cdn_e2b_access_token(const char *id, char out[65]);
struct box;
struct cdn_error;
/* A template of cordond's configuration (e2b_template = NAME:SPECFILE): the spec file read and
 * checked now, kept for each create of it. 0, or -errno with err saying why. */
int cdn_e2b_template_configure(const char *arg, struct cdn_error *err);
/* process.Process/{method} for sandbox b (e2b-process.c). */
void cdn_e2b_process(struct evhttp_request *req, struct box *b, const char *method);
/* filesystem.Filesystem/{method} and GET|POST /files for sandbox b (e2b-files.c). */
void cdn_e2b_filesystem(struct evhttp_request *req, struct box *b, const char *method);
void cdn_e2b_files(struct evhttp_request *req, struct box *b);

/* The Connect protocol as envd speaks it (e2b.c). envelope: one message of a stream (o taken);
 * connect_error: {"error": {"code", "message"}}, a stream's end; stream_refuse: a stream answered
 * by its end alone (200: its errors come so); stream_request: the one envelope of a streaming
 * request's body as a JSON object (NULL with why set); unary_error: a unary RPC's error, its code a
 * string (not_found, invalid_argument, …); request_user: the user the request names ("Authorization:
 * Basic base64(user:)", NULL: none or root), malloc'd. */
void cdn_e2b_envelope(struct evhttp_request *req, uint8_t flags, json_t *o);
json_t *cdn_e2b_connect_error(const char *code, const char *msg);
void cdn_e2b_stream_refuse(struct evhttp_request *req, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
json_t *cdn_e2b_stream_request(struct evhttp_request *req, char *why, size_t size);
void cdn_e2b_unary_error(struct evhttp_request *req, int status, const char *code, const char *msg);
char *cdn_e2b_request_user(struct evhttp_request *req);
/* {"code": status, "message"}, E2B's error body. */
void cdn_e2b_reply_error(struct evhttp_request *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
