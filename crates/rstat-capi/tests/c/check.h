/* Tiny test helpers for rstat's C tests: each CHECK counts a pass or prints
 * the failure (file, line, the call, what it returned and rstat's message)
 * and counts a failure; DONE() prints "N passed, N failed" and returns the
 * exit status. */
#ifndef RSTAT_TEST_CHECK_H
#define RSTAT_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

#include "rstat.h"

static int passed, failed;

static void report_failure(const char *file, int line, const char *what, long long got,
                           long long want) {
    char msg[1024];
    size_t n = 0;
    msg[0] = 0;
    rstat_last_error(msg, sizeof msg, &n);
    fprintf(stderr, "%s:%d: %s: got %lld, want %lld (last error: %s)\n", file, line, what, got,
            want, msg);
    failed++;
}

/* The call must return `want` (0 or an RSTAT_E* code). */
#define CHECK_RC(call, want)                                                   \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ == (want))                                                     \
            passed++;                                                          \
        else                                                                   \
            report_failure(__FILE__, __LINE__, #call, rc_, (want));            \
    } while (0)

#define CHECK_OK(call) CHECK_RC(call, RSTAT_OK)

/* Two integers must be equal. */
#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ == b_)                                                          \
            passed++;                                                          \
        else                                                                   \
            report_failure(__FILE__, __LINE__, #a " == " #b, a_, b_);          \
    } while (0)

/* Two strings must be equal. */
#define CHECK_STR(a, b)                                                        \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (strcmp(a_, b_) == 0)                                               \
            passed++;                                                          \
        else {                                                                 \
            fprintf(stderr, "%s:%d: %s: got \"%s\", want \"%s\"\n", __FILE__,  \
                    __LINE__, #a, a_, b_);                                     \
            failed++;                                                          \
        }                                                                      \
    } while (0)

#define DONE(name)                                                             \
    do {                                                                       \
        printf("%s: %d passed, %d failed\n", (name), passed, failed);          \
        return failed ? 1 : 0;                                                 \
    } while (0)

#endif
