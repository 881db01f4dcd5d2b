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
 *   clpin rows     clpin's call with CLPIN_STREAM_MIN unlimited: the rows
 *             gathered or scattered by memcpy instead of streaming stores,
 *             before or after clpin's default call in turn
 *   bands     the pinned call cut into 8 and 32 calls of whole rows, and
 *             what one more device-side call costs ((t32 - t1) / 31)
 *   busy      the pinned call while CLPIN_THREADS threads copy memory beside
 *             it: the DMA's own rate on a busy host
 *   (rect only) clpin's rect with the host rows packed, and clpin_write /
 *             clpin_read of the same bytes as one range: what the row pitch
 *             and the rect calls cost the staged rect
 *   copy      the host copy alone (the rows gathered or scattered on
 *             CLPIN_THREADS threads, no DMA beside it); with the pinned rate
 *             it bounds what staging can give: bound = min(pinned, copy)
 * and small transfers (<= 64 KiB, and a 16-byte rect where clpin's own cost
 * per call shows most), clpin against plain, with each one's time per call,
 * and beside them the driver's call with pool memory, alone and with the
 * copy of the rows a one-block staging path would add (into the pool
 * memory before a write, out of it after a read), and the A/A control:
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
#include <stdatomic.h>
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

static double now(void) { return bench_now_s(); }

/* ---- one transfer geometry ------------------------------------------------------ */

/* PACKED: the driver's call with the host rows packed (host pitch 0). */
typedef enum { PLAIN, CLPIN, PACKED } who;

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
  size_t hp = w == PACKED ? 0 : g->host_pitch;
  double t0 = now();
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
  return now() - t0;
}

/* A clpin transfer with the rows moved by memcpy, as before streaming
 * stores (CLPIN_STREAM_MIN unlimited for the call); seconds. */
static double timed_memcpy_rows(const geo *g, bool write, void *host) {
  size_t keep = clpin_get_option(CLPIN_OPT_STREAM_MIN);
  CHECK(clpin_set_option(CLPIN_OPT_STREAM_MIN, SIZE_MAX));
  double t = timed(g, CLPIN, write, host);
  CHECK(clpin_set_option(CLPIN_OPT_STREAM_MIN, keep));
  return t;
}

/* The same bytes through clpin another way, for a buffer rect only:
 * packed = true, the rect with the host rows packed (host pitch = row);
 * false, clpin_write / clpin_read of them as one contiguous range. Where
 * the staged rect loses against these, the rect calls or the row pitch
 * cost it. Seconds. */
static double timed_other(const geo *g, bool write, void *host, bool packed_rows) {
  size_t z[3] = {0, 0, 0}, n = g->row_bytes * g->region[1];
  unsigned flags = CLPIN_PIN_MEMORY;
  double t0 = now();
  cl_int err;
  if (packed_rows)
    err =
        write
            ? clpin_write_rect(B.q, g->mem, z, z, g->region, 0, 0, 0, 0, host, flags, 0, NULL, NULL)
            : clpin_read_rect(B.q, g->mem, z, z, g->region, 0, 0, 0, 0, host, flags, 0, NULL, NULL);
  else
    err = write ? clpin_write(B.q, g->mem, 0, host, n, flags, 0, NULL, NULL)
                : clpin_read(B.q, g->mem, 0, host, n, flags, 0, NULL, NULL);
  CHECK(err);
  return now() - t0;
}

/* The driver's own call from / into pinned memory cut into nb bands of
 * rows, all enqueued, then one clFinish: what each device-side call of a
 * staged transfer costs beside the bytes it moves. Seconds. */
