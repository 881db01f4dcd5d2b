/* engine-bench: the transfer engine as real programs use it, against the
 * baselines that matter, all measured side by side in one process run. It
 * uses only <clpin.h> and links the shared library, so what it measures is
 * the libclpin.so users get.
 *
 * Cases (--case a,b,...; default all):
 *   latency     non-blocking staged write/read of --big bytes from malloc:
 *               time until the call returns, against the whole transfer
 *   duplex      H2D and D2H at once from two threads, each on its own queue,
 *               --big bytes each: pool memory (clpin_host_alloc) and staged
 *               malloc memory, against the faster single direction; and the
 *               host's memcpy rate on 16 threads, which bounds staged duplex
 *   concurrent  4 threads each writing --mid bytes from malloc on its own
 *               queue, against one writer alone; and slowest / fastest
 *   sweep       4 KiB ... --sweep-max (factors of 4; of 2 from 1 to 16 MiB),
 *               both directions, clpin_write/read with CLPIN_PIN_MEMORY
 *               against a plain transfer, each size's pair interleaved
 *   pinned      --mid and 1 GiB from malloc through clpin against the same
 *               plain transfer from a mapped CL_MEM_ALLOC_HOST_PTR buffer,
 *               with the rates and the bound the host copy alone sets
 *   hit         pool hit (clpin_acquire + clpin_release, one size), one
 *               thread and 16 threads
 *
 * Every figure is run --runs times; each line prints the median, min and
 * max, and for targets in how many runs the target held. Every transfer's
 * data is checked; a mismatch exits 3.
 *
 *   engine-bench [--platform NAME] [--case LIST] [--runs N] [--quick]
 */
#include "benchcl.h"
#include "benchstat.h"
#include "clpin.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define MAXR 64

static struct {
  cl_platform_id platform;
  cl_device_id device;
  cl_context ctx;
  cl_command_queue q[16];
  clpin_pool *pool;
  int runs;
  size_t big, mid, sweep_max, huge;
  bool quick;
  int status;
} B = {.runs = 7, .big = 256 * MiB, .mid = 64 * MiB, .sweep_max = 1024 * MiB, .huge = 1024 * MiB};

#define CHECK(expr) BENCH_CL_CHECK("engine-bench", expr, clpin_strerror)

static double now(void) { return bench_now_s(); }

typedef struct {
  double med, min, max;
} stat3;

/* Median, min and max of n samples, left in place (benchstat sorts). */
static stat3 stats_of(const double *v, int n) {
  double s[MAXR];
  memcpy(s, v, (size_t)n * sizeof *s);
  bench_summary b = bench_summarize(s, (size_t)n);
  return (stat3){b.median, b.min, b.max};
}

/* One line per figure: median [min..max]. */
static void report(const char *what, const double *v, int n, const char *unit) {
  stat3 s = stats_of(v, n);
  printf("  %-58s %10.3f %-5s [%.3f .. %.3f]\n", what, s.med, unit, s.min, s.max);
}

/* A target line: the ratio's median and spread, and in how many runs it
 * held (ge: ratio >= goal; else ratio <= goal). */
static void target(const char *what, const double *ratio, int n, double goal, bool ge) {
  int held = 0;
  for (int i = 0; i < n; i++)
    held += ge ? ratio[i] >= goal : ratio[i] <= goal;
  stat3 s = stats_of(ratio, n);
  printf("  TARGET %-51s %10.3f       [%.3f .. %.3f]  %s %.3g  held %d/%d  %s\n", what, s.med,
         s.min, s.max, ge ? ">=" : "<=", goal, held, n,
         (ge ? s.med >= goal : s.med <= goal) ? "met" : "MISSED");
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  uint64_t *w = (uint64_t *)p;
  uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (size_t i = 0; i < n / 8; i++)
    w[i] = x + i * 0x100000001b3ull;
  for (size_t i = n / 8 * 8; i < n; i++)
    p[i] = (unsigned char)(seed + i);
}

