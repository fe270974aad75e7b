/* Sandbox records in cordond's sandbox directory (record.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "core/cgroup.h"
#include "core/sandbox.h"
#include "core/spec.h"
#include "shared/error.h"

struct box;

struct record {
    char id[CDN_ID_LEN + 1];
    int slot;
    pid_t init_pid;
    uint64_t init_start;
    double created_unix;
    bool pooled;                      /* it was waiting in a warm pool: not adopted, ended */
    int net_lease;                    /* its network namespace's lease (net/netns.h), -1 for none */
    uint64_t oom_base, cpu_base;      /* its cgroup's counts when it was made (a reused directory's) */
    char cgroup[CDN_CGROUP_NAME_MAX]; /* a runtime's container (cdn_box_attach): the engine's; "": the slot's
                                       */
    bool attached;                    /* a runtime's container: its init and socket are the runtime's */
    uint32_t ids_from, ids_count; /* a runtime's container: the engine's id range (sandbox.h root_ids_from) */
    struct cdn_spec spec;         /* owned */
    json_t *json;                 /* owned: the whole record, for the tier's restore() */
};

void cdn_record_path(const char *id, const char *ext, char *buf, size_t size);
/* Start time of pid in clock ticks since boot (0 if it does not exist). */
uint64_t cdn_record_start_time(pid_t pid);
int cdn_record_write(const struct box *b);
/* Remove the record and the socket file of id. */
void cdn_record_remove(const char *id);
/* The listening socket for a new sandbox's init (<id>.sock); returns the fd. */
int cdn_record_listen(const char *id);
/* Connect to a sandbox's init through <id>.sock; returns the fd (blocking). */
int cdn_record_connect(const char *id);
int cdn_record_load(const char *path, struct record *ret, struct cdn_error *err);
/* fn(id, path) for every record in the directory. */
int cdn_record_scan(void (*fn)(const char *id, const char *path));

/* An ended sandbox kept for its retention (<id>.ended): what GET, its events and violations answer,
 * so that a restarted cordond still answers them (410 for the rest) until the retention ends. */
int cdn_record_write_ended(const struct box *b, const char *events, size_t len);
void cdn_record_remove_ended(const char *id);
int cdn_record_scan_ended(void (*fn)(const char *id, const char *path));
