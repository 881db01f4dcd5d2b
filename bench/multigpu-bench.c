/* SPDX-License-Identifier: Apache-2.0 */
/* (Over 700 lines: three cases over one device table, PCI map and CUDA
 * baseline, each figure printed in the lines bench/gpu-multi.sh parses.) */
/* multigpu-bench: clpin on a host with several GPUs, every figure
 * against its baseline in the same process run.
 *
 * Cases (--case a,b,...; default memcpy,layout):
 *   memcpy  the host's memory bandwidth: memcpy on all online CPUs, the
 *           bound of staged transfers
 *   layout  N = --counts GPUs at once (default 1,2,4,8, clipped to what the
 *           platform has), aggregate H2D, D2H and duplex rates of three
 *           kinds of host memory: pool (clpin_host_alloc), registered
 *           (clpin_host_register) and staged (malloc with CLPIN_PIN_MEMORY),
 *           each against CUDA pinned memory on the same GPUs in the same run
 *           (cudaMemcpyAsync, one stream per GPU and direction); with one
 *           context per GPU and, for N >= 2, one context holding all N, both
 *           open at once and measured in turn within every run; with the
 *           memcpy case, every run starts with memcpy on all online CPUs,
 *           the bound of that run's staged figures
 *
 * Every figure is run --runs times; a line prints the median, min and max,
 * and a target line in how many runs the target held. Data is checked once
 * per configuration; a mismatch exits 3. CLPIN_NUMA is read by the library
 * from the environment (docs/BENCHMARKS.md, "Several GPUs": placement, runs
 * the bench with 1 and 0). Only <clpin.h> and the shared library, as programs use it.
 *
 *   multigpu-bench [--platform NAME] [--case LIST] [--counts 1,2,4,8]
 *               [--size BYTES] [--iters N] [--runs N] [--no-cuda] [--quick] [--list]
 *
 * --list prints the devices, their PCI addresses and the OpenCL-to-CUDA map,
 * then exits.
 */
#include "benchcl.h"
#include "benchstat.h"
#include "hostbound.h"
#include "clpin.h"
#include "cudaref.h"
#include "pcimatch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define MAXD 16 /* GPUs */
#define MAXR 64 /* runs */
#define MAXCPU 1024

/* OpenCL extension queries (cl_ext.h names, values from the registry). */
#define Q_PCI_BUS_INFO_KHR 0x410F
#define Q_PCI_BUS_ID_NV 0x4008
#define Q_PCI_SLOT_ID_NV 0x4009
#define Q_PCI_DOMAIN_ID_NV 0x400A

#define CHECK(expr) BENCH_CL_CHECK("multigpu-bench", expr, clpin_strerror)

static struct {
  const char *platform_name;
  cl_platform_id platform;
  cl_device_id dev[MAXD];
  pci_addr pci[MAXD]; /* PCI_UNKNOWN when no query answers */
  int ndev;
  unsigned counts[8];
  int ncounts;
  size_t size;
  int iters, runs;
  bool no_cuda, quick, list;
  unsigned cases;
} B = {.size = 256 * MiB, .iters = 2, .runs = 5};

enum { CASE_MEMCPY = 1, CASE_LAYOUT = 2 };

static void *xalloc(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, n)) {
    fprintf(stderr, "multigpu-bench: out of memory (%zu bytes)\n", n);
    exit(1);
  }
  memset(p, 0, n); /* fault the pages in: a first touch is not a transfer */
  return p;
}

/* ---- report lines (benchstat.c) ---------------------------------------------- */

/* Every figure's line and, on a line of its own, every run's value, for
 * bench/gpu-multi.sh to pool the runs of several processes by name. */
static void report(const char *what, const double *v, int n, const char *unit) {
  bench_print_range(what, v, n, unit);
  bench_print_raw(what, 0, v, n);
}

static void target(const char *what, const double *ratio, int n, double goal) {
  bench_print_target(what, ratio, n, goal, true);
  bench_print_raw(what, goal, ratio, n);
}

