/* SPDX-License-Identifier: Apache-2.0 */
/* The pipeline's two settings, CLPIN_CHUNK and CLPIN_THREADS: the memcpy
 * case measures the host-copy ceiling of staging (malloc into pool memory,
 * split over threads as staging splits it), the tune case clpin-pin over
 * every chunk size x copy-thread count. */
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Streaming (non-temporal) stores: the copy does not read the destination's
 * lines into the cache first, which saves a third of the memory traffic of
 * a large copy. glibc's memcpy streams only above a size threshold of
 * several MiB per call, which the parts of a staging chunk are below. */
static void copy_nt(unsigned char *dst, const unsigned char *src, size_t n) {
#if defined(__SSE2__)
  size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
  head = head < n ? head : n;
  memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)src);
    __m128i b2 = _mm_loadu_si128((const __m128i *)(src + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
    _mm_stream_si128((__m128i *)dst, a);
    _mm_stream_si128((__m128i *)(dst + 16), b2);
    _mm_stream_si128((__m128i *)(dst + 32), c);
    _mm_stream_si128((__m128i *)(dst + 48), d);
  }
  memcpy(dst, src, n);
  _mm_sfence();
#else
  memcpy(dst, src, n);
#endif
}

/* The ways the memcpy case copies: the whole buffer in one slice per thread;
 * or chunk by chunk as staging does (each chunk split over the threads, all
 * threads meeting at a barrier after each chunk), with memcpy or with
 * streaming stores. */
typedef enum { COPY_WHOLE, COPY_CHUNKED, COPY_CHUNKED_NT, COPY__COUNT } copy_mode;
static const char *const copy_names[COPY__COUNT] = {"memcpy", "memcpy-chunked",
                                                    "memcpy-chunked-nt"};

typedef struct {
  pthread_barrier_t *go, *done, *step;
  unsigned char *dst;
  const unsigned char *src;
  size_t n, chunk;
  unsigned rounds, index, nthreads;
  copy_mode mode;
} copy_arg;

/* This thread's share [off, off + len) of a range of n bytes. */
static void share(size_t n, unsigned index, unsigned nthreads, size_t *off, size_t *len) {
  size_t part = (n / nthreads + 4095) & ~(size_t)4095;
  *off = (size_t)index * part < n ? (size_t)index * part : n;
  *len = n - *off < part ? n - *off : part;
}

static void *copy_worker(void *p) {
  copy_arg *a = p;
  size_t off, len;
  for (unsigned r = 0; r < a->rounds; r++) {
    pthread_barrier_wait(a->go);
    if (a->mode == COPY_WHOLE) {
      share(a->n, a->index, a->nthreads, &off, &len);
      memcpy(a->dst + off, a->src + off, len);
    } else {
      for (size_t pos = 0; pos < a->n; pos += a->chunk) {
        size_t n = a->n - pos < a->chunk ? a->n - pos : a->chunk;
        share(n, a->index, a->nthreads, &off, &len);
        if (a->mode == COPY_CHUNKED_NT)
          copy_nt(a->dst + pos + off, a->src + pos + off, len);
        else
          memcpy(a->dst + pos + off, a->src + pos + off, len);
        pthread_barrier_wait(a->step);
      }
    }
    pthread_barrier_wait(a->done);
  }
  return NULL;
}

/* n bytes from src to dst over t threads (started once, released by a
 * barrier for each timed copy). */
static bool memcpy_point(const bench_opts *o, unsigned char *dst, const unsigned char *src,
                         size_t n, unsigned t, copy_mode mode, size_t chunk, record *out) {
  unsigned rounds = o->warmup + o->tune_reps;
  pthread_t tid[256];
  copy_arg args[256];
  pthread_barrier_t go, done, step;
  double *gbps = calloc(o->tune_reps, sizeof *gbps);
  if (t > 256 || !gbps || pthread_barrier_init(&go, NULL, t + 1) ||
      pthread_barrier_init(&done, NULL, t + 1) || pthread_barrier_init(&step, NULL, t)) {
    fprintf(stderr, "clpin-bench: memcpy case cannot start %u threads\n", t);
    exit(1);
  }
  for (unsigned i = 0; i < t; i++) {
    args[i] = (copy_arg){&go, &done, &step, dst, src, n, chunk, rounds, i, t, mode};
    if (pthread_create(&tid[i], NULL, copy_worker, &args[i])) {
      fprintf(stderr, "clpin-bench: memcpy case cannot start %u threads\n", t);
      exit(1);
    }
  }
  for (unsigned r = 0; r < rounds; r++) {
    uint64_t t0 = bench_now_ns();
    pthread_barrier_wait(&go);
    pthread_barrier_wait(&done);
    if (r >= o->warmup)
      gbps[r - o->warmup] = bench_gbps(n, (double)(bench_now_ns() - t0));
  }
  for (unsigned i = 0; i < t; i++)
    pthread_join(tid[i], NULL);
  pthread_barrier_destroy(&go);
  pthread_barrier_destroy(&done);
  pthread_barrier_destroy(&step);
  out->s = bench_summarize(gbps, o->tune_reps);
  free(gbps);
  /* Whatever the mode, the destination must now equal the source. */
  if (memcmp(dst, src, n) != 0) {
    fprintf(stderr, "clpin-bench: DATA MISMATCH in the %s copy\n", copy_names[mode]);
    bench_fail_status(3);
  }
  return true;
}

bool bench_run_memcpy(const bench_opts *o, const buffers *bf) {
  size_t chunk = clpin_get_option(CLPIN_OPT_CHUNK);
  char sz[32];
  printf("\nmemcpy malloc -> pool memory, GB/s (median of %u) by threads; chunked: %s chunks as "
         "staging copies them\n%-28s",
         o->tune_reps, bench_fmt_size(chunk, sz, sizeof sz), "copy");
  for (int t = 0; t < o->ntune_threads; t++)
    printf(" %6u thr", o->tune_threads[t]);
  printf("\n");
  unsigned char *dst = bf->clpin_host ? bf->clpin_host : bf->pg_dst;
  for (int s = 0; s < o->ntune_sizes; s++) {
    size_t n = o->tune_sizes[s];
    if (n > bf->cap)
      continue;
    bench_fill(bf->pg_src, n, bench_next_seed());
    for (int m = 0; m < COPY__COUNT; m++) {
      char label[64];
      snprintf(label, sizeof label, "%s %s", copy_names[m], bench_fmt_size(n, sz, sizeof sz));
      printf("%-28s", label);
      for (int t = 0; t < o->ntune_threads; t++) {
        record r = {"memcpy",           copy_names[m], "", n,  m == COPY_WHOLE ? 0 : chunk,
                    o->tune_threads[t], "GB/s",        "", {0}};
        if (!memcpy_point(o, dst, bf->pg_src, n, o->tune_threads[t], (copy_mode)m, chunk, &r))
          return false;
        bench_add_record(r);
        printf(" %10.2f", r.s.median);
        fflush(stdout);
      }
      printf("\n");
    }
  }
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
