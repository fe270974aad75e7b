/* `cordon image pull|ls|inspect|rm|prune`: the OCI image store (oci/store.h) from the command line.
 * Runs on the host as root; the references are the operator's. Full build only. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/paths.h"
#include "oci/ref.h"
#include "oci/resolve.h"
#include "oci/store.h"
#include "shared/strv.h"
#include "tiers/qemu/vmprep.h"

static int fail(const struct cdn_error *e)
{
    fprintf(stderr, "cordon: %s\n", e->msg[0] ? e->msg : strerror(e->errnum));
    return 125;
}

static int pull(int argc, char *const *argv)
{
    if (argc < 1)
        return fprintf(stderr, "usage: cordon image pull REF…\n"), 125;
    for (int i = 0; i < argc; i++) {
        struct cdn_error err = {0};
        struct cdn_pull_env env = {0};
        struct cdn_pull_options o;
        int r = cdn_pull_options_from_env(&o, &env);
        if (r >= 0)
            r = cdn_oci_ensure(argv[i], CDN_PULL_ALWAYS, &o, NULL, &err);
        cdn_pull_env_free(&env);
        if (r < 0)
            return fail(&err);
        printf("%s\n", argv[i]);
    }
    return 0;
}

struct listing {
    struct cdn_store *s;
    json_t *rows;
};

static int list_one(const char *ref, const char *manifest, void *data)
{
    struct listing *l = data;
    struct cdn_image_record rec = {0};
    if (cdn_store_image_get(l->s, manifest, &rec, NULL) < 0)
        return 0; /* a ref whose record went: prune's to tidy */
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:s}", "reference", ref, "manifest", manifest, "size",
                          (json_int_t) rec.size, "layers", (json_int_t) rec.n_layers, "created",
                          (json_int_t) rec.created, "platform", rec.arch);
    cdn_image_record_done(&rec);
    return o && json_array_append_new(l->rows, o) == 0 ? 0 : -ENOMEM;
}

static int ls(int argc, char *const *argv)
{
    bool as_json = argc == 1 && strcmp(argv[0], "--json") == 0;
    if (argc > 1 || (argc == 1 && !as_json))
        return fprintf(stderr, "usage: cordon image ls [--json]\n"), 125;
    struct cdn_error err = {0};
    _cleanup_store_ struct cdn_store *s = NULL;
    struct listing l = {.rows = json_array()};
    int r = l.rows ? cdn_store_open(cdn_state_dir(), &s, &err) : -ENOMEM;
    l.s = s;
    if (r >= 0)
        r = cdn_store_ref_list(s, list_one, &l, &err);
    if (r < 0) {
        json_decref(l.rows);
        return fail(&err);
    }
    if (as_json) {
        (void) json_dumpf(l.rows, stdout, JSON_COMPACT);
        putchar('\n');
    } else {
        printf("%-60s %-19s %10s %6s\n", "REFERENCE", "MANIFEST", "SIZE", "LAYERS");
        size_t i;
        json_t *o;
        json_array_foreach(l.rows, i, o)
        {
            const char *m = json_string_value(json_object_get(o, "manifest"));
            printf("%-60s %-19.19s %9.1fM %6" JSON_INTEGER_FORMAT "\n",
                   json_string_value(json_object_get(o, "reference")), m,
                   (double) json_integer_value(json_object_get(o, "size")) / (1 << 20),
                   json_integer_value(json_object_get(o, "layers")));
        }
    }
    json_decref(l.rows);
    return 0;
}

static json_t *strv_json(const struct cdn_strv *v)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < v->n; i++)
        (void) json_array_append_new(a, json_string(v->v[i]));
    return a;
}

static int canonical(const char *name, char out[CDN_IMAGE_REF_MAX], struct cdn_error *err)
{
    struct cdn_image_ref ref;
    int r = cdn_image_ref_parse(name, &ref, err);
    if (r < 0)
        return r;
    if (!cdn_image_ref_is_oci(&ref))
        return cdn_error_field(err, EINVAL, "image", "image: '%s' is not an OCI reference", name);
    return cdn_image_ref_format(&ref, out, CDN_IMAGE_REF_MAX) < 0 ? -ENAMETOOLONG : 0;
}

