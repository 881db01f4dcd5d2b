/* SPDX-License-Identifier: Apache-2.0 */
/*
 * faultlayer: an OpenCL loader layer that injects failures and counts live
 * objects. See faultlayer.h for what it does and how a test drives it.
 *
 * How a layer works (cl_loader_layers, as ocl-icd 2.3 implements it): the
 * loader dlopens every library named in OPENCL_LAYERS, asks clGetLayerInfo
 * for the layer API version, and calls clInitLayer with the dispatch table of
 * the next stage (the next layer, or the loader's own table that forwards to
 * each object's driver). The layer returns its own table; from then on every
 * OpenCL call the application makes goes through it first. Calls POCL makes
 * internally never reach the layer, only those made through libOpenCL.
 */
#include "faultlayer.h"

#include <CL/cl_layer.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Every entry point the layer wraps. Keep in sync with the wrappers below
 * and with init_dispatch(). */
#define FL_ENTRIES(X)                                                                              \
  X(clGetDeviceInfo)                                                                               \
  X(clCreateContext)                                                                               \
  X(clCreateContextFromType)                                                                       \
  X(clRetainContext)                                                                               \
  X(clReleaseContext)                                                                              \
  X(clGetContextInfo)                                                                              \
  X(clCreateCommandQueue)                                                                          \
  X(clCreateCommandQueueWithProperties)                                                            \
  X(clRetainCommandQueue)                                                                          \
  X(clReleaseCommandQueue)                                                                         \
  X(clGetCommandQueueInfo)                                                                         \
  X(clCreateBuffer)                                                                                \
  X(clCreateSubBuffer)                                                                             \
  X(clRetainMemObject)                                                                             \
  X(clReleaseMemObject)                                                                            \
  X(clGetMemObjectInfo)                                                                            \
  X(clCreateProgramWithSource)                                                                     \
  X(clBuildProgram)                                                                                \
  X(clRetainProgram)                                                                               \
  X(clReleaseProgram)                                                                              \
  X(clCreateKernel)                                                                                \
  X(clRetainKernel)                                                                                \
  X(clReleaseKernel)                                                                               \
  X(clSetKernelArg)                                                                                \
  X(clCreateUserEvent)                                                                             \
  X(clSetUserEventStatus)                                                                          \
  X(clSetEventCallback)                                                                            \
  X(clRetainEvent)                                                                                 \
  X(clReleaseEvent)                                                                                \
  X(clWaitForEvents)                                                                               \
  X(clGetEventInfo)                                                                                \
  X(clGetEventProfilingInfo)                                                                       \
  X(clFlush)                                                                                       \
  X(clFinish)                                                                                      \
  X(clEnqueueReadBuffer)                                                                           \
  X(clEnqueueWriteBuffer)                                                                          \
  X(clEnqueueReadBufferRect)                                                                       \
  X(clEnqueueWriteBufferRect)                                                                      \
  X(clEnqueueReadImage)                                                                            \
  X(clEnqueueWriteImage)                                                                           \
  X(clEnqueueCopyBuffer)                                                                           \
  X(clEnqueueFillBuffer)                                                                           \
  X(clEnqueueMapBuffer)                                                                            \
  X(clEnqueueUnmapMemObject)                                                                       \
  X(clEnqueueNDRangeKernel)                                                                        \
  X(clEnqueueMarker)                                                                               \
  X(clEnqueueMarkerWithWaitList)                                                                   \
  X(clEnqueueBarrierWithWaitList)                                                                  \
  X(clEnqueueWaitForEvents)

enum {
#define FL_ENUM(name) E_##name,
  FL_ENTRIES(FL_ENUM)
#undef FL_ENUM
      E_COUNT
};

static const char *const entry_names[E_COUNT] = {
#define FL_NAME(name) #name,
    FL_ENTRIES(FL_NAME)
#undef FL_NAME
};

static const char *const kind_names[FAULTLAYER_KIND_COUNT] = {"mem",     "event",   "queue",
                                                              "context", "program", "kernel"};

/* The next stage's dispatch table, and ours. */
static cl_icd_dispatch next;
static cl_icd_dispatch table;
static int active;

typedef struct {
  void *handle;
  faultlayer_kind kind;
  long refs;
} live_obj;

typedef struct {
  void *handle;
  faultlayer_kind kind;
} refused_release;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long calls[E_COUNT];
static int armed_entry = -1;
static unsigned long armed_first, armed_last; /* call numbers; last 0: no end */
static cl_int armed_code;
static unsigned long fired;
static long live_refs[FAULTLAYER_KIND_COUNT];
static unsigned long bad_releases;
static live_obj *objs;
static size_t n_objs, cap_objs;
static refused_release *refused; /* refused releases not settled yet */
static size_t n_refused, cap_refused;
static unsigned long refused_total;

/* ---- fault decision ------------------------------------------------------ */

/* Count one call of entry; true (and *code) when it must fail. */
static int inject(int entry, cl_int *code) {
  int fail = 0;
  pthread_mutex_lock(&mu);
  unsigned long n = ++calls[entry];
  if (entry == armed_entry && n >= armed_first && (armed_last == 0 || n <= armed_last)) {
    fail = 1;
    fired++;
    *code = armed_code;
  }
  pthread_mutex_unlock(&mu);
  return fail;
}

/* ---- object tracking ----------------------------------------------------- */

static live_obj *find_obj(const void *h) {
  for (size_t i = 0; i < n_objs; i++)
    if (objs[i].handle == h)
      return &objs[i];
  return NULL;
}

