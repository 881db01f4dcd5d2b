/* SPDX-License-Identifier: Apache-2.0 */
/* Options: environment parsed once and strictly, setters override.
 * CTest runs the case "options" with CLPIN_MAX_CACHED=512M,
 * CLPIN_CHUNK="12 apples", CLPIN_THREADS=3 and CLPIN_PINNED_H2D=maybe, and
 * the case "env" (check_options_env) with good values of every option and
 * CLPIN_DEBUG=1 (see tests/pool.cmake). */
#include "testutil.h"

#include "internal.h"
#include "options.h"

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

/* Read every option for the first time, with stderr captured into log.
 * In a process of its own (or the first test of a no-fork run) this is when
 * the environment is read. */
static void first_read(size_t values[CLPIN_OPT__COUNT], char *log, size_t len) {
  char path[] = "/tmp/clpin-opt-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  for (int i = 0; i < CLPIN_OPT__COUNT; i++)
    values[i] = clpin_get_option((clpin_option)i);
  for (int i = 0; i < 3; i++)
    (void)clpin_get_option(CLPIN_OPT_CHUNK);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ssize_t n = pread(fd, log, len - 1, 0);
  close(fd);
  unlink(path);
  log[n > 0 ? n : 0] = '\0';
}

START_TEST(environment_read_once_strictly) {
  ck_assert_str_eq(getenv("CLPIN_CHUNK"), "12 apples");
  size_t v[CLPIN_OPT__COUNT];
  char log[4096];
  first_read(v, log, sizeof log);
  ck_assert_uint_eq(v[CLPIN_OPT_MAX_CACHED], (size_t)512 << 20);
  ck_assert_uint_eq(v[CLPIN_OPT_THREADS], 3);
  ck_assert_uint_eq(v[CLPIN_OPT_CHUNK], (size_t)8 << 20); /* the default was kept */
  ck_assert_uint_eq(v[CLPIN_OPT_PINNED], CLPIN_PINNED_AUTO);
  ck_assert_uint_eq(v[CLPIN_OPT_LAYER_MIN], (size_t)1 << 20);
  /* Each bad value reported exactly once, naming the variable and value,
   * what is wrong, the valid form and the default. */
  ck_assert_uint_eq(
      count(log, "CLPIN_CHUNK=\"12 apples\": not a size; valid: a size of at least 4K"), 1);
  ck_assert_uint_eq(count(log, "using the default 8M\n"), 1);
  ck_assert_uint_eq(count(log,
                          "CLPIN_PINNED_H2D=\"maybe\": not a valid value; valid: 0, 1 or auto; "
                          "using the default auto\n"),
                    1);
  ck_assert_uint_eq(count(log, "CLPIN_THREADS"), 0);
  ck_assert_uint_eq(count(log, "clpin: "), 2);
}
END_TEST

/* check_options_env: CLPIN_CHUNK=2G (no maximum any more), CLPIN_PINNED_H2D=auto,
 * CLPIN_MAX_CACHED=unlimited, CLPIN_LAYER_MIN=64K, CLPIN_THREADS=5,
 * CLPIN_DEBUG=1, CLPIN_NUMA=0, CLPIN_ROUND_MAX=1G: every value taken, and the debug line shows them as written. */
START_TEST(environment_good_values) {
  ck_assert_str_eq(getenv("CLPIN_CHUNK"), "2G");
  size_t v[CLPIN_OPT__COUNT];
  char log[4096];
  first_read(v, log, sizeof log);
  ck_assert_uint_eq(v[CLPIN_OPT_CHUNK], (size_t)2 << 30);
  ck_assert_uint_eq(v[CLPIN_OPT_PINNED], CLPIN_PINNED_AUTO);
  ck_assert_uint_eq(v[CLPIN_OPT_MAX_CACHED], SIZE_MAX);
  ck_assert_uint_eq(v[CLPIN_OPT_LAYER_MIN], (size_t)64 << 10);
  ck_assert_uint_eq(v[CLPIN_OPT_THREADS], 5);
  ck_assert_uint_eq(v[CLPIN_OPT_DEBUG], 1);
  ck_assert_msg(!strstr(log, "ignoring"), "a good value was refused: %s", log);
  ck_assert_uint_eq(v[CLPIN_OPT_QUARANTINE], 0); /* unset: the default */
  ck_assert_uint_eq(v[CLPIN_OPT_NUMA], 0);
  ck_assert_uint_eq(v[CLPIN_OPT_ROUND_MAX], (size_t)1 << 30);
  char want[512];
  snprintf(want, sizeof want,
           "clpin: options: CLPIN_PINNED_H2D=auto CLPIN_MAX_CACHED=unlimited "
           "CLPIN_CHUNK=2G CLPIN_THREADS=5 CLPIN_DEBUG=1 CLPIN_LAYER_MIN=64K "
           "CLPIN_STAGE_MIN=2M CLPIN_QUARANTINE=%zu CLPIN_STAGE_MIN_H2D=16M CLPIN_NUMA=0 "
           "CLPIN_ROUND_MAX=1G CLPIN_STREAM_MIN=16M CLPIN_TRANSFER_THREADS=16\n",
           v[CLPIN_OPT_QUARANTINE]);
  ck_assert_msg(strstr(log, want), "debug line: %s", log);
  ck_assert_msg(!strstr(log, "18446744073709551615"), "SIZE_MAX printed as a number: %s", log);
}
END_TEST

