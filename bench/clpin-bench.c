/* SPDX-License-Identifier: Apache-2.0 */
/* clpin-bench: every transfer path of clpin against its baseline, measured in
 * the same process run; the numbers in docs/BENCHMARKS.md come from here.
 *
 * Cases (--case, comma-separated; default transfer,pool,threads):
 *   transfer  H2D/D2H at --sizes through every path (table below)
 *   sweep     the same paths from 4 KiB to 1 GiB in powers of two
 *   pool      one thread: pool hit (acquire+release) against create+map+
 *             unmap+release of a fresh CL_MEM_ALLOC_HOST_PTR buffer
 *   threads   acquire/release of mixed sizes from --threads threads at once,
 *             against the same loop on one thread
 *   memcpy    host memcpy from malloc into pool memory split over
 *             1 to 16 threads: the ceiling of the staging pipeline
 *   tune      clpin-pin over chunk sizes x copy threads, to choose the
 *             CLPIN_CHUNK and CLPIN_THREADS defaults
 *   alloc     what a fresh 1 MiB pinned buffer costs (OpenCL create+map, and
 *             cudaHostAlloc), before and after a large pinned buffer came and
 *             went; allocating per transfer against the pool; and the cost of
 *             an uncontended atomic, the floor of a race-safe pool hit. Runs
 *             first, so "fresh" means a process that has pinned nothing yet
 *   unified   host-unified devices: tensors and CLPIN_ZERO_COPY against the
 *             hand-written OpenCL of each (bench/unified.c); not in "all"
 *
 * Paths:
 *   pageable       clEnqueueWrite/ReadBuffer from/to malloc memory
 *   cl-pinned      the same from/to a mapped CL_MEM_ALLOC_HOST_PTR buffer
 *   clpin-host     clpin_write/clpin_read on clpin_host_alloc memory
 *   clpin-pin      clpin_write/clpin_read with CLPIN_PIN_MEMORY on malloc memory
 *   clpin-plain    clpin_write/clpin_read without flags on malloc memory
 *   cuda-pinned    cudaMemcpy from/to cudaHostAlloc memory (when CUDA loads)
 *   cuda-pageable  cudaMemcpy from/to malloc memory (when CUDA loads)
 *
 * Each point: warm-ups, then --reps timed repetitions, each one a blocking
 * transfer followed by clFinish (cudaDeviceSynchronize), so every path is
 * timed to completion; the median is reported. Every point checks its data
 * (a fresh pattern per point) and the run exits non-zero on a mismatch.
 * Exit status: 0 ok, 1 error, 2 usage, 3 data mismatch, 4 a clpin path did
 * not take the route expected of it (--strict).
 *
 * Files: this one runs the cases in order; harness.c holds the records, the
 * device and the CSV/JSON output, cli.c the options, benchcl.c how the
 * device is opened, benchstat.c the statistics, cudaref.c the CUDA baseline; one file per case family:
 * transfer.c (transfer, sweep), pool.c, alloc.c, threads.c, tune.c (memcpy,
 * tune), targets.c (the targets table). Only <clpin.h>: the bench links the
 * shared library, as programs do.
 */
#include "harness.h"

#include "cudaref.h"

#include <stdio.h>
#include <string.h>

/* Keep the sizes that fit the device and --max-size. */
static int clip_sizes(size_t *sizes, int n, size_t max) {
  int k = 0;
  for (int i = 0; i < n; i++)
    if (sizes[i] <= max)
      sizes[k++] = sizes[i];
  return k;
}

/* The sizes the cases will use, clipped to the device, and the capacity the
 * transfer buffers need for them (0: no case transfers). */
typedef struct {
  size_t sweep[64];
  int nsweep;
  size_t cap;
} size_plan;

static void plan_sizes(bench_opts *o, const bench_cl *b, size_plan *plan) {
  memset(plan, 0, sizeof *plan);
  size_t max = o->max_size < b->max_alloc ? o->max_size : b->max_alloc;
  o->nsizes = clip_sizes(o->sizes, o->nsizes, max);
  o->ntune_sizes = clip_sizes(o->tune_sizes, o->ntune_sizes, max);
  for (size_t n = o->sweep_min; n <= o->sweep_max && n <= max && plan->nsweep < 64;
       n *= o->sweep_step)
    plan->sweep[plan->nsweep++] = n;
  size_t cap = 0;
  for (int i = 0; i < o->nsizes; i++)
    cap = o->sizes[i] > cap ? o->sizes[i] : cap;
  for (int i = 0; (o->cases & CASE_SWEEP) && i < plan->nsweep; i++)
    cap = plan->sweep[i] > cap ? plan->sweep[i] : cap;
  for (int i = 0; (o->cases & (CASE_TUNE | CASE_MEMCPY)) && i < o->ntune_sizes; i++)
    cap = o->tune_sizes[i] > cap ? o->tune_sizes[i] : cap;
  plan->cap = cap;
}

