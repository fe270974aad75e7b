/* Test helper: build layer tars with libarchive's writer into a memfd (pax, so xattrs travel as
 * SCHILY.xattr records), and compress them with its gzip/zstd write filters. Header-only, for
 * test-layer and test-store. */
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct tar_ent {
    const char *name;
    mode_t type; /* AE_IFREG (default), AE_IFDIR, AE_IFLNK, AE_IFIFO, AE_IFCHR, AE_IFBLK */
    mode_t perm; /* 0644 by default (0755 for dirs) */
    int uid, gid;
    const char *data;     /* regular file content */
    const char *link;     /* symlink target */
    const char *hardlink; /* hard link target */
    const char *xattr[4][2];
    size_t xattr_len[4];
    unsigned rmaj, rmin;
    long long sparse_size; /* > 0: a sparse file of this size with data at its start */
};

static inline struct archive *tar_open(int fd)
{
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    archive_write_open_fd(a, fd);
    return a;
}

static inline void tar_add(struct archive *a, const struct tar_ent *t)
{
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, t->name);
    mode_t type = t->type ? t->type : AE_IFREG;
    if (t->hardlink) {
        archive_entry_set_hardlink(e, t->hardlink);
        type = AE_IFREG;
    }
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, t->perm ? t->perm : (type == AE_IFDIR ? 0755 : 0644));
    archive_entry_set_uid(e, t->uid);
    archive_entry_set_gid(e, t->gid);
    archive_entry_set_mtime(e, 1600000000, 0);
    if (t->link)
        archive_entry_set_symlink(e, t->link);
    if (type == AE_IFCHR || type == AE_IFBLK) {
        archive_entry_set_rdevmajor(e, t->rmaj);
        archive_entry_set_rdevminor(e, t->rmin);
    }
    for (int i = 0; i < 4 && t->xattr[i][0]; i++)
        archive_entry_xattr_add_entry(e, t->xattr[i][0], t->xattr[i][1],
                                      t->xattr_len[i] ? t->xattr_len[i] : strlen(t->xattr[i][1]));
    size_t len = t->data && !t->hardlink ? strlen(t->data) : 0;
    if (t->sparse_size > 0) {
        archive_entry_set_size(e, t->sparse_size);
        archive_entry_sparse_add_entry(e, 0, (la_int64_t) len);
    } else if (type == AE_IFREG && !t->hardlink)
        archive_entry_set_size(e, (la_int64_t) len);
    archive_write_header(a, e);
    if (len)
        archive_write_data(a, t->data, len);
    archive_entry_free(e);
}

/* A memfd holding the uncompressed tar of n entries, at offset 0. */
static inline int tar_build(const struct tar_ent *ents, size_t n)
{
    int fd = memfd_create("layer", MFD_CLOEXEC);
    struct archive *a = tar_open(fd);
    for (size_t i = 0; i < n; i++)
        tar_add(a, &ents[i]);
    archive_write_close(a);
    archive_write_free(a);
    lseek(fd, 0, SEEK_SET);
    return fd;
}

/* fd's content compressed by libarchive's writer ("gzip" or "zstd": a code path apart from the
 * reader under test), as a new memfd at offset 0; -1 if the filter is missing. */
static inline int tar_compress(int fd, const char *filter)
{
    int out = memfd_create("layer-z", MFD_CLOEXEC);
    struct archive *a = archive_write_new();
    archive_write_set_format_raw(a);
    if (archive_write_add_filter_by_name(a, filter) != ARCHIVE_OK) {
        archive_write_free(a);
        close(out);
        return -1;
    }
    archive_write_set_bytes_in_last_block(a, 1); /* no zero padding after the compressed stream */
    archive_write_open_fd(a, out);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, "layer");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_write_header(a, e);
    archive_entry_free(e);
    static char buf[65536];
    lseek(fd, 0, SEEK_SET);
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
        archive_write_data(a, buf, (size_t) n);
    archive_write_close(a);
    archive_write_free(a);
    lseek(fd, 0, SEEK_SET);
    lseek(out, 0, SEEK_SET);
    return out;
}

#define TAR(...)                                                                                             \
    ({                                                                                                       \
        const struct tar_ent _e[] = {__VA_ARGS__};                                                           \
        tar_build(_e, sizeof(_e) / sizeof(_e[0]));                                                           \
    })
