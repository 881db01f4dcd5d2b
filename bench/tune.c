/* SPDX-License-Identifier: Apache-2.0 */
/* The pipeline's two settings, CLPIN_CHUNK and CLPIN_THREADS: the memcpy
 * case measures the host-copy ceiling of staging (malloc into pool memory
 * on t threads, bench_memcpy_gbps), the tune case clpin-pin over every
 * chunk size x copy-thread count. */
#include "harness.h"

#include "hostbound.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool bench_run_memcpy(const bench_opts *o, const buffers *bf) {
  printf("\nmemcpy malloc -> pool memory, GB/s (median of %u) by threads\n%-28s", o->tune_reps,
         "copy");
  for (int t = 0; t < o->ntune_threads; t++)
    printf(" %6u thr", o->tune_threads[t]);
  printf("\n");
  unsigned char *dst = bf->clpin_host ? bf->clpin_host : bf->pg_dst;
  double *gbps = calloc(o->tune_reps, sizeof *gbps);
  if (!gbps)
    return false;
  for (int s = 0; s < o->ntune_sizes; s++) {
    size_t n = o->tune_sizes[s];
    if (n > bf->cap)
      continue;
    char sz[32], label[64];
    bench_fill(bf->pg_src, n, bench_next_seed());
    snprintf(label, sizeof label, "memcpy %s", bench_fmt_size(n, sz, sizeof sz));
    printf("%-28s", label);
    for (int t = 0; t < o->ntune_threads; t++) {
      for (unsigned r = 0; r < o->warmup + o->tune_reps; r++) {
        double v = bench_memcpy_gbps(dst, bf->pg_src, n, (int)o->tune_threads[t], NULL);
        if (r >= o->warmup)
          gbps[r - o->warmup] = v;
      }
      if (memcmp(dst, bf->pg_src, n) != 0) {
        fprintf(stderr, "clpin-bench: DATA MISMATCH in the memcpy case\n");
        bench_fail_status(3);
      }
      record r = {"memcpy", "memcpy", "", n, 0, o->tune_threads[t], "GB/s", "", {0}};
      r.s = bench_summarize(gbps, o->tune_reps);
      bench_add_record(r);
      printf(" %10.2f", r.s.median);
      fflush(stdout);
    }
    printf("\n");
  }
  free(gbps);
  return true;
}

/* One table of the grid: clpin-pin of n bytes in direction d at every
 * chunk x threads setting. clpin is restarted for each setting: the copy
 * threads start with the first pipelined transfer and stop at
 * clpin_shutdown(), so each thread count starts afresh. */
static bool tune_table(const bench_opts *o, bench_cl *b, buffers *bf, size_t n, direction d) {
  char sz[32];
  printf("%s %s\n%-10s", bench_dir_names[d], bench_fmt_size(n, sz, sizeof sz), "chunk");
  for (int t = 0; t < o->ntune_threads; t++)
    printf(" %6u thr", o->tune_threads[t]);
  printf("\n");
  bool ok = true;
  for (int c = 0; ok && c < o->ntune_chunks; c++) {
    printf("%-10s", bench_fmt_size(o->tune_chunks[c], sz, sizeof sz));
    for (int t = 0; ok && t < o->ntune_threads; t++) {
      clpin_shutdown();
      b->pool = NULL;
      ok = clpin_set_option(CLPIN_OPT_CHUNK, o->tune_chunks[c]) == CL_SUCCESS &&
           clpin_set_option(CLPIN_OPT_THREADS, o->tune_threads[t]) == CL_SUCCESS &&
           clpin_pool_get(b->q, &b->pool) == CL_SUCCESS;
      record r = {"tune",
                  bench_path_names[P_CLPIN_PIN],
                  bench_dir_names[d],
                  n,
                  o->tune_chunks[c],
                  o->tune_threads[t],
                  "GB/s",
                  "",
                  {0}};
      ok = ok && bench_measure(o, b, bf, P_CLPIN_PIN, d, n, o->tune_reps, &r);
      if (ok) {
        bench_add_record(r);
        printf(" %10.2f", r.s.median);
        fflush(stdout);
      }
    }
    printf("\n");
  }
  return ok;
}

/* The best setting overall: the highest geometric mean over every (size,
 * direction) point, so no one point dominates the choice. */
static void tune_best(const bench_opts *o) {
  size_t nrec;
  const record *recs = bench_records(&nrec);
  double best = 0;
  size_t best_chunk = 0;
  unsigned best_threads = 0;
  for (int c = 0; c < o->ntune_chunks; c++)
    for (int t = 0; t < o->ntune_threads; t++) {
      double logsum = 0;
      int k = 0;
      for (size_t i = 0; i < nrec; i++) {
        const record *r = &recs[i];
        if (!strcmp(r->section, "tune") && r->chunk == o->tune_chunks[c] &&
            r->threads == o->tune_threads[t] && r->s.median > 0)
          logsum += log(r->s.median), k++;
      }
      double g = k ? exp(logsum / k) : 0;
      if (g > best)
        best = g, best_chunk = o->tune_chunks[c], best_threads = o->tune_threads[t];
    }
  char sz[32];
  printf("tune: best overall chunk %s, %u threads (geometric mean %.2f GB/s)\n",
         bench_fmt_size(best_chunk, sz, sizeof sz), best_threads, best);
}

bool bench_run_tune(const bench_opts *o, bench_cl *b, buffers *bf) {
  size_t chunk0 = clpin_get_option(CLPIN_OPT_CHUNK), threads0 = clpin_get_option(CLPIN_OPT_THREADS);
  printf("\ntune: clpin-pin GB/s (median of %u) by chunk size and copy threads\n", o->tune_reps);
  bool ok = true;
  for (int s = 0; ok && s < o->ntune_sizes; s++) {
    if (o->tune_sizes[s] > bf->cap)
      continue;
    for (int d = H2D; ok && d <= D2H; d++)
      ok = tune_table(o, b, bf, o->tune_sizes[s], (direction)d);
  }
  clpin_shutdown();
  b->pool = NULL;
  clpin_set_option(CLPIN_OPT_CHUNK, chunk0);
  clpin_set_option(CLPIN_OPT_THREADS, threads0);
  if (!ok)
    return false;
  tune_best(o);
  return clpin_pool_get(b->q, &b->pool) == CL_SUCCESS;
}
