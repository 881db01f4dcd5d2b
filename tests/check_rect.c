/* SPDX-License-Identifier: Apache-2.0 */
/* Rect and image transfers (src/rect.c): clpin_write_rect / read_rect /
 * write_image / read_image byte-exact against the driver's own calls for
 * every origin, region and pitch combination below, on every path (plain,
 * staged in one block, pipelined with chunks crossing slices, non-blocking
 * through the engine, pool memory, registered memory; blocking reads with
 * rows written by streaming stores, non-blocking ones by memcpy), with the pool's
 * counters proving which path ran; non-blocking calls that return before
 * their gate opens and then deliver; failed wait lists; argument errors.
 * Runs on POCL and, in ci/stages/30-oclgrind.sh, on Oclgrind. */
#include "faultlayer.h"
#include "testutil.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define PIN CLPIN_PIN_MEMORY
#define NB CLPIN_NON_BLOCKING
/* Small chunks: a few KiB of rows already make a pipeline of many chunks,
 * some crossing slices. */
#define CHUNK ((size_t)8192)

static test_cl cl;
static clpin_pool *pool;
static bool small_mode; /* setup_small's cases */

static void setup(void) {
  test_cl_open(&cl);
  CL_OK(clpin_pool_get(cl.queue, &pool));
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, CHUNK));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, 0));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, 0));
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, 1));
}

/* Blocking cases: every staged read scatters its rows with streaming stores
 * (streamcopy.c) instead of only those of CLPIN_STREAM_MIN (16 MiB) or more;
 * the non-blocking cases keep the default, rows by memcpy at these sizes. */
static void setup_streaming(void) {
  setup();
  CL_OK(clpin_set_option(CLPIN_OPT_STREAM_MIN, 0));
}

/* Small reads: below an unlimited staging minimum, a blocking read goes
 * through one pool block (staging.c, small_read) and is checked byte-exact
 * against the driver's own like the staged ones. */
static void setup_small(void) {
  setup();
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, SIZE_MAX));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, SIZE_MAX));
  small_mode = true;
}

static void teardown(void) {
  small_mode = false;
  test_cl_close(&cl);
  clpin_shutdown();
}

/* ---- the ways a transfer is made ------------------------------------------- */

/* How clpin is called: its flags and where the host memory lives. */
typedef enum { WAY_PLAIN, WAY_STAGED, WAY_NB, WAY_POOL, WAY_REGISTERED, WAY_COUNT } way;
static const char *const way_names[WAY_COUNT] = {"plain", "staged", "non-blocking", "pool memory",
                                                 "registered"};

static unsigned way_flags(way w) { return w == WAY_PLAIN ? 0 : w == WAY_NB ? PIN | NB : PIN; }

/* Host memory of n bytes for way w (free with host_free). */
static void *host_get(way w, size_t n) {
  void *p;
  if (w == WAY_POOL) {
    p = clpin_host_alloc(pool, n);
  } else {
    /* Registrations are whole pages: give each its own. */
    p = w == WAY_REGISTERED ? aligned_alloc(4096, (n + 4095) / 4096 * 4096) : malloc(n);
    if (w == WAY_REGISTERED && p)
      CL_OK(clpin_host_register(pool, p, n));
  }
  ck_assert_ptr_nonnull(p);
  return p;
}

static void host_free(way w, void *p) {
  if (w == WAY_POOL) {
    CL_OK(clpin_host_free(p));
    return;
  }
  if (w == WAY_REGISTERED)
    CL_OK(clpin_host_unregister(p));
  free(p);
}

/* Wait for a non-blocking call's event (the caller's event is mandatory
 * here: it proves the event delivers). */
static void settle(way w, cl_event ev) {
  if (w == WAY_NB) {
    ck_assert_ptr_nonnull(ev);
    CL_OK(clWaitForEvents(1, &ev));
  }
  if (ev)
    clReleaseEvent(ev);
}

static clpin_stats stats_now(void) { return test_stats(pool); }

/* The counter a transfer of n packed bytes made through way w lands in. */
/* The "small" cases (setup_small): CLPIN_STAGE_MIN unlimited, so a staged
 * read is a small one through one pool block (up to SMALL_READ_MAX, as in
 * staging.c) and every write and larger read the driver's own call. */
#define SMALL_READ_MAX ((size_t)256 << 10)

static void assert_path_of(way w, bool read, const clpin_stats *b, size_t n, bool unstaged,
                           bool format_unstaged) {
  if (small_mode && (w == WAY_STAGED || w == WAY_NB))
    unstaged = !read || w == WAY_NB || n > SMALL_READ_MAX || format_unstaged;
  clpin_stats a = stats_now();
  uint64_t direct = a.bytes_pinned_direct - b->bytes_pinned_direct;
  uint64_t staged = a.bytes_staged + a.bytes_pipelined - b->bytes_staged - b->bytes_pipelined;
  uint64_t unpinned = a.bytes_unpinned - b->bytes_unpinned;
  if (small_mode && !read && w != WAY_NB) {
    /* A small blocking write is the driver's call, found in no pool
     * (rect.c, small_write): no counter moves, whatever the memory. */
    ck_assert_uint_eq(direct + staged + unpinned, 0);
    test_assert_balanced(&a);
    return;
  }
  switch (w) {
  case WAY_PLAIN: ck_assert_uint_eq(unpinned, n); break;
  case WAY_STAGED:
  case WAY_NB: ck_assert_uint_eq(unstaged ? unpinned : staged, n); break;
  default: ck_assert_uint_eq(direct, n);
  }
  test_assert_balanced(&a);
}

/* ---- buffer rects ------------------------------------------------------------ */

typedef struct {
  size_t bo[3], ho[3], region[3];
  size_t brp, bsp, hrp, hsp;
} rect_case;

/* 1D, 2D and 3D; pitches 0 (tight) and wider; odd sizes; rows larger than
 * a chunk; 3D regions whose chunks cross slices. */
static const rect_case rects[] = {
    {{3, 0, 0}, {5, 0, 0}, {1000, 1, 1}, 0, 0, 0, 0},
    {{0, 0, 0}, {0, 0, 0}, {64, 100, 1}, 0, 0, 0, 0},
    {{7, 3, 0}, {2, 5, 0}, {100, 77, 1}, 128, 0, 164, 0},
    {{1, 2, 3}, {4, 1, 2}, {33, 17, 9}, 40, 40 * 20, 50, 50 * 19},
    {{0, 0, 0}, {0, 0, 0}, {16, 8, 5}, 0, 0, 0, 0},
    {{5, 1, 0}, {0, 3, 0}, {1000, 300, 1}, 1003, 0, 1064, 0},
    {{0, 0, 1}, {9, 0, 0}, {300, 7, 11}, 0, 300 * 8, 301, 0},
    {{11, 0, 0}, {0, 1, 1}, {40000, 3, 2}, 40013, 0, 0, 40000 * 5},
    {{2, 2, 2}, {1, 1, 1}, {129, 31, 3}, 131, 131 * 40, 140, 140 * 33},
};
#define NRECTS (sizeof rects / sizeof rects[0])

/* Bytes a side spans: (o2 + r2 - 1) * sp + (o1 + r1 - 1) * rp + o0 + r0,
 * pitches resolved as OpenCL resolves 0. */
static size_t rect_extent(const size_t o[3], const size_t r[3], size_t rp, size_t sp) {
  rp = rp ? rp : r[0];
  sp = sp ? sp : rp * r[1];
  return (o[2] + r[2] - 1) * sp + (o[1] + r[1] - 1) * rp + o[0] + r[0];
}

static size_t packed(const size_t r[3]) { return r[0] * r[1] * r[2]; }

