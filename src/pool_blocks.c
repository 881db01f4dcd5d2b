/* SPDX-License-Identifier: Apache-2.0 */
/* The block cache of a pool: power-of-two buckets of pinned blocks, each
 * bucket split into stripes behind their own spinlocks; acquire, release,
 * in-flight blocks, the quarantine and the cap.
 *
 *
 * Rules kept throughout (docs/DESIGN.md, "Invariants"):
 * - no OpenCL call and no callback registration while any pool lock is held
 *   (POCL runs callbacks of completed events inline, on the calling thread);
 * - a hit touches one bucket's lock and nothing shared (with no cap set);
 * - stats counters move under the bucket lock together with the block, so a
 *   snapshot taken with every bucket locked is consistent;
 * - a block released with a pending event waits on its bucket's flight list
 *   until a slow path (a miss in that bucket, trim, stats, set_limit, release
 *   of the context) sees the event complete. No event callbacks: POCL never
 *   calls CL_COMPLETE callbacks of events that fail, and a polled status
 *   (complete or failed) cannot be missed. */
#include "pool_impl.h"
#include "events.h"
#include "options.h"

#include <assert.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ------------------------------------------------------ */

/* ---- quarantine (CLPIN_QUARANTINE) --------------------------------------- */

/* SWAP_HANDLES (Debug + ASan builds): a block going idle gets a fresh
 * struct, and the caller's old handle dies for good (DEAD, never reused:
 * it stays out of the dead list), so its late second release is refused
 * even after the memory was handed out again. Stripe lock held (the index
 * lock nests inside it; nothing takes them in the other order). */
static clpin_block *swap_handle(clpin_pool *pool, clpin_block *old) {
  clpin_block *fresh = clpin__arena_alloc(sizeof *fresh);
  if (!fresh)
    return old; /* no detection for this one; nothing else changes */
  *fresh = *old;
  clpin__lock(&pool->index_lock);
  size_t at = clpin__index_upper(pool, old->host);
  assert(at > 0 && pool->index[at - 1] == old);
  pool->index[at - 1] = fresh;
  clpin__unlock(&pool->index_lock);
  atomic_store_explicit(&old->state, BLOCK_DEAD, memory_order_release);
  return fresh;
}

/* Put blocks that left the quarantine (chained through `next`) on their free
 * lists: reusable now. No lock held (a stripe's lock is never taken under
 * the quarantine's). */
static void quarantine_leave(clpin_pool *pool, clpin_block *chain) {
  while (chain) {
    clpin_block *blk = chain;
    chain = blk->next;
    stripe *bk = &pool->lists[blk->list];
    clpin__lock(&bk->lock);
    assert(atomic_load_explicit(&blk->state, memory_order_relaxed) == BLOCK_QUARANTINED);
    blk->next = bk->free;
    bk->free = blk;
    atomic_store_explicit(&blk->state, BLOCK_CACHED, memory_order_relaxed);
    stripe_unlock(bk);
  }
}

/* Move the oldest entry off the ring onto *chain. Quarantine lock held. */
static void quarantine_pop(clpin_pool *pool, clpin_block **chain) {
  clpin_block *blk = pool->quarantine[pool->quarantine_head];
  pool->quarantine_head = (pool->quarantine_head + 1) % pool->quarantine_max;
  pool->quarantine_len--;
  pool->quarantine_bytes -= blk->size;
  blk->next = *chain;
  *chain = blk;
}

/* A block just released (counted as cached, state QUARANTINED, on no list)
 * joins the ring; the oldest entries leave it while it holds more than
 * quarantine_max blocks or CLPIN__QUARANTINE_BYTES. */
