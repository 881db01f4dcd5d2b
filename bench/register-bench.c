/* SPDX-License-Identifier: Apache-2.0 */
/* register-bench: what clpin_host_register buys on the default device.
 *
 * Uses only <clpin.h> and OpenCL, linked against the shared library. Cases:
 *
 *   1. H2D and D2H at each size from registered malloc memory, from plain
 *      pageable malloc memory (clEnqueueWrite/ReadBuffer, what an unmodified
 *      program does) and from a pool block (clpin_host_alloc);
 *   2. both directions at once, registered memory, two threads on two
 *      in-order queues, each enqueueing non-blocking and waiting on its event;
 *   3. the cost of registering N MiB against creating + mapping an N MiB
 *      CL_MEM_ALLOC_HOST_PTR buffer;
 *   4. the break-even: after how many transfers of one M MiB array
 *      register-then-transfer beats staging (CLPIN_PIN_MEMORY) every time.
 *
 * Every figure is the median of --reps runs, with min-max. Data is checked
 * byte for byte, and the registered transfers must show up in the pool's
 * bytes_pinned_direct: a wrong byte or another path exits 1.
 *
 *   register-bench [--quick] [--reps N] [--sizes 16,256,1024] [--reg-mib 256]
 *                  [--dual-mib 256] [--break-even-mib 64] [--platform NAME]
 */
#define _POSIX_C_SOURCE 200809L
#include <clpin.h>

#include "benchcl.h"
#include "benchstat.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
#define MAX_SIZES 8
#define MAX_REPS 101

#define CHECK(expr) BENCH_CL_CHECK("register-bench", expr, clpin_strerror)

static double now_s(void) { return bench_now_s(); }

/* ---- statistics ------------------------------------------------------------ */

typedef struct {
  double v[MAX_REPS];
  int n;
} series;

typedef struct {
  double med, min, max;
} summary;

static summary summarize(const series *s) {
  double v[MAX_REPS];
  memcpy(v, s->v, (size_t)s->n * sizeof *v);
  bench_summary b = bench_summarize(v, (size_t)s->n);
  return (summary){b.median, b.min, b.max};
}

/* Rates from times: GB/s of `bytes` per run. */
static summary rate_of(const series *times, double bytes) {
  summary t = summarize(times);
  return (summary){bytes / t.med / 1e9, bytes / t.max / 1e9, bytes / t.min / 1e9};
}

static void print_rate(const char *label, summary r) {
  printf("  %-10s %8.2f GB/s [%.2f-%.2f]", label, r.med, r.min, r.max);
}

/* ---- setup ----------------------------------------------------------------- */

static struct {
  cl_context ctx;
  cl_device_id dev;
  cl_command_queue q, q2;
  clpin_pool *pool;
  int reps;
  int failed;
} B;

