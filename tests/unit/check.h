/* check.h - the tiny assertion helpers of the unit tests: no framework, a
 * failed CHECK prints file:line and the expression, and main returns 1. */
#ifndef COORD_TEST_CHECK_H
#define COORD_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK_FAIL_AT(file, line, ...)                                         \
    do {                                                                       \
        fprintf(stderr, "%s:%d: CHECK failed: ", file, line);                  \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
        check_failures++;                                                      \
    } while (0)

/* CHECK(cond): cond must be true. */
#define CHECK(cond)                                                            \
    do {                                                                       \
        check_count++;                                                         \
        if (!(cond))                                                           \
            CHECK_FAIL_AT(__FILE__, __LINE__, "%s", #cond);                    \
    } while (0)

/* CHECK_MSG(cond, fmt, ...): like CHECK, with context (a loop index...). */
#define CHECK_MSG(cond, ...)                                                   \
    do {                                                                       \
        check_count++;                                                         \
        if (!(cond)) {                                                         \
            CHECK_FAIL_AT(__FILE__, __LINE__, "%s", #cond);                    \
            fprintf(stderr, "    context: ");                                  \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

/* Integers (signed): prints both values. */
#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);        \
        check_count++;                                                         \
        if (check_a_ != check_b_)                                              \
            CHECK_FAIL_AT(__FILE__, __LINE__, "%s == %s (%lld != %lld)", #a,   \
                          #b, check_a_, check_b_);                             \
    } while (0)

/* Unsigned 64-bit integers. */
#define CHECK_EQ_U64(a, b)                                                     \
    do {                                                                       \
        uint64_t check_a_ = (uint64_t)(a), check_b_ = (uint64_t)(b);           \
        check_count++;                                                         \
        if (check_a_ != check_b_)                                              \
            CHECK_FAIL_AT(__FILE__, __LINE__,                                  \
                          "%s == %s (%" PRIu64 " != %" PRIu64 ")", #a, #b,     \
                          check_a_, check_b_);                                 \
    } while (0)

/* NUL-terminated strings. */
#define CHECK_STR(a, b)                                                        \
    do {                                                                       \
        const char *check_a_ = (a), *check_b_ = (b);                           \
        check_count++;                                                         \
        if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_) != 0)         \
            CHECK_FAIL_AT(__FILE__, __LINE__, "%s == %s (\"%s\" != \"%s\")",   \
                          #a, #b, check_a_ ? check_a_ : "(null)",              \
                          check_b_ ? check_b_ : "(null)");                     \
    } while (0)

/* n bytes at a and b. */
#define CHECK_MEM(a, b, n)                                                     \
    do {                                                                       \
        size_t check_n_ = (n);                                                 \
        check_count++;                                                         \
        if (check_n_ && memcmp((a), (b), check_n_) != 0)                       \
            CHECK_FAIL_AT(__FILE__, __LINE__, "memcmp(%s, %s, %s) == 0", #a,   \
                          #b, #n);                                             \
    } while (0)

/* Ends main: a summary line, and 1 when any check failed. */
static inline int check_report(const char *name)
{
    if (check_failures) {
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, check_failures,
                check_count);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, check_count);
    return 0;
}

#endif
