/* Trajectories (docs/trajectories.md). A sandbox made with spec.trajectory records its steps, each
 * exec in the foreground, in <state dir>/trajectories/<id>/steps.jsonl: one JSON line a step
 * (index, request, its digest, result, violations during it, wall time), written and fdatasync'd
 * before the step's answer goes out, so that an answered step is on disk whatever happens to cordond
 * or the host next. A request that names its step (step: k) runs once: a recorded step k with the
 * same request is answered from the log ("replayed": true), another request for k is 409
 * step_mismatch, and a k past the next step is 409 step_ahead. One step of a trajectory runs at a
 * time (409 step_in_progress). Runs in cordond's loop. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "shared/error.h"
#include "supervise/policy.h"

struct box;
struct trajectory;

/* A step under way (cdn_traj_begin → cdn_traj_record or cdn_traj_abort). */
struct traj_step {
    struct trajectory *t; /* NULL: no step */
    uint64_t k;
    char digest[72]; /* "sha256:<hex>" of the request's canonical JSON */
    json_t *request; /* owned */
    double started_unix;
    uint64_t violations[_CDN_VK_MAX]; /* the sandbox's counts when it began */
};

enum { TRAJ_RUN = 0, TRAJ_REPLAY = 1 };

/* Begin a step of b's trajectory (b->spec.trajectory; the log is opened, or made, on first use):
 * kind ("exec"), the request's canonical JSON (stolen), k (has_k false: the next). Returns TRAJ_RUN
 * (run it, then record or abort s), TRAJ_REPLAY (*ret_recorded: the recorded step's line, owned), or
 * < 0 with *status and err for the answer: 409 (err->field "step": step_in_progress, step_mismatch,
 * step_ahead; *code says which), 500 (the log cannot be read or made). */
int cdn_traj_begin(struct box *b, const char *kind, json_t *request, bool has_k, uint64_t k,
                   struct traj_step *s, json_t **ret_recorded, int *status, const char **code,
                   struct cdn_error *err);
/* Record s with its result (stolen) and end it: the line is on disk when this returns 0; -errno
 * (not recorded: the step is not taken, and a re-issue runs again). */
int cdn_traj_record(struct box *b, struct traj_step *s, const char *kind, json_t *result);
/* End s without recording it (it did not run). */
void cdn_traj_abort(struct traj_step *s);

/* A route's begin: cdn_traj_begin when request is given (stolen; NULL: this request is no step),
 * answering req itself when it cannot go on: the refusal, or a step named where there is none (400
 * bad_code, field "step"). Returns TRAJ_RUN (s begun, or left empty when no step), TRAJ_REPLAY
 * (*ret_recorded, owned), or -1: answered. */
struct evhttp_request;
int cdn_api_traj_begin(struct evhttp_request *req, struct box *b, const char *kind, json_t *request,
                       bool has_k, uint64_t k, const char *bad_code, struct traj_step *s,
                       json_t **ret_recorded);
/* TRAJ_REPLAY of a step whose result is a JSON object (a write's, a call's): req answered 200 with
 * that result, "step" and "replayed": true. recorded is taken. */
void cdn_api_traj_replay(struct evhttp_request *req, json_t *recorded);
/* A step whose result is the JSON object res (a write's stat, a call's answer) is recorded (s is
 * done), and res gets "step", and "step_recorded": false with "step_error" if the line failed. */
void cdn_traj_record_result(struct box *b, struct traj_step *s, const char *kind, json_t *res);

/* GET /v1/trajectories/{id}?from=&limit=: {"id", "steps": [steps from … on, at most limit], "from",
 * "more" (steps after these), "next_step", "sandbox", "rolled_back"}; NULL and err (-ENOENT: no such
 * trajectory). */
json_t *cdn_traj_json(const char *id, uint64_t from, uint64_t limit, struct cdn_error *err);
/* A page of GET /v1/trajectories/{id}: at most this many steps (limit's default and ceiling), and
 * no more bytes of steps than CDN_TRAJ_PAGE_BYTES (one step at least, however large). */
#define CDN_TRAJ_PAGE_STEPS     1000u
#define CDN_TRAJ_PAGE_STEPS_MAX 10000u
#define CDN_TRAJ_PAGE_BYTES     (32u << 20)
/* How many steps trajectory id has recorded (made empty when there is none); -EBUSY while one is under
 * way (err). */
int cdn_traj_steps(const char *id, uint64_t *ret, struct cdn_error *err);
/* Start trajectory child (made; it must have no steps) with the first n steps of parent, as they are
 * (a fork: docs/trajectories.md). 0, or a negative errno and err. */
int cdn_traj_fork(const char *parent, uint64_t n, const char *child, struct cdn_error *err);
/* Whether trajectory id has steps (*ret > 0), without opening its log; a log never made has none. */
int cdn_traj_steps_quiet(const char *id, uint64_t *ret);
/* A rollback to a checkpoint taken at step k: steps k… leave the log (the next step is k again) and go,
 * marked "rolled_back": {"checkpoint", "time"}, to the trajectory's rolled_back.jsonl, on disk first.
 * How many went in *ret_n. -EBUSY while a step runs. */
int cdn_traj_rollback(const char *id, uint64_t k, const char *checkpoint, uint64_t *ret_n,
                      struct cdn_error *err);
/* The steps rollbacks took off trajectory id, in order (a new array; empty when none). */
json_t *cdn_traj_rolled_back(const char *id);