/* One more reference to h (a create or a retain). */
static void track_ref(faultlayer_kind kind, void *h) {
  if (!h)
    return;
  pthread_mutex_lock(&mu);
  live_obj *o = find_obj(h);
  if (!o && n_objs == cap_objs) {
    size_t cap = cap_objs ? 2 * cap_objs : 256;
    live_obj *grown = realloc(objs, cap * sizeof *grown);
    if (!grown) {
      /* Cannot track it: count it as live anyway so the totals stay right. */
      live_refs[kind]++;
      pthread_mutex_unlock(&mu);
      return;
    }
    objs = grown;
    cap_objs = cap;
  }
  if (!o) {
    o = &objs[n_objs++];
    o->handle = h;
    o->kind = kind;
    o->refs = 0;
  }
  o->refs++;
  live_refs[kind]++;
  pthread_mutex_unlock(&mu);
}

/* One reference to h dropped (a successful release). The lookup happens
 * after the driver call, so a handle address reused meanwhile by a new object
 * still nets out: the counts are per address. */
static void track_unref(faultlayer_kind kind, void *h) {
  pthread_mutex_lock(&mu);
  live_obj *o = find_obj(h);
  if (!o) {
    bad_releases++;
  } else {
    live_refs[o->kind]--;
    if (--o->refs == 0)
      *o = objs[--n_objs];
  }
  (void)kind;
  pthread_mutex_unlock(&mu);
}

static void note_refused(faultlayer_kind kind, void *h) {
  pthread_mutex_lock(&mu);
  refused_total++;
  if (n_refused == cap_refused) {
    size_t cap = cap_refused ? 2 * cap_refused : 16;
    refused_release *grown = realloc(refused, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&mu);
      return;
    }
    refused = grown;
    cap_refused = cap;
  }
  refused[n_refused].handle = h;
  refused[n_refused].kind = kind;
  n_refused++;
  pthread_mutex_unlock(&mu);
}

/* ---- hold mode (FAULTLAYER_HOLD) ----------------------------------------- */

/* A lazy implementation, made of an eager one: each queue gets a gate, a
 * user event every command enqueued on the queue waits for, set complete
 * only when the OpenCL specification ("Flush and Finish") says the queue's
 * commands must reach the device: clFlush, clFinish, a blocking enqueue on
 * the queue, clReleaseCommandQueue, or clWaitForEvents on one of its
 * events. A program that waits for (or polls, or is called back by) a
 * command it never flushed then hangs here, on POCL, as it would on rusticl.
 *
 * The gates have a lock of their own: clRetainEvent is called under it (a
 * flush may otherwise release the gate between lookup and retain), which is
 * safe since retaining runs no callback. Gates are made through the next
 * stage, untracked, so the live counts see only the program's objects. */
static int hold_on;
static pthread_mutex_t gmu = PTHREAD_MUTEX_INITIALIZER;
static struct gate_slot {
  cl_command_queue q;
  cl_event gate;
} * gates;
static size_t n_gates, cap_gates;
static unsigned long held_total, opened_total, empty_markers;

static struct gate_slot *gate_slot_of(cl_command_queue q) {
  for (size_t i = 0; i < n_gates; i++)
    if (gates[i].q == q)
      return &gates[i];
  if (n_gates == cap_gates) {
    size_t cap = cap_gates ? 2 * cap_gates : 64;
    struct gate_slot *grown = realloc(gates, cap * sizeof *grown);
    if (!grown)
      return NULL;
    gates = grown;
    cap_gates = cap;
  }
  gates[n_gates].q = q;
  gates[n_gates].gate = NULL;
  return &gates[n_gates++];
}

/* q's gate, retained for the caller (release it with next.clReleaseEvent),
 * made when q has none; NULL when hold mode is off or no gate can be made
 * (the command then runs unheld). */
static cl_event gate_get(cl_command_queue q) {
  if (!hold_on || !q)
    return NULL;
  cl_event made = NULL;
  for (int round = 0; round < 2; round++) {
    pthread_mutex_lock(&gmu);
    struct gate_slot *g = gate_slot_of(q);
    if (g && !g->gate && made) {
      g->gate = made;
      made = NULL;
    }
    cl_event gate = g ? g->gate : NULL;
    if (gate)
      next.clRetainEvent(gate);
    pthread_mutex_unlock(&gmu);
    if (made) /* another thread installed one first */
      next.clReleaseEvent(made);
    if (gate || !g)
      return gate;
    cl_context ctx = NULL;
    cl_int err = next.clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
    made = err == CL_SUCCESS ? next.clCreateUserEvent(ctx, &err) : NULL;
    if (!made)
      return NULL;
  }
  next.clReleaseEvent(made);
  return NULL;
}

/* Let q's held commands go (the queue was flushed, explicitly or not). */
static void gate_open(cl_command_queue q) {
  if (!hold_on || !q)
    return;
  pthread_mutex_lock(&gmu);
  cl_event gate = NULL;
  for (size_t i = 0; i < n_gates; i++)
    if (gates[i].q == q) {
      gate = gates[i].gate;
      gates[i].gate = NULL;
    }
  if (gate)
    opened_total++;
  pthread_mutex_unlock(&gmu);
  if (gate) {
    next.clSetUserEventStatus(gate, CL_COMPLETE);
    next.clReleaseEvent(gate);
  }
}

/* A wait list with q's gate appended (held->list), for a command that does
 * not block; a blocking one flushes q first, as the specification says. */
typedef struct {
  cl_event gate;
  cl_event *list;
  cl_event small[8];
} held_list;

