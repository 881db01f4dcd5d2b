/* SPDX-License-Identifier: Apache-2.0 */
/* The alloc case: what a fresh 1 MiB pinned buffer costs (OpenCL create+map,
 * and cudaHostAlloc) in a process that has pinned nothing yet, after a large
 * pinned buffer came and went, and while large ones are held; allocating a
 * buffer per transfer against the pool; registering memory a program
 * already has against a new pinned buffer; and the cost of an uncontended
 * atomic, the floor of a race-safe pool hit. */
#include "harness.h"

#include "cudaref.h"

#include <stdatomic.h>
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

/* cudaHostAlloc + cudaFreeHost of n bytes: what pinning itself costs the
 * CUDA driver, without OpenCL's buffer objects. */
static bool alloc_cuda(size_t n, unsigned reps, bool kept, const char *state) {
  double *ns = calloc(reps, sizeof *ns);
  void **ptrs = calloc(reps, sizeof *ptrs);
  bool ok = ns && ptrs;
  for (unsigned i = 0; ok && i < reps; i++) {
    uint64_t t0 = bench_now_ns();
    void *p = cudaref_host_alloc(n);
    ok = p != NULL;
    if (p && !kept)
      cudaref_host_free(p);
    else
      ptrs[i] = p;
    ns[i] = (double)(bench_now_ns() - t0);
  }
  for (unsigned i = 0; ptrs && i < reps; i++)
    if (ptrs[i])
      cudaref_host_free(ptrs[i]);
  if (ok)
    alloc_record(kept ? "cuda-host-alloc-kept" : "cuda-host-alloc", state, n, ns, reps);
  else
    fprintf(stderr, "clpin-bench: cudaHostAlloc of %zu bytes failed\n", n);
  free(ns);
  free(ptrs);
  return ok;
}

/* One n-byte H2D through a pinned buffer made for it: create+map, memcpy,
 * write, unmap, release. */
static cl_int per_transfer_create(const bench_cl *b, cl_mem dev, const void *src, size_t n) {
  cl_int err;
  cl_mem m = clCreateBuffer(b->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &err);
  void *p = NULL;
  if (err == CL_SUCCESS)
    p = clEnqueueMapBuffer(b->q, m, CL_TRUE, CL_MAP_WRITE, 0, n, 0, NULL, NULL, &err);
  if (err == CL_SUCCESS) {
    memcpy(p, src, n);
    err = clEnqueueWriteBuffer(b->q, dev, CL_TRUE, 0, n, p, 0, NULL, NULL);
    cl_int un = clEnqueueUnmapMemObject(b->q, m, p, 0, NULL, NULL);
    err = err != CL_SUCCESS ? err : un;
  }
  if (err == CL_SUCCESS)
    err = clFinish(b->q);
  if (m)
    clReleaseMemObject(m);
  return err;
}

/* The same through the pool: clpin_acquire, memcpy, write, clpin_release. */
static cl_int per_transfer_pool(const bench_cl *b, cl_mem dev, const void *src, size_t n) {
  clpin_block *blk = NULL;
  cl_int err = clpin_acquire(b->pool, n, &blk);
  if (err == CL_SUCCESS) {
    memcpy(clpin_block_host(blk), src, n);
    err = clEnqueueWriteBuffer(b->q, dev, CL_TRUE, 0, n, clpin_block_host(blk), 0, NULL, NULL);
    cl_int rel = clpin_release(blk, NULL);
    err = err != CL_SUCCESS ? err : rel;
  }
  return err;
}

/* What a program that allocates a pinned buffer for each transfer pays,
 * against the pool: reps 1 MiB H2D transfers each way. */