static void open_device(const char *want) {
  cl_platform_id platform;
  bench_cl_devices("register-bench", want, &platform, &B.dev, 1);
  B.ctx = bench_cl_context("register-bench", platform, 1, &B.dev, clpin_strerror);
  B.q = bench_cl_queue("register-bench", B.ctx, B.dev, clpin_strerror);
  B.q2 = bench_cl_queue("register-bench", B.ctx, B.dev, clpin_strerror);
  CHECK(clpin_pool_get(B.q, &B.pool));
  char name[256], version[256] = "";
  cl_bool unified = CL_FALSE;
  bench_cl_name(B.dev, name, sizeof name);
  clGetDeviceInfo(B.dev, CL_DRIVER_VERSION, sizeof version, version, NULL);
  clGetDeviceInfo(B.dev, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
  printf("device: %s (driver %s)%s; clpin %s; median of %d runs [min-max]\n", name, version,
         unified ? ", host-unified memory" : "", clpin_version_string(), B.reps);
}

static cl_mem device_buffer(size_t n) {
  cl_int err;
  cl_mem m = clCreateBuffer(B.ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CHECK(err);
  return m;
}

/* Ordinary heap memory, but page-aligned and a whole number of pages:
 * clpin registers whole pages, and two arrays that share a page (glibc puts
 * heap chunks back to back) cannot both be registered. */
static unsigned char *host_memory(size_t n) {
  unsigned char *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  if (!p) {
    fprintf(stderr, "register-bench: no host memory for %zu MiB\n", n / MIB);
    exit(EXIT_FAILURE);
  }
  memset(p, 0, n); /* the program "already has" it: its pages exist */
  return p;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = (uint64_t)(i / 8) * 0x9E3779B97F4A7C15ull + seed;
    memcpy(p + i, &v, n - i < 8 ? n - i : 8);
  }
}

static void expect_same(const char *what, const unsigned char *a, const unsigned char *b,
                        size_t n) {
  if (memcmp(a, b, n) != 0) {
    fprintf(stderr, "register-bench: %s: data differs\n", what);
    B.failed = 1;
  }
}

static uint64_t direct_bytes(void) {
  clpin_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CHECK(clpin_pool_stats(B.pool, &s));
  return s.bytes_pinned_direct;
}

/* ---- 1. one direction at a time ----------------------------------------- */

typedef enum { REGISTERED, PAGEABLE, POOL_BLOCK, STAGED } source;

/* One blocking transfer of n bytes between host and dev. */
static double one_transfer(source s, int d2h, cl_mem dev, unsigned char *host, size_t n) {
  double t0 = now_s();
  if (s == PAGEABLE) {
    if (d2h)
      CHECK(clEnqueueReadBuffer(B.q, dev, CL_TRUE, 0, n, host, 0, NULL, NULL));
    else
      CHECK(clEnqueueWriteBuffer(B.q, dev, CL_TRUE, 0, n, host, 0, NULL, NULL));
  } else {
    unsigned flags = s == STAGED ? CLPIN_PIN_MEMORY : 0;
    if (d2h)
      CHECK(clpin_read(B.q, dev, 0, host, n, flags, 0, NULL, NULL));
    else
      CHECK(clpin_write(B.q, dev, 0, host, n, flags, 0, NULL, NULL));
  }
  return now_s() - t0;
}

static summary timed(source s, int d2h, cl_mem dev, unsigned char *host, size_t n) {
  series t = {.n = B.reps};
  one_transfer(s, d2h, dev, host, n); /* warm-up */
  for (int r = 0; r < B.reps; r++)
    t.v[r] = one_transfer(s, d2h, dev, host, n);
  return rate_of(&t, (double)n);
}

static void by_size(size_t n) {
  cl_mem dev = device_buffer(n);
  unsigned char *reg = host_memory(n), *page = host_memory(n), *check = host_memory(n);
  unsigned char *pool = clpin_host_alloc(B.pool, n);
  if (!pool) {
    fprintf(stderr, "register-bench: clpin_host_alloc(%zu MiB) failed\n", n / MIB);
    exit(EXIT_FAILURE);
  }
  printf("%zu MiB\n", n / MIB);
  CHECK(clpin_host_register(B.pool, reg, n));
  for (int d2h = 0; d2h < 2; d2h++) {
    printf(" %s:", d2h ? "D2H" : "H2D");
    fill(reg, n, 1u + (unsigned)d2h);
    memcpy(page, reg, n);
    memcpy(pool, reg, n);
    if (d2h) {
      CHECK(clEnqueueWriteBuffer(B.q, dev, CL_TRUE, 0, n, reg, 0, NULL, NULL));
      memset(reg, 0, n); /* the reads must bring it back */
    }
    uint64_t direct0 = direct_bytes();
    summary r = timed(REGISTERED, d2h, dev, reg, n);
    if (direct_bytes() - direct0 != (uint64_t)n * (unsigned)(B.reps + 1)) {
      fprintf(stderr, "register-bench: registered %s did not go direct\n", d2h ? "D2H" : "H2D");
      B.failed = 1;
    }
    if (!d2h)
      CHECK(clEnqueueReadBuffer(B.q, dev, CL_TRUE, 0, n, check, 0, NULL, NULL));
    expect_same("registered", d2h ? reg : check, page, n);
    print_rate("registered", r);
    print_rate("pageable", timed(PAGEABLE, d2h, dev, page, n));
    print_rate("pool block", timed(POOL_BLOCK, d2h, dev, pool, n));
    printf("\n");
  }
  CHECK(clpin_host_unregister(reg));
  CHECK(clpin_host_free(pool));
  free(reg);
  free(page);
  free(check);
  clReleaseMemObject(dev);
}

/* ---- 2. both directions at once ------------------------------------------- */

typedef struct {
  cl_command_queue q;
  cl_mem dev;
  unsigned char *host;
  size_t n;
  int d2h;
  pthread_barrier_t *go;
  double seconds;
} dual_arg;

static void *dual_main(void *p) {
  dual_arg *a = p;
  pthread_barrier_wait(a->go);
  double t0 = now_s();
  cl_event ev = NULL;
  if (a->d2h)
    CHECK(clpin_read(a->q, a->dev, 0, a->host, a->n, CLPIN_NON_BLOCKING, 0, NULL, &ev));
  else
    CHECK(clpin_write(a->q, a->dev, 0, a->host, a->n, CLPIN_NON_BLOCKING, 0, NULL, &ev));
  CHECK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);
  a->seconds = now_s() - t0;
  return NULL;
}

