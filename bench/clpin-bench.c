/* clpin-bench: every transfer path of clpin against its baseline, measured in
 * the same process run; the numbers in docs/BENCHMARKS.md come from here.
 *
 * Cases (--case, comma-separated; default transfer,pool,threads):
 *   transfer  H2D/D2H at --sizes through every path (table below)
 *   sweep     the same paths over --sweep-min ... --sweep-max
 *   pool      one thread: pool hit (acquire+release) against create+map+
 *             unmap+release of a fresh CL_MEM_ALLOC_HOST_PTR buffer
 *   threads   acquire/release of mixed sizes from --threads threads at once,
 *             against the same loop on one thread
 *   memcpy    host memcpy from malloc into pool memory split over
 *             --tune-threads threads: the ceiling of the staging pipeline
 *   tune      clpin-pin over --tune-chunks x --tune-threads, to choose the
 *             CLPIN_CHUNK and CLPIN_THREADS defaults
 *   alloc     what a fresh 1 MiB pinned buffer costs (OpenCL create+map, and
 *             cudaHostAlloc), before and after a large pinned buffer came and
 *             went; allocating per transfer against the pool; and the cost of
 *             an uncontended atomic, the floor of a race-safe pool hit. Runs
 *             first, so "fresh" means a process that has pinned nothing yet
 *
 * Paths:
 *   pageable       clEnqueueWrite/ReadBuffer from/to malloc memory
 *   cl-pinned      the same from/to a mapped CL_MEM_ALLOC_HOST_PTR buffer
 *   clpin-host     clpin_write/clpin_read on clpin_host_alloc memory
 *   clpin-pin      clpin_write/clpin_read with CLPIN_PIN_MEMORY on malloc memory
 *   clpin-plain    clpin_write/clpin_read without flags on malloc memory
 *   cuda-pinned    cudaMemcpy from/to cudaHostAlloc memory (when CUDA loads)
 *   cuda-pageable  cudaMemcpy from/to malloc memory (when CUDA loads)
 *
 * Each point: warm-ups, then --reps timed repetitions, each one a blocking
 * transfer followed by clFinish (cudaDeviceSynchronize), so every path is
 * timed to completion; the median is reported. Every point checks its data
 * (a fresh pattern per point) and the run exits non-zero on a mismatch.
 * Exit status: 0 ok, 1 error, 2 usage, 3 data mismatch, 4 a clpin path did
 * not take the route expected of it (--strict).
 */
#include "benchstat.h"
#include "cudaref.h"

#include "clpin.h"
#include "internal.h" /* clpin__parse_size */

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MiB ((size_t)1 << 20)
#define MAX_LIST 32

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

enum {
  CASE_TRANSFER = 1, CASE_SWEEP = 2, CASE_POOL = 4, CASE_THREADS = 8, CASE_TUNE = 16, CASE_MEMCPY = 32,
  CASE_ALLOC = 64, CASE_ALL = 127
};

typedef struct {
  const char *platform;
  int device, cuda_device;
  unsigned cases;
  size_t sizes[MAX_LIST];
  int nsizes;
  size_t sweep_min, sweep_max;
  unsigned sweep_step;
  size_t max_size;
  unsigned reps, warmup;
  unsigned pool_batches, pool_batch_ops, create_reps;
  unsigned threads, thread_ops;
  size_t tune_sizes[MAX_LIST];
  int ntune_sizes;
  size_t tune_chunks[MAX_LIST];
  int ntune_chunks;
  unsigned tune_threads[MAX_LIST];
  int ntune_threads;
  unsigned tune_reps;
  const char *csv, *json;
  unsigned paths; /* bit per path_id; 0: all */
  bool no_cuda, strict, list;
} bench_opts;

static void usage(FILE *f) {
  fputs("usage: clpin-bench [options]\n"
        "  --case LIST          transfer,sweep,pool,threads,memcpy,tune,alloc or all\n"
        "                       (default transfer,pool,threads)\n"
        "  --platform S         first platform whose name contains S (default: first with a GPU)\n"
        "  --device N           device N of that platform (default 0)\n"
        "  --list               list platforms and devices, then exit\n"
        "  --sizes LIST         transfer sizes (default 16M,64M,256M,1G)\n"
        "  --paths LIST         only these paths (pageable,cl-pinned,clpin-host,clpin-pin,\n"
        "                       clpin-plain,cuda-pinned,cuda-pageable; default all)\n"
        "  --sweep-min S, --sweep-max S, --sweep-step K   sweep sizes S, S*K, ... (4K, 1G, 2)\n"
        "  --max-size S         drop every size above S\n"
        "  --reps N, --warmup N timed repetitions and warm-ups per point (11, 2)\n"
        "  --threads N          threads for the threads case (16)\n"
        "  --thread-ops N       acquire/release pairs per thread (200000)\n"
        "  --tune-sizes LIST    sizes for tune and memcpy (64M,1G)\n"
        "  --tune-chunks LIST   chunk sizes for tune (256K,512K,1M,2M,4M,8M,16M,32M)\n"
        "  --tune-threads LIST  copy-thread counts for tune and memcpy (1,2,4,8,12,16)\n"
        "  --tune-reps N        repetitions per tune point (5)\n"
        "  --quick              small sizes and few repetitions (the CI smoke run)\n"
        "  --csv FILE, --json FILE   also write every figure there (- for stdout)\n"
        "  --no-cuda            skip the CUDA baseline\n"
        "  --cuda-device N      CUDA device of the baseline (0)\n"
        "  --strict             exit 4 when a clpin path takes another route than expected\n",
        f);
}

static void defaults(bench_opts *o) {
  memset(o, 0, sizeof *o);
  o->cases = CASE_TRANSFER | CASE_POOL | CASE_THREADS;
  o->sizes[0] = 16 * MiB, o->sizes[1] = 64 * MiB, o->sizes[2] = 256 * MiB, o->sizes[3] = 1024 * MiB;
  o->nsizes = 4;
  o->sweep_min = 4096, o->sweep_max = 1024 * MiB, o->sweep_step = 2;
  o->max_size = SIZE_MAX;
  o->reps = 11, o->warmup = 2;
  o->pool_batches = 101, o->pool_batch_ops = 1000, o->create_reps = 51;
  o->threads = 16, o->thread_ops = 200000;
  o->tune_sizes[0] = 64 * MiB, o->tune_sizes[1] = 1024 * MiB;
  o->ntune_sizes = 2;
  static const size_t chunks[] = {256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20,
                                  32 << 20};
  o->ntune_chunks = (int)(sizeof chunks / sizeof *chunks);
  memcpy(o->tune_chunks, chunks, sizeof chunks);
  static const unsigned threads[] = {1, 2, 4, 8, 12, 16};
  o->ntune_threads = (int)(sizeof threads / sizeof *threads);
  memcpy(o->tune_threads, threads, sizeof threads);
  o->tune_reps = 5;
}

static void quick(bench_opts *o) {
  o->cases = CASE_ALL;
  o->sizes[0] = 64 << 10, o->sizes[1] = 1 * MiB, o->sizes[2] = 4 * MiB;
  o->nsizes = 3;
  o->sweep_min = 4096, o->sweep_max = 4 * MiB, o->sweep_step = 4;
  o->reps = 3, o->warmup = 1;
  o->pool_batches = 21, o->pool_batch_ops = 200, o->create_reps = 11;
  o->threads = 4, o->thread_ops = 2000;
  o->tune_sizes[0] = 4 * MiB, o->ntune_sizes = 1;
  o->tune_chunks[0] = 256 << 10, o->tune_chunks[1] = 1 * MiB, o->ntune_chunks = 2;
  o->tune_threads[0] = 1, o->tune_threads[1] = 2, o->ntune_threads = 2;
  o->tune_reps = 2;
  o->max_size = 4 * MiB;
}

typedef enum {
  P_PAGEABLE, P_CL_PINNED, P_CLPIN_HOST, P_CLPIN_PIN, P_CLPIN_PLAIN, P_CUDA_PINNED,
  P_CUDA_PAGEABLE, P_COUNT
} path_id;

static const char *const path_names[P_COUNT] = {
    "pageable", "cl-pinned", "clpin-host", "clpin-pin", "clpin-plain", "cuda-pinned",
    "cuda-pageable"};

static bool parse_paths(const char *text, unsigned *out) {
  *out = 0;
  char buf[256];
  if (strlen(text) >= sizeof buf)
    return false;
  strcpy(buf, text);
  for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int p = 0;
    while (p < P_COUNT && strcmp(path_names[p], tok))
      p++;
    if (p == P_COUNT)
      return false;
    *out |= 1u << p;
  }
  return *out != 0;
}

static bool parse_cases(const char *text, unsigned *out) {
  static const struct {
    const char *name;
    unsigned bit;
  } names[] = {{"transfer", CASE_TRANSFER}, {"sweep", CASE_SWEEP}, {"pool", CASE_POOL},
               {"threads", CASE_THREADS},   {"tune", CASE_TUNE},   {"memcpy", CASE_MEMCPY},
               {"alloc", CASE_ALLOC},       {"all", CASE_ALL}};
  *out = 0;
  char buf[256];
  if (strlen(text) >= sizeof buf)
    return false;
  strcpy(buf, text);
  for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    size_t i = 0;
    while (i < sizeof names / sizeof *names && strcmp(names[i].name, tok))
      i++;
    if (i == sizeof names / sizeof *names)
      return false;
    *out |= names[i].bit;
  }
  return *out != 0;
}