/* Whether a buffer of dn bytes leaves a rect the room NVIDIA's driver asks
 * (docs/STAGING.md): the rest of the last slice and of the last row. With
 * less, clpin makes the driver's own call. */
static bool driver_room(const rect_case *c, size_t dn) {
  size_t rp = c->brp ? c->brp : c->region[0];
  size_t sp = c->bsp ? c->bsp : rp * c->region[1];
  size_t slices = c->bo[2] + c->region[2];
  return slices * sp <= dn && (slices - 1) * sp + (c->bo[1] + c->region[1]) * rp <= dn;
}

static cl_mem filled_buffer(size_t n, unsigned seed) {
  cl_mem m = test_buffer(&cl, n);
  unsigned char *p = malloc(n);
  test_fill(p, n, seed);
  CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, n, p, 0, NULL, NULL));
  free(p);
  return m;
}

static void read_whole(cl_mem m, size_t n, void *p) {
  CL_OK(clEnqueueReadBuffer(cl.queue, m, CL_TRUE, 0, n, p, 0, NULL, NULL));
}

/* The ways that run on the calling thread (Oclgrind's runtime is not
 * thread-safe: the "exact" case runs there), and the engine's. */
static const way blocking_ways[] = {WAY_PLAIN, WAY_STAGED, WAY_POOL, WAY_REGISTERED};
static const way engine_ways[] = {WAY_NB};

/* slack: bytes of the buffer past the region's last one. */
static void write_rect_case(int ci, way w, size_t slack) {
  const rect_case *c = &rects[ci];
  size_t dn = rect_extent(c->bo, c->region, c->brp, c->bsp) + slack;
  size_t hn = rect_extent(c->ho, c->region, c->hrp, c->hsp) + 5;
  unsigned char *src = host_get(w, hn), *want = malloc(dn), *got = malloc(dn);
  test_fill(src, hn, 7);
  cl_mem ref = filled_buffer(dn, 3), dut = filled_buffer(dn, 3);
  CL_OK(clEnqueueWriteBufferRect(cl.queue, ref, CL_TRUE, c->bo, c->ho, c->region, c->brp, c->bsp,
                                 c->hrp, c->hsp, src, 0, NULL, NULL));
  clpin_stats before = stats_now();
  cl_event ev = NULL;
  CL_OK(clpin_write_rect(cl.queue, dut, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp, c->hsp,
                         src, way_flags(w), 0, NULL, &ev));
  settle(w, ev);
  read_whole(ref, dn, want);
  read_whole(dut, dn, got);
  ck_assert_msg(memcmp(want, got, dn) == 0, "rect case %d, %s: differs from the driver's", ci,
                way_names[w]);
  assert_path_of(w, false, &before, packed(c->region), !driver_room(c, dn), false);
  clReleaseMemObject(ref);
  clReleaseMemObject(dut);
  host_free(w, src);
  free(want);
  free(got);
}

static void read_rect_case(int ci, way w, size_t slack) {
  const rect_case *c = &rects[ci];
  size_t dn = rect_extent(c->bo, c->region, c->brp, c->bsp) + slack;
  size_t hn = rect_extent(c->ho, c->region, c->hrp, c->hsp) + 5;
  unsigned char *want = malloc(hn), *got = host_get(w, hn);
  test_fill(want, hn, 9);
  test_fill(got, hn, 9);
  cl_mem dev = filled_buffer(dn, 4);
  CL_OK(clEnqueueReadBufferRect(cl.queue, dev, CL_TRUE, c->bo, c->ho, c->region, c->brp, c->bsp,
                                c->hrp, c->hsp, want, 0, NULL, NULL));
  clpin_stats before = stats_now();
  cl_event ev = NULL;
  CL_OK(clpin_read_rect(cl.queue, dev, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp, c->hsp, got,
                        way_flags(w), 0, NULL, &ev));
  settle(w, ev);
  ck_assert_msg(memcmp(want, got, hn) == 0, "rect case %d, %s: differs from the driver's", ci,
                way_names[w]);
  assert_path_of(w, true, &before, packed(c->region), !driver_room(c, dn), false);
  clReleaseMemObject(dev);
  host_free(w, got);
  free(want);
}

static bool threads_ok(void) {
  const char *platform = getenv("CLPIN_TEST_PLATFORM");
  return !platform || !strstr(platform, "Oclgrind");
}

/* _i: rect case. */
START_TEST(rects_match_driver) {
  for (size_t k = 0; k < sizeof blocking_ways / sizeof blocking_ways[0]; k++) {
    write_rect_case(_i, blocking_ways[k], 17);
    read_rect_case(_i, blocking_ways[k], 17);
  }
}
END_TEST

START_TEST(rects_match_driver_non_blocking) {
  write_rect_case(_i, WAY_NB, 17);
  read_rect_case(_i, WAY_NB, 17);
}
END_TEST

/* _i: rect case. The buffer ends at the region's last byte: staged where
 * that leaves the room NVIDIA's driver asks, the driver's own call where
 * not (at least cases 2, 3, 5 and 8: rows or slices wider than the region
 * end short of a whole one), byte-exact either way, blocking and not. */
START_TEST(rects_at_the_buffers_end) {
  write_rect_case(_i, WAY_STAGED, 0);
  read_rect_case(_i, WAY_STAGED, 0);
  if (threads_ok()) {
    write_rect_case(_i, WAY_NB, 0);
    read_rect_case(_i, WAY_NB, 0);
  }
}
END_TEST

/* The oracle above decides both ways among the cases. */
START_TEST(driver_room_splits_the_cases) {
  int roomy = 0, tight = 0;
  for (size_t i = 0; i < NRECTS; i++) {
    const rect_case *c = &rects[i];
    if (driver_room(c, rect_extent(c->bo, c->region, c->brp, c->bsp)))
      roomy++;
    else
      tight++;
  }
  ck_assert_int_ge(roomy, 3);
  ck_assert_int_ge(tight, 3);
}
END_TEST

/* ---- images -------------------------------------------------------------------- */

typedef struct {
  cl_mem_object_type type;
  size_t dim[3]; /* width, height (1D array: count), depth (2D array: count) */
  size_t origin[3], region[3];
  size_t rp, sp;
} image_case;

/* Image transfers rect.c leaves to the driver: 1D arrays (implementations
 * disagree on their host layout) and slice pitches no row pitch divides
 * (NVIDIA's driver refuses them, OpenCL allows them). */
static bool unstaged_image(const image_case *c, size_t elem) {
  size_t rp = c->rp ? c->rp : c->region[0] * elem;
  return c->type == CL_MEM_OBJECT_IMAGE1D_ARRAY || (c->sp && c->sp % rp);
}

static const image_case images[] = {
    {CL_MEM_OBJECT_IMAGE1D, {300, 1, 1}, {7, 0, 0}, {250, 1, 1}, 0, 0},
    {CL_MEM_OBJECT_IMAGE1D_ARRAY, {100, 9, 1}, {3, 2, 0}, {90, 6, 1}, 0, 0},
    {CL_MEM_OBJECT_IMAGE1D_ARRAY, {100, 9, 1}, {0, 1, 0}, {97, 7, 1}, 0, 2000},
    {CL_MEM_OBJECT_IMAGE2D, {64, 64, 1}, {0, 0, 0}, {64, 64, 1}, 0, 0},
    {CL_MEM_OBJECT_IMAGE2D, {131, 77, 1}, {5, 9, 0}, {101, 61, 1}, 0, 0},
    {CL_MEM_OBJECT_IMAGE2D, {131, 77, 1}, {1, 2, 0}, {99, 70, 1}, 1700, 0},
    {CL_MEM_OBJECT_IMAGE2D_ARRAY, {40, 30, 5}, {2, 3, 1}, {33, 21, 3}, 0, 0},
    {CL_MEM_OBJECT_IMAGE3D, {33, 17, 9}, {1, 2, 3}, {31, 13, 5}, 600, 600 * 15},
    {CL_MEM_OBJECT_IMAGE3D, {24, 24, 24}, {0, 0, 0}, {24, 24, 24}, 0, 0},
    /* Slice pitches no row pitch divides (odd; rows of 20 x elem bytes):
     * the driver's own call. */
    {CL_MEM_OBJECT_IMAGE3D, {33, 17, 9}, {0, 0, 0}, {20, 10, 4}, 0, 3201},
    {CL_MEM_OBJECT_IMAGE2D_ARRAY, {40, 30, 5}, {1, 0, 1}, {20, 10, 3}, 0, 3201},
};
#define NIMAGES (sizeof images / sizeof images[0])

