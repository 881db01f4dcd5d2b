/* SPDX-License-Identifier: Apache-2.0 */
/* Pinned memory by pointer: the pool's address index of live blocks
 * (sorted by host address), clpin_host_alloc, clpin_pool_find, and the
 * handoff targets of blocks. clpin_host_free names no pool: the registry
 * finds the pool (registry.c) with clpin__host_alloc_at. */
#include "pool_impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the address index (clpin_pool_find, clpin_host_free) --------------- */

/* Position of the first index entry whose host address is > p. Lock held. */
size_t clpin__index_upper(const clpin_pool *pool, const void *p) {
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

cl_int clpin__index_insert(clpin_pool *pool, clpin_block *blk) {
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
  size_t at = clpin__index_upper(pool, blk->host);
  memmove(pool->index + at + 1, pool->index + at, (pool->nindex - at) * sizeof *pool->index);
  pool->index[at] = blk;
  pool->nindex++;
  clpin__unlock(&pool->index_lock);
  return CL_SUCCESS;
}

void clpin__index_remove(clpin_pool *pool, clpin_block *blk) {
  clpin__lock(&pool->index_lock);
  size_t at = clpin__index_upper(pool, blk->host);
  if (at > 0 && pool->index[at - 1] == blk) {
    memmove(pool->index + at - 1, pool->index + at, (pool->nindex - at) * sizeof *pool->index);
    pool->nindex--;
  }
  clpin__unlock(&pool->index_lock);
}

clpin_block *clpin__pool_lookup(clpin_pool *pool, const void *ptr, size_t n) {
  clpin_block *found = NULL;
  clpin__lock(&pool->index_lock);
  size_t at = clpin__index_upper(pool, ptr);
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

void clpin__orphan_add(void *ptr) {
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
  if (clpin__pool_enter_for(__func__, "pool", &pool) != CL_SUCCESS)
    return NULL;
  clpin_block *blk;
  void *host = NULL;
  if (clpin__acquire(pool, nbytes, &blk) == CL_SUCCESS) {
    blk->host_alloc = true;
    orphan_take(blk->host); /* the address is live again */
    host = blk->host;
  }
  clpin__pool_leave(pool);
  return host;
}

clpin_block *clpin__host_alloc_at(clpin_pool *pool, void *ptr) {
  clpin_block *blk = clpin__pool_lookup(pool, ptr, 1);
  return blk && blk->host == ptr && blk->host_alloc ? block_handle(blk) : NULL;
}

bool clpin__host_orphan_take(void *ptr) { return orphan_take(ptr); }

clpin_block *clpin_pool_find(clpin_pool *pool, const void *ptr, size_t nbytes, size_t *offset) {
  if (!ptr || clpin__pool_enter_for(__func__, "pool", &pool) != CL_SUCCESS)
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