static bool alloc_per_transfer(const bench_cl *b, size_t n, unsigned reps, const char *state) {
  cl_int err;
  cl_mem dev = clCreateBuffer(b->ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CL_TRY(err);
  unsigned char *src = malloc(n);
  double *ns = calloc(reps, sizeof *ns);
  bool ok = src && ns;
  if (src)
    bench_fill(src, n, 7);
  for (int pool = 0; ok && pool < 2; pool++) {
    for (unsigned i = 0; ok && i < reps; i++) {
      uint64_t t0 = bench_now_ns();
      err = pool ? per_transfer_pool(b, dev, src, n) : per_transfer_create(b, dev, src, n);
      ns[i] = (double)(bench_now_ns() - t0);
      ok = err == CL_SUCCESS;
    }
    if (ok)
      alloc_record(pool ? "per-transfer-pool" : "per-transfer-create", state, n, ns, reps);
    else
      fprintf(stderr, "clpin-bench: per-transfer H2D: %s\n", clpin_strerror(err));
  }
  free(ns);
  free(src);
  clReleaseMemObject(dev);
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

/* The pool's spinlock taken and given back when nobody else holds it: one
 * atomic exchange that finds it free, one release store. That is the inline
 * fast path of clpin's lock (clpin__lock in src/internal.h), written out
 * here because the lock is not clpin's API: uncontended, its out-of-line
 * slow path never runs, so these are the operations the pool performs. */
static void spinlock_pair(atomic_int *held) {
  while (atomic_exchange_explicit(held, 1, memory_order_acquire))
    ; /* never taken: this thread is the only one */
  atomic_store_explicit(held, 0, memory_order_release);
}

/* The floor of any race-safe pool hit: an uncontended atomic read-modify-
 * write (the claim that makes one of two racing releases lose). A spinlock
 * as the pool's, and a compare-and-swap, each taken and given back; timed
 * the same way as the hit: batches of 1000, median per operation. */
static void alloc_atomics(unsigned batches) {
  static atomic_int held, word;
  double *ns = calloc(batches, sizeof *ns);
  if (!ns)
    return;
  for (int cas = 0; cas < 2; cas++) {
    for (unsigned i = 0; i < batches; i++) {
      uint64_t t0 = bench_now_ns();
      for (unsigned k = 0; k < 1000; k++) {
        if (cas) {
          int expected = 0;
          atomic_compare_exchange_strong(&word, &expected, 1);
          atomic_store_explicit(&word, 0, memory_order_release);
        } else {
          spinlock_pair(&held);
        }
      }
      ns[i] = (double)(bench_now_ns() - t0) / 1000;
    }
    alloc_record(cas ? "cas-pair" : "spinlock-pair", "", 0, ns, batches);
  }
  free(ns);
}

bool bench_run_alloc(const bench_opts *o, const bench_cl *b, bool cuda) {
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
  void *held = NULL, *held_cuda = NULL;
  bool ok = true;
  for (int st = 0; ok && st < 3 && big >= 2 * n; st++) {
    if (st == 1) {
      double ignored;
      ok = bench_create_map(b, big, 1, 1, false, &ignored);
      if (cuda)
        cudaref_host_free(cudaref_host_alloc(big));
    } else if (st == 2) {
      held = clpin_host_alloc(b->pool, big);
      held_cuda = cuda ? cudaref_host_alloc(big) : NULL;
      ok = held && (!cuda || held_cuda);
    }
    ok = ok && alloc_create_map(b, n, reps, false, states[st]) &&
         alloc_create_map(b, n, reps, true, states[st]);
    if (ok && cuda)
      ok = alloc_cuda(n, reps, false, states[st]) && alloc_cuda(n, reps, true, states[st]);
    ok = ok && alloc_per_transfer(b, n, reps, states[st]);
  }
  clpin_host_free(held);
  if (held_cuda)
    cudaref_host_free(held_cuda);
  for (size_t r = 64 * MiB; ok && r <= 256 * MiB && r <= big; r *= 4)
    ok = alloc_register(b, r, reps);
  if (!ok)
    return false;
  alloc_atomics(o->pool_batches);
  fflush(stdout);
  return true;
}
