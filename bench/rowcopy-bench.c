/* SPDX-License-Identifier: Apache-2.0 */
/* rowcopy-bench: the host side of a staged rect or image transfer alone, no
 * OpenCL: rows scattered out of a packed block into memory with a row pitch
 * (a read) or gathered into it (a write), one memcpy per row against the
 * streaming row copy clpin uses for reads (src/streamcopy.c), and the
 * contiguous copy of the buffer path (one memcpy per thread's share) for
 * reference. Every variant runs in every run, in turn (from another one in
 * each run), on the same buffers.
 *
 *   cold   the destination (the pitched rows of a scatter, the packed block
 *          of a gather) is new memory in every run (mmap: its pages are
 *          faulted in by the copy, as a program's new large buffer is)
 *   warm   the same destination, written before, in every run
 *
 * Reports medians, min and max of GB/s (packed bytes / s), and per run the
 * ratio of the streaming copy to the per-row memcpy with the count of runs
 * where it was at least 1 (the streaming copy is the one rect.c takes only
 * if it is not slower). Every variant's result is checked once; a mismatch
 * exits 3.
 *
 *   rowcopy-bench [--size BYTES] [--row BYTES] [--pad BYTES] [--threads N] [--runs N]
 *              [--dir scatter|gather|both] [--dest cold|warm|both] [--quick]
 */
#include "benchstat.h"
#include "streamcopy.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAXR 64
#define MAXT 256

static struct {
  size_t size, row, pad;
  int threads, runs;
  bool scatter, gather, cold, warm;
} B = {.size = (size_t)64 << 20,
       .row = (size_t)16 << 10,
       .pad = 64,
       .runs = 7,
       .scatter = true,
       .gather = true};

/* Variants: per-row copies of each kind, then the contiguous memcpy. */
#define CONTIG CLPIN__COPY__COUNT
#define NVAR (CLPIN__COPY__COUNT + 1)

typedef struct {
  int var;
  bool scatter;
  unsigned char *pitched, *packed;
  size_t r0, r1; /* rows (contiguous: bytes) of this thread */
} share;

static void *share_main(void *arg) {
  share *s = arg;
  size_t pitch = B.row + B.pad;
  if (s->var == CONTIG) {
    /* The buffer path: one copy of the thread's contiguous share. */
    if (s->scatter)
      memcpy(s->pitched + s->r0, s->packed + s->r0, s->r1 - s->r0);
    else
      memcpy(s->packed + s->r0, s->pitched + s->r0, s->r1 - s->r0);
    return NULL;
  }
  for (size_t r = s->r0; r < s->r1; r++) {
    unsigned char *h = s->pitched + r * pitch, *p = s->packed + r * B.row;
    if (s->scatter)
      clpin__copy_with((clpin__copy_kind)s->var, h, p, B.row);
    else
      clpin__copy_with((clpin__copy_kind)s->var, p, h, B.row);
  }
  if (s->var != CLPIN__COPY_PLAIN)
    clpin__copy_fence();
  return NULL;
}

/* Nanoseconds for one copy of every row on B.threads threads. */
static double run_copy(int var, bool scatter, unsigned char *pitched, unsigned char *packed) {
  pthread_t th[MAXT];
  share sh[MAXT];
  size_t rows = B.size / B.row, total = var == CONTIG ? B.size : rows;
  size_t per = (total + (size_t)B.threads - 1) / (size_t)B.threads;
  if (var == CONTIG)
    per = (per + 4095) / 4096 * 4096;
  uint64_t t0 = bench_now_ns();
  for (int i = 0; i < B.threads; i++) {
    size_t a = (size_t)i * per, b = a + per;
    a = a < total ? a : total;
    b = b < total ? b : total;
    sh[i] = (share){var, scatter, pitched, packed, a, b};
    if (pthread_create(&th[i], NULL, share_main, &sh[i])) {
      fprintf(stderr, "rowcopy-bench: pthread_create failed\n");
      exit(1);
    }
  }
  for (int i = 0; i < B.threads; i++)
    pthread_join(th[i], NULL);
  return (double)(bench_now_ns() - t0);
}

