/* runtime/attach.h. cordond is reached through libcordon (HTTP on its unix socket). */
#include "runtime/attach.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/json-util.h"
#include "lib/cordon.h"
#include "shared/macro.h"

static const char *socket_path(void)
{
    const char *p = getenv("CORDON_SOCKET");
    return p && p[0] ? p : "/run/cordon/cordond.sock";
}

bool cdn_rt_cordond_present(void)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    const char *p = socket_path();
    if (strlen(p) >= sizeof a.sun_path)
        return false;
    strcpy(a.sun_path, p);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool up = fd >= 0 && connect(fd, (struct sockaddr *) &a, sizeof a) == 0;
    if (fd >= 0)
        (void) close(fd);
    return up;
}

static void client_freep(cordon_client **c)
{
    cordon_client_free(*c);
}

int cdn_rt_attach(const struct cdn_rt_attach *a, char ret_id[CDN_RT_BOX_ID_MAX], struct cdn_error *err)
{
    _cleanup_free_ char *spec = cdn_spec_to_json(a->spec);
    json_error_t je;
    _cleanup_json_ json_t *o =
        spec ? json_pack_ex(&je, 0, "{s:i, s:I, s:i, s:s, s:o}", "init_pid", (int) a->init_pid, "init_start",
                            (json_int_t) a->init_start, "slot", a->slot, "socket", a->socket, "spec",
                            json_loads(spec, 0, NULL))
             : NULL;
    if (o && a->cgroup && json_object_set_new(o, "cgroup", json_string(a->cgroup)) < 0)
        o = (json_decref(o), NULL);
    if (o && a->ids_from &&
        json_object_update_new(o, json_pack("{s:I, s:I}", "ids_from", (json_int_t) a->ids_from, "ids_count",
                                            (json_int_t) a->ids_count)) < 0)
        o = (json_decref(o), NULL);
    _cleanup_free_ char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    _cleanup_(client_freep) cordon_client *c = cordon_client_new(socket_path());
    if (!body || !c)
        return cdn_error_set(err, ENOMEM, "attach to cordond: out of memory");
    long status = 0;
    _cleanup_free_ char *answer = NULL;
    size_t len = 0;
    int r = cordon_request(c, "POST", "/v1/sandboxes/attach", body, strlen(body), "application/json", &status,
                           &answer, &len);
    if (r < 0 && r != -EPROTO)
        return cdn_error_set(err, -r, "attach to cordond at %s: %s", socket_path(), strerror(-r));
    _cleanup_json_ json_t *reply = answer ? json_loadb(answer, len, 0, &je) : NULL;
    const char *id = json_string_value(json_object_get(reply, "id"));
    if (status == 201 && id && strlen(id) < CDN_RT_BOX_ID_MAX) {
        (void) snprintf(ret_id, CDN_RT_BOX_ID_MAX, "%s", id);
        return 0;
    }
    const json_t *e = json_object_get(reply, "error");
    const char *field = json_string_value(json_object_get(e, "field")),
               *msg = json_string_value(json_object_get(e, "message"));
    /* cordond's field is the spec's, which is the bundle's annotation that asked for it */
    return cdn_error_field(err, EIO, field ? field : "", "cordond refused the container (HTTP %ld): %s",
                           status, msg ? msg : "no answer");
}

void cdn_rt_detach(const char *id)
{
    cordon_client *c = cordon_client_new(socket_path());
    char path[128];
    (void) snprintf(path, sizeof path, "/v1/sandboxes/%s", id);
    long status = 0;
    char *answer = NULL;
    size_t len = 0;
    if (c)
        (void) cordon_request(c, "DELETE", path, NULL, 0, NULL, &status, &answer, &len);
    free(answer);
    cordon_client_free(c);
}

int cdn_rt_attached_start(const char *id, const void *payload, size_t len, struct cdn_error *err)
{
    _cleanup_(client_freep) cordon_client *c = cordon_client_new(socket_path());
    char path[128];
    (void) snprintf(path, sizeof path, "/v1/sandboxes/%s/oci-start", id);
    long status = 0;
    _cleanup_free_ char *answer = NULL;
    size_t n = 0;
    int r =
        c ? cordon_request(c, "POST", path, payload, len, "application/octet-stream", &status, &answer, &n)
          : -ENOMEM;
    if (r < 0 && r != -EPROTO)
        return cdn_error_set(err, -r, "start through cordond at %s: %s", socket_path(), strerror(-r));
    json_error_t je;
    _cleanup_json_ json_t *reply = answer ? json_loadb(answer, n, 0, &je) : NULL;
    if (status == 200)
        return 0;
    const char *msg = json_string_value(json_object_get(reply, "message"));
    int e = (int) json_integer_value(json_object_get(reply, "errno"));
    if (status == 422 && msg) /* init's own refusal, as await_started words it */
        return e == ENOENT
                   ? cdn_error_set(err, e, "exec: %s: executable file not found in $PATH", msg)
                   : cdn_error_set(err, e > 0 ? e : EIO, "exec: %s: %s", msg, strerror(e > 0 ? e : EIO));
    msg = json_string_value(json_object_get(json_object_get(reply, "error"), "message"));
    return cdn_error_set(err, EIO, "start through cordond (HTTP %ld): %s", status, msg ? msg : "no answer");
}

int cdn_rt_hand_listener(const char *id, pid_t pid, int fd, struct cdn_error *err)
{
    _cleanup_(client_freep) cordon_client *c = cordon_client_new(socket_path());
    char path[128], body[64];
    (void) snprintf(path, sizeof path, "/v1/sandboxes/%s/oci-listener", id);
    (void) snprintf(body, sizeof body, "{\"pid\": %d, \"fd\": %d}", (int) pid, fd);
    long status = 0;
    _cleanup_free_ char *answer = NULL;
    size_t n = 0;
    int r = c ? cordon_request(c, "POST", path, body, strlen(body), "application/json", &status, &answer, &n)
              : -ENOMEM;
    if (r < 0 && r != -EPROTO)
        return cdn_error_set(err, -r, "hand the exec's seccomp listener to cordond at %s: %s", socket_path(),
                             strerror(-r));
    if (status == 200)
        return 0;
    json_error_t je;
    _cleanup_json_ json_t *reply = answer ? json_loadb(answer, n, 0, &je) : NULL;
    const char *msg = json_string_value(json_object_get(json_object_get(reply, "error"), "message"));
    return cdn_error_set(err, EIO, "cordond did not take the exec's seccomp listener (HTTP %ld): %s", status,
                         msg ? msg : "no answer");
}
