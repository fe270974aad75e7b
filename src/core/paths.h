/* Where cordon keeps things on the host. Overridable through the environment
 * so that tests can run against private directories. */
#pragma once

/* Persistent state: images, caches (default /var/lib/cordon, $CORDON_STATE_DIR). */
const char *cdn_state_dir(void);
/* Volatile runtime state: slot locks, mount points (default /run/cordon, $CORDON_RUN_DIR). */
const char *cdn_run_dir(void);
/* Compiled-policy cache: <state dir>/cache. Writes into buf. */
void cdn_cache_dir(char *buf, unsigned size);
/* What the VM tiers prepare and keep (kernel, initramfs, snapshots): $CORDON_VM_DIR, else <state>/vm. */
const char *cdn_vm_dir(void);
/* A helper binary (cordon-init, cordon-full): next to the running executable
 * (a build tree), else the installed libexec path. Writes into buf; returns 0
 * or -ENOENT. */
int cdn_libexec_path(const char *name, char *buf, unsigned size);
/* The cordon-init binary: $CORDON_INIT, else cdn_libexec_path(). */
int cdn_init_path(char *buf, unsigned size);
/* The same for the container tier's cordon-setup ($CORDON_SETUP, tiers/container/setup-main.c). */
int cdn_setup_path(char *buf, unsigned size);
/* The same for the process tier's cordon-worker ($CORDON_WORKER). */
int cdn_worker_path(char *buf, unsigned size);
/* The first directory on the way to path (its ancestors, then path itself when it is a directory)
 * that others may not search (no o+x): the sandbox's users are others on the host, so they cannot
 * reach path through it. Writes it into buf and its mode into *mode; returns 1, or 0 when every
 * directory on the way is searchable (or one cannot be looked at). For error messages: a lookup
 * that failed with EACCES says what to change. */
int cdn_path_unsearchable(const char *path, char *buf, unsigned size, unsigned *mode);
