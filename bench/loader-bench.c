/* SPDX-License-Identifier: Apache-2.0 */
/* (Over 700 lines: every regime runs the loader, its two baselines and the
 * stop test over one regime table and one set of buffers and kernels.) */
/* loader-bench: clpin's loader (clpin_loader_*) against the ideal of its
 * regime, measured in the same run on the same device (docs/LOADER.md's
 * targets).
 *
 * A regime is a batch size, a device work per batch, a number of fill
 * workers and a fill. Per run it measures, in ms per batch over N batches
 * after a warm-up:
 *
 *   loader    clpin_loader with W workers: next(), the device work with the
 *             batch's upload event in its wait list, release(batch, work's
 *             event). Timed from the delivery of batch `warm` to the delivery
 *             of batch `warm + N` (steady state at both ends: the loader
 *             keeps the same number of batches ahead), divided by N.
 *   prepare   the fill alone on one thread, into a pinned pool block;
 *   H2D       clEnqueueWriteBuffer of the batch from a pinned pool block,
 *             back to back on the device;
 *   compute   the device work alone, back to back;
 *   ideal     max(prepare / W, H2D, compute); compute-bound regimes are
 *             held against compute alone.
 *   CUDA      (transfer-bound) cudaMemcpy H2D of the same size from
 *             cudaHostAlloc memory, libcudart loaded at run time
 *             (bench/cudaref.c); "no CUDA" when absent.
 *
 * The fill is "what a real loader does": every 8-byte word of the batch is a
 * counter-based xorshift64 value, word i of batch b = xorshift^r((b *
 * 0x9E3779B97F4A7C15 + i) * 0xD1B54A32D192ED03 | 1), with r (in 16ths of a
 * round: a word gets r/16 or r/16 + 1 rounds) calibrated at start so
 * one thread prepares 0.375 ms per MiB (60 ms per 160 MiB batch).
 * Transfer-bound regimes use a fill that writes one
 * word per 4 KiB page (the loader's own overhead at bus speed).
 *
 * The device work is a kernel that reads one word of the batch per work-item
 * and then spins on an LCG for a calibrated number of iterations (X ms on
 * this device, calibrated at start of each regime).
 *
 * Correctness: batches must come in index order, and the last batch of every
 * loader run is read back and compared with the fill's values (every word,
 * or every page word); a mismatch exits 1.
 *
 * Several devices (--devices N): one context and queue per device, one
 * loader over all of them (round robin); the ideal
 * divides H2D and compute by the devices, and transfer-bound regimes compare
 * the aggregate with CUDA pinned H2D on the same GPUs at once (one thread
 * per GPU, CUDA device k taken as the k-th OpenCL device).
 *
 * Lines starting "RESULT " are for ci scripts (bench/gpu-loader.sh).
 *
 *   loader-bench [--regime NAME[,NAME...]|all] [--runs R] [--device-name SUBSTR]
 *                [--devices N] [--no-cuda] [--stop] [--quick] [--list]
 */
#define _POSIX_C_SOURCE 200809L
#include <clpin.h>

#include "benchcl.h"
#include "benchstat.h"
#include "hostbound.h"
#include "cudaref.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROG "loader-bench"
#define CHECK(expr) BENCH_CL_CHECK(PROG, expr, clpin_strerror)
#define MIB ((size_t)1 << 20)
#define MAX_RUNS 64
#define MAX_DEVS 16
#define PREP_MS_PER_MIB 0.375 /* the full fill's cost on one thread */
#define PAGE 4096u

/* ---- regimes ----------------------------------------------------------------- */

enum { HOLD_IDEAL, HOLD_COMPUTE, HOLD_CUDA };

typedef struct {
  const char *name;
  size_t bytes;
  double work_ms;
  unsigned workers;
  bool page_fill;
  int hold;      /* against what the target holds */
  double target; /* HOLD_IDEAL/COMPUTE: ratio <= target; HOLD_CUDA: CUDA ms / loader ms >= */
  unsigned batches;
} regime;

static const regime full_regimes[] = {
    {"compute", 160 * MIB, 80, 1, false, HOLD_COMPUTE, 1.05, 12},
    {"prep4", 160 * MIB, 2, 4, false, HOLD_IDEAL, 1.15, 20},
    {"prep8", 160 * MIB, 2, 8, false, HOLD_IDEAL, 1.15, 20},
    {"small32", 32 * MIB, 1, 4, false, HOLD_IDEAL, 1.2, 40},
    {"small4", 4 * MIB, 0.2, 4, false, HOLD_IDEAL, 1.2, 100},
    {"xfer256", 256 * MIB, 0, 2, true, HOLD_CUDA, 0.9, 20},
    {"xfer1g", 1024 * MIB, 0, 2, true, HOLD_CUDA, 0.9, 10},
};
/* --quick: the same regimes, tiny (CI smoke on POCL: data is checked). */
static const regime quick_regimes[] = {
    {"compute", 2 * MIB, 4, 1, false, HOLD_COMPUTE, 1.05, 4},
    {"prep4", 2 * MIB, 0.5, 4, false, HOLD_IDEAL, 1.15, 6},
    {"prep8", 2 * MIB, 0.5, 8, false, HOLD_IDEAL, 1.15, 6},
    {"small32", 1 * MIB, 0.2, 4, false, HOLD_IDEAL, 1.2, 6},
    {"small4", MIB / 4, 0.1, 4, false, HOLD_IDEAL, 1.2, 6},
    {"xfer256", 4 * MIB, 0, 2, true, HOLD_CUDA, 0.9, 6},
    {"xfer1g", 8 * MIB, 0, 2, true, HOLD_CUDA, 0.9, 4},
};
#define NREGIMES (sizeof full_regimes / sizeof *full_regimes)