/* A decimal count in [min, 1 << 20]. */
static bool parse_uint_min(const char *s, unsigned min, unsigned *out) {
  char *end;
  if (!s || *s < '0' || *s > '9')
    return false;
  unsigned long v = strtoul(s, &end, 10);
  if (*end != '\0' || v < min || v > (1u << 20))
    return false;
  *out = (unsigned)v;
  return true;
}

static bool parse_uint(const char *s, unsigned *out) { return parse_uint_min(s, 1, out); }

static bool parse_one_size(const char *s, size_t *out) { return clpin__parse_size(s, out) && *out; }

/* Returns 0 to run, 1 to exit successfully (--help), 2 on a usage error. */
static int parse_args(int argc, char **argv, bench_opts *o) {
  defaults(o);
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--quick"))
      quick(o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool ok = true, takes = true;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 1;
    } else if (!strcmp(a, "--quick")) {
      takes = false;
    } else if (!strcmp(a, "--no-cuda")) {
      o->no_cuda = true, takes = false;
    } else if (!strcmp(a, "--strict")) {
      o->strict = true, takes = false;
    } else if (!strcmp(a, "--list")) {
      o->list = true, takes = false;
    } else if (!v) {
      ok = false;
    } else if (!strcmp(a, "--case")) {
      ok = parse_cases(v, &o->cases);
    } else if (!strcmp(a, "--platform")) {
      o->platform = v;
    } else if (!strcmp(a, "--device") || !strcmp(a, "--cuda-device")) {
      unsigned n = 0;
      ok = parse_uint_min(v, 0, &n);
      *(!strcmp(a, "--device") ? &o->device : &o->cuda_device) = (int)n;
    } else if (!strcmp(a, "--paths")) {
      ok = parse_paths(v, &o->paths);
    } else if (!strcmp(a, "--sizes")) {
      ok = (o->nsizes = bench_parse_sizes(v, o->sizes, MAX_LIST)) > 0;
    } else if (!strcmp(a, "--sweep-min")) {
      ok = parse_one_size(v, &o->sweep_min);
    } else if (!strcmp(a, "--sweep-max")) {
      ok = parse_one_size(v, &o->sweep_max);
    } else if (!strcmp(a, "--sweep-step")) {
      ok = parse_uint(v, &o->sweep_step) && o->sweep_step >= 2;
    } else if (!strcmp(a, "--max-size")) {
      ok = parse_one_size(v, &o->max_size);
    } else if (!strcmp(a, "--reps")) {
      ok = parse_uint(v, &o->reps);
    } else if (!strcmp(a, "--warmup")) {
      ok = parse_uint_min(v, 0, &o->warmup);
    } else if (!strcmp(a, "--threads")) {
      ok = parse_uint(v, &o->threads);
    } else if (!strcmp(a, "--thread-ops")) {
      ok = parse_uint(v, &o->thread_ops);
    } else if (!strcmp(a, "--tune-sizes")) {
      ok = (o->ntune_sizes = bench_parse_sizes(v, o->tune_sizes, MAX_LIST)) > 0;
    } else if (!strcmp(a, "--tune-chunks")) {
      ok = (o->ntune_chunks = bench_parse_sizes(v, o->tune_chunks, MAX_LIST)) > 0;
    } else if (!strcmp(a, "--tune-threads")) {
      ok = (o->ntune_threads = bench_parse_counts(v, o->tune_threads, MAX_LIST)) > 0;
    } else if (!strcmp(a, "--tune-reps")) {
      ok = parse_uint(v, &o->tune_reps);
    } else if (!strcmp(a, "--csv")) {
      o->csv = v;
    } else if (!strcmp(a, "--json")) {
      o->json = v;
    } else {
      ok = false;
    }
    if (!ok) {
      fprintf(stderr, "clpin-bench: bad or missing value for %s\n", a);
      usage(stderr);
      return 2;
    }
    if (takes)
      i++;
  }
  if (o->sweep_min > o->sweep_max) {
    fprintf(stderr, "clpin-bench: --sweep-min is above --sweep-max\n");
    return 2;
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Results                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct {
  const char *section; /* transfer, sweep, pool, threads, tune */
  const char *path;
  const char *dir; /* H2D, D2H, or "" */
  size_t bytes;
  size_t chunk;     /* tune: CLPIN_CHUNK; else the option in force */
  unsigned threads; /* tune/threads: thread count */
  const char *unit; /* GB/s, ns, Mops/s */
  const char *route; /* clpin's path per its stats; "" for baselines */
  bench_summary s;
} record;

static struct {
  record *v;
  size_t n, cap;
} results;

static int exit_status;

static void fail_status(int status) {
  if (status > exit_status)
    exit_status = status;
}

static record *add_record(record r) {
  if (results.n == results.cap) {
    size_t cap = results.cap ? 2 * results.cap : 256;
    record *v = realloc(results.v, cap * sizeof *v);
    if (!v) {
      fprintf(stderr, "clpin-bench: out of memory\n");
      exit(1);
    }
    results.v = v, results.cap = cap;
  }
  results.v[results.n] = r;
  return &results.v[results.n++];
}

static const record *find_record(const char *section, const char *path, const char *dir,
                                 size_t bytes) {
  for (size_t i = 0; i < results.n; i++) {
    const record *r = &results.v[i];
    if (!strcmp(r->section, section) && !strcmp(r->path, path) && !strcmp(r->dir, dir) &&
        r->bytes == bytes)
      return r;
  }
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* OpenCL setup                                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
  cl_platform_id platform;
  cl_device_id device;
  cl_context ctx;
  cl_command_queue q;
  char platform_name[256], device_name[256], driver[128], device_version[128], cpu[256];
  bool unified;
  size_t max_alloc;
  clpin_pool *pool;
} bench_cl;

#define CL_TRY(expr)                                                                          \
  do {                                                                                        \
    cl_int err_ = (expr);                                                                     \
    if (err_ != CL_SUCCESS) {                                                                 \
      fprintf(stderr, "clpin-bench: %s:%d: %s: %s\n", __FILE__, __LINE__, #expr,             \
              clpin_strerror(err_));                                                          \
      return false;                                                                           \
    }                                                                                         \
  } while (0)

static void list_devices(void) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  if (clGetPlatformIDs(16, ps, &np) != CL_SUCCESS)
    np = 0;
  for (cl_uint i = 0; i < np && i < 16; i++) {
    char name[256] = "";
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    printf("platform %u: %s\n", i, name);
    cl_device_id ds[16];
    cl_uint nd = 0;
    if (clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_ALL, 16, ds, &nd) != CL_SUCCESS)
      nd = 0;
    for (cl_uint j = 0; j < nd && j < 16; j++) {
      clGetDeviceInfo(ds[j], CL_DEVICE_NAME, sizeof name, name, NULL);
      printf("  device %u: %s\n", j, name);
    }
  }
}

/* The device: --platform/--device when given, else the first GPU of any
 * platform, else the first device of the first platform. */
static bool pick_device(const bench_opts *o, bench_cl *b) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  CL_TRY(clGetPlatformIDs(16, ps, &np));
  if (np > 16)
    np = 16;
  for (int pass = 0; pass < 2 && !b->device; pass++) {
    for (cl_uint i = 0; i < np && !b->device; i++) {
      char name[256] = "";
      clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
      if (o->platform && !strstr(name, o->platform))
        continue;
      cl_device_id ds[16];
      cl_uint nd = 0;
      cl_device_type type = o->platform || pass ? CL_DEVICE_TYPE_ALL : CL_DEVICE_TYPE_GPU;
      if (clGetDeviceIDs(ps[i], type, 16, ds, &nd) != CL_SUCCESS || nd == 0)
        continue;
      int want = o->platform || pass ? o->device : 0;
      if (want >= (int)(nd < 16 ? nd : 16))
        continue;
      b->platform = ps[i], b->device = ds[want];
    }
  }
  if (!b->device) {
    fprintf(stderr, "clpin-bench: no OpenCL device matches (try --list)\n");
    return false;
  }
  return true;
}

static void read_cpu_name(char *buf, size_t len) {
  snprintf(buf, len, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (!strncmp(line, "model name", 10) && colon) {
      colon += 2;
      colon[strcspn(colon, "\n")] = '\0';
      snprintf(buf, len, "%s", colon);
      break;
    }
  }
  fclose(f);
}

static bool open_cl(const bench_opts *o, bench_cl *b) {
  if (!pick_device(o, b))
    return false;
  clGetPlatformInfo(b->platform, CL_PLATFORM_NAME, sizeof b->platform_name, b->platform_name, NULL);
  clGetDeviceInfo(b->device, CL_DEVICE_NAME, sizeof b->device_name, b->device_name, NULL);
  clGetDeviceInfo(b->device, CL_DRIVER_VERSION, sizeof b->driver, b->driver, NULL);
  clGetDeviceInfo(b->device, CL_DEVICE_VERSION, sizeof b->device_version, b->device_version, NULL);
  cl_bool unified = CL_FALSE;
  clGetDeviceInfo(b->device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
  b->unified = unified;
  cl_ulong max_alloc = 0;
  CL_TRY(clGetDeviceInfo(b->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL));
  b->max_alloc = max_alloc > SIZE_MAX ? SIZE_MAX : (size_t)max_alloc;
  read_cpu_name(b->cpu, sizeof b->cpu);
  cl_int err;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)b->platform, 0};
  b->ctx = clCreateContext(props, 1, &b->device, NULL, NULL, &err);
  CL_TRY(err);
  b->q = clCreateCommandQueue(b->ctx, b->device, 0, &err);
  CL_TRY(err);
  CL_TRY(clpin_pool_get(b->q, &b->pool));
  return true;
}

