/* SPDX-License-Identifier: Apache-2.0 */
/* The data-loader experiment: what clpin's loader buys a training loop that
 * prepares batches on the host while the device computes.
 *
 * Three ways to feed NB batches of B bytes to a device that spends a fixed
 * time on each (a kernel that reads every word of the batch, then a
 * calibrated spin kernel):
 *
 *   serial pageable   prepare into malloc memory, clEnqueueWriteBuffer,
 *                     compute, wait; next batch.
 *   serial pinned     the same, preparing into clpin_host_alloc memory, so
 *                     clpin_write goes straight to DMA.
 *   loader pipeline   clpin_loader: W worker threads prepare batches straight
 *                     into pinned slots (the fill callback), clpin uploads
 *                     each on a queue of its own, and the loop takes batch b
 *                     with clpin_loader_next, runs the kernels with the
 *                     upload's event in their wait list, and gives the batch
 *                     back with clpin_batch_release(batch, kernel's event):
 *                     no host wait, no copy, no thread of the example's own.
 *
 * It also times the device work alone and the host preparation alone (one
 * thread): the loader's total should approach the larger of the device work
 * and the preparation divided by the workers (plus transfers).
 * Every batch is checked: the device sums the batch in 16384 lanes (each a
 * contiguous slice) and the host compares with the sums it made while
 * preparing; a mismatch exits 1.
 *
 * Usage: loader_pipeline [--list] [--platform NAME] [--device N]
 *          [--batch-mib N | --batch-kib N] [--batches N] [--work-ms N]
 *          [--workers N] [--depth N] [--repeat N] [--csv] [--inject-error]
 *          [--help]
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <clpin.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(expr)                                                                                \
  do {                                                                                             \
    cl_int err_ = (expr);                                                                          \
    if (err_ != CL_SUCCESS) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, clpin_strerror(err_));         \
      exit(EXIT_FAILURE);                                                                          \
    }                                                                                              \
  } while (0)

#define LANES 16384u /* checksum lanes: lane i sums the i-th of LANES equal slices */

static const char *source =
    "__kernel void lanes(__global const uint *batch, uint rounds, __global uint *out,\n"
    "                    uint base) {\n"
    "  uint lane = get_global_id(0), s = 0;\n"
    "  __global const uint *p = batch + (size_t)lane * rounds;\n"
    "  for (uint k = 0; k < rounds; k++)\n"
    "    s += p[k];\n"
    "  out[base + lane] = s;\n"
    "}\n"
    "__kernel void spin(uint iters, __global uint *sink) {\n"
    "  uint x = get_global_id(0);\n"
    "  for (uint k = 0; k < iters; k++)\n"
    "    x = x * 1664525u + 1013904223u;\n"
    "  sink[get_global_id(0)] = x;\n"
    "}\n";

typedef struct {
  cl_context ctx;
  cl_device_id dev;
  cl_command_queue q;
  clpin_pool *pool;
  cl_kernel lanes, spin;
  cl_mem dbuf, out, sink;
  size_t bytes, spin_items;
  unsigned batches, iters, workers, depth;
  bool inject;
  uint32_t *expect; /* batches x LANES sums made by the host */
} loader;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Prepare batch b into p (the "decode and augment" of a real loader): a
 * pseudo-random word stream, summed per lane as it is written. */
static void prepare(const loader *L, unsigned b, void *p) {
  uint32_t *w = p, *sum = L->expect + (size_t)b * LANES;
  size_t rounds = L->bytes / 4 / LANES;
  uint32_t seed = b * 0x9E3779B1u + 12345u, j = 0;
  for (size_t lane = 0; lane < LANES; lane++) {
    uint32_t s = 0;
    for (size_t k = 0; k < rounds; k++, j++) {
      uint32_t x = j * 0x85EBCA6Bu + seed;
      x ^= x >> 15;
      x *= 0xC2B2AE35u;
      x ^= x >> 13;
      w[j] = x;
      s += x;
    }
    sum[lane] = s;
  }
  if (L->inject && b == L->batches / 2)
    ((unsigned char *)p)[L->bytes / 3] ^= 0x40; /* after the sums: must be caught */
}

/* Enqueue the device work on batch b, which buf holds, after the wait list
 * (the batch's upload); returns the event of its last kernel. */
