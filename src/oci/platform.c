/* Platforms and the choice of an index entry (manifest.h). The names are Go's (GOOS/GOARCH), as
 * in image-spec image-index.md; the aliases and arm variant fallbacks follow containerd's
 * platforms.Normalize and containers/image's platform matcher. Runs on the host over an index a
 * registry or a layout sent. */
#include "oci/manifest.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void cdn_oci_platform_host(struct cdn_oci_platform *ret)
{
    *ret = (struct cdn_oci_platform){.os = "linux"};
    const char *arch = "unknown", *variant = "";
#if defined(__x86_64__)
    arch = "amd64";
#elif defined(__aarch64__)
    arch = "arm64";
#elif defined(__arm__)
    arch = "arm";
#if defined(__ARM_ARCH) && __ARM_ARCH >= 7
    variant = "v7";
#elif defined(__ARM_ARCH) && __ARM_ARCH == 6
    variant = "v6";
#else
    variant = "v5";
#endif
#elif defined(__i386__)
    arch = "386";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    arch = "ppc64le";
#elif defined(__s390x__)
    arch = "s390x";
#elif defined(__riscv) && __riscv_xlen == 64
    arch = "riscv64";
#elif defined(__loongarch64)
    arch = "loong64";
#endif
    (void) snprintf(ret->arch, sizeof ret->arch, "%s", arch);
    (void) snprintf(ret->variant, sizeof ret->variant, "%s", variant);
}

static void set(char *dst, size_t size, const char *s)
{
    (void) snprintf(dst, size, "%s", s);
}

void cdn_oci_platform_normalize(struct cdn_oci_platform *p)
{
    for (char *c = p->os; *c; c++)
        if (*c >= 'A' && *c <= 'Z')
            *c = (char) (*c - 'A' + 'a');
#define ARCH(a)    (strcmp(p->arch, a) == 0)
#define VARIANT(v) (strcmp(p->variant, v) == 0)
    if (ARCH("i386"))
        set(p->arch, sizeof p->arch, "386");
    else if (ARCH("x86_64") || ARCH("x86-64") || ARCH("amd64")) {
        set(p->arch, sizeof p->arch, "amd64");
        if (VARIANT("v1"))
            p->variant[0] = '\0';
    } else if (ARCH("aarch64") || ARCH("arm64")) {
        set(p->arch, sizeof p->arch, "arm64");
        if (VARIANT("8") || VARIANT("v8"))
            p->variant[0] = '\0';
    } else if (ARCH("armhf")) {
        set(p->arch, sizeof p->arch, "arm");
        set(p->variant, sizeof p->variant, "v7");
    } else if (ARCH("armel")) {
        set(p->arch, sizeof p->arch, "arm");
        set(p->variant, sizeof p->variant, "v6");
    } else if (ARCH("arm")) {
        if (VARIANT("") || VARIANT("7"))
            set(p->variant, sizeof p->variant, "v7");
        else if (VARIANT("5") || VARIANT("6") || VARIANT("8")) {
            char v[16];
            (void) snprintf(v, sizeof v, "v%s", p->variant);
            set(p->variant, sizeof p->variant, v);
        }
    }
#undef ARCH
#undef VARIANT
}

/* An arm vN host runs vN, then older variants; anything else needs the same variant. */
int cdn_oci_platform_rank(const struct cdn_oci_platform *want, const struct cdn_oci_platform *have)
{
    struct cdn_oci_platform w = *want, h = *have;
    cdn_oci_platform_normalize(&w);
    cdn_oci_platform_normalize(&h);
    if (strcmp(w.os, h.os) != 0 || strcmp(w.arch, h.arch) != 0)
        return 0;
    if (strcmp(w.variant, h.variant) == 0)
        return 10;
    if (strcmp(w.arch, "arm") == 0 && w.variant[0] == 'v' && h.variant[0] == 'v') {
        int wv = atoi(w.variant + 1), hv = atoi(h.variant + 1);
        if (hv >= 5 && hv < wv)
            return 10 - (wv - hv);
    }
    return 0;
}

static bool unknown_platform(const struct cdn_oci_platform *p)
{
    return strcmp(p->os, "unknown") == 0 || strcmp(p->arch, "unknown") == 0;
}

static void list_platforms(const struct cdn_oci_index *ix, char *buf, size_t size)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ix->n_manifests && off < size; i++) {
        const struct cdn_oci_platform *p = &ix->manifests[i].platform;
        if (ix->manifests[i].attestation || unknown_platform(p))
            continue;
        int n = snprintf(buf + off, size - off, "%s%s/%s%s%s", off ? ", " : "", p->os[0] ? p->os : "?",
                         p->arch[0] ? p->arch : "?", p->variant[0] ? "/" : "", p->variant);
        if (n < 0)
            break;
        off += (size_t) n;
    }
    if (!buf[0])
        (void) snprintf(buf, size, "no runnable entries");
}

int cdn_oci_index_pick(const struct cdn_oci_index *ix, const struct cdn_oci_platform *want,
                       const struct cdn_oci_desc **ret, struct cdn_error *err)
{
    const struct cdn_oci_desc *best = NULL, *bare = NULL;
    int best_rank = 0;
    size_t n_bare = 0, n_platformed = 0;
    for (size_t i = 0; i < ix->n_manifests; i++) {
        const struct cdn_oci_desc *d = &ix->manifests[i];
        if (d->attestation || unknown_platform(&d->platform))
            continue;
        if (!d->platform.os[0] && !d->platform.arch[0]) {
            bare = d;
            n_bare++;
            continue;
        }
        n_platformed++;
        int rank = cdn_oci_platform_rank(want, &d->platform);
        if (rank > best_rank) {
            best = d;
            best_rank = rank;
        }
    }
    if (!best && n_platformed == 0 && n_bare == 1)
        best = bare;
    if (!best) {
        char list[160];
        list_platforms(ix, list, sizeof list);
        return cdn_error_field(err, ENOEXEC, "image", "image: no entry for %s/%s%s%s; the index has: %s",
                               want->os, want->arch, want->variant[0] ? "/" : "", want->variant, list);
    }
    *ret = best;
    return 0;
}
