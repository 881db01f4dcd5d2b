/* SPDX-License-Identifier: Apache-2.0 */
/* Tensors: a device buffer with dtype and shape, and a pinned host mirror
 * with a head state (the state machine is documented in clpin.h and
 * docs/TENSORS.md). Transfers go through clpin_write/clpin_read only, so the
 * mirror, being clpin_host_alloc memory, takes their already-pinned path.
 *
 * On a host-unified device with a known zero-copy rule (unified.c) a tensor
 * is "zc": its buffer is host memory, there is no separate mirror, and the
 * mirror calls map and unmap instead of copying. The head means the same;
 * a copy the table would make is counted in bytes_zero_copy instead. */
#include "events.h"
#include "registry.h"
#include "staging.h"
#include "zc.h"

#include <stdlib.h>
#include <string.h>

struct clpin_tensor {
  cl_context ctx;          /* retained: an empty tensor has no buffer to hold it */
  cl_mem buf;              /* NULL for an empty tensor */
  cl_event upload;         /* the pending write of a non-blocking from_host, or NULL */
  void *mirror;            /* clpin_host_alloc memory, allocated on first use */
  clpin_pool *mirror_pool; /* the pool the mirror came from */
  clpin_dtype dtype;
  cl_uint ndim;
  size_t shape[CLPIN_MAX_DIMS];
  size_t nbytes;
  clpin_head head;
  bool zc;                /* the buffer is host memory (unified.c): no mirror */
  void *mapped;           /* zc: the buffer mapped on map_q, or NULL */
  cl_command_queue map_q; /* zc: retained while mapped */
  clpin_pool *pool;       /* zc: the pool that counts (stats), or NULL */
};

#define ACCESS_ZERO "access is 0: pass " CLPIN__FLAGS_ACCESS_TAKES
#define ACCESS_FN "clpin_tensor_host_data" /* the one call that makes a mirror */
#define QUEUE_ELSEWHERE "the queue belongs to another context than the tensor"
#define MIRROR_GONE                                                                                \
  "the tensor's host mirror was freed with its pool (clpin_pool_release_context or "               \
  "clpin_shutdown)"

/* Count bytes in the pool's stats unless the pool is gone. */
static void zc_count(const clpin_tensor *t, clpin__counter c, size_t nbytes) {
  clpin_pool *pool = t->pool;
  if (pool && clpin__pool_enter(&pool) == CL_SUCCESS) {
    clpin__count(pool, c, nbytes);
    clpin__pool_leave(pool);
  }
}

/* Whether a tensor of q's device is zc, and then its buffer: the caller's
 * memory in place (CLPIN_ZERO_COPY over memory the rule accepts), or
 * clpin's own, filled from host by one host copy. *buf stays NULL for a
 * tensor that takes the classic path. */
static cl_int zc_buffer(clpin_tensor *t, cl_command_queue q, cl_context ctx, const void *host,
                        unsigned flags, cl_mem *buf) {
  clpin__zc_device zd;
  cl_int err = clpin__zc_probe(q, &zd);
  if (err != CL_SUCCESS)
    return err;
  if (clpin__zc_decide(zd.rule, zd.unified, CLPIN__ZC_OWN, NULL, t->nbytes, zd.base_align) ==
      CLPIN__ZC_COPY)
    return CL_SUCCESS;
  clpin__zc_how how = CLPIN__ZC_COPY;
  if (host && (flags & CLPIN_ZERO_COPY))
    how = clpin__zc_decide(zd.rule, true, CLPIN__ZC_CALLER, host, t->nbytes, zd.base_align);
  /* CLPIN_PINNED_H2D=1 keeps the copying path of discrete devices, except
   * for memory the caller explicitly offered in place. */
  if (clpin__opt(CLPIN_OPT_PINNED) == 1 && how != CLPIN__ZC_USE_HOST)
    return CL_SUCCESS;
  if (clpin_pool_get(q, &t->pool) != CL_SUCCESS)
    t->pool = NULL;
  const char *path;
  if (how == CLPIN__ZC_USE_HOST) {
    *buf =
        clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, t->nbytes, (void *)host, &err);
    path = "caller's memory in place";
  } else if (zd.rule->own == CLPIN__ZC_USE_HOST) {
    *buf = clpin__zc_own_buffer(ctx, t->nbytes, zd.rule->size_multiple, host, &err);
    path = "own page-aligned memory";
  } else {
    cl_mem_flags f = CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR | (host ? CL_MEM_COPY_HOST_PTR : 0);
    *buf = clCreateBuffer(ctx, f, t->nbytes, (void *)host, &err);
    path = "ALLOC_HOST_PTR";
  }
  if (err != CL_SUCCESS) {
    *buf = NULL;
    return err;
  }
  t->zc = true;
  if (host)
    zc_count(t, how == CLPIN__ZC_USE_HOST ? CLPIN__BYTES_ZERO_COPY : CLPIN__BYTES_UNPINNED,
             t->nbytes);
  clpin__log("tensor: zero copy (%s rule): %s%s", zd.rule->name, path,
             host && how != CLPIN__ZC_USE_HOST ? ", one host copy" : "");
  return CL_SUCCESS;
}

