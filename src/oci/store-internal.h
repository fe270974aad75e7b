/* What store.c shares with store-images.c (image records, refs, prune); not for other callers. */
#pragma once

#include "oci/store.h"

int cdn_store_root_fd(struct cdn_store *s);
/* Write content to tmp/ and rename it to relpath (relative to the store's root). */
int cdn_store_write_atomic(struct cdn_store *s, const char *relpath, const char *content,
                           struct cdn_error *err);
/* Add the allocated bytes under dfd/name to *sum, each inode's share by its link count. */
void cdn_store_du_at(int dfd, const char *name, uint64_t *sum);
