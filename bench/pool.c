/* SPDX-License-Identifier: Apache-2.0 */
/* The pool case: a pool hit (clpin_acquire + clpin_release, one thread)
 * against what it saves, a fresh CL_MEM_ALLOC_HOST_PTR buffer. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* Time n-byte CL_MEM_ALLOC_HOST_PTR buffers from clCreateBuffer to unmapped
 * (and released, unless kept: then released after the loop, untimed). Each
 * of the reps samples is the mean of `batch` buffers made back to back, as
 * the hit is timed: NVIDIA's driver hands out new pinned memory in pairs of
 * 1 MiB buffers (one slow, one fast), and a median of single buffers would
 * report only the fast half. */
bool bench_create_map(const bench_cl *b, size_t n, unsigned reps, unsigned batch, bool kept,
                      double *ns) {
  cl_mem *mems = calloc((size_t)reps * batch, sizeof *mems);
  cl_int err = mems ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
  for (unsigned i = 0; err == CL_SUCCESS && i < reps; i++) {
    uint64_t t0 = bench_now_ns();
    for (unsigned k = 0; err == CL_SUCCESS && k < batch; k++) {
      cl_mem m = clCreateBuffer(b->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &err);
      void *p = NULL;
      if (err == CL_SUCCESS)
        p = clEnqueueMapBuffer(b->q, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, n, 0, NULL, NULL,
                               &err);
      if (err == CL_SUCCESS)
        err = clEnqueueUnmapMemObject(b->q, m, p, 0, NULL, NULL);
      if (err == CL_SUCCESS)
        err = clFinish(b->q);
      if (m && !kept)
        clReleaseMemObject(m);
      else
        mems[(size_t)i * batch + k] = m;
    }
    ns[i] = (double)(bench_now_ns() - t0) / batch;
  }
  for (size_t i = 0; mems && i < (size_t)reps * batch; i++)
    if (mems[i])
      clReleaseMemObject(mems[i]);
  free(mems);
  if (err != CL_SUCCESS)
    fprintf(stderr, "clpin-bench: create+map %zu bytes: %s\n", n, clpin_strerror(err));
  return err == CL_SUCCESS;
}

/* The hit: batches of pool_batch_ops acquire+release pairs of 1 MiB, the
 * median over the batches of the time per pair. */
static bool pool_hit(const bench_opts *o, const bench_cl *b) {
  const size_t n = MiB;
  clpin_block *blk;
  /* The first acquire is the miss that fills the bucket. */
  CL_TRY(clpin_acquire(b->pool, n, &blk));
  CL_TRY(clpin_release(blk, NULL));
  clpin_stats before = bench_pool_stats(b);
  double *ns = calloc(o->pool_batches, sizeof *ns);
  if (!ns)
    return false;
  for (unsigned i = 0; i < o->pool_batches; i++) {
    uint64_t t0 = bench_now_ns();
    for (unsigned k = 0; k < o->pool_batch_ops; k++) {
      cl_int err = clpin_acquire(b->pool, n, &blk);
      if (err == CL_SUCCESS)
        err = clpin_release(blk, NULL);
      if (err != CL_SUCCESS) {
        fprintf(stderr, "clpin-bench: acquire/release: %s\n", clpin_strerror(err));
        free(ns);
        return false;
      }
    }
    ns[i] = (double)(bench_now_ns() - t0) / o->pool_batch_ops;
  }
  clpin_stats after = bench_pool_stats(b);
  record hit = {"pool", "clpin-hit", "", n, 0, 1, "ns", "", bench_summarize(ns, o->pool_batches)};
  free(ns);
  uint64_t misses = after.misses - before.misses;
  if (misses) {
    fprintf(stderr, "clpin-bench: %llu pool misses in the hit loop\n", (unsigned long long)misses);
    if (o->strict)
      bench_fail_status(4);
  }
  hit.route = misses ? "misses" : "hits";
  bench_add_record(hit);
  printf("\npool, one thread (median ns per operation)\n"
         "  clpin_acquire+clpin_release, 1 MiB, hit                   %12.1f ns  (p10 %.1f, p90 "
         "%.1f)\n",
         hit.s.median, hit.s.p10, hit.s.p90);
  return true;
}

/* One line of create+map figures: n bytes, kept (new memory) or not. */
static bool pool_create_map(const bench_cl *b, size_t n, unsigned reps, unsigned batch, bool kept) {
  record r = {"pool", kept ? "cl-create-map-kept" : "cl-create-map", "", n, 0, 1, "ns", "", {0}};
  double *samples = calloc(reps, sizeof *samples);
  bool made = samples && bench_create_map(b, n, reps, batch, kept, samples);
  if (made)
    r.s = bench_summarize(samples, reps);
  free(samples);
  if (!made)
    return false;
  bench_add_record(r);
  char sz[32], label[64];
  snprintf(label, sizeof label, "%s, %s", bench_fmt_size(n, sz, sizeof sz),
           kept ? "new memory" : "freed+made again");
  printf("  clCreateBuffer+map+unmap+release, %-22s %10.0f ns  (p10 %.0f, p90 %.0f)\n", label,
         r.s.median, r.s.p10, r.s.p90);
  return true;
}

bool bench_run_pool(const bench_opts *o, const bench_cl *b) {
  if (!pool_hit(o, b))
    return false;
  /* What a pool hit saves: a fresh pinned buffer. "new memory" keeps every
   * buffer until the end, so each one is pinned memory the driver did not
   * have (what a growing pool, or a program without one, pays); "freed and
   * made again" frees each before the next, and once the driver holds
   * pinned memory of its own it hands the freed buffer straight back (its
   * own one-slot cache: the case alloc shows it). */
  const size_t sizes[] = {MiB, 16 * MiB, 256 * MiB};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    if (sizes[i] > b->max_alloc || sizes[i] > o->max_size)
      continue;
    unsigned reps = sizes[i] <= MiB ? o->create_reps : sizes[i] <= 16 * MiB ? 11 : 5;
    unsigned batch = sizes[i] <= MiB ? 4 : 1;
    for (int kept = 1; kept >= 0; kept--)
      if (!pool_create_map(b, sizes[i], reps, batch, kept))
        return false;
  }
  fflush(stdout);
  return true;
}