/* ------------------------------------------------------------------------ */
/* Transfers                                                                */
/* ------------------------------------------------------------------------ */

typedef enum { H2D, D2H } direction;
static const char *const dir_names[] = {"H2D", "D2H"};

/* Host and device memory for every path, each of `cap` bytes. */
typedef struct {
  size_t cap;
  unsigned char *pg_src, *pg_dst; /* malloc, touched before use */
  cl_mem dev;
  cl_mem cl_pinned_mem;
  void *cl_pinned;  /* mapped pointer of cl_pinned_mem */
  void *clpin_host; /* clpin_host_alloc */
  void *cuda_host, *cuda_dev;
  unsigned paths; /* --paths: the paths measured (0: all) */
} buffers;

static bool is_cuda(path_id p) { return p == P_CUDA_PINNED || p == P_CUDA_PAGEABLE; }
static bool is_clpin(path_id p) { return p == P_CLPIN_HOST || p == P_CLPIN_PIN || p == P_CLPIN_PLAIN; }

static bool path_available(const buffers *bf, path_id p) {
  if (bf->paths && !(bf->paths & (1u << p)))
    return false;
  return is_cuda(p) ? bf->cuda_dev != NULL : true;
}

/* The host side of path p in direction d. */
static void *host_side(const buffers *bf, path_id p, direction d) {
  switch (p) {
  case P_CL_PINNED: return bf->cl_pinned;
  case P_CLPIN_HOST: return bf->clpin_host;
  case P_CUDA_PINNED: return bf->cuda_host;
  default: return d == H2D ? bf->pg_src : bf->pg_dst;
  }
}

static bool alloc_buffers(const bench_cl *b, size_t cap, bool cuda, buffers *bf) {
  memset(bf, 0, sizeof *bf);
  bf->cap = cap;
  bf->pg_src = malloc(cap);
  bf->pg_dst = malloc(cap);
  if (!bf->pg_src || !bf->pg_dst) {
    fprintf(stderr, "clpin-bench: cannot malloc %zu bytes\n", cap);
    return false;
  }
  /* Touch every page: first-touch faults are not what a transfer costs. */
  memset(bf->pg_src, 1, cap);
  memset(bf->pg_dst, 1, cap);
  cl_int err;
  bf->dev = clCreateBuffer(b->ctx, CL_MEM_READ_WRITE, cap, NULL, &err);
  CL_TRY(err);
  bf->cl_pinned_mem = clCreateBuffer(b->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, cap, NULL, &err);
  CL_TRY(err);
  bf->cl_pinned = clEnqueueMapBuffer(b->q, bf->cl_pinned_mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                     cap, 0, NULL, NULL, &err);
  CL_TRY(err);
  memset(bf->cl_pinned, 1, cap);
  bf->clpin_host = clpin_host_alloc(b->pool, cap);
  if (!bf->clpin_host) {
    fprintf(stderr, "clpin-bench: clpin_host_alloc(%zu) failed\n", cap);
    return false;
  }
  memset(bf->clpin_host, 1, cap);
  if (cuda) {
    bf->cuda_host = cudaref_host_alloc(cap);
    bf->cuda_dev = cudaref_dev_alloc(cap);
    if (!bf->cuda_host || !bf->cuda_dev) {
      fprintf(stderr, "clpin-bench: CUDA cannot allocate %zu bytes; no CUDA baseline\n", cap);
      cudaref_host_free(bf->cuda_host);
      cudaref_dev_free(bf->cuda_dev);
      bf->cuda_host = bf->cuda_dev = NULL;
    } else {
      memset(bf->cuda_host, 1, cap);
    }
  }
  return true;
}

static void free_buffers(const bench_cl *b, buffers *bf) {
  if (bf->cl_pinned) {
    clEnqueueUnmapMemObject(b->q, bf->cl_pinned_mem, bf->cl_pinned, 0, NULL, NULL);
    clFinish(b->q);
  }
  if (bf->cl_pinned_mem)
    clReleaseMemObject(bf->cl_pinned_mem);
  if (bf->dev)
    clReleaseMemObject(bf->dev);
  clpin_host_free(bf->clpin_host);
  cudaref_host_free(bf->cuda_host);
  cudaref_dev_free(bf->cuda_dev);
  free(bf->pg_src);
  free(bf->pg_dst);
  memset(bf, 0, sizeof *bf);
}

/* One blocking transfer of n bytes through path p, timed to completion. */
static bool transfer(const bench_cl *b, const buffers *bf, path_id p, direction d, size_t n) {
  void *host = host_side(bf, p, d);
  switch (p) {
  case P_PAGEABLE:
  case P_CL_PINNED:
    if (d == H2D)
      CL_TRY(clEnqueueWriteBuffer(b->q, bf->dev, CL_TRUE, 0, n, host, 0, NULL, NULL));
    else
      CL_TRY(clEnqueueReadBuffer(b->q, bf->dev, CL_TRUE, 0, n, host, 0, NULL, NULL));
    break;
  case P_CLPIN_HOST:
  case P_CLPIN_PIN:
  case P_CLPIN_PLAIN: {
    unsigned flags = p == P_CLPIN_PIN ? CLPIN_PIN_MEMORY : 0;
    if (d == H2D)
      CL_TRY(clpin_write(b->q, bf->dev, 0, host, n, flags, 0, NULL, NULL));
    else
      CL_TRY(clpin_read(b->q, bf->dev, 0, host, n, flags, 0, NULL, NULL));
    break;
  }
  case P_CUDA_PINNED:
  case P_CUDA_PAGEABLE:
    return cudaref_copy(host, bf->cuda_dev, n, d == H2D ? CUDAREF_H2D : CUDAREF_D2H);
  default: return false;
  }
  CL_TRY(clFinish(b->q));
  return true;
}

/* Put the pattern of seed into the device buffer of path p by a plain
 * transfer from pg_src (the source of a D2H point). */
static bool device_fill(const bench_cl *b, const buffers *bf, path_id p, size_t n, uint64_t seed) {
  bench_fill(bf->pg_src, n, seed);
  if (is_cuda(p))
    return cudaref_copy(bf->pg_src, bf->cuda_dev, n, CUDAREF_H2D);
  CL_TRY(clEnqueueWriteBuffer(b->q, bf->dev, CL_TRUE, 0, n, bf->pg_src, 0, NULL, NULL));
  return true;
}

/* Read the device buffer of path p back into pg_dst by a plain transfer. */
static bool device_fetch(const bench_cl *b, const buffers *bf, path_id p, size_t n) {
  if (is_cuda(p))
    return cudaref_copy(bf->pg_dst, bf->cuda_dev, n, CUDAREF_D2H);
  CL_TRY(clEnqueueReadBuffer(b->q, bf->dev, CL_TRUE, 0, n, bf->pg_dst, 0, NULL, NULL));
  return true;
}

static clpin_stats pool_stats(const bench_cl *b) {
  clpin_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  if (clpin_pool_stats(b->pool, &s) != CL_SUCCESS)
    fprintf(stderr, "clpin-bench: clpin_pool_stats failed\n");
  return s;
}

/* Which route clpin took between two snapshots: the counter that grew most. */
static const char *route_between(const clpin_stats *a, const clpin_stats *z) {
  if (z->fallbacks > a->fallbacks)
    return "fallback";
  struct {
    const char *name;
    uint64_t delta;
  } r[] = {{"direct", z->bytes_pinned_direct - a->bytes_pinned_direct},
           {"staged", z->bytes_staged - a->bytes_staged},
           {"pipelined", z->bytes_pipelined - a->bytes_pipelined},
           {"unpinned", z->bytes_unpinned - a->bytes_unpinned}};
  size_t best = 0;
  for (size_t i = 1; i < sizeof r / sizeof *r; i++)
    if (r[i].delta > r[best].delta)
      best = i;
  return r[best].delta ? r[best].name : "none";
}

/* The routes a clpin path may take here; NULL for a baseline. */
static bool route_expected(const bench_cl *b, path_id p, size_t n, const char *route) {
  switch (p) {
  case P_CLPIN_HOST: return !strcmp(route, "direct");
  case P_CLPIN_PLAIN: return !strcmp(route, "unpinned");
  case P_CLPIN_PIN:
    /* Never slower: plain where staging does not pay (a host-unified
     * device unless CLPIN_PINNED_H2D=1, or below CLPIN_STAGE_MIN). */
    if ((b->unified && clpin_get_option(CLPIN_OPT_PINNED_H2D) != 1) ||
        n < clpin_get_option(CLPIN_OPT_STAGE_MIN))
      return !strcmp(route, "unpinned");
    return !strcmp(route, "staged") || !strcmp(route, "pipelined");
  default: return true;
  }
}

static uint64_t next_seed(void) {
  static uint64_t seed = 0x5eed;
  return ++seed;
}

/* Time one (path, direction, size) point and check its data. Small sizes
 * are timed in batches so the clock's own cost stays out of the figure. */
