/* What the CLI's client commands (client.c, cp.c) share: the daemon's
 * connection and how a failed request is told. Full build only (libcordon). */
#pragma once

#include "lib/cordon.h"

/* A client of $CORDON_SOCKET or the default socket; NULL (said on stderr) without memory. */
cordon_client *cdn_cli_connect(void);
/* "cordon WHAT: <the daemon's message> (field: F)" on stderr; returns 125. */
int cdn_cli_fail(cordon_client *c, int r, const char *what);
