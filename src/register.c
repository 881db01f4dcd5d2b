/* SPDX-License-Identifier: Apache-2.0 */
/* Caller memory pinned in place: clpin_host_register / clpin_host_unregister.
 *
 * A registration is a CL_MEM_USE_HOST_PTR buffer over the caller's pages,
 * held by the pool and never used in a command: drivers of discrete GPUs pin
 * the pages under such a buffer while it lives, so plain transfers from or
 * to them run at pinned speed (measured on NVIDIA's OpenCL: docs/DESIGN.md, "Measured facts").
 *
 * Registrations sit in a per-pool array sorted by page address, under the
 * lock of the pool's table (clpin__reg_table's `lock`, pool.h); no OpenCL
 * call is made while it is held. A transfer from registered memory marks
 * the registration busy from its lookup until its event is recorded;
 * unregister first unlinks the registration (no new transfer can find it),
 * then waits until it is no longer busy, then waits for the recorded
 * events, and only then releases the buffer.
 *
 * On a host-unified device the buffer is also how kernels use the memory in
 * place (clpin_host_buffer): there the registration maps it at once, so the
 * host reaches the memory through a mapping as OpenCL requires, and
 * clpin_host_lend / clpin_host_reclaim hand the mapping to the device
 * and back (unified.c).
 *
 * The registrations of a pool sit in the table the pool holds for them
 * (clpin__pool_regs); a pool's release drops them through the registry's
 * hook. Transfers (transfer.c) claim a registration, record their event in
 * it and unclaim it. */
#include "register.h"
#include "events.h"
#include "registry.h"
#include "zc.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct clpin__reg {
  unsigned char *user; /* ptr as registered: the key of unregister */
  uintptr_t beg, end;  /* the caller's bytes: transfers inside them go direct */
  uintptr_t lo, hi;    /* the enclosing pages: what is pinned */
  cl_mem buffer;       /* NULL while clpin_host_register is still creating it */
  bool mapped;         /* mapped at lo for the host (host-unified devices) */
  clpin__handoff handoff;
  atomic_long busy; /* transfers between their lookup and their event's recording */
  cl_event *events; /* retained events of non-blocking transfers (the table's lock) */
  size_t nevents;
};
typedef struct clpin__reg reg;

#define REGS(pool) clpin__pool_regs(pool)

static uintptr_t page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (uintptr_t)p : 4096;
}

/* ---- the sorted array (the table's lock held) --------------------------- */

