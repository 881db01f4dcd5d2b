/* SPDX-License-Identifier: Apache-2.0 */
/* rect-bench: rect and image transfers (docs/API.md), each path against the
 * plain call and the pinned call, measured side by side in one process run.
 * Uses only <clpin.h> (and the benches' tested statistics) and links the
 * shared library.
 *
 * For each of write rect, read rect, write image, read image:
 *   plain     the driver's own call from / into malloc memory
 *   clpin     clpin_*_rect / clpin_*_image with CLPIN_PIN_MEMORY, malloc memory
 *   pinned    the driver's call from / into a mapped CL_MEM_ALLOC_HOST_PTR
 *             buffer (the bus)
 *   clpin pinned   clpin's call from pool memory (clpin_host_alloc): straight
 *             to DMA
 *   copy      the host copy alone (the rows gathered or scattered on
 *             CLPIN_THREADS threads, no DMA beside it); with the pinned rate
 *             it bounds what staging can give: bound = min(pinned, copy)
 * and small transfers (<= 64 KiB, and a 16-byte rect where clpin's own cost
 * per call shows most), clpin against plain, with each one's time per call,
 * and beside them the driver's call with pool memory, and the A/A control:
 * the plain call from memory of its own against the plain call (how far
 * two identical calls differ on this machine; --small runs only these).
 * Small writes take their three host buffers in turn, call by call.
 *
 * The large rect is --rows rows of --row bytes (default 4096 x 16 KiB =
 * 64 MiB), host row pitch row + 64; the image is --side x --side RGBA8
 * (default 4096: 64 MiB). Targets (docs/BENCHMARKS.md, H100), each with the count of
 * runs in which it held:
 *   write: clpin >= 4x plain and >= 0.8x the bound; read: >= 3x plain;
 *   pinned source: clpin pinned >= 0.95x pinned; small: >= 0.97x plain.
 * Every clpin transfer's data is checked in the first run; a mismatch
 * exits 3.
 *
 *   rect-bench [--platform NAME] [--runs N] [--rows N] [--row BYTES] [--side N] [--quick]
 *              [--small]
 */
#include "benchcl.h"
#include "benchstat.h"
#include "hostbound.h"
#include "clpin.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((size_t)1 << 10)
#define MAXR 64
#define PAD 64 /* host row pitch = row + PAD */

static struct {
  cl_context ctx;
  cl_command_queue q;
  cl_device_id dev;
  int runs;
  size_t rows, row, side;
  int status;
} B = {.runs = 7, .rows = 4096, .row = 16 * KiB, .side = 4096};

#define CHECK(expr) BENCH_CL_CHECK("rect-bench", expr, clpin_strerror)

/* ---- one transfer geometry ------------------------------------------------------ */

typedef enum { PLAIN, CLPIN } who;

typedef struct {
  bool image;
  cl_mem mem;
  size_t region[3]; /* rect: bytes, rows, 1; image: pixels, rows, 1 */
  size_t row_bytes, host_pitch, host_bytes;
} geo;

static size_t packed(const geo *g) { return g->row_bytes * g->region[1]; }

/* One transfer, blocking; seconds. */
static double timed(const geo *g, who w, bool write, void *host) {
  size_t z[3] = {0, 0, 0};
  unsigned flags = CLPIN_PIN_MEMORY;
  size_t hp = g->host_pitch;
  double t0 = bench_now_s();
  cl_int err;
  if (g->image) {
    if (w != CLPIN)
      err =
          write
              ? clEnqueueWriteImage(B.q, g->mem, CL_TRUE, z, g->region, hp, 0, host, 0, NULL, NULL)
              : clEnqueueReadImage(B.q, g->mem, CL_TRUE, z, g->region, hp, 0, host, 0, NULL, NULL);
    else
      err = write ? clpin_write_image(B.q, g->mem, z, g->region, g->host_pitch, 0, host, flags, 0,
                                      NULL, NULL)
                  : clpin_read_image(B.q, g->mem, z, g->region, g->host_pitch, 0, host, flags, 0,
                                     NULL, NULL);
  } else {
    if (w != CLPIN)
      err = write ? clEnqueueWriteBufferRect(B.q, g->mem, CL_TRUE, z, z, g->region, 0, 0, hp, 0,
                                             host, 0, NULL, NULL)
                  : clEnqueueReadBufferRect(B.q, g->mem, CL_TRUE, z, z, g->region, 0, 0, hp, 0,
                                            host, 0, NULL, NULL);
    else
      err = write ? clpin_write_rect(B.q, g->mem, z, z, g->region, 0, 0, g->host_pitch, 0, host,
                                     flags, 0, NULL, NULL)
                  : clpin_read_rect(B.q, g->mem, z, z, g->region, 0, 0, g->host_pitch, 0, host,
                                    flags, 0, NULL, NULL);
  }
  CHECK(err);
  return bench_now_s() - t0;
}

