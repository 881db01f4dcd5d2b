/* SPDX-License-Identifier: Apache-2.0 */
/* engine-bench: the transfer engine (non-blocking staged transfers, run on
 * clpin's threads) as real programs use it, against the baselines that
 * matter, all measured side by side in one process run. It uses only
 * <clpin.h> and links the shared library, so what it measures is the
 * libclpin.so users get. Blocking transfers at every size and pool hits
 * are clpin-bench's (--case transfer, sweep, pool, threads).
 *
 * Cases (--case a,b,...; default all):
 *   latency     non-blocking staged write/read of --big bytes from malloc:
 *               time until the call returns, against the whole transfer
 *   duplex      H2D and D2H at once from two threads, each on its own queue,
 *               --big bytes each: pool memory (clpin_host_alloc), registered
 *               and staged malloc memory, against the faster single
 *               direction; and the
 *               host's memcpy rate on 16 threads, which bounds staged duplex
 *   concurrent  4 threads each writing --mid bytes from malloc on its own
 *               queue, against one writer alone; and slowest / fastest
 *   overlap     a kernel on one queue beside clpin's work on another queue of
 *               the same context: a non-blocking staged write of --mid bytes
 *               (target: both <= 1.05x the longer alone), and a loader whose
 *               batches of --mid bytes feed a kernel of longer time on its own
 *               queue (target: per batch <= 1.05x the kernel alone). A
 *               command that waits for the whole context (NVIDIA's empty-list
 *               marker) shows as about 2x.
 *
 * Every figure is run --runs times; each line prints the median, min and
 * max, and for targets in how many runs the target held (benchstat.h's
 * lines). Every transfer's data is checked; a mismatch exits 3.
 *
 *   engine-bench [--platform NAME] [--case LIST] [--runs N] [--quick]
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

#define MiB ((size_t)1 << 20)
#define MAXR 64

static struct {
  cl_platform_id platform;
  cl_device_id device;
  cl_context ctx;
  cl_command_queue q[16];
  clpin_pool *pool;
  int runs;
  size_t big, mid;
} B = {.runs = 7, .big = 256 * MiB, .mid = 64 * MiB};

#define CHECK(expr) BENCH_CL_CHECK("engine-bench", expr, clpin_strerror)

static void expect_same(const void *a, const void *b, size_t n, const char *what) {
  if (memcmp(a, b, n)) {
    fprintf(stderr, "engine-bench: data mismatch: %s\n", what);
    exit(3);
  }
}

static unsigned char *xmalloc(size_t n) { return bench_alloc("engine-bench", n); }

static cl_mem dev_buffer(size_t n) {
  return bench_cl_buffer("engine-bench", B.ctx, n, clpin_strerror);
}

/* A blocking staged transfer (CLPIN_PIN_MEMORY), to completion. */
static void xfer(cl_command_queue q, bool h2d, cl_mem m, void *host, size_t n) {
  CHECK(h2d ? clpin_write(q, m, 0, host, n, CLPIN_PIN_MEMORY, 0, NULL, NULL)
            : clpin_read(q, m, 0, host, n, CLPIN_PIN_MEMORY, 0, NULL, NULL));
}

/* ---- latency ---------------------------------------------------------------- */

