/* SPDX-License-Identifier: Apache-2.0 */
/* Rect and image transfers: clpin_write_rect, clpin_read_rect,
 * clpin_write_image, clpin_read_image.
 *
 * They take the paths of clpin_write / clpin_read (staging.c): memory in a
 * pool block or a registration (the enclosing byte span of the host region
 * decides) goes straight to DMA; pageable memory with CLPIN_PIN_MEMORY on a
 * discrete device is staged, its rows gathered into (or scattered out of)
 * pinned blocks on the copy threads while earlier chunks are in DMA; small
 * transfers and host-unified devices take the driver's plain call.
 *
 * A staged chunk is a range of whole rows, numbered slice by slice; its
 * device-side call is the driver's rect or image call on that range, from
 * packed memory. A range that crosses slices takes up to three calls (the
 * rest of a slice, whole slices, the start of one), ended by one marker.
 *
 * The arguments are checked here as OpenCL checks them, before anything is
 * enqueued, wherever the transfer may be staged or deferred: it must fail
 * at the call, as the driver's own would. A call that can only be the
 * driver's own (no CLPIN_PIN_MEMORY, or below the staging minimum) skips
 * the checks that query the object; the driver makes them (may_stage). */
#include "rect.h"
#include "handoff.h"
#include "staging.h"
#include "transfer.h"

#include <string.h>

/* ---- arguments -------------------------------------------------------------- */

/* The public call a check names: x's direction and kind. */
#define RECT_FN(x) ((x)->dir == CLPIN__H2D ? "clpin_write_rect" : "clpin_read_rect")
#define IMAGE_FN(x) ((x)->dir == CLPIN__H2D ? "clpin_write_image" : "clpin_read_image")
#define TOO_LARGE "the region, its pitches and origins overflow size_t"

/* a*b + c, false on overflow. */
static bool mul_add(size_t a, size_t b, size_t c, size_t *out) {
  size_t m;
  return !__builtin_mul_overflow(a, b, &m) && !__builtin_add_overflow(m, c, out);
}

/* The host side of a region of rows: rows x slices rows of row_bytes, row
 * r of slice z at base + r*row_step + z*slice_step. Sets packed size and
 * span; CL_INVALID_VALUE on overflow. */
static cl_int host_layout(const char *fn, clpin__shape *s, size_t slices, size_t *nbytes) {
  size_t last = 0, packed = 0;
  CLPIN__CHECK_IN(fn,
                  !mul_add(slices - 1, s->host_slice_step, 0, &last) ||
                      !mul_add(s->rows - 1, s->host_row_step, last, &last) ||
                      !mul_add(1, s->row_bytes, last, &s->span) ||
                      __builtin_add_overflow(s->host_base, s->span, &last) ||
                      !mul_add(s->row_bytes, s->rows, 0, &packed) ||
                      !mul_add(packed, slices, 0, nbytes),
                  CL_INVALID_VALUE, "the host side: %s", TOO_LARGE);
  return CL_SUCCESS;
}

static cl_int check_common(const char *fn, cl_command_queue q, cl_mem mem, const void *host,
                           unsigned flags, cl_uint num_wait, const cl_event *wait_list) {
  CLPIN__CHECK_IN(fn, clpin__forked(), CLPIN_ERR_FORKED,
                  CLPIN__FORKED_WHY); /* before any OpenCL call */
  CLPIN__CHECK_IN(fn, !q, CL_INVALID_COMMAND_QUEUE, "the queue is NULL");
  CLPIN__CHECK_IN(fn, !mem, CL_INVALID_MEM_OBJECT, "the buffer or image is NULL");
  CLPIN__CHECK_IN(fn, !host, CL_INVALID_VALUE, "the host pointer is NULL");
  cl_int err = CLPIN__CHECK_FLAGS(fn, "flags", flags, TRANSFER);
  if (err != CL_SUCCESS)
    return err;
  return clpin__check_wait_list(fn, num_wait, wait_list);
}

static cl_mem_object_type mem_type(cl_mem mem, cl_int *err) {
  cl_mem_object_type t = 0;
  *err = clGetMemObjectInfo(mem, CL_MEM_TYPE, sizeof t, &t, NULL);
  return t;
}

