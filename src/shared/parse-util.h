/* Parsers for the human units used by CLI flags and specs. Pure functions:
 * no allocation, no global state; fuzzed by tests/fuzz/fuzz-flags.c. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* "512M", "1G", "1.5g", "4096", "64k" → bytes (binary units; a bare number is bytes).
 * -EINVAL on syntax, -ERANGE on overflow. */
int cdn_parse_size(const char *s, uint64_t *ret_bytes);
/* "30s", "1.5m", "2h", "250ms", "10" (seconds) → milliseconds. */
int cdn_parse_duration(const char *s, uint64_t *ret_ms);
/* "0.5", "2" → CPUs as a positive double not above 1024. */
int cdn_parse_cpus(const char *s, double *ret_cpus);
/* Decimal unsigned integer with no sign, no trailing junk. */
int cdn_parse_u64(const char *s, uint64_t *ret);
