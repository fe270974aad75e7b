/* JSON helpers shared by the manifest, index and config parsers (internal to src/oci). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "shared/error.h"

/* Parse at most CDN_OCI_JSON_MAX bytes of JSON (duplicate keys refused) into an object; what names
 * the document in errors. */
int cdn_oci_json_load(const void *json, size_t len, const char *what, json_t **ret, struct cdn_error *err);
/* Copy o[key] (a string) into buf; absent or null gives "" unless required. -EINVAL not a string
 * or one with a control character, -E2BIG too long for buf; errors name field. */
int cdn_oci_json_str(json_t *o, const char *key, bool required, char *buf, size_t size, const char *field,
                     struct cdn_error *err);