/* ---- devices ----------------------------------------------------------------- */

/* The device's PCI address from cl_khr_pci_bus_info, else NVIDIA's queries
 * (the slot is device << 3 | function). */
static void device_pci(int i) {
  cl_uint info[4];
  cl_uint bus, slot, domain = 0;
  B.pci[i] = PCI_UNKNOWN;
  if (clGetDeviceInfo(B.dev[i], Q_PCI_BUS_INFO_KHR, sizeof info, info, NULL) == CL_SUCCESS)
    B.pci[i] = (pci_addr){(int)(info[0] & 0xffff), (int)(info[1] & 0xff), (int)(info[2] & 0x1f),
                          (int)(info[3] & 7)};
  else if (clGetDeviceInfo(B.dev[i], Q_PCI_BUS_ID_NV, sizeof bus, &bus, NULL) == CL_SUCCESS &&
           clGetDeviceInfo(B.dev[i], Q_PCI_SLOT_ID_NV, sizeof slot, &slot, NULL) == CL_SUCCESS) {
    if (clGetDeviceInfo(B.dev[i], Q_PCI_DOMAIN_ID_NV, sizeof domain, &domain, NULL) != CL_SUCCESS)
      domain = 0;
    B.pci[i] = pci_from_nv(domain, bus, slot);
  }
}

static void pick_devices(void) {
  B.ndev = (int)bench_cl_devices("multigpu-bench", B.platform_name, &B.platform, B.dev, MAXD);
  char name[256] = "";
  clGetPlatformInfo(B.platform, CL_PLATFORM_NAME, sizeof name, name, NULL);
  printf("platform: %s, %d device(s)\n", name, B.ndev);
  for (int i = 0; i < B.ndev; i++) {
    bench_cl_name(B.dev[i], name, sizeof name);
    device_pci(i);
    char addr[32];
    printf("device %d: %s, PCI %s\n", i, name, pci_format(&B.pci[i], addr, sizeof addr));
  }
}

/* ---- the CUDA baseline (loaded at run time) ------------------------------------ */

static struct {
  bool lib; /* the runtime loaded (cudaref.c) */
  int (*stream_create)(void **);
  int (*copy_async)(void *, const void *, size_t, int, void *);
  int (*stream_sync)(void *);
  int (*attribute)(int *, int, int);
  int (*count)(int *);
  int (*bus_id)(char *, int, int);
  int map[MAXD]; /* CUDA ordinal of each OpenCL device, -1 when unmatched */
} cu;

/* A CUDA device's PCI address: cudaDeviceGetPCIBusId, else the attributes
 * (domain, bus, device; function 0). */
static pci_addr cuda_pci(int c) {
  pci_addr a = PCI_UNKNOWN;
  char id[64] = "";
  if (cu.bus_id && cu.bus_id(id, (int)sizeof id, c) == 0 && pci_parse(id, &a))
    return a;
  int dom = -1, bus = -1, dev = -1;
  if (cu.attribute(&dom, 50 /* cudaDevAttrPciDomainId */, c) == 0 &&
      cu.attribute(&bus, 33 /* cudaDevAttrPciBusId */, c) == 0 &&
      cu.attribute(&dev, 34 /* cudaDevAttrPciDeviceId */, c) == 0 && dom >= 0 && bus >= 0 &&
      dev >= 0)
    a = (pci_addr){dom, bus, dev, 0};
  return a;
}

/* Load libcudart (cudaref.c) and match CUDA devices to the OpenCL ones by
 * their whole PCI address (domain, bus, device, function; bench/pcimatch.c):
 * the two enumerations need not agree on order, and GPUs on one bus differ
 * by device number only. Prints the whole map. */
