/* The pinned pool: power-of-two buckets of mapped CL_MEM_ALLOC_HOST_PTR
 * buffers, each bucket behind its own spinlock.
 *
 * Rules kept throughout:
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
#include "pool.h"
#include "options.h"
#include "topo.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#define CLPIN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CLPIN_ASAN 1
#endif
#endif
#if defined(CLPIN_POISON_IDLE) && defined(CLPIN_ASAN)
#include <sanitizer/asan_interface.h>
/* Debug + ASan: idle blocks are poisoned, so a use after clpin_release is
 * reported. Unpoisoned before the driver may touch the memory again. */
#define POISON(b) ASAN_POISON_MEMORY_REGION((b)->host, (b)->size)
#define UNPOISON(b) ASAN_UNPOISON_MEMORY_REGION((b)->host, (b)->size)
/* And each release gives the block a new handle: the old one is never
 * reused, so a stale second release of it, however late, is refused. */
#define SWAP_HANDLES 1
#else
#define SWAP_HANDLES 0
#define POISON(b) ((void)(b))
#define UNPOISON(b) ((void)(b))
#endif

/* ---- small helpers ------------------------------------------------------ */

/* Stripes of a pool: one set of CLPIN__LISTS per node group. */
#define NLISTS(pool) ((pool)->ngroups * CLPIN__LISTS)

static unsigned list_of(unsigned group, unsigned bucket, unsigned stripe_no) {
  return (group * CLPIN__BUCKETS + bucket) * CLPIN__STRIPES + stripe_no;
}

static unsigned bucket_of(size_t n) {
  if (n < CLPIN_MIN_BLOCK)
    n = CLPIN_MIN_BLOCK;
  return (unsigned)(64 - __builtin_clzll((unsigned long long)(n - 1)));
}

static size_t capacity_of(const clpin_pool *pool, unsigned b) {
  size_t cap = (size_t)1 << b;
  return cap > pool->max_alloc ? pool->max_alloc : cap;
}

static bool limited(const clpin_pool *pool) {
  return atomic_load_explicit(&pool->limit, memory_order_relaxed) != SIZE_MAX;
}

/* Every stripe balances on its own: the counters of a block move together
 * under its stripe's lock (a stolen block moves its reservation along).
 * Debug builds check it after every move and at every unlock, so every test
 * checks it. */
static void assert_balanced(const stripe *s) {
#ifndef NDEBUG
  size_t blocks = 0, bytes = 0;
  for (int i = 0; i < COUNT_STATES; i++) {
    blocks += s->blocks[i];
    bytes += s->bytes[i];
  }
  assert(blocks == s->blocks_reserved && bytes == s->bytes_reserved);
#else
  (void)s;
#endif
}

/* Move blk's count in stripe s from one state to another (COUNT_NONE: into
 * or out of the stripe). A block in use also counts the bytes its caller
 * asked for. The stripe's lock is held. */
static void count_move(stripe *s, const clpin_block *blk, count_state from, count_state to) {
  if (from == COUNT_NONE) {
    s->blocks_reserved++;
    s->bytes_reserved += blk->size;
  } else {
    s->blocks[from]--;
    s->bytes[from] -= blk->size;
  }
  if (to == COUNT_NONE) {
    s->blocks_reserved--;
    s->bytes_reserved -= blk->size;
  } else {
    s->blocks[to]++;
    s->bytes[to] += blk->size;
  }
  if (from == COUNT_IN_USE)
    s->bytes_requested -= blk->requested;
  if (to == COUNT_IN_USE)
    s->bytes_requested += blk->requested;
  assert_balanced(s);
}

static void stripe_unlock(stripe *s) {
  assert_balanced(s);
  clpin__unlock(&s->lock);
}

static void lock_all(clpin_pool *pool) {
  for (unsigned i = 0; i < NLISTS(pool); i++)
    clpin__lock(&pool->lists[i].lock);
}

static void unlock_all(clpin_pool *pool) {
  for (unsigned i = NLISTS(pool); i-- > 0;)
    stripe_unlock(&pool->lists[i]);
}

/* This thread's stripe, dealt round-robin on first use. */
static unsigned my_stripe(void) {
  static atomic_uint next_stripe;
  static _Thread_local unsigned mine __attribute__((tls_model("initial-exec"))) = UINT_MAX;
  if (mine == UINT_MAX)
    mine = atomic_fetch_add_explicit(&next_stripe, 1, memory_order_relaxed) % CLPIN__STRIPES;
  return mine;
}

/* ---- lifecycle: the pool's users ---------------------------------------- */

/* Enter increments, then reads `released`; the release stores `released`,
 * then sums the counts. Both sides are sequentially consistent, so either
 * the user sees the flag and backs out, or the release sees the user and
 * waits for it (Dekker's pattern): no user is ever inside a freed pool. */
/* A handle's generation is read after `released`: a slot is reused only
 * after its generation moved on (clpin__pool_recycle) and is opened
 * (`released` false) only after that, so a stale handle that reads the
 * slot open also reads the new generation. */
cl_int clpin__pool_enter(clpin_pool **handle) {
  if (clpin__forked())
    return CLPIN_ERR_FORKED;
  if (!*handle)
    return CLPIN_ERR_INVALID_ARGUMENT;
  clpin_pool *pool = clpin__untag(*handle);
  unsigned tag = clpin__tag(*handle);
  if (pool->magic != CLPIN__POOL_MAGIC)
    return CLPIN_ERR_INVALID_ARGUMENT;
  if (tag && atomic_load(&pool->gen) != tag)
    return CLPIN_ERR_POOL_RELEASED; /* the slot was reused */
  atomic_long *n = &pool->users[my_stripe()].n;
  atomic_fetch_add(n, 1);
  if (atomic_load(&pool->released) || (tag && atomic_load(&pool->gen) != tag)) {
    atomic_fetch_sub_explicit(n, 1, memory_order_release);
    return CLPIN_ERR_POOL_RELEASED;
  }
  *handle = pool;
  return CL_SUCCESS;
}

void clpin__pool_leave(clpin_pool *pool) {
  pool = clpin__untag(pool);
  atomic_fetch_sub_explicit(&pool->users[my_stripe()].n, 1, memory_order_release);
}

clpin_pool *clpin__pool_handle(clpin_pool *pool) {
  return clpin__tagged(pool, atomic_load(&pool->gen));
}

/* Whether the handle still named that block (its
 * struct was not reused meanwhile). */
static bool block_still(const clpin_block *h) {
  unsigned tag = clpin__tag(h);
  return !tag || atomic_load(&((const clpin_block *)clpin__untag(h))->gen) == tag;
}

/* The caller's handle to a block (NULL stays NULL). */
static clpin_block *block_handle(clpin_block *blk) {
  return blk ? clpin__tagged(blk, atomic_load(&blk->gen)) : NULL;
}