static int inspect(int argc, char *const *argv)
{
    if (argc != 1)
        return fprintf(stderr, "usage: cordon image inspect REF\n"), 125;
    struct cdn_error err = {0};
    char canon[CDN_IMAGE_REF_MAX], manifest[CDN_DIGEST_MAX];
    _cleanup_store_ struct cdn_store *s = NULL;
    struct cdn_image_record rec = {0};
    struct cdn_oci_config c = {0};
    int r = canonical(argv[0], canon, &err);
    if (r >= 0 && (r = cdn_store_open(cdn_state_dir(), &s, &err)) >= 0 &&
        (r = cdn_store_ref_get(s, canon, manifest, &err)) >= 0 &&
        (r = cdn_store_image_get(s, manifest, &rec, &err)) >= 0)
        r = cdn_oci_ensure(argv[0], CDN_PULL_NEVER, NULL, &c, &err);
    if (r < 0) {
        cdn_image_record_done(&rec);
        return fail(&err);
    }
    json_t *layers = json_array();
    for (size_t i = 0; i < rec.n_layers; i++)
        (void) json_array_append_new(
            layers, json_pack("{s:s, s:s}", "diff_id", rec.diff_ids[i], "blob", rec.blobs[i]));
    json_t *o = json_pack("{s:s, s:s, s:s, s:{s:s, s:s, s:s}, s:I, s:I, s:o, s:{s:o, s:o, s:o, s:s?, s:s?}}",
                          "reference", canon, "manifest", rec.manifest, "config_digest", rec.config,
                          "platform", "os", rec.os, "architecture", rec.arch, "variant", rec.variant, "size",
                          (json_int_t) rec.size, "created", (json_int_t) rec.created, "layers", layers,
                          "config", "Env", strv_json(&c.env), "Entrypoint", strv_json(&c.entrypoint), "Cmd",
                          strv_json(&c.cmd), "WorkingDir", c.workdir, "User", c.user);
    cdn_image_record_done(&rec);
    cdn_oci_config_free(&c);
    if (!o)
        return fprintf(stderr, "cordon: out of memory\n"), 125;
    (void) json_dumpf(o, stdout, JSON_INDENT(2));
    putchar('\n');
    json_decref(o);
    return 0;
}

struct same {
    const char *manifest;
    int n;
};

static int count_refs(const char *ref, const char *manifest, void *data)
{
    (void) ref;
    struct same *s = data;
    s->n += strcmp(manifest, s->manifest) == 0;
    return 0;
}

/* The microvm tier's disks of images no reference names any more go with them (a cache: a later
 * sandbox of the image makes its disk again). */
static int prune_disks(struct cdn_store *s, struct cdn_error *err)
{
    struct cdn_strv named = {0};
    int r = cdn_oci_named_manifests(s, &named, err);
    if (r >= 0)
        r = cdn_vm_prune_image_disks(cdn_oci_named, &named, err);
    cdn_strv_free(&named);
    return r;
}

/* Drop the reference; the image record goes with its last reference (prune frees the bytes). */
static int rm(int argc, char *const *argv)
{
    if (argc < 1)
        return fprintf(stderr, "usage: cordon image rm REF…\n"), 125;
    struct cdn_error err = {0};
    _cleanup_store_ struct cdn_store *s = NULL;
    if (cdn_store_open(cdn_state_dir(), &s, &err) < 0)
        return fail(&err);
    for (int i = 0; i < argc; i++) {
        char canon[CDN_IMAGE_REF_MAX], manifest[CDN_DIGEST_MAX];
        if (canonical(argv[i], canon, &err) < 0 || cdn_store_ref_get(s, canon, manifest, &err) < 0)
            return fail(&err);
        /* Refused while a sandbox runs on it, whoever started it (cordon run, cordond). */
        _cleanup_close_ int claim = cdn_store_image_claim(s, manifest, canon, &err);
        if (claim < 0 || cdn_store_ref_remove(s, canon, &err) < 0)
            return fail(&err);
        struct same left = {manifest, 0};
        if (cdn_store_ref_list(s, count_refs, &left, &err) < 0 ||
            (left.n == 0 && cdn_store_image_remove(s, manifest, &err) < 0))
            return fail(&err);
        printf("%s\n", canon);
    }
    return prune_disks(s, &err) < 0 ? fail(&err) : 0;
}

static int prune(int argc, char *const *argv)
{
    (void) argv;
    if (argc != 0)
        return fprintf(stderr, "usage: cordon image prune\n"), 125;
    struct cdn_error err = {0};
    _cleanup_store_ struct cdn_store *s = NULL;
    uint64_t freed = 0;
    if (cdn_store_open(cdn_state_dir(), &s, &err) < 0 || cdn_store_prune(s, NULL, NULL, &freed, &err) < 0 ||
        prune_disks(s, &err) < 0)
        return fail(&err);
    printf("freed %" PRIu64 " bytes\n", freed);
    return 0;
}

int cdn_cli_image_oci(int argc, char *const *argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char *const *);
    } cmds[] = {{"pull", pull}, {"ls", ls}, {"inspect", inspect}, {"rm", rm}, {"prune", prune}};
    for (size_t i = 0; argc > 0 && i < ELEMENTSOF(cmds); i++)
        if (strcmp(argv[0], cmds[i].name) == 0)
            return cmds[i].fn(argc - 1, argv + 1);
    return -1;
}