static void cuda_open(void) {
  for (int i = 0; i < MAXD; i++)
    cu.map[i] = -1;
  if (!cudaref_load()) {
    printf("CUDA baseline: none (no libcudart; set CLPIN_BENCH_CUDART)\n");
    return;
  }
  cu.lib = true;
  cudaref_symbol(&cu.stream_create, "cudaStreamCreate");
  cudaref_symbol(&cu.copy_async, "cudaMemcpyAsync");
  cudaref_symbol(&cu.stream_sync, "cudaStreamSynchronize");
  cudaref_symbol(&cu.attribute, "cudaDeviceGetAttribute");
  cudaref_symbol(&cu.count, "cudaGetDeviceCount");
  cudaref_symbol(&cu.bus_id, "cudaDeviceGetPCIBusId");
  int n = 0;
  if (!cu.stream_create || !cu.copy_async || !cu.stream_sync || !cu.attribute || !cu.count ||
      cu.count(&n) != 0 || n == 0) {
    printf("CUDA baseline: none (runtime unusable or no device)\n");
    cu.lib = false;
    return;
  }
  if (n > MAXD)
    n = MAXD;
  pci_addr cuda[MAXD];
  char a[32], b[32];
  for (int c = 0; c < n; c++)
    cuda[c] = cuda_pci(c);
  int dup = -1;
  bool dup_cuda = false;
  if (pci_match(B.pci, B.ndev, cuda, n, cu.map, &dup, &dup_cuda) != PCI_MATCH_OK) {
    printf("CUDA baseline: none (%s device %d has the PCI address %s of an earlier one: "
           "no reliable map)\n",
           dup_cuda ? "CUDA" : "OpenCL", dup,
           pci_format(dup_cuda ? &cuda[dup] : &B.pci[dup], a, sizeof a));
    cu.lib = false;
    return;
  }
  int matched = 0;
  printf("CUDA baseline: %d device(s); the map by PCI address (domain:bus:device.function):\n", n);
  for (int i = 0; i < B.ndev; i++) {
    matched += cu.map[i] >= 0;
    if (cu.map[i] >= 0)
      printf("  OpenCL device %d (%s) <-> CUDA device %d (%s)\n", i,
             pci_format(&B.pci[i], a, sizeof a), cu.map[i],
             pci_format(&cuda[cu.map[i]], b, sizeof b));
    else
      printf("  OpenCL device %d (%s) <-> no CUDA device\n", i, pci_format(&B.pci[i], a, sizeof a));
  }
  for (int c = 0; c < n; c++) {
    bool used = false;
    for (int i = 0; i < B.ndev; i++)
      used = used || cu.map[i] == c;
    if (!used)
      printf("  CUDA device %d (%s) <-> no OpenCL device\n", c, pci_format(&cuda[c], a, sizeof a));
  }
  printf("CUDA baseline: %d of %d OpenCL device(s) matched\n", matched, B.ndev);
}

/* ---- one round: every active stream moves its bytes at once ------------------- */

typedef enum { POOL, REGISTERED, STAGED, CUDA, KINDS } mem_kind;
static const char *kind_name[KINDS] = {"pool", "registered", "staged malloc", "CUDA pinned"};
typedef enum { H2D = 1, D2H = 2, DUPLEX = 3 } direction;
static const char *dir_name[4] = {"", "H2D", "D2H", "duplex"};

/* One GPU's side of a layout: its queues and buffers, per direction. */
typedef struct {
  cl_command_queue q[2];
  cl_mem buf[2];
  void *host[KINDS][2];
  void *cu_dev[2], *cu_stream[2];
  clpin_pool *pool;
} gpu_side;

typedef struct {
  gpu_side *g;
  int gpu, dir; /* dir 0: H2D, 1: D2H */
  mem_kind kind;
  pthread_barrier_t *start;
} stream_job;