/* CLPIN_PINNED_H2D as a user writes it. */
static const char *pinned_h2d_text(size_t v) {
  return v == CLPIN_PINNED_AUTO ? "auto" : v ? "1" : "0";
}

/* What was measured, on what, with which settings. */
static void print_header(const bench_opts *o, const bench_cl *b, bool cuda, const char *why) {
  printf("clpin-bench %s\n  platform  %s\n  device    %s (driver %s, %s)\n"
         "  host-unified memory %s; max alloc %zu MiB\n  cpu       %s\n"
         "  CUDA baseline: %s%s%s%s\n  clpin options: CLPIN_CHUNK=%zu CLPIN_THREADS=%zu "
         "CLPIN_PINNED_H2D=%s\n"
         "  method: %u warm-ups, median of %u timed blocking transfers (each to completion)\n",
         clpin_version_string(), b->platform_name, b->device_name, b->driver, b->device_version,
         b->unified ? "yes" : "no", b->max_alloc >> 20, b->cpu,
         cuda         ? cudaref_device_name()
         : o->no_cuda ? "off (--no-cuda)"
         : b->unified ? "none (not needed: this device shares memory with the host)"
                      : "none here, the pinned baseline is OpenCL's cl-pinned: ",
         cuda ? " (" : (b->unified ? "" : why), cuda ? cudaref_library() : "", cuda ? ")" : "",
         clpin_get_option(CLPIN_OPT_CHUNK), clpin_get_option(CLPIN_OPT_THREADS),
         pinned_h2d_text(clpin_get_option(CLPIN_OPT_PINNED)), o->warmup, o->reps);
  fflush(stdout);
}

/* Every case asked for, in order (alloc first: "fresh" means a process that
 * has pinned nothing yet); false at the first that fails. */
static bool run_cases(const bench_opts *o, bench_cl *b, const size_plan *plan, bool cuda,
                      buffers *bf) {
  bool ok = true;
  if (o->cases & CASE_ALLOC)
    ok = bench_run_alloc(o, b);
  if (plan->cap && (o->cases & (CASE_TRANSFER | CASE_SWEEP | CASE_TUNE | CASE_MEMCPY)))
    ok = bench_alloc_buffers(b, plan->cap, cuda, bf);
  bf->paths = o->paths;
  if (ok && bf->cap)
    ok = bench_settle(b, bf);
  if (ok && (o->cases & CASE_TRANSFER))
    ok = bench_run_transfers(o, b, bf, "transfer", o->sizes, o->nsizes);
  if (ok && (o->cases & CASE_SWEEP))
    ok = bench_run_transfers(o, b, bf, "sweep", plan->sweep, plan->nsweep);
  if (ok && (o->cases & CASE_POOL))
    ok = bench_run_pool(o, b);
  if (ok && (o->cases & CASE_THREADS))
    ok = bench_run_threads(o, b);
  if (ok && (o->cases & CASE_UNIFIED))
    ok = bench_run_unified(o, b);
  if (ok && (o->cases & CASE_MEMCPY))
    ok = bench_run_memcpy(o, bf);
  if (ok && (o->cases & CASE_TUNE)) {
    /* clpin_shutdown() between settings frees pool memory: give it back first. */
    clpin_host_free(bf->clpin_host);
    bf->clpin_host = NULL;
    ok = bench_run_tune(o, b, bf);
  }
  return ok;
}

int main(int argc, char **argv) {
  bench_opts o;
  int rc = bench_parse_args(argc, argv, &o);
  if (rc)
    return rc;
  if (o.list) {
    bench_cl_list();
    return 0;
  }
  bench_cl b;
  memset(&b, 0, sizeof b);
  if (!bench_open_cl(&o, &b))
    return 1;
  size_plan plan;
  plan_sizes(&o, &b, &plan);

  char why[256] = "not used by these cases";
  bool cuda = !o.no_cuda && (o.cases & (CASE_TRANSFER | CASE_SWEEP | CASE_ALLOC)) &&
              cudaref_open(o.cuda_device, why, sizeof why);
  print_header(&o, &b, cuda, why);

  buffers bf;
  memset(&bf, 0, sizeof bf);
  bool ok = run_cases(&o, &b, &plan, cuda, &bf);
  bench_print_targets();
  if (o.csv && !bench_write_csv(o.csv))
    ok = false;
  if (o.json && !bench_write_json(o.json, &o, &b))
    ok = false;

  bench_free_buffers(&b, &bf);
  clpin_shutdown();
  bench_close_cl(&b);
  bench_free_records();
  if (!ok)
    bench_fail_status(1);
  int status = bench_exit_status();
  if (status)
    fprintf(stderr, "clpin-bench: exit status %d (%s)\n", status,
            status == 3   ? "data mismatch"
            : status == 4 ? "unexpected clpin route"
                          : "error");
  return status;
}
