#include "shared/parse-util.h"
#include "tap.h"

#include <errno.h>

TEST(sizes_with_units)
{
    uint64_t v;
    CHECK_EQ_INT(cdn_parse_size("512M", &v), 0);
    CHECK_EQ_INT(v, 512ULL << 20);
    CHECK_EQ_INT(cdn_parse_size("1G", &v), 0);
    CHECK_EQ_INT(v, 1ULL << 30);
    CHECK_EQ_INT(cdn_parse_size("1.5g", &v), 0);
    CHECK_EQ_INT(v, 3ULL << 29);
    CHECK_EQ_INT(cdn_parse_size("64k", &v), 0);
    CHECK_EQ_INT(v, 65536);
    CHECK_EQ_INT(cdn_parse_size("4096", &v), 0);
    CHECK_EQ_INT(v, 4096);
    CHECK_EQ_INT(cdn_parse_size("2MiB", &v), 0);
    CHECK_EQ_INT(v, 2ULL << 20);
}

TEST(sizes_rejected)
{
    uint64_t v = 7;
    const char *bad[] = {"12Q", "",    "M",   "-1M", "1.2.3M", "0x10", "inf",
                         "nan", "1e9", " 1M", "1M ", "1 M",    NULL};
    for (int i = 0; bad[i]; i++)
        CHECK(cdn_parse_size(bad[i], &v) < 0);
    CHECK_EQ_INT(v, 7); /* ret untouched on failure */
    CHECK_EQ_INT(cdn_parse_size("99999999999T", &v), -ERANGE);
    CHECK(cdn_parse_size(NULL, &v) < 0);
}

TEST(durations)
{
    uint64_t ms;
    CHECK_EQ_INT(cdn_parse_duration("30s", &ms), 0);
    CHECK_EQ_INT(ms, 30000);
    CHECK_EQ_INT(cdn_parse_duration("250ms", &ms), 0);
    CHECK_EQ_INT(ms, 250);
    CHECK_EQ_INT(cdn_parse_duration("1.5m", &ms), 0);
    CHECK_EQ_INT(ms, 90000);
    CHECK_EQ_INT(cdn_parse_duration("2h", &ms), 0);
    CHECK_EQ_INT(ms, 7200000);
    CHECK_EQ_INT(cdn_parse_duration("10", &ms), 0);
    CHECK_EQ_INT(ms, 10000);
    CHECK(cdn_parse_duration("10x", &ms) < 0);
    CHECK(cdn_parse_duration("-1s", &ms) < 0);
    CHECK(cdn_parse_duration("s", &ms) < 0);
}

TEST(cpus)
{
    double c;
    CHECK_EQ_INT(cdn_parse_cpus("0.5", &c), 0);
    CHECK(c == 0.5);
    CHECK_EQ_INT(cdn_parse_cpus("2", &c), 0);
    CHECK(c == 2.0);
    CHECK(cdn_parse_cpus("0", &c) < 0);
    CHECK(cdn_parse_cpus("2000", &c) < 0);
    CHECK(cdn_parse_cpus("1c", &c) < 0);
}

TEST(u64)
{
    uint64_t v;
    CHECK_EQ_INT(cdn_parse_u64("18446744073709551615", &v), 0);
    CHECK(v == UINT64_MAX);
    CHECK_EQ_INT(cdn_parse_u64("18446744073709551616", &v), -ERANGE);
    CHECK(cdn_parse_u64("+1", &v) < 0);
    CHECK(cdn_parse_u64("1 ", &v) < 0);
}
