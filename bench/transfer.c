/* SPDX-License-Identifier: Apache-2.0 */
/* The transfer and sweep cases: one blocking transfer at a time through
 * every path (harness.h lists them), each point timed to completion and its
 * data checked; and the buffers every path transfers from and to. */
#include "harness.h"

#include "cudaref.h"

#include <stdlib.h>
#include <string.h>

static bool is_cuda(path_id p) { return p == P_CUDA_PINNED || p == P_CUDA_PAGEABLE; }
static bool is_clpin(path_id p) { return p >= P_CLPIN_HOST && p <= P_CLPIN_REG; }

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
  case P_CLPIN_REG: return bf->clpin_reg;
  case P_CUDA_PINNED: return bf->cuda_host;
  default: return d == H2D ? bf->pg_src : bf->pg_dst;
  }
}

bool bench_alloc_buffers(const bench_cl *b, size_t cap, bool cuda, buffers *bf) {
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
  bf->cl_pinned_mem =
      clCreateBuffer(b->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, cap, NULL, &err);
  CL_TRY(err);
  bf->cl_pinned = clEnqueueMapBuffer(b->q, bf->cl_pinned_mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE,
                                     0, cap, 0, NULL, NULL, &err);
  CL_TRY(err);
  memset(bf->cl_pinned, 1, cap);
  bf->clpin_host = clpin_host_alloc(b->pool, cap);
  if (!bf->clpin_host) {
    fprintf(stderr, "clpin-bench: clpin_host_alloc(%zu) failed\n", cap);
    return false;
  }
  memset(bf->clpin_host, 1, cap);
  /* Registered memory: whole pages (two registrations cannot share one). */
  bf->clpin_reg = aligned_alloc(4096, (cap + 4095) / 4096 * 4096);
  if (!bf->clpin_reg) {
    fprintf(stderr, "clpin-bench: cannot malloc %zu bytes to register\n", cap);
    return false;
  }
  memset(bf->clpin_reg, 1, cap);
  if (clpin_host_register(b->pool, bf->clpin_reg, cap) != CL_SUCCESS) {
    free(bf->clpin_reg);
    bf->clpin_reg = NULL;
    fprintf(stderr, "clpin-bench: clpin_host_register(%zu) failed\n", cap);
    return false;
  }
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

void bench_free_buffers(const bench_cl *b, buffers *bf) {
  if (bf->cl_pinned) {
    clEnqueueUnmapMemObject(b->q, bf->cl_pinned_mem, bf->cl_pinned, 0, NULL, NULL);
    clFinish(b->q);
  }
  if (bf->cl_pinned_mem)
    clReleaseMemObject(bf->cl_pinned_mem);
  if (bf->dev)
    clReleaseMemObject(bf->dev);
  clpin_host_free(bf->clpin_host);
  if (bf->clpin_reg)
    clpin_host_unregister(bf->clpin_reg);
  free(bf->clpin_reg);
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
  case P_CLPIN_PLAIN:
  case P_CLPIN_REG: {
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
static bool route_expected(const bench_cl *b, path_id p, direction d, size_t n, const char *route) {
  switch (p) {
  case P_CLPIN_HOST:
  case P_CLPIN_REG: return !strcmp(route, "direct");
  case P_CLPIN_PLAIN: return !strcmp(route, "unpinned");
  case P_CLPIN_PIN:
    /* Never slower: plain where staging does not pay (a host-unified
     * device unless CLPIN_PINNED_H2D=1, or below CLPIN_STAGE_MIN, and a
     * write below CLPIN_STAGE_MIN_H2D). */
    if ((b->unified && clpin_get_option(CLPIN_OPT_PINNED) != 1) ||
        n < clpin_get_option(CLPIN_OPT_STAGE_MIN) ||
        (d == H2D && n < clpin_get_option(CLPIN_OPT_STAGE_MIN_H2D)))
      return !strcmp(route, "unpinned");
    return !strcmp(route, "staged") || !strcmp(route, "pipelined");
  default: return true;
  }
}

/* Put the pattern of seed where path p's transfer in direction d reads it,
 * and clear where it writes. */
static bool prepare_point(const bench_cl *b, const buffers *bf, path_id p, direction d, size_t n,
                          uint64_t seed) {
  void *host = host_side(bf, p, d);
  if (d == H2D) {
    bench_fill(host, n, seed);
    return true;
  }
  if (!device_fill(b, bf, p, n, seed))
    return false;
  memset(host, 0, n);
  return true;
}

/* Warm-ups, then reps timed samples into out->s, and clpin's route per its
 * stats. Small sizes are timed in batches so the clock's own cost stays out
 * of the figure. */
static bool time_point(const bench_opts *o, const bench_cl *b, const buffers *bf, path_id p,
                       direction d, size_t n, unsigned reps, record *out) {
  unsigned batch = n >= MiB ? 1 : (unsigned)(MiB / n < 256 ? MiB / n : 256);
  double *gbps = calloc(reps, sizeof *gbps);
  if (!gbps)
    return false;
  clpin_stats before = bench_pool_stats(b);
  bool ok = true;
  for (unsigned w = 0; ok && w < o->warmup * batch; w++)
    ok = transfer(b, bf, p, d, n);
  for (unsigned r = 0; ok && r < reps; r++) {
    uint64_t t0 = bench_now_ns();
    for (unsigned k = 0; ok && k < batch; k++)
      ok = transfer(b, bf, p, d, n);
    gbps[r] = bench_gbps(n, (double)(bench_now_ns() - t0) / batch);
  }
  clpin_stats after = bench_pool_stats(b);
  if (ok) {
    out->s = bench_summarize(gbps, reps);
    out->route = is_clpin(p) ? route_between(&before, &after) : "";
  }
  free(gbps);
  return ok;
}

/* Check what the last transfer put at the destination, and the route a
 * clpin path took; either failing raises the exit status. */
static bool check_point(const bench_opts *o, const bench_cl *b, const buffers *bf, path_id p,
                        direction d, size_t n, uint64_t seed, const char *route) {
  size_t bad;
  if (d == H2D) {
    if (!device_fetch(b, bf, p, n))
      return false;
    bad = bench_mismatch(bf->pg_dst, n, seed);
  } else {
    bad = bench_mismatch(host_side(bf, p, d), n, seed);
  }
  if (bad != SIZE_MAX) {
    fprintf(stderr, "clpin-bench: DATA MISMATCH: %s %s %zu bytes, first at byte %zu\n",
            bench_path_names[p], bench_dir_names[d], n, bad);
    bench_fail_status(3);
  }
  if (is_clpin(p) && !route_expected(b, p, d, n, route)) {
    fprintf(stderr, "clpin-bench: %s %s %zu bytes took route \"%s\"\n", bench_path_names[p],
            bench_dir_names[d], n, route);
    if (o->strict)
      bench_fail_status(4);
  }
  return true;
}

bool bench_measure(const bench_opts *o, const bench_cl *b, const buffers *bf, path_id p,
                   direction d, size_t n, unsigned reps, record *out) {
  uint64_t seed = bench_next_seed();
  return prepare_point(b, bf, p, d, n, seed) && time_point(o, b, bf, p, d, n, reps, out) &&
         check_point(o, b, bf, p, d, n, seed, out->route);
}

/* Before the first point: a fresh GPU leaves its idle clocks and link power
 * state only after some traffic (the first point of a cold run measured up to
 * 3x low on the H100), and every path makes its first-use allocations here. */
bool bench_settle(const bench_cl *b, const buffers *bf) {
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
    printf("\n%s %s, GB/s (median)\n%-10s", section, bench_dir_names[d], "size");
    for (int p = 0; p < P_COUNT; p++)
      if (path_available(bf, (path_id)p))
        printf(" %13s", bench_path_names[p]);
    printf("  clpin routes\n");
    for (int i = 0; i < nsizes; i++) {
      char sz[32];
      printf("%-10s", bench_fmt_size(sizes[i], sz, sizeof sz));
      const char *routes[4] = {"", "", "", ""};
      for (int p = 0; p < P_COUNT; p++) {
        if (!path_available(bf, (path_id)p))
          continue;
        const record *r =
            bench_find_record(section, bench_path_names[p], bench_dir_names[d], sizes[i]);
        if (r)
          printf(" %13.2f", r->s.median);
        else
          printf(" %13s", "-");
        if (r && is_clpin((path_id)p))
          routes[p - P_CLPIN_HOST] = r->route;
      }
      printf("  %s/%s/%s/%s\n", routes[0], routes[1], routes[2], routes[3]);
    }
  }
  fflush(stdout);
}

bool bench_run_transfers(const bench_opts *o, const bench_cl *b, const buffers *bf,
                         const char *section, const size_t *sizes, int nsizes) {
  for (int i = 0; i < nsizes; i++)
    for (int d = H2D; d <= D2H; d++)
      for (int p = 0; p < P_COUNT; p++) {
        if (!path_available(bf, (path_id)p))
          continue;
        record r = {section,
                    bench_path_names[p],
                    bench_dir_names[d],
                    sizes[i],
                    clpin_get_option(CLPIN_OPT_CHUNK),
                    (unsigned)clpin_get_option(CLPIN_OPT_THREADS),
                    "GB/s",
                    "",
                    {0}};
        if (!bench_measure(o, b, bf, (path_id)p, (direction)d, sizes[i], o->reps, &r))
          return false;
        bench_add_record(r);
      }
  print_transfer_table(section, sizes, nsizes, bf);
  return true;
}
