/* SPDX-License-Identifier: Apache-2.0 */
/* The statistics, targets, report lines, size lists and data patterns
 * behind every figure the benches report (bench/benchstat.c). */
#include "benchstat.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(percentile_nearest_rank) {
  double v[100];
  for (int i = 0; i < 100; i++)
    v[i] = i + 1; /* 1 ... 100 */
  ck_assert_double_eq(bench_percentile(v, 100, 99), 99);
  ck_assert_double_eq(bench_percentile(v, 100, 100), 100);
  ck_assert_double_eq(bench_percentile(v, 100, 10), 10);
  ck_assert_double_eq(bench_percentile(v, 100, 0), 1);
  /* Few samples: p99 of 10 is the largest, never an interpolated value. */
  ck_assert_double_eq(bench_percentile(v, 10, 99), 10);
  ck_assert_double_eq(bench_percentile(v, 10, 50), 5);
  ck_assert_double_eq(bench_percentile(v, 0, 50), 0);
}
END_TEST

START_TEST(median_odd_even) {
  double odd[] = {1, 2, 10};
  double even[] = {1, 2, 4, 10};
  ck_assert_double_eq(bench_median(odd, 3), 2);
  ck_assert_double_eq(bench_median(even, 4), 3);
  ck_assert_double_eq(bench_median(odd, 1), 1);
  ck_assert_double_eq(bench_median(odd, 0), 0);
}
END_TEST

START_TEST(summarize_sorts_and_summarizes) {
  double v[] = {5, 1, 9, 3, 7};
  bench_summary s = bench_summarize(v, 5);
  ck_assert_uint_eq(s.n, 5);
  ck_assert_double_eq(s.median, 5);
  ck_assert_double_eq(s.min, 1);
  ck_assert_double_eq(s.max, 9);
  ck_assert_double_eq(s.mean, 5);
  ck_assert_double_eq(s.p10, 1);
  ck_assert_double_eq(s.p90, 9);
  for (int i = 1; i < 5; i++)
    ck_assert(v[i - 1] <= v[i]);
  bench_summary z = bench_summarize(v, 0);
  ck_assert_uint_eq(z.n, 0);
  ck_assert_double_eq(z.median, 0);
  ck_assert_double_eq(z.max, 0);
}
END_TEST

START_TEST(format_sizes) {
  char buf[32];
  ck_assert_str_eq(bench_fmt_size(4096, buf, sizeof buf), "4 KiB");
  ck_assert_str_eq(bench_fmt_size((size_t)1 << 30, buf, sizeof buf), "1 GiB");
  ck_assert_str_eq(bench_fmt_size(1536, buf, sizeof buf), "1.5 KiB");
  ck_assert_str_eq(bench_fmt_size(100, buf, sizeof buf), "100 B");
  ck_assert_str_eq(bench_fmt_size(3 << 20, buf, sizeof buf), "3 MiB");
}
END_TEST

START_TEST(parse_size_lists) {
  size_t v[4];
  ck_assert_int_eq(bench_parse_sizes("4K,64M,1G", v, 4), 3);
  ck_assert_uint_eq(v[0], 4096);
  ck_assert_uint_eq(v[1], (size_t)64 << 20);
  ck_assert_uint_eq(v[2], (size_t)1 << 30);
  ck_assert_int_eq(bench_parse_sizes("123", v, 4), 1);
  ck_assert_uint_eq(v[0], 123);
  ck_assert_int_eq(bench_parse_sizes("4K,,1G", v, 4), -1);
  ck_assert_int_eq(bench_parse_sizes("", v, 4), -1);
  ck_assert_int_eq(bench_parse_sizes(NULL, v, 4), -1);
  ck_assert_int_eq(bench_parse_sizes("0", v, 4), -1);
  ck_assert_int_eq(bench_parse_sizes("4K,", v, 4), -1);
  ck_assert_int_eq(bench_parse_sizes("1x", v, 4), -1);
  ck_assert_int_eq(bench_parse_sizes("1,2,3,4,5", v, 4), -1); /* more than fit */
}
END_TEST