static void both_directions(size_t n) {
  cl_mem dev[2] = {device_buffer(n), device_buffer(n)};
  unsigned char *host[2] = {host_memory(n), host_memory(n)};
  fill(host[0], n, 7);
  CHECK(clEnqueueWriteBuffer(B.q, dev[1], CL_TRUE, 0, n, host[0], 0, NULL, NULL));
  for (int i = 0; i < 2; i++)
    CHECK(clpin_host_register(B.pool, host[i], n));
  summary single = {0};
  for (int d = 0; d < 2; d++) {
    summary s = timed(REGISTERED, d, dev[d], host[d], n);
    if (s.med > single.med)
      single = s;
  }
  series t = {.n = B.reps};
  for (int r = -1; r < B.reps; r++) { /* r = -1: warm-up */
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2);
    dual_arg a[2];
    pthread_t th[2];
    for (int d = 0; d < 2; d++) {
      a[d] = (dual_arg){d ? B.q2 : B.q, dev[d], host[d], n, d, &go, 0};
      if (pthread_create(&th[d], NULL, dual_main, &a[d]) != 0) {
        fprintf(stderr, "register-bench: no thread\n");
        exit(EXIT_FAILURE);
      }
    }
    for (int d = 0; d < 2; d++)
      pthread_join(th[d], NULL);
    pthread_barrier_destroy(&go);
    if (r >= 0)
      t.v[r] = a[0].seconds > a[1].seconds ? a[0].seconds : a[1].seconds;
  }
  expect_same("both directions (D2H side)", host[1], host[0], n);
  summary both = rate_of(&t, 2.0 * (double)n);
  printf("both directions at once, %zu MiB each way, registered, 2 threads, 2 queues:\n", n / MIB);
  printf("  %8.2f GB/s together [%.2f-%.2f] = %.2fx the faster single direction (%.2f GB/s)\n",
         both.med, both.min, both.max, both.med / single.med, single.med);
  for (int i = 0; i < 2; i++) {
    CHECK(clpin_host_unregister(host[i]));
    free(host[i]);
    clReleaseMemObject(dev[i]);
  }
}

/* ---- 3. the cost of pinning ------------------------------------------------- */

static summary register_cost(unsigned char *p, size_t n, series *unreg) {
  series t = {.n = B.reps};
  unreg->n = B.reps;
  for (int r = 0; r < B.reps; r++) {
    double t0 = now_s();
    CHECK(clpin_host_register(B.pool, p, n));
    double t1 = now_s();
    CHECK(clpin_host_unregister(p));
    t.v[r] = (t1 - t0) * 1e3;
    unreg->v[r] = (now_s() - t1) * 1e3;
  }
  return summarize(&t);
}

static summary alloc_host_ptr_cost(size_t n) {
  series t = {.n = B.reps};
  for (int r = 0; r < B.reps; r++) {
    cl_int err;
    double t0 = now_s();
    cl_mem m = clCreateBuffer(B.ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &err);
    CHECK(err);
    void *p =
        clEnqueueMapBuffer(B.q, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, n, 0, NULL, NULL, &err);
    CHECK(err);
    t.v[r] = (now_s() - t0) * 1e3;
    CHECK(clEnqueueUnmapMemObject(B.q, m, p, 0, NULL, NULL));
    CHECK(clFinish(B.q));
    clReleaseMemObject(m);
  }
  return summarize(&t);
}

static void pin_cost(size_t n) {
  unsigned char *p = host_memory(n);
  series unreg;
  summary reg = register_cost(p, n, &unreg);
  summary un = summarize(&unreg);
  summary ahp = alloc_host_ptr_cost(n);
  printf("cost of pinning %zu MiB:\n", n / MIB);
  printf("  clpin_host_register    %9.3f ms [%.3f-%.3f] (unregister %.3f ms)\n", reg.med, reg.min,
         reg.max, un.med);
  printf("  ALLOC_HOST_PTR create+map %6.3f ms [%.3f-%.3f]\n", ahp.med, ahp.min, ahp.max);
  printf("  register / create+map = 1/%.1f\n", reg.med > 0 ? ahp.med / reg.med : 0.0);
  free(p);
}