static void quarantine_push(clpin_pool *pool, clpin_block *blk) {
  clpin_block *out = NULL;
  clpin__lock(&pool->quarantine_lock);
  while (pool->quarantine_len == pool->quarantine_max ||
         (pool->quarantine_len > 0 && pool->quarantine_bytes + blk->size > CLPIN__QUARANTINE_BYTES))
    quarantine_pop(pool, &out);
  size_t tail = (pool->quarantine_head + pool->quarantine_len) % pool->quarantine_max;
  pool->quarantine[tail] = blk;
  pool->quarantine_len++;
  pool->quarantine_bytes += blk->size;
  clpin__unlock(&pool->quarantine_lock);
  quarantine_leave(pool, out);
}

/* Empty the ring onto the free lists (before idle blocks are freed). */
static void quarantine_drain(clpin_pool *pool) {
  if (!pool->quarantine_max)
    return;
  clpin_block *out = NULL;
  clpin__lock(&pool->quarantine_lock);
  while (pool->quarantine_len > 0)
    quarantine_pop(pool, &out);
  clpin__unlock(&pool->quarantine_lock);
  quarantine_leave(pool, out);
}

/* Free every idle block of the pool, the quarantined ones too. */
size_t clpin__free_idle(clpin_pool *pool) {
  size_t freed = 0;
  quarantine_drain(pool);
  for (unsigned i = 0; i < NLISTS(pool); i++) {
    stripe *bk = &pool->lists[i];
    clpin__lock(&bk->lock);
    clpin_block *list = bk->free;
    bk->free = NULL;
    for (clpin_block *blk = list; blk; blk = blk->next)
      clpin__uncount_cached(pool, bk, blk);
    stripe_unlock(bk);
    while (list) {
      clpin_block *next = list->next;
      freed += list->size;
      clpin__free_buffer(pool, list);
      list = next;
    }
  }
  return freed;
}

/* Free idle blocks, largest first, until idle bytes are within the cap. */
void clpin__enforce_cap(clpin_pool *pool) {
  size_t limit = atomic_load(&pool->limit);
  if (limit == SIZE_MAX)
    return;
  if (atomic_load(&pool->cached_total) > limit)
    quarantine_drain(pool);
  for (unsigned i = NLISTS(pool); i-- > 0;) {
    stripe *bk = &pool->lists[i];
    for (;;) {
      if (atomic_load(&pool->cached_total) <= limit)
        return;
      clpin__lock(&bk->lock);
      clpin_block *blk = bk->free;
      if (blk) {
        bk->free = blk->next;
        clpin__uncount_cached(pool, bk, blk);
      }
      stripe_unlock(bk);
      if (!blk)
        break;
      clpin__free_buffer(pool, blk);
    }
  }
}

/* ---- in-flight blocks ---------------------------------------------------- */

typedef enum { SETTLE_CACHED, SETTLE_FREE, SETTLE_NOT_IN_USE } settle_result;
static settle_result settle(clpin_pool *pool, clpin_block *blk, block_state from);

/* Move the blocks of one stripe whose pending event has completed (or
 * failed) to its free list. The flight list is taken off the stripe while its
 * events are queried (outside the lock); the counters stay, so stats stay
 * exact. Returns how many blocks landed. */
static size_t poll_list(clpin_pool *pool, stripe *bk) {
  clpin__lock(&bk->lock);
  clpin_block *list = bk->flight;
  bk->flight = NULL;
  stripe_unlock(bk);
  if (!list)
    return 0;
  clpin_block *still = NULL, *done = NULL;
  while (list) {
    clpin_block *blk = list;
    list = blk->next;
    cl_int status = CL_QUEUED;
    cl_int err = clGetEventInfo(blk->pending, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status,
                                &status, NULL);
    /* A failed query leaves the block in flight: reused late, never early. */
    if (err == CL_SUCCESS && status <= CL_COMPLETE) {
      blk->next = done;
      done = blk;
    } else {
      blk->next = still;
      still = blk;
    }
  }
  if (still) {
    clpin__lock(&bk->lock);
    clpin_block *tail = still;
    while (tail->next)
      tail = tail->next;
    tail->next = bk->flight;
    bk->flight = still;
    stripe_unlock(bk);
  }
  size_t landed = 0;
  while (done) {
    clpin_block *blk = done;
    done = blk->next;
    cl_event ev = blk->pending;
    blk->pending = NULL;
    clReleaseEvent(ev);
    if (settle(pool, blk, BLOCK_IN_FLIGHT) == SETTLE_FREE)
      clpin__free_buffer(pool, blk);
    landed++;
  }
  return landed;
}

