/* cordon cp, mv and chmod: files in and out of a sandbox, and moved or
 * chmod-ed inside it, through cordond's files routes (docs/cordond.md). Runs
 * as the CLI's user; the host paths are theirs, the sandbox's are resolved by
 * the sandbox's init. A name that is a directory receives the file under its
 * own name, on either side, as cp(1) does. cp -r moves a directory as one tar
 * (libarchive both ways); what comes out of a sandbox is the agent's, and is
 * unpacked beneath the destination only, never through a symlink. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "shared/parse-util.h"

/* A path's last component, trailing slashes ignored: into buf. */
static const char *last_name(const char *path, char *buf, size_t size)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    (void) snprintf(buf, size, "%.*s", (int) (n - b), path + b);
    return buf;
}

/* dir/name into buf; false (said) if too long. */
static bool join(char *buf, size_t size, const char *dir, const char *name)
{
    size_t n = strlen(dir);
    if ((size_t) snprintf(buf, size, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name) < size)
        return true;
    fprintf(stderr, "cordon cp: %s/%s: the name is too long\n", dir, name);
    return false;
}

/* A download into local ("-": stdout), streamed. A file that cannot be had whole is removed. */
static int download(cordon_client *c, const char *id, const char *remote, const char *local, uint64_t max)
{
    char into[4096], name[1024];
    struct stat st;
    bool out = strcmp(local, "-") == 0;
    size_t n = strlen(local);
    if (!out && ((n && local[n - 1] == '/') || (stat(local, &st) == 0 && S_ISDIR(st.st_mode)))) {
        if (!join(into, sizeof into, local, last_name(remote, name, sizeof name)))
            return 125;
        local = into;
    }
    int fd = out ? STDOUT_FILENO : open(local, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "cordon cp: %s: %s\n", local, strerror(errno));
        return 125;
    }
    int r = cordon_file_read_fd(c, id, remote, fd, max, NULL);
    int ret = r < 0 ? cdn_cli_fail(c, r, "cp") : 0;
    if (!out && close(fd) < 0 && ret == 0) {
        fprintf(stderr, "cordon cp: %s: %s\n", local, strerror(errno));
        ret = 125;
    }
    if (!out && ret)
        (void) unlink(local);
    return ret;
}

static int upload(cordon_client *c, const char *id, const char *remote, const char *local)
{
    char into[4096], name[1024];
    size_t rn = strlen(remote);
    bool in = strcmp(local, "-") == 0;
    struct cordon_file_info info;
    /* A remote directory, by its slash or by what it is, receives the file under its name. */
    if ((rn && remote[rn - 1] == '/') ||
        (!in && cordon_file_stat(c, id, remote, &info) == 0 && strcmp(info.type, "dir") == 0)) {
        if (in) {
            fprintf(stderr, "cordon cp: standard input into the directory %s: name the file\n", remote);
            return 125;
        }
        if (!join(into, sizeof into, remote, last_name(local, name, sizeof name)))
            return 125;
        remote = into;
    }
    FILE *f = in ? stdin : fopen(local, "rb");
    char *data = NULL;
    size_t len = 0, cap = 0;
    if (!f) {
        fprintf(stderr, "cordon cp: %s: %s\n", local, strerror(errno));
        return 125;
    }
    for (;;) {
        if (len + 65536 > cap && !(data = realloc(data, cap = (cap ? cap * 2 : 65536) + 65536)))
            break;
        size_t n = fread(data + len, 1, 65536, f);
        len += n;
        if (n == 0)
            break;
    }
    bool bad = ferror(f);
    if (f != stdin)
        fclose(f);
    if (bad) {
        fprintf(stderr, "cordon cp: %s: a read error\n", local);
        free(data);
        return 125;
    }
    int r = data ? cordon_file_write(c, id, remote, data, len) : -ENOMEM;
    free(data);
    return r < 0 ? cdn_cli_fail(c, r, "cp") : 0;
}

struct membuf {
    char *p;
    size_t len, cap;
};

static la_ssize_t to_mem(struct archive *ar, void *arg, const void *p, size_t len)
{
    (void) ar;
    struct membuf *m = arg;
    if (m->len + len > m->cap) {
        size_t cap = (m->len + len) * 2;
        char *grown = realloc(m->p, cap);
        if (!grown)
            return -1;
        m->p = grown, m->cap = cap;
    }
    memcpy(m->p + m->len, p, len);
    m->len += len;
    return (la_ssize_t) len;
}

