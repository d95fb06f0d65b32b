/* check.h - the one assertion vocabulary of every C test, unit and
 * integration alike: no framework, a failed check prints file:line and the
 * expression (with both values where there are two) and counts a failure.
 *
 *   CHECK(cond)               cond is true
 *   CHECK_MSG(cond, fmt, ...) the same, with context (a loop index...)
 *   CHECK_EQ(a, b)            signed integers, both printed
 *   CHECK_EQ_U(a, b)          unsigned 64-bit integers, both printed
 *   CHECK_STR(a, b)           NUL-terminated strings (NULL never equal)
 *   CHECK_MEM(a, b, n)        n bytes at a and b
 *   REQUIRE(cond)             like CHECK, and the calling function returns
 *
 * A check goes on after a failure so that one run shows every broken
 * expectation; REQUIRE is for what the rest of the function cannot do
 * without (a connection, a reply).  The counters live in check.c, shared
 * by every translation unit of a test program: a unit test ends with
 * check_report(), an integration test's runner (harness.c) reads
 * check_failures after each case.  Field accessors that fail a check on a
 * missing key are in fields.h. */
#ifndef COORD_TEST_CHECK_H
#define COORD_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

extern int check_failures;      /* checks failed so far, in this process */
extern int check_count;         /* checks evaluated so far */

/* Counts a failure and prints "file:line: CHECK failed: " and the text. */
void check_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CHECK_FAIL_AT(file, line, ...) check_fail_at(file, line, __VA_ARGS__)

#define CHECK(cond)                                                            \
    do {                                                                       \
        check_count++;                                                         \
        if (!(cond))                                                           \
            CHECK_FAIL_AT(__FILE__, __LINE__, "%s", #cond);                    \
    } while (0)

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

#define REQUIRE(cond)                                                          \
    do {                                                                       \
        check_count++;                                                         \
        if (!(cond)) {                                                         \
            CHECK_FAIL_AT(__FILE__, __LINE__, "REQUIRE %s", #cond);            \
            return;                                                            \
        }                                                                      \
    } while (0)

#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);        \
        check_count++;                                                         \
        if (check_a_ != check_b_)                                              \
            CHECK_FAIL_AT(__FILE__, __LINE__, "%s == %s (%lld != %lld)", #a,   \
                          #b, check_a_, check_b_);                             \
    } while (0)

#define CHECK_EQ_U(a, b)                                                       \
    do {                                                                       \
        uint64_t check_a_ = (uint64_t)(a), check_b_ = (uint64_t)(b);           \
        check_count++;                                                         \
        if (check_a_ != check_b_)                                              \
            CHECK_FAIL_AT(__FILE__, __LINE__,                                  \
                          "%s == %s (%" PRIu64 " != %" PRIu64 ")", #a, #b,     \
                          check_a_, check_b_);                                 \
    } while (0)

#define CHECK_STR(a, b)                                                        \
    do {                                                                       \
        const char *check_a_ = (a), *check_b_ = (b);                           \
        check_count++;                                                         \
        if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_) != 0)         \
            CHECK_FAIL_AT(__FILE__, __LINE__, "%s == %s (\"%s\" != \"%s\")",   \
                          #a, #b, check_a_ ? check_a_ : "(null)",              \
                          check_b_ ? check_b_ : "(null)");                     \
    } while (0)

#define CHECK_MEM(a, b, n)                                                     \
    do {                                                                       \
        size_t check_n_ = (n);                                                 \
        check_count++;                                                         \
        if (check_n_ && memcmp((a), (b), check_n_) != 0)                       \
            CHECK_FAIL_AT(__FILE__, __LINE__, "memcmp(%s, %s, %s) == 0", #a,   \
                          #b, #n);                                             \
    } while (0)

/* Ends a unit test's main: a summary line, and 1 when any check failed. */
int check_report(const char *name);

#endif
