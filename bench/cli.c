/* SPDX-License-Identifier: Apache-2.0 */
/* clpin-bench's command line: defaults, --quick, and the options. */
#include "harness.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
  fputs("usage: clpin-bench [options]\n"
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

static bool parse_paths(const char *text, unsigned *out) {
  *out = 0;
  char buf[256];
  if (strlen(text) >= sizeof buf)
    return false;
  strcpy(buf, text);
  for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int p = 0;
    while (p < P_COUNT && strcmp(bench_path_names[p], tok))
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
  } names[] = {{"transfer", CASE_TRANSFER}, {"sweep", CASE_SWEEP},     {"pool", CASE_POOL},
               {"threads", CASE_THREADS},   {"tune", CASE_TUNE},       {"memcpy", CASE_MEMCPY},
               {"alloc", CASE_ALLOC},       {"unified", CASE_UNIFIED}, {"all", CASE_ALL}};
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

static bool parse_one_size(const char *s, size_t *out) { return bench_parse_size(s, out) && *out; }

/* The options that take a size or a list of sizes. *known set to whether a
 * is one of them; returns whether its value v parsed. */
static bool parse_size_option(const char *a, const char *v, bench_opts *o, bool *known) {
  *known = true;
  if (!strcmp(a, "--sizes"))
    return (o->nsizes = bench_parse_sizes(v, o->sizes, MAX_LIST)) > 0;
  if (!strcmp(a, "--max-size"))
    return parse_one_size(v, &o->max_size);
  *known = false;
  return false;
}

/* The options that take a count or a list of counts; as parse_size_option. */
static bool parse_count_option(const char *a, const char *v, bench_opts *o, bool *known) {
  *known = true;
  if (!strcmp(a, "--device")) {
    unsigned n = 0;
    bool ok = parse_uint_min(v, 0, &n);
    o->device = (int)n;
    return ok;
  }
  if (!strcmp(a, "--reps"))
    return parse_uint(v, &o->reps);
  if (!strcmp(a, "--warmup"))
    return parse_uint_min(v, 0, &o->warmup);
  if (!strcmp(a, "--threads"))
    return parse_uint(v, &o->threads);
  if (!strcmp(a, "--thread-ops"))
    return parse_uint(v, &o->thread_ops);
  *known = false;
  return false;
}

/* Option a with value v (NULL: a was the last argument). Returns whether it
 * is a known option with a valid value. */
static bool parse_value(const char *a, const char *v, bench_opts *o) {
  bool known;
  if (!v)
    return false;
  if (!strcmp(a, "--case"))
    return parse_cases(v, &o->cases);
  if (!strcmp(a, "--paths"))
    return parse_paths(v, &o->paths);
  const char **text = !strcmp(a, "--platform") ? &o->platform
                      : !strcmp(a, "--csv")    ? &o->csv
                      : !strcmp(a, "--json")   ? &o->json
                                               : NULL;
  if (text) {
    *text = v;
    return true;
  }
  bool ok = parse_size_option(a, v, o, &known);
  if (!known)
    ok = parse_count_option(a, v, o, &known);
  return known && ok;
}

/* The options without a value; false when a is not one of them. */
static bool parse_flag(const char *a, bench_opts *o) {
  if (!strcmp(a, "--quick"))
    return true; /* applied before every other option, in bench_parse_args */
  bool *flag = !strcmp(a, "--no-cuda")  ? &o->no_cuda
               : !strcmp(a, "--strict") ? &o->strict
               : !strcmp(a, "--list")   ? &o->list
                                        : NULL;
  if (flag)
    *flag = true;
  return flag != NULL;
}

int bench_parse_args(int argc, char **argv, bench_opts *o) {
  defaults(o);
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--quick"))
      quick(o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 1;
    }
    if (parse_flag(a, o))
      continue;
    if (!parse_value(a, i + 1 < argc ? argv[i + 1] : NULL, o)) {
      fprintf(stderr, "clpin-bench: bad or missing value for %s\n", a);
      usage(stderr);
      return 2;
    }
    i++;
  }
  return 0;
}