static size_t poll_bucket(clpin_pool *pool, unsigned group, unsigned b) {
  size_t landed = 0;
  for (unsigned s = 0; s < CLPIN__STRIPES; s++)
    landed += poll_list(pool, &pool->lists[list_of(group, b, s)]);
  return landed;
}

void clpin__poll_all(clpin_pool *pool) {
  for (unsigned i = 0; i < NLISTS(pool); i++)
    poll_list(pool, &pool->lists[i]);
}

/* ---- sizes ---------------------------------------------------------------- */

/* What a request may get. Up to CLPIN_ROUND_MAX: its power-of-two bucket's
 * capacity, as always (many sizes share few blocks). Above it: a block of
 * at most max(request x 1.125, request + 2 MiB) (docs/DESIGN.md, "Topology and
 * footprint"), new ones rounded up to 2 MiB only, so a 1.1 GiB request pins
 * about 1.1 GiB, not 2 GiB. Such a block is kept in the bucket of its own
 * size, so a request looks at two buckets for one that fits. */
typedef struct {
  size_t lo, hi; /* capacities accepted */
  bool large;    /* above CLPIN_ROUND_MAX: best fit among the candidates */
  unsigned bucket;
} fit;

#define LARGE_GRAIN ((size_t)2 << 20)

static fit fit_of(const clpin_pool *pool, size_t nbytes) {
  fit f = {.lo = nbytes, .large = nbytes > clpin__opt(CLPIN_OPT_ROUND_MAX)};
  f.bucket = bucket_of(nbytes);
  if (!f.large) {
    f.hi = capacity_of(pool, f.bucket);
    return f;
  }
  size_t eighth = nbytes / 8, grain = LARGE_GRAIN;
  f.hi = nbytes + (eighth > grain ? eighth : grain);
  if (f.hi < nbytes) /* wrapped */
    f.hi = SIZE_MAX;
  return f;
}

/* Capacity of a new block for f: the bucket's, or the request rounded up to
 * 2 MiB (to a page where that passes the device's largest allocation). */
static size_t new_capacity(const clpin_pool *pool, const fit *f) {
  if (!f->large)
    return f->hi;
  size_t cap = (f->lo + LARGE_GRAIN - 1) & ~(LARGE_GRAIN - 1);
  if (cap < f->lo || cap > pool->max_alloc)
    cap = (f->lo + 4095) & ~(size_t)4095;
  if (cap < f->lo || cap > pool->max_alloc)
    cap = f->lo;
  return cap;
}

/* ---- acquire ------------------------------------------------------------ */

