#include "tier.h"

const struct cdn_tier_ops *cdn_tier_lookup(enum cdn_tier tier)
{
    switch (tier) {
    case CDN_TIER_CONTAINER:
        return &cdn_container_tier;
#if !CDN_LEAN
    case CDN_TIER_PROCESS:
        return &cdn_process_tier;
    case CDN_TIER_MICROVM:
        return &cdn_microvm_tier;
    case CDN_TIER_VM:
        return &cdn_vm_tier;
#endif
    default:
        return NULL;
    }
}
