/* Host-unified devices (CL_DEVICE_HOST_UNIFIED_MEMORY: integrated GPUs, CPU
 * devices): which memory a device's kernels use in place, per vendor, and the
 * pieces tensor.c and clpin_host_buffer build on.
 *
 * The vendor rules come from the vendors' own guides (docs/ZERO_COPY.md
 * cites each). A device no rule names is handled as before (copies): clpin
 * never guesses a zero-copy rule. Discrete devices (no host-unified memory)
 * never take any path of this file: clpin__zc_decide answers COPY for them
 * whatever the rule. */
#include "unified.h"
#include "pool.h"

#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sched.h>

/* ---- the rule table -------------------------------------------------------- */

/* Match order matters: POCL's CPU device reports the CPU's vendor
 * ("GenuineIntel", "AuthenticAMD"), so POCL is recognised by its platform
 * first. */
static const clpin__zc_rule rules[] = {
    /* POCL: USE_HOST_PTR memory is used in place when aligned to the
     * device's base address alignment; its maps return that memory. */
    {"pocl", "portable computing language", NULL, CLPIN__ZC_USE_HOST, CLPIN__ZC_USE_HOST, 0, 1},
    /* Intel processor graphics (and Intel's CPU runtime): ALLOC_HOST_PTR,
     * or USE_HOST_PTR over memory 4096-aligned whose size is a multiple of
     * 64 bytes; host access through map/unmap. */
    {"intel", "intel", "intel", CLPIN__ZC_USE_HOST, CLPIN__ZC_USE_HOST, 4096, 64},
    /* Arm Mali: ALLOC_HOST_PTR + map is the only copy-free way; its
     * USE_HOST_PTR copies to a driver buffer and back on map. */
    {"arm-mali", "arm", "mali", CLPIN__ZC_ALLOC_MAP, CLPIN__ZC_COPY, 0, 1},
    /* Qualcomm Adreno: ALLOC_HOST_PTR + map; caller memory in place needs
     * the cl_qcom_ext_host_ptr extension, which clpin does not use: copied. */
    {"qualcomm-adreno", "qualcomm", "adreno", CLPIN__ZC_ALLOC_MAP, CLPIN__ZC_COPY, 0, 1},
    /* AMD APUs (AMD's own runtime): ALLOC_HOST_PTR is host-resident
     * zero-copy memory reached through map/unmap; caller memory: copied. */
    {"amd-apu", "amd accelerated parallel processing", NULL, CLPIN__ZC_ALLOC_MAP, CLPIN__ZC_COPY, 0,
     1},
    /* Anything else: no rule known, correct copies. */
    {"unknown", NULL, NULL, CLPIN__ZC_COPY, CLPIN__ZC_COPY, 0, 1},
};
#define NRULES (sizeof rules / sizeof rules[0])

const clpin__zc_rule *clpin__zc_rules(size_t *n) {
  *n = NRULES;
  return rules;
}

/* Case-insensitive substring test; a NULL needle never matches. */
static bool contains(const char *hay, const char *needle) {
  if (!hay || !needle)
    return false;
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] && tolower((unsigned char)hay[i]) == needle[i])
      i++;
    if (i == n)
      return true;
  }
  return false;
}

const clpin__zc_rule *clpin__zc_rule_for(const char *platform, const char *device_name,
                                         const char *device_vendor) {
  for (size_t i = 0; i + 1 < NRULES; i++) {
    const clpin__zc_rule *r = &rules[i];
    if (contains(platform, r->platform) || contains(device_name, r->device) ||
        contains(device_vendor, r->device))
      return r;
  }
  return &rules[NRULES - 1];
}

static const clpin__zc_rule *rule_named(const char *name) {
  for (size_t i = 0; i < NRULES; i++)
    if (strcmp(rules[i].name, name) == 0)
      return &rules[i];
  return NULL;
}

clpin__zc_how clpin__zc_decide(const clpin__zc_rule *rule, bool unified, clpin__zc_whose whose,
                               const void *ptr, size_t nbytes, size_t base_align) {
  if (!rule || !unified)
    return CLPIN__ZC_COPY;
  if (whose == CLPIN__ZC_OWN)
    return rule->own;
  if (rule->caller != CLPIN__ZC_USE_HOST || !ptr || nbytes == 0)
    return CLPIN__ZC_COPY;
  size_t align = rule->align ? rule->align : base_align;
  if (align > 1 && (uintptr_t)ptr % align != 0)
    return CLPIN__ZC_COPY;
  if (rule->size_multiple > 1 && nbytes % rule->size_multiple != 0)
    return CLPIN__ZC_COPY;
  return CLPIN__ZC_USE_HOST;
}