static cl_int acquire_miss(clpin_pool *pool, unsigned group, const fit *f, clpin_block **out) {
  size_t nbytes = f->lo, cap = new_capacity(pool, f);
  unsigned b = bucket_of(cap);
  clpin_block *blk = clpin__new_block_struct(pool);
  if (!blk)
    return CL_OUT_OF_HOST_MEMORY;
  blk->group = group;
  cl_int err = clpin__alloc_buffer(pool, cap, blk);
  if (clpin__is_oom(err)) {
    atomic_fetch_add(&pool->oom_retries, 1);
    size_t freed = clpin__free_idle(pool);
    clpin__log("pool %p: allocating %zu B failed (%s); freed %zu idle B, retrying once",
               (void *)pool, cap, clpin_strerror(err), freed);
    err = clpin__alloc_buffer(pool, cap, blk);
  }
  /* Every field clpin__pool_lookup reads is set before the index shows the
   * block to other threads; its state (DEAD until counted) keeps it unfound. */
  blk->bucket = b;
  blk->size = cap;
  blk->requested = nbytes;
  blk->host_alloc = false;
  blk->pending = NULL;
  blk->list = list_of(group, b, my_stripe());
  if (err == CL_SUCCESS)
    err = clpin__index_insert(pool, blk);
  if (err != CL_SUCCESS) {
    if (blk->buffer) {
      clEnqueueUnmapMemObject(pool->queue, blk->buffer, blk->host, 0, NULL, NULL);
      clpin__drop_buffer(pool, blk);
    }
    clpin__recycle_block_struct(pool, blk);
    clpin__log("pool %p: acquire of %zu B failed: %s", (void *)pool, nbytes, clpin_strerror(err));
    return err;
  }
  stripe *bk = &pool->lists[blk->list];
  clpin__lock(&bk->lock);
  bk->misses++;
  bk->driver_allocs++;
  count_move(bk, blk, COUNT_NONE, COUNT_IN_USE);
  atomic_store_explicit(&blk->state, BLOCK_IN_USE, memory_order_release);
  /* The peak rises before the stripe is unlocked: a snapshot holds every
   * stripe's lock, so it never counts the block's bytes without the peak
   * that covers them (stats racing a release saw reserved > peak). */
  size_t reserved = atomic_fetch_add(&pool->reserved_total, cap) + cap;
  size_t peak = atomic_load(&pool->peak_reserved);
  while (reserved > peak && !atomic_compare_exchange_weak(&pool->peak_reserved, &peak, reserved))
    ;
  stripe_unlock(bk);
  clpin__log_event("pool %p: miss %zu B -> new %zu B block (%zu B reserved)", (void *)pool, nbytes,
                   cap, reserved);
  *out = blk;
  return CL_SUCCESS;
}

/* Hand out an idle block of `from` that fits f, counting it in `to` (the
 * taker's stripe, index to_list) from now on: the first that fits, or for a
 * large request the smallest. Both locks held (one if the same). */
static clpin_block *take_locked(clpin_pool *pool, stripe *from, stripe *to, unsigned to_list,
                                const fit *f) {
  clpin_block **best = NULL;
  for (clpin_block **pp = &from->free; *pp; pp = &(*pp)->next) {
    size_t size = (*pp)->size;
    if (size < f->lo || size > f->hi || (best && size >= (*best)->size))
      continue;
    best = pp;
    if (!f->large || size == f->lo)
      break;
  }
  if (!best)
    return NULL;
  clpin_block *blk = *best;
  *best = blk->next;
  blk->requested = f->lo;
  blk->host_alloc = false;
  if (from != to) {
    count_move(from, blk, COUNT_CACHED, COUNT_NONE);
    count_move(to, blk, COUNT_NONE, COUNT_IN_USE);
    blk->list = to_list;
  } else {
    count_move(to, blk, COUNT_CACHED, COUNT_IN_USE);
  }
  to->hits++;
  if (limited(pool))
    atomic_fetch_sub_explicit(&pool->cached_total, blk->size, memory_order_relaxed);
  atomic_store_explicit(&blk->state, BLOCK_IN_USE, memory_order_release);
  return blk;
}

/* Take an idle block of bucket b in group that fits f: from this thread's
 * stripe, else stolen from another stripe (moved to ours, so it comes back
 * here). NULL if none. No OpenCL call. */
static clpin_block *pop_bucket(clpin_pool *pool, unsigned group, unsigned b, const fit *f) {
  unsigned s = my_stripe();
  unsigned own = list_of(group, b, s);
  stripe *mine = &pool->lists[own];
  clpin__lock(&mine->lock);
  clpin_block *blk = take_locked(pool, mine, mine, own, f);
  stripe_unlock(mine);
  for (unsigned k = 1; !blk && k < CLPIN__STRIPES; k++) {
    unsigned x = list_of(group, b, (s + k) % CLPIN__STRIPES);
    stripe *other = &pool->lists[x];
    /* Two stripes: lock in index order, the order lock_all uses. */
    stripe *first = x < own ? other : mine, *second = x < own ? mine : other;
    clpin__lock(&first->lock);
    clpin__lock(&second->lock);
    blk = take_locked(pool, other, mine, own, f);
    stripe_unlock(second);
    stripe_unlock(first);
  }
  return blk;
}