static bool measure(const bench_opts *o, const bench_cl *b, const buffers *bf, path_id p,
                    direction d, size_t n, unsigned reps, record *out) {
  uint64_t seed = next_seed();
  void *host = host_side(bf, p, d);
  if (d == H2D) {
    bench_fill(host, n, seed);
  } else {
    if (!device_fill(b, bf, p, n, seed))
      return false;
    memset(host, 0, n);
  }
  unsigned batch = n >= MiB ? 1 : (unsigned)(MiB / n < 256 ? MiB / n : 256);
  double *gbps = calloc(reps, sizeof *gbps);
  if (!gbps)
    return false;
  clpin_stats before = pool_stats(b);
  bool ok = true;
  for (unsigned w = 0; ok && w < o->warmup * batch; w++)
    ok = transfer(b, bf, p, d, n);
  for (unsigned r = 0; ok && r < reps; r++) {
    uint64_t t0 = bench_now_ns();
    for (unsigned k = 0; ok && k < batch; k++)
      ok = transfer(b, bf, p, d, n);
    gbps[r] = bench_gbps(n, (double)(bench_now_ns() - t0) / batch);
  }
  clpin_stats after = pool_stats(b);
  if (ok) {
    out->s = bench_summarize(gbps, reps);
    out->route = is_clpin(p) ? route_between(&before, &after) : "";
  }
  free(gbps);
  if (!ok)
    return false;
  /* Check the data: what the last transfer put at the destination. */
  size_t bad;
  if (d == H2D) {
    if (!device_fetch(b, bf, p, n))
      return false;
    bad = bench_mismatch(bf->pg_dst, n, seed);
  } else {
    bad = bench_mismatch(host, n, seed);
  }
  if (bad != SIZE_MAX) {
    fprintf(stderr, "clpin-bench: DATA MISMATCH: %s %s %zu bytes, first at byte %zu\n",
            path_names[p], dir_names[d], n, bad);
    fail_status(3);
  }
  if (is_clpin(p) && !route_expected(b, p, n, out->route)) {
    fprintf(stderr, "clpin-bench: %s %s %zu bytes took route \"%s\"\n", path_names[p],
            dir_names[d], n, out->route);
    if (o->strict)
      fail_status(4);
  }
  return true;
}

/* Before the first point: a fresh GPU leaves its idle clocks and link power
 * state only after some traffic (the first point of a cold run measured up to
 * 3x low on the H100), and every path makes its first-use allocations here. */
static bool settle(const bench_cl *b, const buffers *bf) {
  size_t n = bf->cap < 64 * MiB ? bf->cap : 64 * MiB;
  for (int round = 0; round < 3; round++)
    for (int p = 0; p < P_COUNT; p++)
      for (int d = H2D; d <= D2H && path_available(bf, (path_id)p); d++)
        if (!transfer(b, bf, (path_id)p, (direction)d, n))
          return false;
  return true;
}

static void print_transfer_table(const char *section, const size_t *sizes, int nsizes,
                                 const buffers *bf) {
  for (int d = H2D; d <= D2H; d++) {
    printf("\n%s %s, GB/s (median)\n%-10s", section, dir_names[d], "size");
    for (int p = 0; p < P_COUNT; p++)
      if (path_available(bf, (path_id)p))
        printf(" %13s", path_names[p]);
    printf("  clpin routes\n");
    for (int i = 0; i < nsizes; i++) {
      char sz[32];
      printf("%-10s", bench_fmt_size(sizes[i], sz, sizeof sz));
      const char *routes[3] = {"", "", ""};
      for (int p = 0; p < P_COUNT; p++) {
        if (!path_available(bf, (path_id)p))
          continue;
        const record *r = find_record(section, path_names[p], dir_names[d], sizes[i]);
        if (r)
          printf(" %13.2f", r->s.median);
        else
          printf(" %13s", "-");
        if (r && is_clpin((path_id)p))
          routes[p - P_CLPIN_HOST] = r->route;
      }
      printf("  %s/%s/%s\n", routes[0], routes[1], routes[2]);
    }
  }
  fflush(stdout);
}

static bool run_transfers(const bench_opts *o, const bench_cl *b, const buffers *bf,
                          const char *section, const size_t *sizes, int nsizes) {
  for (int i = 0; i < nsizes; i++)
    for (int d = H2D; d <= D2H; d++)
      for (int p = 0; p < P_COUNT; p++) {
        if (!path_available(bf, (path_id)p))
          continue;
        record r = {section, path_names[p], dir_names[d], sizes[i],
                    clpin_get_option(CLPIN_OPT_CHUNK), (unsigned)clpin_get_option(CLPIN_OPT_THREADS),
                    "GB/s", "", {0}};
        if (!measure(o, b, bf, (path_id)p, (direction)d, sizes[i], o->reps, &r))
          return false;
        add_record(r);
      }
  print_transfer_table(section, sizes, nsizes, bf);
  return true;
}

/* ------------------------------------------------------------------------ */
/* Pool: one thread                                                         */
/* ------------------------------------------------------------------------ */

/* Time n-byte CL_MEM_ALLOC_HOST_PTR buffers from clCreateBuffer to unmapped
 * (and released, unless kept: then released after the loop, untimed). Each
 * of the reps samples is the mean of `batch` buffers made back to back, as
 * the hit is timed: NVIDIA's driver hands out new pinned memory in pairs of
 * 1 MiB buffers (one slow, one fast), and a median of single buffers would
 * report only the fast half. */
static bool create_map(const bench_cl *b, size_t n, unsigned reps, unsigned batch, bool kept,
                       double *ns) {
  cl_mem *mems = calloc((size_t)reps * batch, sizeof *mems);
  cl_int err = mems ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
  for (unsigned i = 0; err == CL_SUCCESS && i < reps; i++) {
    uint64_t t0 = bench_now_ns();
    for (unsigned k = 0; err == CL_SUCCESS && k < batch; k++) {
      cl_mem m = clCreateBuffer(b->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &err);
      void *p = NULL;
      if (err == CL_SUCCESS)
        p = clEnqueueMapBuffer(b->q, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, n, 0, NULL, NULL, &err);
      if (err == CL_SUCCESS)
        err = clEnqueueUnmapMemObject(b->q, m, p, 0, NULL, NULL);
      if (err == CL_SUCCESS)
        err = clFinish(b->q);
      if (m && !kept)
        clReleaseMemObject(m);
      else
        mems[(size_t)i * batch + k] = m;
    }
    ns[i] = (double)(bench_now_ns() - t0) / batch;
  }
  for (size_t i = 0; mems && i < (size_t)reps * batch; i++)
    if (mems[i])
      clReleaseMemObject(mems[i]);
  free(mems);
  if (err != CL_SUCCESS)
    fprintf(stderr, "clpin-bench: create+map %zu bytes: %s\n", n, clpin_strerror(err));
  return err == CL_SUCCESS;
}

static bool run_pool(const bench_opts *o, const bench_cl *b) {
  const size_t n = MiB;
  clpin_block *blk;
  /* The first acquire is the miss that fills the bucket. */
  CL_TRY(clpin_acquire(b->pool, n, &blk));
  CL_TRY(clpin_release(blk, NULL));
  clpin_stats before = pool_stats(b);
  double *ns = calloc(o->pool_batches, sizeof *ns);
  if (!ns)
    return false;
  for (unsigned i = 0; i < o->pool_batches; i++) {
    uint64_t t0 = bench_now_ns();
    for (unsigned k = 0; k < o->pool_batch_ops; k++) {
      cl_int err = clpin_acquire(b->pool, n, &blk);
      if (err == CL_SUCCESS)
        err = clpin_release(blk, NULL);
      if (err != CL_SUCCESS) {
        fprintf(stderr, "clpin-bench: acquire/release: %s\n", clpin_strerror(err));
        free(ns);
        return false;
      }
    }
    ns[i] = (double)(bench_now_ns() - t0) / o->pool_batch_ops;
  }
  clpin_stats after = pool_stats(b);
  record hit = {"pool", "clpin-hit", "", n, 0, 1, "ns", "", bench_summarize(ns, o->pool_batches)};
  free(ns);
  uint64_t misses = after.misses - before.misses;
  if (misses) {
    fprintf(stderr, "clpin-bench: %llu pool misses in the hit loop\n", (unsigned long long)misses);
    if (o->strict)
      fail_status(4);
  }
  hit.route = misses ? "misses" : "hits";
  add_record(hit);

  printf("\npool, one thread (median ns per operation)\n"
         "  clpin_acquire+clpin_release, 1 MiB, hit                   %12.1f ns  (p10 %.1f, p90 %.1f)\n",
         hit.s.median, hit.s.p10, hit.s.p90);
  /* What a pool hit saves: a fresh pinned buffer. "new memory" keeps every
   * buffer until the end, so each one is pinned memory the driver did not
   * have (what a growing pool, or a program without one, pays); "freed and
   * made again" frees each before the next, and once the driver holds
   * pinned memory of its own it hands the freed buffer straight back (its
   * own one-slot cache: the case alloc shows it). */
  const size_t sizes[] = {MiB, 16 * MiB, 256 * MiB};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    if (sizes[i] > b->max_alloc || sizes[i] > o->max_size)
      continue;
    unsigned reps = sizes[i] <= MiB ? o->create_reps : sizes[i] <= 16 * MiB ? 11 : 5;
    unsigned batch = sizes[i] <= MiB ? 4 : 1;
    for (int kept = 1; kept >= 0; kept--) {
      record r = {"pool", kept ? "cl-create-map-kept" : "cl-create-map", "", sizes[i], 0, 1, "ns", "",
                  {0}};
      double *samples = calloc(reps, sizeof *samples);
      bool made = samples && create_map(b, sizes[i], reps, batch, kept, samples);
      if (made)
        r.s = bench_summarize(samples, reps);
      free(samples);
      if (!made)
        return false;
      add_record(r);
      char sz[32], label[64];
      snprintf(label, sizeof label, "%s, %s", bench_fmt_size(sizes[i], sz, sizeof sz),
               kept ? "new memory" : "freed+made again");
      printf("  clCreateBuffer+map+unmap+release, %-22s %10.0f ns  (p10 %.0f, p90 %.0f)\n", label,
             r.s.median, r.s.p10, r.s.p90);
    }
  }
  fflush(stdout);
  return true;
}