/* ---- the fill ---------------------------------------------------------------- */

static inline uint64_t xorshift(uint64_t x) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

/* Word i of batch `index` with r16 sixteenths of xorshift rounds. */
static inline uint64_t word_of(uint64_t index, size_t i, unsigned whole, unsigned frac) {
  uint64_t x = ((index * 0x9E3779B97F4A7C15ull + i) * 0xD1B54A32D192ED03ull) | 1u;
  unsigned k = whole + ((i & 15u) < frac);
  for (unsigned j = 0; j < k; j++)
    x = xorshift(x);
  return x;
}

/* The full fill: every word of n bytes (a multiple of 8). */
static void fill_full(void *p, size_t n, uint64_t index, unsigned r16) {
  uint64_t *w = p;
  unsigned whole = r16 / 16, frac = r16 % 16;
  for (size_t i = 0; i < n / 8; i++)
    w[i] = word_of(index, i, whole, frac);
}

static inline uint64_t page_word(uint64_t index, size_t page) {
  return index * 0x100000001B3ull + page + 1;
}

/* The page fill: one word at the start of every 4 KiB page. */
static void fill_pages(void *p, size_t n, uint64_t index) {
  unsigned char *c = p;
  for (size_t o = 0; o + 8 <= n; o += PAGE) {
    uint64_t v = page_word(index, o / PAGE);
    memcpy(c + o, &v, 8);
  }
}

/* First mismatching byte offset of a batch read back, SIZE_MAX if none. */
static size_t check_batch(const void *got, size_t n, uint64_t index, bool pages, unsigned r16) {
  const unsigned char *c = got;
  if (pages) {
    for (size_t o = 0; o + 8 <= n; o += PAGE) {
      uint64_t v;
      memcpy(&v, c + o, 8);
      if (v != page_word(index, o / PAGE))
        return o;
    }
    return SIZE_MAX;
  }
  const uint64_t *w = got;
  unsigned whole = r16 / 16, frac = r16 % 16;
  for (size_t i = 0; i < n / 8; i++)
    if (w[i] != word_of(index, i, whole, frac))
      return i * 8;
  return SIZE_MAX;
}

/* Seconds per MiB of the full fill with r16, on this thread (best of 3). */
static double fill_s_per_mib(void *buf, size_t n, unsigned r16) {
  double best = 1e30;
  for (int k = 0; k < 3; k++) {
    double t0 = bench_now_s();
    fill_full(buf, n, (uint64_t)k, r16);
    double t = bench_now_s() - t0;
    best = t < best ? t : best;
  }
  return best / ((double)n / MIB);
}

/* The r16 whose fill takes target ms per MiB on this thread: the cost grows
 * with r16, so bisect (best-of-3 timings stand the noise of a busy host). */
static unsigned calibrate_fill(double target_ms_per_mib, double *got_ms_per_mib) {
  size_t n = 8 * MIB;
  void *buf = bench_alloc(PROG, n);
  memset(buf, 1, n);
  unsigned lo = 0, hi = 16;
  double tlo = fill_s_per_mib(buf, n, lo) * 1e3, thi = fill_s_per_mib(buf, n, hi) * 1e3;
  while (thi < target_ms_per_mib && hi < 16 * 4096) {
    lo = hi;
    tlo = thi;
    hi *= 2;
    thi = fill_s_per_mib(buf, n, hi) * 1e3;
  }
  if (tlo >= target_ms_per_mib) { /* even no round is slower: take that */
    *got_ms_per_mib = tlo;
    free(buf);
    return lo;
  }
  while (hi - lo > 1) {
    unsigned mid = lo + (hi - lo) / 2;
    double t = fill_s_per_mib(buf, n, mid) * 1e3;
    if (t < target_ms_per_mib) {
      lo = mid;
      tlo = t;
    } else {
      hi = mid;
      thi = t;
    }
  }
  bool take_hi = thi - target_ms_per_mib < target_ms_per_mib - tlo;
  *got_ms_per_mib = fill_s_per_mib(buf, n, take_hi ? hi : lo) * 1e3;
  free(buf);
  return take_hi ? hi : lo;
}

typedef struct {
  const regime *rg;
  unsigned r16;
} fill_ctx;

static cl_int loader_fill(void *user, uint64_t index, void *host, size_t capacity, size_t *used) {
  const fill_ctx *f = user;
  if (f->rg->page_fill)
    fill_pages(host, capacity, index);
  else
    fill_full(host, capacity, index, f->r16);
  *used = capacity;
  return CL_SUCCESS;
}

/* ---- devices ----------------------------------------------------------------- */

static const char *source =
    "__kernel void work(__global const uint *batch, uint nwords, uint iters,\n"
    "                   __global uint *sink) {\n"
    "  uint g = get_global_id(0);\n"
    "  uint x = nwords ? batch[(uint)(((ulong)g * 4099u) % nwords)] : g;\n"
    "  for (uint k = 0; k < iters; k++)\n"
    "    x = x * 1664525u + 1013904223u;\n"
    "  sink[g] = x;\n"
    "}\n";

