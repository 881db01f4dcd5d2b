/* One transfer as staging and the engine see it (staging.c, engine.c).
 * Internal. */
#ifndef CLPIN_STAGING_H
#define CLPIN_STAGING_H

#include "internal.h"

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
} clpin__xfer;

/* The host bytes x reads or writes lie in [*lo, *lo + *len): the enclosing
 * span of a rect or image transfer, host..host+nbytes otherwise. */
static inline void clpin__xfer_span(const clpin__xfer *x, const void **lo, size_t *len) {
  *lo = x->host + (x->shape.kind ? x->shape.host_base : 0);
  *len = x->shape.kind ? x->shape.span : x->nbytes;
}

/* The staged transfer, driven by the calling thread: acquires the staging
 * blocks (on out-of-memory: a plain transfer, counted as a fallback), moves
 * the data through them with the host copies on the workers, and returns
 * with every DMA ended and the blocks back in the pool. x->event, if asked
 * for, gets the last DMA's (completed) event. Never a blocking OpenCL
 * transfer call: DMAs are enqueued non-blocking and waited for by event. */
cl_int clpin__staged(const clpin__xfer *x);

/* A plain transfer straight from or to the caller's memory, non-blocking
 * enqueue then a wait on its event unless CLPIN_NON_BLOCKING (the driver
 * serialises blocking calls across threads; waits on events it does not).
 * Counted under `counter`. */
cl_int clpin__plain(const clpin__xfer *x, clpin__counter counter, const char *why);

/* The path the calling thread's last transfer took, as its CLPIN_DEBUG line
 * names it ("staged", "pipelined", "staged (non-blocking)", "plain (...)",
 * "fallback: ...", "already pinned: ..."); NULL before any. The OpenCL
 * layer counts its routed transfers by it. */
extern _Thread_local const char *clpin__path_taken;

/* register.c: if x's host range lies wholly inside a live registration of
 * x->pool, run x as a plain transfer straight from/to it (counted as
 * bytes_pinned_direct), keep its event in the registration so that
 * clpin_host_unregister waits for it, set *err and return true. False
 * (nothing done) for memory that is not registered. */
bool clpin__register_transfer(const clpin__xfer *x, cl_int *err);

/* engine.c: queue x (non-blocking, staged) and return at once. The DMAs run
 * on the pool's DMA queue for x->dir of x->device (x->q's device), the host
 * copies on the workers; the event returned in *x->event (a marker on x->q)
 * completes when the data is in place. */
cl_int clpin__engine_submit(const clpin__xfer *x);

/* rect.c: the driver's own call for a whole rect or image transfer x,
 * enqueued on q (the caller's arguments; blocking as asked). */
cl_int clpin__shape_plain(const clpin__xfer *x, cl_command_queue q, cl_bool blocking,
                          cl_uint num_wait, const cl_event *wait_list, cl_event *event);
/* rect.c: the caller's whole call x with its host side packed at packed
 * (rows row_bytes apart, slices rows * row_bytes apart): the device side
 * exactly as the caller gave it (origin, region, buffer pitches), blocking
 * as asked, on x->q. */
cl_int clpin__shape_packed(const clpin__xfer *x, cl_bool blocking, void *packed, cl_uint num_wait,
                           const cl_event *wait_list, cl_event *event);
/* rect.c: the device-side calls for rows [row, row + nrows) of x between
 * the device and packed host memory at host, enqueued non-blocking on x->q;
 * *event ends when all of them have. */
cl_int clpin__shape_dma(const clpin__xfer *x, size_t row, size_t nrows, void *host,
                        cl_uint num_wait, const cl_event *wait_list, cl_event *event);
/* rect.c: copy packed bytes [off, off + len) of x between the caller's
 * memory and packed memory at packed (a write gathers, a read scatters). */
void clpin__shape_copy(const clpin__xfer *x, size_t off, size_t len, unsigned char *packed);
/* staging.c: route a rect or image transfer whose arguments rect.c has
 * checked (x->pool unset): the paths of clpin_write/clpin_read. */
cl_int clpin__transfer_shaped(clpin__xfer *x);

/* engine.c: fail every transfer of pool that is still waiting to start, so
 * that a release never waits for an event only the caller will set. The
 * registry calls it in a pool's release, after clpin__pool_close. */
void clpin__engine_cancel(clpin_pool *pool);

/* register.c: wait for the transfers that used each of the pool's
 * registrations and drop them all. The registry calls it in a pool's
 * release, once every user has left (after clpin__pool_drain) and before
 * clpin__pool_destroy frees the pool's buffers. */
void clpin__register_release_all(clpin_pool *pool);

/* Stop the engine's waiter thread (clpin_shutdown, after every pool went). */
void clpin__engine_shutdown(void);

#endif /* CLPIN_STAGING_H */
