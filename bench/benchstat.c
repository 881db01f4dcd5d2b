/* SPDX-License-Identifier: Apache-2.0 */
/* How every bench times and reports (benchstat.h). */
#include "benchstat.h"
#include "size.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double bench_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_percentile(const double *sorted, size_t n, double p) {
  if (n == 0)
    return 0;
  /* Nearest rank: the smallest value with at least p% of samples <= it. */
  double rank = ceil(p / 100.0 * (double)n);
  size_t i = rank < 1 ? 0 : (size_t)rank - 1;
  return sorted[i < n ? i : n - 1];
}

double bench_median(const double *sorted, size_t n) {
  if (n == 0)
    return 0;
  return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

bench_summary bench_summarize(double *samples, size_t n) {
  bench_summary s = {0};
  if (n == 0)
    return s;
  qsort(samples, n, sizeof *samples, cmp_double);
  double sum = 0;
  for (size_t i = 0; i < n; i++)
    sum += samples[i];
  s.n = n;
  s.median = bench_median(samples, n);
  s.p10 = bench_percentile(samples, n, 10);
  s.p90 = bench_percentile(samples, n, 90);
  s.p99 = bench_percentile(samples, n, 99);
  s.min = samples[0];
  s.max = samples[n - 1];
  s.mean = sum / (double)n;
  return s;
}

const char *bench_fmt_size(size_t bytes, char *buf, size_t len) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = (double)bytes;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (v == floor(v))
    snprintf(buf, len, "%.0f %s", v, units[u]);
  else
    snprintf(buf, len, "%.1f %s", v, units[u]);
  return buf;
}

/* The syntax of clpin's size options (clpin.h, "Options"): the library's own
 * parser, src/size.c, compiled in (the library exports none). */
bool bench_parse_size(const char *text, size_t *out) { return clpin__parse_size(text, out); }

/* Split text at commas and hand each item to parse(item, out + i). */
static int parse_list(const char *text, void *out, size_t elem, int max,
                      bool (*parse)(const char *, void *)) {
  if (!text || !*text)
    return -1;
  int n = 0;
  const char *p = text;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char item[64];
    if (len == 0 || len >= sizeof item || n >= max)
      return -1;
    memcpy(item, p, len);
    item[len] = '\0';
    if (!parse(item, (char *)out + (size_t)n * elem))
      return -1;
    n++;
    if (!comma)
      return n;
    p = comma + 1;
  }
}

static bool parse_size_item(const char *item, void *out) {
  size_t v;
  if (!bench_parse_size(item, &v) || v == 0)
    return false;
  *(size_t *)out = v;
  return true;
}

static bool parse_count_item(const char *item, void *out) {
  char *end;
  unsigned long v = strtoul(item, &end, 10);
  if (end == item || *end != '\0' || item[0] == '-' || v == 0 || v > 4096)
    return false;
  *(unsigned *)out = (unsigned)v;
  return true;
}

int bench_parse_sizes(const char *text, size_t *out, int max) {
  return parse_list(text, out, sizeof *out, max, parse_size_item);
}

int bench_parse_counts(const char *text, unsigned *out, int max) {
  return parse_list(text, out, sizeof *out, max, parse_count_item);
}

/* splitmix64: every 8-byte word of the pattern is a function of (seed, its
 * index), so a shifted or stale copy never matches by accident. */
static uint64_t pattern_word(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15u + i + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

static unsigned char pattern_byte(uint64_t seed, size_t j) {
  return (unsigned char)(pattern_word(seed, j / 8) >> (8 * (j % 8)));
}

void bench_fill(void *p, size_t n, uint64_t seed) {
  unsigned char *b = p;
  size_t words = n / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = pattern_word(seed, i);
    unsigned char bytes[8];
    for (int k = 0; k < 8; k++)
      bytes[k] = (unsigned char)(w >> (8 * k));
    memcpy(b + 8 * i, bytes, 8);
  }
  for (size_t j = words * 8; j < n; j++)
    b[j] = pattern_byte(seed, j);
}

size_t bench_mismatch(const void *p, size_t n, uint64_t seed) {
  const unsigned char *b = p;
  size_t words = n / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = pattern_word(seed, i);
    unsigned char want[8];
    for (int k = 0; k < 8; k++)
      want[k] = (unsigned char)(w >> (8 * k));
    if (memcmp(b + 8 * i, want, 8) != 0)
      for (size_t k = 0; k < 8; k++)
        if (b[8 * i + k] != want[k])
          return 8 * i + k;
  }
  for (size_t j = words * 8; j < n; j++)
    if (b[j] != pattern_byte(seed, j))
      return j;
  return SIZE_MAX;
}