static void hold_begin(cl_command_queue q, cl_bool blocking, cl_uint *nw, const cl_event **wl,
                       held_list *h) {
  h->gate = NULL;
  h->list = NULL;
  if (!hold_on)
    return;
  if (blocking) {
    gate_open(q);
    return;
  }
  h->gate = gate_get(q);
  if (!h->gate)
    return;
  cl_uint n = *wl ? *nw : 0;
  h->list =
      n + 1 <= sizeof h->small / sizeof h->small[0] ? h->small : malloc((n + 1) * sizeof *h->list);
  if (!h->list) {
    next.clReleaseEvent(h->gate);
    h->gate = NULL;
    return;
  }
  if (n)
    memcpy(h->list, *wl, n * sizeof *h->list);
  h->list[n] = h->gate;
  *nw = n + 1;
  *wl = h->list;
  pthread_mutex_lock(&gmu);
  held_total++;
  pthread_mutex_unlock(&gmu);
}

static void hold_end(held_list *h) {
  if (h->list && h->list != h->small)
    free(h->list);
  if (h->gate)
    next.clReleaseEvent(h->gate);
}

/* A marker or barrier with an empty wait list waits for every command
 * before it on q: put a held marker in front of it (through the next
 * stage, uncounted), so that it is held too without changing what it
 * waits for on an out-of-order queue. */
static void hold_in_front(cl_command_queue q) {
  cl_event gate = gate_get(q);
  if (!gate)
    return;
  cl_event front = NULL;
  if (next.clEnqueueMarkerWithWaitList(q, 1, &gate, &front) == CL_SUCCESS) {
    next.clReleaseEvent(front);
    pthread_mutex_lock(&gmu);
    held_total++;
    pthread_mutex_unlock(&gmu);
  }
  next.clReleaseEvent(gate);
}

/* ---- wrappers ------------------------------------------------------------ */

