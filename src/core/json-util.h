/* jansson's values under the cleanup convention of shared/macro.h. Header-only. */
#pragma once

#include <jansson.h>

#include "shared/macro.h"

/* A reference dropped at the end of the scope (jansson's own NULL-safe destructor); TAKE_PTR
 * hands it on. */
#define _cleanup_json_ _cleanup_(json_decrefp)