double bench_gbps(size_t bytes, double ns) { return ns > 0 ? (double)bytes / ns : 0; }

void *bench_alloc(const char *prog, size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "%s: out of memory (%zu bytes)\n", prog, n);
    exit(1);
  }
  memset(p, 0, n);
  return p;
}

static _Noreturn void bad_opt(const char *prog, const char *usage, const char *arg,
                              const char *why) {
  fprintf(stderr, "%s: %s: %s\nusage: %s %s", prog, arg, why, prog, usage);
  exit(2);
}

void bench_parse_opts(const char *prog, const char *usage, int argc, char **argv,
                      const bench_opt *opts, int n) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      printf("usage: %s %s", prog, usage);
      exit(0);
    }
    const bench_opt *o = opts;
    while (o < opts + n && strcmp(o->name, a))
      o++;
    if (o == opts + n)
      bad_opt(prog, usage, a, "not an option of this program");
    if (o->kind == BENCH_FLAG) {
      *(bool *)o->to = true;
      continue;
    }
    if (++i == argc)
      bad_opt(prog, usage, a, "needs a value");
    const char *v = argv[i];
    char *end;
    long num;
    switch (o->kind) {
    case BENCH_TEXT: *(const char **)o->to = v; break;
    case BENCH_INT:
      num = strtol(v, &end, 10);
      if (!*v || *end || num < INT_MIN || num > INT_MAX)
        bad_opt(prog, usage, a, "takes a whole number");
      *(int *)o->to = (int)num;
      break;
    case BENCH_SIZE:
      if (!bench_parse_size(v, o->to))
        bad_opt(prog, usage, a, "takes a size (4096, 64K, 1G)");
      break;
    case BENCH_SIZES:
      if ((*o->count = bench_parse_sizes(v, o->to, o->max)) < 1)
        bad_opt(prog, usage, a, "takes a list of sizes (64M,1G)");
      break;
    default:
      if ((*o->count = bench_parse_counts(v, o->to, o->max)) < 1)
        bad_opt(prog, usage, a, "takes a list of whole numbers (1,2,4)");
    }
  }
}

int bench_held(const double *v, int n, double goal, bool ge) {
  int held = 0;
  for (int i = 0; i < n; i++)
    held += ge ? v[i] >= goal : v[i] <= goal;
  return held;
}

bench_summary bench_summary_of(const double *v, int n) {
  double *s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
  if (!s) {
    fprintf(stderr, "bench: out of memory\n");
    exit(1);
  }
  memcpy(s, v, (size_t)(n > 0 ? n : 0) * sizeof *s);
  bench_summary b = bench_summarize(s, n > 0 ? (size_t)n : 0);
  free(s);
  return b;
}

void bench_print_median(const char *what, const double *v, int n, const char *unit) {
  bench_summary b = bench_summary_of(v, n);
  printf("  %-58s median %8.2f %s  (min %.2f, max %.2f, %d runs)\n", what, b.median, unit, b.min,
         b.max, n);
}

void bench_print_ratio(const char *what, const double *v, int n, double goal) {
  bench_summary b = bench_summary_of(v, n);
  if (goal > 0)
    printf("  %-58s median %6.2fx (min %.2f, max %.2f)  target >= %.2fx: held in %d/%d runs%s\n",
           what, b.median, b.min, b.max, goal, bench_held(v, n, goal, true), n,
           b.median >= goal ? "" : "  [MISSED]");
  else
    printf("  %-58s median %6.2fx (min %.2f, max %.2f)  >= 1 in %d/%d runs\n", what, b.median,
           b.min, b.max, bench_held(v, n, 1.0, true), n);
}

void bench_print_range(const char *what, const double *v, int n, const char *unit) {
  bench_summary s = bench_summary_of(v, n);
  printf("  %-60s %9.2f %-5s [%.2f .. %.2f]\n", what, s.median, unit, s.min, s.max);
}

void bench_print_target(const char *what, const double *v, int n, double goal, bool ge) {
  bench_summary s = bench_summary_of(v, n);
  bool met = ge ? s.median >= goal : s.median <= goal;
  printf("  TARGET %-53s %9.3f       [%.3f .. %.3f]  %s %.3g  held %d/%d  %s\n", what, s.median,
         s.min, s.max, ge ? ">=" : "<=", goal, bench_held(v, n, goal, ge), n,
         met ? "met" : "MISSED");
}

void bench_print_raw(const char *what, double goal, const double *v, int n) {
  printf("RAW\t%s\t%g\t", what, goal);
  for (int i = 0; i < n; i++)
    printf("%s%.4f", i ? "," : "", v[i]);
  printf("\n");
}
