/* SPDX-License-Identifier: Apache-2.0 */
/* context-devices-bench: staged transfers to several devices of one context at
 * once against the same transfers one after the other (issue 24's
 * aggregate-time target: at once <= 0.6x one after the other).
 *
 * One context over the first --devices devices of the platform (POCL:
 * POCL_DEVICES="pthread pthread" gives two). Per device: a non-blocking
 * CLPIN_PIN_MEMORY write of --size bytes from malloc memory, then a
 * non-blocking read back, on that device's own queue.
 *   at once      every device's write and read enqueued, then one wait
 *   one by one   device 0's write, wait, read, wait; then device 1's ...
 * The two are interleaved run by run (--runs, default 7); each prints the
 * median, min and max, and the ratio's TARGET line says in how many runs
 * the target held (benchstat.h's lines). Every transfer's data is checked; a mismatch exits 3.
 *
 *   context-devices-bench [--platform NAME] [--devices N] [--size BYTES] [--runs N]
 */
#include "benchcl.h"
#include "benchstat.h"
#include "clpin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXDEV 8
#define MAXR 64

static struct {
  cl_uint n;
  cl_device_id dev[MAXDEV];
  cl_context ctx;
  cl_command_queue q[MAXDEV];
  cl_mem mem[MAXDEV];
  unsigned char *src[MAXDEV], *dst[MAXDEV];
  size_t size;
  int runs;
} B = {.n = 2, .size = (size_t)64 << 20, .runs = 7};

#define CHECK(expr) BENCH_CL_CHECK("context-devices-bench", expr, clpin_strerror)

static const unsigned FLAGS = CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING;

static void verify(cl_uint d, uint64_t seed) {
  size_t bad = bench_mismatch(B.dst[d], B.size, seed);
  if (bad != SIZE_MAX) {
    fprintf(stderr, "context-devices-bench: device %u: byte %zu differs\n", d, bad);
    exit(3);
  }
}

static void prepare(uint64_t seed) {
  for (cl_uint d = 0; d < B.n; d++) {
    bench_fill(B.src[d], B.size, seed + d);
    memset(B.dst[d], 0, B.size);
  }
}

/* Every device's round trip in flight at once; ns. */
static double at_once(uint64_t seed) {
  prepare(seed);
  cl_event ev[MAXDEV];
  uint64_t t0 = bench_now_ns();
  for (cl_uint d = 0; d < B.n; d++) {
    CHECK(clpin_write(B.q[d], B.mem[d], 0, B.src[d], B.size, FLAGS, 0, NULL, NULL));
    CHECK(clpin_read(B.q[d], B.mem[d], 0, B.dst[d], B.size, FLAGS, 0, NULL, &ev[d]));
  }
  CHECK(clWaitForEvents(B.n, ev));
  double ns = (double)(bench_now_ns() - t0);
  for (cl_uint d = 0; d < B.n; d++) {
    clReleaseEvent(ev[d]);
    verify(d, seed + d);
  }
  return ns;
}

/* The same transfers, each waited for before the next starts; ns. */
static double one_by_one(uint64_t seed) {
  prepare(seed);
  uint64_t t0 = bench_now_ns();
  for (cl_uint d = 0; d < B.n; d++) {
    cl_event ev;
    CHECK(clpin_write(B.q[d], B.mem[d], 0, B.src[d], B.size, FLAGS, 0, NULL, &ev));
    CHECK(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    CHECK(clpin_read(B.q[d], B.mem[d], 0, B.dst[d], B.size, FLAGS, 0, NULL, &ev));
    CHECK(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
  }
  double ns = (double)(bench_now_ns() - t0);
  for (cl_uint d = 0; d < B.n; d++)
    verify(d, seed + d);
  return ns;
}

static void usage(void) {
  fprintf(stderr, "usage: context-devices-bench [--platform NAME] [--devices N] [--size BYTES] "
                  "[--runs N]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *want = NULL;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc)
      usage();
    if (!strcmp(argv[i], "--platform"))
      want = argv[++i];
    else if (!strcmp(argv[i], "--devices"))
      B.n = (cl_uint)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--size")) {
      if (!bench_parse_size(argv[++i], &B.size) || B.size == 0)
        usage();
    } else if (!strcmp(argv[i], "--runs"))
      B.runs = atoi(argv[++i]);
    else
      usage();
  }
  if (B.n < 2 || B.n > MAXDEV || B.runs < 1 || B.runs > MAXR)
    usage();
  cl_platform_id p;
  cl_uint have = bench_cl_devices("context-devices-bench", want, &p, B.dev, MAXDEV);
  if (have < B.n) {
    fprintf(
        stderr,
        "context-devices-bench: %u device(s), %u needed (POCL: POCL_DEVICES=\"pthread pthread\")\n",
        have, B.n);
    return 1;
  }
  B.ctx = bench_cl_context("context-devices-bench", p, B.n, B.dev, clpin_strerror);
  cl_int err;
  for (cl_uint d = 0; d < B.n; d++) {
    B.q[d] = bench_cl_queue("context-devices-bench", B.ctx, B.dev[d], clpin_strerror);
    B.mem[d] = clCreateBuffer(B.ctx, CL_MEM_READ_WRITE, B.size, NULL, &err);
    CHECK(err);
    B.src[d] = malloc(B.size);
    B.dst[d] = malloc(B.size);
    if (!B.src[d] || !B.dst[d])
      return 1;
  }
  char sz[32];
  printf("context-devices-bench: %u devices, %s write + read each, CLPIN_THREADS=%zu, %d runs\n",
         B.n, bench_fmt_size(B.size, sz, sizeof sz), clpin_get_option(CLPIN_OPT_THREADS), B.runs);
  /* Warm up: pool blocks, workers, queues. */
  at_once(1);
  one_by_one(2);
  double a[MAXR], s[MAXR], r[MAXR];
  for (int i = 0; i < B.runs; i++) {
    a[i] = at_once(100 + (uint64_t)i * 16) / 1e6;
    s[i] = one_by_one(200 + (uint64_t)i * 16) / 1e6;
    r[i] = a[i] / s[i];
  }
  bench_print_range("at once (ms)", a, B.runs, "ms");
  bench_print_range("one by one (ms)", s, B.runs, "ms");
  bench_print_target("at once / one by one", r, B.runs, 0.6, false);
  clpin_pool *pool;
  CHECK(clpin_pool_get_for_context(B.ctx, &pool));
  clpin_stats st = {.struct_size = sizeof st};
  CHECK(clpin_pool_stats(pool, &st));
  printf("pool: %llu bytes pipelined, %llu staged, %llu unpinned, %llu fallbacks\n",
         (unsigned long long)st.bytes_pipelined, (unsigned long long)st.bytes_staged,
         (unsigned long long)st.bytes_unpinned, (unsigned long long)st.fallbacks);
  CHECK(clpin_pool_release_context(B.ctx));
  for (cl_uint d = 0; d < B.n; d++) {
    clReleaseMemObject(B.mem[d]);
    clReleaseCommandQueue(B.q[d]);
    free(B.src[d]);
    free(B.dst[d]);
  }
  clReleaseContext(B.ctx);
  clpin_shutdown();
  return 0;
}