/* The rows of host (pitch apart) hold the pattern of seed, packed. */
static bool rows_match(const geo *g, const unsigned char *host, uint64_t seed,
                       unsigned char *scratch) {
  for (size_t r = 0; r < g->region[1]; r++)
    memcpy(scratch + r * g->row_bytes, host + r * g->host_pitch, g->row_bytes);
  return bench_mismatch(scratch, packed(g), seed) == SIZE_MAX;
}

static void fill_rows(const geo *g, unsigned char *host, uint64_t seed, unsigned char *scratch) {
  bench_fill(scratch, packed(g), seed);
  for (size_t r = 0; r < g->region[1]; r++)
    memcpy(host + r * g->host_pitch, scratch + r * g->row_bytes, g->row_bytes);
}

/* ---- the host copy alone ----------------------------------------------------------- */

typedef struct {
  const geo *g;
  unsigned char *host, *packed;
  bool gather;
} copy_rows;

static void copy_main(void *arg, int i, int k) {
  copy_rows *c = arg;
  size_t per = (c->g->region[1] + (size_t)k - 1) / (size_t)k, r0 = (size_t)i * per;
  for (size_t r = r0; r < r0 + per && r < c->g->region[1]; r++) {
    unsigned char *h = c->host + r * c->g->host_pitch, *p = c->packed + r * c->g->row_bytes;
    if (c->gather)
      memcpy(p, h, c->g->row_bytes);
    else
      memcpy(h, p, c->g->row_bytes);
  }
}

/* Seconds for the rows gathered into (or scattered out of) packed on k
 * threads. */
static double copy_alone(const geo *g, unsigned char *host, unsigned char *pk, bool gather, int k) {
  copy_rows c = {g, host, pk, gather};
  return bench_parallel_s(k, NULL, NULL, copy_main, &c);
}

/* ---- reports (benchstat.h prints them) -------------------------------------------- */

static double gbps(size_t n, double s) { return (double)n / s / 1e9; }

/* ---- the cases ------------------------------------------------------------------- */

/* "DIR: WHAT" and the median of v over the runs. */
static void print_med(const char *dir, const char *what, const double *v, const char *unit) {
  char line[192];
  snprintf(line, sizeof line, "%s: %s", dir, what);
  bench_print_median(line, v, B.runs, unit);
}