cl_int clpin__zc_probe(cl_command_queue q, clpin__zc_device *out) {
  cl_device_id dev;
  cl_bool unified = CL_FALSE;
  cl_int err = clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(dev, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
  if (err != CL_SUCCESS)
    return err;
  const char *seam = getenv("CLPIN__TEST_UNIFIED");
  const clpin__zc_rule *forced = seam && *seam ? rule_named(seam) : NULL;
  out->rule = &rules[NRULES - 1];
  out->unified = unified == CL_TRUE || forced;
  out->base_align = 1;
  if (!out->unified)
    return CL_SUCCESS; /* a discrete device: one query, nothing of this file applies */
  cl_platform_id plat;
  char pname[256] = "", dname[256] = "", vname[256] = "";
  cl_uint bits = 0;
  err = clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL);
  if (err == CL_SUCCESS)
    err = clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof vname - 1, vname, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL);
  if (err != CL_SUCCESS)
    return err;
  out->rule = forced ? forced : clpin__zc_rule_for(pname, dname, vname);
  out->base_align = bits / 8 ? bits / 8 : 1;
  return CL_SUCCESS;
}

/* ---- page-aligned memory for clpin's own USE_HOST_PTR buffers ------------ */

#define PAGE ((size_t)4096)
#define CACHE_SLOTS 8
#define CACHE_BYTES ((size_t)1 << 30)

typedef struct {
  void *p;
  size_t cap;
} region;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static region cache[CACHE_SLOTS];
static size_t ncache, cached_bytes;

/* A region of at least need bytes (a page multiple): a cached one at most
 * twice as large, else a fresh one. */
static region region_get(size_t need) {
  region got = {NULL, 0};
  pthread_mutex_lock(&cache_lock);
  size_t best = CACHE_SLOTS;
  for (size_t i = 0; i < ncache; i++)
    if (cache[i].cap >= need && cache[i].cap / 2 <= need &&
        (best == CACHE_SLOTS || cache[i].cap < cache[best].cap))
      best = i;
  if (best != CACHE_SLOTS) {
    got = cache[best];
    cache[best] = cache[--ncache];
    cached_bytes -= got.cap;
  }
  pthread_mutex_unlock(&cache_lock);
  if (!got.p) {
    got.p = aligned_alloc(PAGE, need);
    got.cap = got.p ? need : 0;
  }
  return got;
}

/* Keep a region for reuse, dropping the oldest over the cache's bounds. */
static void region_put(region r) {
  region evicted[CACHE_SLOTS];
  size_t nevicted = 0;
  pthread_mutex_lock(&cache_lock);
  if (r.cap <= CACHE_BYTES) {
    while (ncache > 0 && (ncache == CACHE_SLOTS || cached_bytes + r.cap > CACHE_BYTES)) {
      evicted[nevicted++] = cache[0];
      cached_bytes -= cache[0].cap;
      memmove(cache, cache + 1, (ncache - 1) * sizeof *cache);
      ncache--;
    }
    cache[ncache++] = r;
    cached_bytes += r.cap;
    r.p = NULL;
  }
  pthread_mutex_unlock(&cache_lock);
  for (size_t i = 0; i < nevicted; i++)
    free(evicted[i].p);
  free(r.p);
}

static void CL_CALLBACK region_back(cl_mem mem, void *arg) {
  (void)mem;
  region *r = arg;
  region_put(*r);
  free(r);
}

cl_mem clpin__zc_own_buffer(cl_context ctx, size_t nbytes, size_t size_multiple, const void *fill,
                            cl_int *err) {
  size_t m = size_multiple > 1 ? size_multiple : 1;
  size_t size = (nbytes + m - 1) / m * m;
  size_t need = (size + PAGE - 1) / PAGE * PAGE;
  region *r = malloc(sizeof *r);
  if (!r) {
    *err = CL_OUT_OF_HOST_MEMORY;
    return NULL;
  }
  *r = region_get(need);
  if (!r->p) {
    free(r);
    *err = CL_OUT_OF_HOST_MEMORY;
    return NULL;
  }
  /* Filled before any buffer exists: the memory is still the host's alone. */
  if (fill)
    memcpy(r->p, fill, nbytes);
  cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, size, r->p, err);
  if (*err != CL_SUCCESS) {
    region_put(*r);
    free(r);
    return NULL;
  }
  *err = clSetMemObjectDestructorCallback(buf, region_back, r);
  if (*err != CL_SUCCESS) {
    /* Without the callback the memory's end is unknown: leak it rather
     * than free memory a command may still use. */
    clReleaseMemObject(buf);
    return NULL;
  }
  return buf;
}

