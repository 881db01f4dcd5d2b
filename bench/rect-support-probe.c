/* SPDX-License-Identifier: Apache-2.0 */
/* rect-support-probe: which buffer rects and 3D image calls of several slices a
 * driver accepts. Plain OpenCL, no clpin. Every call is blocking and valid
 * by OpenCL's rules unless its line says "invalid"; each line prints the
 * driver's status for the write and for the read, so a driver that refuses
 * calls OpenCL allows shows which (NVIDIA 580 does: docs/STAGING.md).
 *
 *   rect-support-probe [--platform NAME] [--strict]
 *     --strict: exit 3 when the driver refused a valid call (CI runs it so on
 *     POCL, which accepts them all)
 *
 * Lines: "rect bo=.. ho=.. region=.. brp=.. bsp=.. hrp=.. hsp=.. write=S read=S"
 * "bounds bo=.. region=.. brp=.. bsp=.. extent=E smallest=M" (the smallest
 * buffer the driver takes the rect on, against OpenCL's E), and
 * "image3d|image2darray fmt=.. origin=.. region=.. rp=.. sp=.. write=S read=S"; then
 * per kind the counts of accepted and refused valid calls; last, what one
 * query of the driver costs (the queries a small clpin rect or image call
 * makes before the driver's own call: median ns over 7 runs of 20000). */
#define CL_TARGET_OPENCL_VERSION 120
#include "benchcl.h"
#include "benchstat.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(expr) BENCH_CL_CHECK("rect-support-probe", expr, bench_cl_code)
#define HOST_BYTES ((size_t)1 << 16)

/* OpenCL's rule for a pitch argument: 0, or at least min and (step not 0)
 * a multiple of step. */
static bool pitch_ok(size_t p, size_t min, size_t step) {
  return p == 0 || (p >= min && (step == 0 || p % step == 0));
}

static size_t eff(size_t p, size_t dflt) { return p ? p : dflt; }

typedef struct {
  int tried, accepted, refused_valid, refused_invalid, accepted_invalid;
} tally;

static void count(tally *t, bool valid, cl_int w, cl_int r) {
  cl_int s[2] = {w, r};
  for (int i = 0; i < 2; i++) {
    t->tried++;
    if (s[i] == CL_SUCCESS)
      valid ? t->accepted++ : t->accepted_invalid++;
    else
      valid ? t->refused_valid++ : t->refused_invalid++;
  }
}

static void print_tally(const char *what, const tally *t) {
  printf("%s: %d calls: valid accepted %d, valid REFUSED %d, invalid refused %d, invalid "
         "accepted %d\n",
         what, t->tried, t->accepted, t->refused_valid, t->refused_invalid, t->accepted_invalid);
}

static void probe_rects(cl_context ctx, cl_command_queue q, unsigned char *host, tally *t) {
  cl_int err;
  cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, HOST_BYTES, NULL, &err);
  CHECK(err);
  static const size_t origins[2][3] = {{0, 0, 0}, {8, 1, 1}};
  static const size_t depths[2] = {1, 3};
  const size_t r0 = 40, r1 = 6;
  for (int d = 0; d < 2; d++)
    for (int bo = 0; bo < 2; bo++)
      for (int ho = 0; ho < 2; ho++)
        for (int a = 0; a < 3; a++)
          for (int b = 0; b < 4; b++)
            for (int c = 0; c < 3; c++)
              for (int e = 0; e < 4; e++) {
                size_t region[3] = {r0, r1, depths[d]};
                size_t rps[3] = {0, r0, r0 + 24};
                size_t brp = rps[a], hrp = rps[c];
                size_t bt = r1 * eff(brp, r0), ht = r1 * eff(hrp, r0);
                size_t bsps[4] = {0, bt, bt + eff(brp, r0), bt + 8};
                size_t hsps[4] = {0, ht, ht + eff(hrp, r0), ht + 8};
                size_t bsp = bsps[b], hsp = hsps[e];
                bool valid = pitch_ok(bsp, bt, eff(brp, r0)) && pitch_ok(hsp, ht, eff(hrp, r0));
                cl_int w =
                    clEnqueueWriteBufferRect(q, buf, CL_TRUE, origins[bo], origins[ho], region, brp,
                                             bsp, hrp, hsp, host, 0, NULL, NULL);
                cl_int r = clEnqueueReadBufferRect(q, buf, CL_TRUE, origins[bo], origins[ho],
                                                   region, brp, bsp, hrp, hsp, host, 0, NULL, NULL);
                count(t, valid, w, r);
                printf("rect bo=%zu,%zu,%zu ho=%zu,%zu,%zu region=%zu,%zu,%zu brp=%zu bsp=%zu "
                       "hrp=%zu hsp=%zu%s write=%d read=%d\n",
                       origins[bo][0], origins[bo][1], origins[bo][2], origins[ho][0],
                       origins[ho][1], origins[ho][2], region[0], region[1], region[2], brp, bsp,
                       hrp, hsp, valid ? "" : " invalid", w, r);
              }
  clReleaseMemObject(buf);
}