static long count_users(clpin_pool *pool) {
  long sum = 0;
  for (unsigned i = 0; i < CLPIN__STRIPES; i++)
    sum += atomic_load(&pool->users[i].n);
  return sum;
}

/* Wait until every user has left. Users are calls in progress and queued
 * transfers whose DMAs run: each ends in bounded time, so a short sleep
 * between looks costs the release little and the users nothing. */
static void wait_users(clpin_pool *pool) {
  for (unsigned spins = 0; count_users(pool) != 0; spins++) {
    if (spins < 64) {
      sched_yield();
    } else {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
}

/* ---- the address index (clpin_pool_find, clpin_host_free) --------------- */

/* Position of the first index entry whose host address is > p. Lock held. */
static size_t index_upper(const clpin_pool *pool, const void *p) {
  size_t lo = 0, hi = pool->nindex;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if ((uintptr_t)pool->index[mid]->host <= (uintptr_t)p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static void orphan_forget(const void *lo, size_t len);

static cl_int index_insert(clpin_pool *pool, clpin_block *blk) {
  /* The block's memory is live again: a pointer into it is no longer memory
   * a released pool freed (below, "pinned memory by pointer"). */
  orphan_forget(blk->host, blk->size);
  clpin__lock(&pool->index_lock);
  if (pool->nindex == pool->capindex) {
    size_t cap = pool->capindex ? pool->capindex * 2 : 64;
    clpin_block **grown = realloc(pool->index, cap * sizeof *grown);
    if (!grown) {
      clpin__unlock(&pool->index_lock);
      return CL_OUT_OF_HOST_MEMORY;
    }
    pool->index = grown;
    pool->capindex = cap;
  }
  size_t at = index_upper(pool, blk->host);
  memmove(pool->index + at + 1, pool->index + at, (pool->nindex - at) * sizeof *pool->index);
  pool->index[at] = blk;
  pool->nindex++;
  clpin__unlock(&pool->index_lock);
  return CL_SUCCESS;
}

static void index_remove(clpin_pool *pool, clpin_block *blk) {
  clpin__lock(&pool->index_lock);
  size_t at = index_upper(pool, blk->host);
  if (at > 0 && pool->index[at - 1] == blk) {
    memmove(pool->index + at - 1, pool->index + at, (pool->nindex - at) * sizeof *pool->index);
    pool->nindex--;
  }
  clpin__unlock(&pool->index_lock);
}

clpin_block *clpin__pool_lookup(clpin_pool *pool, const void *ptr, size_t n) {
  clpin_block *found = NULL;
  clpin__lock(&pool->index_lock);
  size_t at = index_upper(pool, ptr);
  if (at > 0) {
    clpin_block *blk = pool->index[at - 1];
    size_t off = (size_t)((uintptr_t)ptr - (uintptr_t)blk->host);
    if (off < blk->size && n <= blk->size - off &&
        atomic_load_explicit(&blk->state, memory_order_acquire) == BLOCK_IN_USE)
      found = blk;
  }
  clpin__unlock(&pool->index_lock);
  return found;
}

/* ---- block structs ------------------------------------------------------ */

/* Block structs of released pools, for any pool to reuse (their generation
 * already moved on: see spare_blocks_add). */
static clpin__spinlock spare_blocks_lock = CLPIN__SPINLOCK_INIT;
static clpin_block *spare_blocks;

static clpin_block *new_block_struct(clpin_pool *pool) {
  clpin__lock(&pool->dead_lock);
  clpin_block *blk = pool->dead;
  if (blk)
    pool->dead = blk->next;
  clpin__unlock(&pool->dead_lock);
  if (!blk) {
    clpin__lock(&spare_blocks_lock);
    blk = spare_blocks;
    if (blk)
      spare_blocks = blk->next;
    clpin__unlock(&spare_blocks_lock);
    if (blk)
      atomic_store(&blk->pool, pool);
  }
  if (blk) {
    /* Only a stale handle could still read these, and the DEAD state
     * already answers it; the fields are cleared here, by the one thread
     * that owns the struct now, not when it died (a handle's accessors may
     * race a pool's release). */
    blk->buffer = NULL;
    blk->host = NULL;
    return blk;
  }
  blk = clpin__arena_alloc(sizeof *blk);
  if (!blk)
    return NULL;
  blk->magic = CLPIN__BLOCK_MAGIC;
  atomic_init(&blk->gen, 1);
  atomic_init(&blk->pool, pool);
  atomic_init(&blk->state, BLOCK_DEAD);
  return blk; /* lives in the arena until the process ends, reused */
}

/* A destroyed pool's block structs (its dead list: every buffer is freed)
 * go to the spare list with their generation moved on, so that their old
 * handles answer CLPIN_ERR_POOL_RELEASED whoever reuses them. */
static void spare_blocks_add(clpin_pool *pool) {
  clpin_block *keep = NULL, *keep_tail = NULL;
  clpin__lock(&pool->dead_lock);
  clpin_block *list = pool->dead;
  pool->dead = NULL;
  clpin__unlock(&pool->dead_lock);
  while (list) {
    clpin_block *blk = list;
    list = blk->next;
    unsigned gen = atomic_load(&blk->gen);
    if (gen >= CLPIN__GEN_MAX)
      continue; /* its generations are spent: never reused */
    atomic_store(&blk->gen, gen + 1);
    blk->next = keep;
    keep = blk;
    if (!keep_tail)
      keep_tail = blk;
  }
  if (!keep)
    return;
  clpin__lock(&spare_blocks_lock);
  keep_tail->next = spare_blocks;
  spare_blocks = keep;
  clpin__unlock(&spare_blocks_lock);
}

/* The struct stays allocated (a stale handle must stay safe to pass). Its
 * buffer and host fields keep their last values: another thread may be in
 * clpin_block_host on a block its pool's release is freeing, and reads
 * the state first. */
static void recycle_block_struct(clpin_pool *pool, clpin_block *blk) {
  atomic_store_explicit(&blk->state, BLOCK_DEAD, memory_order_release);
  clpin__lock(&pool->dead_lock);
  blk->next = pool->dead;
  pool->dead = blk;
  clpin__unlock(&pool->dead_lock);
}

/* ---- driver allocation -------------------------------------------------- */

/* The memory of a NUMA-placed block: clpin maps and binds it (mbind, in
 * topo.c) and hands it to the driver as CL_MEM_USE_HOST_PTR, which pins it
 * where the driver pins such memory (NVIDIA does, as registration relies
 * on: docs/STAGING.md). Binding the mapping, not the allocating thread's
 * policy around an ALLOC_HOST_PTR create, is what decides placement on every
 * driver: with ALLOC_HOST_PTR the pages land wherever the driver or the
 * first thread to touch them runs (POCL: the first copy). NULL mapping when
 * the kernel refuses the node: the block is then an ALLOC_HOST_PTR one,
 * still kept on its group's lists. */
static cl_mem create_placed(clpin_pool *pool, const struct clpin__node_group *g, size_t cap,
                            clpin_block *blk, cl_int *err) {
  size_t len = (cap + 4095) & ~(size_t)4095;
  void *p = clpin__topo_map_on_node(len, g->node);
  if (!p) {
    clpin__log("pool %p: cannot bind %zu B to node %d (%s): not placed", (void *)pool, cap, g->node,
               strerror(errno));
    return clCreateBuffer(pool->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, cap, NULL, err);
  }
  cl_mem buf = clCreateBuffer(pool->ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, cap, p, err);
  if (*err != CL_SUCCESS) {
    munmap(p, len);
    return NULL;
  }
  blk->mapping = p;
  blk->mapping_len = len;
  return buf;
}

static void unmap_placed(clpin_block *blk) {
  if (blk->mapping)
    munmap(blk->mapping, blk->mapping_len);
  blk->mapping = NULL;
  blk->mapping_len = 0;
}

static cl_int alloc_buffer(clpin_pool *pool, size_t cap, clpin_block *blk) {
  cl_int err;
  const struct clpin__node_group *g = &pool->groups[blk->group];
  blk->mapping = NULL;
  cl_mem buf = g->bind ? create_placed(pool, g, cap, blk, &err)
                       : clCreateBuffer(pool->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, cap,
                                        NULL, &err);
  if (err != CL_SUCCESS) {
    unmap_placed(blk);
    return err;
  }
  void *p = clEnqueueMapBuffer(pool->queue, buf, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, cap, 0,
                               NULL, NULL, &err);
  if (err == CL_SUCCESS && !p)
    err = CL_MAP_FAILURE;
  if (err != CL_SUCCESS) {
    clReleaseMemObject(buf);
    unmap_placed(blk);
    return err;
  }
  blk->buffer = buf;
  blk->host = p;
  clpin__handoff_init(&blk->handoff);
  return CL_SUCCESS;
}

/* Release a block's buffer and, for a placed one, its mapping once the
 * driver is done with it: the unmap is finished first (the buffer may go
 * only after), and the release is the last reference (no DMA still uses a
 * block being freed). */
static void drop_buffer(clpin_pool *pool, clpin_block *blk) {
  if (blk->mapping)
    clFinish(pool->queue);
  cl_int err = clReleaseMemObject(blk->buffer);
  if (err != CL_SUCCESS)
    clpin__log("pool %p: release of %zu B failed: %s", (void *)pool, blk->size,
               clpin_strerror(err));
  unmap_placed(blk);
}

/* Unmap and release a block's buffer; the block is no longer counted
 * anywhere. Failures are logged: the buffer is released regardless, so a
 * failing unmap cannot leak it. */
static void free_buffer(clpin_pool *pool, clpin_block *blk) {
  UNPOISON(blk);
  index_remove(pool, blk);
  /* A block handed to the device (a pool's release) is unmapped already. */
  cl_int err = clpin__handoff_end(&blk->handoff)
                   ? clEnqueueUnmapMemObject(pool->queue, blk->buffer, blk->host, 0, NULL, NULL)
                   : CL_SUCCESS;
  if (err != CL_SUCCESS)
    clpin__log("pool %p: unmap of %zu B failed: %s", (void *)pool, blk->size, clpin_strerror(err));
  else
    clFlush(pool->queue);
  drop_buffer(pool, blk);
  size_t left = atomic_fetch_sub(&pool->reserved_total, blk->size) - blk->size;
  clpin__log("pool %p: freed %zu B block (%zu B reserved)", (void *)pool, blk->size, left);
  recycle_block_struct(pool, blk);
}

/* Take an idle block off its bucket for freeing. Bucket lock held. */
static void uncount_cached(clpin_pool *pool, stripe *bk, clpin_block *blk) {
  count_move(bk, blk, COUNT_CACHED, COUNT_NONE);
  bk->driver_frees++;
  if (limited(pool))
    atomic_fetch_sub_explicit(&pool->cached_total, blk->size, memory_order_relaxed);
}

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
  size_t at = index_upper(pool, old->host);
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
static size_t free_idle(clpin_pool *pool) {
  size_t freed = 0;
  quarantine_drain(pool);
  for (unsigned i = 0; i < NLISTS(pool); i++) {
    stripe *bk = &pool->lists[i];
    clpin__lock(&bk->lock);
    clpin_block *list = bk->free;
    bk->free = NULL;
    for (clpin_block *blk = list; blk; blk = blk->next)
      uncount_cached(pool, bk, blk);
    stripe_unlock(bk);
    while (list) {
      clpin_block *next = list->next;
      freed += list->size;
      free_buffer(pool, list);
      list = next;
    }
  }
  return freed;
}

/* Free idle blocks, largest first, until idle bytes are within the cap. */
static void enforce_cap(clpin_pool *pool) {
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
        uncount_cached(pool, bk, blk);
      }
      stripe_unlock(bk);
      if (!blk)
        break;
      free_buffer(pool, blk);
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
      free_buffer(pool, blk);
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

static void poll_all(clpin_pool *pool) {
  for (unsigned i = 0; i < NLISTS(pool); i++)
    poll_list(pool, &pool->lists[i]);
}

/* ---- sizes ---------------------------------------------------------------- */

/* What a request may get. Up to CLPIN_ROUND_MAX: its power-of-two bucket's
 * capacity, as always (many sizes share few blocks). Above it: a block of
 * at most max(request x 1.125, request + 2 MiB) (DESIGN.md, "Topology and
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
  clpin_block *blk = new_block_struct(pool);
  if (!blk)
    return CL_OUT_OF_HOST_MEMORY;
  blk->group = group;
  cl_int err = alloc_buffer(pool, cap, blk);
  if (clpin__is_oom(err)) {
    atomic_fetch_add(&pool->oom_retries, 1);
    size_t freed = free_idle(pool);
    clpin__log("pool %p: allocating %zu B failed (%s); freed %zu idle B, retrying once",
               (void *)pool, cap, clpin_strerror(err), freed);
    err = alloc_buffer(pool, cap, blk);
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
    err = index_insert(pool, blk);
  if (err != CL_SUCCESS) {
    if (blk->buffer) {
      clEnqueueUnmapMemObject(pool->queue, blk->buffer, blk->host, 0, NULL, NULL);
      drop_buffer(pool, blk);
    }
    recycle_block_struct(pool, blk);
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
  clpin__log("pool %p: miss %zu B -> new %zu B block (%zu B reserved)", (void *)pool, nbytes, cap,
             reserved);
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
      clpin__log("pool %p: hit %zu B -> cached %zu B block", (void *)pool, f->lo, blk->size);
  }
  return blk;
}

static bool poll_fit(clpin_pool *pool, unsigned group, const fit *f) {
  size_t landed = poll_bucket(pool, group, f->bucket);
  if (f->large && f->bucket + 1 < CLPIN__BUCKETS)
    landed += poll_bucket(pool, group, f->bucket + 1);
  return landed > 0;
}

static cl_int acquire_in(clpin_pool *pool, unsigned group, size_t nbytes, clpin_block **block) {
  CLPIN__CHECK(!block, CLPIN_ERR_INVALID_ARGUMENT);
  CLPIN__CHECK(nbytes == 0 || nbytes > pool->max_alloc, CLPIN_ERR_INVALID_SIZE);
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
static cl_int acquire(clpin_pool *pool, size_t nbytes, clpin_block **block) {
  return acquire_in(pool, pool->group[0], nbytes, block);
}

/* The node group of device: its index in the pool, or the first device's
 * for one not in the context. */
static unsigned group_of(const clpin_pool *pool, cl_device_id device) {
  for (cl_uint i = 0; i < pool->ndevices; i++)
    if (pool->devices[i] == device)
      return pool->group[i];
  return pool->group[0];
}

cl_int clpin__acquire_for(clpin_pool *pool, cl_device_id device, size_t nbytes,
                          clpin_block **block) {
  pool = clpin__untag(pool); /* the tests pass their handle */
  return acquire_in(pool, group_of(pool, device), nbytes, block);
}

cl_int clpin__acquire(clpin_pool *pool, size_t nbytes, clpin_block **block) {
  return acquire(pool, nbytes, block);
}

cl_int clpin_acquire(clpin_pool *pool, size_t nbytes, clpin_block **block) {
  cl_int err = clpin__pool_enter(&pool);
  CLPIN__CHECK(err != CL_SUCCESS, err);
  err = acquire(pool, nbytes, block);
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
  clpin__log("pool %p: release %zu B block pending an event", (void *)pool, size);
  return CL_SUCCESS;
}

static cl_int release(clpin_pool *pool, clpin_block *block, cl_event pending) {
  cl_int err;
  /* A cheap early answer for the common mistake; settle() decides races. */
  CLPIN__CHECK(atomic_load_explicit(&block->state, memory_order_relaxed) != BLOCK_IN_USE,
               CLPIN_ERR_DOUBLE_RELEASE);
  CLPIN__CHECK_WHY(clpin__handoff_out(&block->handoff), CLPIN_ERR_ON_DEVICE,
                   "the block's memory is handed to the device: clpin_host_reclaim first");
  if (pending) {
    err = release_pending(pool, block, pending);
    CLPIN__CHECK(err != CL_SUCCESS, err);
    return CL_SUCCESS;
  }
  size_t size = block->size; /* once cached, the block is the pool's */
  switch (settle(pool, block, BLOCK_IN_USE)) {
  case SETTLE_NOT_IN_USE: CLPIN__CHECK(true, CLPIN_ERR_DOUBLE_RELEASE); break;
  case SETTLE_FREE:
    clpin__log("pool %p: release over the cap: freeing %zu B block", (void *)pool, size);
    free_buffer(pool, block);
    break;
  case SETTLE_CACHED:
    if (clpin__debug())
      clpin__log("pool %p: release %zu B block to the cache", (void *)pool, size);
    break;
  }
  return CL_SUCCESS;
}

cl_int clpin__release(clpin_block *block, cl_event pending) {
  if (!block)
    return CL_SUCCESS;
  return release(atomic_load(&block->pool), block, pending);
}

cl_int clpin_release(clpin_block *handle, cl_event pending) {
  if (!handle)
    return CL_SUCCESS;
  clpin_block *block = clpin__untag(handle);
  unsigned tag = clpin__tag(handle);
  CLPIN__CHECK(block->magic != CLPIN__BLOCK_MAGIC, CLPIN_ERR_INVALID_BLOCK);
  /* A generation that moved on: the block's pool was released (and the
   * struct may serve another pool now). Checked again once inside the
   * pool: the pool read here may have been released and reused since. */
  CLPIN__CHECK(!block_still(handle), CLPIN_ERR_POOL_RELEASED);
  clpin_pool *pool = atomic_load(&block->pool);
  cl_int err = clpin__pool_enter(&pool);
  CLPIN__CHECK(err != CL_SUCCESS, err);
  if (tag && !block_still(handle)) {
    clpin__pool_leave(pool);
    CLPIN__CHECK(true, CLPIN_ERR_POOL_RELEASED);
  }
  err = release(pool, block, pending);
  clpin__pool_leave(pool);
  return err;
}

/* ---- accessors ---------------------------------------------------------- */

/* The struct of a live block's handle, or NULL: not a block, dead, or a
 * handle of an earlier generation (its pool was released). */
static const clpin_block *block_ok(const clpin_block *h) {
  if (!h)
    return NULL;
  const clpin_block *b = clpin__untag(h);
  unsigned tag = clpin__tag(h);
  if (b->magic != CLPIN__BLOCK_MAGIC || (tag && atomic_load(&b->gen) != tag) ||
      atomic_load(&b->state) == BLOCK_DEAD)
    return NULL;
  return b;
}

void *clpin_block_host(const clpin_block *block) {
  const clpin_block *b = block_ok(block);
  void *host = b ? b->host : NULL;
  return b && block_still(block) ? host : NULL;
}
cl_mem clpin_block_buffer(const clpin_block *block) {
  const clpin_block *b = block_ok(block);
  cl_mem buffer = b ? b->buffer : NULL;
  return b && block_still(block) ? buffer : NULL;
}
size_t clpin_block_size(const clpin_block *block) {
  const clpin_block *b = block_ok(block);
  size_t size = b ? b->size : 0;
  return b && block_still(block) ? size : 0;
}

/* ---- control and stats -------------------------------------------------- */

cl_int clpin_pool_trim(clpin_pool *pool) {
  cl_int err = clpin__pool_enter(&pool);
  CLPIN__CHECK(err != CL_SUCCESS, err);
  poll_all(pool);
  size_t freed = free_idle(pool);
  clpin__log("pool %p: trim freed %zu B", (void *)pool, freed);
  clpin__pool_leave(pool);
  return CL_SUCCESS;
}

cl_int clpin_pool_set_limit(clpin_pool *pool, size_t max_cached_bytes) {
  cl_int err = clpin__pool_enter(&pool);
  CLPIN__CHECK(err != CL_SUCCESS, err);
  atomic_store(&pool->limit, max_cached_bytes);
  /* cached_total is kept only while a cap is set: recount it with every
   * bucket held, so no release slips between the count and the new cap. */
  lock_all(pool);
  size_t cached = 0;
  for (unsigned i = 0; i < NLISTS(pool); i++)
    cached += pool->lists[i].bytes[COUNT_CACHED];
  atomic_store(&pool->cached_total, cached);
  unlock_all(pool);
  if (clpin__debug()) {
    char cap[32];
    clpin__log("pool %p: cap on idle bytes set to %s", (void *)pool,
               clpin__format_size(max_cached_bytes, cap, sizeof cap));
  }
  poll_all(pool);
  enforce_cap(pool);
  clpin__pool_leave(pool);
  return CL_SUCCESS;
}

/* The size of clpin_stats in 0.1.0: the smallest struct_size accepted. */
#define STATS_MIN_SIZE (offsetof(clpin_stats, bytes_unpinned) + sizeof(uint64_t))

/* The counters, with every stripe locked so they agree with each other. */
static void snapshot(clpin_pool *pool, clpin_stats *out) {
  clpin_stats s;
  memset(&s, 0, sizeof s);
  lock_all(pool);
  for (unsigned i = 0; i < NLISTS(pool); i++) {
    const stripe *bk = &pool->lists[i];
    s.hits += bk->hits;
    s.misses += bk->misses;
    s.driver_allocs += bk->driver_allocs;
    s.driver_frees += bk->driver_frees;
    s.blocks_cached += bk->blocks[COUNT_CACHED];
    s.bytes_cached += bk->bytes[COUNT_CACHED];
    s.blocks_in_use += bk->blocks[COUNT_IN_USE];
    s.bytes_in_use += bk->bytes[COUNT_IN_USE];
    s.blocks_in_flight += bk->blocks[COUNT_IN_FLIGHT];
    s.bytes_in_flight += bk->bytes[COUNT_IN_FLIGHT];
    s.bytes_requested += bk->bytes_requested;
    s.bytes_reserved += bk->bytes_reserved;
  }
  unlock_all(pool);
  s.peak_bytes_reserved = atomic_load(&pool->peak_reserved);
  s.oom_retries = atomic_load(&pool->oom_retries);
  s.fallbacks = atomic_load(&pool->counters[CLPIN__FALLBACKS]);
  s.bytes_pinned_direct = atomic_load(&pool->counters[CLPIN__BYTES_PINNED_DIRECT]);
  s.bytes_staged = atomic_load(&pool->counters[CLPIN__BYTES_STAGED]);
  s.bytes_pipelined = atomic_load(&pool->counters[CLPIN__BYTES_PIPELINED]);
  s.bytes_unpinned = atomic_load(&pool->counters[CLPIN__BYTES_UNPINNED]);
  s.bytes_registered = atomic_load(&pool->bytes_registered);
  s.bytes_zero_copy = atomic_load(&pool->counters[CLPIN__BYTES_ZERO_COPY]);
  *out = s;
}

cl_int clpin_pool_stats(clpin_pool *handle, clpin_stats *stats) {
  CLPIN__CHECK(clpin__forked(), CLPIN_ERR_FORKED); /* a snapshot takes the stripes' locks */
  /* A released pool still answers: its final counters, until its slot is
   * reused (registry.c); then CLPIN_ERR_POOL_RELEASED. */
  clpin_pool *pool = clpin__untag(handle);
  unsigned tag = clpin__tag(handle);
  CLPIN__CHECK(!pool || pool->magic != CLPIN__POOL_MAGIC || !stats, CLPIN_ERR_INVALID_ARGUMENT);
  CLPIN__CHECK_WHY(stats->struct_size < STATS_MIN_SIZE, CLPIN_ERR_INVALID_ARGUMENT,
                   "stats->struct_size is 0 or too small: set it to sizeof(clpin_stats)");
  clpin_stats s;
  clpin_pool *inside = handle;
  cl_int err = clpin__pool_enter(&inside);
  if (err == CL_SUCCESS) {
    /* Land the blocks whose events completed, so the snapshot is current. */
    poll_all(pool);
    snapshot(pool, &s);
    clpin__pool_leave(pool);
  } else {
    /* Released, or being released right now: the release publishes the
     * final counters once it has freed everything. A reused slot (now, or
     * while waiting or copying) has none of this pool's left. */
    bool gone = err != CLPIN_ERR_POOL_RELEASED;
    while (!gone && !atomic_load_explicit(&pool->final_ready, memory_order_acquire)) {
      gone = tag && atomic_load(&pool->gen) != tag;
      sched_yield();
    }
    if (!gone)
      s = pool->final;
    gone = gone || (tag && atomic_load(&pool->gen) != tag);
    CLPIN__CHECK(gone, err);
  }
  size_t n = stats->struct_size;
  s.struct_size = n;
  if (n > sizeof s) {
    memset((char *)stats + sizeof s, 0, n - sizeof s);
    n = sizeof s;
  }
  memcpy(stats, &s, n);
  return CL_SUCCESS;
}

void clpin__count(clpin_pool *pool, clpin__counter c, uint64_t amount) {
  if (pool && (unsigned)c < CLPIN__COUNTER_COUNT)
    atomic_fetch_add_explicit(&pool->counters[c], amount, memory_order_relaxed);
}

/* ---- pinned memory by pointer ------------------------------------------- */

/* Pointers clpin_host_alloc handed out whose pool was released before they
 * were freed: clpin_host_free answers CLPIN_ERR_POOL_RELEASED for them (once;
 * a later clpin_host_alloc at the same address takes the address back). At
 * most CLPIN__ORPHANS are remembered, the newest: a program that releases
 * contexts without freeing their memory, context after context, must not
 * grow this list for ever (what released contexts leave behind is bounded,
 * docs/API.md); an older pointer answers CLPIN_ERR_FOREIGN_POINTER. */
#define CLPIN__ORPHANS 1024
static struct {
  pthread_mutex_t lock;
  void *ptrs[CLPIN__ORPHANS];
  size_t n, victim;    /* victim: the slot a full list overwrites next (the oldest) */
  atomic_size_t count; /* n, read without the lock: host_alloc's fast path */
} orphans = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void orphan_add(void *ptr) {
  pthread_mutex_lock(&orphans.lock);
  if (orphans.n < CLPIN__ORPHANS) {
    orphans.ptrs[orphans.n++] = ptr;
  } else {
    orphans.ptrs[orphans.victim] = ptr;
    orphans.victim = (orphans.victim + 1) % CLPIN__ORPHANS;
  }
  atomic_store_explicit(&orphans.count, orphans.n, memory_order_relaxed);
  pthread_mutex_unlock(&orphans.lock);
}

/* Forget the remembered pointers inside [lo, lo + len): memory the driver
 * handed out again, to a new block (a pointer into it is not a released
 * pool's any more). */
static void orphan_forget(const void *lo, size_t len) {
  if (atomic_load_explicit(&orphans.count, memory_order_relaxed) == 0)
    return;
  uintptr_t a = (uintptr_t)lo, b = a + len;
  pthread_mutex_lock(&orphans.lock);
  for (size_t i = 0; i < orphans.n;) {
    uintptr_t p = (uintptr_t)orphans.ptrs[i];
    if (p >= a && p < b) {
      orphans.ptrs[i] = orphans.ptrs[--orphans.n];
      orphans.victim = orphans.victim < orphans.n ? orphans.victim : 0;
    } else {
      i++;
    }
  }
  atomic_store_explicit(&orphans.count, orphans.n, memory_order_relaxed);
  pthread_mutex_unlock(&orphans.lock);
}

static bool orphan_take(void *ptr) {
  if (atomic_load_explicit(&orphans.count, memory_order_relaxed) == 0)
    return false;
  bool found = false;
  pthread_mutex_lock(&orphans.lock);
  for (size_t i = 0; i < orphans.n && !found; i++)
    if (orphans.ptrs[i] == ptr) {
      orphans.ptrs[i] = orphans.ptrs[--orphans.n];
      orphans.victim = orphans.victim < orphans.n ? orphans.victim : 0;
      found = true;
    }
  atomic_store_explicit(&orphans.count, orphans.n, memory_order_relaxed);
  pthread_mutex_unlock(&orphans.lock);
  return found;
}

void *clpin_host_alloc(clpin_pool *pool, size_t nbytes) {
  /* Held across the acquire and the reads after it: a release racing this
   * call must not free the block in between. */
  if (clpin__pool_enter(&pool) != CL_SUCCESS)
    return NULL;
  clpin_block *blk;
  void *host = NULL;
  if (acquire(pool, nbytes, &blk) == CL_SUCCESS) {
    blk->host_alloc = true;
    orphan_take(blk->host); /* the address is live again */
    host = blk->host;
  }
  clpin__pool_leave(pool);
  return host;
}

/* clpin_host_free: the block that starts exactly at ptr, handed out by
 * clpin_host_alloc, as a handle (under the registry lock, so its pool is
 * live and the generation current): should the pool be released before
 * clpin_release runs, the handle answers CLPIN_ERR_POOL_RELEASED, whoever
 * reuses the struct. */
static void *find_host_alloc(clpin_pool *pool, void *ptr) {
  clpin_block *blk = clpin__pool_lookup(pool, ptr, 1);
  return blk && blk->host == ptr && blk->host_alloc ? block_handle(blk) : NULL;
}

cl_int clpin_host_free(void *ptr) {
  if (!ptr)
    return CL_SUCCESS;
  CLPIN__CHECK(clpin__forked(), CLPIN_ERR_FORKED);
  clpin_block *blk = clpin__registry_find(find_host_alloc, ptr);
  CLPIN__CHECK_WHY(!blk && orphan_take(ptr), CLPIN_ERR_POOL_RELEASED,
                   "ptr came from clpin_host_alloc on a pool released since: its memory was "
                   "freed with the pool");
  CLPIN__CHECK_WHY(!blk, CLPIN_ERR_FOREIGN_POINTER,
                   "ptr is not the start of live clpin_host_alloc memory");
  cl_int err = clpin_release(blk, NULL);
  /* Lost a race with another free of the same pointer: it is freed now. */
  return err == CLPIN_ERR_DOUBLE_RELEASE ? CLPIN_ERR_FOREIGN_POINTER : err;
}

void clpin__pool_report_unreleased(clpin_pool *pool) {
  clpin_stats s;
  snapshot(pool, &s); /* no OpenCL call: the driver may be gone at exit */
  clpin__log("pool %p of context %p was never released (clpin_pool_release_context): it "
             "holds the context and %zu pinned bytes in %zu blocks (%zu in use)",
             (void *)pool, (void *)pool->ctx, s.bytes_reserved,
             s.blocks_cached + s.blocks_in_use + s.blocks_in_flight, s.blocks_in_use);
}

clpin_block *clpin_pool_find(clpin_pool *pool, const void *ptr, size_t nbytes, size_t *offset) {
  if (!ptr || clpin__pool_enter(&pool) != CL_SUCCESS)
    return NULL;
  clpin_block *blk = clpin__pool_lookup(pool, ptr, nbytes);
  if (blk && offset)
    *offset = (size_t)((uintptr_t)ptr - (uintptr_t)blk->host);
  clpin__pool_leave(pool);
  return block_handle(blk);
}

bool clpin__block_target(clpin_pool *pool, const void *ptr, size_t n, clpin__handoff_target *t) {
  clpin_block *blk = clpin__pool_lookup(pool, ptr, n);
  if (!blk)
    return false;
  t->buffer = blk->buffer;
  t->host = blk->host;
  t->size = blk->size;
  t->h = &blk->handoff;
  t->reg = NULL;
  return true;
}

bool clpin__block_out(const clpin_block *block) {
  clpin_block *blk = clpin__untag(block);
  return blk && clpin__handoff_out(&blk->handoff);
}

/* ---- pool life ---------------------------------------------------------- */

cl_context clpin__pool_context(const clpin_pool *pool) {
  return ((const clpin_pool *)clpin__untag(pool))->ctx;
}
cl_command_queue clpin__pool_queue(const clpin_pool *pool) {
  return ((const clpin_pool *)clpin__untag(pool))->queue;
}
/* The getters below read a live pool; they take the struct (clpin's own
 * paths) or a caller's handle (the tests, the layer), whose generation bits
 * they drop. */
cl_command_queue clpin__pool_dma_queue(const clpin_pool *pool, cl_device_id device, int dir) {
  pool = clpin__untag(pool);
  for (cl_uint i = 0; i < pool->ndevices; i++)
    if (pool->devices[i] == device)
      return pool->dma[i][dir != 0];
  return NULL;
}

int clpin__pool_device_node(const clpin_pool *pool, cl_device_id device) {
  pool = clpin__untag(pool);
  return pool->groups[group_of(pool, device)].node;
}

const void *clpin__pool_device_cpus(const clpin_pool *pool, cl_device_id device) {
  pool = clpin__untag(pool);
  const struct clpin__node_group *g = &pool->groups[group_of(pool, device)];
  return g->has_cpus ? &g->cpus : NULL;
}

void clpin__pool_count_device(clpin_pool *pool, cl_command_queue q, int dir, uint64_t nbytes) {
  pool = clpin__untag(pool);
  cl_device_id device = NULL;
  if (clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof device, &device, NULL) != CL_SUCCESS)
    return;
  for (cl_uint i = 0; i < pool->ndevices; i++)
    if (pool->devices[i] == device)
      atomic_fetch_add_explicit(&pool->dev_bytes[i][dir != 0], nbytes, memory_order_relaxed);
}

uint64_t clpin__pool_device_bytes(clpin_pool *pool, cl_device_id device, int dir) {
  pool = clpin__untag(pool);
  for (cl_uint i = 0; i < pool->ndevices; i++)
    if (pool->devices[i] == device)
      return atomic_load(&pool->dev_bytes[i][dir != 0]);
  return 0;
}

int clpin__block_node(const clpin_block *block) {
  const clpin_block *b = block_ok(block);
  const clpin_pool *pool = b ? atomic_load(&((clpin_block *)b)->pool) : NULL;
  return pool ? pool->groups[b->group].node : -1;
}
cl_device_id clpin__pool_device(const clpin_pool *pool) {
  return ((const clpin_pool *)clpin__untag(pool))->devices[0];
}
size_t clpin__pool_max_alloc(const clpin_pool *pool) {
  return ((const clpin_pool *)clpin__untag(pool))->max_alloc;
}

bool clpin__pool_device_unified(const clpin_pool *pool, cl_device_id device) {
  pool = clpin__untag(pool);
  for (cl_uint i = 0; i < pool->ndevices; i++)
    if (pool->devices[i] == device)
      return pool->unified[i];
  return false;
}

static cl_int query_devices(clpin_pool *pool) {
  cl_uint n = 0;
  cl_int err = clGetContextInfo(pool->ctx, CL_CONTEXT_NUM_DEVICES, sizeof n, &n, NULL);
  if (err != CL_SUCCESS)
    return err;
  if (n == 0)
    return CLPIN_ERR_NO_DEVICE;
  pool->devices = calloc(n, sizeof *pool->devices);
  pool->unified = calloc(n, sizeof *pool->unified);
  pool->dma = calloc(n, sizeof *pool->dma);
  pool->group = calloc(n, sizeof *pool->group);
  pool->dev_bytes = calloc(n, sizeof *pool->dev_bytes);
  if (!pool->devices || !pool->unified || !pool->dma || !pool->group || !pool->dev_bytes)
    return CL_OUT_OF_HOST_MEMORY;
  err = clGetContextInfo(pool->ctx, CL_CONTEXT_DEVICES, n * sizeof *pool->devices, pool->devices,
                         NULL);
  if (err != CL_SUCCESS)
    return err;
  pool->ndevices = n;
  pool->max_alloc = SIZE_MAX;
  for (cl_uint i = 0; i < n; i++) {
    cl_bool unified = CL_FALSE;
    cl_ulong max_alloc = 0;
    err = clGetDeviceInfo(pool->devices[i], CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified,
                          NULL);
    if (err == CL_SUCCESS)
      err = clGetDeviceInfo(pool->devices[i], CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc,
                            &max_alloc, NULL);
    if (err != CL_SUCCESS)
      return err;
    pool->unified[i] = unified == CL_TRUE;
    if (max_alloc < pool->max_alloc)
      pool->max_alloc = (size_t)max_alloc;
  }
  return pool->max_alloc ? CL_SUCCESS : CLPIN_ERR_NO_DEVICE;
}

#define LISTS_BYTES(pool) ((size_t)NLISTS(pool) * sizeof(stripe))

/* CLPIN_NUMA: each device's node (topo.c), and the node groups whose free
 * lists keep its blocks. Placement is on with CLPIN_NUMA=1 wherever a
 * device's node is known (on a host of one node, always: that node), with
 * auto (the default) only on hosts with more than one node. A device whose
 * node is unknown shares the unplaced group. */
static cl_int place_devices(clpin_pool *pool) {
  pool->groups = calloc(pool->ndevices, sizeof *pool->groups);
  if (!pool->groups)
    return CL_OUT_OF_HOST_MEMORY;
  size_t mode = clpin__opt(CLPIN_OPT_NUMA);
  int nodes = mode ? clpin__topo_node_count() : 1;
  bool on = mode == 1 || (mode == CLPIN_NUMA_AUTO && nodes > 1);
  pool->ngroups = 0;
  for (cl_uint i = 0; i < pool->ndevices; i++) {
    char why[200];
    int node = -1;
    if (!on) {
      snprintf(why, sizeof why, "%s",
               mode == 0 ? "CLPIN_NUMA=0" : "one NUMA node (CLPIN_NUMA=auto)");
    } else {
      node = clpin__topo_device_node(pool->devices[i], why, sizeof why);
      /* Forced on, a device that names no node on a host of one node is on
       * that node: there is no other (a VM's GPU often reports -1). */
      int only = node < 0 && mode == 1 ? clpin__topo_only_node() : -1;
      if (only >= 0) {
        size_t l = strlen(why);
        snprintf(why + l, sizeof why - l, "; CLPIN_NUMA=1: the host's only node");
        node = only;
      }
    }
    unsigned g = 0;
    while (g < pool->ngroups && pool->groups[g].node != node)
      g++;
    if (g == pool->ngroups) {
      struct clpin__node_group *ng = &pool->groups[g];
      ng->node = node;
      ng->bind = node >= 0;
      ng->has_cpus = node >= 0 && clpin__topo_node_cpus(node, &ng->cpus);
      pool->ngroups++;
    }
    pool->group[i] = g;
    if (node >= 0)
      clpin__log("pool %p: device %u -> NUMA node %d: %s; its blocks bound there, its copies on "
                 "%d CPU(s)",
                 (void *)pool, i, node, why,
                 pool->groups[g].has_cpus ? CPU_COUNT(&pool->groups[g].cpus) : 0);
    else
      clpin__log("pool %p: device %u -> no NUMA placement: %s", (void *)pool, i, why);
  }
  return CL_SUCCESS;
}

static void release_device_queues(clpin_pool *pool) {
  for (cl_uint i = 0; pool->dma && i < pool->ndevices; i++)
    for (int d = 0; d < 2; d++)
      if (pool->dma[i][d]) {
        clReleaseCommandQueue(pool->dma[i][d]);
        pool->dma[i][d] = NULL;
      }
}

static void free_pool_struct(clpin_pool *pool) {
  if (pool->lists)
    munmap(pool->lists, LISTS_BYTES(pool));
  free(pool->devices);
  free(pool->unified);
  free(pool->dma);
  free(pool->group);
  free(pool->groups);
  free(pool->dev_bytes);
  free(pool->quarantine);
  pool->devices = NULL;
  pool->unified = NULL;
  pool->dma = NULL;
  pool->group = NULL;
  pool->groups = NULL;
  pool->dev_bytes = NULL;
  pool->quarantine = NULL;
  pool->quarantine_max = pool->quarantine_len = 0;
  pool->lists = NULL;
  /* The struct itself stays in the arena. */
}

/* Slots of released pools that the registry let go (clpin__pool_recycle). */
static clpin__spinlock spare_pools_lock = CLPIN__SPINLOCK_INIT;
static clpin_pool *spare_pools;

/* A closed slot for a new pool: a spare one, or a new one from the arena
 * (it stays for stale handles, and is cache-line aligned, as user_count
 * needs). A spare slot keeps its magic, its generation (already moved on)
 * and its user counts: a stale handle may be counting itself in and out
 * right now, and the counts return to zero by themselves; the rest is
 * cleared. It stays released (nothing enters it) until created. */
static clpin_pool *take_slot(void) {
  clpin__lock(&spare_pools_lock);
  clpin_pool *pool = spare_pools;
  if (pool)
    spare_pools = pool->next;
  clpin__unlock(&spare_pools_lock);
  if (pool) {
    memset((char *)pool + offsetof(clpin_pool, ctx), 0, sizeof *pool - offsetof(clpin_pool, ctx));
    atomic_store(&pool->final_ready, false);
    return pool;
  }
  pool = clpin__arena_alloc(sizeof *pool);
  if (pool) {
    pool->magic = CLPIN__POOL_MAGIC;
    atomic_init(&pool->gen, 1);
    atomic_init(&pool->released, true);
  }
  return pool;
}

static void spare_slot(clpin_pool *pool) {
  clpin__lock(&spare_pools_lock);
  pool->next = spare_pools;
  spare_pools = pool;
  clpin__unlock(&spare_pools_lock);
}

void clpin__pool_recycle(clpin_pool *pool) {
  unsigned gen = atomic_load(&pool->gen);
  if (gen >= CLPIN__GEN_MAX)
    return;                          /* its generations are spent: the slot is never reused */
  atomic_store(&pool->gen, gen + 1); /* before anything else: see clpin__pool_enter */
  spare_slot(pool);
}

cl_int clpin__pool_create(cl_context ctx, clpin_pool **out) {
  cl_int err = CL_OUT_OF_HOST_MEMORY;
  bool retained = false;
  clpin_pool *pool = take_slot();
  if (!pool)
    return CL_OUT_OF_HOST_MEMORY;
  err = clRetainContext(ctx);
  if (err != CL_SUCCESS)
    goto fail;
  retained = true;
  pool->ctx = ctx;
  err = query_devices(pool);
  if (err == CL_SUCCESS)
    err = place_devices(pool);
  if (err != CL_SUCCESS)
    goto fail;
  /* Anonymous memory is zeroed; sizeof(stripe) is a multiple of 64. */
  void *lists =
      mmap(NULL, LISTS_BYTES(pool), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (lists == MAP_FAILED) {
    err = CL_OUT_OF_HOST_MEMORY;
    goto fail;
  }
  pool->lists = lists;
  pool->queue = clCreateCommandQueue(ctx, pool->devices[0], 0, &err);
  /* Every device's own DMA queues: a transfer's DMA runs on its caller's
   * device, never through another device's queue (DESIGN.md). */
  for (cl_uint i = 0; i < pool->ndevices && err == CL_SUCCESS; i++)
    for (int d = 0; d < 2 && err == CL_SUCCESS; d++)
      pool->dma[i][d] = clCreateCommandQueue(ctx, pool->devices[i], 0, &err);
  if (err != CL_SUCCESS)
    goto fail;
  pool->quarantine_max = clpin__opt(CLPIN_OPT_QUARANTINE);
  if (pool->quarantine_max) {
    pool->quarantine = calloc(pool->quarantine_max, sizeof *pool->quarantine);
    if (!pool->quarantine) {
      err = CL_OUT_OF_HOST_MEMORY;
      goto fail;
    }
  }
  atomic_store(&pool->limit, clpin__opt(CLPIN_OPT_MAX_CACHED));
  if (clpin__debug()) {
    char cap[32];
    clpin__log(
        "pool %p: created for context %p (%u device(s), unified=%d, max alloc %zu B, cap %s, "
        "quarantine %zu)",
        (void *)pool, (void *)ctx, pool->ndevices, (int)pool->unified[0], pool->max_alloc,
        clpin__format_size(atomic_load(&pool->limit), cap, sizeof cap), pool->quarantine_max);
  }
  atomic_store(&pool->released, false); /* open: the last store */
  *out = pool;
  return CL_SUCCESS;
fail:
  clpin__log("pool for context %p: creation failed: %s", (void *)ctx, clpin_strerror(err));
  release_device_queues(pool);
  if (pool->queue)
    clReleaseCommandQueue(pool->queue);
  if (retained)
    clReleaseContext(ctx);
  free_pool_struct(pool);
  spare_slot(pool); /* never seen by anyone: its generation may stay */
  return err;
}

/* Destruction: wait for every in-flight block's event and drop it. The
 * buffers are freed with all the others right after. */
static void wait_in_flight(clpin_pool *pool) {
  for (unsigned i = 0; i < NLISTS(pool); i++) {
    stripe *bk = &pool->lists[i];
    clpin__lock(&bk->lock);
    clpin_block *list = bk->flight;
    bk->flight = NULL;
    stripe_unlock(bk);
    for (clpin_block *blk = list; blk; blk = blk->next) {
      clpin__event_settle(blk->pending);
      clReleaseEvent(blk->pending);
      blk->pending = NULL;
    }
  }
}

void clpin__pool_close(clpin_pool *pool) {
  /* From here on no user can enter (clpin__pool_enter reads the flag after
   * counting itself in). */
  atomic_store(&pool->released, true);
}

void clpin__pool_drain(clpin_pool *pool) { wait_users(pool); }

void clpin__pool_destroy(clpin_pool *pool) {
  wait_in_flight(pool);
  /* Every block still holding a buffer: cached, and in use by the caller. */
  size_t in_use = 0;
  for (unsigned i = 0; i < NLISTS(pool); i++) {
    stripe *bk = &pool->lists[i];
    in_use += bk->blocks[COUNT_IN_USE];
    bk->driver_frees += bk->blocks_reserved;
    memset(bk->blocks, 0, sizeof bk->blocks);
    memset(bk->bytes, 0, sizeof bk->bytes);
    bk->bytes_requested = bk->blocks_reserved = bk->bytes_reserved = 0;
    bk->free = NULL;
  }
  /* The quarantined blocks are in the index: freed below with the rest. */
  pool->quarantine_len = pool->quarantine_bytes = 0;
  if (in_use)
    clpin__log("pool %p: releasing the context frees %zu block(s) still in use", (void *)pool,
               in_use);
  for (size_t i = 0; i < pool->nindex; i++)
    if (pool->index[i]->host_alloc &&
        atomic_load_explicit(&pool->index[i]->state, memory_order_relaxed) == BLOCK_IN_USE)
      orphan_add(pool->index[i]->host);
  while (pool->nindex > 0)
    free_buffer(pool, pool->index[pool->nindex - 1]);
  clFinish(pool->queue);
  clReleaseCommandQueue(pool->queue);
  release_device_queues(pool);
  clReleaseContext(pool->ctx);
  clpin__log("pool %p: released (context %p)", (void *)pool, (void *)pool->ctx);
  free(pool->index);
  pool->index = NULL;
  pool->nindex = pool->capindex = 0;
  snapshot(pool, &pool->final);
  free_pool_struct(pool);
  spare_blocks_add(pool);
  atomic_store_explicit(&pool->final_ready, true, memory_order_release);
}

void clpin__pool_free_retired(clpin_pool *pool) {
  /* The pool and block structs live in the arena until the process ends;
   * what remains on the heap goes. */
  free_pool_struct(pool);
}