/* ---- clpin_host_buffer ------------------------------------------------------ */

/* The target holding [ptr, ptr + n): a live block, else a registration. */
static bool find_target(clpin_pool *pool, const void *ptr, size_t n, clpin__handoff_target *t) {
  return clpin__block_target(pool, ptr, n, t) || clpin__register_target(pool, ptr, n, t);
}

static void release_target(clpin__handoff_target *t) {
  if (t->reg)
    clpin__register_unclaim(t->reg);
}

cl_int clpin_host_buffer(clpin_pool *pool, const void *ptr, size_t nbytes, cl_mem *mem,
                         size_t *offset) {
  CLPIN__CHECK(clpin__forked(), CLPIN_ERR_FORKED);
  CLPIN__CHECK(!pool || !ptr || !mem || !offset, CLPIN_ERR_INVALID_ARGUMENT);
  CLPIN__CHECK(nbytes == 0, CLPIN_ERR_INVALID_SIZE);
  CLPIN__CHECK((uintptr_t)ptr > UINTPTR_MAX - nbytes, CLPIN_ERR_OVERFLOW);
  cl_int err = clpin__pool_enter(&pool); /* from here on pool is the struct */
  if (err != CL_SUCCESS)
    return err;
  clpin__zc_device zd;
  err = clpin__zc_probe(clpin__pool_queue(pool), &zd);
  if (err == CL_SUCCESS && !zd.unified) {
    clpin__fail(__func__, CLPIN_ERR_NOT_UNIFIED,
                "the pool's device is not host-unified: no in-place use; use "
                "clpin_write/clpin_read there");
    err = CLPIN_ERR_NOT_UNIFIED;
  }
  cl_mem found = NULL;
  size_t off = 0;
  clpin__handoff_target t;
  if (err == CL_SUCCESS) {
    if (find_target(pool, ptr, nbytes, &t)) {
      found = t.buffer;
      off = (size_t)((uintptr_t)ptr - (uintptr_t)t.host);
      err = clRetainMemObject(found);
      release_target(&t);
    } else {
      err = CLPIN_ERR_FOREIGN_POINTER;
    }
  }
  clpin__pool_leave(pool);
  if (err != CL_SUCCESS)
    return err;
  *mem = found;
  *offset = off;
  return CL_SUCCESS;
}

/* ---- handing a mapping to the device and back ---------------------------- */

/* Process-wide: handoffs in a turn, plus ranges out with a device, over
 * every pool. 0 means no host range anywhere is handed to a device, so a
 * small blocking rect or image write may go to the driver without finding
 * its pool (clpin__handoffs_idle, rect.c). */
static atomic_long handoffs_busy;

bool clpin__handoffs_idle(void) {
  return atomic_load_explicit(&handoffs_busy, memory_order_acquire) == 0;
}

void clpin__handoff_init(clpin__handoff *h) {
  atomic_init(&h->lock.held, 0);
  atomic_init(&h->moving, false);
  atomic_init(&h->nout, 0);
  h->out = NULL;
  h->capout = 0;
  h->unmapped = NULL;
  h->back = NULL;
  h->nback = h->capback = 0;
}

bool clpin__handoff_out(clpin__handoff *h) {
  return atomic_load(&h->nout) > 0 || atomic_load(&h->moving);
}

bool clpin__handoff_end(clpin__handoff *h) {
  size_t nout = atomic_load(&h->nout);
  bool mapped = nout == 0;
  atomic_fetch_sub(&handoffs_busy, (long)nout);
  cl_event evs[1] = {h->unmapped};
  for (size_t i = 0; i < 1 + h->nback; i++) {
    cl_event e = i == 0 ? evs[0] : h->back[i - 1];
    if (!e)
      continue;
    clpin__event_settle(e);
    clReleaseEvent(e);
  }
  free(h->out);
  free(h->back);
  clpin__handoff_init(h);
  return mapped;
}