static const cl_image_format formats[] = {
    {CL_RGBA, CL_UNSIGNED_INT8}, {CL_R, CL_FLOAT},           {CL_RGBA, CL_FLOAT},
    {CL_R, CL_UNSIGNED_INT8},    {CL_RG, CL_UNSIGNED_INT16}, {CL_RGBA, CL_UNORM_INT8},
};
#define NFORMATS (sizeof formats / sizeof formats[0])

static bool format_supported(cl_mem_object_type type, const cl_image_format *f) {
  cl_image_format all[256];
  cl_uint n = 0;
  CL_OK(clGetSupportedImageFormats(cl.ctx, CL_MEM_READ_WRITE, type, 256, all, &n));
  for (cl_uint i = 0; i < n && i < 256; i++)
    if (all[i].image_channel_order == f->image_channel_order &&
        all[i].image_channel_data_type == f->image_channel_data_type)
      return true;
  return false;
}

static size_t elem_size(const cl_image_format *f) {
  size_t ch = f->image_channel_order == CL_RGBA ? 4 : f->image_channel_order == CL_RG ? 2 : 1;
  size_t b =
      f->image_channel_data_type == CL_FLOAT || f->image_channel_data_type == CL_UNSIGNED_INT32 ? 4
      : f->image_channel_data_type == CL_UNSIGNED_INT16                                         ? 2
                                                                                                : 1;
  return ch * b;
}

/* Host bytes an image transfer spans, pitches resolved. */
static size_t image_extent(const image_case *c, size_t elem) {
  size_t rp = c->rp ? c->rp : c->region[0] * elem;
  if (c->type == CL_MEM_OBJECT_IMAGE1D_ARRAY) {
    size_t sp = c->sp ? c->sp : rp;
    return (c->region[1] - 1) * sp + c->region[0] * elem;
  }
  size_t sp = c->sp ? c->sp : rp * c->region[1];
  return (c->region[2] - 1) * sp + (c->region[1] - 1) * rp + c->region[0] * elem;
}

/* Whole-image bytes, tight. */
static size_t image_bytes(const image_case *c, size_t elem) {
  return c->dim[0] * c->dim[1] * c->dim[2] * elem;
}

/* Float formats: keep the pattern away from NaNs (a driver may canonicalise
 * their bits), so that byte equality is meaningful. */
static void fill_pixels(unsigned char *p, size_t n, unsigned seed, const cl_image_format *f) {
  test_fill(p, n, seed);
  if (f->image_channel_data_type == CL_FLOAT)
    for (size_t i = 3; i < n; i += 4)
      p[i] &= 0x3f;
}

static cl_mem new_image(const image_case *c, const cl_image_format *f, unsigned seed) {
  cl_image_desc d;
  memset(&d, 0, sizeof d);
  d.image_type = c->type;
  d.image_width = c->dim[0];
  if (c->type == CL_MEM_OBJECT_IMAGE1D_ARRAY) {
    d.image_array_size = c->dim[1];
  } else {
    d.image_height = c->type == CL_MEM_OBJECT_IMAGE1D ? 0 : c->dim[1];
    if (c->type == CL_MEM_OBJECT_IMAGE2D_ARRAY)
      d.image_array_size = c->dim[2];
    else if (c->type == CL_MEM_OBJECT_IMAGE3D)
      d.image_depth = c->dim[2];
  }
  cl_int err;
  cl_mem m = clCreateImage(cl.ctx, CL_MEM_READ_WRITE, f, &d, NULL, &err);
  CL_OK(err);
  size_t elem = elem_size(f), n = image_bytes(c, elem);
  unsigned char *p = malloc(n);
  fill_pixels(p, n, seed, f);
  size_t o[3] = {0, 0, 0}, r[3] = {c->dim[0], c->dim[1], c->dim[2]};
  CL_OK(clEnqueueWriteImage(cl.queue, m, CL_TRUE, o, r, 0, 0, p, 0, NULL, NULL));
  free(p);
  return m;
}

static void read_image_whole(cl_mem m, const image_case *c, void *p) {
  size_t o[3] = {0, 0, 0}, r[3] = {c->dim[0], c->dim[1], c->dim[2]};
  CL_OK(clEnqueueReadImage(cl.queue, m, CL_TRUE, o, r, 0, 0, p, 0, NULL, NULL));
}

static bool images_supported(void) {
  cl_bool yes = CL_FALSE;
  CL_OK(clGetDeviceInfo(cl.device, CL_DEVICE_IMAGE_SUPPORT, sizeof yes, &yes, NULL));
  return yes == CL_TRUE;
}

/* _i: image case. Every format the device supports for it, every way, in
 * both directions. CL_RGBA / CL_UNORM_INT8 is one every image device must
 * support: at least it runs. */
static void image_case_run(int ci, const way *ways, size_t nways) {
  ck_assert_msg(images_supported(), "the test device has no images");
  const image_case *c = &images[ci];
  int ran = 0;
  for (size_t fi = 0; fi < NFORMATS; fi++) {
    const cl_image_format *f = &formats[fi];
    if (!format_supported(c->type, f))
      continue;
    size_t elem = elem_size(f), in = image_bytes(c, elem), hn = image_extent(c, elem) + 3;
    size_t pk = c->region[0] * elem * c->region[1] * c->region[2];
    for (size_t k = 0; k < nways; k++) {
      way w = ways[k];
      /* Write. */
      unsigned char *src = host_get(w, hn), *want = malloc(in), *got = malloc(in);
      fill_pixels(src, hn, (unsigned)(fi * 10 + w), f);
      cl_mem ref = new_image(c, f, 5), dut = new_image(c, f, 5);
      CL_OK(clEnqueueWriteImage(cl.queue, ref, CL_TRUE, c->origin, c->region, c->rp, c->sp, src, 0,
                                NULL, NULL));
      clpin_stats before = stats_now();
      cl_event ev = NULL;
      CL_OK(clpin_write_image(cl.queue, dut, c->origin, c->region, c->rp, c->sp, src, way_flags(w),
                              0, NULL, &ev));
      settle(w, ev);
      read_image_whole(ref, c, want);
      read_image_whole(dut, c, got);
      ck_assert_msg(memcmp(want, got, in) == 0, "image case %d, format %zu, %s: write differs", ci,
                    fi, way_names[w]);
      assert_path_of(w, false, &before, pk, unstaged_image(c, elem), unstaged_image(c, elem));
      /* Read, from the image just written. */
      unsigned char *rwant = malloc(hn), *rgot = host_get(w, hn);
      test_fill(rwant, hn, 11);
      test_fill(rgot, hn, 11);
      CL_OK(clEnqueueReadImage(cl.queue, ref, CL_TRUE, c->origin, c->region, c->rp, c->sp, rwant, 0,
                               NULL, NULL));
      before = stats_now();
      ev = NULL;
      CL_OK(clpin_read_image(cl.queue, ref, c->origin, c->region, c->rp, c->sp, rgot, way_flags(w),
                             0, NULL, &ev));
      settle(w, ev);
      ck_assert_msg(memcmp(rwant, rgot, hn) == 0, "image case %d, format %zu, %s: read differs", ci,
                    fi, way_names[w]);
      assert_path_of(w, true, &before, pk, unstaged_image(c, elem), unstaged_image(c, elem));
      clReleaseMemObject(ref);
      clReleaseMemObject(dut);
      host_free(w, src);
      host_free(w, rgot);
      free(want);
      free(got);
      free(rwant);
    }
    ran++;
  }
  ck_assert_msg(ran >= 1, "image case %d: no format of the list supported", ci);
}

