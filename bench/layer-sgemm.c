/* SPDX-License-Identifier: Apache-2.0 */
/* layer-sgemm: the unmodified OpenCL program of the layer's end-to-end target
 * (docs/BENCHMARKS.md, "The OpenCL layer").
 *
 * A plain OpenCL program with CLBlast's SGEMM, written the way CLBlast's own
 * samples are: host matrices from malloc (pageable), blocking
 * clEnqueueWriteBuffer of A and B, CLBlastSgemm, blocking clEnqueueReadBuffer
 * of C. It never calls clpin and does not link it: run it once plainly and
 * once with OPENCL_LAYERS=/abs/path/libclpin-layer.so, and the difference is
 * what the layer buys an unmodified program (bench/gpu-layer.sh does both).
 *
 * sgemm (default): C = A * B, three n x n float matrices, row-major; by
 *   default n is the largest multiple of 16 with 1 GiB in all (--mib, --n).
 *   Each run times the two writes together, the SGEMM (to its event) and the
 *   read, and their sum (end to end). One warm-up run first (CLBlast compiles
 *   its kernels, the layer makes its pool): printed, not counted.
 * --latency: blocking clEnqueueWriteBuffer / clEnqueueReadBuffer of 4, 16 and
 *   64 KiB from malloc, --iters calls per size and run, each call timed; a
 *   run's figure is its median call. For the layer's small-transfer target
 *   (at most 1.05x the latency without it): small calls must pass through.
 *   Where malloc puts a small block depends on what else the process
 *   allocated (a layer's own allocations move it), and the driver's copy
 *   time can depend on the source's alignment: the summary names each
 *   buffer's address modulo 4096.
 *
 * Every figure is the median of --runs runs with min and max. The last line
 * is a machine-readable summary ("layer-sgemm: summary: key=value ...").
 *
 * Verification (unless --no-verify): the matrices hold small integers
 * (-3 ... 3), so every partial sum is an integer below 2^24 and exact in
 * float whatever the order of summation: C must equal the CPU's result
 * exactly. Per run, C is checked on sampled rows (all their columns) and,
 * for every row, by Freivalds' test (C x = A (B x) for a fixed integer
 * vector x, exact in 64-bit integers). Between runs the host flips the sign
 * of A (each run) and of B (every second run), so a write that did not reach
 * the device, or a read that did not come back (C is poisoned with NaNs
 * before each run), gives a wrong C. A mismatch exits 3.
 *
 *   layer-sgemm [--platform NAME] [--runs R] [--n N | --mib M] [--no-verify]
 *   layer-sgemm --latency [--platform NAME] [--runs R] [--iters K]
 */
#define _POSIX_C_SOURCE 200809L
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <clblast_c.h>

#include "benchcl.h"
#include "benchstat.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define MAXR 64
#define SAMPLE_ROWS 8
#define MAX_N ((1 << 24) / 9) /* every partial sum below 2^24: exact in float */

#define CHECK(expr) BENCH_CL_CHECK("layer-sgemm", expr, bench_cl_code)

static struct {
  cl_device_id device;
  cl_context ctx;
  cl_command_queue q;
  int runs;
  bool verify;
} G = {.runs = 5, .verify = true};

/* ---- report lines (benchstat.c) ------------------------------------------- */

/* The summary line's fields for one figure: NAME_med=, NAME_min=, NAME_max=. */
static void summary_field(const char *name, const double *v, int n) {
  bench_summary s = bench_summary_of(v, n);
  printf(" %s_med=%.4f %s_min=%.4f %s_max=%.4f", name, s.median, name, s.min, name, s.max);
}

static void *xmalloc(size_t n) { return bench_alloc("layer-sgemm", n); }

static cl_mem dev_buffer(size_t n) {
  return bench_cl_buffer("layer-sgemm", G.ctx, n, bench_cl_code);
}

/* ---- data and its reference ---------------------------------------------- */

static uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ull;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dull;
  return x ^ (x >> 33);
}