/* Take the handoff's turn: one map/unmap call at a time per buffer. The
 * holder may wait on the driver, so the others yield, then sleep. */
static void turn_take(clpin__handoff *h) {
  for (unsigned spins = 0;; spins++) {
    clpin__lock(&h->lock);
    if (!atomic_load(&h->moving)) {
      atomic_store(&h->moving, true);
      atomic_fetch_add(&handoffs_busy, 1);
      clpin__unlock(&h->lock);
      return;
    }
    clpin__unlock(&h->lock);
    if (spins < 64)
      sched_yield();
    else
      usleep(50);
  }
}

static void turn_end(clpin__handoff *h) {
  clpin__lock(&h->lock);
  atomic_store(&h->moving, false);
  atomic_fetch_sub(&handoffs_busy, 1);
  clpin__unlock(&h->lock);
}

/* Room for one more entry in a growing array (the turn is held). */
static bool grow(void **arr, size_t *cap, size_t n, size_t elem) {
  if (n < *cap)
    return true;
  size_t c = *cap ? *cap * 2 : 4;
  void *g = realloc(*arr, c * elem);
  if (!g)
    return false;
  *arr = g;
  *cap = c;
  return true;
}

/* Index of the out range [beg, beg + len), or nout when it is not out. */
static size_t out_index(const clpin__handoff *h, uintptr_t beg, size_t len) {
  size_t n = atomic_load(&h->nout);
  for (size_t i = 0; i < n; i++)
    if (h->out[i].beg == beg && h->out[i].len == len)
      return i;
  return n;
}

/* What both calls check and find: the pool (entered), the target. */
typedef struct {
  clpin_pool *pool;
  clpin__handoff_target t;
} handoff_call;

/* As CLPIN__CHECK_WHY, naming the public call fn in the detail. */
#define HANDOFF_CHECK_WHY(fn, cond, code, why)                                                     \
  do {                                                                                             \
    if (cond) {                                                                                    \
      clpin__fail((fn), (code), (why));                                                            \
      return (code);                                                                               \
    }                                                                                              \
  } while (0)
#define HANDOFF_CHECK(fn, cond, code) HANDOFF_CHECK_WHY(fn, cond, code, #cond)

static cl_int handoff_enter(const char *fn, cl_command_queue q, const void *ptr, size_t nbytes,
                            cl_uint num_wait, const cl_event *wait_list, handoff_call *c) {
  HANDOFF_CHECK(fn, clpin__forked(), CLPIN_ERR_FORKED);
  HANDOFF_CHECK_WHY(fn, !q, CL_INVALID_COMMAND_QUEUE, "the queue is NULL");
  HANDOFF_CHECK_WHY(fn, !ptr, CLPIN_ERR_INVALID_ARGUMENT, "the pointer is NULL");
  HANDOFF_CHECK(fn, nbytes == 0, CLPIN_ERR_INVALID_SIZE);
  HANDOFF_CHECK(fn, (uintptr_t)ptr > UINTPTR_MAX - nbytes, CLPIN_ERR_OVERFLOW);
  HANDOFF_CHECK_WHY(fn, (num_wait == 0) != (wait_list == NULL), CL_INVALID_EVENT_WAIT_LIST,
                    "malformed wait list: num_wait and wait_list disagree");
  for (cl_uint i = 0; i < num_wait; i++)
    HANDOFF_CHECK_WHY(fn, !wait_list[i], CL_INVALID_EVENT_WAIT_LIST,
                      "a NULL event in the wait list");
  clpin__zc_device zd;
  cl_int err = clpin__zc_probe(q, &zd);
  HANDOFF_CHECK(fn, err != CL_SUCCESS, err);
  HANDOFF_CHECK_WHY(fn, !zd.unified, CLPIN_ERR_NOT_UNIFIED,
                    "the queue's device is not host-unified: use clpin_write/clpin_read there");
  err = clpin_pool_get(q, &c->pool);
  HANDOFF_CHECK(fn, err != CL_SUCCESS, err);
  err = clpin__pool_enter(&c->pool);
  HANDOFF_CHECK(fn, err != CL_SUCCESS, err);
  if (!find_target(c->pool, ptr, nbytes, &c->t)) {
    clpin__pool_leave(c->pool);
    HANDOFF_CHECK_WHY(fn, true, CLPIN_ERR_FOREIGN_POINTER,
                      "no live pool block, clpin_host_alloc memory or registration (of the "
                      "queue's context) holds the whole range");
  }
  return CL_SUCCESS;
}

