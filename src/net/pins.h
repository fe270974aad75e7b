/* What the DNS stub answered a sandbox: name → IPv4 addresses, each with an
 * expiry. The proxy only lets a connection through to a name's address if the
 * stub gave that address out for that name (no DNS rebinding around the
 * allowlist, no "allowed SNI sent to any IP"). Bounded: when full, the entry
 * that expires first is dropped. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cdn_pins;

struct cdn_pins *cdn_pins_new(size_t capacity);
void cdn_pins_free(struct cdn_pins *p);
/* name as the stub saw it (any case, optional trailing dot); addr host byte order. */
void cdn_pins_add(struct cdn_pins *p, const char *name, uint32_t addr, uint64_t expires_ms);
/* Was addr given out for name and not expired at now_ms? */
bool cdn_pins_check(const struct cdn_pins *p, const char *name, uint32_t addr, uint64_t now_ms);
/* Any unexpired name for addr (the first found), or NULL: to name a destination in the audit log. */
const char *cdn_pins_name_of(const struct cdn_pins *p, uint32_t addr, uint64_t now_ms);
size_t cdn_pins_count(const struct cdn_pins *p);