/* -3 ... 3: with n below 2^24 / 9 every partial sum of A * B is exact. */
static void fill(float *m, size_t count, uint64_t seed) {
  for (size_t i = 0; i < count; i++)
    m[i] = (float)((int)(mix(i + seed * 0x9e3779b97f4a7c15ull) % 7) - 3);
}

static void negate(float *m, size_t count) {
  for (size_t i = 0; i < count; i++)
    m[i] = -m[i];
}

typedef struct {
  size_t n;
  size_t rows[SAMPLE_ROWS];
  float *ref;   /* SAMPLE_ROWS x n: rows of A * B as first filled */
  int64_t *x;   /* Freivalds' vector, 1 ... 3 */
  int64_t *abx; /* A (B x) as first filled */
} reference;

static void reference_make(reference *r, const float *a, const float *b, size_t n) {
  r->n = n;
  for (int s = 0; s < SAMPLE_ROWS; s++)
    r->rows[s] = (size_t)s * (n - 1) / (SAMPLE_ROWS - 1);
  r->ref = xmalloc(SAMPLE_ROWS * n * sizeof *r->ref);
  memset(r->ref, 0, SAMPLE_ROWS * n * sizeof *r->ref);
  /* One pass over B for all sampled rows; float is exact here (above). */
  for (size_t k = 0; k < n; k++) {
    const float *bk = b + k * n;
    for (int s = 0; s < SAMPLE_ROWS; s++) {
      float aik = a[r->rows[s] * n + k];
      float *out = r->ref + (size_t)s * n;
      for (size_t j = 0; j < n; j++)
        out[j] += aik * bk[j];
    }
  }
  r->x = xmalloc(n * sizeof *r->x);
  r->abx = xmalloc(n * sizeof *r->abx);
  int64_t *bx = xmalloc(n * sizeof *bx);
  for (size_t j = 0; j < n; j++)
    r->x[j] = 1 + (int64_t)(mix(j + 77) % 3);
  for (size_t k = 0; k < n; k++) {
    int64_t acc = 0;
    for (size_t j = 0; j < n; j++)
      acc += (int64_t)b[k * n + j] * r->x[j];
    bx[k] = acc;
  }
  for (size_t i = 0; i < n; i++) {
    int64_t acc = 0;
    for (size_t k = 0; k < n; k++)
      acc += (int64_t)a[i * n + k] * bx[k];
    r->abx[i] = acc;
  }
  free(bx);
}

/* C against the reference times sign (+1 or -1). Returns the number of
 * wrong entries found (sampled rows) plus wrong rows (Freivalds). */
static size_t reference_check(const reference *r, const float *c, int sign) {
  size_t n = r->n, bad = 0;
  const double limit = 9.0 * (double)n; /* |C_ij| <= 9 n */
  for (int s = 0; s < SAMPLE_ROWS; s++) {
    const float *row = c + r->rows[s] * n, *want = r->ref + (size_t)s * n;
    for (size_t j = 0; j < n; j++) {
      if (row[j] != (float)sign * want[j] && bad++ < 5)
        fprintf(stderr, "layer-sgemm: C[%zu][%zu] = %g, want %g\n", r->rows[s], j, (double)row[j],
                (double)((float)sign * want[j]));
    }
  }
  for (size_t i = 0; i < n; i++) {
    int64_t acc = 0;
    bool finite = true;
    for (size_t j = 0; j < n; j++) {
      double v = c[i * n + j];
      if (!(fabs(v) <= limit))
        finite = false;
      else
        acc += (int64_t)v * r->x[j];
    }
    if ((!finite || acc != sign * r->abx[i]) && bad++ < 5)
      fprintf(stderr, "layer-sgemm: row %zu of C fails Freivalds' check%s\n", i,
              finite ? "" : " (not a finite integer: the read did not deliver)");
  }
  return bad;
}

/* ---- sgemm ----------------------------------------------------------------- */

typedef struct {
  double write, sgemm, read;
} run_times;

