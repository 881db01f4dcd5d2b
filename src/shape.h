/* SPDX-License-Identifier: Apache-2.0 */
/* One transfer as every transfer layer sees it (clpin__xfer), and the
 * device and host sides of a rect or image transfer's rows (shape.c), which
 * staging, the engine and rect.c share. Internal. */
#ifndef CLPIN_SHAPE_H
#define CLPIN_SHAPE_H

#include "fileio.h"
#include "pool.h"

typedef enum { CLPIN__H2D = 0, CLPIN__D2H = 1 } clpin__dir;

/* The geometry of a rect or image transfer (rect.c). Its rows (region[0]
 * bytes, or pixels times the element size) are numbered 0..nbytes/row_bytes
 * in the order slice by slice, row by row; the staging blocks hold them
 * packed, the device-side call of a chunk covers a range of whole rows. */
typedef enum { CLPIN__LINEAR = 0, CLPIN__RECT, CLPIN__IMAGE } clpin__kind;
typedef struct {
  clpin__kind kind; /* CLPIN__LINEAR: a buffer range, the rest unused */
  cl_mem_object_type image_type;
  size_t origin[3]; /* buffer_origin (bytes) or image origin (pixels) */
  size_t region[3]; /* the caller's region */
  /* The caller's own pitch arguments and host_origin, for the plain call. */
  size_t user_pitch[4]; /* rect: buffer row, slice, host row, slice; image: row, slice */
  size_t host_origin[3];
  size_t buf_row_pitch, buf_slice_pitch; /* rect, resolved (0 made tight) */
  size_t row_bytes, rows;                /* bytes per row, rows per slice */
  size_t host_row_step, host_slice_step; /* host bytes from row to row, slice to slice */
  size_t host_base;                      /* host offset of the region's first byte */
  size_t span;                           /* bytes from it to its last byte, inclusive */
} clpin__shape;

typedef struct {
  cl_command_queue q; /* where the DMAs go */
  cl_mem mem;
  size_t offset;
  unsigned char *host; /* source of a write, destination of a read */
  size_t nbytes;
  unsigned flags;
  cl_uint num_wait;
  const cl_event *wait_list;
  cl_event *event;
  clpin__dir dir;
  clpin_pool *pool;
  /* Rect and image transfers: host is the caller's pointer, nbytes the
   * packed size (row_bytes x rows x slices), offset unused. */
  clpin__shape shape;
  cl_device_id device; /* q's device: whose DMA queues, blocks and CPUs serve it */
  /* A file transfer (files.c): the host side is this file, not host; the
   * host copies of a chunk are its reads (H2D) or writes (D2H). */
  clpin__file file;
} clpin__xfer;

/* The host bytes x reads or writes lie in [*lo, *lo + *len): the enclosing
 * span of a rect or image transfer, host..host+nbytes otherwise. */
static inline void clpin__xfer_span(const clpin__xfer *x, const void **lo, size_t *len) {
  *lo = x->host + (x->shape.kind ? x->shape.host_base : 0);
  *len = x->shape.kind ? x->shape.span : x->nbytes;
}

/* the driver's own call for a whole rect or image transfer x,
 * enqueued on q (the caller's arguments; blocking as asked). */
cl_int clpin__shape_plain(const clpin__xfer *x, cl_command_queue q, cl_bool blocking,
                          cl_uint num_wait, const cl_event *wait_list, cl_event *event);
/* the caller's whole call x with its host side packed at packed
 * (rows row_bytes apart, slices rows * row_bytes apart): the device side
 * exactly as the caller gave it (origin, region, buffer pitches), blocking
 * as asked, on x->q. */
cl_int clpin__shape_packed(const clpin__xfer *x, cl_bool blocking, void *packed, cl_uint num_wait,
                           const cl_event *wait_list, cl_event *event);
/* the device-side calls for rows [row, row + nrows) of x between
 * the device and packed host memory at host, enqueued non-blocking on x->q;
 * *event ends when all of them have. */
cl_int clpin__shape_dma(const clpin__xfer *x, size_t row, size_t nrows, void *host,
                        cl_uint num_wait, const cl_event *wait_list, cl_event *event);
/* copy packed bytes [off, off + len) of x between the caller's
 * memory and packed memory at packed (a write gathers, a read scatters). */
void clpin__shape_copy(const clpin__xfer *x, size_t off, size_t len, unsigned char *packed);
#endif /* CLPIN_SHAPE_H */