typedef struct {
  cl_device_id dev;
  cl_context ctx;
  cl_command_queue q; /* the loader's queue on this device */
  cl_kernel k;        /* the work (arguments set per batch) */
  cl_program prog;
  cl_mem sink, resident; /* the work's sink; a batch-sized buffer for compute alone */
  size_t items;
  cl_uint iters;
  char name[256];
} device;

static struct {
  device dev[MAX_DEVS];
  unsigned ndev;
  char platform[256];
  bool cuda;
  unsigned r16;
  double fill_ms_per_mib_measured;
} B;

static void open_devices(const char *want, unsigned ndev) {
  cl_platform_id plat;
  cl_device_id pickd[MAX_DEVS];
  unsigned np = bench_cl_devices(PROG, want, &plat, pickd, MAX_DEVS);
  clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof B.platform, B.platform, NULL);
  if (np < ndev) {
    fprintf(stderr, PROG ": --devices %u but %s has %u matching devices\n", ndev, B.platform, np);
    exit(1);
  }
  B.ndev = ndev;
  for (unsigned i = 0; i < ndev; i++) {
    device *D = &B.dev[i];
    cl_int err;
    D->dev = pickd[i];
    bench_cl_name(D->dev, D->name, sizeof D->name);
    D->ctx = bench_cl_context(PROG, plat, 1, &D->dev, clpin_strerror);
    D->prog = clCreateProgramWithSource(D->ctx, 1, &source, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(D->prog, 1, &D->dev, "", NULL, NULL));
    D->q = bench_cl_queue(PROG, D->ctx, D->dev, clpin_strerror);
    D->k = clCreateKernel(D->prog, "work", &err);
    CHECK(err);
    cl_uint units = 1;
    CHECK(clGetDeviceInfo(D->dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL));
    D->items = (size_t)units * 256;
    D->sink = bench_cl_buffer(PROG, D->ctx, D->items * 4, clpin_strerror);
  }
}

/* Enqueue the device work on `batch` (nbytes) on D's queue. */
static cl_event enqueue_work(device *D, cl_mem batch, size_t nbytes, cl_uint nwait,
                             const cl_event *wait) {
  cl_uint nwords = (cl_uint)(nbytes / 4 > UINT32_MAX ? UINT32_MAX : nbytes / 4);
  CHECK(clSetKernelArg(D->k, 0, sizeof batch, &batch));
  CHECK(clSetKernelArg(D->k, 1, sizeof nwords, &nwords));
  CHECK(clSetKernelArg(D->k, 2, sizeof D->iters, &D->iters));
  CHECK(clSetKernelArg(D->k, 3, sizeof D->sink, &D->sink));
  cl_event ev;
  CHECK(clEnqueueNDRangeKernel(D->q, D->k, 1, NULL, &D->items, NULL, nwait, wait, &ev));
  return ev;
}

/* ms per work launch with iters, n launches back to back. */
static double time_work(device *D, cl_uint iters, size_t nbytes, int n) {
  D->iters = iters;
  double t0 = bench_now_s();
  for (int i = 0; i < n; i++)
    CHECK(clReleaseEvent(enqueue_work(D, D->resident, nbytes, 0, NULL)));
  CHECK(clFinish(D->q));
  return (bench_now_s() - t0) * 1e3 / n;
}

/* The spin iterations that take work_ms on D (0: no work). */
static void calibrate_work(device *D, double work_ms, size_t nbytes) {
  if (work_ms <= 0) {
    D->iters = 0;
    return;
  }
  time_work(D, 1, nbytes, 1); /* first launch pays one-time costs */
  double iters = 64, t = time_work(D, 64, nbytes, 1);
  while (t < 2.0 && iters < 1e9) {
    iters *= 8;
    t = time_work(D, (cl_uint)iters, nbytes, 1);
  }
  for (int round = 0; round < 3; round++) {
    iters = iters * work_ms / (t > 0.001 ? t : 0.001);
    iters = iters > 4e9 ? 4e9 : iters < 1 ? 1 : iters;
    t = time_work(D, (cl_uint)iters, nbytes, 3);
  }
  D->iters = (cl_uint)iters;
}

/* ---- baselines --------------------------------------------------------------- */

/* Prepare alone on W threads at once (W = 1: prepare alone): each thread
 * fills a pinned block of its own n times; ms per batch of the host as a
 * whole (elapsed / (n W)). What W fill threads can give on this host with
 * nothing else running: on a VM whose cores do not scale, prepare / W is
 * out of any loader's reach. */
typedef struct {
  const regime *rg;
  void *host[64];
  unsigned n;
} par_arg;

static void par_fill(void *arg, int k, int w) {
  par_arg *a = arg;
  fill_ctx f = {a->rg, B.r16};
  size_t used;
  (void)w;
  for (unsigned i = 0; i < a->n; i++)
    loader_fill(&f, i + 1, a->host[k], a->rg->bytes, &used);
}

static void par_touch(void *arg, int k, int w) { /* untimed: first touch */
  par_arg one = *(par_arg *)arg;
  one.n = 1;
  par_fill(&one, k, w);
}

