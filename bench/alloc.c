/* SPDX-License-Identifier: Apache-2.0 */
/* The alloc case: what a fresh 1 MiB pinned buffer costs (OpenCL
 * create+map) in a process that has pinned nothing yet, after a large pinned
 * buffer came and went, and while large ones are held; and registering
 * memory a program already has against a new pinned buffer. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* One record of n samples, printed as one line of the alloc table. */
static const record *alloc_record(const char *path, const char *state, size_t bytes, double *ns,
                                  size_t n) {
  const record *r = bench_add_record(
      (record){"alloc", path, state, bytes, 0, 1, "ns", "", bench_summarize(ns, n)});
  char sz[32];
  printf("  %-22s %-9s %-10s %12.0f %12.0f %12.0f %12.0f\n", path,
         bench_fmt_size(bytes, sz, sizeof sz), state, r->s.median, r->s.mean, r->s.p90, r->s.max);
  return r;
}

/* bench_create_map, with every sample kept for alloc_record. */
static bool alloc_create_map(const bench_cl *b, size_t n, unsigned reps, bool kept,
                             const char *state) {
  double *ns = calloc(reps, sizeof *ns), *sorted = calloc(reps, sizeof *sorted);
  bool ok = ns && sorted && bench_create_map(b, n, reps, 1, kept, ns);
  if (ok) {
    memcpy(sorted, ns, reps * sizeof *sorted);
    double median =
        alloc_record(kept ? "cl-create-map-kept" : "cl-create-map", state, n, sorted, reps)
            ->s.median;
    /* Where the slow ones fall: the driver growing its own pinned memory. */
    if (kept) {
      printf("  %-22s slower than 4x the median: ", "");
      unsigned slow = 0;
      for (unsigned i = 0; i < reps; i++)
        if (ns[i] > 4 * median)
          printf("%s#%u", slow++ ? " " : "", i);
      printf("%s\n", slow ? "" : "none");
    }
  }
  free(ns);
  free(sorted);
  return ok;
}

/* Pinning memory a program already has: clpin_host_register and
 * clpin_host_unregister of n bytes of malloc memory, against a new mapped
 * ALLOC_HOST_PTR buffer of n bytes (cl-create-map on the next line). With
 * the clpin-reg and clpin-pin transfer rates of the same size, after how
 * many transfers registering pays. */
static bool alloc_register(const bench_cl *b, size_t n, unsigned reps) {
  unsigned char *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  double *reg = calloc(reps, sizeof *reg), *unreg = calloc(reps, sizeof *unreg);
  bool ok = p && reg && unreg;
  if (p)
    memset(p, 1, n); /* the program's memory: its pages exist */
  for (unsigned i = 0; ok && i < reps; i++) {
    uint64_t t0 = bench_now_ns();
    ok = clpin_host_register(b->pool, p, n) == CL_SUCCESS;
    uint64_t t1 = bench_now_ns();
    ok = ok && clpin_host_unregister(p) == CL_SUCCESS;
    reg[i] = (double)(t1 - t0);
    unreg[i] = (double)(bench_now_ns() - t1);
  }
  if (ok) {
    alloc_record("clpin-register", "", n, reg, reps);
    alloc_record("clpin-unregister", "", n, unreg, reps);
    ok = alloc_create_map(b, n, reps, false, "");
  } else {
    fprintf(stderr, "clpin-bench: registering %zu bytes failed\n", n);
  }
  free(p);
  free(reg);
  free(unreg);
  return ok;
}

bool bench_run_alloc(const bench_opts *o, const bench_cl *b) {
  const size_t n = MiB;
  const unsigned reps = o->create_reps;
  printf(
      "\nalloc: what a fresh pinned buffer costs (ns; run alone in a fresh process for \"fresh\")\n"
      "  %-22s %-9s %-10s %12s %12s %12s %12s\n",
      "what", "size", "state", "median", "mean", "p90", "max");
  /* The very first pinned buffer of the process. */
  if (!alloc_create_map(b, n, 1, false, "first"))
    return false;
  /* States: nothing pinned yet; after one large pinned buffer came and went
   * (as a pool miss or a large staged batch would); while large pinned
   * buffers are held (as in a program that keeps its pool). */
  const char *states[] = {"fresh", "after-big", "big-held"};
  size_t big = b->max_alloc < o->max_size ? b->max_alloc : o->max_size;
  if (big > 1024 * MiB)
    big = 1024 * MiB;
  void *held = NULL;
  bool ok = true;
  for (int st = 0; ok && st < 3 && big >= 2 * n; st++) {
    if (st == 1) {
      double ignored;
      ok = bench_create_map(b, big, 1, 1, false, &ignored);
    } else if (st == 2) {
      held = clpin_host_alloc(b->pool, big);
      ok = held != NULL;
    }
    ok = ok && alloc_create_map(b, n, reps, false, states[st]) &&
         alloc_create_map(b, n, reps, true, states[st]);
  }
  clpin_host_free(held);
  for (size_t r = 64 * MiB; ok && r <= 256 * MiB && r <= big; r *= 4)
    ok = alloc_register(b, r, reps);
  fflush(stdout);
  return ok;
}