/* Map a zc tensor's buffer for the host on q (blocking: after what q ran
 * before), once; the mapping lasts until zc_unmap. */
static cl_int zc_map(clpin_tensor *t, cl_command_queue q) {
  if (t->mapped)
    return CL_SUCCESS;
  cl_int err = clRetainCommandQueue(q);
  if (err != CL_SUCCESS)
    return err;
  void *p = clEnqueueMapBuffer(q, t->buf, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, t->nbytes, 0,
                               NULL, NULL, &err);
  if (err != CL_SUCCESS) {
    clReleaseCommandQueue(q);
    return err;
  }
  t->mapped = p;
  t->map_q = q;
  return CL_SUCCESS;
}

/* End the host's mapping, waiting for the unmap so that a kernel on any
 * queue sees the host's writes. Once the unmap is enqueued the mapping is
 * gone, whatever the wait returns. */
static cl_int zc_unmap(clpin_tensor *t) {
  if (!t->mapped)
    return CL_SUCCESS;
  cl_event done;
  cl_int err = clEnqueueUnmapMemObject(t->map_q, t->buf, t->mapped, 0, NULL, &done);
  if (err != CL_SUCCESS)
    return err;
  err = clpin__events_settle(1, &done);
  clReleaseEvent(done);
  clReleaseCommandQueue(t->map_q);
  t->map_q = NULL;
  t->mapped = NULL;
  return err;
}

size_t clpin_dtype_size(clpin_dtype dtype) {
  switch (dtype) {
  case CLPIN_U8:
  case CLPIN_I8: return 1;
  case CLPIN_U16:
  case CLPIN_I16:
  case CLPIN_F16: return 2;
  case CLPIN_U32:
  case CLPIN_I32:
  case CLPIN_F32: return 4;
  case CLPIN_U64:
  case CLPIN_I64:
  case CLPIN_F64: return 8;
  }
  return 0;
}

/* Bytes of a tensor of this shape, exactly: a zero dimension makes it empty
 * whatever the other dimensions are, so overflow is checked only when every
 * dimension is non-zero. */
static cl_int shape_bytes(size_t elem, cl_uint ndim, const size_t *shape, size_t *nbytes) {
  for (cl_uint i = 0; i < ndim; i++)
    if (shape[i] == 0) {
      *nbytes = 0;
      return CL_SUCCESS;
    }
  size_t n = elem;
  for (cl_uint i = 0; i < ndim; i++) {
    if (n > SIZE_MAX / shape[i])
      return CLPIN_ERR_OVERFLOW;
    n *= shape[i];
  }
  *nbytes = n;
  return CL_SUCCESS;
}

/* The queue's context and the smallest CL_DEVICE_MAX_MEM_ALLOC_SIZE of its
 * device. */
static cl_int queue_limits(cl_command_queue q, cl_context *ctx, size_t *max_alloc) {
  cl_device_id dev;
  cl_ulong max = 0;
  cl_int err = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof *ctx, ctx, NULL);
  if (err == CL_SUCCESS)
    err = clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max, &max, NULL);
  *max_alloc = max > SIZE_MAX ? SIZE_MAX : (size_t)max;
  return err;
}

/* from_host and create: host NULL (create only) leaves the contents
 * undefined, head UNINITIALIZED. */