/* A function returning cl_int that creates nothing. */
#define FAIL_OR(entry)                                                                             \
  do {                                                                                             \
    cl_int code_;                                                                                  \
    if (inject(E_##entry, &code_))                                                                 \
      return code_;                                                                                \
  } while (0)

/* A create function: NULL and *errcode_ret on an injected failure. */
#define FAIL_NULL_OR(entry, errcode_ret)                                                           \
  do {                                                                                             \
    cl_int code_;                                                                                  \
    if (inject(E_##entry, &code_)) {                                                               \
      if (errcode_ret)                                                                             \
        *(errcode_ret) = code_;                                                                    \
      return NULL;                                                                                 \
    }                                                                                              \
  } while (0)

/* An enqueue on q that may hand out an event; its wait list is the
 * wrapper's (nw, wl), which hold mode extends with q's gate. */
#define ENQUEUE(entry, q, blocking, event, call)                                                   \
  do {                                                                                             \
    FAIL_OR(entry);                                                                                \
    held_list h_;                                                                                  \
    hold_begin(q, blocking, &nw, &wl, &h_);                                                        \
    cl_int r_ = next.call;                                                                         \
    hold_end(&h_);                                                                                 \
    if (r_ == CL_SUCCESS && (event))                                                               \
      track_ref(FAULTLAYER_EVENT, *(event));                                                       \
    return r_;                                                                                     \
  } while (0)

#define RETAIN(entry, kind, h)                                                                     \
  do {                                                                                             \
    FAIL_OR(entry);                                                                                \
    cl_int r_ = next.entry(h);                                                                     \
    if (r_ == CL_SUCCESS)                                                                          \
      track_ref(kind, h);                                                                          \
    return r_;                                                                                     \
  } while (0)

#define RELEASE(entry, kind, h)                                                                    \
  do {                                                                                             \
    cl_int code_;                                                                                  \
    if (inject(E_##entry, &code_)) {                                                               \
      note_refused(kind, h);                                                                       \
      return code_;                                                                                \
    }                                                                                              \
    cl_int r_ = next.entry(h);                                                                     \
    if (r_ == CL_SUCCESS)                                                                          \
      track_unref(kind, h);                                                                        \
    return r_;                                                                                     \
  } while (0)

static cl_int CL_API_CALL w_clGetDeviceInfo(cl_device_id d, cl_device_info p, size_t n, void *v,
                                            size_t *r) {
  FAIL_OR(clGetDeviceInfo);
  return next.clGetDeviceInfo(d, p, n, v, r);
}

static cl_context CL_API_CALL w_clCreateContext(
    const cl_context_properties *props, cl_uint nd, const cl_device_id *ds,
    void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *), void *ud, cl_int *err) {
  FAIL_NULL_OR(clCreateContext, err);
  cl_context c = next.clCreateContext(props, nd, ds, notify, ud, err);
  track_ref(FAULTLAYER_CONTEXT, c);
  return c;
}

static cl_context CL_API_CALL w_clCreateContextFromType(
    const cl_context_properties *props, cl_device_type t,
    void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *), void *ud, cl_int *err) {
  FAIL_NULL_OR(clCreateContextFromType, err);
  cl_context c = next.clCreateContextFromType(props, t, notify, ud, err);
  track_ref(FAULTLAYER_CONTEXT, c);
  return c;
}

static cl_int CL_API_CALL w_clRetainContext(cl_context c) {
  RETAIN(clRetainContext, FAULTLAYER_CONTEXT, c);
}
static cl_int CL_API_CALL w_clReleaseContext(cl_context c) {
  RELEASE(clReleaseContext, FAULTLAYER_CONTEXT, c);
}

static cl_int CL_API_CALL w_clGetContextInfo(cl_context c, cl_context_info p, size_t n, void *v,
                                             size_t *r) {
  FAIL_OR(clGetContextInfo);
  return next.clGetContextInfo(c, p, n, v, r);
}

static cl_command_queue CL_API_CALL w_clCreateCommandQueue(cl_context c, cl_device_id d,
                                                           cl_command_queue_properties p,
                                                           cl_int *err) {
  FAIL_NULL_OR(clCreateCommandQueue, err);
  cl_command_queue q = next.clCreateCommandQueue(c, d, p, err);
  track_ref(FAULTLAYER_QUEUE, q);
  return q;
}

static cl_command_queue CL_API_CALL w_clCreateCommandQueueWithProperties(
    cl_context c, cl_device_id d, const cl_queue_properties *p, cl_int *err) {
  FAIL_NULL_OR(clCreateCommandQueueWithProperties, err);
  cl_command_queue q = next.clCreateCommandQueueWithProperties(c, d, p, err);
  track_ref(FAULTLAYER_QUEUE, q);
  return q;
}

static cl_int CL_API_CALL w_clRetainCommandQueue(cl_command_queue q) {
  RETAIN(clRetainCommandQueue, FAULTLAYER_QUEUE, q);
}
static cl_int CL_API_CALL w_clReleaseCommandQueue(cl_command_queue q) {
  gate_open(q); /* an implicit flush, and the queue may go */
  RELEASE(clReleaseCommandQueue, FAULTLAYER_QUEUE, q);
}

static cl_int CL_API_CALL w_clGetCommandQueueInfo(cl_command_queue q, cl_command_queue_info p,
                                                  size_t n, void *v, size_t *r) {
  FAIL_OR(clGetCommandQueueInfo);
  return next.clGetCommandQueueInfo(q, p, n, v, r);
}

static cl_mem CL_API_CALL w_clCreateBuffer(cl_context c, cl_mem_flags f, size_t n, void *host,
                                           cl_int *err) {
  FAIL_NULL_OR(clCreateBuffer, err);
  cl_mem m = next.clCreateBuffer(c, f, n, host, err);
  track_ref(FAULTLAYER_MEM, m);
  return m;
}

static cl_mem CL_API_CALL w_clCreateSubBuffer(cl_mem b, cl_mem_flags f, cl_buffer_create_type t,
                                              const void *info, cl_int *err) {
  FAIL_NULL_OR(clCreateSubBuffer, err);
  cl_mem m = next.clCreateSubBuffer(b, f, t, info, err);
  track_ref(FAULTLAYER_MEM, m);
  return m;
}

static cl_int CL_API_CALL w_clRetainMemObject(cl_mem m) {
  RETAIN(clRetainMemObject, FAULTLAYER_MEM, m);
}
static cl_int CL_API_CALL w_clReleaseMemObject(cl_mem m) {
  RELEASE(clReleaseMemObject, FAULTLAYER_MEM, m);
}

static cl_int CL_API_CALL w_clGetMemObjectInfo(cl_mem m, cl_mem_info p, size_t n, void *v,
                                               size_t *r) {
  FAIL_OR(clGetMemObjectInfo);
  return next.clGetMemObjectInfo(m, p, n, v, r);
}

static cl_program CL_API_CALL w_clCreateProgramWithSource(cl_context c, cl_uint count,
                                                          const char **strings,
                                                          const size_t *lengths, cl_int *err) {
  FAIL_NULL_OR(clCreateProgramWithSource, err);
  cl_program p = next.clCreateProgramWithSource(c, count, strings, lengths, err);
  track_ref(FAULTLAYER_PROGRAM, p);
  return p;
}

static cl_int CL_API_CALL w_clBuildProgram(cl_program p, cl_uint nd, const cl_device_id *ds,
                                           const char *opts,
                                           void(CL_CALLBACK *notify)(cl_program, void *),
                                           void *ud) {
  FAIL_OR(clBuildProgram);
  return next.clBuildProgram(p, nd, ds, opts, notify, ud);
}

static cl_int CL_API_CALL w_clRetainProgram(cl_program p) {
  RETAIN(clRetainProgram, FAULTLAYER_PROGRAM, p);
}
static cl_int CL_API_CALL w_clReleaseProgram(cl_program p) {
  RELEASE(clReleaseProgram, FAULTLAYER_PROGRAM, p);
}

static cl_kernel CL_API_CALL w_clCreateKernel(cl_program p, const char *name, cl_int *err) {
  FAIL_NULL_OR(clCreateKernel, err);
  cl_kernel k = next.clCreateKernel(p, name, err);
  track_ref(FAULTLAYER_KERNEL, k);
  return k;
}

static cl_int CL_API_CALL w_clRetainKernel(cl_kernel k) {
  RETAIN(clRetainKernel, FAULTLAYER_KERNEL, k);
}
static cl_int CL_API_CALL w_clReleaseKernel(cl_kernel k) {
  RELEASE(clReleaseKernel, FAULTLAYER_KERNEL, k);
}

static cl_int CL_API_CALL w_clSetKernelArg(cl_kernel k, cl_uint i, size_t n, const void *v) {
  FAIL_OR(clSetKernelArg);
  return next.clSetKernelArg(k, i, n, v);
}

static cl_event CL_API_CALL w_clCreateUserEvent(cl_context c, cl_int *err) {
  FAIL_NULL_OR(clCreateUserEvent, err);
  cl_event e = next.clCreateUserEvent(c, err);
  track_ref(FAULTLAYER_EVENT, e);
  return e;
}

static cl_int CL_API_CALL w_clSetUserEventStatus(cl_event e, cl_int status) {
  FAIL_OR(clSetUserEventStatus);
  return next.clSetUserEventStatus(e, status);
}

static cl_int CL_API_CALL w_clSetEventCallback(cl_event e, cl_int type,
                                               void(CL_CALLBACK *fn)(cl_event, cl_int, void *),
                                               void *ud) {
  FAIL_OR(clSetEventCallback);
  return next.clSetEventCallback(e, type, fn, ud);
}

static cl_int CL_API_CALL w_clRetainEvent(cl_event e) {
  RETAIN(clRetainEvent, FAULTLAYER_EVENT, e);
}
static cl_int CL_API_CALL w_clReleaseEvent(cl_event e) {
  RELEASE(clReleaseEvent, FAULTLAYER_EVENT, e);
}

/* In hold mode, the wait flushes the queues of the events it names (the
 * specification lists clWaitForEvents among the implicit flushes), not the
 * queues of what those events wait for in turn. */
static cl_int CL_API_CALL w_clWaitForEvents(cl_uint n, const cl_event *es) {
  FAIL_OR(clWaitForEvents);
  for (cl_uint i = 0; hold_on && es && i < n; i++) {
    cl_command_queue q = NULL;
    if (next.clGetEventInfo(es[i], CL_EVENT_COMMAND_QUEUE, sizeof q, &q, NULL) == CL_SUCCESS)
      gate_open(q);
  }
  return next.clWaitForEvents(n, es);
}

static cl_int CL_API_CALL w_clGetEventInfo(cl_event e, cl_event_info p, size_t n, void *v,
                                           size_t *r) {
  FAIL_OR(clGetEventInfo);
  return next.clGetEventInfo(e, p, n, v, r);
}

static cl_int CL_API_CALL w_clGetEventProfilingInfo(cl_event e, cl_profiling_info p, size_t n,
                                                    void *v, size_t *r) {
  FAIL_OR(clGetEventProfilingInfo);
  return next.clGetEventProfilingInfo(e, p, n, v, r);
}

static cl_int CL_API_CALL w_clFlush(cl_command_queue q) {
  FAIL_OR(clFlush);
  gate_open(q);
  return next.clFlush(q);
}
static cl_int CL_API_CALL w_clFinish(cl_command_queue q) {
  FAIL_OR(clFinish);
  gate_open(q);
  return next.clFinish(q);
}

static cl_int CL_API_CALL w_clEnqueueReadBuffer(cl_command_queue q, cl_mem b, cl_bool blocking,
                                                size_t off, size_t n, void *p, cl_uint nw,
                                                const cl_event *wl, cl_event *ev) {
  ENQUEUE(clEnqueueReadBuffer, q, blocking, ev,
          clEnqueueReadBuffer(q, b, blocking, off, n, p, nw, wl, ev));
}

static cl_int CL_API_CALL w_clEnqueueWriteBuffer(cl_command_queue q, cl_mem b, cl_bool blocking,
                                                 size_t off, size_t n, const void *p, cl_uint nw,
                                                 const cl_event *wl, cl_event *ev) {
  ENQUEUE(clEnqueueWriteBuffer, q, blocking, ev,
          clEnqueueWriteBuffer(q, b, blocking, off, n, p, nw, wl, ev));
}

static cl_int CL_API_CALL w_clEnqueueReadBufferRect(cl_command_queue q, cl_mem b, cl_bool blocking,
                                                    const size_t *bo, const size_t *ho,
                                                    const size_t *reg, size_t brp, size_t bsp,
                                                    size_t hrp, size_t hsp, void *p, cl_uint nw,
                                                    const cl_event *wl, cl_event *ev) {
  ENQUEUE(clEnqueueReadBufferRect, q, blocking, ev,
          clEnqueueReadBufferRect(q, b, blocking, bo, ho, reg, brp, bsp, hrp, hsp, p, nw, wl, ev));
}

static cl_int CL_API_CALL w_clEnqueueWriteBufferRect(cl_command_queue q, cl_mem b, cl_bool blocking,
                                                     const size_t *bo, const size_t *ho,
                                                     const size_t *reg, size_t brp, size_t bsp,
                                                     size_t hrp, size_t hsp, const void *p,
                                                     cl_uint nw, const cl_event *wl, cl_event *ev) {
  ENQUEUE(clEnqueueWriteBufferRect, q, blocking, ev,
          clEnqueueWriteBufferRect(q, b, blocking, bo, ho, reg, brp, bsp, hrp, hsp, p, nw, wl, ev));
}

static cl_int CL_API_CALL w_clEnqueueReadImage(cl_command_queue q, cl_mem m, cl_bool blocking,
                                               const size_t *o, const size_t *reg, size_t rp,
                                               size_t sp, void *p, cl_uint nw, const cl_event *wl,
                                               cl_event *ev) {
  ENQUEUE(clEnqueueReadImage, q, blocking, ev,
          clEnqueueReadImage(q, m, blocking, o, reg, rp, sp, p, nw, wl, ev));
}

static cl_int CL_API_CALL w_clEnqueueWriteImage(cl_command_queue q, cl_mem m, cl_bool blocking,
                                                const size_t *o, const size_t *reg, size_t rp,
                                                size_t sp, const void *p, cl_uint nw,
                                                const cl_event *wl, cl_event *ev) {
  ENQUEUE(clEnqueueWriteImage, q, blocking, ev,
          clEnqueueWriteImage(q, m, blocking, o, reg, rp, sp, p, nw, wl, ev));
}

static cl_int CL_API_CALL w_clEnqueueCopyBuffer(cl_command_queue q, cl_mem s, cl_mem d, size_t so,
                                                size_t dof, size_t n, cl_uint nw,
                                                const cl_event *wl, cl_event *ev) {
  ENQUEUE(clEnqueueCopyBuffer, q, CL_FALSE, ev,
          clEnqueueCopyBuffer(q, s, d, so, dof, n, nw, wl, ev));
}

static cl_int CL_API_CALL w_clEnqueueFillBuffer(cl_command_queue q, cl_mem b, const void *pat,
                                                size_t ps, size_t off, size_t n, cl_uint nw,
                                                const cl_event *wl, cl_event *ev) {
  ENQUEUE(clEnqueueFillBuffer, q, CL_FALSE, ev,
          clEnqueueFillBuffer(q, b, pat, ps, off, n, nw, wl, ev));
}

/* ---- moved maps (faultlayer_move_next_map) ------------------------------- */

/* A blocking map the test asked to move returns a copy of the driver's
 * mapping at another address; its unmap copies the bytes back and unmaps the
 * driver's pointer. Under mu. */
#define MOVED_MAX 16
static int move_next_map;
static struct {
  void *shadow, *real;
  size_t n;
} moved[MOVED_MAX];
static size_t n_moved;

FAULTLAYER_API void faultlayer_move_next_map(void) {
  pthread_mutex_lock(&mu);
  move_next_map = 1;
  pthread_mutex_unlock(&mu);
}

static void *move_map(void *real, size_t n) {
  pthread_mutex_lock(&mu);
  int take = move_next_map && n_moved < MOVED_MAX;
  move_next_map = take ? 0 : move_next_map;
  void *shadow = take ? malloc(n) : NULL;
  if (shadow) {
    memcpy(shadow, real, n);
    moved[n_moved].shadow = shadow;
    moved[n_moved].real = real;
    moved[n_moved].n = n;
    n_moved++;
  }
  pthread_mutex_unlock(&mu);
  return shadow ? shadow : real;
}

static void *unmove_map(void *p) {
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < n_moved; i++)
    if (moved[i].shadow == p) {
      memcpy(moved[i].real, p, moved[i].n);
      free(p);
      p = moved[i].real;
      moved[i] = moved[--n_moved];
      break;
    }
  pthread_mutex_unlock(&mu);
  return p;
}

static void *CL_API_CALL w_clEnqueueMapBuffer(cl_command_queue q, cl_mem b, cl_bool blocking,
                                              cl_map_flags f, size_t off, size_t n, cl_uint nw,
                                              const cl_event *wl, cl_event *ev, cl_int *err) {
  FAIL_NULL_OR(clEnqueueMapBuffer, err);
  cl_int e = CL_SUCCESS;
  held_list h;
  hold_begin(q, blocking, &nw, &wl, &h);
  void *p = next.clEnqueueMapBuffer(q, b, blocking, f, off, n, nw, wl, ev, &e);
  hold_end(&h);
  if (err)
    *err = e;
  if (e == CL_SUCCESS && ev)
    track_ref(FAULTLAYER_EVENT, *ev);
  if (e == CL_SUCCESS && p && blocking)
    p = move_map(p, n);
  return p;
}

static cl_int CL_API_CALL w_clEnqueueUnmapMemObject(cl_command_queue q, cl_mem m, void *p,
                                                    cl_uint nw, const cl_event *wl, cl_event *ev) {
  p = unmove_map(p);
  ENQUEUE(clEnqueueUnmapMemObject, q, CL_FALSE, ev, clEnqueueUnmapMemObject(q, m, p, nw, wl, ev));
}

static cl_int CL_API_CALL w_clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dim,
                                                   const size_t *go, const size_t *gs,
                                                   const size_t *ls, cl_uint nw, const cl_event *wl,
                                                   cl_event *ev) {
  ENQUEUE(clEnqueueNDRangeKernel, q, CL_FALSE, ev,
          clEnqueueNDRangeKernel(q, k, dim, go, gs, ls, nw, wl, ev));
}