START_TEST(parse_count_lists) {
  unsigned v[4];
  ck_assert_int_eq(bench_parse_counts("1,2,16", v, 4), 3);
  ck_assert_uint_eq(v[0], 1);
  ck_assert_uint_eq(v[2], 16);
  ck_assert_int_eq(bench_parse_counts("0", v, 4), -1);
  ck_assert_int_eq(bench_parse_counts("-1", v, 4), -1);
  ck_assert_int_eq(bench_parse_counts("3x", v, 4), -1);
  ck_assert_int_eq(bench_parse_counts("4K", v, 4), -1);
}
END_TEST

/* Every length, at every alignment: the pattern round-trips, any single
 * changed byte is found at its index, and another seed does not match. */
START_TEST(pattern_fill_and_check) {
  static const size_t lens[] = {0, 1, 7, 8, 9, 63, 4097};
  unsigned char *buf = malloc(4097 + 16);
  ck_assert_ptr_nonnull(buf);
  for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
    for (size_t align = 0; align < 8; align++) {
      size_t n = lens[l];
      unsigned char *p = buf + align;
      bench_fill(p, n, 42);
      ck_assert_uint_eq(bench_mismatch(p, n, 42), SIZE_MAX);
      if (n == 0)
        continue;
      ck_assert_uint_ne(bench_mismatch(p, n, 43), SIZE_MAX);
      size_t k = n / 2;
      p[k] ^= 0x01;
      ck_assert_uint_eq(bench_mismatch(p, n, 42), k);
      p[k] ^= 0x01;
      p[n - 1] ^= 0x80;
      ck_assert_uint_eq(bench_mismatch(p, n, 42), n - 1);
    }
  free(buf);
}
END_TEST

/* A copy shifted by one word (a transfer at the wrong offset) must fail. */
START_TEST(pattern_detects_shift) {
  unsigned char a[256], b[256];
  bench_fill(a, sizeof a, 7);
  memcpy(b, a + 8, sizeof a - 8);
  memcpy(b + sizeof a - 8, a, 8);
  ck_assert_uint_eq(bench_mismatch(b, sizeof b, 7), 0);
}
END_TEST

START_TEST(gbps_and_clock) {
  ck_assert_double_eq(bench_gbps(1000000000, 1e9), 1.0);
  ck_assert_double_eq(bench_gbps((size_t)64 << 20, (double)((size_t)64 << 20) / 55.0), 55.0);
  ck_assert_double_eq(bench_gbps(100, 0), 0);
  uint64_t a = bench_now_ns(), b = bench_now_ns();
  ck_assert_uint_ge(b, a);
  ck_assert_uint_gt(a, 0);
}
END_TEST

START_TEST(seconds_clock) {
  double a = bench_now_s();
  uint64_t n = bench_now_ns();
  double b = bench_now_s();
  ck_assert(b >= a);
  ck_assert(a <= (double)n * 1e-9 + 1e-6 && (double)n * 1e-9 <= b + 1e-6);
}
END_TEST

START_TEST(held_counts) {
  const double v[5] = {0.5, 1.0, 3.0, 2.99, 4.0};
  ck_assert_int_eq(bench_held(v, 5, 3.0, true), 2);
  ck_assert_int_eq(bench_held(v, 5, 1.0, true), 4);
  ck_assert_int_eq(bench_held(v, 5, 1.0, false), 2);
  ck_assert_int_eq(bench_held(v, 0, 1.0, true), 0);
}
END_TEST

/* What f printed on stdout, into buf. */
static void capture(void (*f)(void), char *buf, size_t len) {
  fflush(stdout);
  FILE *tmp = tmpfile();
  ck_assert_ptr_nonnull(tmp);
  int saved = dup(1);
  dup2(fileno(tmp), 1);
  f();
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  rewind(tmp);
  size_t n = fread(buf, 1, len - 1, tmp);
  buf[n] = 0;
  fclose(tmp);
}

