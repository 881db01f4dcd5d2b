/* SPDX-License-Identifier: Apache-2.0 */
/* dirty-dma-probe: how fast a host-to-device DMA reads pinned memory that
 * CPU threads have just written, against the same memory read clean.
 *
 * A staged write (clpin_write of pageable memory) copies each chunk into a
 * pinned block on the copy threads, then DMAs the block to the device. This
 * probe takes the two steps apart, one after the other: the threads fill
 * NB blocks of 8 MiB (shares of 512 KiB, as staging splits a chunk), then
 * the device reads them, and only the DMA is timed. Fills:
 *
 *   clean     none: the blocks were written long ago (the pool path)
 *   memcpy    memcpy, as staging copies today
 *   cldemote  memcpy, then CLDEMOTE on every line (x86; a no-op where the
 *             CPU lacks it): the lines move from the core's caches to the
 *             shared cache
 *   clwb      memcpy, then CLWB on every line (x86): written back, kept
 *   stream    non-temporal stores (AVX2, clpin's src/streamcopy.c): the
 *             lines go to memory
 *
 * Each fill's time is printed too (it includes starting the threads). The
 * same for CUDA (cudaHostAlloc memory, cudaMemcpy) when libcudart loads, so
 * the effect is seen to be the host's, not one driver's.
 *
 *   dirty-dma-probe [--platform NAME] [--threads N] [--runs N] [--reps N] [--no-cuda]
 *
 * --threads defaults to clpin's copy share (CLPIN_TRANSFER_THREADS, at most
 * CLPIN_THREADS), the threads one staged transfer copies with. Figures:
 * docs/BENCHMARKS.md, "One GPU's staged writes". */
#include "benchcl.h"
#include "benchstat.h"
#include "clpin.h"
#include "cudaref.h"
#include "streamcopy.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define X86 1
#endif

#define MiB ((size_t)1 << 20)
#define NB 4
#define BLK (8 * MiB)
#define PART ((size_t)512 << 10)
#define MAXT 256
#define MAXR 200
#define CHECK(expr) BENCH_CL_CHECK("dirty-dma-probe", expr, clpin_strerror)

typedef enum { CLEAN, MEMCPY, CLDEMOTE, CLWB, STREAM, FILLS } fill_kind;
static const char *fill_name[FILLS] = {"clean", "memcpy", "cldemote", "clwb", "stream"};

static struct {
  const char *platform;
  int threads, runs, reps;
  bool cuda;
} P = {.runs = 40, .reps = 3, .cuda = true};

#ifdef X86
__attribute__((target("cldemote"))) static void demote(unsigned char *p, size_t n) {
  for (size_t o = 0; o < n; o += 64)
    _cldemote(p + o);
}
__attribute__((target("clwb"))) static void write_back(unsigned char *p, size_t n) {
  for (size_t o = 0; o < n; o += 64)
    _mm_clwb(p + o);
  _mm_sfence();
}
#endif

static bool fill_runs(fill_kind k) {
  if (k == STREAM)
    return clpin__copy_supported(CLPIN__COPY_AVX2);
#ifdef X86
  return true;
#else
  return k == CLEAN || k == MEMCPY;
#endif
}

typedef struct {
  unsigned char **blk; /* NB blocks */
  const unsigned char *src;
  fill_kind kind;
  int t, nt;
} fill_job;

static void *fill(void *arg) {
  fill_job *j = arg;
  size_t per_blk = BLK / PART;
  for (size_t k = (size_t)j->t; k < NB * per_blk; k += (size_t)j->nt) {
    unsigned char *d = j->blk[k / per_blk] + k % per_blk * PART;
    const unsigned char *s = j->src + k * PART;
    if (j->kind == STREAM) { /* clpin's own streaming copy (src/streamcopy.c) */
      clpin__copy_with(CLPIN__COPY_AVX2, d, s, PART);
      clpin__copy_fence();
      continue;
    }
    memcpy(d, s, PART);
#ifdef X86
    if (j->kind == CLDEMOTE)
      demote(d, PART);
    else if (j->kind == CLWB)
      write_back(d, PART);
#endif
  }
  return NULL;
}

/* Fill the blocks as kind (nothing for CLEAN); the seconds it took. */
static double fill_blocks(unsigned char **blk, const unsigned char *src, fill_kind kind) {
  if (kind == CLEAN)
    return 0;
  double t0 = bench_now_s();
  pthread_t th[MAXT];
  fill_job j[MAXT];
  for (int t = 0; t < P.threads; t++) {
    j[t] = (fill_job){blk, src, kind, t, P.threads};
    pthread_create(&th[t], NULL, fill, &j[t]);
  }
  for (int t = 0; t < P.threads; t++)
    pthread_join(th[t], NULL);
  return bench_now_s() - t0;
}

typedef struct {
  const char *api;
  unsigned char *blk[NB];
  void *dev;
  cl_command_queue q;
  cl_mem buf;
} side;

