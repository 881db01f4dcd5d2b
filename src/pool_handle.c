/* SPDX-License-Identifier: Apache-2.0 */
/* Handles and their generations (pool_impl.h, "handles"): a pool's users
 * entering and leaving it through a handle, block handles and the getters
 * that check them, and the reuse of pool slots and block structs, each with
 * a new generation so that an old handle never reaches a new owner. */
#include "pool_impl.h"

#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

cl_int clpin__pool_enter_for(const char *func, const char *arg, clpin_pool **handle) {
  clpin_pool *given = *handle;
  cl_int err = clpin__pool_enter(handle);
  switch (err) {
  case CL_SUCCESS: break;
  case CLPIN_ERR_FORKED: clpin__fail(func, err, CLPIN__FORKED_WHY); break;
  case CLPIN_ERR_POOL_RELEASED:
    clpin__failf(func, err,
                 "%s was released (clpin_pool_release_context or clpin_shutdown): get the "
                 "context's pool again",
                 arg);
    break;
  default:
    if (!given)
      clpin__failf(func, err, "%s is NULL", arg);
    else
      clpin__failf(func, err, "%s (%p) is not a pool clpin handed out", arg, (void *)given);
  }
  return err;
}

void clpin__pool_leave(clpin_pool *pool) {
  pool = clpin__untag(pool);
  atomic_fetch_sub_explicit(&pool->users[my_stripe()].n, 1, memory_order_release);
}

clpin_pool *clpin__pool_handle(clpin_pool *pool) {
  return clpin__tagged(pool, atomic_load(&pool->gen));
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
void clpin__pool_wait_users(clpin_pool *pool) {
  for (unsigned spins = 0; count_users(pool) != 0; spins++) {
    if (spins < 64) {
      sched_yield();
    } else {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
}

/* ---- block structs ------------------------------------------------------ */

/* Block structs of released pools, for any pool to reuse (their generation
 * already moved on: see spare_blocks_add). */
static clpin__spinlock spare_blocks_lock = CLPIN__SPINLOCK_INIT;
static clpin_block *spare_blocks;

clpin_block *clpin__new_block_struct(clpin_pool *pool) {
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
void clpin__spare_blocks_add(clpin_pool *pool) {
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
void clpin__recycle_block_struct(clpin_pool *pool, clpin_block *blk) {
  atomic_store_explicit(&blk->state, BLOCK_DEAD, memory_order_release);
  clpin__lock(&pool->dead_lock);
  blk->next = pool->dead;
  pool->dead = blk;
  clpin__unlock(&pool->dead_lock);
}

/* ---- accessors ---------------------------------------------------------- */

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

/* Slots of released pools that the registry let go (clpin__pool_recycle). */
static clpin__spinlock spare_pools_lock = CLPIN__SPINLOCK_INIT;
static clpin_pool *spare_pools;

/* A closed slot for a new pool: a spare one, or a new one from the arena
 * (it stays for stale handles, and is cache-line aligned, as user_count
 * needs). A spare slot keeps its magic, its generation (already moved on)
 * and its user counts: a stale handle may be counting itself in and out
 * right now, and the counts return to zero by themselves; the rest is
 * cleared. It stays released (nothing enters it) until created. */
clpin_pool *clpin__pool_take_slot(void) {
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

void clpin__pool_spare_slot(clpin_pool *pool) {
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
  clpin__pool_spare_slot(pool);
}
