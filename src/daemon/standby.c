/* A rollback's standby layer (tier container, spec "checkpoints"): after a checkpoint a client
 * asked for, and after each rollback, the writable layer a rollback to that checkpoint would make is
 * made ahead, off the request's path: the checkpoint's image cloned in the store, on its loop device,
 * ext4 mounted, owned by a slot the standby holds (sandbox.h struct cdn_layer_ready). A rollback to
 * it starts the new init on that layer at once, ~4 ms sooner (the clone, the loop device's configure
 * and ext4's mount, most of it waiting on the kernel). One per box, for its newest such checkpoint;
 * it goes with a newer one, the checkpoint's deletion and the box. A cordond that dies lets it go
 * with its fds: the mount, the loop device (autoclear), the unnamed image and the slot's lock. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry.h"
#include "api.h"
#include "shared/fd-util.h"
#include "tiers/tier.h"

struct cdn_standby {
    struct box *b;
    char ck[CDN_CHECKPOINT_ID_LEN + 1];
    int image; /* the checkpoint's image, open for the next making */
    uint32_t base;
    struct cdn_layer_ready ready;
    bool kept; /* its slot came from the kept ones (its cgroup is there) */
    struct event *ev;
};

/* The slot back, to the kept ones if it came from there. */
static void let_go(struct cdn_standby *s)
{
    const int slot = s->ready.slot;
    const bool had = s->ready.slot_fd >= 0;
    cdn_layer_ready_drop(&s->ready);
    if (had && s->kept)
        cdn_box_keep_slot(slot);
}

static void make(evutil_socket_t fd, short what, void *arg)
{
    (void) fd, (void) what;
    struct cdn_standby *s = arg;
    struct box *b = s->b;
    if (s->ready.mnt >= 0 || b->state != BOX_RUNNING || b->dying)
        return;
    let_go(s); /* what a rollback did not take of the last one */
    struct cdn_error err = {0};
    const int hint = cdn_box_kept_slot();
    if (cdn_layer_ready_make(s->image, s->base, b->spec.limits.disk_mb, hint, &s->ready, &err) < 0) {
        cdn_layer_ready_drop(&s->ready);
        fprintf(stderr, "cordond: sandbox %s: no standby layer for checkpoint %s: %s\n", b->sb.id, s->ck,
                err.msg);
    }
    s->kept = hint >= 0 && s->ready.slot == hint;
    if (hint >= 0 && !s->kept)
        cdn_box_keep_slot(hint);
}

/* Made 2 ms on: the answer that asked for it is written out first, at the loop's next turn. */
static void arm(struct cdn_standby *s)
{
    if (!evtimer_pending(s->ev, NULL))
        (void) evtimer_add(s->ev, &(struct timeval){.tv_usec = 2000});
}

void cdn_standby_want(struct box *b, const char *ck)
{
    if (b->standby && strcmp(b->standby->ck, ck) == 0) {
        arm(b->standby);
        return;
    }
    cdn_standby_drop(b);
    if (b->spec.tier != CDN_TIER_CONTAINER || !b->spec.checkpoints || cdn_box_keeps_slot(b) ||
        cdn_layer_store_fd() < 0)
        return;
    char name[64];
    (void) snprintf(name, sizeof name, "checkpoints/%s.img", ck);
    _cleanup_close_ int image = openat(cdn_layer_store_fd(), name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    uint32_t base;
    if (image < 0 || cdn_layer_uid_base(image, &base) < 0)
        return;
    struct cdn_standby *s = calloc(1, sizeof *s);
    if (!s)
        return;
    *s = (struct cdn_standby){.b = b, .image = TAKE_FD(image), .base = base};
    s->ready = (struct cdn_layer_ready){.mnt = -EBADF, .file = -EBADF, .slot = -1, .slot_fd = -EBADF};
    (void) snprintf(s->ck, sizeof s->ck, "%s", ck);
    if (!(s->ev = evtimer_new(cdn_daemon->base, make, s))) {
        (void) close(s->image);
        free(s);
        return;
    }
    b->standby = s;
    arm(s);
}

struct cdn_layer_ready *cdn_standby_take(struct box *b, const char *ck)
{
    struct cdn_standby *s = b->standby;
    if (!s || strcmp(s->ck, ck) != 0)
        return NULL;
    (void) evtimer_del(s->ev); /* not made yet: not now either */
    if (s->ready.mnt < 0)
        return NULL;
    return &s->ready; /* a slot lock create takes is no longer the standby's to keep */
}

void cdn_standby_wait(struct box *b)
{
    if (b->standby)
        (void) evtimer_del(b->standby->ev);
}

void cdn_standby_go(struct box *b)
{
    if (b->standby && b->standby->ready.mnt < 0)
        arm(b->standby);
}

void cdn_standby_drop(struct box *b)
{
    struct cdn_standby *s = b->standby;
    if (!s)
        return;
    event_free(s->ev);
    let_go(s);
    (void) close(s->image);
    free(s);
    b->standby = NULL;
}

void cdn_standby_forget(const char *ck)
{
    struct box *b;
    LIST_FOREACH(b, &cdn_daemon->boxes, link)
    if (b->standby && strcmp(b->standby->ck, ck) == 0)
        cdn_standby_drop(b);
}
