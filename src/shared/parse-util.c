#include "parse-util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int cdn_parse_u64(const char *s, uint64_t *ret)
{
    if (!s || !isdigit((unsigned char) s[0]))
        return -EINVAL;
    uint64_t v = 0;
    for (; *s; s++) {
        if (!isdigit((unsigned char) *s))
            return -EINVAL;
        unsigned d = (unsigned) (*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    *ret = v;
    return 0;
}

/* Split "1.5G" into a finite non-negative number and a unit suffix. Only
 * digits and one '.' are accepted, so strtod's hex/inf/nan forms never reach it. */
static int split_number(const char *s, double *ret_num, const char **ret_unit)
{
    size_t i = 0, dots = 0, digits = 0;
    for (; s[i]; i++) {
        if (s[i] == '.')
            dots++;
        else if (isdigit((unsigned char) s[i]))
            digits++;
        else
            break;
    }
    if (digits == 0 || dots > 1 || i > 32)
        return -EINVAL;
    char num[40];
    memcpy(num, s, i);
    num[i] = 0;
    double v = strtod(num, NULL);
    if (!isfinite(v) || v < 0)
        return -ERANGE;
    *ret_num = v;
    *ret_unit = s + i;
    return 0;
}

struct unit {
    const char *name;
    double factor;
};

static int parse_with_units(const char *s, const struct unit *units, double *ret)
{
    double v;
    const char *unit;
    if (!s)
        return -EINVAL;
    int r = split_number(s, &v, &unit);
    if (r < 0)
        return r;
    for (const struct unit *u = units; u->name; u++)
        if (strcmp(unit, u->name) == 0) {
            *ret = v * u->factor;
            return 0;
        }
    return -EINVAL;
}

int cdn_parse_size(const char *s, uint64_t *ret_bytes)
{
    static const struct unit units[] = {
        {"", 1},
        {"b", 1},
        {"B", 1},
        {"k", 1024.0},
        {"K", 1024.0},
        {"KB", 1024.0},
        {"KiB", 1024.0},
        {"m", 1048576.0},
        {"M", 1048576.0},
        {"MB", 1048576.0},
        {"MiB", 1048576.0},
        {"g", 1073741824.0},
        {"G", 1073741824.0},
        {"GB", 1073741824.0},
        {"GiB", 1073741824.0},
        {"t", 1099511627776.0},
        {"T", 1099511627776.0},
        {"TB", 1099511627776.0},
        {"TiB", 1099511627776.0},
        {NULL, 0},
    };
    double v;
    int r = parse_with_units(s, units, &v);
    if (r < 0)
        return r;
    if (v >= 18446744073709549568.0) /* largest double below 2^64 */
        return -ERANGE;
    *ret_bytes = (uint64_t) v;
    return 0;
}

int cdn_parse_duration(const char *s, uint64_t *ret_ms)
{
    static const struct unit units[] = {
        {"", 1000}, {"s", 1000}, {"ms", 1}, {"m", 60000}, {"min", 60000}, {"h", 3600000}, {NULL, 0},
    };
    double v;
    int r = parse_with_units(s, units, &v);
    if (r < 0)
        return r;
    if (v >= 1e15)
        return -ERANGE;
    *ret_ms = (uint64_t) llround(v);
    return 0;
}

int cdn_parse_cpus(const char *s, double *ret_cpus)
{
    static const struct unit units[] = {{"", 1}, {NULL, 0}};
    double v;
    int r = parse_with_units(s, units, &v);
    if (r < 0)
        return r;
    if (v <= 0 || v > 1024)
        return -ERANGE;
    *ret_cpus = v;
    return 0;
}