static cl_event compute(const loader *L, unsigned b, cl_mem buf, cl_uint nwait,
                        const cl_event *wait) {
  cl_uint rounds = (cl_uint)(L->bytes / 4 / LANES);
  cl_uint base = b * LANES;
  size_t global = LANES;
  CHECK(clSetKernelArg(L->lanes, 0, sizeof buf, &buf));
  CHECK(clSetKernelArg(L->lanes, 1, sizeof rounds, &rounds));
  CHECK(clSetKernelArg(L->lanes, 2, sizeof L->out, &L->out));
  CHECK(clSetKernelArg(L->lanes, 3, sizeof base, &base));
  CHECK(clEnqueueNDRangeKernel(L->q, L->lanes, 1, NULL, &global, NULL, nwait, wait, NULL));
  cl_uint iters = L->iters;
  CHECK(clSetKernelArg(L->spin, 0, sizeof iters, &iters));
  CHECK(clSetKernelArg(L->spin, 1, sizeof L->sink, &L->sink));
  cl_event done;
  CHECK(clEnqueueNDRangeKernel(L->q, L->spin, 1, NULL, &L->spin_items, NULL, 0, NULL, &done));
  return done;
}

static void reset_out(const loader *L) {
  const cl_uint zero = 0;
  CHECK(clEnqueueFillBuffer(L->q, L->out, &zero, sizeof zero, 0, (size_t)L->batches * LANES * 4, 0,
                            NULL, NULL));
  CHECK(clFinish(L->q));
}

/* Compare the device's lane sums with the host's; the number of bad batches. */
static unsigned verify(const loader *L, const char *mode) {
  size_t n = (size_t)L->batches * LANES;
  uint32_t *got = malloc(n * 4);
  if (!got)
    exit(EXIT_FAILURE);
  CHECK(clEnqueueReadBuffer(L->q, L->out, CL_TRUE, 0, n * 4, got, 0, NULL, NULL));
  unsigned bad = 0;
  for (unsigned b = 0; b < L->batches; b++) {
    size_t o = (size_t)b * LANES;
    if (memcmp(got + o, L->expect + o, LANES * 4)) {
      bad++;
      fprintf(stderr, "%s: batch %u: device saw different data than the host prepared\n", mode, b);
    }
  }
  free(got);
  return bad;
}

/* ---- the three feeding strategies --------------------------------------- */

static double run_serial_pageable(const loader *L) {
  void *p = malloc(L->bytes);
  if (!p)
    exit(EXIT_FAILURE);
  memset(p, 0, L->bytes); /* fault the pages in before timing, as a reused buffer is */
  double t0 = now_ms();
  for (unsigned b = 0; b < L->batches; b++) {
    prepare(L, b, p);
    CHECK(clEnqueueWriteBuffer(L->q, L->dbuf, CL_TRUE, 0, L->bytes, p, 0, NULL, NULL));
    clReleaseEvent(compute(L, b, L->dbuf, 0, NULL));
    CHECK(clFinish(L->q));
  }
  double t = now_ms() - t0;
  free(p);
  return t;
}

static double run_serial_pinned(const loader *L) {
  void *p = clpin_host_alloc(L->pool, L->bytes);
  if (!p) {
    fprintf(stderr, "clpin_host_alloc(%zu) failed\n", L->bytes);
    exit(EXIT_FAILURE);
  }
  double t0 = now_ms();
  for (unsigned b = 0; b < L->batches; b++) {
    prepare(L, b, p);
    CHECK(clpin_write(L->q, L->dbuf, 0, p, L->bytes, CLPIN_PIN_MEMORY, 0, NULL, NULL));
    clReleaseEvent(compute(L, b, L->dbuf, 0, NULL));
    CHECK(clFinish(L->q));
  }
  double t = now_ms() - t0;
  CHECK(clpin_host_free(p));
  return t;
}

/* The loader's fill callback, on its worker threads: prepare batch `index`
 * straight into the pinned slot. Workers prepare different batches, so each
 * writes its own batch's sums. */
static cl_int fill(void *user, uint64_t index, void *host, size_t capacity, size_t *used) {
  const loader *L = user;
  (void)capacity; /* the loader's batch_bytes: L->bytes */
  prepare(L, (unsigned)index, host);
  *used = L->bytes;
  return CL_SUCCESS;
}

static double run_loader(const loader *L, struct clpin_loader_stats *st) {
  clpin_loader_desc desc = {.struct_size = sizeof desc,
                            .batch_bytes = L->bytes,
                            .batches = L->batches,
                            .depth = L->depth,
                            .workers = L->workers,
                            .fill = fill,
                            .user = (void *)L};
  clpin_loader *ld;
  double t0 = now_ms();
  CHECK(clpin_loader_create(1, &L->q, &desc, &ld));
  for (;;) {
    clpin_batch *batch;
    cl_int err = clpin_loader_next(ld, &batch);
    if (err == CLPIN_END)
      break; /* every batch of the epoch delivered */
    CHECK(err);
    /* The kernels wait for the upload on the device; the host never waits. */
    cl_event uploaded = clpin_batch_event(batch);
    cl_event done =
        compute(L, (unsigned)clpin_batch_index(batch), clpin_batch_buffer(batch), 1, &uploaded);
    CHECK(clFlush(L->q));
    /* The buffer is uploaded into again only after `done`. */
    CHECK(clpin_batch_release(batch, 1, &done));
    clReleaseEvent(done);
  }
  CHECK(clFinish(L->q));
  double t = now_ms() - t0;
  CHECK(clpin_loader_stats(ld, st));
  CHECK(clpin_loader_destroy(ld));
  return t;
}

