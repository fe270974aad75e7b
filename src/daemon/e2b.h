/* cordond's E2B-compatible surface (e2b.c, docs/e2b.md). */
#pragma once

#include <event2/http.h>
#include <stdbool.h>

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
/* process.Process/{method} for sandbox b (e2b-process.c). */
void cdn_e2b_process(struct evhttp_request *req, struct box *b, const char *method);
/* {"code": status, "message"}, E2B's error body. */
void cdn_e2b_reply_error(struct evhttp_request *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