/* _i: image case. */
START_TEST(images_match_driver) {
  image_case_run(_i, blocking_ways, sizeof blocking_ways / sizeof blocking_ways[0]);
}
END_TEST

START_TEST(images_match_driver_non_blocking) { image_case_run(_i, engine_ways, 1); }
END_TEST

/* ---- non-blocking ---------------------------------------------------------------- */

static const rect_case gated_case = {{1, 2, 1}, {0, 1, 0}, {700, 40, 3}, 0, 0, 720, 0};

/* A non-blocking staged rect write and read behind a user event return at
 * once, have moved nothing while the gate is shut, and deliver once it
 * opens. */
START_TEST(non_blocking_returns_early_and_delivers) {
  const rect_case *c = &gated_case;
  size_t dn = rect_extent(c->bo, c->region, c->brp, c->bsp);
  size_t hn = rect_extent(c->ho, c->region, c->hrp, c->hsp);
  unsigned char *src = malloc(hn), *want = malloc(dn), *got = malloc(dn);
  unsigned char *rd = malloc(hn), *rwant = malloc(hn);
  test_fill(src, hn, 21);
  cl_mem ref = filled_buffer(dn, 1), dut = filled_buffer(dn, 1);
  CL_OK(clEnqueueWriteBufferRect(cl.queue, ref, CL_TRUE, c->bo, c->ho, c->region, c->brp, c->bsp,
                                 c->hrp, c->hsp, src, 0, NULL, NULL));
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err);
  CL_OK(err);
  cl_event wev = NULL, rev = NULL;
  CL_OK(clpin_write_rect(cl.queue, dut, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp, c->hsp,
                         src, PIN | NB, 1, &gate, &wev));
  memset(rd, 0xa5, hn);
  memcpy(rwant, rd, hn);
  CL_OK(clpin_read_rect(cl.queue, dut, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp, c->hsp, rd,
                        PIN | NB, 1, &wev, &rev));
  cl_int st = CL_COMPLETE;
  CL_OK(clGetEventInfo(wev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  ck_assert_int_gt(st, CL_COMPLETE);
  /* Nothing read while the gate is shut. */
  ck_assert_int_eq(memcmp(rd, rwant, hn), 0);
  CL_OK(clSetUserEventStatus(gate, CL_COMPLETE));
  CL_OK(clWaitForEvents(1, &rev));
  read_whole(ref, dn, want);
  read_whole(dut, dn, got);
  ck_assert_int_eq(memcmp(want, got, dn), 0);
  CL_OK(clEnqueueReadBufferRect(cl.queue, ref, CL_TRUE, c->bo, c->ho, c->region, c->brp, c->bsp,
                                c->hrp, c->hsp, rwant, 0, NULL, NULL));
  ck_assert_int_eq(memcmp(rd, rwant, hn), 0);
  clReleaseEvent(wev);
  clReleaseEvent(rev);
  clReleaseEvent(gate);
  clReleaseMemObject(ref);
  clReleaseMemObject(dut);
  free(src);
  free(want);
  free(got);
  free(rd);
  free(rwant);
}
END_TEST

/* A streamed read large enough that each chunk's scatter is split among
 * four copy threads, in shares that start and end inside rows (4097-byte
 * rows, shares of whole pages): byte-exact against the driver's own call,
 * the gaps between rows untouched, in three rounds. _i: 0 blocking, 1
 * non-blocking (the engine). */
START_TEST(streamed_read_split_among_threads) {
  CL_OK(clpin_set_option(CLPIN_OPT_STREAM_MIN, 0));
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, (size_t)2 << 20));
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, 4));
  const size_t bo[3] = {3, 1, 0}, ho[3] = {5, 2, 0}, region[3] = {4097, 1100, 1};
  const size_t brp = 4100, hrp = 4097 + 77;
  size_t dn = rect_extent(bo, region, brp, 0), hn = rect_extent(ho, region, hrp, 0) + 64;
  cl_mem m = filled_buffer(dn, 41);
  unsigned char *got = malloc(hn), *want = malloc(hn);
  ck_assert(got && want);
  for (int round = 0; round < 3; round++) {
    memset(want, 0x5a + round, hn);
    memcpy(got, want, hn);
    CL_OK(clEnqueueReadBufferRect(cl.queue, m, CL_TRUE, bo, ho, region, brp, 0, hrp, 0, want, 0,
                                  NULL, NULL));
    clpin_stats before = test_stats(pool);
    cl_event ev = NULL;
    CL_OK(clpin_read_rect(cl.queue, m, bo, ho, region, brp, 0, hrp, 0, got, _i ? PIN | NB : PIN, 0,
                          NULL, _i ? &ev : NULL));
    if (ev) {
      CL_OK(clWaitForEvents(1, &ev));
      clReleaseEvent(ev);
    }
    clpin_stats after = test_stats(pool);
    ck_assert_uint_eq(after.bytes_pipelined - before.bytes_pipelined, packed(region));
    for (size_t i = 0; i < hn; i++)
      if (got[i] != want[i])
        ck_abort_msg("round %d, %s: host byte %zu is %u, not %u", round,
                     _i ? "non-blocking" : "blocking", i, got[i], want[i]);
  }
  clReleaseMemObject(m);
  free(got);
  free(want);
}
END_TEST

/* A wait list that has already failed refuses the call; one that fails
 * after a non-blocking call fails its event and moves nothing. */
