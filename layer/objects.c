/* SPDX-License-Identifier: Apache-2.0 */
/* libclpin-layer.so: the objects the layer must know about, below the
 * routing (route.c) and the ICD loader's side (layer.c).
 *
 *   - the next stage of the ICD loader's chain (clpin__layer_next), through
 *     which the layer and its copy of clpin make every OpenCL call;
 *   - which contexts the application holds, and when it lets go of the last
 *     reference (the pool inside the layer holds references of its own, which
 *     must not keep a released context alive);
 *   - which host memory is mapped, backs a USE_HOST_PTR buffer or is SVM:
 *     transfers from or to it stay with the driver;
 *   - the markers the layer put in front of non-blocking routed transfers.
 * The calls that create and release those objects are wrapped here;
 * clpin__layer_objects_wrap puts the wrappers into the layer's table. */
#include "objects.h"

#include "clpin.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

CLPIN_LAYER_HIDDEN cl_icd_dispatch clpin__layer_next;

/* ---- markers in front of non-blocking transfers ---------------------------- */

typedef struct {
  cl_event ev;
  cl_context ctx;
} held_marker;

static pthread_mutex_t marker_mu = PTHREAD_MUTEX_INITIALIZER;
static held_marker *markers;
static size_t n_markers, cap_markers;

/* Kept until it completes: a marker that failed may still be listed by the
 * commands behind it (POCL frees a released failed event too early), so it
 * is released only with its context. */
void clpin__layer_hold_marker(cl_event ev, cl_context ctx) {
  pthread_mutex_lock(&marker_mu);
  if (n_markers == cap_markers) {
    size_t cap = cap_markers ? 2 * cap_markers : 32;
    held_marker *grown = realloc(markers, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&marker_mu);
      clpin__layer_next.clReleaseEvent(ev); /* the driver keeps what its commands still need */
      return;
    }
    markers = grown;
    cap_markers = cap;
  }
  markers[n_markers++] = (held_marker){ev, ctx};
  pthread_mutex_unlock(&marker_mu);
}

/* Release held markers: those of ctx (NULL: none) whatever their state, and
 * every completed one. Releases happen outside the lock. */
void clpin__layer_sweep_markers(cl_context ctx) {
  cl_event done[64];
  size_t n_done = 0;
  pthread_mutex_lock(&marker_mu);
  for (size_t i = 0; i < n_markers && n_done < 64;) {
    cl_int st = CL_QUEUED;
    bool mine = ctx && markers[i].ctx == ctx;
    if (!mine)
      clpin__layer_next.clGetEventInfo(markers[i].ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st,
                                       &st, NULL);
    if (mine || st == CL_COMPLETE) {
      done[n_done++] = markers[i].ev;
      markers[i] = markers[--n_markers];
    } else {
      i++;
    }
  }
  bool more = ctx && n_done == 64;
  pthread_mutex_unlock(&marker_mu);
  for (size_t i = 0; i < n_done; i++)
    clpin__layer_next.clReleaseEvent(done[i]);
  if (more)
    clpin__layer_sweep_markers(ctx);
}

/* ---- contexts -------------------------------------------------------------- */

/* One per context the application created and still holds directly. Its
 * queues and buffers may keep the context alive after its last
 * clReleaseContext; from then on the layer routes nothing on it, so no new
 * pool can be made for a context the application has let go of. */
typedef struct ctx_rec {
  cl_context ctx;
  long app_refs;  /* creates + retains - releases, as the application made them */
  int busy;       /* routed transfers running */
  bool releasing; /* its last release is under way: route nothing more */
  struct ctx_rec *next;
} ctx_rec;

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ctx_idle = PTHREAD_COND_INITIALIZER;
static ctx_rec *contexts;

static ctx_rec **find_ctx(cl_context ctx) {
  ctx_rec **pp = &contexts;
  while (*pp && (*pp)->ctx != ctx)
    pp = &(*pp)->next;
  return pp;
}

static void note_created(cl_context ctx) {
  if (!ctx)
    return;
  pthread_mutex_lock(&ctx_mu);
  ctx_rec **pp = find_ctx(ctx);
  if (!*pp) {
    /* No record: no routing on it, which is safe. */
    *pp = calloc(1, sizeof **pp);
    if (*pp)
      (*pp)->ctx = ctx;
  }
  if (*pp) {
    /* A record left by a context freed while its address is reused. */
    (*pp)->app_refs = 1;
    (*pp)->releasing = false;
  }
  pthread_mutex_unlock(&ctx_mu);
}

bool clpin__layer_ctx_enter(cl_context ctx) {
  pthread_mutex_lock(&ctx_mu);
  ctx_rec *r = *find_ctx(ctx);
  bool ok = r && !r->releasing && r->app_refs > 0;
  if (ok)
    r->busy++;
  pthread_mutex_unlock(&ctx_mu);
  return ok;
}

