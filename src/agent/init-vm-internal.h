/* What init-vm.c and init-vm-protect.c (the protected paths in a guest) share. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/error.h"

/* Whether this init runs a VM guest (its first process, or a full VM's agent). */
bool cdn_vm_guest_mode(void);
/* The command line of pid, its NULs as spaces, for a violation's record ("" if it is gone). */
void cdn_vm_read_cmdline(int pid, char *buf, size_t size);

/* The guest's commands stopped where they are (cgroup.freeze), or let go on. */
void cdn_vm_freeze_commands(bool on);

/* The protected paths (init-vm-protect.c): init's end of the socket to the process answering
 * their opens (-1 while none runs), and what init does with what comes on it. */
int cdn_vm_fan_sock(void);
void cdn_vm_fan_records(short revents);
bool cdn_vm_verifier_on(void);
bool cdn_vm_protects_anything(void);
bool cdn_vm_protected_path(const char *path); /* a protected path, or beneath one */
/* POLICY said the host kills on a violation: a refused open waits for that. */
void cdn_vm_protect_kill_mode(void);
