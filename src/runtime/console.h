/* A container's terminal (process.terminal, exec --tty) for the engine's --console-socket. */
#pragma once

#include "shared/error.h"

/* A new pseudo-terminal: its master sent to the unix socket at socket_path, as runc sends it (the
 * engine then relays it), its slave returned (CLOEXEC), to be the process's stdio and controlling
 * terminal. -errno with err naming --console-socket when the socket cannot take it. */
int cdn_rt_console(const char *socket_path, struct cdn_error *err);