/* A pitch argument: 0 means min; otherwise at least min, and (when step is
 * not 0) a multiple of step. */
static cl_int pitch(const char *fn, const char *arg, size_t given, size_t min, size_t step,
                    size_t *out) {
  CLPIN__CHECK_IN(fn, given && given < min, CL_INVALID_VALUE,
                  "%s %zu is less than the %zu bytes the region needs (or 0 for that)", arg, given,
                  min);
  CLPIN__CHECK_IN(fn, given && step && given % step, CL_INVALID_VALUE,
                  "%s %zu is not a multiple of the row pitch, %zu", arg, given, step);
  *out = given ? given : min;
  return CL_SUCCESS;
}

/* Whether a region of packed bytes may be staged (CLPIN_PIN_MEMORY, at
 * least the staging minimum of its direction). Only then are the checks
 * that query the object (its type, size, extent) made here, before
 * anything is enqueued; a transfer that can only end as the driver's own
 * call (the plain, direct and registered paths) gets them from the driver,
 * which makes them anyway, and a small call stays as cheap as the
 * driver's. Where it does not matter (the layer's vetting): always. */
static bool may_stage(const clpin__xfer *x, size_t packed) {
  if (!(x->flags & CLPIN_PIN_MEMORY))
    return false;
  size_t min = clpin__opt(CLPIN_OPT_STAGE_MIN);
  if (x->dir == CLPIN__H2D && clpin__opt(CLPIN_OPT_STAGE_MIN_H2D) > min)
    min = clpin__opt(CLPIN_OPT_STAGE_MIN_H2D);
  return packed >= min;
}

/* Whether a buffer of size bytes leaves a rect the room NVIDIA's driver
 * (580) asks of it and of every call a staged transfer cuts it into
 * (rect-support-probe on the H100, docs/benchmarks/HISTORY.md,
 * "rect and image of several slices";
 * docs/STAGING.md): OpenCL wants the region's
 * last byte inside the buffer (extent), NVIDIA at times also the rest of the
 * last slice, (bo2 + r2) * sp, or of the last row, (bo2 + r2 - 1) * sp +
 * (bo1 + r1) * rp. With less room than that the driver may refuse the
 * caller's call while the staged calls pass, or take the caller's call
 * while refusing a staged one (they give the slice pitch, the caller may
 * not): such a rect is the driver's own call. rp and sp are resolved. */
static bool driver_bounds_hold(const size_t bo[3], const size_t region[3], size_t rp, size_t sp,
                               size_t extent, size_t size) {
  size_t slices, rows, whole_slice, whole_row;
  if (__builtin_add_overflow(bo[2], region[2], &slices) ||
      __builtin_add_overflow(bo[1], region[1], &rows) || !mul_add(slices, sp, 0, &whole_slice) ||
      !mul_add(rows, rp, whole_slice - sp, &whole_row))
    return false;
  return extent <= size && whole_slice <= size && whole_row <= size;
}