static cl_int make_tensor(cl_command_queue q, const void *host, bool fill, clpin_dtype dtype,
                          cl_uint ndim, const size_t *shape, unsigned flags,
                          clpin_tensor **tensor) {
  const char *fn = fill ? "clpin_tensor_from_host" : "clpin_tensor_create"; /* for details */
  CLPIN__CHECK_IN(fn, clpin__forked(), CLPIN_ERR_FORKED, CLPIN__FORKED_WHY);
  CLPIN__CHECK_IN(fn, !tensor, CLPIN_ERR_INVALID_ARGUMENT, "tensor (the out-pointer) is NULL");
  CLPIN__CHECK_IN(fn, !q, CL_INVALID_COMMAND_QUEUE, "the queue is NULL");
  cl_int err = CLPIN__CHECK_FLAGS(fn, "flags", flags, TENSOR);
  if (err != CL_SUCCESS)
    return err;
  size_t elem = clpin_dtype_size(dtype);
  CLPIN__CHECK_IN(fn, elem == 0, CLPIN_ERR_INVALID_DTYPE, "dtype %d is not a clpin_dtype",
                  (int)dtype);
  CLPIN__CHECK_IN(fn, ndim > CLPIN_MAX_DIMS, CLPIN_ERR_INVALID_SHAPE,
                  "ndim %u is more than CLPIN_MAX_DIMS (%d)", ndim, (int)CLPIN_MAX_DIMS);
  CLPIN__CHECK_IN(fn, ndim > 0 && !shape, CLPIN_ERR_INVALID_SHAPE, "shape is NULL and ndim is %u",
                  ndim);
  size_t nbytes;
  err = shape_bytes(elem, ndim, shape, &nbytes);
  CLPIN__CHECK_IN(fn, err != CL_SUCCESS, err,
                  "the shape's %u dimensions times the dtype's %zu bytes overflow size_t", ndim,
                  elem);
  CLPIN__CHECK_IN(fn, fill && !host && nbytes > 0, CLPIN_ERR_INVALID_ARGUMENT,
                  "host is NULL but the shape is not empty");

  cl_context ctx;
  size_t max_alloc;
  err = queue_limits(q, &ctx, &max_alloc);
  CLPIN__CHECK_IN(fn, err != CL_SUCCESS, err,
                  "querying the queue's context and device (clGetCommandQueueInfo) failed");
  CLPIN__CHECK_IN(fn, nbytes > max_alloc, CLPIN_ERR_INVALID_SIZE,
                  "the tensor's %zu bytes are more than the device's largest buffer, %zu bytes "
                  "(CL_DEVICE_MAX_MEM_ALLOC_SIZE)",
                  nbytes, max_alloc);

  clpin_tensor *t = calloc(1, sizeof *t);
  if (!t)
    return CL_OUT_OF_HOST_MEMORY;
  t->dtype = dtype;
  t->ndim = ndim;
  if (ndim)
    memcpy(t->shape, shape, ndim * sizeof *shape);
  t->nbytes = nbytes;
  t->head = host ? CLPIN_HEAD_DEVICE : CLPIN_HEAD_UNINITIALIZED;
  if (nbytes == 0) {
    t->head = CLPIN_HEAD_SYNCED; /* nothing on either side to copy, ever */
  } else {
    err = zc_buffer(t, q, ctx, host, flags, &t->buf);
    if (err != CL_SUCCESS)
      goto fail;
  }
  if (nbytes && !t->zc) {
    t->buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, nbytes, NULL, &err);
    if (err != CL_SUCCESS)
      goto fail;
    if (host) {
      bool async = flags & CLPIN_NON_BLOCKING;
      err = clpin_write(q, t->buf, 0, host, nbytes, flags & CLPIN__FLAGS_TRANSFER, 0, NULL,
                        async ? &t->upload : NULL);
      if (err != CL_SUCCESS)
        goto fail;
    }
  }
  err = clRetainContext(ctx);
  if (err != CL_SUCCESS)
    goto fail;
  t->ctx = ctx;
  clpin__log("tensor %p: dtype %d ndim %u %zu bytes%s", (void *)t, (int)dtype, ndim, nbytes,
             host ? "" : " (uninitialized)");
  *tensor = t;
  return CL_SUCCESS;
fail:
  if (t->upload) {
    clpin__events_settle(1, &t->upload);
    clReleaseEvent(t->upload);
  }
  if (t->buf)
    clReleaseMemObject(t->buf);
  free(t);
  return err;
}