static double measure_prepare_par(const regime *rg, unsigned w, unsigned n) {
  clpin_pool *pool;
  CHECK(clpin_pool_get(B.dev[0].q, &pool));
  clpin_block *blk[64];
  par_arg a = {rg, {0}, n};
  w = w > 64 ? 64 : w;
  for (unsigned k = 0; k < w; k++) {
    CHECK(clpin_acquire(pool, rg->bytes, &blk[k]));
    a.host[k] = clpin_block_host(blk[k]);
  }
  double ms = bench_parallel_s((int)w, NULL, par_touch, par_fill, &a) * 1e3 / ((double)n * w);
  for (unsigned k = 0; k < w; k++)
    CHECK(clpin_release(blk[k], NULL));
  return ms;
}

/* H2D alone: pinned block to device buffer, back to back on device 0. */
static double measure_h2d(const regime *rg, unsigned n) {
  device *D = &B.dev[0];
  clpin_pool *pool;
  clpin_block *blk;
  CHECK(clpin_pool_get(D->q, &pool));
  CHECK(clpin_acquire(pool, rg->bytes, &blk));
  void *host = clpin_block_host(blk);
  memset(host, 3, rg->bytes);
  CHECK(clEnqueueWriteBuffer(D->q, D->resident, CL_TRUE, 0, rg->bytes, host, 0, NULL, NULL));
  double t0 = bench_now_s();
  for (unsigned i = 0; i < n; i++)
    CHECK(clEnqueueWriteBuffer(D->q, D->resident, CL_FALSE, 0, rg->bytes, host, 0, NULL, NULL));
  CHECK(clFinish(D->q));
  double ms = (bench_now_s() - t0) * 1e3 / n;
  CHECK(clpin_release(blk, NULL));
  return ms;
}

/* Compute alone: the work on device 0, back to back. */
static double measure_compute(const regime *rg, unsigned n) {
  device *D = &B.dev[0];
  if (!D->iters)
    return 0;
  return time_work(D, D->iters, rg->bytes, (int)n);
}

/* CUDA pinned H2D on devices 0..nd-1 at once: ms per batch, aggregate. */
typedef struct {
  int dev;
  size_t bytes;
  unsigned n;
  pthread_barrier_t *bar;
  bool ok;
  double t0, t1;
} cuda_job;

static void *cuda_thread(void *arg) {
  cuda_job *j = arg;
  void *h = NULL, *d = NULL;
  j->ok = cudaref_set_device(j->dev) && (h = cudaref_host_alloc(j->bytes)) &&
          (d = cudaref_dev_alloc(j->bytes));
  if (j->ok) {
    memset(h, 5, j->bytes);
    j->ok = cudaref_copy(h, d, j->bytes, CUDAREF_H2D); /* warm */
  }
  pthread_barrier_wait(j->bar);
  j->t0 = bench_now_s();
  for (unsigned i = 0; j->ok && i < j->n; i++)
    j->ok = cudaref_copy(h, d, j->bytes, CUDAREF_H2D);
  j->t1 = bench_now_s();
  if (h)
    cudaref_host_free(h);
  if (d)
    cudaref_dev_free(d);
  return NULL;
}

static double measure_cuda(const regime *rg, unsigned n) {
  if (!B.cuda)
    return 0;
  cuda_job jobs[MAX_DEVS];
  pthread_t th[MAX_DEVS];
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, B.ndev);
  for (unsigned i = 0; i < B.ndev; i++) {
    jobs[i] = (cuda_job){(int)i, rg->bytes, n, &bar, false, 0, 0};
    if (pthread_create(&th[i], NULL, cuda_thread, &jobs[i])) {
      fprintf(stderr, PROG ": pthread_create failed\n");
      exit(1);
    }
  }
  double t0 = 1e30, t1 = 0;
  bool ok = true;
  for (unsigned i = 0; i < B.ndev; i++) {
    pthread_join(th[i], NULL);
    ok = ok && jobs[i].ok;
    t0 = jobs[i].t0 < t0 ? jobs[i].t0 : t0;
    t1 = jobs[i].t1 > t1 ? jobs[i].t1 : t1;
  }
  pthread_barrier_destroy(&bar);
  return ok ? (t1 - t0) * 1e3 / ((double)n * B.ndev) : 0;
}

/* ---- the loader run ---------------------------------------------------------- */

typedef struct {
  double ms; /* per batch */
  struct clpin_loader_stats st;
  unsigned counted; /* batches the stats cover */
  bool bad;
} loader_result;

static bool find_queue(cl_command_queue q, unsigned *d) {
  for (unsigned a = 0; a < B.ndev; a++)
    if (B.dev[a].q == q) {
      *d = a;
      return true;
    }
  return false;
}

/* ---- stopping under load ------------------------------------------------------ */

/* cancel and destroy while W workers fill and uploads run (the loader's target:
 * each returns within 100 ms plus one fill). A waiter thread loops on next()
 * and releases; the main thread cancels and times the waiter's return, then
 * resets, lets the loop run again and times destroy. */
typedef struct {
  clpin_loader *L;
  double t_back;
  cl_int rc;
} stop_waiter;

static void sleep_ms(double ms) {
  struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
  nanosleep(&ts, NULL);
}