/* The DMA of the NB blocks to the device: seconds. */
static double dma(side *s) {
  double t0 = bench_now_s();
  if (s->q) {
    for (int i = 0; i < NB; i++)
      CHECK(clEnqueueWriteBuffer(s->q, s->buf, CL_FALSE, (size_t)i * BLK, BLK, s->blk[i], 0, NULL,
                                 NULL));
    CHECK(clFinish(s->q));
  } else {
    for (int i = 0; i < NB; i++)
      if (!cudaref_copy(s->blk[i], (char *)s->dev + (size_t)i * BLK, BLK, CUDAREF_H2D))
        exit(1);
  }
  return bench_now_s() - t0;
}

static void measure(side *s, const unsigned char *src, int rep) {
  double clean_median = 0;
  for (int k = 0; k < FILLS; k++) {
    if (!fill_runs((fill_kind)k))
      continue;
    double d[MAXR], f[MAXR];
    for (int r = -1; r < P.runs; r++) {
      double tf = fill_blocks(s->blk, src, (fill_kind)k), td = dma(s);
      if (r < 0)
        continue;
      d[r] = bench_gbps(NB * BLK, td * 1e9);
      f[r] = tf > 0 ? bench_gbps(NB * BLK, tf * 1e9) : 0;
    }
    char what[96];
    snprintf(what, sizeof what, "%s DMA after fill %s (round %d)", s->api, fill_name[k], rep);
    bench_print_range(what, d, P.runs, "GB/s");
    bench_summary ds = bench_summary_of(d, P.runs);
    if (k == CLEAN) {
      clean_median = ds.median;
      continue;
    }
    snprintf(what, sizeof what, "%s fill %s, %d thread(s) (round %d)", s->api, fill_name[k],
             P.threads, rep);
    bench_print_range(what, f, P.runs, "GB/s");
    printf("  %s after %s / after clean (medians): %.3f\n", s->api, fill_name[k],
           clean_median > 0 ? ds.median / clean_median : 0);
  }
}

static void usage(void) {
  fprintf(stderr, "usage: dirty-dma-probe [--platform NAME] [--threads N] [--runs N] [--reps N] "
                  "[--no-cuda]\n");
  exit(2);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--no-cuda"))
      P.cuda = false;
    else if (!v)
      usage();
    else if (!strcmp(a, "--platform"))
      P.platform = v, i++;
    else if (!strcmp(a, "--threads"))
      P.threads = atoi(v), i++;
    else if (!strcmp(a, "--runs"))
      P.runs = atoi(v), i++;
    else if (!strcmp(a, "--reps"))
      P.reps = atoi(v), i++;
    else
      usage();
  }
  if (!P.threads) {
    size_t share = clpin_get_option(CLPIN_OPT_TRANSFER_THREADS);
    size_t budget = clpin_get_option(CLPIN_OPT_THREADS);
    P.threads = (int)(share < budget ? share : budget);
  }
  if (P.threads < 1 || P.threads > MAXT || P.runs < 1 || P.runs > MAXR || P.reps < 1)
    usage();

  cl_device_id dev;
  cl_context ctx;
  cl_command_queue q;
  bench_cl_open("dirty-dma-probe", P.platform, clpin_strerror, &dev, &ctx, &q);
  char name[256];
  printf("dirty-dma-probe: %s; %d blocks of %zu MiB filled in %zu KiB shares by %d thread(s), "
         "%d runs per figure\n",
         bench_cl_name(dev, name, sizeof name), NB, BLK / MiB, PART >> 10, P.threads, P.runs);
  unsigned char *src = malloc(NB * BLK);
  if (!src)
    return 1;
  memset(src, 3, NB * BLK);

  side s[2];
  int nsides = 1;
  memset(s, 0, sizeof s);
  s[0].api = "OpenCL";
  s[0].q = q;
  cl_int err;
  s[0].buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, NB * BLK, NULL, &err);
  CHECK(err);
  for (int i = 0; i < NB; i++) {
    cl_mem h = clCreateBuffer(ctx, CL_MEM_ALLOC_HOST_PTR, BLK, NULL, &err);
    CHECK(err);
    s[0].blk[i] = clEnqueueMapBuffer(q, h, CL_TRUE, CL_MAP_WRITE, 0, BLK, 0, NULL, NULL, &err);
    CHECK(err);
    memset(s[0].blk[i], 1, BLK);
  }
  char why[128] = "";
  if (P.cuda && cudaref_open(0, why, sizeof why)) {
    s[1].api = "CUDA";
    s[1].dev = cudaref_dev_alloc(NB * BLK);
    for (int i = 0; i < NB; i++) {
      s[1].blk[i] = cudaref_host_alloc(BLK);
      if (!s[1].blk[i])
        return 1;
      memset(s[1].blk[i], 1, BLK);
    }
    if (s[1].dev)
      nsides = 2;
    printf("CUDA: %s, %s\n", cudaref_device_name(), cudaref_library());
  } else if (P.cuda) {
    printf("CUDA: not measured (%s)\n", why);
  }
  for (int rep = 1; rep <= P.reps; rep++)
    for (int k = 0; k < nsides; k++)
      measure(&s[k], src, rep);
  free(src);
  return 0;
}