static void *run_stream(void *arg) {
  stream_job *j = arg;
  gpu_side *g = j->g;
  if (j->kind == CUDA)
    cudaref_set_device(cu.map[j->gpu]);
  pthread_barrier_wait(j->start);
  for (int it = 0; it < B.iters; it++) {
    void *h = g->host[j->kind][j->dir];
    if (j->kind == CUDA) {
      void *d = g->cu_dev[j->dir];
      int e = j->dir == 0 ? cu.copy_async(d, h, B.size, 1, g->cu_stream[0])
                          : cu.copy_async(h, d, B.size, 2, g->cu_stream[1]);
      if (e == 0)
        e = cu.stream_sync(g->cu_stream[j->dir]);
      if (e != 0) {
        fprintf(stderr, "multigpu-bench: CUDA error %d\n", e);
        exit(1);
      }
    } else {
      unsigned flags = j->kind == STAGED ? CLPIN_PIN_MEMORY : 0;
      CHECK(j->dir == 0 ? clpin_write(g->q[0], g->buf[0], 0, h, B.size, flags, 0, NULL, NULL)
                        : clpin_read(g->q[1], g->buf[1], 0, h, B.size, flags, 0, NULL, NULL));
    }
  }
  return NULL;
}

/* The streams of n GPUs in dir, in the order their threads start: GPU
 * gpu[st] and direction d[st] (0: H2D, 1: D2H); returns how many. */
static int streams_of(int n, direction dir, int *gpu, int *d) {
  int ns = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < 2; k++)
      if (dir & (1 << k)) {
        gpu[ns] = i;
        d[ns++] = k;
      }
  return ns;
}

/* Aggregate GB/s of n GPUs moving in dir at once from memory of kind. */
static double round_gbps(gpu_side *g, int n, mem_kind kind, direction dir) {
  stream_job jobs[2 * MAXD];
  pthread_t th[2 * MAXD];
  int gpu[2 * MAXD], d[2 * MAXD], nj = streams_of(n, dir, gpu, d);
  for (int k = 0; k < nj; k++)
    jobs[k] = (stream_job){.g = &g[gpu[k]], .gpu = gpu[k], .dir = d[k], .kind = kind};
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)nj + 1);
  for (int k = 0; k < nj; k++) {
    jobs[k].start = &start;
    pthread_create(&th[k], NULL, run_stream, &jobs[k]);
  }
  pthread_barrier_wait(&start);
  double t0 = bench_now_s();
  for (int k = 0; k < nj; k++)
    pthread_join(th[k], NULL);
  double t = bench_now_s() - t0;
  pthread_barrier_destroy(&start);
  return bench_gbps((size_t)nj * (size_t)B.iters * B.size, t * 1e9);
}

/* The data check of a kind: what was written arrived, what was read is the
 * device's. Plain driver calls on the GPU's own queue. */