/* A large request's candidates lie in its own bucket and the next (its
 * bound is under twice the request); every fit in the first is smaller than
 * any in the second. */
static clpin_block *pop_cached(clpin_pool *pool, unsigned group, const fit *f) {
  clpin_block *blk = pop_bucket(pool, group, f->bucket, f);
  if (!blk && f->large && f->bucket + 1 < CLPIN__BUCKETS)
    blk = pop_bucket(pool, group, f->bucket + 1, f);
  if (blk) {
    UNPOISON(blk);
    if (clpin__debug())
      clpin__log_event("pool %p: hit %zu B -> cached %zu B block", (void *)pool, f->lo, blk->size);
  }
  return blk;
}

static bool poll_fit(clpin_pool *pool, unsigned group, const fit *f) {
  size_t landed = poll_bucket(pool, group, f->bucket);
  if (f->large && f->bucket + 1 < CLPIN__BUCKETS)
    landed += poll_bucket(pool, group, f->bucket + 1);
  return landed > 0;
}

/* fn: the public call, named in a refusal's detail. */
static cl_int acquire_in(const char *fn, clpin_pool *pool, unsigned group, size_t nbytes,
                         clpin_block **block) {
  CLPIN__CHECK_IN(fn, !block, CLPIN_ERR_INVALID_ARGUMENT, "block (the out-pointer) is NULL");
  CLPIN__CHECK_IN(fn, nbytes == 0, CLPIN_ERR_INVALID_SIZE,
                  "nbytes is 0: a block holds at least one byte");
  CLPIN__CHECK_IN(fn, nbytes > pool->max_alloc, CLPIN_ERR_INVALID_SIZE,
                  "nbytes %zu is more than the pool's largest block, %zu bytes (the "
                  "devices' CL_DEVICE_MAX_MEM_ALLOC_SIZE)",
                  nbytes, pool->max_alloc);
  fit f = fit_of(pool, nbytes);
  clpin_block *blk = pop_cached(pool, group, &f);
  /* Before paying for a driver allocation, see whether a block that would
   * fit finished its flight. */
  if (!blk && poll_fit(pool, group, &f))
    blk = pop_cached(pool, group, &f);
  if (blk) {
    *block = blk;
    return CL_SUCCESS;
  }
  return acquire_miss(pool, group, &f, block);
}

/* Calls that name no device (clpin_acquire, clpin_host_alloc) get blocks of
 * the context's first device's node. */
static cl_int acquire(const char *fn, clpin_pool *pool, size_t nbytes, clpin_block **block) {
  cl_int err = acquire_in(fn, pool, pool->group[0], nbytes, block);
  /* A clpin code was explained by the check that returned it; the driver's
   * is said here, not in acquire_miss: the transfers fall back on it. */
  if (err != CL_SUCCESS && !clpin__is_clpin_error(err))
    clpin__failf(fn, err, "allocating a %zu-byte pinned block failed, after freeing the idle ones",
                 nbytes);
  return err;
}

cl_int clpin__acquire_for(clpin_pool *pool, cl_device_id device, size_t nbytes,
                          clpin_block **block) {
  pool = clpin__untag(pool); /* the tests pass their handle */
  return acquire_in("clpin_write/clpin_read", pool, group_of(pool, device), nbytes, block);
}

cl_int clpin__acquire(clpin_pool *pool, size_t nbytes, clpin_block **block) {
  return acquire("clpin_host_alloc", pool, nbytes, block);
}

cl_int clpin_acquire(clpin_pool *pool, size_t nbytes, clpin_block **block) {
  cl_int err = clpin__pool_enter_for(__func__, "pool", &pool);
  CLPIN__PASS(err);
  err = acquire(__func__, pool, nbytes, block);
  if (err == CL_SUCCESS)
    *block = block_handle(*block);
  clpin__pool_leave(pool);
  return err;
}