static run_times one_run(cl_mem da, cl_mem db, cl_mem dc, const float *a, const float *b, float *c,
                         size_t n) {
  size_t bytes = n * n * sizeof(float);
  run_times t;
  CHECK(clFinish(G.q));
  double t0 = bench_now_s();
  CHECK(clEnqueueWriteBuffer(G.q, da, CL_TRUE, 0, bytes, a, 0, NULL, NULL));
  CHECK(clEnqueueWriteBuffer(G.q, db, CL_TRUE, 0, bytes, b, 0, NULL, NULL));
  double t1 = bench_now_s();
  cl_event ev = NULL;
  CLBlastStatusCode st = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo,
                                      n, n, n, 1.0f, da, 0, n, db, 0, n, 0.0f, dc, 0, n, &G.q, &ev);
  if (st != CLBlastSuccess) {
    fprintf(stderr, "layer-sgemm: CLBlastSgemm failed with status %d\n", (int)st);
    exit(1);
  }
  CHECK(clWaitForEvents(1, &ev));
  CHECK(clReleaseEvent(ev));
  double t2 = bench_now_s();
  CHECK(clEnqueueReadBuffer(G.q, dc, CL_TRUE, 0, bytes, c, 0, NULL, NULL));
  double t3 = bench_now_s();
  t.write = (t1 - t0) * 1e3;
  t.sgemm = (t2 - t1) * 1e3;
  t.read = (t3 - t2) * 1e3;
  return t;
}