static double timed_bands(const geo *g, bool write, unsigned char *pinned, size_t nb) {
  size_t rows = g->region[1];
  double t0 = now();
  for (size_t b = 0; b < nb; b++) {
    size_t y = rows * b / nb, ny = rows * (b + 1) / nb - y;
    size_t o[3] = {0, y, 0};
    size_t region[3] = {g->region[0], ny, 1};
    cl_int err;
    if (g->image)
      err = write ? clEnqueueWriteImage(B.q, g->mem, CL_FALSE, o, region, g->host_pitch, 0,
                                        pinned + y * g->host_pitch, 0, NULL, NULL)
                  : clEnqueueReadImage(B.q, g->mem, CL_FALSE, o, region, g->host_pitch, 0,
                                       pinned + y * g->host_pitch, 0, NULL, NULL);
    else
      err = write ? clEnqueueWriteBufferRect(B.q, g->mem, CL_FALSE, o, o, region, 0, 0,
                                             g->host_pitch, 0, pinned, 0, NULL, NULL)
                  : clEnqueueReadBufferRect(B.q, g->mem, CL_FALSE, o, o, region, 0, 0,
                                            g->host_pitch, 0, pinned, 0, NULL, NULL);
    CHECK(err);
  }
  CHECK(clFinish(B.q));
  return now() - t0;
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

/* The pinned call while k threads copy memory to memory (each its share of
 * n bytes from a to b, over and over): how much the DMA itself slows when
 * the host's memory is busy, as it is beside a staged transfer's copies.
 * Seconds of the call. */
typedef struct {
  const unsigned char *a;
  unsigned char *b;
  size_t n;
  atomic_bool *stop;
} hog;

static void *hog_main(void *arg) {
  hog *h = arg;
  while (!atomic_load_explicit(h->stop, memory_order_relaxed))
    memcpy(h->b, h->a, h->n);
  return NULL;
}

static double timed_busy(const geo *g, bool write, unsigned char *pinned, int k,
                         const unsigned char *a, unsigned char *b, size_t n) {
  pthread_t th[64];
  hog hs[64];
  atomic_bool stop = false;
  size_t per = n / (size_t)k;
  for (int i = 0; i < k; i++) {
    hs[i] = (hog){a + (size_t)i * per, b + (size_t)i * per, per, &stop};
    pthread_create(&th[i], NULL, hog_main, &hs[i]);
  }
  double t = timed_bands(g, write, pinned, 1);
  atomic_store(&stop, true);
  for (int i = 0; i < k; i++)
    pthread_join(th[i], NULL);
  return t;
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
  unsigned char *host = malloc(g->host_bytes), *scratch = malloc(n);
  unsigned char *hog_a = malloc(n), *hog_b = malloc(n);
  unsigned char *pool_mem = NULL;
  clpin_pool *pool;
  CHECK(clpin_pool_get(B.q, &pool));
  pool_mem = clpin_host_alloc(pool, g->host_bytes);
  cl_mem pin = clCreateBuffer(B.ctx, CL_MEM_ALLOC_HOST_PTR, g->host_bytes, NULL, &err);
  CHECK(err);
  unsigned char *pinned = clEnqueueMapBuffer(B.q, pin, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                             g->host_bytes, 0, NULL, NULL, &err);
  CHECK(err);
  if (!host || !scratch || !pool_mem || !hog_a || !hog_b) {
    fprintf(stderr, "rect-bench: out of memory\n");
    exit(1);
  }
  memset(host, 0, g->host_bytes);
  memset(hog_a, 1, n);
  memset(hog_b, 2, n);
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
    double rp[MAXR], rc[MAXR], rpin[MAXR], rcpin[MAXR], rcopy[MAXR], rcm[MAXR], vs_rows[MAXR];
    double vs_plain[MAXR], vs_bound[MAXR], vs_pinned[MAXR], rpacked[MAXR], rlinear[MAXR];
    double rb8[MAXR], rb32[MAXR], us_call[MAXR], rbusy[MAXR];
    for (int r = -1; r < B.runs; r++) {
      uint64_t seed = 100 + (uint64_t)r * 2 + (uint64_t)dir;
      if (write)
        fill_rows(g, host, seed, scratch);
      double tp = timed(g, PLAIN, write, host);
      /* Also with its rows moved by memcpy (CLPIN_STREAM_MIN unlimited),
       * before or after the default in turn. */
      double tcm = r % 2 ? timed_memcpy_rows(g, write, host) : 0;
      double tc = timed(g, CLPIN, write, host);
      if (!(r % 2))
        tcm = timed_memcpy_rows(g, write, host);
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
      double tb1 = timed_bands(g, write, pinned, 1), tb8 = timed_bands(g, write, pinned, 8);
      double tb32 = timed_bands(g, write, pinned, 32);
      double tbusy = timed_busy(g, write, pinned, k, hog_a, hog_b, n);
      double tpacked = g->image ? 0 : timed_other(g, write, host, true);
      double tlinear = g->image ? 0 : timed_other(g, write, host, false);
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
      rcm[r] = gbps(n, tcm);
      vs_rows[r] = tcm / tc;
      rpin[r] = gbps(n, tpin);
      rcpin[r] = gbps(n, tcpin);
      rcopy[r] = gbps(n, tcopy);
      vs_plain[r] = tp / tc;
      double bound = rpin[r] < rcopy[r] ? rpin[r] : rcopy[r];
      vs_bound[r] = rc[r] / bound;
      vs_pinned[r] = tpin / tcpin;
      rb8[r] = gbps(n, tb8);
      rb32[r] = gbps(n, tb32);
      us_call[r] = (tb32 - tb1) / 31 * 1e6;
      rbusy[r] = gbps(n, tbusy);
      rpacked[r] = g->image ? 0 : gbps(n, tpacked);
      rlinear[r] = g->image ? 0 : gbps(n, tlinear);
    }
    const char *d = write ? "write" : "read";
    char what[128];
    print_med(d, "plain from malloc (GB/s)", rp, "GB/s");
    print_med(d, "clpin from malloc (GB/s)", rc, "GB/s");
    print_med(d, "clpin from malloc, rows by memcpy (GB/s)", rcm, "GB/s");
    print_med(d, "plain from pinned (GB/s)", rpin, "GB/s");
    print_med(d, "clpin from pool memory (GB/s)", rcpin, "GB/s");
    snprintf(what, sizeof what, "%s: host copy alone, %d threads (GB/s)", d, k);
    bench_print_median(what, rcopy, B.runs, "GB/s");
    print_med(d, "plain from pinned in 8 calls (GB/s)", rb8, "GB/s");
    print_med(d, "plain from pinned in 32 calls (GB/s)", rb32, "GB/s");
    print_med(d, "cost of one more device-side call (us)", us_call, "us");
    snprintf(what, sizeof what, "plain from pinned, %d copying threads beside (GB/s)", k);
    print_med(d, what, rbusy, "GB/s");
    if (!g->image) {
      print_med(d, "clpin, host rows packed (GB/s)", rpacked, "GB/s");
      snprintf(what, sizeof what, "%s: clpin_%s of the bytes as one range (GB/s)", d, d);
      bench_print_median(what, rlinear, B.runs, "GB/s");
    }
    snprintf(what, sizeof what, "%s: clpin / plain", d);
    bench_print_ratio(what, vs_plain, B.runs, write ? 4.0 : 3.0);
    if (write) {
      snprintf(what, sizeof what, "%s: clpin / min(pinned, host copy)", d);
      bench_print_ratio(what, vs_bound, B.runs, 0.8);
    }
    snprintf(what, sizeof what, "%s: clpin from pool memory / pinned", d);
    bench_print_ratio(what, vs_pinned, B.runs, 0.95);
    snprintf(what, sizeof what, "%s: clpin / clpin with rows by memcpy", d);
    bench_print_ratio(what, vs_rows, B.runs, 0);
  }
  CHECK(clEnqueueUnmapMemObject(B.q, pin, pinned, 0, NULL, NULL));
  CHECK(clFinish(B.q));
  clReleaseMemObject(pin);
  clpin_host_free(pool_mem);
  free(host);
  free(scratch);
  free(hog_a);
  free(hog_b);
}