/* The rows of pitched hold the pattern of seed, packed (scratch: B.size). */
static bool rows_match(const unsigned char *pitched, unsigned char *scratch, uint64_t seed) {
  size_t pitch = B.row + B.pad, rows = B.size / B.row;
  for (size_t r = 0; r < rows; r++)
    memcpy(scratch + r * B.row, pitched + r * pitch, B.row);
  return bench_mismatch(scratch, B.size, seed) == SIZE_MAX;
}

static void fill_pitched(unsigned char *pitched, unsigned char *scratch, uint64_t seed) {
  size_t pitch = B.row + B.pad, rows = B.size / B.row;
  bench_fill(scratch, B.size, seed);
  for (size_t r = 0; r < rows; r++)
    memcpy(pitched + r * pitch, scratch + r * B.row, B.row);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p) {
    fprintf(stderr, "rowcopy-bench: out of memory\n");
    exit(1);
  }
  return p;
}

/* New pages of the kernel's (malloc would hand a smaller size back from its
 * heap, already faulted in). */
static unsigned char *fresh(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    fprintf(stderr, "rowcopy-bench: out of memory\n");
    exit(1);
  }
  return p;
}

/* One direction: the destination (the pitched rows for a scatter, the
 * packed block for a gather) fresh in every run (cold) or the same one. */
static void run_dir(bool scatter, bool cold) {
  size_t pitch = B.row + B.pad, rows = B.size / B.row, pitched_bytes = rows * pitch;
  size_t src_bytes = scatter ? B.size : pitched_bytes, dst_bytes = scatter ? pitched_bytes : B.size;
  const uint64_t seed = 77;
  unsigned char *src = xmalloc(src_bytes), *scratch = xmalloc(B.size);
  unsigned char *warm = cold ? NULL : xmalloc(dst_bytes);
  if (scatter)
    bench_fill(src, B.size, seed);
  else
    fill_pitched(src, scratch, seed);
  if (warm)
    memset(warm, 0, dst_bytes);
  bool have[NVAR];
  for (int v = 0; v < NVAR; v++)
    have[v] = v == CONTIG || clpin__copy_supported((clpin__copy_kind)v);
  double gb[NVAR][MAXR], vs[NVAR][MAXR];
  clpin__copy_kind best = clpin__copy_best();
  /* Run -1 checks every variant's bytes and warms up; it is not timed. Each
   * run starts at another variant, so none always follows the same one. */
  for (int r = -1; r < B.runs; r++) {
    for (int j = 0; j < NVAR; j++) {
      int v = (j + r + 1) % NVAR;
      if (!have[v])
        continue;
      unsigned char *dst = warm ? warm : fresh(dst_bytes);
      if (r < 0)
        memset(dst, 0, dst_bytes);
      double ns = scatter ? run_copy(v, true, dst, src) : run_copy(v, false, src, dst);
      if (r < 0 && v != CONTIG &&
          !(scatter ? rows_match(dst, scratch, seed)
                    : bench_mismatch(dst, B.size, seed) == SIZE_MAX)) {
        fprintf(stderr, "rowcopy-bench: %s mismatch (%s)\n", clpin__copy_name((clpin__copy_kind)v),
                scatter ? "scatter" : "gather");
        exit(3);
      }
      if (!warm)
        munmap(dst, dst_bytes);
      if (r >= 0)
        gb[v][r] = bench_gbps(B.size, ns);
    }
    if (r >= 0)
      for (int v = 0; v < NVAR; v++)
        vs[v][r] = have[v] ? gb[v][r] / gb[CLPIN__COPY_PLAIN][r] : 0;
  }
  char sz[32], what[128];
  printf("%s, %s destination: %s in rows of %zu bytes, pitch %zu, %d threads\n",
         scatter ? "scatter (a read)" : "gather (a write)", cold ? "cold (new pages)" : "warm",
         bench_fmt_size(B.size, sz, sizeof sz), B.row, pitch, B.threads);
  for (int v = 0; v < NVAR; v++) {
    if (!have[v])
      continue;
    if (v == CONTIG)
      snprintf(what, sizeof what, "contiguous memcpy, one per thread (the buffer path)");
    else
      snprintf(what, sizeof what, "rows by %s%s", clpin__copy_name((clpin__copy_kind)v),
               v == (int)best ? " (clpin's)" : "");
    bench_print_median(what, gb[v], B.runs, "GB/s");
  }
  for (int v = 1; v < NVAR; v++) {
    if (!have[v])
      continue;
    snprintf(what, sizeof what, "%s / rows by memcpy",
             v == CONTIG ? "contiguous" : clpin__copy_name((clpin__copy_kind)v));
    bench_print_ratio(what, vs[v], B.runs, 0);
  }
  free(src);
  free(scratch);
  free(warm);
}

