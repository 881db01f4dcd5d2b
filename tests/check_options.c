/* Options: environment parsed once and strictly, setters override.
 * CTest runs this suite with CLPIN_MAX_CACHED=512M, CLPIN_CHUNK="12 apples",
 * CLPIN_THREADS=3 and CLPIN_PINNED_H2D=maybe (see tests/pool.cmake). */
#include "testutil.h"

#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t count(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p++)
    n++;
  return n;
}

/* First test: in a process of its own (or the first in a no-fork run), the
 * environment has not been read yet. */
START_TEST(environment_read_once_strictly) {
  ck_assert_str_eq(getenv("CLPIN_CHUNK"), "12 apples");
  char path[] = "/tmp/clpin-opt-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  size_t chunk = clpin_get_option(CLPIN_OPT_CHUNK);
  size_t cached = clpin_get_option(CLPIN_OPT_MAX_CACHED);
  size_t threads = clpin_get_option(CLPIN_OPT_THREADS);
  size_t pinned = clpin_get_option(CLPIN_OPT_PINNED_H2D);
  for (int i = 0; i < 3; i++)
    (void)clpin_get_option(CLPIN_OPT_CHUNK);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char log[4096] = "";
  ssize_t n = pread(fd, log, sizeof log - 1, 0);
  close(fd);
  unlink(path);
  ck_assert_int_gt(n, 0);
  ck_assert_uint_eq(cached, (size_t)512 << 20);
  ck_assert_uint_eq(threads, 3);
  ck_assert_uint_eq(chunk, (size_t)8 << 20); /* the default was kept */
  ck_assert_uint_eq(pinned, 1);
  /* Each bad value reported exactly once, naming the variable and value. */
  ck_assert_uint_eq(count(log, "CLPIN_CHUNK=\"12 apples\""), 1);
  ck_assert_uint_eq(count(log, "CLPIN_PINNED_H2D=\"maybe\""), 1);
  ck_assert_uint_eq(count(log, "CLPIN_THREADS"), 0);
}
END_TEST

START_TEST(sizes_parse_strictly) {
  static const struct {
    const char *text;
    size_t value;
  } good[] = {{"0", 0},           {"4096", 4096},          {"4K", 4096},
              {"4k", 4096},       {"512M", 512u << 20},    {"512MB", 512u << 20},
              {"2MiB", 2u << 20}, {"4G", (size_t)4 << 30}, {" 7 ", 7},
              {"1T", (size_t)1 << 40}};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    size_t v = 12345;
    ck_assert_msg(clpin__parse_size(good[i].text, &v), "rejected \"%s\"", good[i].text);
    ck_assert_uint_eq(v, good[i].value);
  }
  static const char *bad[] = {"",    "M",    "-1",  "+5",  "1.5G", "12 apples", "4KK",
                              "4Q",  "0x10", "4 K", "1e3", "99999999999999999999",
                              "20000000000T", NULL};
  for (size_t i = 0; bad[i]; i++) {
    size_t v = 12345;
    ck_assert_msg(!clpin__parse_size(bad[i], &v), "accepted \"%s\"", bad[i]);
    ck_assert_uint_eq(v, 12345);
  }
  ck_assert(!clpin__parse_size(NULL, NULL));
}
END_TEST

START_TEST(setters_override_within_range) {
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, 1 << 20));
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_CHUNK), 1 << 20);
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, 16));
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_THREADS), 16);
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED_H2D, 0));
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_PINNED_H2D), 0);
  CL_OK(clpin_set_option(CLPIN_OPT_MAX_CACHED, SIZE_MAX));
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_MAX_CACHED), SIZE_MAX);
  /* Out of range or unknown: refused, nothing changes. */
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_CHUNK, 100), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_THREADS, 0), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_THREADS, 257), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_PINNED_H2D, 2), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_DEBUG, 7), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option((clpin_option)99, 1), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option((clpin_option)-1, 1), CLPIN_ERR_INVALID_OPTION);
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_CHUNK), 1 << 20);
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_THREADS), 16);
  ck_assert_uint_eq(clpin_get_option((clpin_option)99), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("options");
  TCase *tc = tcase_create("options");
  tcase_add_test(tc, environment_read_once_strictly);
  tcase_add_test(tc, sizes_parse_strictly);
  tcase_add_test(tc, setters_override_within_range);
  suite_add_tcase(s, tc);
  return test_run_suite(s);
}
