/* SPDX-License-Identifier: Apache-2.0 */
/* The host's side of a staged transfer alone: work split over k threads
 * that start together, timed from their common start to the last one's end.
 * Staged rates are held against it (bench_memcpy_gbps: memcpy on all cores,
 * the bound of every staged figure; rect-bench's rows by the same threads). */
#ifndef CLPIN_BENCH_HOSTBOUND_H
#define CLPIN_BENCH_HOSTBOUND_H

#include <stddef.h>

#define BENCH_MAX_THREADS 1024

/* Share i of k of the work at arg. */
typedef void bench_share_fn(void *arg, int i, int k);

/* Runs prep (untimed, may be NULL) then work on k threads (at most
 * BENCH_MAX_THREADS), thread i pinned to cpus[i] when cpus is not NULL;
 * returns the seconds of work from the common start. */
double bench_parallel_s(int k, const int *cpus, bench_share_fn *prep, bench_share_fn *work,
                        void *arg);

/* GB/s of memcpy of n bytes from src to dst in page-aligned shares over k
 * threads (pinned to cpus unless NULL). With src NULL the call makes its own
 * memory, each thread writing its shares first (its pages on its node). */
double bench_memcpy_gbps(void *dst, const void *src, size_t n, int k, const int *cpus);

#endif