static void probe_images(cl_context ctx, cl_command_queue q, unsigned char *host, tally *t,
                         cl_mem_object_type type) {
  const char *tname = type == CL_MEM_OBJECT_IMAGE3D ? "image3d" : "image2darray";
  static const cl_image_format fmts[3] = {
      {CL_RGBA, CL_UNSIGNED_INT8}, {CL_R, CL_FLOAT}, {CL_R, CL_UNSIGNED_INT8}};
  static const char *const fnames[3] = {"RGBA8", "Rf", "R8"};
  static const size_t elems[3] = {4, 4, 1};
  static const size_t origins[2][3] = {{0, 0, 0}, {2, 1, 1}};
  static const size_t regions[3][3] = {{16, 4, 2}, {30, 7, 3}, {16, 4, 1}};
  const size_t w = 32, h = 8, depth = 4;
  for (int f = 0; f < 3; f++) {
    cl_image_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.image_type = type;
    desc.image_width = w;
    desc.image_height = h;
    if (type == CL_MEM_OBJECT_IMAGE3D)
      desc.image_depth = depth;
    else
      desc.image_array_size = depth;
    cl_int err;
    cl_mem img = clCreateImage(ctx, CL_MEM_READ_WRITE, &fmts[f], &desc, NULL, &err);
    if (err != CL_SUCCESS) {
      printf("%s fmt=%s: clCreateImage %d (format skipped)\n", tname, fnames[f], err);
      continue;
    }
    for (int o = 0; o < 2; o++)
      for (int g = 0; g < 3; g++)
        for (int a = 0; a < 3; a++)
          for (int b = 0; b < 4; b++) {
            const size_t *region = regions[g];
            if (origins[o][0] + region[0] > w || origins[o][1] + region[1] > h ||
                origins[o][2] + region[2] > depth)
              continue;
            size_t row = region[0] * elems[f];
            size_t rps[3] = {0, row, row + 16};
            size_t rp = rps[a], st = region[1] * eff(rp, row);
            size_t sps[4] = {0, st, st + eff(rp, row), st + 4};
            size_t sp = sps[b];
            bool valid = pitch_ok(sp, st, 0); /* images: no multiple needed */
            cl_int wr = clEnqueueWriteImage(q, img, CL_TRUE, origins[o], region, rp, sp, host, 0,
                                            NULL, NULL);
            cl_int rd = clEnqueueReadImage(q, img, CL_TRUE, origins[o], region, rp, sp, host, 0,
                                           NULL, NULL);
            count(t, valid, wr, rd);
            printf("%s fmt=%s origin=%zu,%zu,%zu region=%zu,%zu,%zu rp=%zu sp=%zu%s write=%d "
                   "read=%d\n",
                   tname, fnames[f], origins[o][0], origins[o][1], origins[o][2], region[0],
                   region[1], region[2], rp, sp, valid ? "" : " invalid", wr, rd);
          }
    clReleaseMemObject(img);
  }
}