static int mode_sgemm(size_t n) {
  size_t count = n * n, bytes = count * sizeof(float);
  cl_ulong max_alloc = 0;
  CHECK(
      clGetDeviceInfo(G.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL));
  if (bytes > max_alloc) {
    fprintf(stderr,
            "layer-sgemm: a %zu MiB matrix is above the device's largest buffer (%llu MiB)\n",
            bytes / MiB, (unsigned long long)(max_alloc / MiB));
    return 1;
  }
  printf("layer-sgemm: C = A * B, n = %zu: 3 matrices of %.1f MiB (%.1f MiB in all), %d runs "
         "after a warm-up\n",
         n, (double)bytes / (double)MiB, 3.0 * (double)bytes / (double)MiB, G.runs);
  fflush(stdout);
  float *a = xmalloc(bytes), *b = xmalloc(bytes), *c = xmalloc(bytes);
  fill(a, count, 1); /* also faults the pages in: a first touch is not a transfer */
  fill(b, count, 2);
  memset(c, 0, bytes);
  reference ref = {0};
  if (G.verify)
    reference_make(&ref, a, b, n);
  cl_mem da = dev_buffer(bytes), db = dev_buffer(bytes), dc = dev_buffer(bytes);
  /* beta is 0, but never let CLBlast see uninitialised device memory. */
  float zero = 0;
  CHECK(clEnqueueFillBuffer(G.q, dc, &zero, sizeof zero, 0, bytes, 0, NULL, NULL));
  CHECK(clFinish(G.q));

  double wr[MAXR], rd[MAXR], xf[MAXR], gm[MAXR], tot[MAXR], wgb[MAXR], rgb[MAXR];
  run_times cold = {0};
  int verified = 0, sa = 1, sb = 1;
  double flop = 2.0 * (double)n * (double)n * (double)n;
  for (int r = -1; r < G.runs; r++) {
    if (r >= 0) { /* new data on the host each run: A's sign always, B's every second run */
      negate(a, count);
      sa = -sa;
      if (r % 2 == 0) {
        negate(b, count);
        sb = -sb;
      }
    }
    memset(c, 0xff, bytes); /* NaN: a read that does not deliver shows */
    run_times t = one_run(da, db, dc, a, b, c, n);
    const char *ok = "not verified";
    if (G.verify) {
      size_t bad = reference_check(&ref, c, sa * sb);
      if (bad) {
        if (r < 0)
          fprintf(stderr, "layer-sgemm: warm-up: C is WRONG (%zu mismatches)\n", bad);
        else
          fprintf(stderr, "layer-sgemm: run %d: C is WRONG (%zu mismatches)\n", r + 1, bad);
        return 3;
      }
      ok = "verified";
      verified += r >= 0;
    }
    double total = t.write + t.sgemm + t.read;
    if (r < 0)
      printf("warm-up: ");
    else
      printf("run %d: ", r + 1);
    printf("write %.3f ms (%.2f GB/s)  sgemm %.3f ms (%.2f TFLOP/s)  read %.3f ms (%.2f GB/s)  "
           "transfers %.3f ms  total %.3f ms  %s%s\n",
           t.write, 2.0 * (double)bytes / t.write / 1e6, t.sgemm, flop / t.sgemm / 1e9, t.read,
           (double)bytes / t.read / 1e6, t.write + t.read, total, ok,
           r < 0 ? " (not counted)" : "");
    fflush(stdout);
    if (r < 0) {
      cold = t;
      continue;
    }
    wr[r] = t.write;
    rd[r] = t.read;
    xf[r] = t.write + t.read;
    gm[r] = t.sgemm;
    tot[r] = total;
    wgb[r] = 2.0 * (double)bytes / t.write / 1e6;
    rgb[r] = (double)bytes / t.read / 1e6;
  }
  bench_print_range("write A and B (ms)", wr, G.runs, "ms");
  bench_print_range("read C (ms)", rd, G.runs, "ms");
  bench_print_range("transfers: writes + read (ms)", xf, G.runs, "ms");
  bench_print_range("SGEMM (ms)", gm, G.runs, "ms");
  bench_print_range("end to end: writes + SGEMM + read (ms)", tot, G.runs, "ms");
  bench_print_range("write rate (GB/s)", wgb, G.runs, "GB/s");
  bench_print_range("read rate (GB/s)", rgb, G.runs, "GB/s");
  printf("layer-sgemm: summary: mode=sgemm n=%zu bytes=%zu runs=%d", n, 3 * bytes, G.runs);
  summary_field("write_ms", wr, G.runs);
  summary_field("read_ms", rd, G.runs);
  summary_field("transfer_ms", xf, G.runs);
  summary_field("sgemm_ms", gm, G.runs);
  summary_field("total_ms", tot, G.runs);
  printf(" warmup_transfer_ms=%.4f warmup_total_ms=%.4f verified=%d/%d\n", cold.write + cold.read,
         cold.write + cold.sgemm + cold.read, G.verify ? verified : 0, G.verify ? G.runs : 0);
  clReleaseMemObject(da);
  clReleaseMemObject(db);
  clReleaseMemObject(dc);
  free(a);
  free(b);
  free(c);
  free(ref.ref);
  free(ref.x);
  free(ref.abx);
  return 0;
}

/* ---- latency of small transfers ---------------------------------------------- */

static const size_t lat_sizes[] = {4 * KiB, 16 * KiB, 64 * KiB};
#define NSIZES (sizeof lat_sizes / sizeof lat_sizes[0])

