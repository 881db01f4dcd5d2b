/* SPDX-License-Identifier: Apache-2.0 */
/* The targets table at the end of a run: each target of clpin's design
 * (docs/BENCHMARKS.md) against its baseline measured in the same run, from
 * the records of the cases that ran; a target whose figures are missing is
 * left out. */
#include "harness.h"

#include <string.h>

static double median_of(const char *path, const char *dir, size_t n) {
  const record *r = bench_find_record("transfer", path, dir, n);
  if (!r)
    r = bench_find_record("sweep", path, dir, n);
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
  printf("  %-34s %10.2f %-7s %-26s %9.3g  %s %-7g %s\n", what, clpin, unit, basecol, value, op,
         want, met ? "met" : "MISSED");
}

/* The transfer targets: pool memory at pinned speed, staged pageable
 * memory against pageable (64 MiB) and against pinned (1 GiB). */
static void transfer_targets(void) {
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
    double c = median_of("clpin-pin", dirs[d], 64 * MiB),
           base = median_of("pageable", dirs[d], 64 * MiB);
    snprintf(what, sizeof what, "%s 64 MiB pageable", dirs[d]);
    target_line(what, c, "GB/s", base, "pageable", base ? c / base : 0, ">=", pg_target);
    c = median_of("clpin-pin", dirs[d], 1024 * MiB), base = pinned_ref(dirs[d], 1024 * MiB, &ref);
    snprintf(what, sizeof what, "%s 1 GiB pageable", dirs[d]);
    target_line(what, c, "GB/s", base, ref, base ? c / base : 0, ">=", pin_target);
  }
}

/* Never slower: CLPIN_PIN_MEMORY against the plain call from the same
 * malloc memory at every size the sweep measured; the worst size's ratio.
 * (Where staging does not pay, clpin takes the plain path: the ratio is
 * then two identical calls' and moves with the noise.) */
static void sweep_targets(void) {
  size_t nrec;
  const record *recs = bench_records(&nrec);
  const char *dirs[] = {"H2D", "D2H"};
  for (int d = 0; d < 2; d++) {
    const record *worst = NULL, *worst_base = NULL;
    for (size_t i = 0; i < nrec; i++) {
      const record *r = &recs[i];
      if (strcmp(r->section, "sweep") || strcmp(r->path, "clpin-pin") || strcmp(r->dir, dirs[d]))
        continue;
      const record *b = bench_find_record("sweep", "pageable", dirs[d], r->bytes);
      if (!b || b->s.median <= 0)
        continue;
      if (!worst || r->s.median / b->s.median < worst->s.median / worst_base->s.median)
        worst = r, worst_base = b;
    }
    if (!worst)
      continue;
    char what[96], sz[32];
    snprintf(what, sizeof what, "%s sweep, worst size: %s", dirs[d],
             bench_fmt_size(worst->bytes, sz, sizeof sz));
    target_line(what, worst->s.median, "GB/s", worst_base->s.median, "pageable",
                worst->s.median / worst_base->s.median, ">=", 0.97);
  }
}

/* The pool targets: a hit's cost, and against a fresh pinned buffer. */
static void pool_targets(void) {
  const record *hit = bench_find_record("pool", "clpin-hit", "", MiB);
  const record *kept = bench_find_record("pool", "cl-create-map-kept", "", MiB);
  const record *again = bench_find_record("pool", "cl-create-map", "", MiB);
  if (hit)
    target_line("pool hit 1 MiB, median ns", hit->s.median, "ns", 0, NULL, hit->s.median,
                "<=", 100);
  if (hit && kept)
    target_line("pool hit vs create+map, new memory", hit->s.median, "ns", kept->s.median,
                "cl-create-map-kept", kept->s.median / hit->s.median, ">=", 10000);
  if (hit && again)
    printf(
        "  %-34s %10.2f %-7s %-26s %9.3g  (no target: a driver may hand the freed buffer back)\n",
        "pool hit vs create+map, freed+made", hit->s.median, "ns", "",
        again->s.median / hit->s.median);
}

/* The threads targets: many threads against one, and their tail latency. */
static void threads_targets(void) {
  size_t nrec;
  const record *recs = bench_records(&nrec);
  const record *one = NULL, *many = NULL, *many_lat = NULL;
  for (size_t i = 0; i < nrec; i++) {
    const record *r = &recs[i];
    if (!strcmp(r->section, "threads") && !strcmp(r->path, "clpin-mixed"))
      *(r->threads == 1 ? &one : &many) = r;
    if (!strcmp(r->section, "threads") && !strcmp(r->path, "clpin-mixed-latency") && r->threads > 1)
      many_lat = r;
  }
  char what[96];
  if (one && many) {
    snprintf(what, sizeof what, "pool ops, %u threads vs one", many->threads);
    target_line(what, many->s.median, "Mops/s", one->s.median, "1 thread",
                many->s.median / one->s.median, ">=", 2);
  }
  if (many_lat) {
    /* One unit in the row: microseconds, figure and target alike. */
    snprintf(what, sizeof what, "pool ops, %u threads, p99", many_lat->threads);
    target_line(what, many_lat->s.p99 / 1000, "us", 0, NULL, many_lat->s.p99 / 1000, "<=", 5);
  }
}

/* The unified case's targets (bench/unified.c prints each row's per-run
 * verdict; here the ratio of the medians, beside the other targets). */
static void unified_targets(void) {
  static const struct {
    const char *what, *clpin, *base;
    bool speedup;
    double want;
  } rows[] = {
      {"round trip vs plain OpenCL", "clpin-tensor", "cl-plain", true, 4.0},
      {"ZERO_COPY vs USE_HOST_PTR+map", "clpin-zero-copy", "cl-use-host-ptr", false, 1.2},
      {"create+fill vs ALLOC_HOST_PTR+map", "clpin-create-fill", "cl-alloc-host-ptr", false, 1.1},
  };
  size_t sizes[2] = {64 * MiB, 256 * MiB};
  char what[96], sz[32];
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    for (int s = 0; s < 2; s++) {
      const record *c = bench_find_record("unified", rows[i].clpin, "", sizes[s]);
      const record *b = bench_find_record("unified", rows[i].base, "", sizes[s]);
      if (!c || !b)
        continue;
      snprintf(what, sizeof what, "%s %s", rows[i].what, bench_fmt_size(sizes[s], sz, sizeof sz));
      double ratio = rows[i].speedup ? b->s.median / c->s.median : c->s.median / b->s.median;
      target_line(what, c->s.median, "ms", b->s.median, rows[i].base, ratio,
                  rows[i].speedup ? ">=" : "<=", rows[i].want);
    }
}

void bench_print_targets(void) {
  printf("\n  %-34s %10s %-7s %-26s %9s  %s\n", "targets", "clpin", "", "baseline (same run)",
         "ratio", "target");
  transfer_targets();
  sweep_targets();
  pool_targets();
  threads_targets();
  unified_targets();
  fflush(stdout);
}
