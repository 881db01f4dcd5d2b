/*
 * clpin — pinned host memory pools and fast staging transfers for OpenCL.
 *
 * This header is the whole public API and its reference manual.
 *
 * Thread safety: every function may be called from any thread at any time,
 * on the same or different pools, unless its comment says otherwise.
 *
 * Errors: every function that can fail returns cl_int: CL_SUCCESS (0) or a
 * negative code. OpenCL's own codes pass through unchanged; clpin's codes are
 * CLPIN_ERR_* in -20000 ... -20099. clpin_strerror() names any of them.
 * A call that fails changes nothing: no pool state, no output argument.
 *
 * Ownership: functions that hand out an object say who releases it. Every
 * release function accepts NULL and then does nothing.
 */
#ifndef CLPIN_H
#define CLPIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __APPLE__
#include <OpenCL/cl.h>
#else
#include <CL/cl.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CLPIN_STATIC_DEFINE)
#define CLPIN_API
#elif defined(_WIN32)
#define CLPIN_API __declspec(dllimport)
#elif defined(__GNUC__)
#define CLPIN_API __attribute__((visibility("default")))
#else
#define CLPIN_API
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                  */
/* ------------------------------------------------------------------------ */

#define CLPIN_VERSION_MAJOR 0
#define CLPIN_VERSION_MINOR 1
#define CLPIN_VERSION_PATCH 0
/** MAJOR*10000 + MINOR*100 + PATCH, comparable with integer operators. */
#define CLPIN_VERSION_NUMBER \
  (CLPIN_VERSION_MAJOR * 10000 + CLPIN_VERSION_MINOR * 100 + CLPIN_VERSION_PATCH)

/** The version of the library actually loaded, as CLPIN_VERSION_NUMBER.
 *  Compare it with the macro to detect a header/library mismatch. */