/* Position of the first registration whose pages start above addr. */
static size_t upper(clpin_pool *pool, uintptr_t addr) {
  size_t lo = 0, hi = atomic_load_explicit(&REGS(pool)->n, memory_order_relaxed);
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (REGS(pool)->regs[mid]->lo <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static cl_int insert_locked(clpin_pool *pool, reg *r) {
  size_t n = atomic_load_explicit(&REGS(pool)->n, memory_order_relaxed);
  size_t at = upper(pool, r->lo);
  if ((at > 0 && REGS(pool)->regs[at - 1]->hi > r->lo) ||
      (at < n && REGS(pool)->regs[at]->lo < r->hi))
    return CLPIN_ERR_ALREADY_REGISTERED;
  if (n == REGS(pool)->cap) {
    size_t cap = REGS(pool)->cap ? REGS(pool)->cap * 2 : 16;
    reg **grown = realloc(REGS(pool)->regs, cap * sizeof *grown);
    if (!grown)
      return CL_OUT_OF_HOST_MEMORY;
    REGS(pool)->regs = grown;
    REGS(pool)->cap = cap;
  }
  memmove(REGS(pool)->regs + at + 1, REGS(pool)->regs + at, (n - at) * sizeof *REGS(pool)->regs);
  REGS(pool)->regs[at] = r;
  atomic_store_explicit(&REGS(pool)->n, n + 1, memory_order_release);
  return CL_SUCCESS;
}

static void remove_locked(clpin_pool *pool, size_t at) {
  size_t n = atomic_load_explicit(&REGS(pool)->n, memory_order_relaxed);
  memmove(REGS(pool)->regs + at, REGS(pool)->regs + at + 1,
          (n - at - 1) * sizeof *REGS(pool)->regs);
  atomic_store_explicit(&REGS(pool)->n, n - 1, memory_order_release);
}

static void remove_reg(clpin_pool *pool, reg *r) {
  clpin__lock(&REGS(pool)->lock);
  size_t at = upper(pool, r->lo);
  if (at > 0 && REGS(pool)->regs[at - 1] == r)
    remove_locked(pool, at - 1);
  clpin__unlock(&REGS(pool)->lock);
}

/* ---- the end of a registration ------------------------------------------ */

/* Wait for every transfer that used r, then release its pinning and free it.
 * r is unlinked already: nothing can find it any more. */
static void drop(clpin_pool *pool, reg *r) {
  for (unsigned spins = 0; atomic_load_explicit(&r->busy, memory_order_acquire) != 0; spins++)
    if (spins < 64)
      sched_yield();
    else
      usleep(50);
  for (size_t i = 0; i < r->nevents; i++) {
    if (!clpin__event_settle(r->events[i]))
      clpin__log("register %p: a transfer's state is unknown; unpinning anyway", (void *)r->user);
    clReleaseEvent(r->events[i]);
  }
  cl_int err = CL_SUCCESS;
  /* Still mapped for the host unless a range is with the device (a pool's
   * release: unregister refuses that). */
  if (clpin__handoff_end(&r->handoff) && r->mapped) {
    cl_command_queue q = clpin__pool_queue(pool);
    err = clEnqueueUnmapMemObject(q, r->buffer, (void *)r->lo, 0, NULL, NULL);
    if (err == CL_SUCCESS)
      err = clFinish(q);
    if (err != CL_SUCCESS)
      clpin__log("register %p: unmap failed: %s", (void *)r->user, clpin_strerror(err));
  }
  err = clReleaseMemObject(r->buffer);
  if (err != CL_SUCCESS)
    clpin__log("register %p: release of the pinning buffer failed: %s", (void *)r->user,
               clpin_strerror(err));
  size_t pinned = (size_t)(r->hi - r->lo);
  atomic_fetch_sub(&REGS(pool)->bytes, pinned);
  clpin__log("pool %p: unregistered %zu B at %p (%zu event(s) waited for)", (void *)pool, pinned,
             (void *)r->user, r->nevents);
  free(r->events);
  free(r);
}

static void drop_all(clpin_pool *pool) {
  /* Every user has left: no transfer holds a registration, no register or
   * unregister call is half-way. */
  clpin__lock(&REGS(pool)->lock);
  reg **all = REGS(pool)->regs;
  size_t n = atomic_load_explicit(&REGS(pool)->n, memory_order_relaxed);
  REGS(pool)->regs = NULL;
  REGS(pool)->cap = 0;
  atomic_store_explicit(&REGS(pool)->n, 0, memory_order_release);
  clpin__unlock(&REGS(pool)->lock);
  for (size_t i = 0; i < n; i++)
    drop(pool, all[i]);
  free(all);
}

/* ---- register ------------------------------------------------------------- */

/* On a host-unified device, map the new buffer for the host: kernels may use
 * it in place there (clpin_host_buffer), and OpenCL lets the host reach a
 * buffer's memory only through a mapping. A USE_HOST_PTR buffer maps at its
 * own memory (OpenCL guarantees it; checked). Elsewhere the buffer only pins
 * and is never mapped. */
static cl_int map_for_host(clpin_pool *pool, cl_mem buf, uintptr_t lo, uintptr_t hi, bool *mapped) {
  clpin__zc_device zd;
  cl_command_queue q = clpin__pool_queue(pool);
  cl_int err = clpin__zc_probe(q, &zd);
  if (err != CL_SUCCESS || !zd.unified)
    return err;
  void *p = clEnqueueMapBuffer(q, buf, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, (size_t)(hi - lo), 0,
                               NULL, NULL, &err);
  if (err != CL_SUCCESS)
    return err;
  if (p != (void *)lo) {
    clpin__log("register %p: the driver mapped it at %p", (void *)lo, p);
    if (clEnqueueUnmapMemObject(q, buf, p, 0, NULL, NULL) == CL_SUCCESS)
      clFinish(q);
    return CLPIN_ERR_MAP_MOVED;
  }
  *mapped = true;
  return CL_SUCCESS;
}

#define REGISTER "clpin_host_register"

static cl_int do_register(clpin_pool *pool, void *ptr, size_t nbytes) {
  uintptr_t page = page_size(), beg = (uintptr_t)ptr, end = beg + nbytes;
  uintptr_t lo = beg & ~(page - 1), hi = (end + page - 1) & ~(page - 1);
  CLPIN__CHECK_IN(REGISTER, hi - lo > clpin__pool_max_alloc(pool), CLPIN_ERR_INVALID_SIZE,
                  "nbytes %zu at %p spans %zu bytes of whole pages, more than the pool's largest "
                  "buffer, %zu bytes (the devices' CL_DEVICE_MAX_MEM_ALLOC_SIZE)",
                  nbytes, ptr, (size_t)(hi - lo), clpin__pool_max_alloc(pool));
  /* Pool blocks are pinned already (and a USE_HOST_PTR buffer over another
   * buffer's mapping is asking the driver for trouble). */
  CLPIN__CHECK_IN(
      REGISTER, clpin__pool_lookup(pool, ptr, 1) || clpin__pool_lookup(pool, (void *)(end - 1), 1),
      CLPIN_ERR_ALREADY_REGISTERED,
      "[%p, +%zu bytes) overlaps a block of this pool, pinned already", ptr, nbytes);
  reg *r = calloc(1, sizeof *r);
  CLPIN__CHECK_IN(REGISTER, !r, CL_OUT_OF_HOST_MEMORY,
                  "no host memory for the registration's record");
  r->user = ptr;
  r->beg = beg;
  r->end = end;
  r->lo = lo;
  r->hi = hi;
  atomic_init(&r->busy, 0);
  clpin__handoff_init(&r->handoff);
  /* Claim the pages first (buffer still NULL: transfers and unregister pass
   * it by), so two racing registrations of one page cannot both succeed;
   * create the buffer outside the lock. */
  clpin__lock(&REGS(pool)->lock);
  cl_int err = insert_locked(pool, r);
  clpin__unlock(&REGS(pool)->lock);
  if (err != CL_SUCCESS) {
    free(r);
    CLPIN__CHECK_IN(REGISTER, err == CLPIN_ERR_ALREADY_REGISTERED, err,
                    "the pages of [%p, +%zu bytes) overlap a live registration", ptr, nbytes);
    CLPIN__CHECK_IN(REGISTER, true, err, "no host memory for the list of registrations");
  }
  cl_mem buf = clCreateBuffer(clpin__pool_context(pool), CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR,
                              (size_t)(hi - lo), (void *)lo, &err);
  if (err == CL_SUCCESS && !buf)
    err = CL_INVALID_MEM_OBJECT;
  bool mapped = false;
  if (err == CL_SUCCESS)
    err = map_for_host(pool, buf, lo, hi, &mapped);
  if (err != CL_SUCCESS) {
    if (buf)
      clReleaseMemObject(buf);
    remove_reg(pool, r);
    free(r);
    CLPIN__CHECK_IN(REGISTER, err == CLPIN_ERR_MAP_MOVED, err,
                    "the driver mapped the buffer over [%p, +%zu bytes) at another address",
                    (void *)lo, (size_t)(hi - lo));
    CLPIN__CHECK_IN(REGISTER, true, err,
                    "the driver refused a buffer over the %zu bytes of pages at %p "
                    "(clCreateBuffer with CL_MEM_USE_HOST_PTR, or its map)",
                    (size_t)(hi - lo), (void *)lo);
  }
  clpin__lock(&REGS(pool)->lock);
  r->mapped = mapped;
  r->buffer = buf;
  clpin__unlock(&REGS(pool)->lock);
  atomic_fetch_add(&REGS(pool)->bytes, (size_t)(hi - lo));
  clpin__log("pool %p: registered %zu B at %p (pages %p + %zu B)", (void *)pool, nbytes, ptr,
             (void *)lo, (size_t)(hi - lo));
  return CL_SUCCESS;
}

cl_int clpin_host_register(clpin_pool *pool, void *ptr, size_t nbytes) {
  CLPIN__CHECK_FORK();
  CLPIN__CHECK_WHY(!pool, CLPIN_ERR_INVALID_ARGUMENT, "pool is NULL");
  CLPIN__CHECK_WHY(!ptr, CLPIN_ERR_INVALID_ARGUMENT, "ptr is NULL");
  CLPIN__CHECK_WHY(nbytes == 0, CLPIN_ERR_INVALID_SIZE,
                   "nbytes is 0: a registration holds at least one byte");
  uintptr_t page = page_size(); /* the end is rounded up to a page: that must fit too */
  CLPIN__CHECK_FMT(nbytes > UINTPTR_MAX - page || (uintptr_t)ptr > UINTPTR_MAX - page - nbytes,
                   CLPIN_ERR_OVERFLOW,
                   "ptr %p + nbytes %zu, rounded up to a whole page, lies past the end of the "
                   "address space",
                   ptr, nbytes);
  cl_int err = clpin__pool_enter_for(__func__, "pool", &pool);
  CLPIN__PASS(err);
  err = do_register(pool, ptr, nbytes);
  clpin__pool_leave(pool);
  return err;
}

/* ---- unregister ----------------------------------------------------------- */

typedef struct {
  void *ptr;
  clpin_pool *pool;
  bool out; /* the registration is handed to the device: not taken */
} take_arg;

/* Under the registry lock (no OpenCL call): unlink the live registration
 * that starts at arg->ptr, with its pool entered so that a release of the
 * pool waits for this unregister to finish. */
static void *take(clpin_pool *pool, void *arg) {
  take_arg *t = arg;
  reg *r = NULL;
  clpin__lock(&REGS(pool)->lock);
  size_t at = upper(pool, (uintptr_t)t->ptr);
  if (at > 0 && REGS(pool)->regs[at - 1]->user == t->ptr && REGS(pool)->regs[at - 1]->buffer &&
      clpin__handoff_out(&REGS(pool)->regs[at - 1]->handoff)) {
    t->out = true;
  } else if (at > 0 && REGS(pool)->regs[at - 1]->user == t->ptr &&
             REGS(pool)->regs[at - 1]->buffer && clpin__pool_enter(&pool) == CL_SUCCESS) {
    r = REGS(pool)->regs[at - 1];
    remove_locked(pool, at - 1);
    t->pool = pool;
  }
  clpin__unlock(&REGS(pool)->lock);
  return r;
}

cl_int clpin_host_unregister(void *ptr) {
  CLPIN__CHECK_FORK();
  CLPIN__CHECK_WHY(!ptr, CLPIN_ERR_INVALID_ARGUMENT, "ptr is NULL");
  take_arg t = {ptr, NULL, false};
  reg *r = clpin__registry_find(take, &t);
  CLPIN__CHECK_WHY(t.out, CLPIN_ERR_ON_DEVICE,
                   "a range of the registration is handed to the device: clpin_host_reclaim first");
  CLPIN__CHECK_FMT(!r, CLPIN_ERR_NOT_REGISTERED,
                   "ptr %p is not the start of a live registration (clpin_host_register's ptr)",
                   ptr);
  drop(t.pool, r);
  clpin__pool_leave(t.pool);
  return CL_SUCCESS;
}

/* ---- transfers ------------------------------------------------------------ */

/* The live registration holding [p, p + n), marked busy (unclaim gives it
 * back); or NULL, at once when the pool has none. */
static reg *claim(clpin_pool *pool, const unsigned char *p, size_t n) {
  if (atomic_load_explicit(&REGS(pool)->n, memory_order_acquire) == 0)
    return NULL;
  reg *found = NULL;
  uintptr_t a = (uintptr_t)p;
  clpin__lock(&REGS(pool)->lock);
  size_t at = upper(pool, a);
  if (at > 0) {
    reg *r = REGS(pool)->regs[at - 1];
    if (r->buffer && a >= r->beg && a < r->end && n <= r->end - a) {
      atomic_fetch_add_explicit(&r->busy, 1, memory_order_relaxed);
      found = r;
    }
  }
  clpin__unlock(&REGS(pool)->lock);
  return found;
}

static void unclaim(reg *r) { atomic_fetch_sub_explicit(&r->busy, 1, memory_order_release); }

/* Add ev (one reference, now r's) to r's events, dropping those that have
 * ended. The list is taken out while its events are queried (no OpenCL call
 * under the lock) and merged back with whatever other transfers added
 * meanwhile. An event that cannot be recorded (no memory) is waited for
 * here, so unregister never misses a running transfer. */
static void record(clpin_pool *pool, reg *r, cl_event ev) {
  clpin__lock(&REGS(pool)->lock);
  cl_event *mine = r->events;
  size_t n = r->nevents;
  r->events = NULL;
  r->nevents = 0;
  clpin__unlock(&REGS(pool)->lock);
  size_t live = 0;
  for (size_t i = 0; i < n; i++) {
    if (clpin__event_status(mine[i]) <= CL_COMPLETE)
      clReleaseEvent(mine[i]);
    else
      mine[live++] = mine[i];
  }
  cl_event *grown = realloc(mine, (live + 1) * sizeof *grown);
  if (grown) {
    mine = grown;
    mine[live++] = ev;
    ev = NULL;
  }
  clpin__lock(&REGS(pool)->lock);
  if (!r->events) {
    r->events = mine;
    r->nevents = live;
    mine = NULL;
    live = 0;
  } else if ((grown = realloc(r->events, (r->nevents + live) * sizeof *grown)) != NULL) {
    memcpy(grown + r->nevents, mine, live * sizeof *mine);
    r->events = grown;
    r->nevents += live;
    live = 0;
  }
  clpin__unlock(&REGS(pool)->lock);
  for (size_t i = 0; i < live; i++) {
    clpin__event_settle(mine[i]);
    clReleaseEvent(mine[i]);
  }
  free(mine);
  if (ev) {
    clpin__event_settle(ev);
    clReleaseEvent(ev);
  }
}

clpin__reg *clpin__register_claim(clpin_pool *pool, const void *ptr, size_t n) {
  return claim(pool, ptr, n);
}

bool clpin__register_out(clpin__reg *r) { return clpin__handoff_out(&r->handoff); }

void clpin__register_record(clpin_pool *pool, clpin__reg *r, cl_event ev) { record(pool, r, ev); }

bool clpin__register_target(clpin_pool *pool, const void *ptr, size_t n, clpin__handoff_target *t) {
  reg *r = claim(pool, ptr, n);
  if (!r)
    return false;
  if (!r->mapped) {
    unclaim(r);
    return false;
  }
  t->buffer = r->buffer;
  t->host = (void *)r->lo;
  t->size = (size_t)(r->hi - r->lo);
  t->h = &r->handoff;
  t->reg = r;
  return true;
}

void clpin__register_unclaim(void *r) { unclaim(r); }

static void drop_all(clpin_pool *pool);

/* The registry drops a released pool's registrations once its users have
 * left (registry.h). */
__attribute__((constructor)) static void hook_registry(void) {
  clpin__registry_hooks h = {.drop = drop_all};
  clpin__registry_hook(CLPIN__HOOK_REGISTER, &h);
}