/* A small transfer as a one-block staging path would make it: the rows
 * copied into pinned memory and the driver's blocking call from there (a
 * write), or the call into pinned memory and the rows copied out (a read);
 * seconds. */
static double timed_via_pinned(const geo *g, bool write, unsigned char *host,
                               unsigned char *pinned) {
  double t0 = now();
  if (write)
    memcpy(pinned, host, g->host_bytes);
  timed(g, PLAIN, write, pinned);
  if (!write)
    memcpy(host, pinned, g->host_bytes);
  return now() - t0;
}

/* The same with the rows packed in pool memory and copied one by one. */
static double timed_via_packed(const geo *g, bool write, unsigned char *host,
                               unsigned char *pinned) {
  double t0 = now();
  size_t rb = g->row_bytes;
  for (size_t r = 0; write && r < g->region[1]; r++)
    memcpy(pinned + r * rb, host + r * g->host_pitch, rb);
  timed(g, PACKED, write, pinned);
  for (size_t r = 0; !write && r < g->region[1]; r++)
    memcpy(host + r * g->host_pitch, pinned + r * rb, rb);
  return now() - t0;
}

/* Small transfers: many calls each, clpin against plain interleaved, in
 * turn first and second (the call after another runs warmer); beside them
 * the driver's call into pool memory, alone and with the copy a one-block
 * staging path would add. */