static void check_kind(gpu_side *g, int n, mem_kind kind) {
  void *tmp = xalloc(B.size);
  for (int i = 0; i < n; i++) {
    uint64_t seed = 1000u * (unsigned)kind + (unsigned)i;
    if (kind == CUDA)
      continue; /* the baseline's own data is CUDA's business */
    bench_fill(g[i].host[kind][0], B.size, seed);
    unsigned flags = kind == STAGED ? CLPIN_PIN_MEMORY : 0;
    CHECK(clpin_write(g[i].q[0], g[i].buf[0], 0, g[i].host[kind][0], B.size, flags, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(g[i].q[0], g[i].buf[0], CL_TRUE, 0, B.size, tmp, 0, NULL, NULL));
    bench_fill(g[i].host[kind][0], B.size, seed + 7);
    CHECK(clEnqueueWriteBuffer(g[i].q[1], g[i].buf[1], CL_TRUE, 0, B.size, g[i].host[kind][0], 0,
                               NULL, NULL));
    memset(g[i].host[kind][1], 0, B.size);
    CHECK(clpin_read(g[i].q[1], g[i].buf[1], 0, g[i].host[kind][1], B.size, flags, 0, NULL, NULL));
    if (bench_mismatch(tmp, B.size, seed) != SIZE_MAX ||
        bench_mismatch(g[i].host[kind][1], B.size, seed + 7) != SIZE_MAX) {
      fprintf(stderr, "multigpu-bench: data mismatch: %s, GPU %d\n", kind_name[kind], i);
      exit(3);
    }
  }
  free(tmp);
}

/* Make n GPU sides: one context per GPU (shared false) or one for all. */
static void open_sides(gpu_side *g, int n, bool shared, cl_context *ctx) {
  if (shared)
    ctx[0] = bench_cl_context("multigpu-bench", B.platform, (cl_uint)n, B.dev, clpin_strerror);
  for (int i = 0; i < n; i++) {
    if (!shared)
      ctx[i] = bench_cl_context("multigpu-bench", B.platform, 1, &B.dev[i], clpin_strerror);
    cl_context c = shared ? ctx[0] : ctx[i];
    memset(&g[i], 0, sizeof g[i]);
    CHECK(clpin_pool_get_for_context(c, &g[i].pool));
    for (int d = 0; d < 2; d++) {
      g[i].q[d] = bench_cl_queue("multigpu-bench", c, B.dev[i], clpin_strerror);
      g[i].buf[d] = bench_cl_buffer("multigpu-bench", c, B.size, clpin_strerror);
      g[i].host[POOL][d] = clpin_host_alloc(g[i].pool, B.size);
      if (!g[i].host[POOL][d]) {
        fprintf(stderr, "multigpu-bench: clpin_host_alloc(%zu) failed\n", B.size);
        exit(1);
      }
      g[i].host[REGISTERED][d] = xalloc(B.size);
      CHECK(clpin_host_register(g[i].pool, g[i].host[REGISTERED][d], B.size));
      g[i].host[STAGED][d] = xalloc(B.size);
      if (cu.lib && cu.map[i] >= 0) {
        cudaref_set_device(cu.map[i]);
        g[i].host[CUDA][d] = cudaref_host_alloc_flags(B.size, 1 /* portable */);
        g[i].cu_dev[d] = cudaref_dev_alloc(B.size);
        if (!g[i].host[CUDA][d] || !g[i].cu_dev[d] || cu.stream_create(&g[i].cu_stream[d])) {
          fprintf(stderr, "multigpu-bench: CUDA allocation failed on GPU %d\n", i);
          exit(1);
        }
        memset(g[i].host[CUDA][d], 0, B.size);
      }
    }
  }
}

static void close_sides(gpu_side *g, int n, bool shared, cl_context *ctx) {
  for (int i = 0; i < n; i++)
    for (int d = 0; d < 2; d++) {
      clFinish(g[i].q[d]);
      clpin_host_unregister(g[i].host[REGISTERED][d]);
      free(g[i].host[REGISTERED][d]);
      free(g[i].host[STAGED][d]);
      clpin_host_free(g[i].host[POOL][d]);
      clReleaseMemObject(g[i].buf[d]);
      clReleaseCommandQueue(g[i].q[d]);
      if (g[i].host[CUDA][d]) {
        cudaref_set_device(cu.map[i]);
        cudaref_host_free(g[i].host[CUDA][d]);
        cudaref_dev_free(g[i].cu_dev[d]);
      }
    }
  for (int i = 0; i < (shared ? 1 : n); i++) {
    clpin_pool_release_context(ctx[i]);
    clReleaseContext(ctx[i]);
  }
}

static size_t memcpy_bytes(void) { return B.quick ? 64 * MiB : 1024 * MiB; }
static int online_cpus(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return (int)(online < 1 ? 1 : online < MAXCPU ? online : MAXCPU);
}

/* The host's memcpy on all online CPUs, measured again before each run of
 * every layout: the bound of that run's staged figures. Its memory is made
 * once and kept. */
static double bound_now(void) {
  static char *src, *dst;
  if (!src) {
    src = xalloc(memcpy_bytes());
    dst = xalloc(memcpy_bytes());
  }
  return bench_memcpy_gbps(dst, src, memcpy_bytes(), online_cpus(), NULL);
}

/* One GPU count n: one context per GPU and, for two GPUs or more
 * (with_shared), one context holding all n, both open at once. Every run
 * measures each layout in turn (the order swapped every other run) after
 * the host's memcpy when bound is set, so each ratio compares figures of
 * the same few seconds: on the 4x H200 VM the same figure moved up to 20%
 * between processes and minutes (docs/BENCHMARKS.md, "Several GPUs"). */
static void layout(int ci, bool with_shared, bool bound) {
  int n = (int)B.counts[ci];
  int nl = with_shared && n > 1 ? 2 : 1;
  static gpu_side g[2][MAXD];
  cl_context ctx[2][MAXD];
  bool with_cuda[2] = {false, false};
  /* Every figure's name starts with the GPU count and the layout, so
   * bench/gpu-multi.sh can pool a line's runs over processes by its name. */
  const char *lay[2] = {"ctxs", "1ctx"};
  for (int l = 0; l < nl; l++) {
    open_sides(g[l], n, l == 1, ctx[l]);
    with_cuda[l] = cu.lib;
    for (int i = 0; i < n; i++)
      with_cuda[l] = with_cuda[l] && g[l][i].host[CUDA][0];
    printf("\nlayout: %d GPU(s), %s, %zu MiB x %d per stream%s\n", n,
           l ? "one context for all" : "one context per GPU", B.size / MiB, B.iters,
           nl > 1 ? " (both layouts in turn within each run)" : "");
    for (int k = POOL; k <= STAGED; k++)
      check_kind(g[l], n, (mem_kind)k);
  }
  bool staged = bound;
  for (int dir = H2D; dir <= DUPLEX; dir++) {
    static double rate[2][KINDS][MAXR];
    double mbw[MAXR], ratio[MAXR];
    char what[96];
    for (int r = -1; r < B.runs; r++) { /* run -1 warms up pools, workers and pinning */
      if (staged && r >= 0)
        mbw[r] = bound_now();
      for (int o = 0; o < nl; o++) {
        int l = (r & 1) ? nl - 1 - o : o;
        for (int k = 0; k < KINDS; k++) {
          if (k == CUDA && !with_cuda[l])
            continue;
          double v = round_gbps(g[l], n, (mem_kind)k, (direction)dir);
          if (r >= 0)
            rate[l][k][r] = v;
        }
      }
    }
    if (staged) {
      snprintf(what, sizeof what, "%dx %s memcpy before each run, %d threads", n, dir_name[dir],
               online_cpus());
      report(what, mbw, B.runs, "GB/s");
    }
    for (int l = 0; l < nl; l++) {
      for (int k = 0; k < KINDS; k++) {
        if (k == CUDA && !with_cuda[l])
          continue;
        snprintf(what, sizeof what, "%dx %s %s %s, aggregate", n, lay[l], dir_name[dir],
                 kind_name[k]);
        report(what, rate[l][k], B.runs, "GB/s");
      }
      for (int k = POOL; k <= REGISTERED && with_cuda[l]; k++) {
        for (int r = 0; r < B.runs; r++)
          ratio[r] = rate[l][k][r] / rate[l][CUDA][r];
        snprintf(what, sizeof what, "%dx %s %s %s / CUDA pinned", n, lay[l], dir_name[dir],
                 kind_name[k]);
        target(what, ratio, B.runs, 0.95);
      }
      if (staged) {
        /* Staging copies every byte once on the host: the host's memcpy
         * rate bounds it, and so does the bus (CUDA pinned) where that is
         * lower; both of the same run. */
        for (int r = 0; r < B.runs; r++) {
          double b = mbw[r];
          if (with_cuda[l] && rate[l][CUDA][r] < b)
            b = rate[l][CUDA][r];
          ratio[r] = rate[l][STAGED][r] / b;
        }
        snprintf(what, sizeof what, "%dx %s %s staged / min(memcpy, CUDA)", n, lay[l],
                 dir_name[dir]);
        target(what, ratio, B.runs, 0.9);
      }
      if (l == 1)
        for (int k = POOL; k <= STAGED; k++) {
          for (int r = 0; r < B.runs; r++)
            ratio[r] = rate[1][k][r] / rate[0][k][r];
          snprintf(what, sizeof what, "%dx 1ctx %s %s / per-GPU ctxs, same run", n, dir_name[dir],
                   kind_name[k]);
          target(what, ratio, B.runs, 0.95);
        }
    }
  }
  for (int l = 0; l < nl; l++)
    close_sides(g[l], n, l == 1, ctx[l]);
}

/* ---- host memory bandwidth --------------------------------------------------- */

/* The host's memcpy at the start, on all CPUs (the layouts measure their
 * bound again each run). */
static void case_memcpy(void) {
  size_t total = memcpy_bytes();
  int all = online_cpus();
  printf("\nmemcpy: host memory bandwidth, %zu MiB copied per run\n", total / MiB);
  double v[MAXR];
  for (int r = 0; r < B.runs; r++)
    v[r] = bench_memcpy_gbps(NULL, NULL, total, all, NULL);
  char what[96];
  snprintf(what, sizeof what, "memcpy, %d threads (all online CPUs)", all);
  report(what, v, B.runs, "GB/s");
}

/* ---- options ---------------------------------------------------------------- */

static void parse(int argc, char **argv) {
  const char *cases = "memcpy,layout";
  B.ncounts = bench_parse_counts("1,2,4,8", B.counts, 8);
  const bench_opt opts[] = {BENCH_OPT("--platform", BENCH_TEXT, &B.platform_name),
                            BENCH_OPT("--case", BENCH_TEXT, &cases),
                            BENCH_OPT_LIST("--counts", BENCH_COUNTS, B.counts, &B.ncounts, 8),
                            BENCH_OPT("--size", BENCH_SIZE, &B.size),
                            BENCH_OPT("--iters", BENCH_INT, &B.iters),
                            BENCH_OPT("--runs", BENCH_INT, &B.runs),
                            BENCH_OPT("--no-cuda", BENCH_FLAG, &B.no_cuda),
                            BENCH_OPT("--quick", BENCH_FLAG, &B.quick),
                            BENCH_OPT("--list", BENCH_FLAG, &B.list)};
  BENCH_PARSE_OPTS("multigpu-bench",
                   "[--platform NAME] [--case memcpy,layout] [--counts 1,2,4,8] [--size BYTES] "
                   "[--iters N] [--runs N] [--no-cuda] [--quick] [--list]\n",
                   argc, argv, opts);
  B.cases =
      (strstr(cases, "memcpy") ? CASE_MEMCPY : 0) | (strstr(cases, "layout") ? CASE_LAYOUT : 0);
  if (B.quick) { /* 8 MiB, one iteration, at most 3 runs */
    B.size = 8 * MiB;
    B.iters = 1;
    B.runs = B.runs < 3 ? B.runs : 3;
  }
  if (!B.cases || B.size < 4096 || B.runs < 1 || B.runs > MAXR || B.iters < 1) {
    fprintf(stderr,
            "multigpu-bench: --case memcpy and/or layout, --size at least 4096, "
            "--runs 1 ... %d, --iters at least 1\n",
            MAXR);
    exit(2);
  }
}

int main(int argc, char **argv) {
  parse(argc, argv);
  printf("multigpu-bench: CLPIN_NUMA=%s\n",
         getenv("CLPIN_NUMA") ? getenv("CLPIN_NUMA") : "(unset: auto)");
  pick_devices();
  if (!B.no_cuda)
    cuda_open();
  if (B.list) { /* the devices and the map only (bench/gpu-multi.sh) */
    printf("devices: %d\n", B.ndev);
    return 0;
  }
  if (B.cases & CASE_MEMCPY)
    case_memcpy();
  if (B.cases & CASE_LAYOUT)
    for (int c = 0; c < B.ncounts; c++)
      if ((int)B.counts[c] <= B.ndev)
        layout(c, true, B.cases & CASE_MEMCPY);
  clpin_shutdown();
  return 0;
}
