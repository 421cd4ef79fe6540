/* test.h -- a minimal harness: each test file is a list of CHECKs in
 * functions named for the behaviour they specify; main() runs them with RUN()
 * and returns DONE(), which prints "N passed, N failed" and fails the process
 * when any check failed. */
#ifndef AP_TEST_H
#define AP_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ap_test_pass, ap_test_fail;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (cond) {                                                          \
            ap_test_pass++;                                                  \
        } else {                                                             \
            ap_test_fail++;                                                  \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
        }                                                                    \
    } while (0)

/* Relative closeness: |a - b| <= tol * max(|a|, |b|), or both tiny. */
#define CHECK_NEAR(a, b, tol)                                                \
    do {                                                                     \
        double ap_a_ = (a), ap_b_ = (b);                                     \
        double ap_m_ = fmax(fabs(ap_a_), fabs(ap_b_));                       \
        if (fabs(ap_a_ - ap_b_) <= (tol) * ap_m_ || ap_m_ < 1e-300) {        \
            ap_test_pass++;                                                  \
        } else {                                                             \
            ap_test_fail++;                                                  \
            fprintf(stderr, "%s:%d: %s = %.10g, expected %s = %.10g (tol %g)\n", \
                    __FILE__, __LINE__, #a, ap_a_, #b, ap_b_, (double)(tol)); \
        }                                                                    \
    } while (0)

#define CHECK_STR_HAS(hay, needle)                                           \
    do {                                                                     \
        const char *ap_h_ = (hay);                                           \
        if (ap_h_ && strstr(ap_h_, (needle))) {                              \
            ap_test_pass++;                                                  \
        } else {                                                             \
            ap_test_fail++;                                                  \
            fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n",       \
                    __FILE__, __LINE__, ap_h_ ? ap_h_ : "(null)", (needle)); \
        }                                                                    \
    } while (0)

/* A call that must succeed before the rest of the test means anything: on
 * failure it prints the call's error message and leaves the test function,
 * so that later checks never read what the call did not fill in. */
#define REQUIRE_OK(call, err)                                                \
    do {                                                                     \
        if ((call) == 0) {                                                   \
            ap_test_pass++;                                                  \
        } else {                                                             \
            ap_test_fail++;                                                  \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__,    \
                    #call, (err));                                           \
            return;                                                          \
        }                                                                    \
    } while (0)

#define RUN(fn)                                                              \
    do {                                                                     \
        int ap_f0_ = ap_test_fail;                                           \
        fn();                                                                \
        if (ap_test_fail != ap_f0_)                                          \
            fprintf(stderr, "  in %s\n", #fn);                               \
    } while (0)

#define DONE()                                                               \
    (printf("%d passed, %d failed\n", ap_test_pass, ap_test_fail),           \
     ap_test_fail ? 1 : 0)

/* The source root, for test data: $AP_SRC or the working directory. */
static inline const char *ap_test_src(void)
{
    const char *s = getenv("AP_SRC");
    return s ? s : ".";
}

#endif
