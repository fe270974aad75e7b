/* Forgetting conntrack entries by their source (conntrack.h), over ctnetlink
 * with libmnl. The kernel deletes by exact tuple only (a flush filters by mark
 * or status, not by address), so: one dump of the IPv4 table, the matching
 * entries' original tuples kept as the dump gave them, then one delete each. */
#include "net/conntrack.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define MAX_TUPLE 128 /* an IPv4 tuple's attributes take about 60 bytes */

struct found {
    bool (*match)(uint32_t src, void *arg);
    void *arg;
    size_t n, cap;
    unsigned char (*tuples)[MAX_TUPLE]; /* each a CTA_TUPLE_ORIG attribute, whole */
    int err;
};

static struct nlmsghdr *ct_msg(char *buf, uint8_t type, uint16_t flags)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | type;
    nlh->nlmsg_flags = NLM_F_REQUEST | flags;
    struct nfgenmsg *nfg = mnl_nlmsg_put_extra_header(nlh, sizeof *nfg);
    nfg->nfgen_family = AF_INET;
    nfg->version = NFNETLINK_V0;
    return nlh;
}

/* The original tuple's source address (network order), or 0 when the entry has none we read. */
static uint32_t orig_source(const struct nlattr *orig)
{
    const struct nlattr *a, *b;
    mnl_attr_for_each_nested(a, orig)
    {
        if (mnl_attr_get_type(a) != CTA_TUPLE_IP)
            continue;
        mnl_attr_for_each_nested(b, a)
        {
            if (mnl_attr_get_type(b) == CTA_IP_V4_SRC && mnl_attr_get_payload_len(b) == 4)
                return mnl_attr_get_u32(b);
        }
    }
    return 0;
}

static int on_entry(const struct nlmsghdr *nlh, void *arg)
{
    struct found *f = arg;
    const struct nlattr *a;
    mnl_attr_for_each(a, nlh, sizeof(struct nfgenmsg))
    {
        if (mnl_attr_get_type(a) != CTA_TUPLE_ORIG || mnl_attr_get_len(a) > MAX_TUPLE)
            continue;
        uint32_t src = orig_source(a);
        if (!src || !f->match(ntohl(src), f->arg))
            continue;
        if (f->n == f->cap) {
            size_t cap = f->cap ? 2 * f->cap : 8;
            void *t = realloc(f->tuples, cap * sizeof *f->tuples);
            if (!t) {
                f->err = -ENOMEM;
                return MNL_CB_ERROR;
            }
            f->tuples = t;
            f->cap = cap;
        }
        memcpy(f->tuples[f->n++], a, mnl_attr_get_len(a));
    }
    return MNL_CB_OK;
}

static int dump(struct mnl_socket *nl, struct found *f)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = ct_msg(buf, IPCTNL_MSG_CT_GET, NLM_F_DUMP);
    nlh->nlmsg_seq = 1;
    if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
        return -errno;
    for (;;) {
        ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof buf);
        if (n < 0)
            return -errno;
        int r = mnl_cb_run(buf, (size_t) n, 1, mnl_socket_get_portid(nl), on_entry, f);
        if (r == MNL_CB_STOP)
            return 0;
        if (r < 0)
            return f->err ? f->err : -errno;
    }
}

/* Delete the entry whose original tuple is orig; ENOENT (gone already) is fine. */
static int delete_one(struct mnl_socket *nl, const unsigned char *orig, uint32_t seq)
{
    char buf[256];
    struct nlmsghdr *nlh = ct_msg(buf, IPCTNL_MSG_CT_DELETE, NLM_F_ACK);
    nlh->nlmsg_seq = seq;
    size_t len = mnl_attr_get_len((const struct nlattr *) orig);
    memcpy((char *) nlh + nlh->nlmsg_len, orig, len);
    nlh->nlmsg_len += MNL_ALIGN(len);
    if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
        return -errno;
    ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof buf);
    if (n < 0)
        return -errno;
    if (mnl_cb_run(buf, (size_t) n, seq, mnl_socket_get_portid(nl), NULL, NULL) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int cdn_conntrack_forget(bool (*match)(uint32_t src, void *arg), void *arg)
{
    struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
    if (!nl)
        return -errno;
    struct found f = {.match = match, .arg = arg};
    int r = mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0 ? -errno : dump(nl, &f);
    for (size_t i = 0; r >= 0 && i < f.n; i++)
        r = delete_one(nl, f.tuples[i], (uint32_t) i + 2);
    mnl_socket_close(nl);
    free(f.tuples);
    return r < 0 ? r : (int) f.n;
}
