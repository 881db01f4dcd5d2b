/* SPDX-License-Identifier: Apache-2.0 */
/* clpin-bench's command line: defaults, --quick, and the options. */
#include "harness.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "[options]\n"
    "  --case LIST          transfer,sweep,pool,threads,memcpy,tune,alloc,unified or all\n"
    "                       (default transfer,pool,threads)\n"
    "  --platform S         the platform whose name contains S, or the devices whose names\n"
    "                       do (default: any); its GPUs when it has any\n"
    "  --device N           device N of those (default 0)\n"
    "  --list               list platforms and devices, then exit\n"
    "  --sizes LIST         transfer sizes (default 16M,64M,256M,1G)\n"
    "  --paths LIST         only these paths (pageable,cl-pinned,clpin-host,clpin-pin,\n"
    "                       clpin-plain,clpin-reg,cuda-pinned,cuda-pageable; default all)\n"
    "  --max-size S         drop every size above S\n"
    "  --reps N, --warmup N timed repetitions and warm-ups per point (11, 2)\n"
    "  --threads N          threads for the threads case (16)\n"
    "  --thread-ops N       acquire/release pairs per thread (200000)\n"
    "  --quick              small sizes and few repetitions (the CI smoke run)\n"
    "  --csv FILE, --json FILE   also write every figure there (- for stdout)\n"
    "  --no-cuda            skip the CUDA baseline\n"
    "  --strict             exit 4 when a clpin path takes another route than expected\n";

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
  static const size_t chunks[] = {256 << 10, 512 << 10, 1 << 20,  2 << 20,
                                  4 << 20,   8 << 20,   16 << 20, 32 << 20};
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

/* A comma-separated list of names[0..n) into *out, the bits of the names
 * given (bits[i], or bit i without bits); false on any other name. */
static bool parse_names(const char *text, const char *const *names, const unsigned *bits, int n,
                        unsigned *out) {
  char buf[256];
  *out = 0;
  if (strlen(text) >= sizeof buf)
    return false;
  strcpy(buf, text);
  for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int i = 0;
    while (i < n && strcmp(names[i], tok))
      i++;
    if (i == n)
      return false;
    *out |= bits ? bits[i] : 1u << i;
  }
  return *out != 0;
}

int bench_parse_args(int argc, char **argv, bench_opts *o) {
  static const char *const case_names[] = {"transfer", "sweep", "pool",    "threads", "tune",
                                           "memcpy",   "alloc", "unified", "all"};
  static const unsigned case_bits[] = {CASE_TRANSFER, CASE_SWEEP,   CASE_POOL,
                                       CASE_THREADS,  CASE_TUNE,    CASE_MEMCPY,
                                       CASE_ALLOC,    CASE_UNIFIED, CASE_ALL};
  const char *cases = NULL, *paths = NULL;
  bool quick_run = false;
  defaults(o);
  for (int i = 1; i < argc; i++) /* --quick first: the other options override it */
    if (!strcmp(argv[i], "--quick"))
      quick(o);
  int reps = (int)o->reps, warmup = (int)o->warmup, threads = (int)o->threads,
      thread_ops = (int)o->thread_ops;
  const bench_opt opts[] = {BENCH_OPT("--case", BENCH_TEXT, &cases),
                            BENCH_OPT("--paths", BENCH_TEXT, &paths),
                            BENCH_OPT("--platform", BENCH_TEXT, &o->platform),
                            BENCH_OPT("--csv", BENCH_TEXT, &o->csv),
                            BENCH_OPT("--json", BENCH_TEXT, &o->json),
                            BENCH_OPT_LIST("--sizes", BENCH_SIZES, o->sizes, &o->nsizes, MAX_LIST),
                            BENCH_OPT("--max-size", BENCH_SIZE, &o->max_size),
                            BENCH_OPT("--device", BENCH_INT, &o->device),
                            BENCH_OPT("--reps", BENCH_INT, &reps),
                            BENCH_OPT("--warmup", BENCH_INT, &warmup),
                            BENCH_OPT("--threads", BENCH_INT, &threads),
                            BENCH_OPT("--thread-ops", BENCH_INT, &thread_ops),
                            BENCH_OPT("--quick", BENCH_FLAG, &quick_run),
                            BENCH_OPT("--no-cuda", BENCH_FLAG, &o->no_cuda),
                            BENCH_OPT("--strict", BENCH_FLAG, &o->strict),
                            BENCH_OPT("--list", BENCH_FLAG, &o->list)};
  BENCH_PARSE_OPTS("clpin-bench", usage, argc, argv, opts);
  const int top = 1 << 20;
  if ((cases && !parse_names(cases, case_names, case_bits, 9, &o->cases)) ||
      (paths && !parse_names(paths, bench_path_names, NULL, P_COUNT, &o->paths))) {
    fprintf(stderr, "clpin-bench: --case or --paths names something else\nusage: clpin-bench %s",
            usage);
    return 2;
  }
  if (!o->max_size || o->device < 0 || reps < 1 || reps > top || warmup < 0 || warmup > top ||
      threads < 1 || threads > top || thread_ops < 1 || thread_ops > top) {
    fprintf(stderr,
            "clpin-bench: --max-size above 0, --device 0 or more, --reps, --threads and "
            "--thread-ops 1 ... %d, --warmup 0 ... %d\n",
            top, top);
    return 2;
  }
  o->reps = (unsigned)reps, o->warmup = (unsigned)warmup;
  o->threads = (unsigned)threads, o->thread_ops = (unsigned)thread_ops;
  return 0;
}
