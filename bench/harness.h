/* SPDX-License-Identifier: Apache-2.0 */
/* The harness of clpin-bench: its options, the OpenCL device it measures,
 * the records every case adds and every output is written from, and the
 * exit status. Each case family lives in its own file (transfer.c, pool.c,
 * alloc.c, threads.c, tune.c, targets.c) and talks to clpin through
 * <clpin.h> only, linked against the shared library: what the bench
 * measures is the libclpin.so programs get. */
#ifndef CLPIN_BENCH_HARNESS_H
#define CLPIN_BENCH_HARNESS_H

#include "benchcl.h"
#include "benchstat.h"

#include "clpin.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MiB ((size_t)1 << 20)
#define MAX_LIST 32

/* ---- options (cli.c) ----------------------------------------------------- */

enum {
  CASE_TRANSFER = 1,
  CASE_SWEEP = 2,
  CASE_POOL = 4,
  CASE_THREADS = 8,
  CASE_TUNE = 16,
  CASE_MEMCPY = 32,
  CASE_ALLOC = 64,
  CASE_ALL = 127,
  CASE_UNIFIED = 128 /* by name only: "all" stays what GPU runs measure */
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

/* Fill o from the command line. Returns 0 to run, 2 on a usage error
 * (message on stderr); --help prints the usage and exits 0. */
int bench_parse_args(int argc, char **argv, bench_opts *o);

/* ---- paths and directions ------------------------------------------------ */

typedef enum {
  P_PAGEABLE,
  P_CL_PINNED,
  P_CLPIN_HOST,
  P_CLPIN_PIN,
  P_CLPIN_PLAIN,
  P_CLPIN_REG,
  P_CUDA_PINNED,
  P_CUDA_PAGEABLE,
  P_COUNT
} path_id;
/* The names of --paths, of the table columns and of the records. */
extern const char *const bench_path_names[P_COUNT];

typedef enum { H2D, D2H } direction;
extern const char *const bench_dir_names[2];

/* ---- records and exit status --------------------------------------------- */

typedef struct {
  const char *section; /* the case: transfer, sweep, pool, alloc, threads, memcpy, tune */
  const char *path;
  const char *dir; /* H2D, D2H, or "" */
  size_t bytes;
  size_t chunk;      /* tune: CLPIN_CHUNK; else the option in force */
  unsigned threads;  /* tune/threads: thread count */
  const char *unit;  /* GB/s, ns, Mops/s */
  const char *route; /* clpin's path per its stats; "" for baselines */
  bench_summary s;
} record;

/* Append r to the run's records; returns the stored copy, valid until the
 * next bench_add_record. Exits on out of memory (nothing can be reported). */
const record *bench_add_record(record r);
/* The first record of (section, path, dir, bytes); NULL if none. */
const record *bench_find_record(const char *section, const char *path, const char *dir,
                                size_t bytes);
/* All records so far, in order; *n set to their count. */
const record *bench_records(size_t *n);
/* Free the records (at exit). */
void bench_free_records(void);

/* Raise the exit status to status (3: data mismatch, 4: unexpected route,
 * 1: error); the highest one raised wins. */
void bench_fail_status(int status);
int bench_exit_status(void);

/* A fresh data pattern's seed for each point. */
uint64_t bench_next_seed(void);

/* ---- the OpenCL device (harness.c) --------------------------------------- */

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

/* Report a failing OpenCL or clpin call on stderr, as BENCH_CL_CHECK does
 * (benchcl.h), and return false from the function it is in. */
#define CL_TRY(expr)                                                                               \
  do {                                                                                             \
    cl_int err_ = (expr);                                                                          \
    if (err_ != CL_SUCCESS) {                                                                      \
      bench_cl_report("clpin-bench", __FILE__, __LINE__, #expr, clpin_strerror(err_));             \
      return false;                                                                                \
    }                                                                                              \
  } while (0)

/* Pick the device (--device of those bench_cl_find picks for --platform),
 * describe it, make a context, a queue and clpin's pool for it (a failing
 * OpenCL call ends the program). False with a message. */
bool bench_open_cl(const bench_opts *o, bench_cl *b);
/* Release the queue and the context (after clpin_shutdown). */
void bench_close_cl(bench_cl *b);
/* The pool's counters now (zeros, and a message, if they cannot be read). */
clpin_stats bench_pool_stats(const bench_cl *b);

/* ---- output (harness.c) -------------------------------------------------- */

/* Every record as CSV or JSON, to the file name ("-": stdout). False when
 * the file cannot be opened. */
bool bench_write_csv(const char *name);
bool bench_write_json(const char *name, const bench_opts *o, const bench_cl *b);

/* ---- host and device memory of the transfer paths (transfer.c) ----------- */

/* Host and device memory for every path, each of `cap` bytes. */
typedef struct {
  size_t cap;
  unsigned char *pg_src, *pg_dst; /* malloc, touched before use */
  cl_mem dev;
  cl_mem cl_pinned_mem;
  void *cl_pinned;  /* mapped pointer of cl_pinned_mem */
  void *clpin_host; /* clpin_host_alloc */
  void *clpin_reg;  /* page-aligned malloc memory, clpin_host_register-ed */
  void *cuda_host, *cuda_dev;
  unsigned paths; /* --paths: the paths measured (0: all) */
} buffers;

bool bench_alloc_buffers(const bench_cl *b, size_t cap, bool cuda, buffers *bf);
/* Accepts buffers never allocated (all zero). */
void bench_free_buffers(const bench_cl *b, buffers *bf);

/* ---- the cases ----------------------------------------------------------- */

/* transfer.c: traffic on every path before the first point; one (path,
 * direction, size) point into *out; the transfer and sweep tables. */
bool bench_settle(const bench_cl *b, const buffers *bf);
bool bench_measure(const bench_opts *o, const bench_cl *b, const buffers *bf, path_id p,
                   direction d, size_t n, unsigned reps, record *out);
bool bench_run_transfers(const bench_opts *o, const bench_cl *b, const buffers *bf,
                         const char *section, const size_t *sizes, int nsizes);

/* pool.c: create+map of n-byte CL_MEM_ALLOC_HOST_PTR buffers (reps samples,
 * each the mean of batch buffers; kept: released only after the loop); the
 * pool case. */
bool bench_create_map(const bench_cl *b, size_t n, unsigned reps, unsigned batch, bool kept,
                      double *ns);
bool bench_run_pool(const bench_opts *o, const bench_cl *b);

/* alloc.c, threads.c */
bool bench_run_alloc(const bench_opts *o, const bench_cl *b);
bool bench_run_threads(const bench_opts *o, const bench_cl *b);
/* unified.c: clpin on a host-unified device against hand-written OpenCL. */
bool bench_run_unified(const bench_opts *o, const bench_cl *b);

/* tune.c: the memcpy ceiling of staging, and the chunk x threads grid. The
 * tune case restarts clpin (clpin_shutdown) for each setting: b->pool is
 * replaced, and no pool memory may be held across it. */
bool bench_run_memcpy(const bench_opts *o, const buffers *bf);
bool bench_run_tune(const bench_opts *o, bench_cl *b, buffers *bf);

/* targets.c: the targets table, from the records of the cases that ran. */
void bench_print_targets(void);

#endif
