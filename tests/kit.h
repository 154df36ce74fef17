/* tests/kit.h — a header-only test kit. Each test executable defines test
 * functions with TEST(name), lists them in main with RUN(name), and returns
 * kit_summary(). Assertions print both sides and the file:line, mark the
 * test failed and return from it. A whole executable may return
 * KIT_SKIP (77) — CTest's SKIP_RETURN_CODE — after printing why. */
#ifndef TSR_TESTS_KIT_H
#define TSR_TESTS_KIT_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIT_SKIP 77

static int kit_failed_tests = 0;
static int kit_passed_tests = 0;
static int kit_current_failed = 0;

#define TEST(name) static void test_##name(void)

/* KIT_ONLY=substring in the environment runs only the tests whose names
 * contain it (a diagnosis run of one test); the others print a SKIP line. */
static inline int kit_selected(const char *name)
{
  const char *only = getenv("KIT_ONLY");
  if (only == NULL || only[0] == '\0' || strstr(name, only) != NULL) return 1;
  fprintf(stderr, "[ SKIP ] %s (KIT_ONLY=%s)\n", name, only);
  return 0;
}

#define RUN(name)                                                                     \
  do {                                                                                \
    if (!kit_selected(#name)) break;                                                  \
    kit_current_failed = 0;                                                           \
    fprintf(stderr, "[ RUN  ] %s\n", #name);                                          \
    test_##name();                                                                    \
    if (kit_current_failed) {                                                         \
      kit_failed_tests++;                                                             \
      fprintf(stderr, "[ FAIL ] %s\n", #name);                                        \
    } else {                                                                          \
      kit_passed_tests++;                                                             \
      fprintf(stderr, "[  OK  ] %s\n", #name);                                        \
    }                                                                                 \
  } while (0)

static inline int kit_summary(void)
{
  fprintf(stderr, "%d passed, %d failed\n", kit_passed_tests, kit_failed_tests);
  return kit_failed_tests ? 1 : 0;
}

#define KIT_FAIL_(...)                                                                \
  do {                                                                                \
    fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);                                 \
    fprintf(stderr, __VA_ARGS__);                                                     \
    fprintf(stderr, "\n");                                                            \
    kit_current_failed = 1;                                                           \
    return;                                                                           \
  } while (0)

#define ASSERT_TRUE(cond)                                                             \
  do {                                                                                \
    if (!(cond)) KIT_FAIL_("expected true: %s", #cond);                               \
  } while (0)

#define ASSERT_EQ(a, b)                                                               \
  do {                                                                                \
    long long kit_a_ = (long long)(a), kit_b_ = (long long)(b);                       \
    if (kit_a_ != kit_b_) KIT_FAIL_("%s == %s: %lld vs %lld", #a, #b, kit_a_, kit_b_); \
  } while (0)

#define ASSERT_NE(a, b)                                                               \
  do {                                                                                \
    long long kit_a_ = (long long)(a), kit_b_ = (long long)(b);                       \
    if (kit_a_ == kit_b_) KIT_FAIL_("%s != %s: both %lld", #a, #b, kit_a_);           \
  } while (0)

#define ASSERT_OK(expr)                                                               \
  do {                                                                                \
    long long kit_rc_ = (long long)(expr);                                            \
    if (kit_rc_ != 0) KIT_FAIL_("%s returned %lld", #expr, kit_rc_);                  \
  } while (0)

#define ASSERT_STREQ(a, b)                                                            \
  do {                                                                                \
    const char *kit_a_ = (a), *kit_b_ = (b);                                          \
    if (kit_a_ == NULL || kit_b_ == NULL || strcmp(kit_a_, kit_b_) != 0)              \
      KIT_FAIL_("%s == %s: \"%s\" vs \"%s\"", #a, #b, kit_a_ ? kit_a_ : "(null)",       \
                kit_b_ ? kit_b_ : "(null)");                                          \
  } while (0)

#define ASSERT_CONTAINS(haystack, needle)                                             \
  do {                                                                                \
    const char *kit_h_ = (haystack), *kit_n_ = (needle);                              \
    if (kit_h_ == NULL || strstr(kit_h_, kit_n_) == NULL)                             \
      KIT_FAIL_("%s contains \"%s\": got \"%s\"", #haystack, kit_n_,                  \
                kit_h_ ? kit_h_ : "(null)");                                          \
  } while (0)

/* |a - b| <= tol * max(1, |b|) */
#define ASSERT_NEAR(a, b, tol)                                                        \
  do {                                                                                \
    double kit_a_ = (double)(a), kit_b_ = (double)(b), kit_t_ = (double)(tol);        \
    double kit_s_ = fabs(kit_b_) > 1.0 ? fabs(kit_b_) : 1.0;                          \
    if (!(fabs(kit_a_ - kit_b_) <= kit_t_ * kit_s_))                                  \
      KIT_FAIL_("%s ~= %s: %.17g vs %.17g (tol %g)", #a, #b, kit_a_, kit_b_, kit_t_); \
  } while (0)

#endif
