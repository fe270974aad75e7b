/* nftables through libnftables: see nft.h. The rules are text that libnftables
 * turns into one netlink batch (atomic: no state in between). */
#include "net/nft.h"
#include "net/netns.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <nftables/libnftables.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fds open now, as a bitmap of the first 1024 (what a process has when it makes its context). */
static void open_fds(uint64_t map[static 16])
{
    memset(map, 0, 16 * sizeof *map);
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));) {
        int fd = atoi(e->d_name);
        if ((fd > 0 || e->d_name[0] == '0') && fd < 1024)
            map[fd / 64] |= 1ull << (fd % 64);
    }
    if (d)
        (void) closedir(d);
}

/* One context for the process's life: its netlink socket owns the process's
 * table (flags owner, below), which the kernel removes when that socket
 * closes, i.e. when the process ends however it ends. libnftables opens the
 * socket in nft_ctx_new without O_CLOEXEC; a child that kept a copy past its
 * exec would keep a dead owner's table alive, and the next owner could
 * neither replace it nor pass its drop rules. So what nft_ctx_new opened is
 * made close-on-exec. */
static struct nft_ctx *ctx(void)
{
    static struct nft_ctx *c;
    if (c)
        return c;
    uint64_t before[16], after[16];
    open_fds(before);
    if (!(c = nft_ctx_new(NFT_CTX_DEFAULT)))
        return NULL;
    open_fds(after);
    for (int fd = 0; fd < 1024; fd++)
        if ((after[fd / 64] & ~before[fd / 64]) >> (fd % 64) & 1)
            (void) fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
    (void) nft_ctx_buffer_output(c);
    (void) nft_ctx_buffer_error(c);
    return c;
}

static int run(const char *cmd, const char *what, struct cdn_error *err)
{
    struct nft_ctx *c = ctx();
    if (!c)
        return err ? cdn_error_set(err, ENOMEM, "nftables: no context") : -ENOMEM;
    if (nft_run_cmd_from_buffer(c, cmd) != 0) {
        const char *e = nft_ctx_get_error_buffer(c);
        char first[160];
        (void) snprintf(first, sizeof first, "%s", e ? e : "");
        first[strcspn(first, "\n")] = 0;
        return err ? cdn_error_set(err, EIO, "nftables: %s: %s", what, first) : -EIO;
    }
    return 0;
}

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= 64)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

