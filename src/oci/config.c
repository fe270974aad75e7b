/* Image configs (manifest.h; image-spec config.md, Docker's container image v1). Runs on the host
 * over a config blob whose digest the fetcher verified but whose content is the image author's:
 * every list and string is bounded, diff_ids are checked digests. Only what cordon uses to run the
 * image is kept (Env, WorkingDir, User, Entrypoint, Cmd, rootfs.diff_ids, the platform). */
#include "oci/manifest-json.h"
#include "oci/manifest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ARG_MAX_LEN (128u * 1024) /* the kernel's MAX_ARG_STRLEN: longer cannot be exec'd */

static int parse_list(json_t *cfg, const char *key, bool env, struct cdn_strv *ret, struct cdn_error *err)
{
    char f[48];
    (void) snprintf(f, sizeof f, "config.config.%s", key);
    json_t *arr = json_object_get(cfg, key);
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr))
        return cdn_error_field(err, EINVAL, f, "%s: not an array of strings", f);
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (!json_is_string(v))
            return cdn_error_field(err, EINVAL, f, "%s[%zu]: not a string", f, i);
        const char *s = json_string_value(v);
        if (json_string_length(v) >= ARG_MAX_LEN)
            return cdn_error_field(err, E2BIG, f, "%s[%zu]: longer than %u bytes", f, i, ARG_MAX_LEN);
        if (env && (s[0] == '=' || !strchr(s, '=')))
            return cdn_error_field(err, EINVAL, f, "%s[%zu]: not NAME=VALUE", f, i);
        int r = cdn_strv_push(ret, s);
        if (r == -E2BIG)
            return cdn_error_field(err, E2BIG, f, "%s: more than %d entries", f, CDN_STRV_MAX);
        if (r < 0)
            return r;
    }
    return 0;
}

static int parse_string(json_t *cfg, const char *key, size_t max, char **ret, struct cdn_error *err)
{
    char f[48];
    (void) snprintf(f, sizeof f, "config.config.%s", key);
    _cleanup_free_ char *buf = malloc(max + 1);
    if (!buf)
        return -ENOMEM;
    int r = cdn_oci_json_str(cfg, key, false, buf, max + 1, f, err);
    if (r < 0)
        return r;
    if (buf[0])
        *ret = TAKE_PTR(buf);
    return 0;
}

/* WorkingDir: a relative one is taken from "/" (as Docker does). */
static int parse_workdir(json_t *cfg, struct cdn_oci_config *c, struct cdn_error *err)
{
    _cleanup_free_ char *w = NULL;
    int r = parse_string(cfg, "WorkingDir", 4094, &w, err);
    if (r < 0 || !w)
        return r;
    if (w[0] != '/') {
        char *abs = NULL;
        if (asprintf(&abs, "/%s", w) < 0)
            return -ENOMEM;
        free(w);
        w = abs;
    }
    c->workdir = TAKE_PTR(w);
    return 0;
}

static int parse_run_config(json_t *cfg, struct cdn_oci_config *c, struct cdn_error *err)
{
    if (!cfg || json_is_null(cfg))
        return 0;
    if (!json_is_object(cfg))
        return cdn_error_field(err, EINVAL, "config.config", "config.config: not an object");
    int r = parse_list(cfg, "Env", true, &c->env, err);
    if (r >= 0)
        r = parse_list(cfg, "Entrypoint", false, &c->entrypoint, err);
    if (r >= 0)
        r = parse_list(cfg, "Cmd", false, &c->cmd, err);
    if (r >= 0)
        r = parse_string(cfg, "User", 255, &c->user, err);
    if (r >= 0)
        r = parse_workdir(cfg, c, err);
    return r;
}