static bool parse_size_arg(const char *v, size_t *out) {
  if (!v || !bench_parse_size(v, out)) {
    fprintf(stderr, "rowcopy-bench: bad size %s\n", v ? v : "(none)");
    return false;
  }
  return true;
}

int main(int argc, char **argv) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  B.threads = ncpu > 1 ? (int)(ncpu * 3 / 4) : 1; /* clpin's default share */
  const char *dir = "both", *dest = "both";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool ok = true;
    if (!strcmp(a, "--quick")) {
      B.size = (size_t)4 << 20;
      B.runs = 3;
    } else if (!strcmp(a, "--size")) {
      ok = parse_size_arg(v, &B.size), i++;
    } else if (!strcmp(a, "--row")) {
      ok = parse_size_arg(v, &B.row), i++;
    } else if (!strcmp(a, "--pad")) {
      ok = parse_size_arg(v, &B.pad), i++;
    } else if (!strcmp(a, "--threads") && v) {
      B.threads = atoi(argv[++i]);
    } else if (!strcmp(a, "--runs") && v) {
      B.runs = atoi(argv[++i]);
    } else if (!strcmp(a, "--dir") && v) {
      dir = argv[++i];
    } else if (!strcmp(a, "--dest") && v) {
      dest = argv[++i];
    } else {
      ok = false;
    }
    if (!ok) {
      fprintf(stderr, "usage: rowcopy-bench [--size BYTES] [--row BYTES] [--pad BYTES] "
                      "[--threads N] [--runs N] [--dir scatter|gather|both] "
                      "[--dest cold|warm|both] [--quick]\n");
      return 2;
    }
  }
  B.scatter = !strcmp(dir, "scatter") || !strcmp(dir, "both");
  B.gather = !strcmp(dir, "gather") || !strcmp(dir, "both");
  B.cold = !strcmp(dest, "cold") || !strcmp(dest, "both");
  B.warm = !strcmp(dest, "warm") || !strcmp(dest, "both");
  if (B.runs < 1 || B.runs > MAXR || B.threads < 1 || B.threads > MAXT || !B.row ||
      B.size < B.row || (!B.scatter && !B.gather) || (!B.cold && !B.warm)) {
    fprintf(stderr,
            "rowcopy-bench: bad --runs (1..%d), --threads (1..%d), --dir, --dest or sizes\n", MAXR,
            MAXT);
    return 2;
  }
  B.size = B.size / B.row * B.row;
  printf("rowcopy-bench: %d runs each (medians, min, max); streaming kind clpin uses: %s\n", B.runs,
         clpin__copy_name(clpin__copy_best()));
  for (int d = 0; d < 2; d++) {
    bool scatter = d == 0;
    if (scatter ? !B.scatter : !B.gather)
      continue;
    if (B.cold)
      run_dir(scatter, true);
    if (B.warm)
      run_dir(scatter, false);
  }
  return 0;
}