/* An empty wait list: counted (faultlayer_empty_markers) and, in hold
 * mode, a held marker put in front instead of the gate in the list, which
 * would change what the command waits for. */
static void empty_list_command(cl_command_queue q, int marker) {
  if (marker) {
    pthread_mutex_lock(&gmu);
    empty_markers++;
    pthread_mutex_unlock(&gmu);
  }
  if (hold_on)
    hold_in_front(q);
}

static cl_int CL_API_CALL w_clEnqueueMarker(cl_command_queue q, cl_event *ev) {
  FAIL_OR(clEnqueueMarker);
  empty_list_command(q, 1);
  cl_int r = next.clEnqueueMarker(q, ev);
  if (r == CL_SUCCESS && ev)
    track_ref(FAULTLAYER_EVENT, *ev);
  return r;
}

static cl_int CL_API_CALL w_clEnqueueMarkerWithWaitList(cl_command_queue q, cl_uint nw,
                                                        const cl_event *wl, cl_event *ev) {
  if (nw == 0 || !wl) {
    FAIL_OR(clEnqueueMarkerWithWaitList);
    empty_list_command(q, 1);
    cl_int r = next.clEnqueueMarkerWithWaitList(q, nw, wl, ev);
    if (r == CL_SUCCESS && ev)
      track_ref(FAULTLAYER_EVENT, *ev);
    return r;
  }
  ENQUEUE(clEnqueueMarkerWithWaitList, q, CL_FALSE, ev, clEnqueueMarkerWithWaitList(q, nw, wl, ev));
}