/* Whether a write and a read of the rect at bo are accepted on buf. */
static bool rect_passes(cl_command_queue q, cl_mem buf, unsigned char *host, const size_t bo[3],
                        const size_t region[3], size_t brp, size_t bsp, size_t hrp) {
  size_t z[3] = {0, 0, 0};
  return clEnqueueWriteBufferRect(q, buf, CL_TRUE, bo, z, region, brp, bsp, hrp, 0, host, 0, NULL,
                                  NULL) == CL_SUCCESS &&
         clEnqueueReadBufferRect(q, buf, CL_TRUE, bo, z, region, brp, bsp, hrp, 0, host, 0, NULL,
                                 NULL) == CL_SUCCESS;
}

static cl_mem buffer_of(cl_context ctx, size_t n) {
  cl_int err;
  cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CHECK(err);
  return buf;
}

/* Whether the whole rect is accepted on a buffer of n bytes. */
static bool rect_fits(cl_context ctx, cl_command_queue q, unsigned char *host, size_t n,
                      const size_t bo[3], const size_t region[3], size_t brp, size_t bsp,
                      size_t hrp) {
  cl_mem buf = buffer_of(ctx, n);
  bool ok = rect_passes(q, buf, host, bo, region, brp, bsp, hrp);
  clReleaseMemObject(buf);
  return ok;
}

/* Whether the calls a staged transfer would make for the rect, on a buffer
 * of n bytes, are all accepted: per slice, the first half of its rows and
 * the rest, each from tight host memory, buffer pitches resolved. */
static bool chunks_fit(cl_context ctx, cl_command_queue q, unsigned char *host, size_t n,
                       const size_t bo[3], const size_t region[3], size_t brp, size_t bsp) {
  cl_mem buf = buffer_of(ctx, n);
  bool ok = true;
  size_t half = region[1] / 2;
  for (size_t s = 0; s < region[2] && ok; s++)
    for (int part = 0; part < 2 && ok; part++) {
      size_t y = part ? half : 0, ny = part ? region[1] - half : half;
      size_t o[3] = {bo[0], bo[1] + y, bo[2] + s}, r[3] = {region[0], ny, 1};
      ok = !ny || rect_passes(q, buf, host, o, r, brp, bsp, 0);
    }
  clReleaseMemObject(buf);
  return ok;
}

/* The smallest buffer in [lo, hi] the whole rect is accepted on (a binary
 * search: the driver's rule is a bound), or 0 when even hi is refused. */
static size_t smallest_buffer(cl_context ctx, cl_command_queue q, unsigned char *host,
                              const size_t bo[3], const size_t region[3], size_t brp, size_t bsp,
                              size_t hrp, size_t lo, size_t hi) {
  if (!rect_fits(ctx, q, host, hi, bo, region, brp, bsp, hrp))
    return 0;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (rect_fits(ctx, q, host, mid, bo, region, brp, bsp, hrp))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* The region's last byte + 1 (OpenCL's bound), pitches resolved. */
static size_t extent_of(const size_t bo[3], const size_t region[3], size_t rp, size_t sp) {
  return (bo[2] + region[2] - 1) * sp + (bo[1] + region[1] - 1) * rp + bo[0] + region[0];
}

/* The smallest buffer the driver takes a rect on, against OpenCL's: the
 * region's last byte + 1 (extent). "bounds ... extent=E smallest=M". */