/* ---- release ------------------------------------------------------------ */

/* Lock the stripe that counts blk. A stale second release races a thread
 * that may be stealing the block into its own stripe: the stripe read
 * before the lock is checked again under it. */
static stripe *lock_block_stripe(clpin_pool *pool, clpin_block *blk) {
  for (;;) {
    unsigned l = atomic_load_explicit(&blk->list, memory_order_relaxed);
    stripe *bk = &pool->lists[l];
    clpin__lock(&bk->lock);
    if (atomic_load_explicit(&blk->list, memory_order_relaxed) == l)
      return bk;
    stripe_unlock(bk);
  }
}

/* Move a block that leaves use or flight to its free list, or, when the cap
 * has no room, uncount it (SETTLE_FREE: the caller frees the buffer outside
 * the lock). from BLOCK_IN_USE also claims the block under the bucket lock,
 * so of two racing releases exactly one proceeds (SETTLE_NOT_IN_USE for the
 * other). The block is poisoned under the lock, before another thread can
 * take it off the free list. */
static settle_result settle(clpin_pool *pool, clpin_block *blk, block_state from) {
  stripe *bk = lock_block_stripe(pool, blk);
  bool keep = true;
  if (from == BLOCK_IN_USE &&
      atomic_load_explicit(&blk->state, memory_order_relaxed) != BLOCK_IN_USE) {
    stripe_unlock(bk);
    return SETTLE_NOT_IN_USE;
  }
  count_state was = from == BLOCK_IN_USE ? COUNT_IN_USE : COUNT_IN_FLIGHT;
  if (limited(pool)) {
    /* Reserve room under the cap in one step: two releases on different
     * stripes must not both see the same room (a read, then an add, let
     * both in). */
    size_t limit = atomic_load(&pool->limit);
    size_t cached = atomic_load_explicit(&pool->cached_total, memory_order_relaxed);
    do {
      keep = cached <= limit && blk->size <= limit - cached;
    } while (keep && !atomic_compare_exchange_weak_explicit(
                         &pool->cached_total, &cached, cached + blk->size, memory_order_relaxed,
                         memory_order_relaxed));
  }
  bool quarantined = keep && pool->quarantine_max > 0;
  if (keep) {
    count_move(bk, blk, was, COUNT_CACHED);
    POISON(blk);
    if (SWAP_HANDLES)
      blk = swap_handle(pool, blk);
    if (quarantined) {
      atomic_store_explicit(&blk->state, BLOCK_QUARANTINED, memory_order_relaxed);
    } else {
      blk->next = bk->free;
      bk->free = blk;
      atomic_store_explicit(&blk->state, BLOCK_CACHED, memory_order_relaxed);
    }
  } else {
    count_move(bk, blk, was, COUNT_NONE);
    bk->driver_frees++;
    atomic_store_explicit(&blk->state, BLOCK_RELEASING, memory_order_relaxed);
  }
  stripe_unlock(bk);
  if (quarantined)
    quarantine_push(pool, blk);
  return keep ? SETTLE_CACHED : SETTLE_FREE;
}

/* The event is retained before the claim (no OpenCL call under the lock) and
 * given back if the claim fails. */
static cl_int release_pending(clpin_pool *pool, clpin_block *blk, cl_event pending) {
  cl_int err = clRetainEvent(pending);
  if (err != CL_SUCCESS) {
    clpin__log("clpin_release: cannot hold the pending event: %s", clpin_strerror(err));
    return err;
  }
  size_t size = blk->size; /* once unlocked, the block is the pool's */
  stripe *bk = lock_block_stripe(pool, blk);
  if (atomic_load_explicit(&blk->state, memory_order_relaxed) != BLOCK_IN_USE) {
    stripe_unlock(bk);
    clReleaseEvent(pending);
    return CLPIN_ERR_DOUBLE_RELEASE;
  }
  blk->pending = pending;
  count_move(bk, blk, COUNT_IN_USE, COUNT_IN_FLIGHT);
  blk->next = bk->flight;
  bk->flight = blk;
  atomic_store_explicit(&blk->state, BLOCK_IN_FLIGHT, memory_order_relaxed);
  stripe_unlock(bk);
  clpin__log_event("pool %p: release %zu B block pending an event", (void *)pool, size);
  return CL_SUCCESS;
}