/* The contents of the directory local as a tar in memory: names relative to it, symlinks as links,
 * no owners. */
static int pack_dir(const char *local, struct membuf *ret)
{
    struct archive *disk = archive_read_disk_new(), *out = archive_write_new();
    size_t skip = strlen(local);
    while (skip > 1 && local[skip - 1] == '/')
        skip--;
    int r = !disk || !out ? ARCHIVE_FATAL : ARCHIVE_OK;
    if (r == ARCHIVE_OK)
        r = archive_read_disk_set_symlink_physical(disk);
    if (r == ARCHIVE_OK)
        r = archive_write_set_format_pax_restricted(out);
    if (r == ARCHIVE_OK)
        r = archive_write_open2(out, ret, NULL, to_mem, NULL, NULL);
    if (r == ARCHIVE_OK)
        r = archive_read_disk_open(disk, local);
    struct archive_entry *e = archive_entry_new();
    while (r == ARCHIVE_OK && e && (r = archive_read_next_header2(disk, e)) == ARCHIVE_OK) {
        const char *name = archive_entry_pathname(e);
        (void) archive_read_disk_descend(disk);
        size_t from = skip == 1 && local[0] == '/' ? 1 : skip + 1; /* "/": its entries are "/x" */
        mode_t type = archive_entry_filetype(e);
        if (strlen(name) <= from || (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK))
            continue; /* local itself; a FIFO, socket or device is left out, as cordond would refuse it */
        archive_entry_set_pathname(e, name + from);
        archive_entry_set_uid(e, 0), archive_entry_set_gid(e, 0);
        archive_entry_set_uname(e, NULL), archive_entry_set_gname(e, NULL);
        if ((r = archive_write_header(out, e)) != ARCHIVE_OK)
            break;
        if (archive_entry_filetype(e) == AE_IFREG && archive_entry_size(e) > 0) {
            int fd = open(archive_entry_sourcepath(e), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            char buf[65536];
            ssize_t n = fd < 0 ? -1 : 0;
            while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
                if (archive_write_data(out, buf, (size_t) n) < 0)
                    break;
            if (fd >= 0)
                close(fd);
            if (n < 0) {
                fprintf(stderr, "cordon cp: %s: %s\n", archive_entry_sourcepath(e), strerror(errno));
                r = ARCHIVE_FATAL;
            }
        }
    }
    if (r != ARCHIVE_EOF && r != ARCHIVE_FATAL)
        fprintf(stderr, "cordon cp: %s: %s\n", local,
                archive_error_string(disk) ? archive_error_string(disk) : "");
    else if (r != ARCHIVE_EOF)
        fprintf(stderr, "cordon cp: %s: %s\n", local,
                archive_error_string(disk)  ? archive_error_string(disk)
                : archive_error_string(out) ? archive_error_string(out)
                                            : "cannot pack it");
    if (r == ARCHIVE_EOF && archive_write_close(out) != ARCHIVE_OK)
        r = ARCHIVE_FATAL;
    archive_entry_free(e);
    archive_read_free(disk);
    archive_write_free(out);
    return r == ARCHIVE_EOF ? 0 : -EIO;
}

/* The tar in fd unpacked beneath the directory local: no name outside it, nothing written through a
 * symlink, no owners, no devices. */
static int unpack(int fd, const char *local)
{
    struct archive *in = archive_read_new(), *disk = archive_write_disk_new();
    int r = !in || !disk ? ARCHIVE_FATAL : ARCHIVE_OK;
    if (r == ARCHIVE_OK) {
        (void) archive_read_support_format_tar(in);
        r = archive_write_disk_set_options(
            disk, ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                      ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS);
    }
    if (r == ARCHIVE_OK)
        r = archive_read_open_fd(in, fd, 65536);
    /* Names relative to local (the secure options refuse absolute ones): in it for the while. */
    int back = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (r == ARCHIVE_OK && (back < 0 || chdir(local) < 0)) {
        fprintf(stderr, "cordon cp: %s: %s\n", local, strerror(errno));
        r = ARCHIVE_FATAL;
    }
    struct archive_entry *e;
    while (r == ARCHIVE_OK && (r = archive_read_next_header(in, &e)) == ARCHIVE_OK) {
        mode_t type = archive_entry_filetype(e);
        if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
            continue;
        archive_entry_set_perm(e, archive_entry_perm(e) & 0777);
        if ((r = archive_write_header(disk, e)) != ARCHIVE_OK)
            break;
        const void *buf;
        size_t len;
        la_int64_t off;
        int d;
        while ((d = archive_read_data_block(in, &buf, &len, &off)) == ARCHIVE_OK)
            if (archive_write_data_block(disk, buf, len, off) != ARCHIVE_OK) {
                d = ARCHIVE_FATAL;
                break;
            }
        if (d != ARCHIVE_EOF || archive_write_finish_entry(disk) != ARCHIVE_OK) {
            r = ARCHIVE_FATAL;
            break;
        }
    }
    if (r != ARCHIVE_EOF)
        fprintf(stderr, "cordon cp: %s: %s\n", local,
                archive_error_string(disk) ? archive_error_string(disk)
                : archive_error_string(in) ? archive_error_string(in)
                                           : "cannot unpack it");
    if (r == ARCHIVE_EOF && archive_write_close(disk) != ARCHIVE_OK)
        r = ARCHIVE_FATAL;
    if (back >= 0 && (fchdir(back) < 0 || close(back) < 0))
        r = ARCHIVE_FATAL;
    archive_read_free(in);
    archive_write_free(disk);
    return r == ARCHIVE_EOF ? 0 : -EIO;
}

/* cp -r HOSTDIR ID:PATH: PATH, or PATH/name(HOSTDIR) when PATH is a directory already. */
static int upload_tree(cordon_client *c, const char *id, const char *remote, const char *local)
{
    char into[4096], name[1024];
    struct cordon_file_info info;
    size_t rn = strlen(remote);
    if ((rn && remote[rn - 1] == '/') ||
        (cordon_file_stat(c, id, remote, &info) == 0 && strcmp(info.type, "dir") == 0)) {
        if (!join(into, sizeof into, remote, last_name(local, name, sizeof name)))
            return 125;
        remote = into;
    }
    struct membuf tar = {0};
    int r = pack_dir(local, &tar);
    if (r == 0 && (r = cordon_archive_put(c, id, remote, tar.p, tar.len)) < 0)
        (void) cdn_cli_fail(c, r, "cp");
    free(tar.p);
    return r < 0 ? 125 : 0;
}

/* cp -r ID:PATH HOSTDIR: HOSTDIR, or HOSTDIR/name(PATH) when HOSTDIR is a directory already. */
static int download_tree(cordon_client *c, const char *id, const char *remote, const char *local,
                         uint64_t max)
{
    char into[4096], name[1024];
    struct stat st;
    if (stat(local, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (!join(into, sizeof into, local, last_name(remote, name, sizeof name)))
            return 125;
        local = into;
    }
    FILE *tmp = tmpfile();
    if (!tmp) {
        fprintf(stderr, "cordon cp: a temporary file: %s\n", strerror(errno));
        return 125;
    }
    int r = cordon_archive_get_fd(c, id, remote, fileno(tmp), max);
    if (r < 0)
        (void) cdn_cli_fail(c, r, "cp");
    else if (mkdir(local, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "cordon cp: %s: %s\n", local, strerror(errno));
        r = -errno;
    } else if (lseek(fileno(tmp), 0, SEEK_SET) < 0 || (r = unpack(fileno(tmp), local)) < 0)
        r = -EIO;
    fclose(tmp);
    return r < 0 ? 125 : 0;
}

/* ID:PATH → id (NUL-terminated in buf) and *ret_path; false (said) if it names no sandbox. */
static bool split(const char *what, const char *arg, char id[65], const char **ret_path)
{
    const char *colon = strchr(arg, ':');
    if (!colon || colon == arg || colon - arg > 64 || !colon[1]) {
        fprintf(stderr, "cordon %s: '%s': expected ID:PATH\n", what, arg);
        return false;
    }
    (void) snprintf(id, 65, "%.*s", (int) (colon - arg), arg);
    *ret_path = colon + 1;
    return true;
}

/* cordon cp [-r] [--max-bytes SIZE] SRC DST: one side ID:PATH, the other a host path ("-" =
 * stdin/stdout); -r: a directory, as one tar stream. */
int cdn_cli_cp(int argc, char *const *argv)
{
    uint64_t max = 0;
    bool tree = false;
    while (argc > 2 && (strcmp(argv[0], "-r") == 0 || strcmp(argv[0], "--max-bytes") == 0)) {
        if (argv[0][1] == 'r') {
            tree = true, argc--, argv++;
            continue;
        }
        if (cdn_parse_size(argv[1], &max) < 0 || max == 0) {
            fprintf(stderr, "cordon cp: --max-bytes: expected a size such as 512M, got '%s'\n", argv[1]);
            return 125;
        }
        argc -= 2, argv += 2;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: cordon cp [-r] [--max-bytes SIZE] ID:PATH HOSTPATH | cordon cp [-r] HOSTPATH "
                        "ID:PATH  (- for stdin/stdout)\n");
        return 125;
    }
    const char *src = argv[0], *dst = argv[1];
    bool up = strchr(dst, ':') && !strchr(src, ':');
    if (!!strchr(src, ':') == !!strchr(dst, ':')) {
        fprintf(stderr, "cordon cp: exactly one side must be ID:PATH\n");
        return 125;
    }
    char id[65];
    const char *remote;
    if (!split("cp", up ? dst : src, id, &remote))
        return 125;
    cordon_client *c = cdn_cli_connect();
    if (!c)
        return 125;
    int ret = tree && (strcmp(src, "-") == 0 || strcmp(dst, "-") == 0)
                  ? (fprintf(stderr, "cordon cp: -r copies directories, not standard input or output\n"), 125)
              : tree && up ? upload_tree(c, id, remote, src)
              : tree       ? download_tree(c, id, remote, dst, max)
              : up         ? upload(c, id, remote, src)
                           : download(c, id, remote, dst, max);
    cordon_client_free(c);
    return ret;
}

/* cordon mv [-n] ID:FROM [ID:]TO: a rename inside the sandbox; -n keeps an existing TO. */
int cdn_cli_mv(int argc, char *const *argv)
{
    bool keep = argc == 3 && strcmp(argv[0], "-n") == 0;
    if (keep)
        argc--, argv++;
    char id[65];
    const char *from;
    if (argc != 2) {
        fprintf(stderr, "usage: cordon mv [-n] ID:FROM [ID:]TO   (a TO ending in / receives FROM's name)\n");
        return 125;
    }
    if (!split("mv", argv[0], id, &from))
        return 125;
    size_t n = strlen(id);
    const char *to = strncmp(argv[1], id, n) == 0 && argv[1][n] == ':' ? argv[1] + n + 1 : argv[1];
    cordon_client *c = cdn_cli_connect();
    int r = c ? cordon_file_move(c, id, from, to, !keep) : -ENOMEM;
    int ret = !c ? 125 : r < 0 ? cdn_cli_fail(c, r, "mv") : 0;
    cordon_client_free(c);
    return ret;
}

/* cordon chmod MODE ID:PATH: octal permission bits, as chmod 755 takes them. */
int cdn_cli_chmod(int argc, char *const *argv)
{
    char id[65], *end = NULL;
    const char *path;
    if (argc != 2) {
        fprintf(stderr, "usage: cordon chmod MODE ID:PATH   (MODE in octal, e.g. 755)\n");
        return 125;
    }
    errno = 0;
    unsigned long mode = strtoul(argv[0], &end, 8);
    if (errno || end == argv[0] || *end || mode > 07777 || argv[0][0] == '-' || argv[0][0] == '+') {
        fprintf(stderr, "cordon chmod: MODE: expected octal permission bits such as 755, got '%s'\n",
                argv[0]);
        return 125;
    }
    if (!split("chmod", argv[1], id, &path))
        return 125;
    cordon_client *c = cdn_cli_connect();
    int r = c ? cordon_file_chmod(c, id, path, (unsigned) mode) : -ENOMEM;
    int ret = !c ? 125 : r < 0 ? cdn_cli_fail(c, r, "chmod") : 0;
    cordon_client_free(c);
    return ret;
}