cl_int clpin_tensor_from_host(cl_command_queue q, const void *host, clpin_dtype dtype, cl_uint ndim,
                              const size_t *shape, unsigned flags, clpin_tensor **tensor) {
  return make_tensor(q, host, true, dtype, ndim, shape, flags, tensor);
}

cl_int clpin_tensor_create(cl_command_queue q, clpin_dtype dtype, cl_uint ndim, const size_t *shape,
                           clpin_tensor **tensor) {
  return make_tensor(q, NULL, false, dtype, ndim, shape, 0, tensor);
}

/* Hold the mirror's pool while the mirror is used: clpin_pool_release_context
 * (or clpin_shutdown) frees the mirror with its pool, and a stale pointer
 * must never be touched. While held, the release waits (the pool's
 * lifecycle, internal.h); once released, the hold fails. No mirror: nothing
 * to hold. Every successful hold is paired with mirror_drop(). */
static cl_int mirror_hold(const clpin_tensor *t) {
  if (!t->mirror)
    return CL_SUCCESS;
  clpin_pool *pool = t->mirror_pool;
  if (clpin__pool_enter(&pool) == CL_SUCCESS) {
    if (clpin_pool_find(pool, t->mirror, t->nbytes, NULL))
      return CL_SUCCESS;
    clpin__pool_leave(pool);
  }
  clpin__log("tensor %p: its mirror was freed with its pool", (const void *)t);
  return CLPIN_ERR_POOL_RELEASED;
}

static void mirror_drop(const clpin_tensor *t) {
  if (t->mirror)
    clpin__pool_leave(t->mirror_pool);
}

cl_int clpin_tensor_to_host(const clpin_tensor *t, cl_command_queue q, void *host, unsigned flags,
                            cl_event *event) {
  CLPIN__CHECK_FORK();
  CLPIN__CHECK_WHY(!t, CLPIN_ERR_INVALID_ARGUMENT, "the tensor is NULL");
  CLPIN__CHECK_WHY(!q, CL_INVALID_COMMAND_QUEUE, "the queue is NULL");
  cl_int ferr = CLPIN__CHECK_FLAGS(__func__, "flags", flags, TRANSFER);
  if (ferr != CL_SUCCESS)
    return ferr;
  CLPIN__CHECK_WHY(!host && t->nbytes, CLPIN_ERR_INVALID_ARGUMENT,
                   "host is NULL but the tensor is not empty");
  bool async = flags & CLPIN_NON_BLOCKING;
  /* zc: a mapped buffer is read through its mapping (the host's view). */
  if (t->zc && (t->mapped || t->head == CLPIN_HEAD_UNINITIALIZED)) {
    if (t->head == CLPIN_HEAD_UNINITIALIZED)
      memset(host, 0, t->nbytes);
    else
      memcpy(host, t->mapped, t->nbytes);
    return async && event ? clpin__completed_event(t->ctx, event) : CL_SUCCESS;
  }
  /* When the mirror is newer the device copy is stale: the tensor's value is
   * the mirror's, and a host copy of it is all there is to do. Unwritten
   * data reads as zeros, as through the mirror. */
  if (t->nbytes == 0 || t->head == CLPIN_HEAD_HOST || t->head == CLPIN_HEAD_UNINITIALIZED) {
    cl_int err = mirror_hold(t);
    CLPIN__CHECK_WHY(err != CL_SUCCESS, err, MIRROR_GONE);
    if (t->head == CLPIN_HEAD_HOST)
      memcpy(host, t->mirror, t->nbytes);
    else if (t->nbytes)
      memset(host, 0, t->nbytes);
    mirror_drop(t);
    return async && event ? clpin__completed_event(t->ctx, event) : CL_SUCCESS;
  }
  return clpin_read(q, t->buf, 0, host, t->nbytes, flags, t->upload ? 1 : 0,
                    t->upload ? &t->upload : NULL, async ? event : NULL);
}

