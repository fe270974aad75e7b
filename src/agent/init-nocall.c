/* cordon-init has no interpreter: calls belong to the process tier's
 * cordon-worker (worker-call.c). */
#include <errno.h>

#include "init.h"

void cdn_call_start(uint32_t channel, const uint8_t *p, size_t len)
{
    (void) p, (void) len;
    cdn_agent_error(channel, EOPNOTSUPP, "call: only the process tier runs calls");
}

void cdn_call_poll_add(struct pollfd *pfd, size_t *n, size_t max)
{
    (void) pfd, (void) n, (void) max;
}

void cdn_call_poll_handle(const struct pollfd *pfd, size_t n)
{
    (void) pfd, (void) n;
}

int cdn_call_timeout_ms(void)
{
    return -1;
}

void cdn_call_quiesce(void)
{
}

void cdn_agent_exec_env(void)
{
}

int main(void)
{
    return cdn_agent_main();
}