static cl_int CL_API_CALL w_clEnqueueBarrierWithWaitList(cl_command_queue q, cl_uint nw,
                                                         const cl_event *wl, cl_event *ev) {
  if (nw == 0 || !wl) {
    FAIL_OR(clEnqueueBarrierWithWaitList);
    empty_list_command(q, 0);
    cl_int r = next.clEnqueueBarrierWithWaitList(q, nw, wl, ev);
    if (r == CL_SUCCESS && ev)
      track_ref(FAULTLAYER_EVENT, *ev);
    return r;
  }
  ENQUEUE(clEnqueueBarrierWithWaitList, q, CL_FALSE, ev,
          clEnqueueBarrierWithWaitList(q, nw, wl, ev));
}

static cl_int CL_API_CALL w_clEnqueueWaitForEvents(cl_command_queue q, cl_uint n,
                                                   const cl_event *es) {
  FAIL_OR(clEnqueueWaitForEvents);
  return next.clEnqueueWaitForEvents(q, n, es);
}

/* ---- the layer interface ------------------------------------------------- */

static void arm_from_env(void);
static void report_at_exit(void);

FAULTLAYER_API CL_API_ENTRY cl_int CL_API_CALL clGetLayerInfo(cl_layer_info param, size_t size,
                                                              void *value, size_t *size_ret) {
  switch (param) {
  case CL_LAYER_API_VERSION: {
    cl_layer_api_version v = CL_LAYER_API_VERSION_100;
    if (value) {
      if (size < sizeof v)
        return CL_INVALID_VALUE;
      memcpy(value, &v, sizeof v);
    }
    if (size_ret)
      *size_ret = sizeof v;
    return CL_SUCCESS;
  }
  case CL_LAYER_NAME: {
    static const char name[] = "clpin fault injection layer";
    if (value) {
      if (size < sizeof name)
        return CL_INVALID_VALUE;
      memcpy(value, name, sizeof name);
    }
    if (size_ret)
      *size_ret = sizeof name;
    return CL_SUCCESS;
  }
  default: return CL_INVALID_VALUE;
  }
}