static void *stop_wait(void *arg) {
  stop_waiter *w = arg;
  for (;;) {
    clpin_batch *b;
    cl_int rc = clpin_loader_next(w->L, &b);
    if (rc != CL_SUCCESS) {
      w->rc = rc;
      break;
    }
    CHECK(clpin_batch_release(b, 0, NULL));
  }
  w->t_back = bench_now_s();
  return NULL;
}

static void measure_stop(const regime *rg, unsigned workers, int runs) {
  cl_command_queue q = B.dev[0].q;
  fill_ctx f = {rg, B.r16};
  double fill_ms = B.fill_ms_per_mib_measured * (double)rg->bytes / (double)MIB;
  double cancel_ms[MAX_RUNS], destroy_ms[MAX_RUNS];
  int held = 0;
  for (int r = 0; r < runs; r++) {
    clpin_loader_desc d = {.struct_size = sizeof d,
                           .batch_bytes = rg->bytes,
                           .workers = workers,
                           .fill = loader_fill,
                           .user = &f};
    clpin_loader *L;
    CHECK(clpin_loader_create(1, &q, &d, &L));
    stop_waiter w = {.L = L};
    pthread_t th;
    pthread_create(&th, NULL, stop_wait, &w);
    sleep_ms(4 * fill_ms + 50);
    double t0 = bench_now_s();
    CHECK(clpin_loader_cancel(L));
    pthread_join(th, NULL);
    cancel_ms[r] = (w.t_back - t0) * 1e3;
    if (w.rc != CLPIN_ERR_CANCELLED)
      fprintf(stderr, PROG ": next() after cancel returned %d\n", (int)w.rc);
    CHECK(clpin_loader_reset(L));
    w = (stop_waiter){.L = L};
    pthread_create(&th, NULL, stop_wait, &w);
    sleep_ms(4 * fill_ms + 50);
    t0 = bench_now_s();
    CHECK(clpin_loader_cancel(L)); /* the waiter must leave before destroy */
    pthread_join(th, NULL);
    CHECK(clpin_loader_destroy(L));
    destroy_ms[r] = (bench_now_s() - t0) * 1e3;
    if (cancel_ms[r] <= 100 + fill_ms && destroy_ms[r] <= 100 + fill_ms)
      held++;
  }
  bench_summary c = bench_summary_of(cancel_ms, runs), d = bench_summary_of(destroy_ms, runs);
  printf("stop under load (%s, %u workers, one fill %.1f ms): cancel -> waiter back median %.2f ms "
         "[%.2f .. %.2f], cancel + destroy median %.2f ms [%.2f .. %.2f]; target <= 100 ms + one "
         "fill: held %d/%d\n",
         rg->name, workers, fill_ms, c.median, c.min, c.max, d.median, d.min, d.max, held, runs);
}

static loader_result run_loader(const regime *rg, unsigned workers, unsigned n) {
  cl_command_queue qs[MAX_DEVS];
  for (unsigned d = 0; d < B.ndev; d++)
    qs[d] = B.dev[d].q;
  fill_ctx f = {rg, B.r16};
  unsigned warm = 2 + workers + 2; /* the default depth, 2 */
  clpin_loader_desc desc = {.struct_size = sizeof desc,
                            .batch_bytes = rg->bytes,
                            .batches = warm + n + 1,
                            .workers = workers,
                            .fill = loader_fill,
                            .user = &f};
  clpin_loader *L;
  CHECK(clpin_loader_create(B.ndev, qs, &desc, &L));
  loader_result r = {.st = {.struct_size = sizeof r.st}};
  double t0 = 0, t1 = 0;
  struct clpin_loader_stats s0 = {.struct_size = sizeof s0};
  for (uint64_t i = 0;; i++) {
    clpin_batch *b;
    cl_int rc = clpin_loader_next(L, &b);
    if (rc == CLPIN_END)
      break;
    CHECK(rc);
    if (clpin_batch_index(b) != i) {
      fprintf(stderr, PROG ": %s: batch %llu came when %llu was due\n", rg->name,
              (unsigned long long)clpin_batch_index(b), (unsigned long long)i);
      r.bad = true;
    }
    if (i == warm) {
      t0 = bench_now_s();
      CHECK(clpin_loader_stats(L, &s0));
    }
    unsigned d = 0;
    if (!find_queue(clpin_batch_queue(b), &d)) {
      fprintf(stderr, PROG ": a batch came on a queue not given to the loader\n");
      exit(1);
    }
    device *D = &B.dev[d];
    cl_event up = clpin_batch_event(b);
    if (i == warm + n) {
      t1 = bench_now_s();
      CHECK(clpin_loader_stats(L, &r.st));
      /* The last batch: read it back and check every word the fill wrote. */
      void *got = bench_alloc(PROG, rg->bytes);
      CHECK(clEnqueueReadBuffer(D->q, clpin_batch_buffer(b), CL_TRUE, 0, rg->bytes, got, 1, &up,
                                NULL));
      size_t off = check_batch(got, rg->bytes, i, rg->page_fill, B.r16);
      if (off != SIZE_MAX) {
        fprintf(stderr, PROG ": %s: batch %llu read back differs at byte %zu\n", rg->name,
                (unsigned long long)i, off);
        r.bad = true;
      }
      free(got);
      CHECK(clpin_batch_release(b, 0, NULL));
      continue;
    }
    if (D->iters) {
      cl_event done = enqueue_work(D, clpin_batch_buffer(b), rg->bytes, 1, &up);
      CHECK(clFlush(D->q));
      CHECK(clpin_batch_release(b, 1, &done));
      CHECK(clReleaseEvent(done));
    } else {
      CHECK(clpin_batch_release(b, 0, NULL));
    }
  }
  for (unsigned d = 0; d < B.ndev; d++)
    CHECK(clFinish(B.dev[d].q));
  r.ms = (t1 - t0) * 1e3 / n;
  /* The stats of the timed batches: the difference of the two snapshots. */
  r.st.fill_ns -= s0.fill_ns;
  r.st.upload_ns -= s0.upload_ns;
  r.st.wait_ns -= s0.wait_ns;
  r.st.slot_wait_ns -= s0.slot_wait_ns;
  r.st.buffer_wait_ns -= s0.buffer_wait_ns;
  r.st.batches -= s0.batches;
  r.counted = n;
  /* Steady state creates nothing: the loader's slots and buffers, all at create. */
  if (r.st.pinned_allocations != r.st.slots || r.st.buffers_created != r.st.buffers) {
    fprintf(stderr,
            PROG ": %s: %llu pinned allocations for %llu slots, %llu buffers created for %llu\n",
            rg->name, (unsigned long long)r.st.pinned_allocations, (unsigned long long)r.st.slots,
            (unsigned long long)r.st.buffers_created, (unsigned long long)r.st.buffers);
    r.bad = true;
  }
  CHECK(clpin_loader_destroy(L));
  return r;
}

