/* SPDX-License-Identifier: Apache-2.0 */
/* How every bench times and reports: the clock, statistics, targets and
 * their held counts, the report lines, sizes and data patterns. Plain C, no
 * OpenCL, so the Check suite tests/check_benchstat.c can test that every
 * figure a bench reports is computed and printed right. Opening the device
 * is benchcl.h's. */
#ifndef CLPIN_BENCHSTAT_H
#define CLPIN_BENCHSTAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Monotonic clock in nanoseconds. */
uint64_t bench_now_ns(void);

/* The same in seconds. */
double bench_now_s(void);

/* Summary of n samples. The samples are sorted in place. n == 0 gives all
 * zeros. Percentiles use the nearest-rank method (p99 of 100 samples is the
 * 99th smallest), so every reported value is a value that was measured. */
typedef struct {
  size_t n;
  double median, p10, p90, p99, min, max, mean;
} bench_summary;
bench_summary bench_summarize(double *samples, size_t n);
/* Nearest-rank percentile of n sorted samples, p in [0, 100]; 0 for n == 0. */
double bench_percentile(const double *sorted, size_t n, double p);
/* Median of n sorted samples (mean of the middle two for even n). */
double bench_median(const double *sorted, size_t n);

/* The summary of n samples left in their order (bench_summarize of a copy). */
bench_summary bench_summary_of(const double *v, int n);

/* In how many of n values the goal held: v[i] >= goal (ge) or v[i] <= goal. */
int bench_held(const double *v, int n, double goal, bool ge);

/* The report lines of the benches that run each figure --runs times
 * (engine-bench, multigpu-bench, ...); the samples
 * are not reordered. bench/gpu-multi.sh and bench/gpu-ab.sh parse them.
 * A figure's median and range:
 *   "  WHAT  M UNIT [MIN .. MAX]"
 * A target, with in how many runs it held and whether the median met it
 * (ge: v >= goal, else v <= goal):
 *   "  TARGET WHAT  M       [MIN .. MAX]  >= G  held H/N  met|MISSED"
 * Every sample on one tab-separated line, for scripts that pool the runs
 * of several processes (goal 0: a rate, not a target):
 *   "RAW<tab>WHAT<tab>GOAL<tab>V1,V2,..." */
void bench_print_range(const char *what, const double *v, int n, const char *unit);
void bench_print_target(const char *what, const double *v, int n, double goal, bool ge);
void bench_print_raw(const char *what, double goal, const double *v, int n);
/* One line on stdout for n samples (not reordered), as rect-bench prints
 * them:
 *   "  WHAT  median M UNIT  (min A, max B, N runs)" */
void bench_print_median(const char *what, const double *v, int n, const char *unit);
/* A ratio's line: with goal > 0
 *   "  WHAT  median Rx (min A, max B)  target >= Gx: held in H/N runs"
 * and "  [MISSED]" when the median is below goal; with goal 0 no target,
 * "  >= 1 in H/N runs" (the runs where it was at least 1). */
void bench_print_ratio(const char *what, const double *v, int n, double goal);

/* "4 KiB", "1.5 MiB", "1 GiB": size in binary units into buf (>= 16 bytes). */
const char *bench_fmt_size(size_t bytes, char *buf, size_t len);

/* Parse one size as clpin's options take it ("4096", "64K", "1GiB": K/M/G/T
 * binary suffixes, optional "i" and "B", spaces around); false on anything
 * else or on overflow. Zero is a valid size here. */
bool bench_parse_size(const char *text, size_t *out);
/* Parse a comma-separated list of sizes ("4K,64M,1G", K/M/G binary
 * suffixes) into out[0..max); returns how many, or -1 on a malformed item. */
int bench_parse_sizes(const char *text, size_t *out, int max);
/* The same for plain unsigned counts ("1,2,4,8"). */
int bench_parse_counts(const char *text, unsigned *out, int max);

/* Fill n bytes with a pattern determined by seed (any alignment, any n), and
 * find the first byte that differs from it: SIZE_MAX when all match. Fast
 * enough for gigabytes (64-bit words). */
void bench_fill(void *p, size_t n, uint64_t seed);
size_t bench_mismatch(const void *p, size_t n, uint64_t seed);

/* Bytes per second in GB/s (1 GB = 1e9 bytes) for bytes moved in ns. */
double bench_gbps(size_t bytes, double ns);

/* n bytes from malloc, zeroed (the pages faulted in: a first touch is not
 * a transfer); out of memory ends the program with "PROG: out of memory (N
 * bytes)" and exit 1. */
void *bench_alloc(const char *prog, size_t n);

/* One option of a bench's command line: "--runs" and where its value goes,
 * a bool set by a flag, a const char * (text), an int (a decimal number), a
 * size_t (one size as bench_parse_size takes it), or a list of sizes
 * (size_t) or counts (unsigned) into to[0..max), *count set to how many. */
typedef enum {
  BENCH_FLAG,
  BENCH_TEXT,
  BENCH_INT,
  BENCH_SIZE,
  BENCH_SIZES,
  BENCH_COUNTS
} bench_opt_kind;
typedef struct {
  const char *name;
  bench_opt_kind kind;
  void *to;
  int *count, max; /* lists only */
} bench_opt;
#define BENCH_OPT(name_, kind_, to_)                                                               \
  { .name = (name_), .kind = (kind_), .to = (to_) }
#define BENCH_OPT_LIST(name_, kind_, to_, count_, max_)                                            \
  { .name = (name_), .kind = (kind_), .to = (to_), .count = (count_), .max = (max_) }
/* Parse argv[1..argc) against the n options. --help or -h prints "usage:
 * PROG USAGE" (USAGE ends with a newline) on stdout and exits 0; an option
 * not in the table, a missing or malformed value prints "PROG: ARG: WHY"
 * and the usage on stderr and exits 2. Ranges are the bench's to check. */
void bench_parse_opts(const char *prog, const char *usage, int argc, char **argv,
                      const bench_opt *opts, int n);
#define BENCH_PARSE_OPTS(prog, usage, argc, argv, opts)                                            \
  bench_parse_opts(prog, usage, argc, argv, opts, (int)(sizeof opts / sizeof *opts))

#endif