/* End a call that holds the target's turn: the turn given back, a debug
 * line (what, for fn), the target and the pool left, a failure reported
 * with why. Returns err. */
static cl_int handoff_end(handoff_call *c, const char *fn, const char *what, size_t nbytes,
                          const void *ptr, cl_int err, const char *why) {
  clpin__handoff *h = c->t.h;
  turn_end(h);
  clpin__log("%s: %zu B at %p (%zu range(s) of its buffer %s): %s", fn, nbytes, ptr,
             atomic_load(&h->nout), what, clpin_strerror(err));
  release_target(&c->t);
  clpin__pool_leave(c->pool);
  if (err != CL_SUCCESS)
    clpin__fail(fn, err, why);
  return err;
}

/* The wait list plus extra events, in one array (freed by the caller). */
static cl_event *joined(cl_uint n, const cl_event *wl, size_t nextra, const cl_event *extra) {
  cl_event *all = malloc((n + nextra) * sizeof *all);
  if (all) {
    if (n)
      memcpy(all, wl, n * sizeof *all);
    if (nextra)
      memcpy(all + n, extra, nextra * sizeof *all);
  }
  return all;
}

/* Give ev to the caller (event not NULL) or drop it. */
static void hand_event(cl_event ev, cl_event *event) {
  if (event)
    *event = ev;
  else if (ev)
    clReleaseEvent(ev);
}

cl_int clpin_host_lend(cl_command_queue q, const void *ptr, size_t nbytes, cl_uint num_wait,
                       const cl_event *wait_list, cl_event *event) {
  handoff_call c;
  cl_int err = handoff_enter(__func__, q, ptr, nbytes, num_wait, wait_list, &c);
  if (err != CL_SUCCESS)
    return err;
  clpin__handoff *h = c.t.h;
  turn_take(h);
  size_t nout = atomic_load(&h->nout);
  cl_event ev = NULL;
  bool stays_out = false;
  if (!grow((void **)&h->out, &h->capout, nout, sizeof *h->out)) {
    err = CL_OUT_OF_HOST_MEMORY;
  } else if (nout == 0) {
    /* The first range: the whole mapping goes (OpenCL: no command may use a
     * buffer mapped for writing). Its event orders every later range. */
    err = clEnqueueUnmapMemObject(q, c.t.buffer, c.t.host, num_wait, wait_list, &ev);
    /* One reference for the handoff, a second for the caller if asked. */
    if (err == CL_SUCCESS && event && (err = clRetainEvent(ev)) != CL_SUCCESS) {
      /* No reference to give: undo the unmap by mapping again. Should
       * that fail too, the memory is unmapped: the range stays out
       * (clpin_host_reclaim brings it back), and the code says why. */
      cl_int e2;
      void *p = clEnqueueMapBuffer(q, c.t.buffer, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, c.t.size,
                                   1, &ev, NULL, &e2);
      if (e2 == CL_SUCCESS && p == c.t.host) {
        clReleaseEvent(ev);
      } else {
        clpin__log("host_lend: undoing the unmap failed (%s): the range stays out",
                   clpin_strerror(e2));
        if (e2 == CL_SUCCESS)
          clEnqueueUnmapMemObject(q, c.t.buffer, p, 0, NULL, NULL);
        h->unmapped = ev;
        stays_out = true;
      }
    } else if (err == CL_SUCCESS) {
      h->unmapped = ev;
      if (!event)
        ev = NULL; /* the one reference is the handoff's */
    }
  } else {
    /* Already with the device: only order the caller's queue after the unmap. */
    cl_event *all = joined(num_wait, wait_list, 1, &h->unmapped);
    err = all ? clEnqueueMarkerWithWaitList(q, num_wait + 1, all, &ev) : CL_OUT_OF_HOST_MEMORY;
    free(all);
  }
  if (err == CL_SUCCESS || stays_out) {
    h->out[nout].beg = (uintptr_t)ptr;
    h->out[nout].len = nbytes;
    atomic_store(&h->nout, nout + 1);
    atomic_fetch_add(&handoffs_busy, 1);
  }
  if (err == CL_SUCCESS) {
    clpin__count(c.pool, CLPIN__BYTES_ZERO_COPY, nbytes);
    hand_event(ev, event);
  }
  return handoff_end(&c, __func__, "out", nbytes, ptr, err,
                     "the driver refused the unmap or the marker");
}