static void expect_same(const void *a, const void *b, size_t n, const char *what) {
  if (memcmp(a, b, n)) {
    fprintf(stderr, "engine-bench: data mismatch: %s\n", what);
    exit(3);
  }
}

static unsigned char *xmalloc(size_t n) {
  unsigned char *p = malloc(n);
  if (!p) {
    fprintf(stderr, "engine-bench: out of memory (%zu bytes)\n", n);
    exit(1);
  }
  memset(p, 0, n); /* fault the pages in: a first touch is not a transfer */
  return p;
}

static cl_mem dev_buffer(size_t n) {
  cl_int err;
  cl_mem m = clCreateBuffer(B.ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CHECK(err);
  return m;
}

/* ---- transfers ------------------------------------------------------------ */

typedef enum { PLAIN, CLPIN } how;

static void xfer(cl_command_queue q, how h, bool h2d, cl_mem m, void *host, size_t n) {
  if (h == PLAIN) {
    CHECK(h2d ? clEnqueueWriteBuffer(q, m, CL_TRUE, 0, n, host, 0, NULL, NULL)
              : clEnqueueReadBuffer(q, m, CL_TRUE, 0, n, host, 0, NULL, NULL));
  } else {
    CHECK(h2d ? clpin_write(q, m, 0, host, n, CLPIN_PIN_MEMORY, 0, NULL, NULL)
              : clpin_read(q, m, 0, host, n, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  }
}

/* Seconds for one transfer, timed to completion. */
static double timed(cl_command_queue q, how h, bool h2d, cl_mem m, void *host, size_t n) {
  CHECK(clFinish(q));
  double t = now();
  xfer(q, h, h2d, m, host, n);
  CHECK(clFinish(q));
  return now() - t;
}

/* ---- latency ---------------------------------------------------------------- */

static void latency_floor(void);

static void case_latency(void) {
  printf("latency: non-blocking staged transfer of %zu MiB from malloc\n", B.big / MiB);
  unsigned char *a = xmalloc(B.big), *b = xmalloc(B.big);
  cl_mem m = dev_buffer(B.big);
  for (int dir = 0; dir < 2; dir++) {
    double ret_us[MAXR], ratio[MAXR], total_ms[MAXR];
    for (int r = -1; r < B.runs; r++) {
      fill(a, B.big, (unsigned)r + 7);
      cl_event ev;
      CHECK(clFinish(B.q[0]));
      double t0 = now();
      if (dir == 0)
        CHECK(clpin_write(B.q[0], m, 0, a, B.big, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL,
                          &ev));
      else
        CHECK(clpin_read(B.q[0], m, 0, b, B.big, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL,
                         &ev));
      double t1 = now();
      CHECK(clWaitForEvents(1, &ev));
      double t2 = now();
      clReleaseEvent(ev);
      if (r < 0)
        continue; /* warm-up: pool blocks, workers */
      ret_us[r] = (t1 - t0) * 1e6;
      total_ms[r] = (t2 - t0) * 1e3;
      ratio[r] = (t1 - t0) / (t2 - t0);
    }
    if (dir == 1) {
      /* The read's data: what the last write left on the device. */
      fill(a, B.big, (unsigned)B.runs - 1 + 7);
      expect_same(a, b, B.big, "non-blocking read");
    }
    const char *d = dir == 0 ? "write" : "read";
    char what[96];
    snprintf(what, sizeof what, "%s: call returns after (us)", d);
    report(what, ret_us, B.runs, "us");
    snprintf(what, sizeof what, "%s: whole transfer (ms)", d);
    report(what, total_ms, B.runs, "ms");
    snprintf(what, sizeof what, "%s: return time <= 100 us", d);
    target(what, ret_us, B.runs, 100.0, false);
    snprintf(what, sizeof what, "%s: return / whole transfer <= 1%%", d);
    target(what, ratio, B.runs, 0.01, false);
  }
  latency_floor();
  clReleaseMemObject(m);
  free(a);
  free(b);
}

/* What the driver's calls that a non-blocking staged call must make cost on
 * their own (median of MAXR each, microseconds): two markers on the
 * caller's queue (one behind the caller's wait list, one behind a user
 * event: they keep the queue's order), the user event, a flush, and one
 * status query. Their sum is a floor under the call's return time. */
static void latency_floor(void) {
  cl_command_queue q = B.q[0];
  double t[5][MAXR];
  for (int i = -1; i < MAXR; i++) {
    cl_int err;
    CHECK(clFinish(q));
    double t0 = now();
    cl_event user = clCreateUserEvent(B.ctx, &err);
    double t1 = now();
    CHECK(err);
    cl_event w, m;
    CHECK(clEnqueueMarkerWithWaitList(q, 0, NULL, &w));
    double t2 = now();
    CHECK(clEnqueueMarkerWithWaitList(q, 1, &user, &m));
    double t3 = now();
    CHECK(clFlush(q));
    double t4 = now();
    cl_int st;
    CHECK(clGetEventInfo(w, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
    double t5 = now();
    CHECK(clSetUserEventStatus(user, CL_COMPLETE));
    CHECK(clWaitForEvents(1, &m));
    clReleaseEvent(w);
    clReleaseEvent(m);
    clReleaseEvent(user);
    if (i < 0)
      continue;
    t[0][i] = (t1 - t0) * 1e6;
    t[1][i] = (t2 - t1) * 1e6;
    t[2][i] = (t3 - t2) * 1e6;
    t[3][i] = (t4 - t3) * 1e6;
    t[4][i] = (t5 - t4) * 1e6;
  }
  static const char *const names[5] = {"floor: clCreateUserEvent (us)",
                                       "floor: marker, no wait list (us)",
                                       "floor: marker behind a user event (us)",
                                       "floor: clFlush (us)", "floor: clGetEventInfo status (us)"};
  double sum = 0;
  for (int k = 0; k < 5; k++) {
    report(names[k], t[k], MAXR, "us");
    sum += stats_of(t[k], MAXR).med;
  }
  printf("  %-58s %10.3f us (sum of the medians)\n", "floor: the driver's calls together", sum);
}

/* ---- threads moving data at once --------------------------------------------- */

typedef struct {
  cl_command_queue q;
  cl_mem m;
  unsigned char *host;
  size_t n;
  bool h2d;
  how h;
  pthread_barrier_t *go;
  double start, end, secs;
} mover;

static void *mover_main(void *arg) {
  mover *mv = arg;
  pthread_barrier_wait(mv->go);
  mv->start = now();
  xfer(mv->q, mv->h, mv->h2d, mv->m, mv->host, mv->n);
  CHECK(clFinish(mv->q));
  mv->end = now();
  mv->secs = mv->end - mv->start;
  return NULL;
}

/* Run k movers at once; returns the wall time of the whole, from the
 * first start to the last end. */
static double run_movers(mover *mv, int k) {
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, (unsigned)k);
  pthread_t th[16];
  for (int i = 0; i < k; i++) {
    mv[i].go = &go;
    pthread_create(&th[i], NULL, mover_main, &mv[i]);
  }
  double first = 1e300, last = 0;
  for (int i = 0; i < k; i++) {
    pthread_join(th[i], NULL);
    first = mv[i].start < first ? mv[i].start : first;
    last = mv[i].end > last ? mv[i].end : last;
  }
  pthread_barrier_destroy(&go);
  return last - first;
}

static double gbps(size_t bytes, double secs) { return (double)bytes / secs / 1e9; }

static void duplex_for(const char *label, unsigned char *up, unsigned char *down) {
  size_t n = B.big;
  cl_mem m1 = dev_buffer(n), m2 = dev_buffer(n);
  double h2d[MAXR], d2h[MAXR], both[MAXR], ratio[MAXR];
  for (int r = -1; r < B.runs; r++) {
    fill(up, n, (unsigned)r + 100);
    mover w = {.q = B.q[0], .m = m1, .host = up, .n = n, .h2d = true, .h = CLPIN};
    mover rd = {.q = B.q[1], .m = m2, .host = down, .n = n, .h2d = false, .h = CLPIN};
    double t_w = run_movers(&w, 1);
    double t_r = run_movers(&rd, 1);
    mover pair[2] = {w, rd};
    double t_both = run_movers(pair, 2);
    unsigned char *check = xmalloc(n);
    CHECK(clEnqueueReadBuffer(B.q[0], m1, CL_TRUE, 0, n, check, 0, NULL, NULL));
    expect_same(check, up, n, "duplex write");
    free(check);
    if (r < 0)
      continue;
    h2d[r] = gbps(n, t_w);
    d2h[r] = gbps(n, t_r);
    both[r] = gbps(2 * n, t_both);
    ratio[r] = both[r] / (h2d[r] > d2h[r] ? h2d[r] : d2h[r]);
  }
  char what[96];
  snprintf(what, sizeof what, "%s: H2D alone (GB/s)", label);
  report(what, h2d, B.runs, "GB/s");
  snprintf(what, sizeof what, "%s: D2H alone (GB/s)", label);
  report(what, d2h, B.runs, "GB/s");
  snprintf(what, sizeof what, "%s: both at once, together (GB/s)", label);
  report(what, both, B.runs, "GB/s");
  snprintf(what, sizeof what, "%s: duplex / faster single direction", label);
  target(what, ratio, B.runs, strstr(label, "pool") ? 1.5 : 1.0, true);
  clReleaseMemObject(m1);
  clReleaseMemObject(m2);
}

typedef struct {
  unsigned char *dst, *src;
  size_t n;
  pthread_barrier_t *go;
} memcpy_arg;

static void *memcpy_main(void *arg) {
  memcpy_arg *a = arg;
  pthread_barrier_wait(a->go);
  memcpy(a->dst, a->src, a->n);
  return NULL;
}

/* What the host's memory allows: k threads (at most 64) copying n bytes in
 * all, GB/s. */
static double memcpy_threads(unsigned char *dst, unsigned char *src, size_t n, int k) {
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, (unsigned)k + 1);
  memcpy_arg a[64];
  pthread_t th[64];
  size_t part = n / (size_t)k;
  for (int i = 0; i < k; i++) {
    size_t len = i + 1 == k ? n - (size_t)i * part : part;
    a[i] = (memcpy_arg){dst + (size_t)i * part, src + (size_t)i * part, len, &go};
    pthread_create(&th[i], NULL, memcpy_main, &a[i]);
  }
  pthread_barrier_wait(&go);
  double t = now();
  for (int i = 0; i < k; i++)
    pthread_join(th[i], NULL);
  double s = now() - t;
  pthread_barrier_destroy(&go);
  return gbps(n, s);
}

static void case_duplex(void) {
  printf("duplex: H2D and D2H at once, two threads, own queues, %zu MiB each\n", B.big / MiB);
  unsigned char *up = clpin_host_alloc(B.pool, B.big), *down = clpin_host_alloc(B.pool, B.big);
  if (!up || !down) {
    fprintf(stderr, "engine-bench: no pinned memory for the duplex case\n");
    exit(1);
  }
  duplex_for("pool memory", up, down);
  clpin_host_free(up);
  clpin_host_free(down);
  up = xmalloc(B.big);
  down = xmalloc(B.big);
  duplex_for("staged malloc memory", up, down);
  double mc[MAXR];
  for (int r = 0; r < B.runs; r++)
    mc[r] = memcpy_threads(down, up, B.big, 16);
  report("host memcpy, 16 threads (GB/s): bounds staged duplex", mc, B.runs, "GB/s");
  free(up);
  free(down);
}

static void case_concurrent(void) {
  enum { K = 4 };
  printf("concurrent: %d writers, %zu MiB each from malloc, own queues\n", K, B.mid / MiB);
  mover mv[K];
  cl_mem m[K];
  for (int i = 0; i < K; i++) {
    m[i] = dev_buffer(B.mid);
    mv[i] = (mover){
        .q = B.q[i], .m = m[i], .host = xmalloc(B.mid), .n = B.mid, .h2d = true, .h = CLPIN};
  }
  double one[MAXR], agg[MAXR], ratio[MAXR], fair[MAXR];
  for (int r = -1; r < B.runs; r++) {
    for (int i = 0; i < K; i++)
      fill(mv[i].host, B.mid, (unsigned)(r * K + i + 300));
    double t1 = run_movers(&mv[0], 1);
    double tk = run_movers(mv, K);
    double lo = 1e30, hi = 0;
    for (int i = 0; i < K; i++) {
      double g = gbps(B.mid, mv[i].secs);
      lo = g < lo ? g : lo;
      hi = g > hi ? g : hi;
      unsigned char *check = xmalloc(B.mid);
      CHECK(clEnqueueReadBuffer(B.q[i], m[i], CL_TRUE, 0, B.mid, check, 0, NULL, NULL));
      expect_same(check, mv[i].host, B.mid, "concurrent write");
      free(check);
    }
    if (r < 0)
      continue;
    one[r] = gbps(B.mid, t1);
    agg[r] = gbps(K * B.mid, tk);
    ratio[r] = agg[r] / one[r];
    fair[r] = lo / hi;
  }
  report("one writer (GB/s)", one, B.runs, "GB/s");
  report("4 writers together (GB/s)", agg, B.runs, "GB/s");
  target("4 writers together / one writer", ratio, B.runs, 1.0, true);
  target("slowest writer / fastest writer", fair, B.runs, 0.5, true);
  for (int i = 0; i < K; i++) {
    clReleaseMemObject(m[i]);
    free(mv[i].host);
  }
}

/* ---- sizes -------------------------------------------------------------------- */

/* clpin against plain, one size, one direction: pairs interleaved so drift
 * hits both alike. Returns the per-run ratios plain time / clpin time. */
static void versus_plain(size_t n, bool h2d, unsigned char *host, cl_mem m, double *ratio,
                         int runs) {
  int reps = n <= MiB ? 15 : n <= 64 * MiB ? 5 : 3;
  for (int r = -1; r < runs; r++) {
    double tp[16], tc[16];
    for (int k = 0; k < reps; k++) {
      tp[k] = timed(B.q[0], PLAIN, h2d, m, host, n);
      tc[k] = timed(B.q[0], CLPIN, h2d, m, host, n);
    }
    if (r >= 0)
      ratio[r] = stats_of(tp, reps).med / stats_of(tc, reps).med;
  }
}

static void case_sweep(void) {
  printf("sweep: CLPIN_PIN_MEMORY against a plain transfer from malloc (ratio > 1: clpin "
         "faster)\n");
  unsigned char *host = xmalloc(B.sweep_max);
  cl_mem m = dev_buffer(B.sweep_max);
  fill(host, B.sweep_max, 5);
  for (int dir = 0; dir < 2; dir++) {
    double worst[MAXR];
    for (int r = 0; r < B.runs; r++)
      worst[r] = 1e30;
    /* Factors of 4, and of 2 from 1 MiB to 16 MiB: around CLPIN_STAGE_MIN
     * and CLPIN_CHUNK, where the path changes. */
    for (size_t n = 4 * KiB; n <= B.sweep_max; n *= n >= MiB && n < 16 * MiB ? 2 : 4) {
      double ratio[MAXR];
      versus_plain(n, dir == 0, host, m, ratio, B.runs);
      for (int r = 0; r < B.runs; r++)
        worst[r] = ratio[r] < worst[r] ? ratio[r] : worst[r];
      char what[96];
      snprintf(what, sizeof what, "%s %8zu KiB: plain time / clpin time", dir == 0 ? "H2D" : "D2H",
               n / KiB);
      target(what, ratio, B.runs, 0.97, true);
    }
    target(dir == 0 ? "H2D: worst size of each run" : "D2H: worst size of each run", worst, B.runs,
           0.97, true);
  }
  clReleaseMemObject(m);
  free(host);
}

static void case_pinned(void) {
  printf("pinned: staged malloc memory against a mapped CL_MEM_ALLOC_HOST_PTR buffer\n");
  size_t sizes[2] = {B.mid, B.huge};
  cl_int err;
  for (int s = 0; s < 2; s++) {
    size_t n = sizes[s];
    cl_mem m = dev_buffer(n);
    cl_mem pin = clCreateBuffer(B.ctx, CL_MEM_ALLOC_HOST_PTR, n, NULL, &err);
    CHECK(err);
    void *p = clEnqueueMapBuffer(B.q[0], pin, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, n, 0, NULL,
                                 NULL, &err);
    CHECK(err);
    unsigned char *host = xmalloc(n);
    fill(host, n, 9);
    memcpy(p, host, n);
    /* Staging copies every byte once on CLPIN_THREADS threads: the same
     * copy alone, one contiguous share per thread and no DMA beside it,
     * shows what the host's memory gives at the time. Not a strict bound
     * (staging copies chunk by chunk, which ran faster at 1 GiB), but where
     * it is slower than the pinned DMA, staging is held back by the host. */
    int k = (int)clpin_get_option(CLPIN_OPT_THREADS);
    k = k < 1 ? 1 : k > 64 ? 64 : k;
    for (int dir = 0; dir < 2; dir++) {
      double ratio[MAXR], rp[MAXR], rc[MAXR], rcopy[MAXR], vs[MAXR];
      for (int r = -1; r < B.runs; r++) {
        double tp = timed(B.q[0], PLAIN, dir == 0, m, p, n);
        double tc = timed(B.q[0], CLPIN, dir == 0, m, host, n);
        double copy = dir == 0 ? memcpy_threads(p, host, n, k) : memcpy_threads(host, p, n, k);
        if (r < 0)
          continue;
        ratio[r] = tp / tc;
        rp[r] = gbps(n, tp);
        rc[r] = gbps(n, tc);
        rcopy[r] = copy;
        vs[r] = copy / rp[r]; /* pinned time / copy time */
      }
      const char *d = dir == 0 ? "H2D" : "D2H";
      char what[96];
      snprintf(what, sizeof what, "%s %zu MiB: pinned (GB/s)", d, n / MiB);
      report(what, rp, B.runs, "GB/s");
      snprintf(what, sizeof what, "%s %zu MiB: staged from malloc (GB/s)", d, n / MiB);
      report(what, rc, B.runs, "GB/s");
      snprintf(what, sizeof what, "%s %zu MiB: host copy alone, %d threads (GB/s)", d, n / MiB, k);
      report(what, rcopy, B.runs, "GB/s");
      snprintf(what, sizeof what, "%s %zu MiB: pinned time / copy-alone time", d, n / MiB);
      report(what, vs, B.runs, "");
      snprintf(what, sizeof what, "%s %zu MiB from malloc / pinned", d, n / MiB);
      target(what, ratio, B.runs, n >= 1024 * MiB ? 0.9 : 0.8, true);
    }
    CHECK(clEnqueueUnmapMemObject(B.q[0], pin, p, 0, NULL, NULL));
    CHECK(clFinish(B.q[0]));
    clReleaseMemObject(pin);
    clReleaseMemObject(m);
    free(host);
  }
}

/* ---- pool hit ------------------------------------------------------------------ */

typedef struct {
  pthread_barrier_t *go;
  long iters;
  double start, end;
} hitter;

static void *hit_main(void *arg) {
  hitter *h = arg;
  clpin_block *b;
  CHECK(clpin_acquire(B.pool, MiB, &b)); /* this thread's stripe has one */
  CHECK(clpin_release(b, NULL));
  pthread_barrier_wait(h->go);
  h->start = now();
  for (long i = 0; i < h->iters; i++) {
    CHECK(clpin_acquire(B.pool, MiB, &b));
    CHECK(clpin_release(b, NULL));
  }
  h->end = now();
  return NULL;
}

static double hit_rate(int k, long iters) {
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, (unsigned)k);
  hitter h[16];
  pthread_t th[16];
  for (int i = 0; i < k; i++) {
    h[i] = (hitter){&go, iters, 0, 0};
    pthread_create(&th[i], NULL, hit_main, &h[i]);
  }
  double first = 1e300, last = 0;
  for (int i = 0; i < k; i++) {
    pthread_join(th[i], NULL);
    first = h[i].start < first ? h[i].start : first;
    last = h[i].end > last ? h[i].end : last;
  }
  double s = last - first;
  pthread_barrier_destroy(&go);
  return (double)k * (double)iters / s / 1e6; /* Mops/s */
}

static void case_hit(void) {
  printf("hit: clpin_acquire + clpin_release of 1 MiB, cached\n");
  long iters = B.quick ? 20000 : 1000000;
  double one[MAXR], ns[MAXR], sixteen[MAXR], ratio[MAXR];
  for (int r = 0; r < B.runs; r++) {
    one[r] = hit_rate(1, iters);
    ns[r] = 1e3 / one[r];
    sixteen[r] = hit_rate(16, iters / 4);
    ratio[r] = sixteen[r] / one[r];
  }
  report("one thread, ns per acquire+release", ns, B.runs, "ns");
  report("16 threads together (Mops/s)", sixteen, B.runs, "Mops");
  target("one thread, ns per acquire+release", ns, B.runs, 100.0, false);
  target("16 threads / one thread", ratio, B.runs, 2.0, true);
}

/* ---- main ---------------------------------------------------------------------- */

static void open_cl(const char *want) {
  bench_cl_devices("engine-bench", want, &B.platform, &B.device, 1);
  B.ctx = bench_cl_context("engine-bench", B.platform, 1, &B.device, clpin_strerror);
  for (int i = 0; i < 16; i++)
    B.q[i] = bench_cl_queue("engine-bench", B.ctx, B.device, clpin_strerror);
  CHECK(clpin_pool_get_for_context(B.ctx, &B.pool));
  char dev[256];
  bench_cl_name(B.device, dev, sizeof dev);
  printf("engine-bench: device %s, clpin %s, %d runs per figure\n", dev, clpin_version_string(),
         B.runs);
}

int main(int argc, char **argv) {
  const char *platform = NULL, *cases = "latency,duplex,concurrent,pinned,sweep,hit";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--platform") && i + 1 < argc)
      platform = argv[++i];
    else if (!strcmp(argv[i], "--case") && i + 1 < argc)
      cases = argv[++i];
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
      B.runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick"))
      B.quick = true;
    else {
      fprintf(stderr, "usage: engine-bench [--platform NAME] [--case LIST] [--runs N] [--quick]\n");
      return 2;
    }
  }
  if (B.runs < 1 || B.runs > MAXR) {
    fprintf(stderr, "engine-bench: --runs takes 1 ... %d\n", MAXR);
    return 2;
  }
  if (B.quick) {
    B.big = 8 * MiB;
    B.mid = 4 * MiB;
    B.huge = 16 * MiB;
    B.sweep_max = 4 * MiB;
    if (B.runs > 3)
      B.runs = 3;
  }
  open_cl(platform);
  if (strstr(cases, "latency"))
    case_latency();
  if (strstr(cases, "duplex"))
    case_duplex();
  if (strstr(cases, "concurrent"))
    case_concurrent();
  if (strstr(cases, "pinned"))
    case_pinned();
  if (strstr(cases, "sweep"))
    case_sweep();
  if (strstr(cases, "hit"))
    case_hit();
  clpin_pool_release_context(B.ctx);
  for (int i = 0; i < 16; i++)
    clReleaseCommandQueue(B.q[i]);
  clReleaseContext(B.ctx);
  clpin_shutdown();
  return B.status;
}