void clpin__layer_ctx_leave(cl_context ctx) {
  pthread_mutex_lock(&ctx_mu);
  ctx_rec *r = *find_ctx(ctx);
  if (r && --r->busy == 0)
    pthread_cond_broadcast(&ctx_idle);
  pthread_mutex_unlock(&ctx_mu);
}

static cl_context CL_API_CALL w_clCreateContext(
    const cl_context_properties *props, cl_uint nd, const cl_device_id *ds,
    void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *), void *ud, cl_int *err) {
  cl_context c = clpin__layer_next.clCreateContext(props, nd, ds, notify, ud, err);
  note_created(c);
  return c;
}

static cl_context CL_API_CALL w_clCreateContextFromType(
    const cl_context_properties *props, cl_device_type type,
    void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *), void *ud, cl_int *err) {
  cl_context c = clpin__layer_next.clCreateContextFromType(props, type, notify, ud, err);
  note_created(c);
  return c;
}

static cl_int CL_API_CALL w_clRetainContext(cl_context ctx) {
  cl_int err = clpin__layer_next.clRetainContext(ctx);
  if (err == CL_SUCCESS) {
    pthread_mutex_lock(&ctx_mu);
    ctx_rec *r = *find_ctx(ctx);
    if (r)
      r->app_refs++;
    pthread_mutex_unlock(&ctx_mu);
  }
  return err;
}

/* The application's last reference: the pool goes first (it drains its
 * transfers and releases its queue, blocks and events), then the
 * application's release, which now frees the context unless the
 * application's own queues or buffers still hold it. */
static cl_int CL_API_CALL w_clReleaseContext(cl_context ctx) {
  /* The count drops before the call, so that of two threads releasing at
   * once exactly one sees the last reference. */
  pthread_mutex_lock(&ctx_mu);
  ctx_rec *r = *find_ctx(ctx);
  bool last = r && --r->app_refs == 0;
  if (last) {
    r->releasing = true;
    while (r->busy)
      pthread_cond_wait(&ctx_idle, &ctx_mu);
  }
  pthread_mutex_unlock(&ctx_mu);
  if (last) {
    clpin_pool_release_context(ctx);
    clpin__layer_sweep_markers(ctx);
  }
  cl_int err = clpin__layer_next.clReleaseContext(ctx);
  if (r) {
    pthread_mutex_lock(&ctx_mu);
    ctx_rec **pp = find_ctx(ctx);
    if (*pp && err != CL_SUCCESS) {
      /* The driver refused: the application still holds what it held. */
      (*pp)->app_refs++;
      (*pp)->releasing = false;
    } else if (*pp && last) {
      ctx_rec *dead = *pp;
      *pp = dead->next;
      free(dead);
    }
    pthread_mutex_unlock(&ctx_mu);
  }
  return err;
}

/* ---- host memory the driver already knows ---------------------------------- */

typedef enum { RANGE_MAP, RANGE_USE_HOST_PTR, RANGE_SVM } range_kind;

typedef struct {
  uintptr_t lo, hi;  /* [lo, hi) */
  const void *owner; /* the cl_mem, or the SVM pointer */
  range_kind kind;
} host_range;

static pthread_mutex_t range_mu = PTHREAD_MUTEX_INITIALIZER;
static host_range *ranges;
static size_t n_ranges, cap_ranges;

static void add_range(const void *p, size_t n, const void *owner, range_kind kind) {
  if (!p || !n)
    return;
  pthread_mutex_lock(&range_mu);
  if (n_ranges == cap_ranges) {
    size_t cap = cap_ranges ? 2 * cap_ranges : 64;
    host_range *grown = realloc(ranges, cap * sizeof *grown);
    if (!grown) {
      /* Untracked memory may be routed although the driver knows it; the
       * transfer is still correct, only not the driver's own path. */
      pthread_mutex_unlock(&range_mu);
      return;
    }
    ranges = grown;
    cap_ranges = cap;
  }
  ranges[n_ranges++] = (host_range){(uintptr_t)p, (uintptr_t)p + n, owner, kind};
  pthread_mutex_unlock(&range_mu);
}