static int parse_rootfs(json_t *rootfs, struct cdn_oci_config *c, struct cdn_error *err)
{
    if (!json_is_object(rootfs))
        return cdn_error_field(err, EINVAL, "config.rootfs", "config.rootfs: missing or not an object");
    json_t *type = json_object_get(rootfs, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "layers") != 0)
        return cdn_error_field(err, EINVAL, "config.rootfs.type", "config.rootfs.type: must be \"layers\"");
    json_t *ids = json_object_get(rootfs, "diff_ids");
    if (!json_is_array(ids))
        return cdn_error_field(err, EINVAL, "config.rootfs.diff_ids", "config.rootfs.diff_ids: not an array");
    size_t n = json_array_size(ids);
    if (n > CDN_OCI_LAYERS_MAX)
        return cdn_error_field(err, E2BIG, "config.rootfs.diff_ids",
                               "config.rootfs.diff_ids: %zu layers, more than %d", n, CDN_OCI_LAYERS_MAX);
    c->diff_ids = calloc(n ? n : 1, sizeof(*c->diff_ids));
    if (!c->diff_ids)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        char f[48];
        (void) snprintf(f, sizeof f, "config.rootfs.diff_ids[%zu]", i);
        json_t *v = json_array_get(ids, i);
        if (!json_is_string(v) || json_string_length(v) >= CDN_DIGEST_MAX)
            return cdn_error_field(err, EINVAL, f, "%s: not a digest", f);
        int r = cdn_digest_check(json_string_value(v), f, err);
        if (r < 0)
            return r;
        memcpy(c->diff_ids[i], json_string_value(v), json_string_length(v) + 1);
        c->n_diff_ids++;
    }
    return 0;
}

static int parse_platform(json_t *root, struct cdn_oci_platform *p, struct cdn_error *err)
{
    int r = cdn_oci_json_str(root, "os", false, p->os, sizeof p->os, "config.os", err);
    if (r >= 0)
        r = cdn_oci_json_str(root, "architecture", false, p->arch, sizeof p->arch, "config.architecture",
                             err);
    if (r >= 0)
        r = cdn_oci_json_str(root, "variant", false, p->variant, sizeof p->variant, "config.variant", err);
    return r;
}

int cdn_oci_config_parse(const void *json, size_t len, struct cdn_oci_config *ret, struct cdn_error *err)
{
    json_t *root = NULL;
    int r = cdn_oci_json_load(json, len, "config", &root, err);
    if (r < 0)
        return r;
    struct cdn_oci_config c = {0};
    r = parse_platform(root, &c.platform, err);
    if (r >= 0)
        r = parse_run_config(json_object_get(root, "config"), &c, err);
    if (r >= 0)
        r = parse_rootfs(json_object_get(root, "rootfs"), &c, err);
    json_decref(root);
    if (r < 0) {
        cdn_oci_config_free(&c);
        return r;
    }
    *ret = c;
    return 0;
}

void cdn_oci_config_free(struct cdn_oci_config *c)
{
    cdn_strv_free(&c->env);
    cdn_strv_free(&c->entrypoint);
    cdn_strv_free(&c->cmd);
    free(c->workdir);
    free(c->user);
    free(c->diff_ids);
    *c = (struct cdn_oci_config){0};
}

int cdn_oci_config_check(const struct cdn_oci_config *c, const struct cdn_oci_manifest *m,
                         const struct cdn_oci_platform *want, struct cdn_error *err)
{
    if (c->n_diff_ids != m->n_layers)
        return cdn_error_field(err, EINVAL, "config.rootfs.diff_ids",
                               "config.rootfs.diff_ids: %zu entries for the manifest's %zu layers",
                               c->n_diff_ids, m->n_layers);
    if (want && (c->platform.os[0] || c->platform.arch[0]) && cdn_oci_platform_rank(want, &c->platform) == 0)
        return cdn_error_field(err, ENOEXEC, "image", "image: built for %s/%s%s%s, this host runs %s/%s%s%s",
                               c->platform.os, c->platform.arch, c->platform.variant[0] ? "/" : "",
                               c->platform.variant, want->os, want->arch, want->variant[0] ? "/" : "",
                               want->variant);
    return 0;
}