static void run_geo(const char *name, geo *g) {
  cl_int err;
  size_t n = packed(g);
  unsigned char *host = bench_alloc("rect-bench", g->host_bytes);
  unsigned char *scratch = bench_alloc("rect-bench", n);
  unsigned char *pool_mem = NULL;
  clpin_pool *pool;
  CHECK(clpin_pool_get(B.q, &pool));
  pool_mem = clpin_host_alloc(pool, g->host_bytes);
  cl_mem pin = clCreateBuffer(B.ctx, CL_MEM_ALLOC_HOST_PTR, g->host_bytes, NULL, &err);
  CHECK(err);
  unsigned char *pinned = clEnqueueMapBuffer(B.q, pin, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                             g->host_bytes, 0, NULL, NULL, &err);
  CHECK(err);
  if (!pool_mem) {
    fprintf(stderr, "rect-bench: out of pool memory\n");
    exit(1);
  }
  memset(pinned, 0, g->host_bytes);
  memset(pool_mem, 0, g->host_bytes);
  int k = (int)clpin_get_option(CLPIN_OPT_THREADS);
  k = k < 1 ? 1 : k > 64 ? 64 : k;
  char sz[32];
  char sm[32];
  size_t stream_min = clpin_get_option(CLPIN_OPT_STREAM_MIN);
  printf("%s: %s in %zu rows of %zu bytes, host row pitch %zu; reads stream from %s\n", name,
         bench_fmt_size(n, sz, sizeof sz), g->region[1], g->row_bytes, g->host_pitch,
         stream_min == SIZE_MAX ? "never" : bench_fmt_size(stream_min, sm, sizeof sm));
  for (int dir = 0; dir < 2; dir++) {
    bool write = dir == 0;
    if (!write) { /* what the reads bring back: the pattern of seed 99 */
      fill_rows(g, host, 99, scratch);
      timed(g, PLAIN, true, host);
    }
    double rp[MAXR], rc[MAXR], rpin[MAXR], rcpin[MAXR], rcopy[MAXR];
    double vs_plain[MAXR], vs_bound[MAXR], vs_pinned[MAXR];
    for (int r = -1; r < B.runs; r++) {
      uint64_t seed = 100 + (uint64_t)r * 2 + (uint64_t)dir;
      if (write)
        fill_rows(g, host, seed, scratch);
      double tp = timed(g, PLAIN, write, host);
      double tc = timed(g, CLPIN, write, host);
      if (r <= 0 && !write) {
        /* The device holds the pattern of seed 99 (set below). */
        memset(host, 0, g->host_bytes);
        timed(g, CLPIN, false, host);
        if (!rows_match(g, host, 99, scratch)) {
          fprintf(stderr, "rect-bench: %s: clpin read mismatch\n", name);
          exit(3);
        }
      }
      double tpin = timed(g, PLAIN, write, pinned);
      double tcpin = timed(g, CLPIN, write, pool_mem);
      double tcopy = copy_alone(g, host, scratch, write, k);
      if (r <= 0 && write) {
        /* The last write was clpin's from pool memory (zeros): write the
         * pattern through clpin's staged path again and check it back. */
        fill_rows(g, host, 99, scratch);
        timed(g, CLPIN, true, host);
        memset(pinned, 0, g->host_bytes);
        timed(g, PLAIN, false, pinned);
        if (!rows_match(g, pinned, 99, scratch)) {
          fprintf(stderr, "rect-bench: %s: clpin write mismatch\n", name);
          exit(3);
        }
      }
      if (r < 0)
        continue;
      rp[r] = gbps(n, tp);
      rc[r] = gbps(n, tc);
      rpin[r] = gbps(n, tpin);
      rcpin[r] = gbps(n, tcpin);
      rcopy[r] = gbps(n, tcopy);
      vs_plain[r] = tp / tc;
      double bound = rpin[r] < rcopy[r] ? rpin[r] : rcopy[r];
      vs_bound[r] = rc[r] / bound;
      vs_pinned[r] = tpin / tcpin;
    }
    const char *d = write ? "write" : "read";
    char what[128];
    print_med(d, "plain from malloc (GB/s)", rp, "GB/s");
    print_med(d, "clpin from malloc (GB/s)", rc, "GB/s");
    print_med(d, "plain from pinned (GB/s)", rpin, "GB/s");
    print_med(d, "clpin from pool memory (GB/s)", rcpin, "GB/s");
    snprintf(what, sizeof what, "%s: host copy alone, %d threads (GB/s)", d, k);
    bench_print_median(what, rcopy, B.runs, "GB/s");
    snprintf(what, sizeof what, "%s: clpin / plain", d);
    bench_print_ratio(what, vs_plain, B.runs, write ? 4.0 : 3.0);
    if (write) {
      snprintf(what, sizeof what, "%s: clpin / min(pinned, host copy)", d);
      bench_print_ratio(what, vs_bound, B.runs, 0.8);
    }
    snprintf(what, sizeof what, "%s: clpin from pool memory / pinned", d);
    bench_print_ratio(what, vs_pinned, B.runs, 0.95);
  }
  CHECK(clEnqueueUnmapMemObject(B.q, pin, pinned, 0, NULL, NULL));
  CHECK(clFinish(B.q));
  clReleaseMemObject(pin);
  clpin_host_free(pool_mem);
  free(host);
  free(scratch);
}