cl_mem clpin_tensor_buffer(const clpin_tensor *t) { return t ? t->buf : NULL; }
clpin_dtype clpin_tensor_dtype(const clpin_tensor *t) { return t ? t->dtype : (clpin_dtype)0; }
cl_uint clpin_tensor_ndim(const clpin_tensor *t) { return t ? t->ndim : 0; }
const size_t *clpin_tensor_shape(const clpin_tensor *t) { return t ? t->shape : NULL; }
size_t clpin_tensor_nbytes(const clpin_tensor *t) { return t ? t->nbytes : 0; }
clpin_head clpin_tensor_head(const clpin_tensor *t) {
  return t ? t->head : CLPIN_HEAD_UNINITIALIZED;
}
cl_event clpin_tensor_event(const clpin_tensor *t) { return t ? t->upload : NULL; }

void clpin_tensor_release(clpin_tensor *t) {
  if (!t || clpin__forked())
    return; /* in a forked child: the parent's driver objects stay untouched */
  if (t->upload) {
    /* The caller's host data may still be read by the upload; the mirror
     * may still be the target of nothing (its copies are blocking). */
    clpin__events_settle(1, &t->upload);
    clReleaseEvent(t->upload);
  }
  if (t->zc && zc_unmap(t) != CL_SUCCESS && t->map_q) {
    clReleaseCommandQueue(t->map_q); /* the mapping ends with the buffer */
    t->map_q = NULL;
    t->mapped = NULL;
  }
  if (t->mirror && mirror_hold(t) == CL_SUCCESS) {
    clpin_host_free(t->mirror);
    mirror_drop(t);
  }
  if (t->buf)
    clReleaseMemObject(t->buf);
  clReleaseContext(t->ctx);
  free(t);
}

/* Allocate the mirror from the pool of q's context if it does not exist,
 * and hold it (mirror_hold) on success. */
static cl_int ensure_mirror(clpin_tensor *t, cl_command_queue q) {
  if (t->mirror)
    return mirror_hold(t);
  cl_context qctx;
  cl_int err = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
  if (err != CL_SUCCESS)
    return err;
  CLPIN__CHECK_IN(ACCESS_FN, qctx != t->ctx, CL_INVALID_CONTEXT, QUEUE_ELSEWHERE);
  clpin_pool *pool;
  err = clpin_pool_get(q, &pool);
  if (err != CL_SUCCESS)
    return err;
  t->mirror = clpin_host_alloc(pool, t->nbytes);
  t->mirror_pool = pool;
  if (!t->mirror)
    return CL_MEM_OBJECT_ALLOCATION_FAILURE;
  if (mirror_hold(t) == CL_SUCCESS)
    return CL_SUCCESS;
  t->mirror = NULL; /* released right after the allocation: freed with the pool */
  return CLPIN_ERR_POOL_RELEASED;
}

/* The upload of a non-blocking from_host must finish before a copy touches
 * the buffer from another queue, or before the tensor forgets it. */
static cl_int settle_upload(clpin_tensor *t) {
  if (!t->upload)
    return CL_SUCCESS;
  cl_int err = clpin__events_settle(1, &t->upload);
  if (err != CL_SUCCESS)
    return err;
  clReleaseEvent(t->upload);
  t->upload = NULL;
  return CL_SUCCESS;
}

