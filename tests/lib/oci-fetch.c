/* A test-only driver of the registry client (src/oci/registry.h), run by
 * tests/integration/test_registry_client.py against the tests' own registry on loopback.
 *
 *   oci-fetch [--auth-file F] [--ca F]… [--insecure H]… [--mirror H]… [--attempts N] [--stall S]
 *             HOST manifest REPO REF [OUT]         prints digest, media_type, size; body to OUT
 *             HOST blob REPO DIGEST SIZE OUT       prints digest, size, progress calls
 *             HOST blobs REPO DIR DIGEST:SIZE…     each blob in a thread of its own, one client
 *
 * Exit 0 on success; 1 with "error: errno=E field=F: MESSAGE" on stderr. Not installed. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oci/registry.h"

struct progress {
    unsigned calls;
    uint64_t last, total;
};

static void on_progress(void *userdata, uint64_t done, uint64_t total)
{
    struct progress *p = userdata;
    if (done < p->last)
        printf("progress restarted at %" PRIu64 "\n", done);
    p->calls++;
    p->last = done;
    p->total = total;
}

static int fail(const struct cdn_error *e, int r)
{
    fprintf(stderr, "error: errno=%d field=%s: %s\n", -r, e->field, e->msg);
    return 1;
}

static int manifest(struct cdn_registry *reg, char **argv, int argc)
{
    struct cdn_error e = {0};
    struct cdn_registry_manifest m = {0};
    if (argc < 2)
        return 2;
    int r = cdn_registry_get_manifest(reg, argv[0], argv[1], NULL, &m, &e);
    if (r < 0)
        return fail(&e, r);
    printf("digest %s\nmedia_type %s\nsize %zu\n", m.digest, m.media_type, m.size);
    if (argc > 2) {
        FILE *f = fopen(argv[2], "we");
        if (!f || fwrite(m.data, 1, m.size, f) != m.size || fclose(f) != 0)
            return 1;
    }
    cdn_registry_manifest_done(&m);
    return 0;
}

static int blob(struct cdn_registry *reg, char **argv, int argc)
{
    struct cdn_error e = {0};
    struct progress p = {0};
    if (argc < 4)
        return 2;
    int fd = open(argv[3], O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return 1;
    int r =
        cdn_registry_get_blob(reg, argv[0], argv[1], strtoull(argv[2], NULL, 10), fd, on_progress, &p, &e);
    off_t end = lseek(fd, 0, SEEK_END);
    close(fd);
    printf("file_size %lld\nprogress_calls %u\nprogress_last %" PRIu64 "/%" PRIu64 "\n", (long long) end,
           p.calls, p.last, p.total);
    if (r < 0)
        return fail(&e, r);
    printf("digest %s\n", argv[1]);
    return 0;
}

struct job {
    struct cdn_registry *reg;
    const char *repo;
    char digest[CDN_DIGEST_MAX];
    uint64_t size;
    char path[4096];
    int r;
    struct cdn_error e;
};

static void *run_job(void *arg)
{
    struct job *j = arg;
    int fd = open(j->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    j->r =
        fd < 0 ? -errno : cdn_registry_get_blob(j->reg, j->repo, j->digest, j->size, fd, NULL, NULL, &j->e);
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* Several blobs at once through one client: what parallel layer downloads do. */
static int blobs(struct cdn_registry *reg, char **argv, int argc)
{
    struct job jobs[16] = {0};
    pthread_t t[16];
    int n = argc - 2, rc = 0;
    if (argc < 3 || n > 16)
        return 2;
    for (int i = 0; i < n; i++) {
        const char *colon = strrchr(argv[2 + i], ':');
        if (!colon)
            return 2;
        jobs[i].reg = reg;
        jobs[i].repo = argv[0];
        (void) snprintf(jobs[i].digest, sizeof jobs[i].digest, "%.*s", (int) (colon - argv[2 + i]),
                        argv[2 + i]);
        jobs[i].size = strtoull(colon + 1, NULL, 10);
        (void) snprintf(jobs[i].path, sizeof jobs[i].path, "%s/%d", argv[1], i);
        if (pthread_create(&t[i], NULL, run_job, &jobs[i]) != 0)
            return 1;
    }
    for (int i = 0; i < n; i++) {
        (void) pthread_join(t[i], NULL);
        if (jobs[i].r < 0)
            rc = fail(&jobs[i].e, jobs[i].r);
        else
            printf("ok %s\n", jobs[i].digest);
    }
    return rc;
}

int main(int argc, char **argv)
{
    const char *ca[16] = {0}, *insecure[16] = {0}, *mirrors[16] = {0};
    size_t nca = 0, nin = 0, nmi = 0;
    struct cdn_registry_options o = {0};
    static const struct option opts[] = {
        {"auth-file", required_argument, NULL, 'a'},
        {"ca", required_argument, NULL, 'c'},
        {"insecure", required_argument, NULL, 'i'},
        {"mirror", required_argument, NULL, 'm'},
        {"attempts", required_argument, NULL, 'n'},
        {"stall", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'a')
            o.auth_file = optarg;
        else if (c == 'c' && nca < 15)
            ca[nca++] = optarg;
        else if (c == 'i' && nin < 15)
            insecure[nin++] = optarg;
        else if (c == 'm' && nmi < 15)
            mirrors[nmi++] = optarg;
        else if (c == 'n')
            o.blob_attempts = (unsigned) strtoul(optarg, NULL, 10);
        else if (c == 's')
            o.stall_timeout_s = strtol(optarg, NULL, 10);
        else
            return 2;
    }
    o.ca_files = ca;
    o.insecure = insecure;
    o.mirrors = mirrors;
    if (argc - optind < 2)
        return 2;
    struct cdn_registry *reg = NULL;
    struct cdn_error e = {0};
    int r = cdn_registry_new(argv[optind], &o, &reg, &e);
    if (r < 0)
        return fail(&e, r);
    const char *cmd = argv[optind + 1];
    char **rest = argv + optind + 2;
    int nrest = argc - optind - 2;
    int rc = strcmp(cmd, "manifest") == 0 ? manifest(reg, rest, nrest)
             : strcmp(cmd, "blob") == 0   ? blob(reg, rest, nrest)
             : strcmp(cmd, "blobs") == 0  ? blobs(reg, rest, nrest)
                                          : 2;
    cdn_registry_free(reg);
    return rc;
}
