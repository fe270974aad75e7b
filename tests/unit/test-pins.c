#include "net/egress.h"
#include "net/pins.h"
#include "tap.h"

#include <stdlib.h>

TEST(add_and_check)
{
    struct cdn_pins *p = cdn_pins_new(16);
    CHECK(p);
    CHECK_EQ_INT(cdn_pins_count(p), 0);
    cdn_pins_add(p, "Example.COM.", 0x5db8d822, 1000);
    CHECK_EQ_INT(cdn_pins_count(p), 1);
    CHECK(cdn_pins_check(p, "example.com", 0x5db8d822, 0));
    CHECK(cdn_pins_check(p, "EXAMPLE.com.", 0x5db8d822, 999));
    CHECK(!cdn_pins_check(p, "example.com", 0x5db8d823, 0)); /* another address */
    CHECK(!cdn_pins_check(p, "www.example.com", 0x5db8d822, 0));
    CHECK(!cdn_pins_check(p, "bad name", 0x5db8d822, 0));
    CHECK(!cdn_pins_check(p, NULL, 0x5db8d822, 0));
    cdn_pins_free(p);
    cdn_pins_free(NULL);
}

TEST(expiry)
{
    struct cdn_pins *p = cdn_pins_new(4);
    cdn_pins_add(p, "a.com", 1, 1000);
    CHECK(cdn_pins_check(p, "a.com", 1, 999));
    CHECK(!cdn_pins_check(p, "a.com", 1, 1000)); /* expired at its expiry */
    CHECK(!cdn_pins_check(p, "a.com", 1, 5000));
    CHECK_STREQ(cdn_pins_name_of(p, 1, 999), "a.com");
    CHECK(cdn_pins_name_of(p, 1, 1000) == NULL);
    /* A later answer with a shorter life does not cut the pin short; a longer one extends it. */
    cdn_pins_add(p, "A.com", 1, 500);
    CHECK(cdn_pins_check(p, "a.com", 1, 999));
    cdn_pins_add(p, "a.com.", 1, 2000);
    CHECK(cdn_pins_check(p, "a.com", 1, 1999));
    CHECK_EQ_INT(cdn_pins_count(p), 1); /* same name and address: one pin */
    cdn_pins_free(p);
}

TEST(name_of)
{
    struct cdn_pins *p = cdn_pins_new(4);
    CHECK(cdn_pins_name_of(p, 7, 0) == NULL);
    cdn_pins_add(p, "old.example", 7, 10);
    cdn_pins_add(p, "New.Example", 7, 100);
    CHECK_STREQ(cdn_pins_name_of(p, 7, 0), "old.example");
    CHECK_STREQ(cdn_pins_name_of(p, 7, 50), "new.example");
    CHECK(cdn_pins_name_of(p, 8, 0) == NULL);
    CHECK(cdn_pins_name_of(NULL, 7, 0) == NULL);
    cdn_pins_free(p);
}

TEST(one_name_many_addresses)
{
    struct cdn_pins *p = cdn_pins_new(8);
    for (uint32_t a = 1; a <= 4; a++)
        cdn_pins_add(p, "multi.example", a, 100);
    CHECK_EQ_INT(cdn_pins_count(p), 4);
    for (uint32_t a = 1; a <= 4; a++)
        CHECK(cdn_pins_check(p, "multi.example", a, 0));
    CHECK(!cdn_pins_check(p, "multi.example", 5, 0));
    cdn_pins_free(p);
}

TEST(eviction_drops_earliest_expiry)
{
    struct cdn_pins *p = cdn_pins_new(3);
    cdn_pins_add(p, "a.com", 1, 300);
    cdn_pins_add(p, "b.com", 2, 100); /* expires first */
    cdn_pins_add(p, "c.com", 3, 200);
    CHECK_EQ_INT(cdn_pins_count(p), 3);
    cdn_pins_add(p, "d.com", 4, 400);
    CHECK_EQ_INT(cdn_pins_count(p), 3);
    CHECK(!cdn_pins_check(p, "b.com", 2, 0));
    CHECK(cdn_pins_check(p, "a.com", 1, 0));
    CHECK(cdn_pins_check(p, "c.com", 3, 0));
    CHECK(cdn_pins_check(p, "d.com", 4, 0));
    cdn_pins_add(p, "e.com", 5, 50); /* now c.com (200) goes */
    CHECK(!cdn_pins_check(p, "c.com", 3, 0));
    CHECK(cdn_pins_check(p, "e.com", 5, 0));
    CHECK_EQ_INT(cdn_pins_count(p), 3);
    cdn_pins_free(p);
}

TEST(invalid_names_are_not_pinned)
{
    struct cdn_pins *p = cdn_pins_new(4);
    cdn_pins_add(p, "", 1, 100);
    cdn_pins_add(p, "a..b", 1, 100);
    cdn_pins_add(p, NULL, 1, 100);
    cdn_pins_add(NULL, "a.com", 1, 100);
    CHECK_EQ_INT(cdn_pins_count(p), 0);
    CHECK_EQ_INT(cdn_pins_count(NULL), 0);
    CHECK(!cdn_pins_check(NULL, "a.com", 1, 0));
    cdn_pins_free(p);
}

TEST(zero_capacity_holds_one)
{
    struct cdn_pins *p = cdn_pins_new(0);
    CHECK(p);
    cdn_pins_add(p, "a.com", 1, 100);
    cdn_pins_add(p, "b.com", 2, 200);
    CHECK_EQ_INT(cdn_pins_count(p), 1);
    CHECK(cdn_pins_check(p, "b.com", 2, 0));
    cdn_pins_free(p);
    CHECK(cdn_pins_new(SIZE_MAX) == NULL);
}

TEST(large_table)
{
    enum { CAP = 4096 };
    struct cdn_pins *p = cdn_pins_new(CAP);
    char name[64];
    for (uint32_t i = 0; i < CAP + 100; i++) {
        snprintf(name, sizeof name, "host%u.example", i);
        cdn_pins_add(p, name, i, 1000 + i);
    }
    CHECK_EQ_INT(cdn_pins_count(p), CAP);
    /* The first 100 expired earliest and made room. */
    CHECK(!cdn_pins_check(p, "host0.example", 0, 0));
    CHECK(!cdn_pins_check(p, "host99.example", 99, 0));
    CHECK(cdn_pins_check(p, "host100.example", 100, 0));
    CHECK(cdn_pins_check(p, "host4195.example", 4195, 0));
    cdn_pins_free(p);
}

TEST(now_ms_is_monotonic)
{
    uint64_t a = cdn_now_ms(), b = cdn_now_ms();
    CHECK(a > 0);
    CHECK(b >= a);
}