static void print_lines(void) {
  double v[5] = {3.5, 2.0, 3.1, 2.5, 4.0}, r[3] = {0.9, 1.2, 1.1};
  bench_print_median("read: clpin (GB/s)", v, 5, "GB/s");
  bench_print_ratio("read: clpin / plain", v, 5, 3.0);
  bench_print_ratio("read: clpin / plain", r, 3, 3.0);
  bench_print_ratio("read: a / b", r, 3, 0);
  /* The samples are left in their order. */
  ck_assert(v[0] == 3.5 && v[4] == 4.0 && r[0] == 0.9);
}

/* rect-bench's lines, which bench/gpu-rect.sh parses ("target >= G", "held in
 * H/N"). */
START_TEST(report_lines) {
  char out[2048];
  capture(print_lines, out, sizeof out);
  ck_assert_msg(
      strstr(out, "  read: clpin (GB/s)                                         median     3.10 "
                  "GB/s  (min 2.00, max 4.00, 5 runs)\n"),
      "%s", out);
  ck_assert_msg(
      strstr(out, "median   3.10x (min 2.00, max 4.00)  target >= 3.00x: held in 3/5 runs\n"), "%s",
      out);
  ck_assert_msg(strstr(out,
                       "median   1.10x (min 0.90, max 1.20)  target >= 3.00x: held in 0/3 runs  "
                       "[MISSED]\n"),
                "%s", out);
  ck_assert_msg(
      strstr(out, "  read: a / b                                                median   1.10x "
                  "(min 0.90, max 1.20)  >= 1 in 2/3 runs\n"),
      "%s", out);
}
END_TEST

START_TEST(summary_of_keeps_order) {
  const double v[5] = {5, 1, 9, 3, 7};
  bench_summary s = bench_summary_of(v, 5);
  ck_assert_double_eq(s.median, 5);
  ck_assert_double_eq(s.min, 1);
  ck_assert_double_eq(s.max, 9);
  ck_assert(v[0] == 5 && v[1] == 1 && v[4] == 7);
  ck_assert_uint_eq(bench_summary_of(v, 0).n, 0);
}
END_TEST

static void print_run_lines(void) {
  double v[5] = {3.5, 2.0, 3.1, 2.5, 4.0}, r[3] = {0.55, 0.7, 0.58};
  bench_print_range("2x ctxs H2D pool, aggregate", v, 5, "GB/s");
  bench_print_target("2x ctxs H2D pool / CUDA pinned", v, 5, 0.95, true);
  bench_print_target("at once / one by one", r, 3, 0.6, false);
  bench_print_target("ratio", v, 5, 3.2, true);
  bench_print_raw("2x ctxs H2D pool, aggregate", 0, v, 5);
  bench_print_raw("x / y", 0.95, r, 3);
  ck_assert(v[0] == 3.5 && r[0] == 0.55);
}

/* multigpu-bench's lines, byte for byte as it printed them before it used
 * these (bench/gpu-multi.sh greps "  TARGET" and "MISSED" and pools the
 * RAW lines), and engine-bench's. */