/* ------------------------------------------------------------------------ */
/* Alloc: what a fresh pinned buffer costs, and the floor of a hit          */
/* ------------------------------------------------------------------------ */

/* One record of n samples, printed as one line of the alloc table. */
static void alloc_record(const char *path, const char *state, size_t bytes, double *ns, size_t n) {
  record r = {"alloc", path, state, bytes, 0, 1, "ns", "", bench_summarize(ns, n)};
  add_record(r);
  char sz[32];
  printf("  %-22s %-9s %-10s %12.0f %12.0f %12.0f %12.0f\n", path, bench_fmt_size(bytes, sz, sizeof sz),
         state, r.s.median, r.s.mean, r.s.p90, r.s.max);
}

/* create_map, with every sample kept for alloc_record. */
static bool alloc_create_map(const bench_cl *b, size_t n, unsigned reps, bool kept, const char *state) {
  double *ns = calloc(reps, sizeof *ns), *sorted = calloc(reps, sizeof *sorted);
  bool ok = ns && sorted && create_map(b, n, reps, 1, kept, ns);
  if (ok) {
    memcpy(sorted, ns, reps * sizeof *sorted);
    alloc_record(kept ? "cl-create-map-kept" : "cl-create-map", state, n, sorted, reps);
    /* Where the slow ones fall: the driver growing its own pinned memory. */
    if (kept) {
      double median = results.v[results.n - 1].s.median;
      printf("  %-22s slower than 4x the median: ", "");
      unsigned slow = 0;
      for (unsigned i = 0; i < reps; i++)
        if (ns[i] > 4 * median)
          printf("%s#%u", slow++ ? " " : "", i);
      printf("%s\n", slow ? "" : "none");
    }
  }
  free(ns);
  free(sorted);
  return ok;
}

/* cudaHostAlloc + cudaFreeHost of n bytes: what pinning itself costs the
 * CUDA driver, without OpenCL's buffer objects. */
static bool alloc_cuda(size_t n, unsigned reps, bool kept, const char *state) {
  double *ns = calloc(reps, sizeof *ns);
  void **ptrs = calloc(reps, sizeof *ptrs);
  bool ok = ns && ptrs;
  for (unsigned i = 0; ok && i < reps; i++) {
    uint64_t t0 = bench_now_ns();
    void *p = cudaref_host_alloc(n);
    ok = p != NULL;
    if (p && !kept)
      cudaref_host_free(p);
    else
      ptrs[i] = p;
    ns[i] = (double)(bench_now_ns() - t0);
  }
  for (unsigned i = 0; ptrs && i < reps; i++)
    if (ptrs[i])
      cudaref_host_free(ptrs[i]);
  if (ok)
    alloc_record(kept ? "cuda-host-alloc-kept" : "cuda-host-alloc", state, n, ns, reps);
  else
    fprintf(stderr, "clpin-bench: cudaHostAlloc of %zu bytes failed\n", n);
  free(ns);
  free(ptrs);
  return ok;
}

/* What a program that allocates a pinned buffer for each transfer pays,
 * against the pool: per 1 MiB H2D, (a) create+map, memcpy, write, unmap,
 * release; (b) clpin_acquire, memcpy, write, clpin_release. */
static bool alloc_per_transfer(const bench_cl *b, size_t n, unsigned reps, const char *state) {
  cl_int err;
  cl_mem dev = clCreateBuffer(b->ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CL_TRY(err);
  unsigned char *src = malloc(n);
  double *ns = calloc(reps, sizeof *ns);
  bool ok = src && ns;
  if (src)
    bench_fill(src, n, 7);
  for (int pool = 0; ok && pool < 2; pool++) {
    for (unsigned i = 0; ok && i < reps; i++) {
      uint64_t t0 = bench_now_ns();
      if (pool) {
        clpin_block *blk = NULL;
        err = clpin_acquire(b->pool, n, &blk);
        if (err == CL_SUCCESS) {
          memcpy(clpin_block_host(blk), src, n);
          err = clEnqueueWriteBuffer(b->q, dev, CL_TRUE, 0, n, clpin_block_host(blk), 0, NULL, NULL);
          cl_int rel = clpin_release(blk, NULL);
          err = err != CL_SUCCESS ? err : rel;
        }
      } else {
        cl_mem m = clCreateBuffer(b->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &err);
        void *p = NULL;
        if (err == CL_SUCCESS)
          p = clEnqueueMapBuffer(b->q, m, CL_TRUE, CL_MAP_WRITE, 0, n, 0, NULL, NULL, &err);
        if (err == CL_SUCCESS) {
          memcpy(p, src, n);
          err = clEnqueueWriteBuffer(b->q, dev, CL_TRUE, 0, n, p, 0, NULL, NULL);
          cl_int un = clEnqueueUnmapMemObject(b->q, m, p, 0, NULL, NULL);
          err = err != CL_SUCCESS ? err : un;
        }
        if (err == CL_SUCCESS)
          err = clFinish(b->q);
        if (m)
          clReleaseMemObject(m);
      }
      ns[i] = (double)(bench_now_ns() - t0);
      ok = err == CL_SUCCESS;
    }
    if (ok)
      alloc_record(pool ? "per-transfer-pool" : "per-transfer-create", state, n, ns, reps);
    else
      fprintf(stderr, "clpin-bench: per-transfer H2D: %s\n", clpin_strerror(err));
  }
  free(ns);
  free(src);
  clReleaseMemObject(dev);
  return ok;
}

/* The floor of any race-safe pool hit: an uncontended atomic read-modify-
 * write (the claim that makes one of two racing releases lose). The pool's
 * own spinlock, and a compare-and-swap, each taken and given back; timed the
 * same way as the hit: batches of 1000, median per operation. */
static void alloc_atomics(unsigned batches) {
  static clpin__spinlock lock = CLPIN__SPINLOCK_INIT;
  static atomic_int word;
  double *ns = calloc(batches, sizeof *ns);
  if (!ns)
    return;
  for (int cas = 0; cas < 2; cas++) {
    for (unsigned i = 0; i < batches; i++) {
      uint64_t t0 = bench_now_ns();
      for (unsigned k = 0; k < 1000; k++) {
        if (cas) {
          int expected = 0;
          atomic_compare_exchange_strong(&word, &expected, 1);
          atomic_store_explicit(&word, 0, memory_order_release);
        } else {
          clpin__lock(&lock);
          clpin__unlock(&lock);
        }
      }
      ns[i] = (double)(bench_now_ns() - t0) / 1000;
    }
    alloc_record(cas ? "cas-pair" : "spinlock-pair", "", 0, ns, batches);
  }
  free(ns);
}

static bool run_alloc(const bench_opts *o, const bench_cl *b, bool cuda) {
  const size_t n = MiB;
  const unsigned reps = o->create_reps;
  printf("\nalloc: what a fresh pinned buffer costs (ns; run alone in a fresh process for \"fresh\")\n"
         "  %-22s %-9s %-10s %12s %12s %12s %12s\n",
         "what", "size", "state", "median", "mean", "p90", "max");
  /* The very first pinned buffer of the process. */
  if (!alloc_create_map(b, n, 1, false, "first"))
    return false;
  /* States: nothing pinned yet; after one large pinned buffer came and went
   * (as a pool miss or a large staged batch would); while large pinned
   * buffers are held (as in a program that keeps its pool). */
  const char *states[] = {"fresh", "after-big", "big-held"};
  size_t big = b->max_alloc < o->max_size ? b->max_alloc : o->max_size;
  if (big > 1024 * MiB)
    big = 1024 * MiB;
  void *held = NULL, *held_cuda = NULL;
  bool ok = true;
  for (int st = 0; ok && st < 3 && big >= 2 * n; st++) {
    if (st == 1) {
      double ignored;
      ok = create_map(b, big, 1, 1, false, &ignored);
      if (cuda)
        cudaref_host_free(cudaref_host_alloc(big));
    } else if (st == 2) {
      held = clpin_host_alloc(b->pool, big);
      held_cuda = cuda ? cudaref_host_alloc(big) : NULL;
      ok = held && (!cuda || held_cuda);
    }
    ok = ok && alloc_create_map(b, n, reps, false, states[st]) &&
         alloc_create_map(b, n, reps, true, states[st]);
    if (ok && cuda)
      ok = alloc_cuda(n, reps, false, states[st]) && alloc_cuda(n, reps, true, states[st]);
    ok = ok && alloc_per_transfer(b, n, reps, states[st]);
  }
  clpin_host_free(held);
  if (held_cuda)
    cudaref_host_free(held_cuda);
  if (!ok)
    return false;
  alloc_atomics(o->pool_batches);
  fflush(stdout);
  return true;
}

/* ------------------------------------------------------------------------ */
/* Pool: many threads                                                       */
/* ------------------------------------------------------------------------ */

static const size_t mix_sizes[] = {4096, 16384, 65536, 262144, 1 << 20, 4 << 20};
#define MIX ((int)(sizeof mix_sizes / sizeof *mix_sizes))

typedef struct {
  clpin_pool *pool;
  unsigned ops, id;
  pthread_barrier_t *start;
  double *lat; /* ns of each acquire+release pair */
  uint64_t t_start, t_end;
  cl_int err;
} worker_arg;

static void *pool_worker(void *p) {
  worker_arg *a = p;
  uint64_t rng = 0x9E3779B97F4A7C15u * (a->id + 1);
  pthread_barrier_wait(a->start);
  a->t_start = bench_now_ns();
  for (unsigned i = 0; i < a->ops; i++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; /* xorshift64 */
    size_t n = mix_sizes[rng % MIX];
    clpin_block *blk;
    uint64_t t0 = bench_now_ns();
    cl_int err = clpin_acquire(a->pool, n, &blk);
    if (err == CL_SUCCESS)
      err = clpin_release(blk, NULL);
    uint64_t t1 = bench_now_ns();
    if (err != CL_SUCCESS) {
      a->err = err;
      break;
    }
    a->lat[i] = (double)(t1 - t0);
  }
  a->t_end = bench_now_ns();
  return NULL;
}

/* nthreads threads doing ops pairs each; fills the rate and latency records. */
static bool pool_threads(const bench_opts *o, const bench_cl *b, unsigned nthreads) {
  pthread_t *tid = calloc(nthreads, sizeof *tid);
  worker_arg *args = calloc(nthreads, sizeof *args);
  double *lat = calloc((size_t)nthreads * o->thread_ops, sizeof *lat);
  pthread_barrier_t start;
  bool ok = tid && args && lat && pthread_barrier_init(&start, NULL, nthreads) == 0;
  unsigned started = 0;
  for (unsigned i = 0; ok && i < nthreads; i++) {
    args[i] = (worker_arg){b->pool, o->thread_ops, i, &start, lat + (size_t)i * o->thread_ops, 0, 0,
                           CL_SUCCESS};
    ok = pthread_create(&tid[i], NULL, pool_worker, &args[i]) == 0;
    started += ok;
  }
  if (started < nthreads && started > 0) {
    /* The barrier never fills: nothing can be measured; give up loudly. */
    fprintf(stderr, "clpin-bench: could not start %u threads\n", nthreads);
    exit(1);
  }
  for (unsigned i = 0; i < started; i++)
    pthread_join(tid[i], NULL);
  if (ok) {
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (unsigned i = 0; i < nthreads; i++) {
      if (args[i].err != CL_SUCCESS) {
        fprintf(stderr, "clpin-bench: acquire/release: %s\n", clpin_strerror(args[i].err));
        ok = false;
      }
      t0 = args[i].t_start < t0 ? args[i].t_start : t0;
      t1 = args[i].t_end > t1 ? args[i].t_end : t1;
    }
    size_t total = (size_t)nthreads * o->thread_ops;
    double rate = (double)total / ((double)(t1 - t0) / 1e9) / 1e6;
    record r = {"threads", "clpin-mixed", "", 0, 0, nthreads, "Mops/s", "", {0}};
    r.s.n = 1, r.s.median = r.s.min = r.s.max = r.s.mean = r.s.p10 = r.s.p90 = r.s.p99 = rate;
    if (ok) {
      add_record(r);
      record l = {"threads", "clpin-mixed-latency", "", 0, 0, nthreads, "ns", "",
                  bench_summarize(lat, total)};
      add_record(l);
      printf("  %2u thread%s  %8.2f Mops/s  latency median %6.0f ns  p99 %7.0f ns  max %9.0f ns\n",
             nthreads, nthreads == 1 ? " " : "s", rate, l.s.median, l.s.p99, l.s.max);
    }
  }
  if (started)
    pthread_barrier_destroy(&start);
  free(tid);
  free(args);
  free(lat);
  return ok;
}

static bool run_threads(const bench_opts *o, const bench_cl *b) {
  /* Warm every bucket with as many blocks as threads can hold at once, so
   * the timed loops measure hits (a miss is a driver call, benched above). */
  unsigned hold = o->threads;
  clpin_block **held = calloc((size_t)hold * MIX, sizeof *held);
  if (!held)
    return false;
  bool ok = true;
  for (int s = 0; ok && s < MIX; s++)
    for (unsigned i = 0; ok && i < hold; i++)
      ok = clpin_acquire(b->pool, mix_sizes[s], &held[(size_t)s * hold + i]) == CL_SUCCESS;
  for (size_t i = 0; i < (size_t)hold * MIX; i++)
    if (held[i])
      clpin_release(held[i], NULL);
  free(held);
  if (!ok) {
    fprintf(stderr, "clpin-bench: cannot warm the pool for the threads case\n");
    return false;
  }
  clpin_stats before = pool_stats(b);
  printf("\npool ops, mixed sizes 4 KiB ... 4 MiB, acquire+release pairs\n");
  ok = pool_threads(o, b, 1) && (o->threads == 1 || pool_threads(o, b, o->threads));
  clpin_stats after = pool_stats(b);
  printf("  (%llu misses during the timed loops)\n",
         (unsigned long long)(after.misses - before.misses));
  fflush(stdout);
  return ok;
}

/* ------------------------------------------------------------------------ */
/* Memcpy: the host-copy ceiling of staging                                 */
/* ------------------------------------------------------------------------ */

/* Streaming (non-temporal) stores: the copy does not read the destination's
 * lines into the cache first, which saves a third of the memory traffic of
 * a large copy. glibc's memcpy streams only above a size threshold of
 * several MiB per call, which the parts of a staging chunk are below. */
static void copy_nt(unsigned char *dst, const unsigned char *src, size_t n) {
#if defined(__SSE2__)
  size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
  head = head < n ? head : n;
  memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)src);
    __m128i b2 = _mm_loadu_si128((const __m128i *)(src + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
    _mm_stream_si128((__m128i *)dst, a);
    _mm_stream_si128((__m128i *)(dst + 16), b2);
    _mm_stream_si128((__m128i *)(dst + 32), c);
    _mm_stream_si128((__m128i *)(dst + 48), d);
  }
  memcpy(dst, src, n);
  _mm_sfence();
#else
  memcpy(dst, src, n);
#endif
}