static void run_small(const char *name, geo *g) {
  /* Each side has host memory of its own, and the copies of the pool
   * memory rows a third: on NVIDIA's driver, a CPU write to pages the
   * driver's own small pageable read has just used is slow (a 64 KiB copy
   * into them took 7-12 us more on the H100 machine), and the driver's next
   * pageable read into pages the CPU has written since is slow too
   * (round 7's small-read.c, docs/benchmarks/HISTORY.md): one buffer
   * shared would charge one side's effect to the other. */
  unsigned char *host = calloc(1, g->host_bytes), *own = calloc(1, g->host_bytes);
  unsigned char *scratch = calloc(1, g->host_bytes), *other = calloc(1, g->host_bytes);
  clpin_pool *pool;
  CHECK(clpin_pool_get(B.q, &pool));
  unsigned char *pinned = clpin_host_alloc(pool, g->host_bytes);
  if (!host || !own || !scratch || !other || !pinned) {
    fprintf(stderr, "rect-bench: out of memory\n");
    exit(1);
  }
  memset(pinned, 0, g->host_bytes);
  int iters = 200;
  for (int dir = 0; dir < 2; dir++) {
    bool write = dir == 0;
    double ratio[MAXR], plain_us[MAXR], clpin_us[MAXR], pin_us[MAXR], via_us[MAXR], via_ratio[MAXR];
    double pk_us[MAXR], vpk_us[MAXR], aa_ratio[MAXR];
    for (int r = -1; r < B.runs; r++) {
      double tp = 0, tc = 0, tq = 0, tv = 0, tk = 0, tvk = 0, ta = 0;
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
        tv += timed_via_pinned(g, write, scratch, pinned);
        tk += timed(g, PACKED, write, pinned);
        tvk += timed_via_packed(g, write, scratch, pinned);
      }
      if (r >= 0) {
        ratio[r] = tp / tc;
        plain_us[r] = tp / iters * 1e6;
        clpin_us[r] = tc / iters * 1e6;
        pin_us[r] = tq / iters * 1e6;
        via_us[r] = tv / iters * 1e6;
        via_ratio[r] = tp / tv;
        pk_us[r] = tk / iters * 1e6;
        vpk_us[r] = tvk / iters * 1e6;
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
    snprintf(what, sizeof what, "%s %s (%zu bytes): via pool memory + memcpy, per call", name, d,
             n);
    bench_print_median(what, via_us, B.runs, "us");
    snprintf(what, sizeof what, "%s %s (%zu bytes): plain, pool memory, rows packed", name, d, n);
    bench_print_median(what, pk_us, B.runs, "us");
    snprintf(what, sizeof what, "%s %s (%zu bytes): via pool memory, rows packed", name, d, n);
    bench_print_median(what, vpk_us, B.runs, "us");
    snprintf(what, sizeof what, "%s %s (%zu bytes): clpin / plain", name, d, n);
    bench_print_ratio(what, ratio, B.runs, 0.97);
    snprintf(what, sizeof what, "%s %s (%zu bytes): via pool memory / plain", name, d, n);
    bench_print_ratio(what, via_ratio, B.runs, 0);
    snprintf(what, sizeof what, "%s %s (%zu bytes): A/A, plain / plain from other memory", name, d,
             n);
    bench_print_ratio(what, aa_ratio, B.runs, 0);
  }
  clpin_host_free(pinned);
  free(host);
  free(own);
  free(scratch);
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
  cl_int err;
  cl_mem m = clCreateBuffer(B.ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CHECK(err);
  return m;
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
  bool small_only = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quick")) {
      B.runs = 2;
      B.rows = 256;
      B.row = 4 * KiB;
      B.side = 512;
    } else if (!strcmp(a, "--small")) {
      small_only = true;
    } else if (!strcmp(a, "--platform") && v) {
      platform_name = argv[++i];
    } else if (!strcmp(a, "--runs") && v) {
      B.runs = atoi(argv[++i]);
    } else if (!strcmp(a, "--rows") && v) {
      B.rows = strtoul(argv[++i], NULL, 0);
    } else if ((!strcmp(a, "--row") || !strcmp(a, "--side")) && v) {
      size_t s;
      if (!bench_parse_size(argv[++i], &s)) {
        fprintf(stderr, "rect-bench: bad size %s\n", argv[i]);
        return 2;
      }
      *(a[2] == 'r' ? &B.row : &B.side) = s;
    } else {
      fprintf(stderr, "usage: rect-bench [--platform NAME] [--runs N] [--rows N] [--row BYTES] "
                      "[--side N] [--quick] [--small]\n");
      return 2;
    }
  }
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