START_TEST(failed_wait_lists) {
  const rect_case *c = &gated_case;
  size_t dn = rect_extent(c->bo, c->region, c->brp, c->bsp);
  size_t hn = rect_extent(c->ho, c->region, c->hrp, c->hsp);
  unsigned char *src = malloc(hn), *before = malloc(dn), *after = malloc(dn);
  test_fill(src, hn, 31);
  cl_mem dut = filled_buffer(dn, 2);
  read_whole(dut, dn, before);
  cl_int err;
  cl_event failed = clCreateUserEvent(cl.ctx, &err);
  CL_OK(err);
  CL_OK(clSetUserEventStatus(failed, -1));
  for (unsigned flags = 0; flags < 4; flags++)
    ck_assert_int_eq(clpin_write_rect(cl.queue, dut, c->bo, c->ho, c->region, c->brp, c->bsp,
                                      c->hrp, c->hsp, src, flags | PIN, 1, &failed, NULL),
                     CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
  cl_event gate = clCreateUserEvent(cl.ctx, &err), ev = NULL;
  CL_OK(err);
  /* A queue of its own: POCL never ends commands behind a failed event. */
  cl_command_queue q = clCreateCommandQueue(cl.ctx, cl.device, 0, &err);
  CL_OK(err);
  CL_OK(clpin_write_rect(q, dut, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp, c->hsp, src,
                         PIN | NB, 1, &gate, &ev));
  CL_OK(clSetUserEventStatus(gate, -1));
  ck_assert_int_ne(clWaitForEvents(1, &ev), CL_SUCCESS);
  cl_int st = CL_COMPLETE;
  CL_OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  ck_assert_int_lt(st, 0);
  read_whole(dut, dn, after);
  ck_assert_int_eq(memcmp(before, after, dn), 0);
  clReleaseEvent(ev);
  clReleaseEvent(gate);
  clReleaseEvent(failed);
  clReleaseCommandQueue(q);
  clReleaseMemObject(dut);
  free(src);
  free(before);
  free(after);
}
END_TEST

/* ---- argument errors ------------------------------------------------------------- */

START_TEST(rect_argument_errors) {
  cl_mem m = test_buffer(&cl, 4096);
  unsigned char host[8192];
  size_t z[3] = {0, 0, 0}, r[3] = {16, 16, 1}, r0[3] = {16, 0, 1}, big[3] = {64, 65, 1};
  size_t far[3] = {4090, 0, 0};
  cl_event null_ev = NULL;
#define W(...) clpin_write_rect(__VA_ARGS__)
  ck_assert_int_eq(W(NULL, m, z, z, r, 0, 0, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_COMMAND_QUEUE);
  ck_assert_int_eq(W(cl.queue, NULL, z, z, r, 0, 0, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_MEM_OBJECT);
  ck_assert_int_eq(W(cl.queue, m, z, z, r, 0, 0, 0, 0, NULL, PIN, 0, NULL, NULL), CL_INVALID_VALUE);
  ck_assert_int_eq(W(cl.queue, m, NULL, z, r, 0, 0, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
  ck_assert_int_eq(W(cl.queue, m, z, z, NULL, 0, 0, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
  ck_assert_int_eq(W(cl.queue, m, z, z, r0, 0, 0, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
  /* Row pitch below the region's width; slice pitch below rows x pitch or
   * not a multiple of it. */
  ck_assert_int_eq(W(cl.queue, m, z, z, r, 15, 0, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
  ck_assert_int_eq(W(cl.queue, m, z, z, r, 0, 0, 8, 0, host, PIN, 0, NULL, NULL), CL_INVALID_VALUE);
  ck_assert_int_eq(W(cl.queue, m, z, z, r, 16, 255, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
  ck_assert_int_eq(W(cl.queue, m, z, z, r, 16, 260, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
  ck_assert_int_eq(W(cl.queue, m, z, z, r, 0, 0, 16, 17 * 16 + 1, host, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
  /* Out of the buffer's bounds. */
  ck_assert_int_eq(W(cl.queue, m, z, z, big, 0, 0, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
  ck_assert_int_eq(W(cl.queue, m, far, z, r, 0, 0, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
  size_t huge[3] = {SIZE_MAX / 2, 0, 0};
  ck_assert_int_eq(W(cl.queue, m, huge, z, r, 0, 0, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
  /* Wait list, flags. */
  ck_assert_int_eq(W(cl.queue, m, z, z, r, 0, 0, 0, 0, host, PIN, 1, NULL, NULL),
                   CL_INVALID_EVENT_WAIT_LIST);
  ck_assert_int_eq(W(cl.queue, m, z, z, r, 0, 0, 0, 0, host, PIN, 1, &null_ev, NULL),
                   CL_INVALID_EVENT_WAIT_LIST);
  ck_assert_int_eq(W(cl.queue, m, z, z, r, 0, 0, 0, 0, host, 1u << 7, 0, NULL, NULL),
                   CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_read_rect(cl.queue, m, z, z, big, 0, 0, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
#undef W
  /* An image is not a buffer, a buffer not an image. */
  ck_assert_int_eq(
      clpin_write_image(cl.queue, m, z, (size_t[3]){4, 1, 1}, 0, 0, host, PIN, 0, NULL, NULL),
      CL_INVALID_MEM_OBJECT);
  /* The buffer is untouched by every refused call. */
  unsigned char back[4096];
  memset(host, 0x5a, sizeof host);
  CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, 4096, host, 0, NULL, NULL));
  ck_assert_int_eq(clpin_write_rect(cl.queue, m, z, z, r, 0, 0, 0, 7, host, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
  read_whole(m, 4096, back);
  ck_assert_int_eq(memcmp(back, host, 4096), 0);
  clReleaseMemObject(m);
}
END_TEST

START_TEST(image_argument_errors) {
  ck_assert_msg(images_supported(), "the test device has no images");
  const image_case *c2 = &images[3]; /* 2D 64 x 64 */
  cl_image_format f = {CL_RGBA, CL_UNORM_INT8};
  cl_mem img = new_image(c2, &f, 1);
  cl_mem buf = test_buffer(&cl, 4096);
  unsigned char *host = malloc(64 * 64 * 4 * 2);
  size_t z[3] = {0, 0, 0}, r[3] = {8, 8, 1};
#define WI(o, reg, rp, sp)                                                                         \
  clpin_write_image(cl.queue, img, o, reg, rp, sp, host, PIN, 0, NULL, NULL)
  ck_assert_int_eq(WI(NULL, r, 0, 0), CL_INVALID_VALUE);
  ck_assert_int_eq(WI(z, NULL, 0, 0), CL_INVALID_VALUE);
  ck_assert_int_eq(WI(z, ((size_t[3]){8, 0, 1}), 0, 0), CL_INVALID_VALUE);
  /* 2D: depth must be 1, origin[2] 0, slice pitch 0. */
  ck_assert_int_eq(WI(z, ((size_t[3]){8, 8, 2}), 0, 0), CL_INVALID_VALUE);
  ck_assert_int_eq(WI(((size_t[3]){0, 0, 1}), r, 0, 0), CL_INVALID_VALUE);
  ck_assert_int_eq(WI(z, r, 0, 8 * 8 * 4), CL_INVALID_VALUE);
  /* Out of bounds, row pitch too small. */
  ck_assert_int_eq(WI(((size_t[3]){60, 0, 0}), r, 0, 0), CL_INVALID_VALUE);
  ck_assert_int_eq(WI(((size_t[3]){0, 57, 0}), r, 0, 0), CL_INVALID_VALUE);
  ck_assert_int_eq(WI(z, r, 31, 0), CL_INVALID_VALUE);
#undef WI
  ck_assert_int_eq(clpin_read_image(cl.queue, buf, z, r, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_MEM_OBJECT);
  ck_assert_int_eq(clpin_read_image(cl.queue, img, z, r, 0, 0, NULL, PIN, 0, NULL, NULL),
                   CL_INVALID_VALUE);
  ck_assert_int_eq(clpin_read_rect(cl.queue, img, z, z, r, 0, 0, 0, 0, host, PIN, 0, NULL, NULL),
                   CL_INVALID_MEM_OBJECT);
  clReleaseMemObject(img);
  clReleaseMemObject(buf);
  free(host);
}
END_TEST

/* Below the staging minimum a CLPIN_PIN_MEMORY rect or image write is the
 * driver's own call, byte-exact whatever the memory: a blocking one without
 * a wait list goes there without finding its pool (rect.c, small_write: no
 * counter moves); a non-blocking one is counted, unpinned or, from pool
 * memory, pinned direct; _i: bit 0 image, bit 1 pool memory. */
START_TEST(small_takes_the_plain_call) {
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, (size_t)1 << 20));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, (size_t)1 << 20));
  bool img = _i & 1;
  way w = _i & 2 ? WAY_POOL : WAY_STAGED;
  const rect_case *c = &rects[3];
  const image_case *ic = &images[4];
  cl_image_format f = {CL_RGBA, CL_UNORM_INT8};
  size_t dn = img ? image_bytes(ic, 4) : rect_extent(c->bo, c->region, c->brp, c->bsp);
  size_t hn = img ? image_extent(ic, 4) : rect_extent(c->ho, c->region, c->hrp, c->hsp);
  size_t pk = img ? ic->region[0] * 4 * ic->region[1] : packed(c->region);
  cl_mem ref = img ? new_image(ic, &f, 8) : filled_buffer(dn, 8);
  cl_mem dut = img ? new_image(ic, &f, 8) : filled_buffer(dn, 8);
  unsigned char *src = host_get(w, hn), *want = malloc(dn), *got = malloc(dn);
  test_fill(src, hn, 12);
  clpin_stats before = stats_now();
  if (img) {
    CL_OK(clEnqueueWriteImage(cl.queue, ref, CL_TRUE, ic->origin, ic->region, ic->rp, ic->sp, src,
                              0, NULL, NULL));
    CL_OK(clpin_write_image(cl.queue, dut, ic->origin, ic->region, ic->rp, ic->sp, src, PIN, 0,
                            NULL, NULL));
    read_image_whole(ref, ic, want);
    read_image_whole(dut, ic, got);
  } else {
    CL_OK(clEnqueueWriteBufferRect(cl.queue, ref, CL_TRUE, c->bo, c->ho, c->region, c->brp, c->bsp,
                                   c->hrp, c->hsp, src, 0, NULL, NULL));
    CL_OK(clpin_write_rect(cl.queue, dut, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp, c->hsp,
                           src, PIN, 0, NULL, NULL));
    read_whole(ref, dn, want);
    read_whole(dut, dn, got);
  }
  ck_assert_int_eq(memcmp(want, got, dn), 0);
  clpin_stats after = stats_now();
  ck_assert_uint_eq(after.bytes_pinned_direct + after.bytes_unpinned + after.bytes_staged +
                        after.bytes_pipelined,
                    before.bytes_pinned_direct + before.bytes_unpinned + before.bytes_staged +
                        before.bytes_pipelined);
  /* The same write non-blocking: counted, and delivered. */
  test_fill(src, hn, 13);
  cl_event ev = NULL;
  if (img) {
    CL_OK(clEnqueueWriteImage(cl.queue, ref, CL_TRUE, ic->origin, ic->region, ic->rp, ic->sp, src,
                              0, NULL, NULL));
    CL_OK(clpin_write_image(cl.queue, dut, ic->origin, ic->region, ic->rp, ic->sp, src, PIN | NB, 0,
                            NULL, &ev));
    CL_OK(clWaitForEvents(1, &ev));
    read_image_whole(ref, ic, want);
    read_image_whole(dut, ic, got);
  } else {
    CL_OK(clEnqueueWriteBufferRect(cl.queue, ref, CL_TRUE, c->bo, c->ho, c->region, c->brp, c->bsp,
                                   c->hrp, c->hsp, src, 0, NULL, NULL));
    CL_OK(clpin_write_rect(cl.queue, dut, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp, c->hsp,
                           src, PIN | NB, 0, NULL, &ev));
    CL_OK(clWaitForEvents(1, &ev));
    read_whole(ref, dn, want);
    read_whole(dut, dn, got);
  }
  clReleaseEvent(ev);
  ck_assert_int_eq(memcmp(want, got, dn), 0);
  before = after;
  after = stats_now();
  if (w == WAY_POOL)
    ck_assert_uint_eq(after.bytes_pinned_direct - before.bytes_pinned_direct, pk);
  else
    ck_assert_uint_eq(after.bytes_unpinned - before.bytes_unpinned, pk);
  ck_assert_uint_eq(after.bytes_staged + after.bytes_pipelined,
                    before.bytes_staged + before.bytes_pipelined);
  clReleaseMemObject(ref);
  clReleaseMemObject(dut);
  host_free(w, src);
  free(want);
  free(got);
}
END_TEST

/* A small blocking write skips finding its pool only while no memory is
 * handed to a device: from a pool block handed over it is refused
 * (CLPIN_ERR_ON_DEVICE, nothing written), and once the block is back it
 * goes, byte-exact; _i: bit 0 image. */
START_TEST(small_write_of_memory_on_the_device) {
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, (size_t)1 << 20));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, (size_t)1 << 20));
  bool img = _i & 1;
  const size_t o[3] = {0, 0, 0}, r[3] = {16, 4, 1}, n = 16 * 4 * 4;
  cl_image_format f = {CL_RGBA, CL_UNORM_INT8};
  cl_image_desc d = {.image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = 16, .image_height = 4};
  cl_int e;
  cl_mem m = img ? clCreateImage(cl.ctx, CL_MEM_READ_WRITE, &f, &d, NULL, &e)
                 : clCreateBuffer(cl.ctx, CL_MEM_READ_WRITE, n, NULL, &e);
  CL_OK(e);
  unsigned char *zeros = calloc(1, n), *got = malloc(n);
  unsigned char *h = clpin_host_alloc(pool, n);
  ck_assert_ptr_nonnull(h);
  ck_assert_ptr_nonnull(zeros);
  ck_assert_ptr_nonnull(got);
  if (img)
    CL_OK(clEnqueueWriteImage(cl.queue, m, CL_TRUE, o, (size_t[3]){16, 4, 1}, 0, 0, zeros, 0, NULL,
                              NULL));
  else
    CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, n, zeros, 0, NULL, NULL));
  test_fill(h, n, 21);
  size_t rect_r[3] = {r[0] * 4, r[1], 1};
  CL_OK(clpin_host_lend(cl.queue, h, n, 0, NULL, NULL));
  cl_int got_err =
      img ? clpin_write_image(cl.queue, m, o, r, 0, 0, h, PIN, 0, NULL, NULL)
          : clpin_write_rect(cl.queue, m, o, o, rect_r, 0, 0, 0, 0, h, PIN, 0, NULL, NULL);
  ck_assert_int_eq(got_err, CLPIN_ERR_ON_DEVICE);
  CL_OK(clpin_host_reclaim(cl.queue, h, n, 0, 0, NULL, NULL));
  if (img)
    CL_OK(clEnqueueReadImage(cl.queue, m, CL_TRUE, o, r, 0, 0, got, 0, NULL, NULL));
  else
    CL_OK(clEnqueueReadBuffer(cl.queue, m, CL_TRUE, 0, n, got, 0, NULL, NULL));
  ck_assert_int_eq(memcmp(got, zeros, n), 0);
  clpin_stats before = stats_now();
  CL_OK(img ? clpin_write_image(cl.queue, m, o, r, 0, 0, h, PIN, 0, NULL, NULL)
            : clpin_write_rect(cl.queue, m, o, o, rect_r, 0, 0, 0, 0, h, PIN, 0, NULL, NULL));
  clpin_stats after = stats_now();
  ck_assert_uint_eq(after.bytes_pinned_direct, before.bytes_pinned_direct);
  if (img)
    CL_OK(clEnqueueReadImage(cl.queue, m, CL_TRUE, o, r, 0, 0, got, 0, NULL, NULL));
  else
    CL_OK(clEnqueueReadBuffer(cl.queue, m, CL_TRUE, 0, n, got, 0, NULL, NULL));
  ck_assert_uint_eq(test_check(got, n, 21), (size_t)-1);
  CL_OK(clpin_host_free(h));
  clReleaseMemObject(m);
  free(zeros);
  free(got);
}
END_TEST

/* The pool holds nothing in use after all of it. */
START_TEST(pool_idle_after_rects) {
  const rect_case *c = &rects[6];
  size_t hn = rect_extent(c->ho, c->region, c->hrp, c->hsp);
  size_t dn = rect_extent(c->bo, c->region, c->brp, c->bsp);
  unsigned char *src = malloc(hn);
  test_fill(src, hn, 1);
  cl_mem m = test_buffer(&cl, dn);
  cl_event evs[8];
  for (int i = 0; i < 8; i++)
    CL_OK(clpin_write_rect(cl.queue, m, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp, c->hsp,
                           src, PIN | NB, 0, NULL, &evs[i]));
  CL_OK(clWaitForEvents(8, evs));
  for (int i = 0; i < 8; i++)
    clReleaseEvent(evs[i]);
  clpin_stats s = stats_now();
  ck_assert_uint_eq(s.blocks_in_use, 0);
  test_assert_balanced(&s);
  clReleaseMemObject(m);
  free(src);
}
END_TEST

/* ---- under the fault layer (tests/faultlayer/) ------------------------------------ */

static void need_fault_layer(void) {
  ck_assert_msg(faultlayer_active(), "the fault layer is not loaded: is OPENCL_LAYERS set to "
                                     "libclpin_faultlayer.so?");
}

/* _i: bit 0 read, bit 1 image, bit 2 non-blocking. Every clCreateBuffer
 * fails as out of memory: the pool cannot stage, the transfer falls back
 * to the driver's own call, byte-exact, counted in fallbacks. */
START_TEST(fallback_when_pool_cannot_allocate) {
  need_fault_layer();
  bool read = _i & 1, img = _i & 2;
  unsigned flags = PIN | (_i & 4 && threads_ok() ? NB : 0);
  const rect_case *c = &rects[5];    /* 300 rows: a pipeline of chunks */
  const image_case *ic = &images[6]; /* a 2D array: chunks cross its layers */
  cl_image_format f = {CL_RGBA, CL_UNORM_INT8};
  size_t dn = img ? image_bytes(ic, 4) : rect_extent(c->bo, c->region, c->brp, c->bsp);
  size_t hn = img ? image_extent(ic, 4) : rect_extent(c->ho, c->region, c->hrp, c->hsp);
  size_t pk = img ? ic->region[0] * 4 * ic->region[1] * ic->region[2] : packed(c->region);
  cl_mem ref = img ? new_image(ic, &f, 3) : filled_buffer(dn, 3);
  cl_mem dut = img ? new_image(ic, &f, 3) : filled_buffer(dn, 3);
  unsigned char *host = malloc(hn), *want = malloc(hn > dn ? hn : dn),
                *got = malloc(hn > dn ? hn : dn);
  test_fill(host, hn, 60 + (unsigned)_i);
  memcpy(want, host, hn);
  faultlayer_arm(faultlayer_entry_index("clCreateBuffer"), 1, 0, CL_MEM_OBJECT_ALLOCATION_FAILURE);
  clpin_stats before = stats_now();
  cl_event ev = NULL;
  if (img && read)
    CL_OK(clpin_read_image(cl.queue, ref, ic->origin, ic->region, ic->rp, ic->sp, host, flags, 0,
                           NULL, &ev));
  else if (img)
    CL_OK(clpin_write_image(cl.queue, dut, ic->origin, ic->region, ic->rp, ic->sp, host, flags, 0,
                            NULL, &ev));
  else if (read)
    CL_OK(clpin_read_rect(cl.queue, ref, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp, c->hsp,
                          host, flags, 0, NULL, &ev));
  else
    CL_OK(clpin_write_rect(cl.queue, dut, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp, c->hsp,
                           host, flags, 0, NULL, &ev));
  if (ev) {
    CL_OK(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
  }
  faultlayer_disarm();
  clpin_stats after = stats_now();
  ck_assert_uint_eq(after.fallbacks - before.fallbacks, 1);
  ck_assert_uint_eq(after.bytes_unpinned - before.bytes_unpinned, pk);
  test_assert_balanced(&after);
  if (read) {
    /* The driver's own read of the same region into the same background. */
    if (img)
      CL_OK(clEnqueueReadImage(cl.queue, ref, CL_TRUE, ic->origin, ic->region, ic->rp, ic->sp, want,
                               0, NULL, NULL));
    else
      CL_OK(clEnqueueReadBufferRect(cl.queue, ref, CL_TRUE, c->bo, c->ho, c->region, c->brp, c->bsp,
                                    c->hrp, c->hsp, want, 0, NULL, NULL));
    ck_assert_int_eq(memcmp(want, host, hn), 0);
  } else {
    if (img) {
      CL_OK(clEnqueueWriteImage(cl.queue, ref, CL_TRUE, ic->origin, ic->region, ic->rp, ic->sp,
                                host, 0, NULL, NULL));
      read_image_whole(ref, ic, want);
      read_image_whole(dut, ic, got);
    } else {
      CL_OK(clEnqueueWriteBufferRect(cl.queue, ref, CL_TRUE, c->bo, c->ho, c->region, c->brp,
                                     c->bsp, c->hrp, c->hsp, host, 0, NULL, NULL));
      read_whole(ref, dn, want);
      read_whole(dut, dn, got);
    }
    ck_assert_int_eq(memcmp(want, got, dn), 0);
  }
  clReleaseMemObject(ref);
  clReleaseMemObject(dut);
  free(host);
  free(want);
  free(got);
}
END_TEST

/* _i: bit 0 read, bit 1 image, bit 2 non-blocking. The device-side call of
 * the third chunk fails: the call (or its event) reports the driver's code,
 * every staging block goes back to the pool, and the next transfer works. */
START_TEST(chunk_call_fails) {
  need_fault_layer();
  bool read = _i & 1, img = _i & 2, nb = _i & 4 && threads_ok();
  const rect_case *c = &rects[5];    /* 300 rows of 1000 bytes: many chunks */
  const image_case *ic = &images[4]; /* 61 rows of 404 bytes: many chunks */
  cl_image_format f = {CL_RGBA, CL_UNORM_INT8};
  size_t dn = img ? image_bytes(ic, 4) : rect_extent(c->bo, c->region, c->brp, c->bsp);
  size_t hn = img ? image_extent(ic, 4) : rect_extent(c->ho, c->region, c->hrp, c->hsp);
  cl_mem m = img ? new_image(ic, &f, 3) : filled_buffer(dn, 3);
  unsigned char *host = malloc(hn);
  test_fill(host, hn, 70);
  const char *entry = img ? (read ? "clEnqueueReadImage" : "clEnqueueWriteImage")
                          : (read ? "clEnqueueReadBufferRect" : "clEnqueueWriteBufferRect");
  unsigned flags = PIN | (nb ? NB : 0);
#define CALL(evp)                                                                                  \
  (img ? (read ? clpin_read_image(cl.queue, m, ic->origin, ic->region, ic->rp, ic->sp, host,       \
                                  flags, 0, NULL, evp)                                             \
               : clpin_write_image(cl.queue, m, ic->origin, ic->region, ic->rp, ic->sp, host,      \
                                   flags, 0, NULL, evp))                                           \
       : (read ? clpin_read_rect(cl.queue, m, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp,     \
                                 c->hsp, host, flags, 0, NULL, evp)                                \
               : clpin_write_rect(cl.queue, m, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp,    \
                                  c->hsp, host, flags, 0, NULL, evp)))
  faultlayer_arm(faultlayer_entry_index(entry), 3, 1, CL_OUT_OF_RESOURCES);
  cl_event ev = NULL;
  cl_int err = CALL(&ev);
  if (nb) {
    CL_OK(err);
    ck_assert_int_ne(clWaitForEvents(1, &ev), CL_SUCCESS);
    cl_int st = CL_COMPLETE;
    CL_OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
    ck_assert_int_lt(st, 0);
    clReleaseEvent(ev);
  } else {
    ck_assert_int_eq(err, CL_OUT_OF_RESOURCES);
    ck_assert_ptr_null(ev);
  }
  ck_assert_uint_eq(faultlayer_fired(), 1);
  faultlayer_disarm();
  clpin_stats s = stats_now();
  ck_assert_uint_eq(s.blocks_in_use, 0);
  test_assert_balanced(&s);
  /* Nothing is stuck: the same transfer goes through now. */
  ev = NULL;
  CL_OK(CALL(&ev));
#undef CALL
  if (ev) {
    CL_OK(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
  }
  clReleaseMemObject(m);
  free(host);
}
END_TEST

/* A small read through one pool block (staging.c, small_read) under
 * faults; _i: bit 0 image, bit 1 the pool cannot allocate (else the
 * driver's call into the block fails). No block: the driver's own call,
 * counted as a fallback, byte-exact. A failed call: its code, the block
 * back in the pool, and the same read goes through after. */
START_TEST(small_read_faults) {
  need_fault_layer();
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, SIZE_MAX));
  bool img = _i & 1, no_block = _i & 2;
  const rect_case *c = &rects[3];    /* 33 x 17 x 9, every pitch wider */
  const image_case *ic = &images[4]; /* a 2D region at an offset */
  cl_image_format f = {CL_RGBA, CL_UNORM_INT8};
  size_t dn = img ? image_bytes(ic, 4) : rect_extent(c->bo, c->region, c->brp, c->bsp);
  size_t hn = img ? image_extent(ic, 4) : rect_extent(c->ho, c->region, c->hrp, c->hsp);
  size_t pk = img ? ic->region[0] * 4 * ic->region[1] : packed(c->region);
  cl_mem m = img ? new_image(ic, &f, 3) : filled_buffer(dn, 3);
  unsigned char *want = malloc(hn), *got = malloc(hn);
  test_fill(want, hn, 71);
  test_fill(got, hn, 71);
  if (img)
    CL_OK(clEnqueueReadImage(cl.queue, m, CL_TRUE, ic->origin, ic->region, ic->rp, ic->sp, want, 0,
                             NULL, NULL));
  else
    CL_OK(clEnqueueReadBufferRect(cl.queue, m, CL_TRUE, c->bo, c->ho, c->region, c->brp, c->bsp,
                                  c->hrp, c->hsp, want, 0, NULL, NULL));
#define CALL()                                                                                     \
  (img ? clpin_read_image(cl.queue, m, ic->origin, ic->region, ic->rp, ic->sp, got, PIN, 0, NULL,  \
                          NULL)                                                                    \
       : clpin_read_rect(cl.queue, m, c->bo, c->ho, c->region, c->brp, c->bsp, c->hrp, c->hsp,     \
                         got, PIN, 0, NULL, NULL))
  clpin_stats before = stats_now();
  const char *entry = no_block ? "clCreateBuffer"
                      : img    ? "clEnqueueReadImage"
                               : "clEnqueueReadBufferRect";
  faultlayer_arm(faultlayer_entry_index(entry), 1, no_block ? 0 : 1,
                 no_block ? CL_MEM_OBJECT_ALLOCATION_FAILURE : CL_OUT_OF_RESOURCES);
  cl_int err = CALL();
  unsigned long fired = faultlayer_fired();
  faultlayer_disarm();
  ck_assert_uint_ge(fired, 1);
  clpin_stats s = stats_now();
  ck_assert_uint_eq(s.blocks_in_use, 0);
  test_assert_balanced(&s);
  if (no_block) {
    CL_OK(err);
    ck_assert_uint_eq(s.fallbacks - before.fallbacks, 1);
    ck_assert_uint_eq(s.bytes_unpinned - before.bytes_unpinned, pk);
    ck_assert_int_eq(memcmp(want, got, hn), 0);
  } else {
    ck_assert_int_eq(err, CL_OUT_OF_RESOURCES);
    ck_assert_uint_eq(s.bytes_staged, before.bytes_staged);
  }
  /* Memory back, the call working: one pool block, byte-exact. */
  test_fill(got, hn, 71);
  CL_OK(CALL());
#undef CALL
  clpin_stats after = stats_now();
  ck_assert_uint_eq(after.bytes_staged - s.bytes_staged, pk);
  ck_assert_int_eq(memcmp(want, got, hn), 0);
  test_assert_balanced(&after);
  clReleaseMemObject(m);
  free(want);
  free(got);
}
END_TEST

static Suite *rect_suite(void) {
  Suite *s = suite_create("rect");
  TCase *exact = tcase_create("exact");
  tcase_add_checked_fixture(exact, setup_streaming, teardown);
  tcase_set_timeout(exact, 600);
  tcase_add_loop_test(exact, rects_match_driver, 0, (int)NRECTS);
  tcase_add_loop_test(exact, images_match_driver, 0, (int)NIMAGES);
  tcase_add_loop_test(exact, rects_at_the_buffers_end, 0, (int)NRECTS);
  tcase_add_test(exact, driver_room_splits_the_cases);
  suite_add_tcase(s, exact);
  TCase *small = tcase_create("small");
  tcase_add_checked_fixture(small, setup_small, teardown);
  tcase_set_timeout(small, 600);
  tcase_add_loop_test(small, rects_match_driver, 0, (int)NRECTS);
  tcase_add_loop_test(small, images_match_driver, 0, (int)NIMAGES);
  tcase_add_loop_test(small, rects_at_the_buffers_end, 0, (int)NRECTS);
  suite_add_tcase(s, small);
  TCase *errors = tcase_create("errors");
  tcase_add_checked_fixture(errors, setup, teardown);
  tcase_add_test(errors, rect_argument_errors);
  tcase_add_test(errors, image_argument_errors);
  tcase_add_loop_test(errors, small_takes_the_plain_call, 0, 4);
  suite_add_tcase(s, errors);
  /* Memory handed to the device (clpin_host_lend): a zero-copy
   * device's (POCL; Oclgrind with CLPIN__TEST_UNIFIED, ci/stages/30). */
  TCase *handoff = tcase_create("handoff");
  tcase_add_checked_fixture(handoff, setup, teardown);
  tcase_add_loop_test(handoff, small_write_of_memory_on_the_device, 0, 2);
  suite_add_tcase(s, handoff);
  TCase *nb = tcase_create("nonblocking");
  tcase_add_checked_fixture(nb, setup, teardown);
  tcase_set_timeout(nb, 600);
  tcase_add_loop_test(nb, rects_match_driver_non_blocking, 0, (int)NRECTS);
  tcase_add_loop_test(nb, images_match_driver_non_blocking, 0, (int)NIMAGES);
  tcase_add_test(nb, non_blocking_returns_early_and_delivers);
  tcase_add_test(nb, failed_wait_lists);
  tcase_add_test(nb, pool_idle_after_rects);
  tcase_add_loop_test(nb, streamed_read_split_among_threads, 0, 2);
  suite_add_tcase(s, nb);
  /* Needs OPENCL_LAYERS=libclpin_faultlayer.so: CTest's check_rect_faults
   * runs this case alone, check_rect the rest. */
  TCase *faults = tcase_create("faults");
  tcase_set_tags(faults, "fallback");
  tcase_add_checked_fixture(faults, setup, teardown);
  tcase_add_loop_test(faults, fallback_when_pool_cannot_allocate, 0, 8);
  tcase_add_loop_test(faults, chunk_call_fails, 0, 8);
  tcase_add_loop_test(faults, small_read_faults, 0, 4);
  suite_add_tcase(s, faults);
  return s;
}

int main(void) {
  /* Run by hand, leave out the case that needs the fault layer. */
  if (!getenv("CK_INCLUDE_TAGS") && !getenv("CK_EXCLUDE_TAGS"))
    setenv("CK_EXCLUDE_TAGS", "fallback", 1);
  return test_run_suite(rect_suite());
}
