/* Statistics, sizes and data patterns for clpin-bench. Plain C, no OpenCL,
 * so the Check suite tests/check_benchstat.c can test every figure the bench
 * reports is computed right. */
#ifndef CLPIN_BENCHSTAT_H
#define CLPIN_BENCHSTAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Monotonic clock in nanoseconds. */
uint64_t bench_now_ns(void);

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

#endif
