/* SPDX-License-Identifier: Apache-2.0 */
/* clpin-bench's harness: the records, the exit status, the OpenCL device
 * and the CSV and JSON output (see harness.h). */
#include "harness.h"

#include "cudaref.h"

#include <stdlib.h>
#include <string.h>

const char *const bench_path_names[P_COUNT] = {"pageable",    "cl-pinned",    "clpin-host",
                                               "clpin-pin",   "clpin-plain",  "clpin-reg",
                                               "cuda-pinned", "cuda-pageable"};

const char *const bench_dir_names[2] = {"H2D", "D2H"};

/* ------------------------------------------------------------------------ */
/* Records and exit status                                                  */
/* ------------------------------------------------------------------------ */

static struct {
  record *v;
  size_t n, cap;
} results;

static int exit_status;

void bench_fail_status(int status) {
  if (status > exit_status)
    exit_status = status;
}

int bench_exit_status(void) { return exit_status; }

const record *bench_add_record(record r) {
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

const record *bench_find_record(const char *section, const char *path, const char *dir,
                                size_t bytes) {
  for (size_t i = 0; i < results.n; i++) {
    const record *r = &results.v[i];
    if (!strcmp(r->section, section) && !strcmp(r->path, path) && !strcmp(r->dir, dir) &&
        r->bytes == bytes)
      return r;
  }
  return NULL;
}

const record *bench_records(size_t *n) {
  *n = results.n;
  return results.v;
}

void bench_free_records(void) {
  free(results.v);
  memset(&results, 0, sizeof results);
}

uint64_t bench_next_seed(void) {
  static uint64_t seed = 0x5eed;
  return ++seed;
}

/* ------------------------------------------------------------------------ */
/* OpenCL setup                                                             */
/* ------------------------------------------------------------------------ */

/* The device: --device of those bench_cl_find picks for --platform (a GPU
 * where there is one). */
static bool pick_device(const bench_opts *o, bench_cl *b) {
  cl_device_id devs[BENCH_CL_MAX_DEVICES];
  cl_uint n = bench_cl_find(o->platform, &b->platform, devs, BENCH_CL_MAX_DEVICES);
  if ((cl_uint)o->device >= n) {
    fprintf(stderr, "clpin-bench: no OpenCL device matches (try --list)\n");
    return false;
  }
  b->device = devs[o->device];
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

bool bench_open_cl(const bench_opts *o, bench_cl *b) {
  if (!pick_device(o, b))
    return false;
  clGetPlatformInfo(b->platform, CL_PLATFORM_NAME, sizeof b->platform_name, b->platform_name, NULL);
  bench_cl_name(b->device, b->device_name, sizeof b->device_name);
  clGetDeviceInfo(b->device, CL_DRIVER_VERSION, sizeof b->driver, b->driver, NULL);
  clGetDeviceInfo(b->device, CL_DEVICE_VERSION, sizeof b->device_version, b->device_version, NULL);
  cl_bool unified = CL_FALSE;
  clGetDeviceInfo(b->device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
  b->unified = unified;
  cl_ulong max_alloc = 0;
  CL_TRY(
      clGetDeviceInfo(b->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL));
  b->max_alloc = max_alloc > SIZE_MAX ? SIZE_MAX : (size_t)max_alloc;
  read_cpu_name(b->cpu, sizeof b->cpu);
  b->ctx = bench_cl_context("clpin-bench", b->platform, 1, &b->device, clpin_strerror);
  b->q = bench_cl_queue("clpin-bench", b->ctx, b->device, clpin_strerror);
  CL_TRY(clpin_pool_get(b->q, &b->pool));
  return true;
}

void bench_close_cl(bench_cl *b) {
  if (b->q)
    clReleaseCommandQueue(b->q);
  if (b->ctx)
    clReleaseContext(b->ctx);
  b->q = NULL, b->ctx = NULL, b->pool = NULL;
}

clpin_stats bench_pool_stats(const bench_cl *b) {
  clpin_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  if (clpin_pool_stats(b->pool, &s) != CL_SUCCESS)
    fprintf(stderr, "clpin-bench: clpin_pool_stats failed\n");
  return s;
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

bool bench_write_csv(const char *name) {
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

bool bench_write_json(const char *name, const bench_opts *o, const bench_cl *b) {
  FILE *f = open_out(name);
  if (!f)
    return false;
  const char *const about[][2] = {{"clpin_version", clpin_version_string()},
                                  {"platform", b->platform_name},
                                  {"device", b->device_name},
                                  {"driver", b->driver},
                                  {"device_version", b->device_version},
                                  {"cuda_device", cudaref_device_name()},
                                  {"cuda_runtime", cudaref_library()},
                                  {"cpu", b->cpu}};
  fprintf(f, "{\n  \"host_unified_memory\": %s", b->unified ? "true" : "false");
  for (size_t i = 0; i < sizeof about / sizeof *about; i++) {
    fprintf(f, ",\n  \"%s\": ", about[i][0]);
    json_str(f, about[i][1]);
  }
  fprintf(f, ",\n  \"options\": {\"chunk\": %zu, \"threads\": %zu, \"pinned_h2d\": %zu},\n",
          clpin_get_option(CLPIN_OPT_CHUNK), clpin_get_option(CLPIN_OPT_THREADS),
          clpin_get_option(CLPIN_OPT_PINNED));
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