int cdn_nft_setup(const char *name, uint16_t proxy_port, uint16_t dns_port, uint16_t udp_port,
                  struct cdn_error *err)
{
    if (!name_ok(name))
        return cdn_error_set(err, EINVAL, "nftables: bad table name '%s'", name);
    char cmd[4096];
    /* The owner's table belongs to this process's netlink socket (flags
     * owner): the kernel removes it when the process ends, crash included, so
     * no dead owner's rules stay behind to drop what a later owner's sandboxes
     * or the host's own programs send to ports it once used. Other processes
     * can read it, not change it. "add table" then "delete table" replaces a
     * table of this process's own (or, once, one that an owner from before
     * the flag left) in the same batch that builds the new one. The fail-closed
     * table (shared by every owner, never removed) drops what comes from any
     * sandbox veth and no owner redirected: a veth whose owner is gone, or not
     * yet back after a restart, reaches nothing — not the host's own services
     * either. */
    (void) snprintf(cmd, sizeof cmd,
                    /* the same table under its old name, from a cordon before 0.2: gone */
                    "add table inet " CDN_NFT_LEGACY "\n"
                    "delete table inet " CDN_NFT_LEGACY "\n"
                    "add table inet " CDN_NFT_FAILCLOSED "\n"
                    "delete table inet " CDN_NFT_FAILCLOSED "\n"
                    "table inet " CDN_NFT_FAILCLOSED " {\n"
                    "  chain closed_in {\n"
                    "    type filter hook input priority filter - 10; policy accept;\n"
                    "    iifname \"" CDN_NET_IF_PREFIX "*\" meta nfproto ipv6 drop\n"
                    "    iifname \"" CDN_NET_IF_PREFIX "*\" ct status dnat accept\n"
                    "    iifname \"" CDN_NET_IF_PREFIX "*\" drop\n"
                    "  }\n"
                    "  chain closed_fwd {\n"
                    "    type filter hook forward priority filter - 10; policy accept;\n"
                    "    iifname \"" CDN_NET_IF_PREFIX "*\" drop\n"
                    "    oifname \"" CDN_NET_IF_PREFIX "*\" drop\n"
                    "  }\n"
                    "}\n"
                    "add table ip %1$s\n"
                    "delete table ip %1$s\n"
                    "table ip %1$s {\n"
                    "  flags owner\n"
                    "  set ifs { type ifname; }\n"
                    "  set open_ifs { type ifname; }\n"
                    "  chain sbx_pre {\n"
                    "    type nat hook prerouting priority dstnat; policy accept;\n"
                    "    iifname @ifs udp dport 53 redirect to :%3$u\n"
                    "    iifname @ifs meta l4proto tcp redirect to :%2$u\n"
                    "    iifname @open_ifs meta l4proto udp redirect to :%4$u\n"
                    "  }\n"
                    "  chain sbx_in {\n"
                    "    type filter hook input priority filter; policy accept;\n"
                    "    iifname @ifs ct status dnat tcp dport %2$u accept\n"
                    "    iifname @ifs ct status dnat udp dport %3$u accept\n"
                    "    iifname @open_ifs ct status dnat udp dport %4$u accept\n"
                    "    iifname @ifs drop\n"
                    "    tcp dport %2$u drop\n"
                    "    udp dport %3$u drop\n"
                    "    udp dport %4$u drop\n"
                    "  }\n"
                    "  chain sbx_fwd {\n"
                    "    type filter hook forward priority filter; policy accept;\n"
                    "    iifname @ifs drop\n"
                    "    oifname @ifs drop\n"
                    "  }\n"
                    "}\n",
                    name, (unsigned) proxy_port, (unsigned) dns_port, (unsigned) udp_port);
    return run(cmd, "create the egress table", err);
}

int cdn_nft_add_if(const char *name, const char *ifname, struct cdn_error *err)
{
    char cmd[256];
    (void) snprintf(cmd, sizeof cmd, "add element ip %s ifs { \"%s\" }\n", name, ifname);
    return run(cmd, "admit a sandbox interface", err);
}

int cdn_nft_set_open(const char *name, const char *ifname, bool open, struct cdn_error *err)
{
    char cmd[256];
    (void) snprintf(cmd, sizeof cmd, "%s element ip %s open_ifs { \"%s\" }\n", open ? "add" : "delete", name,
                    ifname);
    int r = run(cmd, open ? "open a sandbox's UDP" : "close a sandbox's UDP", err);
    return open ? r : 0; /* deleting what is not there is fine */
}

void cdn_nft_del_if(const char *name, const char *ifname)
{
    char cmd[256];
    (void) snprintf(cmd, sizeof cmd, "delete element ip %s ifs { \"%s\" }\n", name, ifname);
    (void) run(cmd, "forget a sandbox interface", NULL);
    (void) cdn_nft_set_open(name, ifname, false, NULL);
}

void cdn_nft_sweep_runs(void)
{
    struct nft_ctx *c = ctx();
    if (!c || nft_run_cmd_from_buffer(c, "list tables ip\n") != 0)
        return;
    const char *out = nft_ctx_get_output_buffer(c);
    char *copy = out ? strdup(out) : NULL;
    if (!copy)
        return;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int pid;
        char tail;
        if (sscanf(line, "table ip cordon_run_%d%c", &pid, &tail) != 1 || pid <= 0)
            continue;
        if (kill(pid, 0) == 0 || errno != ESRCH)
            continue; /* its owner lives (or is not ours to judge) */
        char name[40];
        (void) snprintf(name, sizeof name, "cordon_run_%d", pid);
        cdn_nft_teardown(name);
    }
    free(copy);
}

void cdn_nft_teardown(const char *name)
{
    char cmd[256];
    (void) snprintf(cmd, sizeof cmd, "add table ip %1$s\ndelete table ip %1$s\n", name);
    (void) run(cmd, "remove the egress table", NULL);
}