/* Small transfers: many calls each, clpin against plain interleaved, in
 * turn first and second (the call after another runs warmer); beside them
 * the driver's call with pool memory. */
static void run_small(const char *name, geo *g) {
  /* Each side has host memory of its own: on NVIDIA's driver, a CPU write to pages the
   * driver's own small pageable read has just used is slow (a 64 KiB copy
   * into them took 7-12 us more on the H100 machine), and the driver's next
   * pageable read into pages the CPU has written since is slow too
   * (round 7's small-read.c, docs/benchmarks/HISTORY.md): one buffer
   * shared would charge one side's effect to the other. */
  unsigned char *host = bench_alloc("rect-bench", g->host_bytes);
  unsigned char *own = bench_alloc("rect-bench", g->host_bytes);
  unsigned char *other = bench_alloc("rect-bench", g->host_bytes);
  clpin_pool *pool;
  CHECK(clpin_pool_get(B.q, &pool));
  unsigned char *pinned = clpin_host_alloc(pool, g->host_bytes);
  if (!pinned) {
    fprintf(stderr, "rect-bench: out of pool memory\n");
    exit(1);
  }
  memset(pinned, 0, g->host_bytes);
  int iters = 200;
  for (int dir = 0; dir < 2; dir++) {
    bool write = dir == 0;
    double ratio[MAXR], plain_us[MAXR], clpin_us[MAXR], pin_us[MAXR], aa_ratio[MAXR];
    for (int r = -1; r < B.runs; r++) {
      double tp = 0, tc = 0, tq = 0, ta = 0;
      for (int i = 0; i < iters; i++) {
        /* plain, clpin and plain again from memory of its own (the A/A
         * control: how far two identical calls differ here), each first,
         * second and third in turn. A write takes the three buffers in
         * turn too: where a buffer lies moves the driver's own small write
         * by 2-4% (round 9's small-probe: clpin and plain from one buffer
         * at 1.00 where rect-bench, each on its own, gave 0.95-0.97), and
         * the driver only reads them. A read keeps each side's own (the
         * comment above). */
        unsigned char *mem[3] = {host, own, other};
        int turn = write ? i % 3 : 0;
        for (int k = 0; k < 3; k++) {
          switch ((i + k) % 3) {
          case 0: tp += timed(g, PLAIN, write, mem[turn]); break;
          case 1: tc += timed(g, CLPIN, write, mem[(turn + 1) % 3]); break;
          default: ta += timed(g, PLAIN, write, mem[(turn + 2) % 3]); break;
          }
        }
        tq += timed(g, PLAIN, write, pinned);
      }
      if (r >= 0) {
        ratio[r] = tp / tc;
        plain_us[r] = tp / iters * 1e6;
        clpin_us[r] = tc / iters * 1e6;
        pin_us[r] = tq / iters * 1e6;
        aa_ratio[r] = tp / ta;
      }
    }
    const char *d = write ? "write" : "read";
    size_t n = packed(g);
    char what[128];
    snprintf(what, sizeof what, "%s %s (%zu bytes): plain, per call", name, d, n);
    bench_print_median(what, plain_us, B.runs, "us");
    snprintf(what, sizeof what, "%s %s (%zu bytes): clpin, per call", name, d, n);
    bench_print_median(what, clpin_us, B.runs, "us");
    snprintf(what, sizeof what, "%s %s (%zu bytes): plain with pool memory, per call", name, d, n);
    bench_print_median(what, pin_us, B.runs, "us");
    snprintf(what, sizeof what, "%s %s (%zu bytes): clpin / plain", name, d, n);
    bench_print_ratio(what, ratio, B.runs, 0.97);
    snprintf(what, sizeof what, "%s %s (%zu bytes): A/A, plain / plain from other memory", name, d,
             n);
    bench_print_ratio(what, aa_ratio, B.runs, 0);
  }
  clpin_host_free(pinned);
  free(host);
  free(own);
  free(other);
}