static int mode_latency(int iters) {
  size_t max = lat_sizes[NSIZES - 1];
  unsigned char *up = xmalloc(max), *down = xmalloc(max);
  for (size_t i = 0; i < max; i++)
    up[i] = (unsigned char)mix(i);
  memset(down, 0, max);
  cl_mem m = dev_buffer(max);
  double *call = xmalloc((size_t)iters * sizeof *call);
  double med[2][NSIZES][MAXR];
  printf("layer-sgemm: latency of blocking clEnqueueWriteBuffer / clEnqueueReadBuffer from "
         "malloc, %d calls per size and run, %d runs after a warm-up\n",
         iters, G.runs);
  for (int r = -1; r < G.runs; r++) {
    for (size_t s = 0; s < NSIZES; s++) {
      for (int d = 0; d < 2; d++) {
        size_t n = lat_sizes[s];
        CHECK(clFinish(G.q));
        for (int i = 0; i < iters; i++) {
          double t0 = bench_now_s();
          if (d == 0)
            CHECK(clEnqueueWriteBuffer(G.q, m, CL_TRUE, 0, n, up, 0, NULL, NULL));
          else
            CHECK(clEnqueueReadBuffer(G.q, m, CL_TRUE, 0, n, down, 0, NULL, NULL));
          call[i] = (bench_now_s() - t0) * 1e6;
        }
        if (r >= 0)
          med[d][s][r] = bench_summary_of(call, iters).median;
      }
      if (G.verify && memcmp(up, down, lat_sizes[s])) {
        fprintf(stderr, "layer-sgemm: %zu KiB read back differs from what was written\n",
                lat_sizes[s] / KiB);
        return 3;
      }
      memset(down, 0, max);
    }
  }
  for (int d = 0; d < 2; d++)
    for (size_t s = 0; s < NSIZES; s++) {
      char what[96];
      snprintf(what, sizeof what, "%s %3zu KiB, median call (us)", d ? "read " : "write",
               lat_sizes[s] / KiB);
      bench_print_range(what, med[d][s], G.runs, "us");
    }
  printf("layer-sgemm: summary: mode=latency runs=%d iters=%d", G.runs, iters);
  for (int d = 0; d < 2; d++)
    for (size_t s = 0; s < NSIZES; s++) {
      char name[64];
      snprintf(name, sizeof name, "%s_%zu_us", d ? "read" : "write", lat_sizes[s]);
      summary_field(name, med[d][s], G.runs);
    }
  printf(" up_mod4096=%u down_mod4096=%u verified=%s\n", (unsigned)((uintptr_t)up % 4096),
         (unsigned)((uintptr_t)down % 4096), G.verify ? "yes" : "no");
  free(call);
  free(up);
  free(down);
  clReleaseMemObject(m);
  return 0;
}

/* ---- main -------------------------------------------------------------------- */

static const char usage[] =
    "[--platform NAME] [--runs R] [--n N | --mib M] [--no-verify]\n"
    "       layer-sgemm --latency [--platform NAME] [--runs R] [--iters K]\n";

int main(int argc, char **argv) {
  const char *platform = NULL;
  bool latency = false, no_verify = false;
  int n = 0, mib = 1024, iters = 200;
  const bench_opt opts[] = {BENCH_OPT("--platform", BENCH_TEXT, &platform),
                            BENCH_OPT("--runs", BENCH_INT, &G.runs),
                            BENCH_OPT("--n", BENCH_INT, &n),
                            BENCH_OPT("--mib", BENCH_INT, &mib),
                            BENCH_OPT("--iters", BENCH_INT, &iters),
                            BENCH_OPT("--latency", BENCH_FLAG, &latency),
                            BENCH_OPT("--no-verify", BENCH_FLAG, &no_verify)};
  BENCH_PARSE_OPTS("layer-sgemm", usage, argc, argv, opts);
  G.verify = !no_verify;
  if (G.runs < 1 || G.runs > MAXR) {
    fprintf(stderr, "layer-sgemm: --runs takes 1 ... %d\n", MAXR);
    return 2;
  }
  if (iters < 1 || iters > 1000000 || mib < 1 || n < 0) {
    fprintf(stderr,
            "layer-sgemm: --iters takes 1 ... 1000000, --mib at least 1\nusage: layer-sgemm %s",
            usage);
    return 2;
  }
  if (n == 0) { /* the largest multiple of 16 with three matrices in --mib */
    n = (int)sqrt((double)mib * (double)MiB / 12.0) / 16 * 16;
    if (n < 16)
      n = 16;
  }
  if (n > MAX_N) {
    fprintf(stderr, "layer-sgemm: --n takes 1 ... %d\n", MAX_N);
    return 2;
  }
  bench_cl_open("layer-sgemm", platform, bench_cl_code, &G.device, &G.ctx, &G.q);
  char where[600];
  printf("layer-sgemm: %s\n", bench_cl_where(G.device, where, sizeof where));
  int status = latency ? mode_latency(iters) : mode_sgemm((size_t)n);
  clReleaseCommandQueue(G.q);
  clReleaseContext(G.ctx);
  return status;
}