static void case_latency(void) {
  printf("latency: non-blocking staged transfer of %zu MiB from malloc\n", B.big / MiB);
  unsigned char *a = xmalloc(B.big), *b = xmalloc(B.big);
  cl_mem m = dev_buffer(B.big);
  for (int dir = 0; dir < 2; dir++) {
    double ret_us[MAXR], ratio[MAXR], total_ms[MAXR];
    for (int r = -1; r < B.runs; r++) {
      bench_fill(a, B.big, (uint64_t)r + 7);
      cl_event ev;
      CHECK(clFinish(B.q[0]));
      double t0 = bench_now_s();
      if (dir == 0)
        CHECK(clpin_write(B.q[0], m, 0, a, B.big, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL,
                          &ev));
      else
        CHECK(clpin_read(B.q[0], m, 0, b, B.big, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL,
                         &ev));
      double t1 = bench_now_s();
      CHECK(clWaitForEvents(1, &ev));
      double t2 = bench_now_s();
      clReleaseEvent(ev);
      if (r < 0)
        continue; /* warm-up: pool blocks, workers */
      ret_us[r] = (t1 - t0) * 1e6;
      total_ms[r] = (t2 - t0) * 1e3;
      ratio[r] = (t1 - t0) / (t2 - t0);
    }
    if (dir == 1) {
      /* The read's data: what the last write left on the device. */
      bench_fill(a, B.big, (uint64_t)B.runs - 1 + 7);
      expect_same(a, b, B.big, "non-blocking read");
    }
    const char *d = dir == 0 ? "write" : "read";
    char what[96];
    snprintf(what, sizeof what, "%s: call returns after (us)", d);
    bench_print_range(what, ret_us, B.runs, "us");
    snprintf(what, sizeof what, "%s: whole transfer (ms)", d);
    bench_print_range(what, total_ms, B.runs, "ms");
    snprintf(what, sizeof what, "%s: return time <= 100 us", d);
    bench_print_target(what, ret_us, B.runs, 100.0, false);
    snprintf(what, sizeof what, "%s: return / whole transfer <= 1%%", d);
    bench_print_target(what, ratio, B.runs, 0.01, false);
  }
  clReleaseMemObject(m);
  free(a);
  free(b);
}

/* ---- threads moving data at once --------------------------------------------- */

typedef struct {
  cl_command_queue q;
  cl_mem m;
  unsigned char *host;
  size_t n;
  bool h2d;
  pthread_barrier_t *go;
  double start, end, secs;
} mover;

