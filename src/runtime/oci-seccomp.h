/* An OCI bundle's linux.seccomp as a BPF program (libseccomp), stacked by the container tier on
 * cordon's own filter (sandbox.h seccomp_extra): the kernel runs both and the stricter answer wins,
 * so the container gets what both allow. */
#pragma once

#include <jansson.h>
#include <stdint.h>

#include "shared/error.h"

/* Compile sc (linux.seccomp: defaultAction, defaultErrnoRet, architectures, syscalls with names,
 * action, errnoRet and args) into *ret_insns (malloc'd struct sock_filter[*ret_len]). Names this
 * libseccomp or architecture does not know are left, as runc leaves them. Refused, naming the field:
 * an unknown action, SCMP_ACT_NOTIFY and listenerPath (no listener answers here), bad args. */
int cdn_oci_seccomp_compile(const json_t *sc, void **ret_insns, uint16_t *ret_len, struct cdn_error *err);