/* ---- one regime -------------------------------------------------------------- */

typedef struct {
  const regime *rg;
  unsigned workers;
  double par[MAX_RUNS], ratio_par[MAX_RUNS]; /* prepare on W threads at once; loader / that ideal */
  double loader[MAX_RUNS], ideal[MAX_RUNS], prep[MAX_RUNS], h2d[MAX_RUNS], comp[MAX_RUNS],
      cuda[MAX_RUNS], ratio[MAX_RUNS];
  int runs, held;
  bool has_ratio;
  struct clpin_loader_stats st;
  unsigned counted;
} regime_result;

static bool run_regime(const regime *rg, regime_result *R, int runs) {
  unsigned workers = rg->workers;
  if (rg->page_fill && workers < 2 * B.ndev)
    workers = 2 * B.ndev;
  unsigned n = rg->batches;
  memset(R, 0, sizeof *R);
  R->rg = rg;
  R->workers = workers;
  for (unsigned d = 0; d < B.ndev; d++) {
    B.dev[d].resident = bench_cl_buffer(PROG, B.dev[d].ctx, rg->bytes, clpin_strerror);
    CHECK(clEnqueueFillBuffer(B.dev[d].q, B.dev[d].resident, &(cl_uint){7}, 4, 0, rg->bytes, 0,
                              NULL, NULL));
    CHECK(clFinish(B.dev[d].q));
    calibrate_work(&B.dev[d], rg->work_ms, rg->bytes);
  }
  char sz[32];
  bench_fmt_size(rg->bytes, sz, sizeof sz);
  printf("# %s: %s batches, %.1f ms device work (%u iterations), %u workers, %s fill, %u batches "
         "timed after %u\n",
         rg->name, sz, rg->work_ms, (unsigned)B.dev[0].iters, workers,
         rg->page_fill ? "one word per page" : "full", n, 2 + workers + 2);
  fflush(stdout);
  bool bad = false;
  unsigned nprep = rg->bytes >= 64 * MIB ? 3 : 8, nbase = n < 10 ? n : 10;
  for (int r = 0; r < runs; r++) {
    R->prep[r] = measure_prepare_par(rg, 1, nprep);
    R->h2d[r] = measure_h2d(rg, nbase);
    R->comp[r] = measure_compute(rg, nbase);
    R->cuda[r] = rg->hold == HOLD_CUDA ? measure_cuda(rg, nbase) : 0;
    double ideal = R->prep[r] / workers;
    double h2d = R->h2d[r] / B.ndev, comp = R->comp[r] / B.ndev;
    ideal = h2d > ideal ? h2d : ideal;
    ideal = comp > ideal ? comp : ideal;
    R->ideal[r] = ideal;
    loader_result L = run_loader(rg, workers, n);
    bad = bad || L.bad;
    R->loader[r] = L.ms;
    R->st = L.st;
    R->counted = L.counted;
    R->has_ratio = true;
    if (rg->hold == HOLD_CUDA) {
      R->has_ratio = R->cuda[r] > 0;
      R->ratio[r] = R->has_ratio ? R->cuda[r] / L.ms : 0;
    } else if (rg->hold == HOLD_COMPUTE) {
      R->ratio[r] = L.ms / (comp > 0 ? comp : ideal);
    } else {
      R->ratio[r] = L.ms / ideal;
    }
    /* The same ideal with prepare measured on W threads at once, right
     * after the loader (page-fill regimes: not prepare-bound, skipped). */
    R->par[r] = rg->page_fill ? 0 : measure_prepare_par(rg, workers, nprep);
    double ip = R->par[r] > h2d ? R->par[r] : h2d;
    ip = comp > ip ? comp : ip;
    R->ratio_par[r] = ip > 0 ? L.ms / ip : 0;
    R->runs = r + 1;
    printf("  run %d/%d: loader %.3f ms/batch; prepare %.3f (/%u = %.3f), H2D %.3f, compute %.3f",
           r + 1, runs, L.ms, R->prep[r], workers, R->prep[r] / workers, R->h2d[r], R->comp[r]);
    if (rg->hold == HOLD_CUDA)
      printf(", CUDA pinned %s", R->cuda[r] > 0 ? "" : "n/a");
    if (rg->hold == HOLD_CUDA && R->cuda[r] > 0)
      printf("%.3f", R->cuda[r]);
    if (R->par[r] > 0)
      printf(", prepare on %u threads at once %.3f/batch (loader / that ideal %.3fx)", workers,
             R->par[r], R->ratio_par[r]);
    if (R->has_ratio)
      printf(" -> %.3fx%s\n", R->ratio[r], rg->hold == HOLD_CUDA ? " of CUDA" : "");
    else
      printf(" -> no CUDA\n");
    fflush(stdout);
  }
  R->held = R->has_ratio ? bench_held(R->ratio, R->runs, rg->target, rg->hold == HOLD_CUDA) : 0;
  for (unsigned d = 0; d < B.ndev; d++) {
    CHECK(clReleaseMemObject(B.dev[d].resident));
    B.dev[d].resident = NULL;
    clpin_pool *pool;
    CHECK(clpin_pool_get(B.dev[d].q, &pool));
    CHECK(clpin_pool_trim(pool));
  }
  return !bad;
}