CLPIN_API unsigned clpin_version(void);
/** The same as "MAJOR.MINOR.PATCH"; a static string, never NULL. */
CLPIN_API const char *clpin_version_string(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

/* The one table of library error codes: the enum below and clpin_strerror()
 * are both generated from it, so they cannot disagree. */
#define CLPIN_ERROR_TABLE(X)                                                   \
  X(CLPIN_ERR_INVALID_ARGUMENT, -20000, "a required argument is NULL or a flag is unknown") \
  X(CLPIN_ERR_INVALID_SIZE, -20001, "size is zero or larger than the device can allocate") \
  X(CLPIN_ERR_OVERFLOW, -20002, "the size computation overflows size_t")       \
  X(CLPIN_ERR_INVALID_BLOCK, -20003, "not a block handed out by clpin")        \
  X(CLPIN_ERR_DOUBLE_RELEASE, -20004, "the block was already released")        \
  X(CLPIN_ERR_FOREIGN_POINTER, -20005, "the pointer was not allocated by clpin_host_alloc") \
  X(CLPIN_ERR_POOL_RELEASED, -20006, "the pool was released (clpin_pool_release_context or clpin_shutdown)") \
  X(CLPIN_ERR_OUT_OF_RANGE, -20007, "offset + size lies past the end of the buffer") \
  X(CLPIN_ERR_INVALID_DTYPE, -20008, "unknown dtype")                          \
  X(CLPIN_ERR_INVALID_SHAPE, -20009, "ndim is too large or the shape is NULL") \
  X(CLPIN_ERR_NO_DEVICE, -20010, "the context or queue has no usable device")  \
  X(CLPIN_ERR_THREAD, -20011, "a thread or lock could not be created")         \
  X(CLPIN_ERR_INVALID_OPTION, -20012, "unknown option or value out of range")

#define CLPIN__ERR_ENUM(name, value, text) name = value,
enum clpin_error { CLPIN_ERROR_TABLE(CLPIN__ERR_ENUM) CLPIN_ERR__LAST = -20099 };
#undef CLPIN__ERR_ENUM

/** A static text "NAME: description" for any CL_* or CLPIN_ERR_* code, and
 *  for CL_SUCCESS; an unknown code gives "unknown error code". Never NULL. */
CLPIN_API const char *clpin_strerror(cl_int code);

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

/* Options are read from the environment once, on first use of the library:
 *
 *   CLPIN_PINNED_H2D  0: no pinning on host-unified-memory devices   default 1
 *   CLPIN_MAX_CACHED  cap on idle pinned bytes per pool (512M, 4G)   unlimited
 *   CLPIN_CHUNK       pipeline chunk size in bytes (K/M/G suffixes)  tuned
 *   CLPIN_THREADS     host copy threads for pipelined staging        tuned
 *   CLPIN_DEBUG       1: log path decisions and pool events (stderr) 0
 *
 * Sizes accept a decimal number with an optional K, M, G or T suffix
 * (powers of 1024, an optional trailing "B" or "iB"); "unlimited" and
 * "none" mean no cap for CLPIN_MAX_CACHED. A bad value is reported once on
 * stderr and the default kept. clpin_set_option() overrides the environment. */
typedef enum clpin_option {
  CLPIN_OPT_PINNED_H2D = 0, /* 0 or 1 */
  CLPIN_OPT_MAX_CACHED = 1, /* bytes; SIZE_MAX = unlimited; new pools only */
  CLPIN_OPT_CHUNK = 2,      /* bytes, >= 4096 */
  CLPIN_OPT_THREADS = 3,    /* 1 ... 256 */
  CLPIN_OPT_DEBUG = 4,      /* 0 or 1 */
  CLPIN_OPT__COUNT
} clpin_option;

/** Set an option for the whole process. Returns CLPIN_ERR_INVALID_OPTION for
 *  an unknown option or a value out of its range (nothing changes then).
 *  CLPIN_OPT_MAX_CACHED applies to pools created afterwards; use
 *  clpin_pool_set_limit() for an existing pool. */
CLPIN_API cl_int clpin_set_option(clpin_option opt, size_t value);
/** The option's current value (environment, default or last set), or 0 for
 *  an unknown option. */
CLPIN_API size_t clpin_get_option(clpin_option opt);

/* ------------------------------------------------------------------------ */
/* Pools                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct clpin_pool clpin_pool;   /* one per cl_context */
typedef struct clpin_block clpin_block; /* one pinned buffer, mapped */

/** The pool of the queue's context, created on first use. The pool belongs
 *  to clpin: do not free it; it lives until clpin_pool_release_context() or
 *  clpin_shutdown(). Two threads asking at once get the same pool. Creating
 *  the pool retains the context and creates one internal command queue.
 *  Errors: CLPIN_ERR_INVALID_ARGUMENT (NULL), CLPIN_ERR_NO_DEVICE, or the
 *  OpenCL code of the failing query (CL_INVALID_COMMAND_QUEUE, ...). */
CLPIN_API cl_int clpin_pool_get(cl_command_queue queue, clpin_pool **pool);
/** The same, for a context. */
CLPIN_API cl_int clpin_pool_get_for_context(cl_context ctx, clpin_pool **pool);

/** Wait for every in-flight block of ctx's pool, free all its buffers (also
 *  blocks still in use: their handles and host pointers become invalid, and
 *  releasing them later returns CLPIN_ERR_POOL_RELEASED), release the
 *  context reference and forget the pool. A context that has no pool:
 *  CL_SUCCESS, nothing to do. A pool handle kept past this call stays safe to
 *  pass: calls on it return CLPIN_ERR_POOL_RELEASED.
 *  Blocks until every pending event given to clpin_release() completes. */
CLPIN_API cl_int clpin_pool_release_context(cl_context ctx);
/** clpin_pool_release_context() for every context, and stop clpin's worker
 *  threads. clpin may be used again afterwards (pools are created anew). */
CLPIN_API void clpin_shutdown(void);

/** Smallest block capacity: requests below it get a block of this size
 *  (pinned memory is page-granular, and each block costs a driver call). */
#define CLPIN_MIN_BLOCK ((size_t)4096)

/** Hand out a pinned, mapped block of at least nbytes. Its capacity is the
 *  next power of two >= max(nbytes, CLPIN_MIN_BLOCK), except where that power
 *  of two exceeds the device's CL_DEVICE_MAX_MEM_ALLOC_SIZE: then it is that
 *  maximum. A cached block is reused without any OpenCL call (a hit);
 *  otherwise a CL_MEM_ALLOC_HOST_PTR buffer is created and mapped (a miss).
 *  The caller owns the block until clpin_release().
 *  Errors: CLPIN_ERR_INVALID_ARGUMENT (NULL pool or block),
 *  CLPIN_ERR_INVALID_SIZE (0, or above CL_DEVICE_MAX_MEM_ALLOC_SIZE),
 *  CLPIN_ERR_POOL_RELEASED, or the driver's code when it cannot allocate even
 *  after freeing idle blocks and retrying once. */
CLPIN_API cl_int clpin_acquire(clpin_pool *pool, size_t nbytes, clpin_block **block);

/** The block's mapped host pointer, valid until the block is released; NULL
 *  for a NULL or invalid block. */
CLPIN_API void *clpin_block_host(const clpin_block *block);
/** The block's CL_MEM_ALLOC_HOST_PTR buffer (owned by the pool: do not
 *  release it); NULL for a NULL or invalid block. */
CLPIN_API cl_mem clpin_block_buffer(const clpin_block *block);
/** The block's capacity in bytes (>= the size asked for); 0 for NULL. */
CLPIN_API size_t clpin_block_size(const clpin_block *block);

/** Give a block back. NULL: CL_SUCCESS. If pending is not NULL the pool
 *  retains it and reuses the block only after it completes (also when it
 *  completes with an error status), so a transfer still reading or writing
 *  the block never sees it handed out again. Over the pool's cap, the block
 *  is freed instead of cached.
 *  Errors: CLPIN_ERR_DOUBLE_RELEASE (the pool already holds it),
 *  CLPIN_ERR_INVALID_BLOCK (not a clpin block), CLPIN_ERR_POOL_RELEASED,
 *  CL_INVALID_EVENT (pending is not a valid event). On error nothing changes:
 *  the block is still the caller's. */
CLPIN_API cl_int clpin_release(clpin_block *block, cl_event pending);

/** Free every idle (cached) buffer of the pool. Blocks in use or in flight
 *  are kept. Errors: CLPIN_ERR_INVALID_ARGUMENT, CLPIN_ERR_POOL_RELEASED. */
CLPIN_API cl_int clpin_pool_trim(clpin_pool *pool);
/** Cap the pool's idle pinned bytes; SIZE_MAX means unlimited. Idle blocks
 *  over the new cap are freed now; later releases over it free the block
 *  instead of caching it. */
CLPIN_API cl_int clpin_pool_set_limit(clpin_pool *pool, size_t max_cached_bytes);

/** Pool counters. Fields may be added at the end, never reordered. */
typedef struct clpin_stats {
  size_t struct_size;                   /* caller sets sizeof(clpin_stats) */
  uint64_t hits, misses;                /* acquires served from cache / from the driver */
  uint64_t driver_allocs, driver_frees; /* clCreateBuffer / clReleaseMemObject calls */
  size_t blocks_cached, bytes_cached;   /* idle, ready for reuse */
  size_t blocks_in_use, bytes_in_use;   /* handed out */
  size_t blocks_in_flight, bytes_in_flight; /* released, waiting for their event */
  size_t bytes_requested;               /* what users asked for, of blocks in use */
  size_t bytes_reserved, peak_bytes_reserved; /* all bytes held from the driver */
  uint64_t oom_retries, fallbacks;      /* allocation retries; transfers that fell back */
  uint64_t bytes_pinned_direct;         /* transfers from/to memory already in a block */
  uint64_t bytes_staged;                /* copied through one block */
  uint64_t bytes_pipelined;             /* copied through the chunked pipeline */
  uint64_t bytes_unpinned;              /* direct / zero-copy / fallback paths */
} clpin_stats;

/** A consistent snapshot of the pool's counters into *stats, whose
 *  struct_size the caller sets (an older, smaller struct is filled up to its
 *  size). bytes_cached + bytes_in_use + bytes_in_flight == bytes_reserved
 *  holds in every snapshot. Errors: CLPIN_ERR_INVALID_ARGUMENT (NULL, or
 *  struct_size too small), CLPIN_ERR_POOL_RELEASED. */
CLPIN_API cl_int clpin_pool_stats(clpin_pool *pool, clpin_stats *stats);

/* ------------------------------------------------------------------------ */
/* Pinned host memory by pointer (the cudaMallocHost analogue)              */
/* ------------------------------------------------------------------------ */

/** nbytes of pinned host memory from pool (a block acquired for you), or
 *  NULL on any failure (NULL pool, 0 bytes, no memory). Free with
 *  clpin_host_free(). clpin_write/clpin_read from or to this memory skip the
 *  host copy. */
CLPIN_API void *clpin_host_alloc(clpin_pool *pool, size_t nbytes);
/** Free memory from clpin_host_alloc(). NULL: CL_SUCCESS. A pointer clpin did
 *  not allocate (or one already freed, or one inside the allocation but not
 *  its start): CLPIN_ERR_FOREIGN_POINTER and nothing changes. */
CLPIN_API cl_int clpin_host_free(void *ptr);
/** If [ptr, ptr + nbytes) lies inside one live block of pool (acquired or
 *  from clpin_host_alloc, not yet released), return that block and set
 *  *offset to ptr's offset in it; else NULL. No OpenCL call. */
CLPIN_API clpin_block *clpin_pool_find(clpin_pool *pool, const void *ptr, size_t nbytes,
                                       size_t *offset);

/* ------------------------------------------------------------------------ */
/* Staging transfers                                                        */
/* ------------------------------------------------------------------------ */

/** Stage through pinned memory (the default on discrete devices; without it
 *  data that is not already pinned moves by plain pageable transfers). */
#define CLPIN_PIN_MEMORY (1u << 0)
/** Return once the transfer is enqueued; *event (when event is not NULL)
 *  completes when the data is in place. Without it the call returns with the
 *  data in place. */
#define CLPIN_NON_BLOCKING (1u << 1)

/** Write nbytes from host src to dst at offset, through the fastest path:
 *  - src inside a live pool block: straight to DMA, no host copy;
 *  - CLPIN_PIN_MEMORY on a discrete device (or with CLPIN_PINNED_H2D=1):
 *    staged through pool blocks, large transfers pipelined in chunks with the
 *    host copies spread over worker threads;
 *  - host-unified-memory device with CLPIN_PINNED_H2D=0, or no flag: a plain
 *    transfer;
 *  - the pool cannot allocate: falls back to a plain transfer (counted in
 *    stats.fallbacks).
 *  The transfer starts after the num_wait events in wait_list. With
 *  CLPIN_NON_BLOCKING, src must stay valid and unchanged until *event (or
 *  clFinish on q) completes. *event is a new event the caller releases.
 *  nbytes 0: nothing moves; *event, if asked for, is a completed event.
 *  Errors: CLPIN_ERR_INVALID_ARGUMENT (NULL q/dst/src, unknown flags,
 *  wait list inconsistent), CLPIN_ERR_OUT_OF_RANGE (offset + nbytes past the
 *  end of dst), or the OpenCL code of a failing enqueue. */
CLPIN_API cl_int clpin_write(cl_command_queue q, cl_mem dst, size_t offset, const void *src,
                             size_t nbytes, unsigned flags, cl_uint num_wait,
                             const cl_event *wait_list, cl_event *event);
/** Read nbytes from src at offset into host dst; the mirror of clpin_write.
 *  With CLPIN_NON_BLOCKING, *event completes when the data is in dst. */
CLPIN_API cl_int clpin_read(cl_command_queue q, cl_mem src, size_t offset, void *dst,
                            size_t nbytes, unsigned flags, cl_uint num_wait,
                            const cl_event *wait_list, cl_event *event);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                  */
/* ------------------------------------------------------------------------ */

typedef enum clpin_dtype {
  CLPIN_U8, CLPIN_I8, CLPIN_U16, CLPIN_I16, CLPIN_U32, CLPIN_I32,
  CLPIN_U64, CLPIN_I64, CLPIN_F16, CLPIN_F32, CLPIN_F64
} clpin_dtype;

/** Maximum number of dimensions of a tensor. */
#define CLPIN_MAX_DIMS 8

/** Size in bytes of one element; 0 for an unknown dtype. */
CLPIN_API size_t clpin_dtype_size(clpin_dtype dtype);

typedef struct clpin_tensor clpin_tensor;

/** Create a device tensor of dtype and shape[0..ndim) on q's context and fill
 *  it from host (row-major, nbytes = product of shape * dtype size), through
 *  clpin_write() with the same flags (CLPIN_PIN_MEMORY, CLPIN_NON_BLOCKING).
 *  ndim 0 is a scalar (one element); a zero in the shape makes an empty
 *  tensor (no buffer, host may be NULL; overflow is then not checked, the
 *  size being exactly 0). The caller releases *tensor with
 *  clpin_tensor_release(). The shape is copied; the tensor's head is
 *  CLPIN_HEAD_DEVICE (CLPIN_HEAD_SYNCED when empty).
 *  host NULL with a non-empty shape makes a tensor whose contents are not
 *  yet defined (head CLPIN_HEAD_UNINITIALIZED, like torch.empty), e.g. for a
 *  kernel's output; nothing is transferred.
 *  With CLPIN_NON_BLOCKING the call returns once the upload is enqueued:
 *  host must stay valid and unchanged until clpin_tensor_event(*tensor)
 *  completes (or clFinish(q)). Later clpin_tensor_* calls order themselves
 *  after that upload; commands the caller enqueues on another queue must wait
 *  for the event themselves.
 *  On any error nothing is allocated and *tensor is not written.
 *  Errors: CLPIN_ERR_INVALID_ARGUMENT (NULL q or tensor, unknown flag),
 *  CLPIN_ERR_INVALID_DTYPE, CLPIN_ERR_INVALID_SHAPE (ndim > CLPIN_MAX_DIMS or
 *  shape NULL with ndim > 0), CLPIN_ERR_OVERFLOW (element count or byte size
 *  overflows size_t), CLPIN_ERR_INVALID_SIZE (above the device's
 *  CL_DEVICE_MAX_MEM_ALLOC_SIZE), or OpenCL's code (clCreateBuffer, the
 *  upload). */
CLPIN_API cl_int clpin_tensor_from_host(cl_command_queue q, const void *host, clpin_dtype dtype,
                                        cl_uint ndim, const size_t *shape, unsigned flags,
                                        clpin_tensor **tensor);
/** Copy the whole tensor into host (nbytes) through clpin_read(). With
 *  CLPIN_NON_BLOCKING, *event (if not NULL) completes when host holds the
 *  data; the caller releases it. The tensor's value is its head's: when the
 *  host mirror is newer (CLPIN_HEAD_HOST) it is copied from the mirror on
 *  the calling thread, and *event is an already completed event. The head
 *  does not change. host may be NULL only for an empty tensor.
 *  Errors: CLPIN_ERR_INVALID_ARGUMENT, or clpin_read()'s. */
CLPIN_API cl_int clpin_tensor_to_host(const clpin_tensor *t, cl_command_queue q, void *host,
                                      unsigned flags, cl_event *event);
/** Accessors; each returns 0/NULL for a NULL tensor. The buffer and shape are
 *  owned by the tensor. */
CLPIN_API cl_mem clpin_tensor_buffer(const clpin_tensor *t);
CLPIN_API clpin_dtype clpin_tensor_dtype(const clpin_tensor *t);
CLPIN_API cl_uint clpin_tensor_ndim(const clpin_tensor *t);
CLPIN_API const size_t *clpin_tensor_shape(const clpin_tensor *t);
CLPIN_API size_t clpin_tensor_nbytes(const clpin_tensor *t);
/** The event of the upload started by a non-blocking
 *  clpin_tensor_from_host(), owned by the tensor (retain it to keep it past
 *  the tensor), or NULL when there is none (a blocking or empty tensor, or
 *  once a mirror copy has waited for it). */
CLPIN_API cl_event clpin_tensor_event(const clpin_tensor *t);
/** Free the tensor, its device buffer and its host mirror, after waiting for
 *  a non-blocking upload still in progress. NULL: nothing. Release tensors
 *  before clpin_pool_release_context()/clpin_shutdown() of their context:
 *  those free the mirror's pinned memory. */
CLPIN_API void clpin_tensor_release(clpin_tensor *t);

/** Access flags for the host mirror. */
#define CLPIN_READ (1u << 0)
#define CLPIN_WRITE (1u << 1)

/** Host mirror with a head state (as Caffe's SyncedMemory): the tensor keeps a
 *  pinned host copy, allocated on first use, and knows which side is newer.
 *  clpin_tensor_host_data() copies device to host only if the device is newer
 *  (access includes CLPIN_READ), and marks the host newer when access includes
 *  CLPIN_WRITE. *ptr is valid until the tensor is released.
 *
 *  The mirror is clpin_host_alloc() memory from the pool of q's context, so
 *  its copies take clpin_write/clpin_read's already-pinned path (counted in
 *  clpin_stats.bytes_pinned_direct). Copies are blocking, enqueued on q:
 *  the call returns with the data in place, after everything enqueued before
 *  it on an in-order q (a kernel that wrote the buffer, say).
 *
 *  State machine (head before -> after; "copy" names the only transfers):
 *
 *    head           | READ                | WRITE         | READ|WRITE
 *    host_data:     |                     |               |
 *    UNINITIALIZED  | zero mirror -> HOST | -> HOST       | zero mirror -> HOST
 *    HOST           | HOST                | HOST          | HOST
 *    DEVICE         | copy D2H -> SYNCED  | -> HOST       | copy D2H -> HOST
 *    SYNCED         | SYNCED              | -> HOST       | -> HOST
 *    device_data:   |                     |               |
 *    UNINITIALIZED  | zero-fill -> DEVICE | -> DEVICE     | zero-fill -> DEVICE
 *    HOST           | copy H2D -> SYNCED  | -> DEVICE     | copy H2D -> DEVICE
 *    DEVICE         | DEVICE              | DEVICE        | DEVICE
 *    SYNCED         | SYNCED              | -> DEVICE     | -> DEVICE
 *
 *  CLPIN_WRITE alone promises to overwrite every byte (like
 *  CL_MAP_WRITE_INVALIDATE_REGION): nothing is copied, even from a newer
 *  side. Use CLPIN_READ | CLPIN_WRITE to update part of the data.
 *  clpin_tensor_buffer() gives the buffer without touching the head: after
 *  writing it directly, call clpin_tensor_device_data(t, q, CLPIN_WRITE, ..)
 *  so the mirror knows. An empty tensor stays SYNCED and gives NULL.
 *  Not thread-safe on one tensor (an exception to the global rule): calls
 *  on the same tensor must not run concurrently.
 *  Errors: CLPIN_ERR_INVALID_ARGUMENT (NULL argument, access 0 or unknown
 *  bits), CL_INVALID_CONTEXT (q is on another context),
 *  CL_MEM_OBJECT_ALLOCATION_FAILURE (no pinned memory for the mirror), or
 *  the copy's code. On error the head and the outputs are unchanged. */
CLPIN_API cl_int clpin_tensor_host_data(clpin_tensor *t, cl_command_queue q, unsigned access,
                                        void **ptr);
/** The device side of the same: copies host to device only if the host is
 *  newer (access includes CLPIN_READ), and marks the device newer when
 *  access includes CLPIN_WRITE. *mem is the tensor's buffer (owned by the
 *  tensor; NULL when empty). The table and errors are host_data's. */
CLPIN_API cl_int clpin_tensor_device_data(clpin_tensor *t, cl_command_queue q, unsigned access,
                                          cl_mem *mem);

/** Which side of a tensor holds the newest data. */
typedef enum clpin_head {
  CLPIN_HEAD_UNINITIALIZED, CLPIN_HEAD_HOST, CLPIN_HEAD_DEVICE, CLPIN_HEAD_SYNCED
} clpin_head;
/** The tensor's head state; CLPIN_HEAD_UNINITIALIZED for NULL. */
CLPIN_API clpin_head clpin_tensor_head(const clpin_tensor *t);

#ifdef __cplusplus
}
#endif
#endif /* CLPIN_H */