static cl_int rect(clpin__xfer *x, const size_t bo[3], const size_t ho[3], const size_t region[3],
                   size_t brp, size_t bsp, size_t hrp, size_t hsp, bool full) {
  clpin__shape *s = &x->shape;
  const char *fn = RECT_FN(x);
  CLPIN__CHECK_IN(fn, !bo || !ho || !region, CL_INVALID_VALUE, "%s is NULL",
                  !bo   ? "buffer_origin"
                  : !ho ? "host_origin"
                        : "region");
  CLPIN__CHECK_IN(fn, !region[0] || !region[1] || !region[2], CL_INVALID_VALUE,
                  "region {%zu, %zu, %zu} has a 0: each of its sizes is at least 1", region[0],
                  region[1], region[2]);
  size_t packed_bytes;
  CLPIN__CHECK_IN(fn,
                  !mul_add(region[0], region[1], 0, &packed_bytes) ||
                      !mul_add(packed_bytes, region[2], 0, &packed_bytes),
                  CL_INVALID_VALUE, "region {%zu, %zu, %zu}'s bytes overflow size_t", region[0],
                  region[1], region[2]);
  full = full || may_stage(x, packed_bytes);
  cl_int err = CL_SUCCESS;
  cl_mem_object_type t = full ? mem_type(x->mem, &err) : CL_MEM_OBJECT_BUFFER;
  CLPIN__CHECK_IN(fn, err != CL_SUCCESS, err, "clGetMemObjectInfo on the buffer failed");
  CLPIN__CHECK_IN(fn, t != CL_MEM_OBJECT_BUFFER, CL_INVALID_MEM_OBJECT,
                  "the memory object is an image, not a buffer: use clpin_%s_image",
                  x->dir == CLPIN__H2D ? "write" : "read");
  size_t min_slice;
  CLPIN__CHECK_IN(fn, !mul_add(region[1], brp ? brp : region[0], 0, &min_slice), CL_INVALID_VALUE,
                  "the buffer side: %s", TOO_LARGE);
  if ((err = pitch(fn, "buffer_row_pitch", brp, region[0], 0, &s->buf_row_pitch)) != CL_SUCCESS ||
      (err = pitch(fn, "buffer_slice_pitch", bsp, min_slice, s->buf_row_pitch,
                   &s->buf_slice_pitch)) != CL_SUCCESS)
    return err;
  CLPIN__CHECK_IN(fn, !mul_add(region[1], hrp ? hrp : region[0], 0, &min_slice), CL_INVALID_VALUE,
                  "the host side: %s", TOO_LARGE);
  if ((err = pitch(fn, "host_row_pitch", hrp, region[0], 0, &s->host_row_step)) != CL_SUCCESS ||
      (err = pitch(fn, "host_slice_pitch", hsp, min_slice, s->host_row_step,
                   &s->host_slice_step)) != CL_SUCCESS)
    return err;
  /* The buffer's last byte: (bo2 + r2 - 1) * bsp + (bo1 + r1 - 1) * brp + bo0 + r0. */
  size_t size = SIZE_MAX, last = 0;
  if (full)
    err = clGetMemObjectInfo(x->mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  CLPIN__CHECK_IN(fn, err != CL_SUCCESS, err, "clGetMemObjectInfo on the buffer failed");
  CLPIN__CHECK_IN(fn,
                  __builtin_add_overflow(bo[2], region[2] - 1, &last) ||
                      !mul_add(last, s->buf_slice_pitch, 0, &last) ||
                      !mul_add(bo[1] + region[1] - 1, s->buf_row_pitch, last, &last) ||
                      bo[1] > SIZE_MAX - region[1] || __builtin_add_overflow(last, bo[0], &last) ||
                      __builtin_add_overflow(last, region[0], &last),
                  CL_INVALID_VALUE, "the buffer side: %s", TOO_LARGE);
  CLPIN__CHECK_IN(fn, last > size, CL_INVALID_VALUE,
                  "the region at buffer_origin {%zu, %zu, %zu} needs the buffer's first %zu bytes; "
                  "it holds %zu",
                  bo[0], bo[1], bo[2], last, size);
  size_t base = 0;
  CLPIN__CHECK_IN(fn,
                  !mul_add(ho[2], s->host_slice_step, 0, &base) ||
                      !mul_add(ho[1], s->host_row_step, base, &base) ||
                      __builtin_add_overflow(base, ho[0], &base),
                  CL_INVALID_VALUE, "host_origin {%zu, %zu, %zu}: %s", ho[0], ho[1], ho[2],
                  TOO_LARGE);
  s->kind = CLPIN__RECT;
  memcpy(s->origin, bo, sizeof s->origin);
  memcpy(s->host_origin, ho, sizeof s->host_origin);
  memcpy(s->region, region, sizeof s->region);
  s->user_pitch[0] = brp;
  s->user_pitch[1] = bsp;
  s->user_pitch[2] = hrp;
  s->user_pitch[3] = hsp;
  s->row_bytes = region[0];
  s->rows = region[1];
  s->host_base = base;
  if (full && !driver_bounds_hold(bo, region, s->buf_row_pitch, s->buf_slice_pitch, last, size))
    x->flags &= ~CLPIN_PIN_MEMORY;
  return host_layout(fn, s, region[2], &x->nbytes);
}

static cl_int image(clpin__xfer *x, const size_t origin[3], const size_t region[3], size_t rp,
                    size_t sp, bool full) {
  clpin__shape *s = &x->shape;
  const char *fn = IMAGE_FN(x);
  CLPIN__CHECK_IN(fn, !origin || !region, CL_INVALID_VALUE, "%s is NULL",
                  !origin ? "origin" : "region");
  CLPIN__CHECK_IN(fn, !region[0] || !region[1] || !region[2], CL_INVALID_VALUE,
                  "region {%zu, %zu, %zu} has a 0: each of its sizes is at least 1", region[0],
                  region[1], region[2]);
  cl_int err;
  cl_mem_object_type t = mem_type(x->mem, &err);
  CLPIN__CHECK_IN(fn, err != CL_SUCCESS, err, "clGetMemObjectInfo on the image failed");
  size_t elem = 0, dim[4] = {0, 0, 0, 0};
  static const cl_image_info what[4] = {CL_IMAGE_WIDTH, CL_IMAGE_HEIGHT, CL_IMAGE_DEPTH,
                                        CL_IMAGE_ARRAY_SIZE};
  CLPIN__CHECK_IN(fn, t == CL_MEM_OBJECT_BUFFER, CL_INVALID_MEM_OBJECT,
                  "the memory object is a buffer, not an image: use clpin_%s or clpin_%s_rect",
                  x->dir == CLPIN__H2D ? "write" : "read", x->dir == CLPIN__H2D ? "write" : "read");
  err = clGetImageInfo(x->mem, CL_IMAGE_ELEMENT_SIZE, sizeof elem, &elem, NULL);
  CLPIN__CHECK_IN(fn, err != CL_SUCCESS, err, "clGetImageInfo on the image failed");
  size_t packed_bytes;
  CLPIN__CHECK_IN(fn,
                  !mul_add(elem, region[0], 0, &packed_bytes) ||
                      !mul_add(packed_bytes, region[1], 0, &packed_bytes) ||
                      !mul_add(packed_bytes, region[2], 0, &packed_bytes),
                  CL_INVALID_VALUE, "region {%zu, %zu, %zu}'s bytes overflow size_t", region[0],
                  region[1], region[2]);
  full = full || may_stage(x, packed_bytes);
  for (int i = 0; i < 4 && full && err == CL_SUCCESS; i++)
    err = clGetImageInfo(x->mem, what[i], sizeof dim[i], &dim[i], NULL);
  CLPIN__CHECK_IN(fn, err != CL_SUCCESS, err, "clGetImageInfo on the image failed");
  /* The image's extent in each of origin's coordinates. */
  size_t lim[3] = {dim[0], 1, 1};
  bool arr1d = t == CL_MEM_OBJECT_IMAGE1D_ARRAY, flat = false;
  switch (t) {
  case CL_MEM_OBJECT_IMAGE1D:
  case CL_MEM_OBJECT_IMAGE1D_BUFFER: flat = true; break;
  case CL_MEM_OBJECT_IMAGE1D_ARRAY: lim[1] = dim[3]; break;
  case CL_MEM_OBJECT_IMAGE2D:
    lim[1] = dim[1];
    flat = true;
    break;
  case CL_MEM_OBJECT_IMAGE2D_ARRAY:
    lim[1] = dim[1];
    lim[2] = dim[3];
    break;
  case CL_MEM_OBJECT_IMAGE3D:
    lim[1] = dim[1];
    lim[2] = dim[2];
    break;
  default:
    CLPIN__CHECK_IN(fn, true, CL_INVALID_MEM_OBJECT, "the image's type (0x%x) is none clpin knows",
                    (unsigned)t);
  }
  for (int i = 0; i < 3 && full; i++)
    CLPIN__CHECK_IN(fn, origin[i] > lim[i] || region[i] > lim[i] - origin[i], CL_INVALID_VALUE,
                    "origin[%d] %zu + region[%d] %zu lies past the image's extent there, %zu", i,
                    origin[i], i, region[i], lim[i]);
  /* 1D and 2D images take no slice pitch (OpenCL: CL_INVALID_VALUE). */
  CLPIN__CHECK_IN(fn, flat && sp != 0, CL_INVALID_VALUE,
                  "slice_pitch is %zu: a 1D or 2D image takes 0", sp);
  size_t rb = 0, row_pitch, min_slice;
  CLPIN__CHECK_IN(fn, !mul_add(elem, region[0], 0, &rb), CL_INVALID_VALUE, "%s", TOO_LARGE);
  if ((err = pitch(fn, "row_pitch", rp, rb, 0, &row_pitch)) != CL_SUCCESS)
    return err;
  CLPIN__CHECK_IN(fn, !mul_add(row_pitch, arr1d ? 1 : region[1], 0, &min_slice), CL_INVALID_VALUE,
                  "%s", TOO_LARGE);
  size_t slice_pitch = 0;
  if (!flat && (err = pitch(fn, "slice_pitch", sp, min_slice, 0, &slice_pitch)) != CL_SUCCESS)
    return err;
  s->kind = CLPIN__IMAGE;
  s->image_type = t;
  memcpy(s->origin, origin, sizeof s->origin);
  memcpy(s->region, region, sizeof s->region);
  s->user_pitch[0] = rp;
  s->user_pitch[1] = sp;
  s->row_bytes = rb;
  s->rows = region[1];
  /* A 1D array's rows are its images, slice_pitch apart. */
  s->host_row_step = arr1d ? slice_pitch : row_pitch;
  s->host_slice_step = arr1d ? 0 : slice_pitch;
  s->host_base = 0;
  /* Where a 1D array's images lie in host memory, implementations disagree:
   * OpenCL says slice_pitch apart, POCL 3.1 and Oclgrind take row_pitch.
   * Such a transfer is the driver's own call (a span from the larger pitch
   * still decides the already-pinned path safely). So is a 3D image or 2D
   * array call whose slice pitch is not a multiple of its row pitch:
   * NVIDIA's driver (580) refuses it, OpenCL allows it, and the staged
   * calls (pitches 0) would pass (measured by rect-support-probe, in git
   * history: docs/STAGING.md, "Rect and image transfers"). */
  if (arr1d || (!flat && sp && slice_pitch % row_pitch))
    x->flags &= ~CLPIN_PIN_MEMORY;
  return host_layout(fn, s, region[2], &x->nbytes);
}

cl_int clpin__rect_vet(bool is_image, cl_mem mem, const size_t origin[3],
                       const size_t host_origin[3], const size_t region[3], const size_t pitch[4],
                       clpin__rect_geometry *g) {
  CLPIN__CHECK_IN(is_image ? "clpin_write_image" : "clpin_write_rect", !mem, CL_INVALID_MEM_OBJECT,
                  "the buffer or image is NULL");
  clpin__xfer x = {.mem = mem, .flags = CLPIN_PIN_MEMORY};
  cl_int err = is_image ? image(&x, origin, region, pitch[0], pitch[1], true)
                        : rect(&x, origin, host_origin, region, pitch[0], pitch[1], pitch[2],
                               pitch[3], true);
  if (err != CL_SUCCESS)
    return err;
  *g = (clpin__rect_geometry){.host_lo = x.shape.host_base,
                              .span = x.shape.span,
                              .packed = x.nbytes,
                              .plain = !(x.flags & CLPIN_PIN_MEMORY)};
  return CL_SUCCESS;
}

/* ---- entry ------------------------------------------------------------------ */

/* A small blocking write (below the staging minimum, no wait list) is the
 * driver's own call whatever its memory, pool block, registration or
 * pageable, unless some range is handed to a device: it goes there without
 * finding its pool. Finding it (a query of the queue, the pool's lookups
 * and counters) cost 2-5% of a 7-16 us call on the H100, where the target
 * is 0.97x (docs/benchmarks/HISTORY.md,
 * "small writes skip the pool"); such writes are counted in no
 * pool's stats. */
static bool small_write(const clpin__xfer *x) {
  return x->dir == CLPIN__H2D && !(x->flags & CLPIN_NON_BLOCKING) && x->num_wait == 0 &&
         x->nbytes < clpin__opt(CLPIN_OPT_STAGE_MIN) &&
         x->nbytes < clpin__opt(CLPIN_OPT_STAGE_MIN_H2D) && clpin__handoffs_idle();
}

static cl_int run(clpin__xfer *x, cl_int err) {
  if (err != CL_SUCCESS)
    return err;
  if (small_write(x)) {
    const char *why = "plain (a small write: the driver's call, in no pool's stats)";
    clpin__path_set(CLPIN__PATH_PLAIN, why);
    err = clpin__shape_plain(x, x->q, CL_TRUE, 0, NULL, x->event);
    if (err == CL_SUCCESS)
      clpin__log("write %zu bytes: %s", x->nbytes, why);
    return err;
  }
  return clpin__transfer_shaped(x);
}

#define XFER(queue, memobj, ptr, d)                                                                \
  {                                                                                                \
    .q = (queue), .mem = (memobj), .host = (unsigned char *)(uintptr_t)(ptr), .flags = flags,      \
    .num_wait = num_wait, .wait_list = wait_list, .event = event, .dir = (d)                       \
  }

cl_int clpin_write_rect(cl_command_queue q, cl_mem dst, const size_t buffer_origin[3],
                        const size_t host_origin[3], const size_t region[3],
                        size_t buffer_row_pitch, size_t buffer_slice_pitch, size_t host_row_pitch,
                        size_t host_slice_pitch, const void *src, unsigned flags, cl_uint num_wait,
                        const cl_event *wait_list, cl_event *event) {
  clpin__xfer x = XFER(q, dst, src, CLPIN__H2D);
  cl_int err = check_common(__func__, q, dst, src, flags, num_wait, wait_list);
  if (err == CL_SUCCESS)
    err = rect(&x, buffer_origin, host_origin, region, buffer_row_pitch, buffer_slice_pitch,
               host_row_pitch, host_slice_pitch, false);
  return run(&x, err);
}

cl_int clpin_read_rect(cl_command_queue q, cl_mem src, const size_t buffer_origin[3],
                       const size_t host_origin[3], const size_t region[3], size_t buffer_row_pitch,
                       size_t buffer_slice_pitch, size_t host_row_pitch, size_t host_slice_pitch,
                       void *dst, unsigned flags, cl_uint num_wait, const cl_event *wait_list,
                       cl_event *event) {
  clpin__xfer x = XFER(q, src, dst, CLPIN__D2H);
  cl_int err = check_common(__func__, q, src, dst, flags, num_wait, wait_list);
  if (err == CL_SUCCESS)
    err = rect(&x, buffer_origin, host_origin, region, buffer_row_pitch, buffer_slice_pitch,
               host_row_pitch, host_slice_pitch, false);
  return run(&x, err);
}

cl_int clpin_write_image(cl_command_queue q, cl_mem image_mem, const size_t origin[3],
                         const size_t region[3], size_t row_pitch, size_t slice_pitch,
                         const void *src, unsigned flags, cl_uint num_wait,
                         const cl_event *wait_list, cl_event *event) {
  clpin__xfer x = XFER(q, image_mem, src, CLPIN__H2D);
  cl_int err = check_common(__func__, q, image_mem, src, flags, num_wait, wait_list);
  if (err == CL_SUCCESS)
    err = image(&x, origin, region, row_pitch, slice_pitch, false);
  return run(&x, err);
}

cl_int clpin_read_image(cl_command_queue q, cl_mem image_mem, const size_t origin[3],
                        const size_t region[3], size_t row_pitch, size_t slice_pitch, void *dst,
                        unsigned flags, cl_uint num_wait, const cl_event *wait_list,
                        cl_event *event) {
  clpin__xfer x = XFER(q, image_mem, dst, CLPIN__D2H);
  cl_int err = check_common(__func__, q, image_mem, dst, flags, num_wait, wait_list);
  if (err == CL_SUCCESS)
    err = image(&x, origin, region, row_pitch, slice_pitch, false);
  return run(&x, err);
}
