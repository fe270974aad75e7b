#include "tier.h"

#include <errno.h>
#include <string.h>

#include "image/image.h"
#include "shared/fd-util.h"

const struct cdn_tier_ops *const cdn_tiers[] = {
#if !CDN_LEAN
    &cdn_process_tier,
#endif
    &cdn_container_tier,
#if !CDN_LEAN
    &cdn_microvm_tier,
    &cdn_vm_tier,
#endif
    NULL,
};

const struct cdn_tier_ops *cdn_tier_lookup(enum cdn_tier tier)
{
    for (const struct cdn_tier_ops *const *t = cdn_tiers; *t; t++)
        if ((*t)->tier == tier)
            return *t;
    return NULL;
}

const struct cdn_tier_ops *cdn_tier_by_name(const char *name)
{
    for (const struct cdn_tier_ops *const *t = cdn_tiers; *t; t++)
        if (strcmp((*t)->name, name) == 0)
            return *t;
    return NULL;
}

void cdn_tier_drop_slot(int slot)
{
    for (const struct cdn_tier_ops *const *t = cdn_tiers; *t; t++)
        if ((*t)->drop_slot)
            (*t)->drop_slot(slot);
}

void cdn_tier_sweep_slots(void)
{
    for (const struct cdn_tier_ops *const *t = cdn_tiers; *t; t++)
        if ((*t)->sweep_slots)
            (*t)->sweep_slots();
}

void cdn_tier_release(struct cdn_sandbox *sb)
{
    if (sb->tier && sb->tier->release)
        sb->tier->release(sb);
    sb->image_fd = safe_close(sb->image_fd);
}

int cdn_tier_hold_image(struct cdn_sandbox *sb, struct cdn_error *err)
{
    const char *name = sb->spec->image;
    if (sb->image_fd >= 0 || strcmp(name, "host") == 0 || name[0] == '/')
        return 0; /* only images of the store have a hold */
    struct cdn_image img;
    int r = cdn_image_resolve(name, &img, err);
    return r < 0 ? r : cdn_image_hold(&img, &sb->image_fd, err);
}

int cdn_tier_check_user(const struct cdn_tier_ops *t, const char *user, struct cdn_error *err)
{
    if (user && !t->users)
        return cdn_error_field(err, EOPNOTSUPP, "user", "user: not supported on tier %s", t->name);
    return 0;
}

int cdn_tier_check_spec(const struct cdn_tier_ops *t, const struct cdn_spec *spec, struct cdn_error *err)
{
    return cdn_tier_check_user(t, spec->user, err);
}