START_TEST(run_lines) {
  char out[4096];
  capture(print_run_lines, out, sizeof out);
  static const char *const want[] = {
      "  2x ctxs H2D pool, aggregate                                       3.10 GB/s  "
      "[2.00 .. 4.00]\n",
      "  TARGET 2x ctxs H2D pool / CUDA pinned                            3.100       "
      "[2.000 .. 4.000]  >= 0.95  held 5/5  met\n",
      "  TARGET at once / one by one                                      0.580       "
      "[0.550 .. 0.700]  <= 0.6  held 2/3  met\n",
      "  TARGET ratio                                                     3.100       "
      "[2.000 .. 4.000]  >= 3.2  held 2/5  MISSED\n",
      "RAW\t2x ctxs H2D pool, aggregate\t0\t3.5000,2.0000,3.1000,2.5000,4.0000\n",
      "RAW\tx / y\t0.95\t0.5500,0.7000,0.5800\n",
  };
  const char *at = out;
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    const char *hit = strstr(at, want[i]);
    ck_assert_msg(hit == at, "line %zu: want\n%s\ngot\n%s", i, want[i], at);
    at += strlen(want[i]);
  }
  ck_assert_str_eq(at, "");
}
END_TEST

/* bench_parse_opts fills each kind of option from its value; an option not
 * given keeps its default. (A bad one exits 2: the benches' smoke runs and
 * their usage lines cover that path.) */
START_TEST(options_parse_each_kind) {
  const char *text = "default", *other = "untouched";
  bool flag = false, unset = false;
  int n = 3;
  size_t one = 0, list[4];
  unsigned counts[4];
  int nlist = 0, ncounts = 0;
  const bench_opt opts[] = {BENCH_OPT("--text", BENCH_TEXT, &text),
                            BENCH_OPT("--other", BENCH_TEXT, &other),
                            BENCH_OPT("--flag", BENCH_FLAG, &flag),
                            BENCH_OPT("--unset", BENCH_FLAG, &unset),
                            BENCH_OPT("--n", BENCH_INT, &n),
                            BENCH_OPT("--one", BENCH_SIZE, &one),
                            BENCH_OPT_LIST("--list", BENCH_SIZES, list, &nlist, 4),
                            BENCH_OPT_LIST("--counts", BENCH_COUNTS, counts, &ncounts, 4)};
  char *argv[] = {"prog", "--text", "NVIDIA", "--flag",   "--n",     "-7",  "--one",
                  "64K",  "--list", "4K,1G",  "--counts", "1,2,4,8", "--n", "12"};
  BENCH_PARSE_OPTS("prog", "[options]\n", (int)(sizeof argv / sizeof *argv), argv, opts);
  ck_assert_str_eq(text, "NVIDIA");
  ck_assert_str_eq(other, "untouched");
  ck_assert(flag && !unset);
  ck_assert_int_eq(n, 12); /* the last one given */
  ck_assert_uint_eq(one, 64 << 10);
  ck_assert_int_eq(nlist, 2);
  ck_assert_uint_eq(list[0], 4096);
  ck_assert_uint_eq(list[1], (size_t)1 << 30);
  ck_assert_int_eq(ncounts, 4);
  ck_assert_uint_eq(counts[3], 8);
}
END_TEST

/* bench_alloc's memory is zeroed. */
START_TEST(alloc_zeroed) {
  unsigned char *p = bench_alloc("prog", 1 << 20);
  for (size_t i = 0; i < 1 << 20; i += 4093)
    ck_assert_uint_eq(p[i], 0);
  free(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("benchstat");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, percentile_nearest_rank);
  tcase_add_test(tc, median_odd_even);
  tcase_add_test(tc, summarize_sorts_and_summarizes);
  tcase_add_test(tc, format_sizes);
  tcase_add_test(tc, parse_size_lists);
  tcase_add_test(tc, parse_count_lists);
  tcase_add_test(tc, pattern_fill_and_check);
  tcase_add_test(tc, pattern_detects_shift);
  tcase_add_test(tc, gbps_and_clock);
  tcase_add_test(tc, seconds_clock);
  tcase_add_test(tc, held_counts);
  tcase_add_test(tc, report_lines);
  tcase_add_test(tc, summary_of_keeps_order);
  tcase_add_test(tc, run_lines);
  tcase_add_test(tc, options_parse_each_kind);
  tcase_add_test(tc, alloc_zeroed);
  suite_add_tcase(s, tc);
  return test_run_suite(s);
}