static cl_mem new_image(size_t side) {
  cl_image_format f = {CL_RGBA, CL_UNSIGNED_INT8};
  cl_image_desc d = {
      .image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = side, .image_height = side};
  cl_int err;
  cl_mem m = clCreateImage(B.ctx, CL_MEM_READ_WRITE, &f, &d, NULL, &err);
  CHECK(err);
  return m;
}

static cl_mem new_buffer(size_t n) {
  return bench_cl_buffer("rect-bench", B.ctx, n, clpin_strerror);
}

static geo rect_geo(size_t rows, size_t row) {
  return (geo){.image = false,
               .mem = new_buffer(rows * row),
               .region = {row, rows, 1},
               .row_bytes = row,
               .host_pitch = row + PAD,
               .host_bytes = rows * (row + PAD)};
}

static geo image_geo(size_t side) {
  return (geo){.image = true,
               .mem = new_image(side),
               .region = {side, side, 1},
               .row_bytes = side * 4,
               .host_pitch = side * 4 + PAD,
               .host_bytes = side * (side * 4 + PAD)};
}

int main(int argc, char **argv) {
  const char *platform_name = NULL;
  bool small_only = false, quick = false;
  int rows = (int)B.rows;
  const bench_opt opts[] = {BENCH_OPT("--platform", BENCH_TEXT, &platform_name),
                            BENCH_OPT("--runs", BENCH_INT, &B.runs),
                            BENCH_OPT("--rows", BENCH_INT, &rows),
                            BENCH_OPT("--row", BENCH_SIZE, &B.row),
                            BENCH_OPT("--side", BENCH_SIZE, &B.side),
                            BENCH_OPT("--quick", BENCH_FLAG, &quick),
                            BENCH_OPT("--small", BENCH_FLAG, &small_only)};
  BENCH_PARSE_OPTS("rect-bench",
                   "[--platform NAME] [--runs N] [--rows N] [--row BYTES] [--side N] [--quick] "
                   "[--small]\n",
                   argc, argv, opts);
  if (quick) { /* tiny sizes, at most 2 runs */
    B.runs = B.runs < 2 ? B.runs : 2;
    rows = 256;
    B.row = 4 * KiB;
    B.side = 512;
  }
  B.rows = rows > 0 ? (size_t)rows : 0;
  if (B.runs < 1 || B.runs > MAXR || !B.rows || !B.row || !B.side) {
    fprintf(stderr, "rect-bench: bad --runs (1..%d) or size\n", MAXR);
    return 2;
  }
  bench_cl_open("rect-bench", platform_name, clpin_strerror, &B.dev, &B.ctx, &B.q);
  char dname[256];
  bench_cl_name(B.dev, dname, sizeof dname);
  printf("rect-bench on %s, %d runs each (medians, min, max)\n", dname, B.runs);
  geo big_rect = rect_geo(small_only ? 1 : B.rows, B.row);
  geo big_image = image_geo(small_only ? 1 : B.side);
  if (!small_only) {
    run_geo("buffer rect", &big_rect);
    run_geo("image RGBA8", &big_image);
  }
  geo small_rect = rect_geo(64, KiB), small_image = image_geo(128);
  run_small("small rect", &small_rect);
  run_small("small image", &small_image);
  /* 16 bytes: the driver's call costs least, clpin's own share shows most. */
  geo tiny_rect = rect_geo(1, 16);
  run_small("tiny rect", &tiny_rect);
  clReleaseMemObject(tiny_rect.mem);
  clReleaseMemObject(big_rect.mem);
  clReleaseMemObject(big_image.mem);
  clReleaseMemObject(small_rect.mem);
  clReleaseMemObject(small_image.mem);
  clpin_pool_release_context(B.ctx);
  clReleaseCommandQueue(B.q);
  clReleaseContext(B.ctx);
  clpin_shutdown();
  return B.status;
}