/* The ways the memcpy case copies: the whole buffer in one slice per thread;
 * or chunk by chunk as staging does (each chunk split over the threads, all
 * threads meeting at a barrier after each chunk), with memcpy or with
 * streaming stores. */
typedef enum { COPY_WHOLE, COPY_CHUNKED, COPY_CHUNKED_NT, COPY__COUNT } copy_mode;
static const char *const copy_names[COPY__COUNT] = {"memcpy", "memcpy-chunked", "memcpy-chunked-nt"};

typedef struct {
  pthread_barrier_t *go, *done, *step;
  unsigned char *dst;
  const unsigned char *src;
  size_t n, chunk;
  unsigned rounds, index, nthreads;
  copy_mode mode;
} copy_arg;

/* This thread's share [off, off + len) of a range of n bytes. */
static void share(size_t n, unsigned index, unsigned nthreads, size_t *off, size_t *len) {
  size_t part = (n / nthreads + 4095) & ~(size_t)4095;
  *off = (size_t)index * part < n ? (size_t)index * part : n;
  *len = n - *off < part ? n - *off : part;
}

static void *copy_worker(void *p) {
  copy_arg *a = p;
  size_t off, len;
  for (unsigned r = 0; r < a->rounds; r++) {
    pthread_barrier_wait(a->go);
    if (a->mode == COPY_WHOLE) {
      share(a->n, a->index, a->nthreads, &off, &len);
      memcpy(a->dst + off, a->src + off, len);
    } else {
      for (size_t pos = 0; pos < a->n; pos += a->chunk) {
        size_t n = a->n - pos < a->chunk ? a->n - pos : a->chunk;
        share(n, a->index, a->nthreads, &off, &len);
        if (a->mode == COPY_CHUNKED_NT)
          copy_nt(a->dst + pos + off, a->src + pos + off, len);
        else
          memcpy(a->dst + pos + off, a->src + pos + off, len);
        pthread_barrier_wait(a->step);
      }
    }
    pthread_barrier_wait(a->done);
  }
  return NULL;
}

/* n bytes from src to dst over t threads (started once, released by a
 * barrier for each timed copy). */
static bool memcpy_point(const bench_opts *o, unsigned char *dst, const unsigned char *src, size_t n,
                         unsigned t, copy_mode mode, size_t chunk, record *out) {
  unsigned rounds = o->warmup + o->tune_reps;
  pthread_t tid[256];
  copy_arg args[256];
  pthread_barrier_t go, done, step;
  double *gbps = calloc(o->tune_reps, sizeof *gbps);
  if (t > 256 || !gbps || pthread_barrier_init(&go, NULL, t + 1) ||
      pthread_barrier_init(&done, NULL, t + 1) || pthread_barrier_init(&step, NULL, t)) {
    fprintf(stderr, "clpin-bench: memcpy case cannot start %u threads\n", t);
    exit(1);
  }
  for (unsigned i = 0; i < t; i++) {
    args[i] = (copy_arg){&go, &done, &step, dst, src, n, chunk, rounds, i, t, mode};
    if (pthread_create(&tid[i], NULL, copy_worker, &args[i])) {
      fprintf(stderr, "clpin-bench: memcpy case cannot start %u threads\n", t);
      exit(1);
    }
  }
  for (unsigned r = 0; r < rounds; r++) {
    uint64_t t0 = bench_now_ns();
    pthread_barrier_wait(&go);
    pthread_barrier_wait(&done);
    if (r >= o->warmup)
      gbps[r - o->warmup] = bench_gbps(n, (double)(bench_now_ns() - t0));
  }
  for (unsigned i = 0; i < t; i++)
    pthread_join(tid[i], NULL);
  pthread_barrier_destroy(&go);
  pthread_barrier_destroy(&done);
  pthread_barrier_destroy(&step);
  out->s = bench_summarize(gbps, o->tune_reps);
  free(gbps);
  /* Whatever the mode, the destination must now equal the source. */
  if (memcmp(dst, src, n) != 0) {
    fprintf(stderr, "clpin-bench: DATA MISMATCH in the %s copy\n", copy_names[mode]);
    fail_status(3);
  }
  return true;
}