/* ---- 4. break-even ---------------------------------------------------------- */

static void break_even(size_t n) {
  cl_mem dev = device_buffer(n);
  unsigned char *p = host_memory(n);
  fill(p, n, 9);
  series unreg;
  summary reg = register_cost(p, n, &unreg);
  double once_ms = reg.med + summarize(&unreg).med;
  summary staged = timed(STAGED, 0, dev, p, n);
  CHECK(clpin_host_register(B.pool, p, n));
  summary direct = timed(REGISTERED, 0, dev, p, n);
  CHECK(clpin_host_unregister(p));
  double staged_ms = (double)n / staged.med / 1e6, direct_ms = (double)n / direct.med / 1e6;
  printf("break-even, %zu MiB transfers (H2D): register + unregister %.3f ms once; "
         "staged %.3f ms, registered %.3f ms per transfer\n",
         n / MIB, once_ms, staged_ms, direct_ms);
  /* Register-then-transfer wins from the k-th transfer on, where
   * once + k * direct < k * staged. */
  if (direct_ms < staged_ms) {
    double k = once_ms / (staged_ms - direct_ms);
    long whole = (long)k + 1;
    printf("  registering pays from transfer %ld on (%.2f transfers' worth of saving)\n", whole, k);
  } else {
    printf("  registering never pays here: a registered transfer is not faster than a staged one "
           "(expected on a host-unified device)\n");
  }
  free(p);
  clReleaseMemObject(dev);
}

/* ---- main ----------------------------------------------------------------- */

static size_t parse_mib(const char *s) {
  char *end;
  unsigned long v = strtoul(s, &end, 10);
  if (*end || v == 0) {
    fprintf(stderr, "register-bench: bad size '%s' (MiB)\n", s);
    exit(EXIT_FAILURE);
  }
  return (size_t)v * MIB;
}

int main(int argc, char **argv) {
  size_t sizes[MAX_SIZES] = {16 * MIB, 256 * MIB, 1024 * MIB};
  int nsizes = 3;
  size_t reg_n = 256 * MIB, dual_n = 256 * MIB, be_n = 64 * MIB;
  const char *platform = NULL;
  B.reps = 9;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quick")) {
      sizes[0] = 1 * MIB, sizes[1] = 4 * MIB, nsizes = 2;
      reg_n = dual_n = be_n = 4 * MIB;
      B.reps = 3;
    } else if (!strcmp(a, "--reps") && v) {
      B.reps = atoi(v), i++;
      if (B.reps < 1 || B.reps > MAX_REPS) {
        fprintf(stderr, "register-bench: --reps 1...%d\n", MAX_REPS);
        return EXIT_FAILURE;
      }
    } else if (!strcmp(a, "--sizes") && v) {
      char *copy = strdup(v), *save = NULL;
      nsizes = 0;
      for (char *t = strtok_r(copy, ",", &save); t && nsizes < MAX_SIZES;
           t = strtok_r(NULL, ",", &save))
        sizes[nsizes++] = parse_mib(t);
      free(copy);
      i++;
    } else if (!strcmp(a, "--reg-mib") && v) {
      reg_n = parse_mib(v), i++;
    } else if (!strcmp(a, "--dual-mib") && v) {
      dual_n = parse_mib(v), i++;
    } else if (!strcmp(a, "--break-even-mib") && v) {
      be_n = parse_mib(v), i++;
    } else if (!strcmp(a, "--platform") && v) {
      platform = v, i++;
    } else {
      fprintf(stderr,
              "usage: register-bench [--quick] [--reps N] [--sizes MiB,MiB,...] [--reg-mib N]\n"
              "                      [--dual-mib N] [--break-even-mib N] [--platform NAME]\n");
      return strcmp(a, "--help") ? EXIT_FAILURE : EXIT_SUCCESS;
    }
  }
  open_device(platform);
  for (int i = 0; i < nsizes; i++)
    by_size(sizes[i]);
  both_directions(dual_n);
  pin_cost(reg_n);
  break_even(be_n);

  clReleaseCommandQueue(B.q2);
  clpin_pool_release_context(B.ctx);
  clReleaseCommandQueue(B.q);
  clReleaseContext(B.ctx);
  if (B.failed)
    fprintf(stderr, "register-bench: FAILED (see above)\n");
  return B.failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