START_TEST(sizes_format_as_written) {
  char b[32];
  ck_assert_str_eq(clpin__format_size(SIZE_MAX, b, sizeof b), "unlimited");
  ck_assert_str_eq(clpin__format_size(0, b, sizeof b), "0");
  ck_assert_str_eq(clpin__format_size(4095, b, sizeof b), "4095");
  ck_assert_str_eq(clpin__format_size(4096, b, sizeof b), "4K");
  ck_assert_str_eq(clpin__format_size((size_t)8 << 20, b, sizeof b), "8M");
  ck_assert_str_eq(clpin__format_size((size_t)3 << 30, b, sizeof b), "3G");
  ck_assert_str_eq(clpin__format_size((size_t)1 << 50, b, sizeof b), "1024T");
  ck_assert_str_eq(clpin__format_size(((size_t)1 << 20) + 1024, b, sizeof b), "1025K");
}
END_TEST

START_TEST(sizes_parse_strictly) {
  static const struct {
    const char *text;
    size_t value;
  } good[] = {{"0", 0},
              {"4096", 4096},
              {"4K", 4096},
              {"4k", 4096},
              {"512M", 512u << 20},
              {"512MB", 512u << 20},
              {"2MiB", 2u << 20},
              {"4G", (size_t)4 << 30},
              {" 7 ", 7},
              {"1T", (size_t)1 << 40}};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    size_t v = 12345;
    ck_assert_msg(clpin__parse_size(good[i].text, &v), "rejected \"%s\"", good[i].text);
    ck_assert_uint_eq(v, good[i].value);
  }
  static const char *bad[] = {"",
                              "M",
                              "-1",
                              "+5",
                              "1.5G",
                              "12 apples",
                              "4KK",
                              "4Q",
                              "0x10",
                              "4 K",
                              "1e3",
                              "99999999999999999999",
                              "20000000000T",
                              NULL};
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
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, 0));
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_PINNED), 0);
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, CLPIN_PINNED_AUTO));
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_PINNED), CLPIN_PINNED_AUTO);
  CL_OK(clpin_set_option(CLPIN_OPT_MAX_CACHED, SIZE_MAX));
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_MAX_CACHED), SIZE_MAX);
  /* The chunk has a minimum only: staging clamps it to the device. */
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, (size_t)2 << 30));
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_CHUNK), (size_t)2 << 30);
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, SIZE_MAX));
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_CHUNK), SIZE_MAX);
  /* 0 would route 0-byte calls, which the driver must refuse itself. */
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_LAYER_MIN, 0), CLPIN_ERR_INVALID_OPTION);
  CL_OK(clpin_set_option(CLPIN_OPT_LAYER_MIN, 1));
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_LAYER_MIN), 1);
  CL_OK(clpin_set_option(CLPIN_OPT_LAYER_MIN, (size_t)256 << 10));
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_LAYER_MIN), (size_t)256 << 10);
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, 1 << 20));
  /* Out of range or unknown: refused, nothing changes. */
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_CHUNK, 100), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_THREADS, 0), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_THREADS, 257), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_CHUNK, 4095), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_PINNED, 3), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_DEBUG, 7), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option((clpin_option)99, 1), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option((clpin_option)-1, 1), CLPIN_ERR_INVALID_OPTION);
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_CHUNK), 1 << 20);
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_THREADS), 16);
  ck_assert_uint_eq(clpin_get_option((clpin_option)99), 0);
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT__COUNT), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("options");
  TCase *tc = tcase_create("options");
  tcase_add_test(tc, environment_read_once_strictly);
  tcase_add_test(tc, sizes_parse_strictly);
  tcase_add_test(tc, sizes_format_as_written);
  tcase_add_test(tc, setters_override_within_range);
  suite_add_tcase(s, tc);
  TCase *env = tcase_create("env");
  tcase_add_test(env, environment_good_values);
  suite_add_tcase(s, env);
  return test_run_suite(s);
}
