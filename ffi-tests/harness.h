/*
 * A minimal C test framework for the FFI tests.
 *
 *   TEST(name) { CHECK(...); CHECK_INT(a, b); CHECK_STR(s, "x"); }
 *   int main(void) { RUN(name); return harness_finish(); }
 *
 * Each failed check prints "FAIL file:line: ..." at once; passes are silent (set
 * HARNESS_VERBOSE=1 to see them). harness_finish() prints "N passed, N failed" as the
 * binary's last line and returns the exit status (1 when anything failed or no check ran).
 *
 * Header-only and independent of llama.h, so the same tests compile against our header
 * and upstream's.
 */
#ifndef FFI_TESTS_HARNESS_H
#define FFI_TESTS_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int harness_passed;
static int harness_failed;
static const char *harness_current = "";

static inline int harness_verbose(void) {
    const char *v = getenv("HARNESS_VERBOSE");
    return v != NULL && v[0] != '\0' && v[0] != '0';
}

static inline int harness_record(int ok, const char *file, int line, const char *what) {
    if (ok) {
        harness_passed++;
        if (harness_verbose()) {
            printf("  ok   %s:%d: %s\n", file, line, what);
        }
    } else {
        harness_failed++;
        printf("FAIL %s:%d: [%s] %s\n", file, line, harness_current, what);
    }
    fflush(stdout);
    return ok;
}

static inline int harness_check_int(long long got, long long want, const char *expr, const char *file,
                             int line) {
    char what[512];
    snprintf(what, sizeof what, "%s == %lld (got %lld)", expr, want, got);
    return harness_record(got == want, file, line, what);
}

static inline int harness_check_dbl(double got, double want, const char *expr, const char *file,
                             int line) {
    char what[512];
    snprintf(what, sizeof what, "%s == %g (got %g)", expr, want, got);
    return harness_record(got == want || (isnan(got) && isnan(want)), file, line, what);
}

static inline int harness_check_str(const char *got, const char *want, const char *expr,
                             const char *file, int line) {
    char what[768];
    int ok = (got == NULL && want == NULL) ||
             (got != NULL && want != NULL && strcmp(got, want) == 0);
    snprintf(what, sizeof what, "%s == \"%s\" (got %s%s%s)", expr, want ? want : "(null)",
             got ? "\"" : "", got ? got : "NULL", got ? "\"" : "");
    return harness_record(ok, file, line, what);
}

static inline int harness_finish(void) {
    printf("%d passed, %d failed\n", harness_passed, harness_failed);
    if (harness_passed + harness_failed == 0) {
        /* A run that checked nothing (tests filtered away, a RUN list lost) proves nothing. */
        printf("FAIL: no checks ran\n");
    }
    fflush(stdout);
    return harness_failed || harness_passed == 0 ? 1 : 0;
}

#define CHECK(cond) harness_record((cond) ? 1 : 0, __FILE__, __LINE__, #cond)
#define CHECK_INT(got, want) \
    harness_check_int((long long)(got), (long long)(want), #got, __FILE__, __LINE__)
#define CHECK_DBL(got, want) \
    harness_check_dbl((double)(got), (double)(want), #got, __FILE__, __LINE__)
#define CHECK_STR(got, want) harness_check_str((got), (want), #got, __FILE__, __LINE__)
#define CHECK_NULL(p) harness_record((p) == NULL, __FILE__, __LINE__, #p " == NULL")
#define CHECK_NOT_NULL(p) harness_record((p) != NULL, __FILE__, __LINE__, #p " != NULL")

#define TEST(name) static void name(void)
#define RUN(name)                    \
    do {                             \
        harness_current = #name;     \
        if (harness_verbose()) {     \
            printf("-- %s\n", #name); \
        }                            \
        name();                      \
    } while (0)

#endif /* FFI_TESTS_HARNESS_H */