cl_int clpin_tensor_host_data(clpin_tensor *t, cl_command_queue q, unsigned access, void **ptr) {
  CLPIN__CHECK_FORK();
  CLPIN__CHECK_WHY(!t || !ptr, CLPIN_ERR_INVALID_ARGUMENT, "the tensor or ptr is NULL");
  CLPIN__CHECK_WHY(!q, CL_INVALID_COMMAND_QUEUE, "the queue is NULL");
  CLPIN__CHECK_WHY(!access, CLPIN_ERR_INVALID_ARGUMENT, ACCESS_ZERO);
  cl_int err0 = CLPIN__CHECK_FLAGS(__func__, "access", access, ACCESS);
  if (err0 != CL_SUCCESS)
    return err0;
  if (t->nbytes == 0) {
    *ptr = NULL;
    return CL_SUCCESS;
  }
  if (t->zc) {
    cl_context qctx;
    cl_int err = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
    if (err != CL_SUCCESS)
      return err;
    CLPIN__CHECK_WHY(qctx != t->ctx, CL_INVALID_CONTEXT, QUEUE_ELSEWHERE);
    err = zc_map(t, q);
    if (err != CL_SUCCESS)
      return err;
    if (access & CLPIN_READ) {
      if (t->head == CLPIN_HEAD_DEVICE) {
        zc_count(t, CLPIN__BYTES_ZERO_COPY, t->nbytes); /* the copy D2H it needed not */
        t->head = CLPIN_HEAD_SYNCED;
      } else if (t->head == CLPIN_HEAD_UNINITIALIZED) {
        memset(t->mapped, 0, t->nbytes);
        t->head = CLPIN_HEAD_HOST;
      }
    }
    if (access & CLPIN_WRITE)
      t->head = CLPIN_HEAD_HOST;
    *ptr = t->mapped;
    return CL_SUCCESS;
  }
  bool fresh = !t->mirror;
  cl_int err = ensure_mirror(t, q);
  CLPIN__CHECK_WHY(err == CLPIN_ERR_POOL_RELEASED, err, MIRROR_GONE);
  if (err != CL_SUCCESS)
    return err;
  if (access & CLPIN_READ) {
    if (t->head == CLPIN_HEAD_DEVICE) {
      err = settle_upload(t);
      if (err == CL_SUCCESS)
        err = clpin_read(q, t->buf, 0, t->mirror, t->nbytes, CLPIN_PIN_MEMORY, 0, NULL, NULL);
      if (err != CL_SUCCESS)
        goto fail;
      t->head = CLPIN_HEAD_SYNCED;
    } else if (t->head == CLPIN_HEAD_UNINITIALIZED) {
      memset(t->mirror, 0, t->nbytes); /* Caffe's choice: unwritten data reads as zero */
      t->head = CLPIN_HEAD_HOST;
    }
  }
  if (access & CLPIN_WRITE)
    t->head = CLPIN_HEAD_HOST;
  *ptr = t->mirror;
  mirror_drop(t);
  return CL_SUCCESS;
fail:
  if (fresh) {
    clpin_host_free(t->mirror);
    mirror_drop(t);
    t->mirror = NULL;
  } else {
    mirror_drop(t);
  }
  return err;
}

cl_int clpin_tensor_device_data(clpin_tensor *t, cl_command_queue q, unsigned access, cl_mem *mem) {
  CLPIN__CHECK_FORK();
  CLPIN__CHECK_WHY(!t || !mem, CLPIN_ERR_INVALID_ARGUMENT, "the tensor or mem is NULL");
  CLPIN__CHECK_WHY(!q, CL_INVALID_COMMAND_QUEUE, "the queue is NULL");
  CLPIN__CHECK_WHY(!access, CLPIN_ERR_INVALID_ARGUMENT, ACCESS_ZERO);
  cl_int err = CLPIN__CHECK_FLAGS(__func__, "access", access, ACCESS);
  if (err != CL_SUCCESS)
    return err;
  err = t->zc ? zc_unmap(t) : CL_SUCCESS;
  if (err != CL_SUCCESS)
    return err;
  if (access & CLPIN_READ) {
    if (t->head == CLPIN_HEAD_HOST && t->zc) {
      zc_count(t, CLPIN__BYTES_ZERO_COPY, t->nbytes); /* the copy H2D it needed not */
      t->head = CLPIN_HEAD_SYNCED;
    } else if (t->head == CLPIN_HEAD_HOST) {
      err = mirror_hold(t);
      if (err != CL_SUCCESS)
        return err;
      err = settle_upload(t);
      if (err == CL_SUCCESS)
        err = clpin_write(q, t->buf, 0, t->mirror, t->nbytes, CLPIN_PIN_MEMORY, 0, NULL, NULL);
      mirror_drop(t);
      if (err != CL_SUCCESS)
        return err;
      t->head = CLPIN_HEAD_SYNCED;
    } else if (t->head == CLPIN_HEAD_UNINITIALIZED) {
      const cl_uchar zero = 0;
      cl_event done;
      err = clEnqueueFillBuffer(q, t->buf, &zero, 1, 0, t->nbytes, 0, NULL, &done);
      if (err != CL_SUCCESS)
        return err;
      err = clpin__events_settle(1, &done);
      clReleaseEvent(done);
      if (err != CL_SUCCESS)
        return err;
      t->head = CLPIN_HEAD_DEVICE;
    }
  }
  if ((access & CLPIN_WRITE) && t->nbytes)
    t->head = CLPIN_HEAD_DEVICE;
  *mem = t->buf;
  return CL_SUCCESS;
}