static void print_stats(const regime_result *R) {
  const struct clpin_loader_stats *s = &R->st;
  double k = R->counted ? 1e6 * R->counted : 1;
  printf("  %-8s stats per timed batch: fill %.2f ms (all workers), upload %.2f ms, caller waited "
         "%.2f ms, slot waits %.2f ms, buffer waits %.2f ms; %llu slots, %llu buffers, "
         "%llu pinned allocations, %llu buffers created\n",
         R->rg->name, s->fill_ns / k, s->upload_ns / k, s->wait_ns / k, s->slot_wait_ns / k,
         s->buffer_wait_ns / k, (unsigned long long)s->slots, (unsigned long long)s->buffers,
         (unsigned long long)s->pinned_allocations, (unsigned long long)s->buffers_created);
}

static void print_table(const regime_result *res, int nres) {
  printf("\n%-8s %8s %6s %3s %12s %12s %24s %8s %10s %6s\n", "regime", "batch", "work", "W",
         "loader ms/b", "ideal ms/b", "ratio (min-max)", "target", "baseline", "held");
  for (int i = 0; i < nres; i++) {
    const regime_result *R = &res[i];
    const regime *rg = R->rg;
    char sz[32], ratio[64], target[32];
    bench_fmt_size(rg->bytes, sz, sizeof sz);
    bench_summary rs = bench_summary_of(R->ratio, R->runs);
    if (R->has_ratio)
      snprintf(ratio, sizeof ratio, "%.3fx (%.3f-%.3f)", rs.median, rs.min, rs.max);
    else
      snprintf(ratio, sizeof ratio, "no CUDA");
    snprintf(target, sizeof target, "%s%.2fx", rg->hold == HOLD_CUDA ? ">=" : "<=", rg->target);
    char held[32] = "n/a";
    if (R->has_ratio)
      snprintf(held, sizeof held, "%d/%d", R->held, R->runs);
    const char *base = rg->hold == HOLD_CUDA      ? "CUDA"
                       : rg->hold == HOLD_COMPUTE ? "compute"
                                                  : "ideal";
    double med = rs.median;
    bool missed = R->has_ratio && (rg->hold == HOLD_CUDA ? med < rg->target : med > rg->target);
    printf("%-8s %8s %6.1f %3u %12.3f %12.3f %24s %8s %10s %6s%s\n", rg->name, sz, rg->work_ms,
           R->workers, bench_summary_of(R->loader, R->runs).median,
           bench_summary_of(R->ideal, R->runs).median, ratio, target, base, held,
           missed ? "  [MISSED]" : "");
  }
  printf("(ratio: loader / ideal, loader / compute alone for compute-bound, CUDA pinned ms / "
         "loader ms for transfer-bound; medians of runs)\n\n");
  for (int i = 0; i < nres; i++)
    print_stats(&res[i]);
  for (int i = 0; i < nres; i++) {
    const regime_result *R = &res[i];
    printf("RESULT regime=%s bytes=%zu work_ms=%.2f workers=%u devices=%u loader_ms=%.4f "
           "ideal_ms=%.4f prep_ms=%.4f h2d_ms=%.4f compute_ms=%.4f cuda_ms=%.4f ratio=%.4f "
           "target=%.2f held=%d runs=%d par_ms=%.4f ratio_par=%.4f ratio_par_min=%.4f "
           "ratio_par_max=%.4f\n",
           R->rg->name, R->rg->bytes, R->rg->work_ms, R->workers, B.ndev,
           bench_summary_of(R->loader, R->runs).median, bench_summary_of(R->ideal, R->runs).median,
           bench_summary_of(R->prep, R->runs).median, bench_summary_of(R->h2d, R->runs).median,
           bench_summary_of(R->comp, R->runs).median, bench_summary_of(R->cuda, R->runs).median,
           R->has_ratio ? bench_summary_of(R->ratio, R->runs).median : 0, R->rg->target, R->held,
           R->runs, bench_summary_of(R->par, R->runs).median,
           bench_summary_of(R->ratio_par, R->runs).median,
           bench_summary_of(R->ratio_par, R->runs).min,
           bench_summary_of(R->ratio_par, R->runs).max);
  }
}