/* The last range comes back: map the whole buffer after the wait list and
 * after every range given back before it. The mapping must be where the
 * caller's pointer is. */
static cl_int map_back(cl_command_queue q, clpin__handoff *h, const clpin__handoff_target *t,
                       cl_bool blocking, cl_uint num_wait, const cl_event *wait_list,
                       cl_event *ev) {
  cl_event *all = joined(num_wait, wait_list, h->nback, h->back);
  if (!all)
    return CL_OUT_OF_HOST_MEMORY;
  cl_int err;
  cl_uint n = num_wait + (cl_uint)h->nback;
  void *p = clEnqueueMapBuffer(q, t->buffer, blocking, CL_MAP_READ | CL_MAP_WRITE, 0, t->size, n,
                               n ? all : NULL, ev, &err);
  free(all);
  if (err == CL_SUCCESS && !p)
    err = CL_MAP_FAILURE;
  if (err != CL_SUCCESS)
    return err;
  if (p != t->host) {
    /* Hand it back to the device: the memory stays there, nothing is lost
     * (its buffer still holds it), and the range stays out. */
    cl_event u;
    cl_int e2 = clEnqueueUnmapMemObject(q, t->buffer, p, 1, ev, &u);
    clpin__log("host_reclaim: the driver mapped %p at %p (unmapped again: %s)", t->host, p,
               clpin_strerror(e2));
    clReleaseEvent(*ev);
    if (e2 == CL_SUCCESS) {
      clReleaseEvent(h->unmapped);
      h->unmapped = u;
    }
    return CLPIN_ERR_MAP_MOVED;
  }
  return CL_SUCCESS;
}

cl_int clpin_host_reclaim(cl_command_queue q, const void *ptr, size_t nbytes, unsigned flags,
                          cl_uint num_wait, const cl_event *wait_list, cl_event *event) {
  cl_int err =
      clpin__check_flags(__func__, "flags", flags, CLPIN_NON_BLOCKING, "CLPIN_NON_BLOCKING, or 0");
  if (err != CL_SUCCESS)
    return err;
  handoff_call c;
  err = handoff_enter(__func__, q, ptr, nbytes, num_wait, wait_list, &c);
  if (err != CL_SUCCESS)
    return err;
  clpin__handoff *h = c.t.h;
  cl_bool blocking = flags & CLPIN_NON_BLOCKING ? CL_FALSE : CL_TRUE;
  turn_take(h);
  size_t nout = atomic_load(&h->nout);
  size_t at = out_index(h, (uintptr_t)ptr, nbytes);
  cl_event ev = NULL;
  if (at == nout) {
    err = CLPIN_ERR_NOT_ON_DEVICE;
  } else if (nout > 1) {
    /* Others stay out: the buffer stays unmapped. The marker (after the
     * caller's wait list, and on an in-order queue after its kernels) is
     * what the last range's map will wait for. */
    if (!grow((void **)&h->back, &h->capback, h->nback, sizeof *h->back))
      err = CL_OUT_OF_HOST_MEMORY;
    else
      err = clEnqueueMarkerWithWaitList(q, num_wait, wait_list, &ev);
    /* Blocking: waited for before anything changes, so a failed wait list
     * leaves the range out. */
    if (err == CL_SUCCESS && blocking)
      err = clWaitForEvents(1, &ev);
    if (err == CL_SUCCESS && (err = clRetainEvent(ev)) == CL_SUCCESS)
      h->back[h->nback++] = ev;
    else if (ev)
      clReleaseEvent(ev);
  } else {
    err = map_back(q, h, &c.t, blocking, num_wait, wait_list, &ev);
    if (err == CL_SUCCESS) {
      for (size_t i = 0; i < h->nback; i++)
        clReleaseEvent(h->back[i]);
      h->nback = 0;
      clReleaseEvent(h->unmapped);
      h->unmapped = NULL;
    }
  }
  if (err == CL_SUCCESS) {
    h->out[at] = h->out[nout - 1];
    atomic_store(&h->nout, nout - 1);
    atomic_fetch_sub(&handoffs_busy, 1);
    hand_event(ev, event);
  }
  return handoff_end(&c, __func__, "still out", nbytes, ptr, err,
                     err == CLPIN_ERR_NOT_ON_DEVICE ? "ptr and nbytes name no range handed over"
                                                    : "the driver refused the marker or the map");
}
