#include "sandbox.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "shared/macro.h"

void cdn_sandbox_new_id(char id[CDN_ID_LEN + 1])
{
    uint8_t b[CDN_ID_LEN / 2] = {0};
    if (getrandom(b, sizeof b, 0) != (ssize_t) sizeof b) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        memcpy(b, &ts.tv_nsec, sizeof b < sizeof ts.tv_nsec ? sizeof b : sizeof ts.tv_nsec);
    }
    for (size_t i = 0; i < sizeof b; i++)
        (void) snprintf(id + 2 * i, 3, "%02x", b[i]);
}

void cdn_sandbox_init(struct cdn_sandbox *sb, const struct cdn_spec *spec)
{
    *sb = (struct cdn_sandbox){
        .spec = spec,
        .agent_fd = -EBADF,
        .init_pidfd = -EBADF,
        .setup_fd = -EBADF,
        .stdio_fd = -EBADF,
        .listen_fd = -EBADF,
        .slot = -1,
        .slot_hint = -1,
        .slot_fd = -EBADF,
        .reaper_fd = -EBADF,
        .image_fd = -EBADF,
        .netns_fd = -EBADF,
        .fanotify_fd = -EBADF,
        .layer_from_fd = -EBADF,
        .memory_from_fd = -EBADF,
    };
    cdn_sandbox_new_id(sb->id);
    sb->cgroup.dirfd = -EBADF;
    clock_gettime(CLOCK_MONOTONIC, &sb->created);
}