static double run_device_alone(const loader *L) {
  double t0 = now_ms();
  for (unsigned b = 0; b < L->batches; b++)
    clReleaseEvent(compute(L, b, L->dbuf, 0, NULL));
  CHECK(clFinish(L->q));
  return now_ms() - t0;
}

static double run_prep_alone(const loader *L) {
  clpin_block *blk;
  CHECK(clpin_acquire(L->pool, L->bytes, &blk));
  prepare(L, 0, clpin_block_host(blk)); /* untimed: first-run effects (clocks, TLB) */
  double t0 = now_ms();
  for (unsigned b = 0; b < L->batches; b++)
    prepare(L, b, clpin_block_host(blk));
  double t = now_ms() - t0;
  CHECK(clpin_release(blk, NULL));
  return t;
}

/* Time the spin kernel alone with iters iterations. */
static double time_spin(loader *L, unsigned iters) {
  L->iters = iters;
  CHECK(clSetKernelArg(L->spin, 0, sizeof(cl_uint), &L->iters));
  CHECK(clSetKernelArg(L->spin, 1, sizeof L->sink, &L->sink));
  double t0 = now_ms();
  CHECK(clEnqueueNDRangeKernel(L->q, L->spin, 1, NULL, &L->spin_items, NULL, 0, NULL, NULL));
  CHECK(clFinish(L->q));
  return now_ms() - t0;
}

/* Find the spin iterations that take work_ms on this device. */
static void calibrate(loader *L, double work_ms) {
  if (work_ms <= 0) {
    L->iters = 0;
    return;
  }
  time_spin(L, 1); /* first launch pays one-time costs */
  double iters = 64, t = time_spin(L, 64);
  while (t < 2.0 && iters < 1e9) {
    iters *= 8;
    t = time_spin(L, (unsigned)iters);
  }
  for (int round = 0; round < 2; round++) {
    iters = iters * work_ms / (t > 0.01 ? t : 0.01);
    if (iters > 4e9)
      iters = 4e9;
    if (iters < 1)
      iters = 1;
    t = time_spin(L, (unsigned)iters);
  }
  L->iters = (unsigned)iters;
}

/* ---- setup -------------------------------------------------------------- */

static int list_devices(const char *want, int pick, cl_device_id *out) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  CHECK(clGetPlatformIDs(16, ps, &np));
  int index = 0;
  for (cl_uint i = 0; i < np && i < 16; i++) {
    char pname[256] = "";
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
    if (want && !strstr(pname, want))
      continue;
    cl_device_id ds[16];
    cl_uint nd = 0;
    if (clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_ALL, 16, ds, &nd) != CL_SUCCESS)
      continue;
    for (cl_uint d = 0; d < nd && d < 16; d++, index++) {
      char dname[256] = "";
      clGetDeviceInfo(ds[d], CL_DEVICE_NAME, sizeof dname, dname, NULL);
      if (pick < 0)
        printf("%d: %s / %s\n", index, pname, dname);
      else if (index == pick) {
        *out = ds[d];
        return index;
      }
    }
  }
  return -1;
}

static const char usage_text[] =
    "usage: loader_pipeline [options]\n"
    "  --list            list OpenCL devices (of --platform) with their numbers\n"
    "  --platform NAME   only platforms whose name contains NAME\n"
    "  --device N        device number from --list (default 0)\n"
    "  --batch-mib N     batch size in MiB (default 160), or --batch-kib N;\n"
    "                    a multiple of 64 KiB\n"
    "  --batches N       batches per run (default 4)\n"
    "  --work-ms N       calibrated device work per batch in ms (default 20)\n"
    "  --workers N       the loader's fill threads (default 2)\n"
    "  --depth N         the loader's batches uploaded ahead (default 2)\n"
    "  --repeat N        run every mode N times, report each one's fastest (default 1)\n"
    "  --csv             print the results as CSV\n"
    "  --inject-error    corrupt one batch after its checksum (must exit 1)\n";