FAULTLAYER_API CL_API_ENTRY cl_int CL_API_CALL clInitLayer(cl_uint num_entries,
                                                           const cl_icd_dispatch *target,
                                                           cl_uint *num_entries_ret,
                                                           const cl_icd_dispatch **dispatch_ret) {
  const cl_uint ours = (cl_uint)(sizeof(cl_icd_dispatch) / sizeof(void *));
  if (!target || !num_entries_ret || !dispatch_ret)
    return CL_INVALID_VALUE;
  /* The loader may know fewer entries than our headers: copy what it has,
   * leave the rest NULL, and only wrap entries the next stage provides. */
  memset(&next, 0, sizeof next);
  memcpy(&next, target, (num_entries < ours ? num_entries : ours) * sizeof(void *));
  table = next;
#define FL_WRAP(name)                                                                              \
  if (next.name)                                                                                   \
    table.name = w_##name;
  FL_ENTRIES(FL_WRAP)
#undef FL_WRAP
  *num_entries_ret = ours;
  *dispatch_ret = &table;
  arm_from_env();
  const char *hold = getenv("FAULTLAYER_HOLD");
  hold_on = hold && *hold && *hold != '0';
  const char *rep = getenv("FAULTLAYER_REPORT");
  if (rep && *rep && *rep != '0')
    atexit(report_at_exit);
  __atomic_store_n(&active, 1, __ATOMIC_RELEASE);
  return CL_SUCCESS;
}

/* FAULTLAYER_ARM="entry:nth[:count[:code]]", code defaulting to
 * CL_OUT_OF_RESOURCES. A malformed value is reported and ignored. */
static void arm_from_env(void) {
  const char *spec = getenv("FAULTLAYER_ARM");
  if (!spec || !*spec)
    return;
  char name[64];
  unsigned long nth = 0, count = 1;
  long code = CL_OUT_OF_RESOURCES;
  int got = sscanf(spec, "%63[A-Za-z]:%lu:%lu:%ld", name, &nth, &count, &code);
  int entry = got >= 2 ? faultlayer_entry_index(name) : -1;
  if (entry < 0 || nth == 0) {
    fprintf(stderr, "faultlayer: ignoring FAULTLAYER_ARM=%s (want entry:nth[:count[:code]])\n",
            spec);
    return;
  }
  faultlayer_arm(entry, nth, count, (cl_int)code);
}

static void report_at_exit(void) {
  fprintf(stderr, "faultlayer: calls:");
  for (int i = 0; i < E_COUNT; i++)
    if (calls[i])
      fprintf(stderr, " %s=%lu", entry_names[i], calls[i]);
  fprintf(stderr, "\nfaultlayer: fired %lu, bad releases %lu, refused releases %zu\n", fired,
          bad_releases, n_refused);
  if (hold_on)
    fprintf(stderr, "faultlayer: hold: %lu commands held, %lu gates opened\n", held_total,
            opened_total);
  fprintf(stderr, "faultlayer: empty-list markers %lu\n", empty_markers);
  faultlayer_dump_live(stderr);
}

/* ---- control API --------------------------------------------------------- */

FAULTLAYER_API int faultlayer_active(void) { return __atomic_load_n(&active, __ATOMIC_ACQUIRE); }

FAULTLAYER_API int faultlayer_entry_count(void) { return E_COUNT; }

FAULTLAYER_API const char *faultlayer_entry_name(int entry) {
  return entry >= 0 && entry < E_COUNT ? entry_names[entry] : NULL;
}

FAULTLAYER_API int faultlayer_entry_index(const char *name) {
  for (int i = 0; name && i < E_COUNT; i++)
    if (strcmp(entry_names[i], name) == 0)
      return i;
  return -1;
}

FAULTLAYER_API unsigned long faultlayer_calls(int entry) {
  if (entry < 0 || entry >= E_COUNT)
    return 0;
  pthread_mutex_lock(&mu);
  unsigned long n = calls[entry];
  pthread_mutex_unlock(&mu);
  return n;
}