static void probe_bounds(cl_context ctx, cl_command_queue q, unsigned char *host, tally *t) {
  static const size_t origins[3][3] = {{0, 0, 0}, {3, 2, 1}, {1, 0, 2}};
  static const size_t depths[3] = {1, 2, 4};
  const size_t r0 = 33, r1 = 7;
  for (int o = 0; o < 3; o++)
    for (int d = 0; d < 3; d++)
      for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
          size_t region[3] = {r0, r1, depths[d]};
          size_t brp = a ? 40 : 0, rp = eff(brp, r0);
          size_t bsp = b ? (r1 + 1) * rp : 0, sp = eff(bsp, r1 * rp);
          const size_t *bo = origins[o];
          size_t extent = extent_of(bo, region, rp, sp), hi = extent + 4 * sp + 64;
          size_t m = smallest_buffer(ctx, q, host, bo, region, brp, bsp, 0, extent, hi);
          printf("bounds bo=%zu,%zu,%zu region=%zu,%zu,%zu brp=%zu bsp=%zu extent=%zu ", bo[0],
                 bo[1], bo[2], region[0], region[1], region[2], brp, bsp, extent);
          if (!m) {
            printf("smallest=none (refused up to %zu)\n", hi);
            count(t, true, -1, -1);
            continue;
          }
          count(t, true, m == extent ? 0 : -1, m == extent ? 0 : -1);
          printf("smallest=%zu (%+ld)\n", m, (long)(m - extent));
        }
}

/* More of the driver's bounds: every origin of {0,1,2}^3, 1 and 3 slices,
 * pitches tight and wide, and host pitches tight and wide; per case the
 * smallest buffer (M) for the whole call, whether the staged calls pass
 * at M and at M - 1, and whether both pass with the room clpin asks before
 * it stages (counted in g: "accepted" where both do).
 * "bounds2 ... extent=E smallest=M chunks@M=.. chunks@M-1=.. room=.." */
static void probe_bounds2(cl_context ctx, cl_command_queue q, unsigned char *host, tally *g) {
  const size_t r0 = 33, r1 = 7;
  static const size_t pitches[4][2] = {{0, 0}, {40, 0}, {0, 264}, {40, 320}};
  for (int o = 0; o < 27; o++)
    for (int d = 0; d < 2; d++)
      for (int p = 0; p < 4; p++)
        for (int hw = 0; hw < 2; hw++) {
          size_t bo[3] = {(size_t)o % 3, (size_t)o / 3 % 3, (size_t)o / 9};
          size_t region[3] = {r0, r1, d ? 3 : 1};
          size_t brp = pitches[p][0], bsp = pitches[p][1], rp = eff(brp, r0);
          size_t sp = eff(bsp, r1 * rp), hrp = hw ? 50 : 0;
          size_t extent = extent_of(bo, region, rp, sp);
          size_t m = smallest_buffer(ctx, q, host, bo, region, brp, bsp, hrp, extent,
                                     extent + 4 * sp + 64);
          /* clpin's staged calls pass the pitches resolved. */
          bool at = m && chunks_fit(ctx, q, host, m, bo, region, rp, sp);
          bool below = m > extent && chunks_fit(ctx, q, host, m - 1, bo, region, rp, sp);
          /* The room clpin asks before it stages (src/rect.c): at it, the
           * whole call and the staged ones must both pass. */
          size_t room = (bo[2] + region[2]) * sp;
          size_t row_room = (bo[2] + region[2] - 1) * sp + (bo[1] + region[1]) * rp;
          room = room > row_room ? room : row_room;
          room = room > extent ? room : extent;
          bool whole_at_room = m && m <= room,
               chunks_at_room = chunks_fit(ctx, q, host, room, bo, region, rp, sp);
          g->tried++;
          if (!whole_at_room || !chunks_at_room)
            g->refused_valid++;
          else
            g->accepted++;
          printf("bounds2 bo=%zu,%zu,%zu region=%zu,%zu,%zu brp=%zu bsp=%zu hrp=%zu extent=%zu "
                 "smallest=%zu (%+ld) chunks@M=%s chunks@M-1=%s room=%zu whole@room=%s "
                 "chunks@room=%s\n",
                 bo[0], bo[1], bo[2], region[0], region[1], region[2], brp, bsp, hrp, extent, m,
                 (long)(m - extent), at ? "ok" : "REFUSED",
                 m > extent ? (below ? "ok" : "refused") : "-", room,
                 whole_at_room ? "ok" : "REFUSED", chunks_at_room ? "ok" : "REFUSED");
        }
}