#define RELEASED_TWICE "the block was released already (or never acquired since)"

/* fn: the public call, named in a refusal's detail. */
static cl_int release(const char *fn, clpin_pool *pool, clpin_block *block, cl_event pending) {
  cl_int err;
  /* A cheap early answer for the common mistake; settle() decides races. */
  CLPIN__CHECK_IN(fn, atomic_load_explicit(&block->state, memory_order_relaxed) != BLOCK_IN_USE,
                  CLPIN_ERR_DOUBLE_RELEASE, RELEASED_TWICE);
  CLPIN__CHECK_IN(fn, clpin__handoff_out(&block->handoff), CLPIN_ERR_ON_DEVICE,
                  "the block's memory is handed to the device: clpin_host_reclaim first");
  if (pending) {
    err = release_pending(pool, block, pending);
    CLPIN__CHECK_IN(fn, err == CLPIN_ERR_DOUBLE_RELEASE, err, RELEASED_TWICE);
    CLPIN__CHECK_IN(fn, err != CL_SUCCESS, err, "clRetainEvent on the pending event failed");
    return CL_SUCCESS;
  }
  size_t size = block->size; /* once cached, the block is the pool's */
  switch (settle(pool, block, BLOCK_IN_USE)) {
  case SETTLE_NOT_IN_USE:
    CLPIN__CHECK_IN(fn, true, CLPIN_ERR_DOUBLE_RELEASE, RELEASED_TWICE);
    break;
  case SETTLE_FREE:
    clpin__log_event("pool %p: release over the cap: freeing %zu B block", (void *)pool, size);
    clpin__free_buffer(pool, block);
    break;
  case SETTLE_CACHED:
    if (clpin__debug())
      clpin__log_event("pool %p: release %zu B block to the cache", (void *)pool, size);
    break;
  }
  return CL_SUCCESS;
}

cl_int clpin__release(clpin_block *block, cl_event pending) {
  if (!block)
    return CL_SUCCESS;
  return release("clpin_release", atomic_load(&block->pool), block, pending);
}

#define BLOCK_POOL_GONE                                                                            \
  "the block's pool was released (clpin_pool_release_context or clpin_shutdown), which freed "     \
  "the block"

cl_int clpin_release(clpin_block *handle, cl_event pending) {
  if (!handle)
    return CL_SUCCESS;
  clpin_block *block = clpin__untag(handle);
  unsigned tag = clpin__tag(handle);
  CLPIN__CHECK_FMT(block->magic != CLPIN__BLOCK_MAGIC, CLPIN_ERR_INVALID_BLOCK,
                   "block (%p) is not a block clpin_acquire handed out", (void *)handle);
  /* A generation that moved on: the block's pool was released (and the
   * struct may serve another pool now). Checked again once inside the
   * pool: the pool read here may have been released and reused since. */
  CLPIN__CHECK_WHY(!block_still(handle), CLPIN_ERR_POOL_RELEASED, BLOCK_POOL_GONE);
  clpin_pool *pool = atomic_load(&block->pool);
  cl_int err = clpin__pool_enter_for(__func__, "the block's pool", &pool);
  CLPIN__PASS(err);
  if (tag && !block_still(handle)) {
    clpin__pool_leave(pool);
    CLPIN__CHECK_WHY(true, CLPIN_ERR_POOL_RELEASED, BLOCK_POOL_GONE);
  }
  err = release(__func__, pool, block, pending);
  clpin__pool_leave(pool);
  return err;
}