FAULTLAYER_API void faultlayer_reset_calls(void) {
  pthread_mutex_lock(&mu);
  memset(calls, 0, sizeof calls);
  armed_entry = -1;
  pthread_mutex_unlock(&mu);
}

FAULTLAYER_API void faultlayer_arm(int entry, unsigned long nth, unsigned long count, cl_int code) {
  pthread_mutex_lock(&mu);
  if (entry < 0 || entry >= E_COUNT || nth == 0) {
    armed_entry = -1;
  } else {
    armed_entry = entry;
    armed_first = calls[entry] + nth;
    armed_last = count ? armed_first + count - 1 : 0;
    armed_code = code;
  }
  fired = 0;
  pthread_mutex_unlock(&mu);
}

FAULTLAYER_API void faultlayer_disarm(void) {
  pthread_mutex_lock(&mu);
  armed_entry = -1;
  pthread_mutex_unlock(&mu);
}

FAULTLAYER_API unsigned long faultlayer_fired(void) {
  pthread_mutex_lock(&mu);
  unsigned long n = fired;
  pthread_mutex_unlock(&mu);
  return n;
}

FAULTLAYER_API long faultlayer_live(faultlayer_kind kind) {
  if ((int)kind < 0 || kind >= FAULTLAYER_KIND_COUNT)
    return 0;
  pthread_mutex_lock(&mu);
  long n = live_refs[kind];
  pthread_mutex_unlock(&mu);
  return n;
}

FAULTLAYER_API const char *faultlayer_kind_name(faultlayer_kind kind) {
  return (int)kind >= 0 && kind < FAULTLAYER_KIND_COUNT ? kind_names[kind] : "?";
}

FAULTLAYER_API unsigned long faultlayer_bad_releases(void) {
  pthread_mutex_lock(&mu);
  unsigned long n = bad_releases;
  pthread_mutex_unlock(&mu);
  return n;
}

FAULTLAYER_API unsigned long faultlayer_refused_releases(void) {
  pthread_mutex_lock(&mu);
  unsigned long n = refused_total;
  pthread_mutex_unlock(&mu);
  return n;
}

static cl_int release_through_driver(faultlayer_kind kind, void *h) {
  switch (kind) {
  case FAULTLAYER_MEM: return next.clReleaseMemObject(h);
  case FAULTLAYER_EVENT: return next.clReleaseEvent(h);
  case FAULTLAYER_QUEUE: return next.clReleaseCommandQueue(h);
  case FAULTLAYER_CONTEXT: return next.clReleaseContext(h);
  case FAULTLAYER_PROGRAM: return next.clReleaseProgram(h);
  case FAULTLAYER_KERNEL: return next.clReleaseKernel(h);
  default: return CL_INVALID_VALUE;
  }
}

FAULTLAYER_API int faultlayer_settle(void) {
  int released = 0;
  for (;;) {
    pthread_mutex_lock(&mu);
    if (n_refused == 0) {
      pthread_mutex_unlock(&mu);
      break;
    }
    refused_release r = refused[--n_refused];
    live_obj *o = find_obj(r.handle);
    int owed = o && o->kind == r.kind && o->refs > 0;
    pthread_mutex_unlock(&mu);
    /* Still alive: the refused release is owed. A caller that retried with
     * success has dropped it already and the handle is gone. */
    if (owed && release_through_driver(r.kind, r.handle) == CL_SUCCESS) {
      track_unref(r.kind, r.handle);
      released++;
    }
  }
  return released;
}

FAULTLAYER_API long faultlayer_owed(faultlayer_kind kind) {
  long n = 0;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < n_refused; i++) {
    live_obj *o = find_obj(refused[i].handle);
    if (refused[i].kind == kind && o && o->kind == kind && o->refs > 0)
      n++;
  }
  pthread_mutex_unlock(&mu);
  return n;
}

FAULTLAYER_API int faultlayer_holding(void) { return hold_on; }

FAULTLAYER_API unsigned long faultlayer_held(void) {
  pthread_mutex_lock(&gmu);
  unsigned long n = held_total;
  pthread_mutex_unlock(&gmu);
  return n;
}

FAULTLAYER_API unsigned long faultlayer_empty_markers(void) {
  pthread_mutex_lock(&gmu);
  unsigned long n = empty_markers;
  pthread_mutex_unlock(&gmu);
  return n;
}

FAULTLAYER_API cl_int faultlayer_raw_set_user_event_status(cl_event event, cl_int status) {
  return next.clSetUserEventStatus(event, status);
}

FAULTLAYER_API cl_int faultlayer_raw_wait_for_events(cl_uint n, const cl_event *events) {
  return next.clWaitForEvents(n, events);
}

FAULTLAYER_API cl_int faultlayer_raw_finish(cl_command_queue queue) { return next.clFinish(queue); }

FAULTLAYER_API cl_int faultlayer_raw_event_status(cl_event event) {
  cl_int status = CL_QUEUED;
  cl_int err =
      next.clGetEventInfo(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
  return err == CL_SUCCESS ? status : err;
}

FAULTLAYER_API void faultlayer_dump_live(FILE *out) {
  pthread_mutex_lock(&mu);
  for (int k = 0; k < FAULTLAYER_KIND_COUNT; k++)
    fprintf(out, "faultlayer: live %-7s %ld\n", kind_names[k], live_refs[k]);
  for (size_t i = 0; i < n_objs; i++)
    fprintf(out, "faultlayer:   %s %p refs %ld\n", kind_names[objs[i].kind], objs[i].handle,
            objs[i].refs);
  pthread_mutex_unlock(&mu);
}