static bool run_memcpy(const bench_opts *o, const buffers *bf) {
  size_t chunk = clpin_get_option(CLPIN_OPT_CHUNK);
  char sz[32];
  printf("\nmemcpy malloc -> pool memory, GB/s (median of %u) by threads; chunked: %s chunks as "
         "staging copies them\n%-28s",
         o->tune_reps, bench_fmt_size(chunk, sz, sizeof sz), "copy");
  for (int t = 0; t < o->ntune_threads; t++)
    printf(" %6u thr", o->tune_threads[t]);
  printf("\n");
  unsigned char *dst = bf->clpin_host ? bf->clpin_host : bf->pg_dst;
  for (int s = 0; s < o->ntune_sizes; s++) {
    size_t n = o->tune_sizes[s];
    if (n > bf->cap)
      continue;
    bench_fill(bf->pg_src, n, next_seed());
    for (int m = 0; m < COPY__COUNT; m++) {
      char label[64];
      snprintf(label, sizeof label, "%s %s", copy_names[m], bench_fmt_size(n, sz, sizeof sz));
      printf("%-28s", label);
      for (int t = 0; t < o->ntune_threads; t++) {
        record r = {"memcpy", copy_names[m], "", n, m == COPY_WHOLE ? 0 : chunk, o->tune_threads[t],
                    "GB/s", "", {0}};
        if (!memcpy_point(o, dst, bf->pg_src, n, o->tune_threads[t], (copy_mode)m, chunk, &r))
          return false;
        add_record(r);
        printf(" %10.2f", r.s.median);
        fflush(stdout);
      }
      printf("\n");
    }
  }
  return true;
}

/* ------------------------------------------------------------------------ */
/* Tune: chunk size and copy threads of the pipeline                        */
/* ------------------------------------------------------------------------ */

