/* Fuzz image archives and the layout reader behind them: the input is a tar (oci-archive and
 * docker-archive), unpacked into a fresh temp dir, then opened and resolved as an OCI layout. Whatever
 * the input, the unpacked tree holds only directories and regular files cordon made (never a symlink,
 * a device or a FIFO), and nothing outside the temp dir is written. */
#include "oci/archive.h"
#include "oci/layout.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int check_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) path, (void) ftw;
    if (type == FTW_SL || (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode)))
        abort();
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) st, (void) type, (void) ftw;
    return remove(path);
}

static void one(const char *kind, int fd)
{
    char dir[64] = "/tmp/cordon-fuzz-archive-XXXXXX", ref[128];
    if (!mkdtemp(dir))
        return;
    (void) snprintf(ref, sizeof ref, "%s:/proc/self/fd/%d", kind, fd);
    struct cdn_image_ref r;
    struct cdn_error err = {0};
    if (cdn_image_ref_parse(ref, &r, &err) < 0)
        abort();
    int k = cdn_oci_archive_unpack(&r, dir, 1 << 20, &err);
    if (k == 0) {
        struct cdn_oci_layout *l = NULL;
        if (cdn_oci_layout_open(dir, &l, &err) == 0) {
            struct cdn_oci_platform host;
            struct cdn_oci_image img;
            cdn_oci_platform_host(&host);
            if (cdn_oci_layout_resolve(l, NULL, &host, &img, &err) == 0) {
                for (size_t i = 0; i < img.manifest.n_layers; i++) {
                    int bfd = -1;
                    if (cdn_oci_layout_open_blob(l, &img.manifest.layers[i], &bfd, &err) == 0)
                        close(bfd);
                }
                cdn_oci_image_free(&img);
            }
            cdn_oci_layout_free(l);
        }
    } else if (k != -ENOMEM &&
               (!err.msg[0] || !err.field[0] || strchr(err.msg, '\n'))) /* "image", or the config's field */
        abort();
    if (nftw(dir, check_entry, 16, FTW_PHYS) < 0)
        abort();
    (void) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz-archive", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) == (ssize_t) size) {
        one("oci-archive", fd);
        one("docker-archive", fd);
    }
    close(fd);
    return 0;
}
