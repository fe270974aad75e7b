/* A tiny self-registering TAP harness for the unit tests.
 *
 *   TEST(name) { CHECK(expr); CHECK_EQ_INT(a, b); CHECK_STREQ(a, b); }
 *
 * Each TEST registers itself before main() runs; main (tap-main.c) runs them
 * in order and prints "ok N - name" / "not ok N - name" and the plan at the
 * end, so nobody counts tests by hand. A test calls tap_skip("why") to skip
 * itself; a program whose every test skipped exits 77 (meson's "skip"). */
#pragma once

#include <stdio.h>
#include <string.h>

struct tap_test {
    const char *name;
    void (*fn)(void);
    struct tap_test *next;
};

void tap_register(struct tap_test *t);
void tap_fail(const char *file, int line, const char *expr);
void tap_skip(const char *why);

#define TEST(n)                                                                                              \
    static void test_##n(void);                                                                              \
    static struct tap_test tap_##n = {#n, test_##n, NULL};                                                   \
    __attribute__((constructor)) static void tap_reg_##n(void)                                               \
    {                                                                                                        \
        tap_register(&tap_##n);                                                                              \
    }                                                                                                        \
    static void test_##n(void)

#define CHECK(e)                                                                                             \
    do {                                                                                                     \
        if (!(e))                                                                                            \
            tap_fail(__FILE__, __LINE__, #e);                                                                \
    } while (0)
#define CHECK_EQ_INT(a, b)                                                                                   \
    do {                                                                                                     \
        long long _a = (long long) (a), _b = (long long) (b);                                                \
        if (_a != _b) {                                                                                      \
            char _m[256];                                                                                    \
            snprintf(_m, sizeof _m, "%s == %s (%lld != %lld)", #a, #b, _a, _b);                              \
            tap_fail(__FILE__, __LINE__, _m);                                                                \
        }                                                                                                    \
    } while (0)
#define CHECK_STREQ(a, b)                                                                                    \
    do {                                                                                                     \
        const char *_a = (a), *_b = (b);                                                                     \
        if (!_a || !_b || strcmp(_a, _b) != 0) {                                                             \
            char _m[512];                                                                                    \
            snprintf(_m, sizeof _m, "%s == %s (\"%s\" != \"%s\")", #a, #b, _a ? _a : "(null)",               \
                     _b ? _b : "(null)");                                                                    \
            tap_fail(__FILE__, __LINE__, _m);                                                                \
        }                                                                                                    \
    } while (0)