/* ---- main -------------------------------------------------------------------- */

static const char usage_text[] =
    "[options]\n"
    "  --regime NAME[,NAME]  compute, prep4, prep8, small32, small4, xfer256, xfer1g or all\n"
    "  --runs R              runs per regime (default 3, at most 64): medians, min-max, held\n"
    "  --device-name SUBSTR  platform or device whose name contains SUBSTR (default: first GPU,\n"
    "                        else first device)\n"
    "  --devices N           N devices of that platform, one context each (default 1)\n"
    "  --no-cuda             skip the CUDA pinned baseline\n"
    "  --stop                also time cancel and destroy under load (each picked regime)\n"
    "  --quick               tiny sizes (CI smoke on POCL: data checked, speed not)\n"
    "  --list                list OpenCL devices\n";

int main(int argc, char **argv) {
  const char *want = NULL, *regimes = "all";
  int runs = 3, ndev = 1;
  bool quick = false, no_cuda = false, stop = false, list = false;
  const bench_opt opts[] = {
      BENCH_OPT("--regime", BENCH_TEXT, &regimes),   BENCH_OPT("--runs", BENCH_INT, &runs),
      BENCH_OPT("--device-name", BENCH_TEXT, &want), BENCH_OPT("--devices", BENCH_INT, &ndev),
      BENCH_OPT("--no-cuda", BENCH_FLAG, &no_cuda),  BENCH_OPT("--stop", BENCH_FLAG, &stop),
      BENCH_OPT("--quick", BENCH_FLAG, &quick),      BENCH_OPT("--list", BENCH_FLAG, &list)};
  BENCH_PARSE_OPTS(PROG, usage_text, argc, argv, opts);
  if (list) {
    bench_cl_list();
    return 0;
  }
  if (runs < 1 || runs > MAX_RUNS || ndev < 1 || ndev > MAX_DEVS) {
    fprintf(stderr, PROG ": --runs 1..%d, --devices 1..%d\n", MAX_RUNS, MAX_DEVS);
    return 2;
  }
  const regime *table = quick ? quick_regimes : full_regimes;
  const regime *pick[NREGIMES];
  int npick = 0;
  for (size_t r = 0; r < NREGIMES; r++) {
    const char *p = strstr(regimes, table[r].name);
    size_t len = strlen(table[r].name);
    bool named = p && (p == regimes || p[-1] == ',') && (p[len] == 0 || p[len] == ',');
    if (!strcmp(regimes, "all") || named)
      pick[npick++] = &table[r];
  }
  if (!npick) {
    fprintf(stderr, PROG ": no regime named %s\nusage: " PROG " %s", regimes, usage_text);
    return 2;
  }

  open_devices(want, (unsigned)ndev);
  printf("loader-bench on %s", B.platform);
  for (unsigned d = 0; d < B.ndev; d++)
    printf("%s%s", d ? ", " : " / ", B.dev[d].name);
  printf(" (%u device%s)\n", B.ndev, B.ndev > 1 ? "s" : "");
  B.r16 = calibrate_fill(PREP_MS_PER_MIB, &B.fill_ms_per_mib_measured);
  printf("fill: counter-based xorshift64 over every 8-byte word, %.4g rounds per word: "
         "%.4f ms per MiB on one thread (target %.4f; %.1f ms per 160 MiB)\n",
         B.r16 / 16.0, B.fill_ms_per_mib_measured, PREP_MS_PER_MIB,
         B.fill_ms_per_mib_measured * 160);
  bool need_cuda = false;
  for (int r = 0; r < npick; r++)
    need_cuda = need_cuda || pick[r]->hold == HOLD_CUDA;
  if (need_cuda && !no_cuda) {
    char why[256] = "";
    B.cuda = cudaref_open(0, why, sizeof why);
    if (B.cuda)
      printf("CUDA baseline: %s on %s\n", cudaref_library(), cudaref_device_name());
    else
      printf("CUDA baseline: no CUDA (%s)\n", why);
  }
  fflush(stdout);

  regime_result *res = calloc((size_t)npick, sizeof *res);
  if (!res)
    return 1;
  bool ok = true;
  for (int r = 0; r < npick; r++)
    ok = run_regime(pick[r], &res[r], runs) && ok;
  print_table(res, npick);
  printf("data check: %s\n", ok ? "every checked batch ok" : "MISMATCH");
  for (int r = 0; stop && r < npick; r++)
    measure_stop(pick[r], pick[r]->workers, runs);
  free(res);

  for (unsigned d = 0; d < B.ndev; d++) {
    device *D = &B.dev[d];
    clReleaseKernel(D->k);
    clReleaseCommandQueue(D->q);
    clReleaseMemObject(D->sink);
    clReleaseProgram(D->prog);
    clpin_pool_release_context(D->ctx);
    clReleaseContext(D->ctx);
  }
  clpin_shutdown();
  return ok ? 0 : 1;
}
