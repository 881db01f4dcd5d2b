/* SPDX-License-Identifier: Apache-2.0 */
/* The rows of a rect or image transfer (shape.h): the driver's rect and
 * image calls for a range of rows between the device and packed host
 * memory, and the host copies that gather or scatter the caller's rows.
 * rect.c checks the arguments and builds the shape; staging and the engine
 * move the rows through pinned blocks with these. */
#include "shape.h"
#include "events.h"
#include "streamcopy.h"

#include <string.h>

/* ---- the device side ------------------------------------------------------ */

cl_int clpin__shape_plain(const clpin__xfer *x, cl_command_queue q, cl_bool blocking,
                          cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
  const clpin__shape *s = &x->shape;
  const size_t *up = s->user_pitch;
  if (s->kind == CLPIN__RECT)
    return x->dir == CLPIN__H2D
               ? clEnqueueWriteBufferRect(q, x->mem, blocking, s->origin, s->host_origin, s->region,
                                          up[0], up[1], up[2], up[3], x->host, num_wait, wait_list,
                                          event)
               : clEnqueueReadBufferRect(q, x->mem, blocking, s->origin, s->host_origin, s->region,
                                         up[0], up[1], up[2], up[3], x->host, num_wait, wait_list,
                                         event);
  return x->dir == CLPIN__H2D
             ? clEnqueueWriteImage(q, x->mem, blocking, s->origin, s->region, up[0], up[1], x->host,
                                   num_wait, wait_list, event)
             : clEnqueueReadImage(q, x->mem, blocking, s->origin, s->region, up[0], up[1], x->host,
                                  num_wait, wait_list, event);
}

cl_int clpin__shape_packed(const clpin__xfer *x, cl_bool blocking, void *packed, cl_uint num_wait,
                           const cl_event *wait_list, cl_event *event) {
  const clpin__shape *s = &x->shape;
  const size_t *up = s->user_pitch;
  if (s->kind == CLPIN__RECT) {
    size_t ho[3] = {0, 0, 0}, hsp = s->row_bytes * s->rows;
    return x->dir == CLPIN__H2D ? clEnqueueWriteBufferRect(x->q, x->mem, blocking, s->origin, ho,
                                                           s->region, up[0], up[1], s->row_bytes,
                                                           hsp, packed, num_wait, wait_list, event)
                                : clEnqueueReadBufferRect(x->q, x->mem, blocking, s->origin, ho,
                                                          s->region, up[0], up[1], s->row_bytes,
                                                          hsp, packed, num_wait, wait_list, event);
  }
  /* Packed rows: pitches 0 (tight) are right for every image type. */
  return x->dir == CLPIN__H2D ? clEnqueueWriteImage(x->q, x->mem, blocking, s->origin, s->region, 0,
                                                    0, packed, num_wait, wait_list, event)
                              : clEnqueueReadImage(x->q, x->mem, blocking, s->origin, s->region, 0,
                                                   0, packed, num_wait, wait_list, event);
}

/* One device-side call: ny rows from row y of slice z on, nz slices (ny is
 * all the rows of a slice when nz > 1), packed at host. */
static cl_int dma_call(const clpin__xfer *x, size_t y, size_t z, size_t ny, size_t nz, void *host,
                       cl_uint nw, const cl_event *wl, cl_event *ev) {
  const clpin__shape *s = &x->shape;
  size_t origin[3] = {s->origin[0], s->origin[1] + y, s->origin[2] + z};
  if (s->kind == CLPIN__RECT) {
    size_t ho[3] = {0, 0, 0}, region[3] = {s->row_bytes, ny, nz};
    size_t hrp = s->row_bytes, hsp = s->row_bytes * ny;
    return x->dir == CLPIN__H2D
               ? clEnqueueWriteBufferRect(x->q, x->mem, CL_FALSE, origin, ho, region,
                                          s->buf_row_pitch, s->buf_slice_pitch, hrp, hsp, host, nw,
                                          wl, ev)
               : clEnqueueReadBufferRect(x->q, x->mem, CL_FALSE, origin, ho, region,
                                         s->buf_row_pitch, s->buf_slice_pitch, hrp, hsp, host, nw,
                                         wl, ev);
  }
  /* Packed rows: pitches 0 (tight) are right for every image type. */
  size_t region[3] = {s->region[0], ny, nz};
  return x->dir == CLPIN__H2D
             ? clEnqueueWriteImage(x->q, x->mem, CL_FALSE, origin, region, 0, 0, host, nw, wl, ev)
             : clEnqueueReadImage(x->q, x->mem, CL_FALSE, origin, region, 0, 0, host, nw, wl, ev);
}

cl_int clpin__shape_dma(const clpin__xfer *x, size_t row, size_t nrows, void *host,
                        cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
  const clpin__shape *s = &x->shape;
  cl_event evs[3] = {NULL, NULL, NULL};
  cl_uint n = 0;
  cl_int err = CL_SUCCESS;
  size_t r = row, end = row + nrows;
  while (r < end && err == CL_SUCCESS) {
    size_t y = r % s->rows, z = r / s->rows, ny, nz;
    if (y != 0 || end - r < s->rows) {
      ny = end - r < s->rows - y ? end - r : s->rows - y;
      nz = 1;
    } else {
      ny = s->rows;
      nz = (end - r) / s->rows;
    }
    unsigned char *at = (unsigned char *)host + (r - row) * s->row_bytes;
    err = dma_call(x, y, z, ny, nz, at, num_wait, wait_list, &evs[n]);
    if (err == CL_SUCCESS)
      n++;
    r += ny * nz;
  }
  if (err == CL_SUCCESS && n == 1) {
    *event = evs[0];
    return CL_SUCCESS;
  }
  if (err == CL_SUCCESS)
    err = clEnqueueMarkerWithWaitList(x->q, n, evs, event);
  /* On a failure the calls already enqueued still use host: they end here. */
  for (cl_uint i = 0; i < n; i++) {
    if (err != CL_SUCCESS)
      clpin__event_settle(evs[i]);
    clReleaseEvent(evs[i]);
  }
  return err;
}

/* ---- the host side -------------------------------------------------------- */

/* Rows move one per call: memcpy would write rows of kilobytes with
 * ordinary stores (glibc streams only calls of megabytes), reading each
 * destination line before writing it: the caller's rows on a read, the
 * pinned staging block on a write. A large transfer streams its rows
 * instead (CLPIN_STREAM_MIN, streamcopy.c); a smaller one keeps memcpy,
 * whose destination may stay in the cache for the caller. The fence orders
 * this thread's streaming stores before the copy thread reports the part done
 * (and, on a write, before the DMA that reads the block is enqueued). */
void clpin__shape_copy(const clpin__xfer *x, size_t off, size_t len, unsigned char *packed) {
  const clpin__shape *s = &x->shape;
  size_t rb = s->row_bytes;
  bool stream = x->nbytes >= clpin__opt(CLPIN_OPT_STREAM_MIN);
  clpin__copy_kind kind = stream ? clpin__copy_best() : CLPIN__COPY_PLAIN;
  while (len) {
    size_t r = off / rb, col = off % rb, n = rb - col < len ? rb - col : len;
    unsigned char *h = x->host + s->host_base + (r % s->rows) * s->host_row_step +
                       (r / s->rows) * s->host_slice_step + col;
    if (x->dir == CLPIN__H2D)
      clpin__copy_with(kind, packed, h, n);
    else
      clpin__copy_with(kind, h, packed, n);
    packed += n;
    off += n;
    len -= n;
  }
  if (kind != CLPIN__COPY_PLAIN)
    clpin__copy_fence();
}