/* Drop the ranges of owner of one kind; start != NULL: only the one there. */
static void drop_ranges(const void *owner, range_kind kind, const void *start) {
  pthread_mutex_lock(&range_mu);
  for (size_t i = 0; i < n_ranges;) {
    host_range *h = &ranges[i];
    if (h->owner == owner && h->kind == kind && (!start || h->lo == (uintptr_t)start)) {
      *h = ranges[--n_ranges];
      if (start)
        break;
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&range_mu);
}

static bool owns_ranges(const void *owner) {
  bool found = false;
  pthread_mutex_lock(&range_mu);
  for (size_t i = 0; i < n_ranges && !found; i++)
    found = ranges[i].owner == owner && ranges[i].kind != RANGE_SVM;
  pthread_mutex_unlock(&range_mu);
  return found;
}

bool clpin__layer_host_claimed(const void *p, size_t n) {
  uintptr_t lo = (uintptr_t)p, hi = lo + n;
  bool hit = false;
  pthread_mutex_lock(&range_mu);
  for (size_t i = 0; i < n_ranges && !hit; i++)
    hit = ranges[i].lo < hi && lo < ranges[i].hi;
  pthread_mutex_unlock(&range_mu);
  return hit;
}

static cl_mem CL_API_CALL w_clCreateBuffer(cl_context ctx, cl_mem_flags flags, size_t size,
                                           void *host, cl_int *err) {
  cl_mem m = clpin__layer_next.clCreateBuffer(ctx, flags, size, host, err);
  if (m && (flags & CL_MEM_USE_HOST_PTR))
    add_range(host, size, m, RANGE_USE_HOST_PTR);
  return m;
}

static cl_mem CL_API_CALL w_clCreateBufferWithProperties(cl_context ctx,
                                                         const cl_mem_properties *props,
                                                         cl_mem_flags flags, size_t size,
                                                         void *host, cl_int *err) {
  cl_mem m = clpin__layer_next.clCreateBufferWithProperties(ctx, props, flags, size, host, err);
  if (m && (flags & CL_MEM_USE_HOST_PTR))
    add_range(host, size, m, RANGE_USE_HOST_PTR);
  return m;
}

/* A buffer whose host memory or maps the layer tracks forgets them with
 * its last reference. The count is read before the release: after it the
 * handle may be gone. A stale entry only sends transfers to the driver. */
static cl_int CL_API_CALL w_clReleaseMemObject(cl_mem m) {
  cl_uint refs = 0;
  bool tracked = m && owns_ranges(m);
  if (tracked)
    clpin__layer_next.clGetMemObjectInfo(m, CL_MEM_REFERENCE_COUNT, sizeof refs, &refs, NULL);
  cl_int err = clpin__layer_next.clReleaseMemObject(m);
  if (err == CL_SUCCESS && tracked && refs == 1) {
    drop_ranges(m, RANGE_USE_HOST_PTR, NULL);
    drop_ranges(m, RANGE_MAP, NULL);
  }
  return err;
}

static void *CL_API_CALL w_clEnqueueMapBuffer(cl_command_queue q, cl_mem m, cl_bool blocking,
                                              cl_map_flags f, size_t off, size_t n, cl_uint nw,
                                              const cl_event *wl, cl_event *ev, cl_int *err) {
  cl_int e = CL_SUCCESS;
  void *p = clpin__layer_next.clEnqueueMapBuffer(q, m, blocking, f, off, n, nw, wl, ev, &e);
  if (err)
    *err = e;
  if (e == CL_SUCCESS && p)
    add_range(p, n, m, RANGE_MAP);
  return p;
}

static cl_int CL_API_CALL w_clEnqueueUnmapMemObject(cl_command_queue q, cl_mem m, void *p,
                                                    cl_uint nw, const cl_event *wl, cl_event *ev) {
  cl_int err = clpin__layer_next.clEnqueueUnmapMemObject(q, m, p, nw, wl, ev);
  /* Forgotten when the unmap is enqueued, not when it runs: until then a
   * transfer from that memory is the application's race anyway. */
  if (err == CL_SUCCESS)
    drop_ranges(m, RANGE_MAP, p);
  return err;
}

static void *CL_API_CALL w_clSVMAlloc(cl_context ctx, cl_svm_mem_flags flags, size_t size,
                                      cl_uint align) {
  void *p = clpin__layer_next.clSVMAlloc(ctx, flags, size, align);
  add_range(p, size, p, RANGE_SVM);
  return p;
}

static void CL_API_CALL w_clSVMFree(cl_context ctx, void *p) {
  clpin__layer_next.clSVMFree(ctx, p);
  drop_ranges(p, RANGE_SVM, NULL);
}

/* ---- into the layer's table ------------------------------------------------- */

void clpin__layer_objects_wrap(cl_icd_dispatch *table) {
#define WRAP(name, fn)                                                                             \
  if (clpin__layer_next.name)                                                                      \
    table->name = fn;
  WRAP(clCreateContext, w_clCreateContext)
  WRAP(clCreateContextFromType, w_clCreateContextFromType)
  WRAP(clRetainContext, w_clRetainContext)
  WRAP(clReleaseContext, w_clReleaseContext)
  WRAP(clCreateBuffer, w_clCreateBuffer)
  WRAP(clCreateBufferWithProperties, w_clCreateBufferWithProperties)
  WRAP(clReleaseMemObject, w_clReleaseMemObject)
  WRAP(clEnqueueMapBuffer, w_clEnqueueMapBuffer)
  WRAP(clEnqueueUnmapMemObject, w_clEnqueueUnmapMemObject)
  WRAP(clSVMAlloc, w_clSVMAlloc)
  WRAP(clSVMFree, w_clSVMFree)
#undef WRAP
}