static bool run_tune(const bench_opts *o, bench_cl *b, buffers *bf) {
  size_t chunk0 = clpin_get_option(CLPIN_OPT_CHUNK), threads0 = clpin_get_option(CLPIN_OPT_THREADS);
  printf("\ntune: clpin-pin GB/s (median of %u) by chunk size and copy threads\n", o->tune_reps);
  bool ok = true;
  for (int s = 0; ok && s < o->ntune_sizes; s++) {
    size_t n = o->tune_sizes[s];
    if (n > bf->cap)
      continue;
    for (int d = H2D; ok && d <= D2H; d++) {
      char sz[32];
      printf("%s %s\n%-10s", dir_names[d], bench_fmt_size(n, sz, sizeof sz), "chunk");
      for (int t = 0; t < o->ntune_threads; t++)
        printf(" %6u thr", o->tune_threads[t]);
      printf("\n");
      for (int c = 0; ok && c < o->ntune_chunks; c++) {
        printf("%-10s", bench_fmt_size(o->tune_chunks[c], sz, sizeof sz));
        for (int t = 0; ok && t < o->ntune_threads; t++) {
          /* The copy threads start with the first pipelined transfer and
           * stop at clpin_shutdown(), so each thread count starts afresh. */
          clpin_shutdown();
          b->pool = NULL;
          ok = clpin_set_option(CLPIN_OPT_CHUNK, o->tune_chunks[c]) == CL_SUCCESS &&
               clpin_set_option(CLPIN_OPT_THREADS, o->tune_threads[t]) == CL_SUCCESS &&
               clpin_pool_get(b->q, &b->pool) == CL_SUCCESS;
          record r = {"tune", path_names[P_CLPIN_PIN], dir_names[d], n, o->tune_chunks[c],
                      o->tune_threads[t], "GB/s", "", {0}};
          ok = ok && measure(o, b, bf, P_CLPIN_PIN, (direction)d, n, o->tune_reps, &r);
          if (ok) {
            add_record(r);
            printf(" %10.2f", r.s.median);
            fflush(stdout);
          }
        }
        printf("\n");
      }
    }
  }
  clpin_shutdown();
  b->pool = NULL;
  clpin_set_option(CLPIN_OPT_CHUNK, chunk0);
  clpin_set_option(CLPIN_OPT_THREADS, threads0);
  if (!ok)
    return false;
  /* The best setting overall: the highest geometric mean over every
   * (size, direction) point, so no one point dominates the choice. */
  double best = 0;
  size_t best_chunk = 0;
  unsigned best_threads = 0;
  for (int c = 0; c < o->ntune_chunks; c++)
    for (int t = 0; t < o->ntune_threads; t++) {
      double logsum = 0;
      int k = 0;
      for (size_t i = 0; i < results.n; i++) {
        const record *r = &results.v[i];
        if (!strcmp(r->section, "tune") && r->chunk == o->tune_chunks[c] &&
            r->threads == o->tune_threads[t] && r->s.median > 0)
          logsum += log(r->s.median), k++;
      }
      double g = k ? exp(logsum / k) : 0;
      if (g > best)
        best = g, best_chunk = o->tune_chunks[c], best_threads = o->tune_threads[t];
    }
  char sz[32];
  printf("tune: best overall chunk %s, %u threads (geometric mean %.2f GB/s)\n",
         bench_fmt_size(best_chunk, sz, sizeof sz), best_threads, best);
  return clpin_pool_get(b->q, &b->pool) == CL_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Targets                                                                  */
/* ------------------------------------------------------------------------ */

static double median_of(const char *path, const char *dir, size_t n) {
  const record *r = find_record("transfer", path, dir, n);
  if (!r)
    r = find_record("sweep", path, dir, n);
  return r ? r->s.median : 0;
}

/* The pinned reference at n: CUDA's pinned copy when it ran, else OpenCL's. */
static double pinned_ref(const char *dir, size_t n, const char **name) {
  double v = median_of("cuda-pinned", dir, n);
  *name = "cuda-pinned";
  if (v == 0)
    v = median_of("cl-pinned", dir, n), *name = "cl-pinned";
  return v;
}

/* One target: clpin's figure, its baseline (base_name NULL: an absolute
 * target on clpin's figure itself), the ratio or value compared, the goal. */
static void target_line(const char *what, double clpin, const char *unit, double base,
                        const char *base_name, double value, const char *op, double want) {
  if (clpin == 0 || (base_name && base == 0))
    return;
  char basecol[64] = "-";
  if (base_name)
    snprintf(basecol, sizeof basecol, "%.2f %s", base, base_name);
  bool met = op[0] == '>' ? value >= want : value <= want;
  printf("  %-34s %10.2f %-7s %-26s %9.3g  %s %-7g %s\n", what, clpin, unit, basecol, value, op, want,
         met ? "met" : "MISSED");
}

static void print_targets(void) {
  printf("\n  %-34s %10s %-7s %-26s %9s  %s\n", "targets", "clpin", "", "baseline (same run)", "ratio",
         "target");
  const char *dirs[] = {"H2D", "D2H"};
  char what[96], sz[32];
  const char *ref;
  for (int d = 0; d < 2; d++) {
    size_t pinned_sizes[] = {16 * MiB, 256 * MiB};
    for (int i = 0; i < 2; i++) {
      size_t n = pinned_sizes[i];
      double c = median_of("clpin-host", dirs[d], n), base = pinned_ref(dirs[d], n, &ref);
      snprintf(what, sizeof what, "%s %s pool memory", dirs[d], bench_fmt_size(n, sz, sizeof sz));
      target_line(what, c, "GB/s", base, ref, base ? c / base : 0, ">=", 0.95);
    }
    double pg_target = d == 0 ? 3.0 : 2.5, pin_target = d == 0 ? 0.85 : 0.75;
    double c = median_of("clpin-pin", dirs[d], 64 * MiB), base = median_of("pageable", dirs[d], 64 * MiB);
    snprintf(what, sizeof what, "%s 64 MiB pageable", dirs[d]);
    target_line(what, c, "GB/s", base, "pageable", base ? c / base : 0, ">=", pg_target);
    c = median_of("clpin-pin", dirs[d], 1024 * MiB), base = pinned_ref(dirs[d], 1024 * MiB, &ref);
    snprintf(what, sizeof what, "%s 1 GiB pageable", dirs[d]);
    target_line(what, c, "GB/s", base, ref, base ? c / base : 0, ">=", pin_target);
  }
  const record *hit = find_record("pool", "clpin-hit", "", MiB);
  const record *kept = find_record("pool", "cl-create-map-kept", "", MiB);
  const record *again = find_record("pool", "cl-create-map", "", MiB);
  if (hit)
    target_line("pool hit 1 MiB, median ns", hit->s.median, "ns", 0, NULL, hit->s.median, "<=", 100);
  if (hit && kept)
    target_line("pool hit vs create+map, new memory", hit->s.median, "ns", kept->s.median,
                "cl-create-map-kept", kept->s.median / hit->s.median, ">=", 10000);
  if (hit && again)
    printf("  %-34s %10.2f %-7s %-26s %9.3g  (no target: a driver may hand the freed buffer back)\n",
           "pool hit vs create+map, freed+made", hit->s.median, "ns", "",
           again->s.median / hit->s.median);
  const record *one = NULL, *many = NULL, *many_lat = NULL;
  for (size_t i = 0; i < results.n; i++) {
    const record *r = &results.v[i];
    if (!strcmp(r->section, "threads") && !strcmp(r->path, "clpin-mixed"))
      *(r->threads == 1 ? &one : &many) = r;
    if (!strcmp(r->section, "threads") && !strcmp(r->path, "clpin-mixed-latency") && r->threads > 1)
      many_lat = r;
  }
  if (one && many) {
    snprintf(what, sizeof what, "pool ops, %u threads vs one", many->threads);
    target_line(what, many->s.median, "Mops/s", one->s.median, "1 thread",
                many->s.median / one->s.median, ">=", 2);
  }
  if (many_lat) {
    snprintf(what, sizeof what, "pool ops, %u threads, p99 us", many_lat->threads);
    target_line(what, many_lat->s.p99, "ns", 0, NULL, many_lat->s.p99 / 1000, "<=", 5);
  }
  fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* Machine-readable output                                                  */
/* ------------------------------------------------------------------------ */

static FILE *open_out(const char *name) {
  if (!strcmp(name, "-"))
    return stdout;
  FILE *f = fopen(name, "w");
  if (!f)
    perror(name);
  return f;
}

static void close_out(FILE *f) {
  if (f && f != stdout)
    fclose(f);
}

static bool write_csv(const char *name) {
  FILE *f = open_out(name);
  if (!f)
    return false;
  fprintf(f, "section,path,dir,bytes,chunk,threads,unit,route,n,median,p10,p90,p99,min,max,mean\n");
  for (size_t i = 0; i < results.n; i++) {
    const record *r = &results.v[i];
    fprintf(f, "%s,%s,%s,%zu,%zu,%u,%s,%s,%zu,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g\n", r->section,
            r->path, r->dir, r->bytes, r->chunk, r->threads, r->unit, r->route, r->s.n, r->s.median,
            r->s.p10, r->s.p90, r->s.p99, r->s.min, r->s.max, r->s.mean);
  }
  close_out(f);
  return true;
}

/* A JSON string; the names here come from drivers and /proc, so escape. */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static bool write_json(const char *name, const bench_opts *o, const bench_cl *b) {
  FILE *f = open_out(name);
  if (!f)
    return false;
  fprintf(f, "{\n  \"clpin_version\": ");
  json_str(f, clpin_version_string());
  fprintf(f, ",\n  \"platform\": ");
  json_str(f, b->platform_name);
  fprintf(f, ",\n  \"device\": ");
  json_str(f, b->device_name);
  fprintf(f, ",\n  \"driver\": ");
  json_str(f, b->driver);
  fprintf(f, ",\n  \"device_version\": ");
  json_str(f, b->device_version);
  fprintf(f, ",\n  \"host_unified_memory\": %s,\n  \"cuda_device\": ", b->unified ? "true" : "false");
  json_str(f, cudaref_device_name());
  fprintf(f, ",\n  \"cuda_runtime\": ");
  json_str(f, cudaref_library());
  fprintf(f, ",\n  \"cpu\": ");
  json_str(f, b->cpu);
  fprintf(f, ",\n  \"options\": {\"chunk\": %zu, \"threads\": %zu, \"pinned_h2d\": %zu},\n",
          clpin_get_option(CLPIN_OPT_CHUNK), clpin_get_option(CLPIN_OPT_THREADS),
          clpin_get_option(CLPIN_OPT_PINNED_H2D));
  fprintf(f, "  \"reps\": %u, \"warmup\": %u,\n  \"records\": [\n", o->reps, o->warmup);
  for (size_t i = 0; i < results.n; i++) {
    const record *r = &results.v[i];
    fprintf(f,
            "    {\"section\": \"%s\", \"path\": \"%s\", \"dir\": \"%s\", \"bytes\": %zu, "
            "\"chunk\": %zu, \"threads\": %u, \"unit\": \"%s\", \"route\": \"%s\", \"n\": %zu, "
            "\"median\": %.6g, \"p10\": %.6g, \"p90\": %.6g, \"p99\": %.6g, \"min\": %.6g, "
            "\"max\": %.6g, \"mean\": %.6g}%s\n",
            r->section, r->path, r->dir, r->bytes, r->chunk, r->threads, r->unit, r->route, r->s.n,
            r->s.median, r->s.p10, r->s.p90, r->s.p99, r->s.min, r->s.max, r->s.mean,
            i + 1 < results.n ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  close_out(f);
  return true;
}

/* ------------------------------------------------------------------------ */
/* Main                                                                     */
/* ------------------------------------------------------------------------ */

/* Keep the sizes that fit the device and --max-size. */
static int clip_sizes(size_t *sizes, int n, size_t max) {
  int k = 0;
  for (int i = 0; i < n; i++)
    if (sizes[i] <= max)
      sizes[k++] = sizes[i];
  return k;
}

int main(int argc, char **argv) {
  bench_opts o;
  int rc = parse_args(argc, argv, &o);
  if (rc)
    return rc == 1 ? 0 : rc;
  if (o.list) {
    list_devices();
    return 0;
  }
  bench_cl b;
  memset(&b, 0, sizeof b);
  if (!open_cl(&o, &b))
    return 1;

  size_t max = o.max_size < b.max_alloc ? o.max_size : b.max_alloc;
  o.nsizes = clip_sizes(o.sizes, o.nsizes, max);
  o.ntune_sizes = clip_sizes(o.tune_sizes, o.ntune_sizes, max);
  size_t sweep[64];
  int nsweep = 0;
  for (size_t n = o.sweep_min; n <= o.sweep_max && n <= max && nsweep < 64; n *= o.sweep_step)
    sweep[nsweep++] = n;
  size_t cap = 0;
  for (int i = 0; i < o.nsizes; i++)
    cap = o.sizes[i] > cap ? o.sizes[i] : cap;
  for (int i = 0; (o.cases & CASE_SWEEP) && i < nsweep; i++)
    cap = sweep[i] > cap ? sweep[i] : cap;
  for (int i = 0; (o.cases & (CASE_TUNE | CASE_MEMCPY)) && i < o.ntune_sizes; i++)
    cap = o.tune_sizes[i] > cap ? o.tune_sizes[i] : cap;

  char why[256] = "not used by these cases";
  bool cuda = !o.no_cuda && (o.cases & (CASE_TRANSFER | CASE_SWEEP | CASE_ALLOC)) && cudaref_open(o.cuda_device, why, sizeof why);
  printf("clpin-bench %s\n  platform  %s\n  device    %s (driver %s, %s)\n"
         "  host-unified memory %s; max alloc %zu MiB\n  cpu       %s\n"
         "  CUDA baseline: %s%s%s%s\n  clpin options: CLPIN_CHUNK=%zu CLPIN_THREADS=%zu CLPIN_PINNED_H2D=%zu\n"
         "  method: %u warm-ups, median of %u timed blocking transfers (each to completion)\n",
         clpin_version_string(), b.platform_name, b.device_name, b.driver, b.device_version,
         b.unified ? "yes" : "no", b.max_alloc >> 20, b.cpu,
         cuda ? cudaref_device_name() : o.no_cuda ? "off (--no-cuda)" : "none: ", cuda ? " (" : why,
         cuda ? cudaref_library() : "", cuda ? ")" : "",
         clpin_get_option(CLPIN_OPT_CHUNK), clpin_get_option(CLPIN_OPT_THREADS),
         clpin_get_option(CLPIN_OPT_PINNED_H2D), o.warmup, o.reps);
  fflush(stdout);

  buffers bf;
  memset(&bf, 0, sizeof bf);
  bool ok = true;
  if (o.cases & CASE_ALLOC)
    ok = run_alloc(&o, &b, cuda);
  if (cap && (o.cases & (CASE_TRANSFER | CASE_SWEEP | CASE_TUNE | CASE_MEMCPY)))
    ok = alloc_buffers(&b, cap, cuda, &bf);
  bf.paths = o.paths;
  if (ok && bf.cap)
    ok = settle(&b, &bf);
  if (ok && (o.cases & CASE_TRANSFER))
    ok = run_transfers(&o, &b, &bf, "transfer", o.sizes, o.nsizes);
  if (ok && (o.cases & CASE_SWEEP))
    ok = run_transfers(&o, &b, &bf, "sweep", sweep, nsweep);
  if (ok && (o.cases & CASE_POOL))
    ok = run_pool(&o, &b);
  if (ok && (o.cases & CASE_THREADS))
    ok = run_threads(&o, &b);
  if (ok && (o.cases & CASE_MEMCPY))
    ok = run_memcpy(&o, &bf);
  if (ok && (o.cases & CASE_TUNE)) {
    /* clpin_shutdown() between settings frees pool memory: give it back first. */
    clpin_host_free(bf.clpin_host);
    bf.clpin_host = NULL;
    ok = run_tune(&o, &b, &bf);
  }
  print_targets();
  if (o.csv && !write_csv(o.csv))
    ok = false;
  if (o.json && !write_json(o.json, &o, &b))
    ok = false;

  free_buffers(&b, &bf);
  clpin_shutdown();
  clReleaseCommandQueue(b.q);
  clReleaseContext(b.ctx);
  free(results.v);
  if (!ok)
    fail_status(1);
  if (exit_status)
    fprintf(stderr, "clpin-bench: exit status %d (%s)\n", exit_status,
            exit_status == 3 ? "data mismatch" : exit_status == 4 ? "unexpected clpin route" : "error");
  return exit_status;
}
