/* Fuzz the monitor's view of paths a sandbox process hands to a reported
 * syscall (src/monitor/writes.h: read from its memory, so hostile) and the
 * protect patterns they are matched against (src/core/protect.h). Input:
 * line 1 the base directory, line 2 the path, the rest protect patterns. */
#include "core/protect.h"
#include "monitor/writes.h"
#include "lines.h"

#include <stdlib.h>
#include <string.h>

#define MAX_LINES 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *lines[MAX_LINES + 1] = {0};
    size_t n = fuzz_split_lines(data, size, lines, MAX_LINES);
    if (n >= 2) {
        char out[1024];
        const char *base = lines[0][0] == '/' ? lines[0] : "/";
        if (cdn_path_normalize(base, lines[1], out, sizeof out)) {
            if (out[0] != '/' || strstr(out, "//") || strstr(out, "/./") || strstr(out, "/../"))
                abort(); /* normalized means absolute, no empty, "." or ".." components */
            (void) cdn_path_is_system(out);
            char *pats[MAX_LINES + 1] = {0};
            struct cdn_strv protect = {pats, 0};
            for (size_t i = 2; i < n; i++) {
                struct cdn_error err = {0};
                if (cdn_protect_pattern_check(lines[i], i - 2, &err) == 0)
                    pats[protect.n++] = lines[i];
            }
            (void) cdn_path_is_protected(out, &protect);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    return 0;
}