/* ns per call of each query a small clpin call makes. */
static void query_cost(cl_context ctx, cl_command_queue q) {
  cl_int err;
  cl_image_format f = {CL_RGBA, CL_UNSIGNED_INT8};
  cl_image_desc d;
  memset(&d, 0, sizeof d);
  d.image_type = CL_MEM_OBJECT_IMAGE2D;
  d.image_width = d.image_height = 64;
  cl_mem img = clCreateImage(ctx, CL_MEM_READ_WRITE, &f, &d, NULL, &err);
  CHECK(err);
  enum { ITERS = 20000, RUNS = 7 };
  static const char *const names[3] = {"clGetCommandQueueInfo(CL_QUEUE_CONTEXT)",
                                       "clGetMemObjectInfo(CL_MEM_TYPE)",
                                       "clGetImageInfo(CL_IMAGE_ELEMENT_SIZE)"};
  for (int k = 0; k < 3; k++) {
    double ns[RUNS];
    for (int r = 0; r < RUNS; r++) {
      double t0 = bench_now_s();
      for (int i = 0; i < ITERS; i++) {
        cl_context c;
        cl_mem_object_type t;
        size_t e;
        if (k == 0)
          CHECK(clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof c, &c, NULL));
        else if (k == 1)
          CHECK(clGetMemObjectInfo(img, CL_MEM_TYPE, sizeof t, &t, NULL));
        else
          CHECK(clGetImageInfo(img, CL_IMAGE_ELEMENT_SIZE, sizeof e, &e, NULL));
      }
      ns[r] = (bench_now_s() - t0) * 1e9 / ITERS;
    }
    bench_summary b = bench_summarize(ns, RUNS);
    printf("query %-42s median %7.1f ns  (min %.1f, max %.1f, %d runs of %d)\n", names[k], b.median,
           b.min, b.max, RUNS, ITERS);
  }
  clReleaseMemObject(img);
}

int main(int argc, char **argv) {
  const char *want = NULL;
  bool strict = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--platform") && i + 1 < argc)
      want = argv[++i];
    else if (!strcmp(argv[i], "--strict"))
      strict = true;
    else {
      fprintf(stderr, "usage: rect-support-probe [--platform NAME] [--strict]\n");
      return 2;
    }
  }
  cl_device_id dev;
  cl_context ctx;
  cl_command_queue q;
  bench_cl_open("rect-support-probe", want, bench_cl_code, &dev, &ctx, &q);
  unsigned char *host = calloc(1, HOST_BYTES);
  if (!host)
    return 1;
  char name[256] = "", ver[256] = "";
  clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
  clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof ver, ver, NULL);
  printf("rect-support-probe on %s (driver %s)\n", name, ver);
  tally rects = {0}, bounds = {0}, images = {0}, arrays = {0};
  probe_rects(ctx, q, host, &rects);
  probe_bounds(ctx, q, host, &bounds);
  tally room = {0};
  probe_bounds2(ctx, q, host, &room);
  probe_images(ctx, q, host, &images, CL_MEM_OBJECT_IMAGE3D);
  probe_images(ctx, q, host, &arrays, CL_MEM_OBJECT_IMAGE2D_ARRAY);
  print_tally("buffer rects", &rects);
  print_tally("buffer rects ending at the buffer's end", &bounds);
  print_tally("rects with clpin's room (whole and staged calls pass)", &room);
  print_tally("3D images", &images);
  print_tally("2D image arrays", &arrays);
  query_cost(ctx, q);
  free(host);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return strict && (rects.refused_valid || bounds.refused_valid || room.refused_valid ||
                    images.refused_valid || arrays.refused_valid)
             ? 3
             : 0;
}
