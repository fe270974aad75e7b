/* Stand-ins for what the lean build (cli.h) does not link. cdn_cli_run hands
 * over to cordon-full before either is needed; these only keep a race (the
 * cache removed between that check and its use) from becoming a crash. */
#include <errno.h>

#include "confine/seccomp-policy.h"

int cdn_seccomp_compile_variant(struct cdn_seccomp_prog *ret, bool writes, struct cdn_error *err)
{
    (void) ret, (void) writes;
    return cdn_error_set(err, ENOPKG,
                         "the seccomp policy cache is missing and this static cordon cannot compile it; "
                         "`cordon image rebuild host` writes it");
}