static void usage(const char *argv0) {
  (void)argv0;
  fprintf(stderr, "%s", usage_text);
  exit(EXIT_FAILURE);
}

static unsigned long number(const char *arg, const char *argv0) {
  char *end;
  unsigned long v = strtoul(arg, &end, 10);
  if (!*arg || *end)
    usage(argv0);
  return v;
}

int main(int argc, char **argv) {
  const char *want = NULL;
  int pick = 0;
  bool csv = false, list = false;
  size_t bytes = (size_t)160 << 20;
  double work_ms = 20;
  unsigned repeat = 1;
  loader L = {.batches = 4, .workers = 2, .depth = 2};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      printf("%s", usage_text);
      return EXIT_SUCCESS;
    } else if (!strcmp(a, "--csv"))
      csv = true;
    else if (!strcmp(a, "--list"))
      list = true;
    else if (!strcmp(a, "--inject-error"))
      L.inject = true;
    else if (!v)
      usage(argv[0]);
    else if (!strcmp(a, "--platform"))
      want = argv[++i];
    else if (!strcmp(a, "--device"))
      pick = (int)number(argv[++i], argv[0]);
    else if (!strcmp(a, "--batch-mib"))
      bytes = (size_t)number(argv[++i], argv[0]) << 20;
    else if (!strcmp(a, "--batch-kib"))
      bytes = (size_t)number(argv[++i], argv[0]) << 10;
    else if (!strcmp(a, "--batches"))
      L.batches = (unsigned)number(argv[++i], argv[0]);
    else if (!strcmp(a, "--repeat"))
      repeat = (unsigned)number(argv[++i], argv[0]);
    else if (!strcmp(a, "--work-ms"))
      work_ms = (double)number(argv[++i], argv[0]);
    else if (!strcmp(a, "--workers"))
      L.workers = (unsigned)number(argv[++i], argv[0]);
    else if (!strcmp(a, "--depth"))
      L.depth = (unsigned)number(argv[++i], argv[0]);
    else
      usage(argv[0]);
  }
  if (list) {
    list_devices(want, -1, NULL);
    return EXIT_SUCCESS;
  }
  if (bytes == 0 || bytes % (LANES * 4) || L.batches == 0 || repeat == 0 || L.workers == 0 ||
      L.workers > 64 || L.depth == 0 || L.depth > 64) {
    fprintf(stderr,
            "the batch must be a positive multiple of %u KiB, batches and repeat > 0, "
            "workers and depth 1 to 64\n",
            LANES * 4 / 1024);
    return EXIT_FAILURE;
  }
  L.bytes = bytes;
  if (list_devices(want, pick, &L.dev) < 0) {
    fprintf(stderr, "no OpenCL device %d (see --list)\n", pick);
    return EXIT_FAILURE;
  }

  cl_int err;
  L.ctx = clCreateContext(NULL, 1, &L.dev, NULL, NULL, &err);
  CHECK(err);
  L.q = clCreateCommandQueue(L.ctx, L.dev, 0, &err);
  CHECK(err);
  CHECK(clpin_pool_get(L.q, &L.pool));
  cl_program prog = clCreateProgramWithSource(L.ctx, 1, &source, NULL, &err);
  CHECK(err);
  CHECK(clBuildProgram(prog, 1, &L.dev, "", NULL, NULL));
  L.lanes = clCreateKernel(prog, "lanes", &err);
  CHECK(err);
  L.spin = clCreateKernel(prog, "spin", &err);
  CHECK(err);
  cl_uint units = 1;
  CHECK(clGetDeviceInfo(L.dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL));
  L.spin_items = (size_t)units * 256;
  L.dbuf = clCreateBuffer(L.ctx, CL_MEM_READ_ONLY, bytes, NULL, &err);
  CHECK(err);
  L.out = clCreateBuffer(L.ctx, CL_MEM_READ_WRITE, (size_t)L.batches * LANES * 4, NULL, &err);
  CHECK(err);
  L.sink = clCreateBuffer(L.ctx, CL_MEM_WRITE_ONLY, L.spin_items * 4, NULL, &err);
  CHECK(err);
  L.expect = malloc((size_t)L.batches * LANES * 4);
  if (!L.expect)
    return EXIT_FAILURE;
  calibrate(&L, work_ms);

  /* Warm the pool with the blocks the loader takes (a pinned slot per worker
   * plus one uploading), so no mode pays pinned allocation inside its
   * timing: a real loader allocates once and runs for hours. */
  unsigned nwarm = L.workers + 1;
  clpin_block **warm = calloc(nwarm, sizeof *warm);
  if (!warm)
    return EXIT_FAILURE;
  for (unsigned i = 0; i < nwarm; i++) {
    CHECK(clpin_acquire(L.pool, bytes, &warm[i]));
    memset(clpin_block_host(warm[i]), 0, bytes); /* fault pages in, as for malloc */
  }
  for (unsigned i = 0; i < nwarm; i++)
    CHECK(clpin_release(warm[i], NULL));
  free(warm);
  clpin_stats s0 = {.struct_size = sizeof s0};
  CHECK(clpin_pool_stats(L.pool, &s0));

  static const char *names[] = {"device work alone", "host prep alone", "serial pageable",
                                "serial pinned", "loader pipeline"};
  double ms[5];
  unsigned bad = 0;
  struct clpin_loader_stats ls = {.struct_size = sizeof ls};
  /* Each mode runs `repeat` times, interleaved, and keeps its fastest run:
   * the host side (one thread writing the batch) is the noisy part. */
  for (unsigned r = 0; r < repeat; r++) {
    double t[5];
    t[1] = run_prep_alone(&L);
    reset_out(&L);
    t[2] = run_serial_pageable(&L);
    bad += verify(&L, names[2]);
    reset_out(&L);
    t[3] = run_serial_pinned(&L);
    bad += verify(&L, names[3]);
    reset_out(&L);
    t[4] = run_loader(&L, &ls);
    bad += verify(&L, names[4]);
    t[0] = run_device_alone(&L); /* on the last batch; its result is not checked */
    for (int m = 0; m < 5; m++)
      ms[m] = r == 0 || t[m] < ms[m] ? t[m] : ms[m];
  }
  clpin_stats s1 = {.struct_size = sizeof s1};
  CHECK(clpin_pool_stats(L.pool, &s1));

  char dname[256] = "";
  clGetDeviceInfo(L.dev, CL_DEVICE_NAME, sizeof dname, dname, NULL);
  if (csv) {
    printf("device,mode,batches,batch_bytes,work_ms,repeat,total_ms,ms_per_batch\n");
    for (int m = 0; m < 5; m++)
      printf("\"%s\",%s,%u,%zu,%.0f,%u,%.3f,%.3f\n", dname, names[m], L.batches, bytes, work_ms,
             repeat, ms[m], ms[m] / L.batches);
  } else {
    printf("loader_pipeline on %s: %u batches of %.2f MiB, %.0f ms device work each "
           "(spin %u iterations), loader with %u workers and depth %u, best of %u\n",
           dname, L.batches, bytes / 1048576.0, work_ms, L.iters, L.workers, L.depth, repeat);
    for (int m = 0; m < 5; m++)
      printf("  %-18s %9.1f ms  (%7.2f ms/batch)\n", names[m], ms[m], ms[m] / L.batches);
    double ideal = ms[0] > ms[1] / L.workers ? ms[0] : ms[1] / L.workers;
    printf("  loader vs serial pageable: %.2fx, vs serial pinned: %.2fx; "
           "%.2fx max(device work, prep / workers)\n",
           ms[2] / ms[4], ms[3] / ms[4], ms[4] / ideal);
    printf("  loader (last run): %llu batches, fill %.1f ms (all workers), uploads %.1f ms, "
           "next() waited %.1f ms, slot waits %.1f ms, buffer waits %.1f ms; "
           "%llu pinned slots, %llu device buffers\n",
           (unsigned long long)ls.batches, ls.fill_ns / 1e6, ls.upload_ns / 1e6, ls.wait_ns / 1e6,
           ls.slot_wait_ns / 1e6, ls.buffer_wait_ns / 1e6, (unsigned long long)ls.slots,
           (unsigned long long)ls.buffers);
    printf("  pool during the runs: %llu hits, %llu misses, %llu bytes straight to DMA\n",
           (unsigned long long)(s1.hits - s0.hits), (unsigned long long)(s1.misses - s0.misses),
           (unsigned long long)(s1.bytes_pinned_direct - s0.bytes_pinned_direct));
  }
  /* Under --csv stdout stays pure CSV. */
  fprintf(csv ? stderr : stdout, "data check: %s\n", bad ? "MISMATCH" : "all batches ok");

  free(L.expect);
  clReleaseMemObject(L.dbuf);
  clReleaseMemObject(L.out);
  clReleaseMemObject(L.sink);
  clReleaseKernel(L.lanes);
  clReleaseKernel(L.spin);
  clReleaseProgram(prog);
  clpin_pool_release_context(L.ctx);
  clReleaseCommandQueue(L.q);
  clReleaseContext(L.ctx);
  clpin_shutdown();
  return bad ? EXIT_FAILURE : EXIT_SUCCESS;
}