static void *mover_main(void *arg) {
  mover *mv = arg;
  pthread_barrier_wait(mv->go);
  mv->start = bench_now_s();
  xfer(mv->q, mv->h2d, mv->m, mv->host, mv->n);
  CHECK(clFinish(mv->q));
  mv->end = bench_now_s();
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

static double gbps(size_t bytes, double secs) { return bench_gbps(bytes, secs * 1e9); }

static void duplex_for(const char *label, unsigned char *up, unsigned char *down) {
  size_t n = B.big;
  cl_mem m1 = dev_buffer(n), m2 = dev_buffer(n);
  double h2d[MAXR], d2h[MAXR], both[MAXR], ratio[MAXR];
  for (int r = -1; r < B.runs; r++) {
    bench_fill(up, n, (uint64_t)r + 100);
    mover w = {.q = B.q[0], .m = m1, .host = up, .n = n, .h2d = true};
    mover rd = {.q = B.q[1], .m = m2, .host = down, .n = n, .h2d = false};
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
  bench_print_range(what, h2d, B.runs, "GB/s");
  snprintf(what, sizeof what, "%s: D2H alone (GB/s)", label);
  bench_print_range(what, d2h, B.runs, "GB/s");
  snprintf(what, sizeof what, "%s: both at once, together (GB/s)", label);
  bench_print_range(what, both, B.runs, "GB/s");
  snprintf(what, sizeof what, "%s: duplex / faster single direction", label);
  bench_print_target(what, ratio, B.runs, strstr(label, "staged") ? 1.0 : 1.5, true);
  clReleaseMemObject(m1);
  clReleaseMemObject(m2);
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
  up = aligned_alloc(4096, B.big); /* whole pages: B.big is a multiple of 4 KiB */
  down = aligned_alloc(4096, B.big);
  if (!up || !down) {
    fprintf(stderr, "engine-bench: out of memory for the duplex case\n");
    exit(1);
  }
  memset(down, 0, B.big);
  CHECK(clpin_host_register(B.pool, up, B.big));
  CHECK(clpin_host_register(B.pool, down, B.big));
  duplex_for("registered malloc memory", up, down);
  CHECK(clpin_host_unregister(up));
  CHECK(clpin_host_unregister(down));
  duplex_for("staged malloc memory", up, down);
  double mc[MAXR];
  for (int r = 0; r < B.runs; r++)
    mc[r] = bench_memcpy_gbps(down, up, B.big, 16, NULL);
  bench_print_range("host memcpy, 16 threads (GB/s): bounds staged duplex", mc, B.runs, "GB/s");
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
    mv[i] = (mover){.q = B.q[i], .m = m[i], .host = xmalloc(B.mid), .n = B.mid, .h2d = true};
  }
  double one[MAXR], agg[MAXR], ratio[MAXR], fair[MAXR];
  for (int r = -1; r < B.runs; r++) {
    for (int i = 0; i < K; i++)
      bench_fill(mv[i].host, B.mid, (uint64_t)(r * K + i + 300));
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
  bench_print_range("one writer (GB/s)", one, B.runs, "GB/s");
  bench_print_range("4 writers together (GB/s)", agg, B.runs, "GB/s");
  bench_print_target("4 writers together / one writer", ratio, B.runs, 1.0, true);
  bench_print_target("slowest writer / fastest writer", fair, B.runs, 0.5, true);
  for (int i = 0; i < K; i++) {
    clReleaseMemObject(m[i]);
    free(mv[i].host);
  }
}

/* ---- a kernel beside clpin's work on another queue ------------------------------ */

static const char *spin_src = "__kernel void spin(__global float *x, uint iters) {\n"
                              "  size_t i = get_global_id(0); float v = x[i];\n"
                              "  for (uint k = 0; k < iters; k++) v = v * 0.9999f + 0.0001f;\n"
                              "  x[i] = v;\n"
                              "}\n";

enum { SPIN_ITEMS = 1 << 16 };

typedef struct {
  cl_kernel k;
  cl_mem x;
  cl_uint iters;
} spin;

static double spin_run(spin *s, cl_command_queue q, cl_uint nwait, const cl_event *wait,
                       cl_event *ev) {
  size_t g = SPIN_ITEMS;
  CHECK(clSetKernelArg(s->k, 1, sizeof s->iters, &s->iters));
  double t0 = bench_now_s();
  CHECK(clEnqueueNDRangeKernel(q, s->k, 1, NULL, &g, NULL, nwait, wait, ev));
  return t0;
}

/* A spin kernel of about `ms` milliseconds on q. */
static spin spin_make(cl_command_queue q, double ms) {
  cl_int err;
  cl_program p = clCreateProgramWithSource(B.ctx, 1, &spin_src, NULL, &err);
  CHECK(err);
  CHECK(clBuildProgram(p, 1, &B.device, "", NULL, NULL));
  spin s = {.k = clCreateKernel(p, "spin", &err), .iters = 1000};
  CHECK(err);
  clReleaseProgram(p);
  s.x = dev_buffer(SPIN_ITEMS * sizeof(float));
  CHECK(clSetKernelArg(s.k, 0, sizeof s.x, &s.x));
  for (int round = 0; round < 4; round++) {
    double t0 = spin_run(&s, q, 0, NULL, NULL);
    CHECK(clFinish(q));
    double took = (bench_now_s() - t0) * 1e3;
    double scale = ms / (took > 1e-3 ? took : 1e-3);
    double next = s.iters * (scale > 64 ? 64 : scale);
    s.iters = next < 1 ? 1 : next > 4e9 ? 4000000000u : (cl_uint)next;
  }
  return s;
}

static cl_int fill_bytes(void *user, uint64_t index, void *host, size_t capacity, size_t *used) {
  (void)user;
  memset(host, (int)(index & 0xff), capacity < 4096 ? capacity : 4096);
  *used = capacity;
  return CL_SUCCESS;
}

static void overlap_write(cl_command_queue kq, cl_command_queue tq) {
  size_t n = B.mid;
  unsigned char *a = xmalloc(n), *check = xmalloc(n);
  cl_mem m = dev_buffer(n);
  double t_x[MAXR], t_k[MAXR], both[MAXR], ratio[MAXR];
  xfer(tq, true, m, a, n); /* warm: pool blocks, threads */
  double t0 = bench_now_s();
  xfer(tq, true, m, a, n);
  CHECK(clFinish(tq));
  spin s = spin_make(kq, (bench_now_s() - t0) * 1e3);
  for (int r = -1; r < B.runs; r++) {
    bench_fill(a, n, (uint64_t)r + 500);
    t0 = bench_now_s();
    xfer(tq, true, m, a, n);
    CHECK(clFinish(tq));
    double tx = bench_now_s() - t0;
    t0 = spin_run(&s, kq, 0, NULL, NULL);
    CHECK(clFinish(kq));
    double tk = bench_now_s() - t0;
    t0 = spin_run(&s, kq, 0, NULL, NULL);
    CHECK(clFlush(kq));
    cl_event ev;
    CHECK(clpin_write(tq, m, 0, a, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &ev));
    CHECK(clWaitForEvents(1, &ev));
    CHECK(clFinish(kq));
    double tb = bench_now_s() - t0;
    clReleaseEvent(ev);
    CHECK(clEnqueueReadBuffer(tq, m, CL_TRUE, 0, n, check, 0, NULL, NULL));
    expect_same(check, a, n, "overlap write");
    if (r < 0)
      continue;
    t_x[r] = tx * 1e3;
    t_k[r] = tk * 1e3;
    both[r] = tb * 1e3;
    ratio[r] = tb / (tx > tk ? tx : tk);
  }
  bench_print_range("write alone (ms)", t_x, B.runs, "ms");
  bench_print_range("kernel alone, other queue (ms)", t_k, B.runs, "ms");
  bench_print_range("both at once (ms)", both, B.runs, "ms");
  bench_print_target("write beside a kernel / max(write, kernel) <= 1.05", ratio, B.runs, 1.05,
                     false);
  clReleaseKernel(s.k);
  clReleaseMemObject(s.x);
  clReleaseMemObject(m);
  free(a);
  free(check);
}

/* mode 0: as a program writes it; 3: the same with CLPIN_LOADER_HOST_DONE;
 * 4: CLPIN_LOADER_HOST_DONE, and the loop waits for the batch's upload on the
 * host before it enqueues the kernel (no command waits across queues). For
 * finding where time goes (the bytes the kernel reads are then not
 * guaranteed): 1, the kernel waits for no upload; 2, a batch goes back
 * without the kernel's event; 5, CLPIN_LOADER_HOST_DONE and the kernel waits
 * for no upload. */
static void overlap_loader(cl_command_queue kq, cl_command_queue uq, unsigned depth, int mode) {
  enum { BATCHES = 24 };
  clpin_loader_desc d = {.struct_size = sizeof d,
                         .batch_bytes = B.mid,
                         .batches = BATCHES,
                         .depth = depth,
                         .workers = 2,
                         .fill = fill_bytes};
  if (mode >= 3)
    d.flags = CLPIN_LOADER_HOST_DONE;
  bool kernel_waits = mode != 1 && mode != 4 && mode != 5;
  double wait[MAXR], upl[MAXR];
  double t_k[MAXR], per[MAXR], ratio[MAXR];
  /* The kernel: 1.5x one upload, so the loop is compute-bound. */
  unsigned char *a = xmalloc(B.mid);
  cl_mem m = dev_buffer(B.mid);
  xfer(uq, true, m, a, B.mid);
  double t0 = bench_now_s();
  xfer(uq, true, m, a, B.mid);
  CHECK(clFinish(uq));
  spin s = spin_make(kq, (bench_now_s() - t0) * 1e3 * 1.5);
  clReleaseMemObject(m);
  free(a);
  for (int r = -1; r < B.runs; r++) {
    t0 = spin_run(&s, kq, 0, NULL, NULL);
    CHECK(clFinish(kq));
    double tk = bench_now_s() - t0;
    clpin_loader *L;
    CHECK(clpin_loader_create(1, &uq, &d, &L));
    double start = 0;
    for (int b = 0;; b++) {
      clpin_batch *batch;
      cl_int err = clpin_loader_next(L, &batch);
      if (err == CLPIN_END)
        break;
      CHECK(err);
      if (b == 2)
        start = bench_now_s(); /* from the third batch: the pipeline is full */
      cl_event up = clpin_batch_event(batch), done;
      if (mode == 4)
        CHECK(clWaitForEvents(1, &up));
      spin_run(&s, kq, kernel_waits ? 1 : 0, kernel_waits ? &up : NULL, &done);
      CHECK(clFlush(kq));
      CHECK(clpin_batch_release(batch, mode == 2 ? 0 : 1, &done));
      clReleaseEvent(done);
    }
    CHECK(clFinish(kq));
    double per_batch = (bench_now_s() - start) / (BATCHES - 2);
    struct clpin_loader_stats st = {.struct_size = sizeof st};
    CHECK(clpin_loader_stats(L, &st));
    CHECK(clpin_loader_destroy(L));
    if (r < 0)
      continue;
    wait[r] = st.wait_ns / 1e6 / BATCHES;
    upl[r] = st.upload_ns / 1e6 / BATCHES;
    t_k[r] = tk * 1e3;
    per[r] = per_batch * 1e3;
    ratio[r] = per_batch / tk;
  }
  static const char *modes[] = {"",
                                ", the kernel waiting for no upload (timing only)",
                                ", batches given back without the kernel's event (timing only)",
                                ", CLPIN_LOADER_HOST_DONE",
                                ", CLPIN_LOADER_HOST_DONE, the upload waited for on the host",
                                ", CLPIN_LOADER_HOST_DONE, the kernel waiting for no upload "
                                "(timing only)"};
  printf("  loader, depth %u%s:\n", depth, modes[mode]);
  bench_print_range("loader: kernel alone (ms)", t_k, B.runs, "ms");
  bench_print_range("loader: per batch, kernel on its own queue (ms)", per, B.runs, "ms");
  bench_print_range("loader: the loop waiting in next(), per batch (ms)", wait, B.runs, "ms");
  bench_print_range("loader: upload, per batch (ms)", upl, B.runs, "ms");
  bench_print_target("loader per batch / kernel alone <= 1.05", ratio, B.runs, 1.05, false);
  clReleaseKernel(s.k);
  clReleaseMemObject(s.x);
}

static void case_overlap(void) {
  printf("overlap: a kernel on one queue, clpin on another of the same context, %zu MiB\n",
         B.mid / MiB);
  overlap_write(B.q[0], B.q[1]);
  overlap_loader(B.q[2], B.q[3], 2, 0);
  overlap_loader(B.q[4], B.q[5], 4, 0);
  overlap_loader(B.q[6], B.q[7], 2, 1);
  overlap_loader(B.q[8], B.q[9], 2, 2);
  overlap_loader(B.q[10], B.q[11], 2, 3);
  overlap_loader(B.q[12], B.q[13], 2, 4);
  overlap_loader(B.q[14], B.q[15], 2, 5);
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
  const char *platform = NULL, *cases = "latency,duplex,concurrent,overlap";
  bool quick = false;
  const bench_opt opts[] = {
      BENCH_OPT("--platform", BENCH_TEXT, &platform), BENCH_OPT("--case", BENCH_TEXT, &cases),
      BENCH_OPT("--runs", BENCH_INT, &B.runs), BENCH_OPT("--quick", BENCH_FLAG, &quick)};
  BENCH_PARSE_OPTS("engine-bench", "[--platform NAME] [--case LIST] [--runs N] [--quick]\n", argc,
                   argv, opts);
  if (B.runs < 1 || B.runs > MAXR) {
    fprintf(stderr, "engine-bench: --runs takes 1 ... %d\n", MAXR);
    return 2;
  }
  if (strstr(cases, "pinned") || strstr(cases, "sweep") || strstr(cases, "hit")) {
    fprintf(stderr, "engine-bench: the cases pinned, sweep and hit are clpin-bench's: "
                    "--case transfer, sweep, pool, threads\n");
    return 2;
  }
  if (quick) {
    B.big = 8 * MiB;
    B.mid = 4 * MiB;
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
  if (strstr(cases, "overlap"))
    case_overlap();
  clpin_pool_release_context(B.ctx);
  for (int i = 0; i < 16; i++)
    clReleaseCommandQueue(B.q[i]);
  clReleaseContext(B.ctx);
  clpin_shutdown();
  return 0;
}
