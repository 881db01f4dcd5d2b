/* SPDX-License-Identifier: Apache-2.0 */
/* The pool's data structures, private to the pool's files (pool.c,
 * pool_blocks.c, pool_hostmem.c, pool_handle.c): every other file sees
 * struct clpin_pool and struct clpin_block only through the functions of
 * pool.h. */
#ifndef CLPIN_POOL_IMPL_H
#define CLPIN_POOL_IMPL_H

#include "arena.h"
#include "handoff.h"
#include "pool.h"

#include <assert.h>
#include <limits.h>
#include <sched.h>

#define CLPIN__BUCKETS 64
/* Each bucket is split into stripes; a thread takes blocks from its own
 * stripe and steals from the others only when it is empty, so threads that
 * acquire and release their own blocks never share a lock or a cache line. */
#define CLPIN__STRIPES 16
/* Stripes of one node's free lists; a pool has one set per node group
 * (pool->ngroups: 1 unless NUMA placement is on), node-major. */
#define CLPIN__LISTS (CLPIN__BUCKETS * CLPIN__STRIPES)
#define CLPIN__POOL_MAGIC 0x636c706f6f6c2121ull /* "clpool!!" */
#define CLPIN__QUARANTINE_BYTES ((size_t)256 << 20)
#define CLPIN__BLOCK_MAGIC 0x636c626c6f636b21ull /* "clblock!" */

typedef enum {
  BLOCK_CACHED,      /* idle on its bucket's free list */
  BLOCK_IN_USE,      /* handed out */
  BLOCK_RELEASING,   /* a clpin_release is moving it (claims it against a race) */
  BLOCK_IN_FLIGHT,   /* released with a pending event not yet seen complete */
  BLOCK_QUARANTINED, /* released, idle, held back from reuse (CLPIN_QUARANTINE) */
  BLOCK_DEAD         /* its buffer is freed; the struct waits for reuse */
} block_state;

/* ---- handles ------------------------------------------------------------- */

/* A handle given to the caller (clpin_pool *, clpin_block *) is the struct's
 * address with the struct's generation in the top 16 bits, which user-space
 * addresses leave zero (arena.c refuses memory above 2^48). Structs are
 * reused: a pool's slot after its release has aged (registry.c), a block's
 * struct once its pool is released. Each reuse bumps the generation, so an
 * old handle no longer matches and answers CLPIN_ERR_POOL_RELEASED (NULL or
 * 0 from the getters) instead of reaching the new owner. Generations start
 * at 1; a struct whose generation reaches CLPIN__GEN_MAX is never reused.
 * Tag 0 is an internal, untagged pointer (held only while its pool is
 * entered, or by the registry), checked for a released pool only. */
#define CLPIN__GEN_SHIFT 48
#define CLPIN__GEN_MAX 0xffffu
_Static_assert(sizeof(uintptr_t) == 8, "handles carry their generation in pointer bits 48-63");
static inline void *clpin__untag(const void *h) {
  return (void *)((uintptr_t)h & (((uintptr_t)1 << CLPIN__GEN_SHIFT) - 1));
}
static inline unsigned clpin__tag(const void *h) {
  return (unsigned)((uintptr_t)h >> CLPIN__GEN_SHIFT);
}
static inline void *clpin__tagged(const void *p, unsigned gen) {
  return (void *)((uintptr_t)p | (uintptr_t)gen << CLPIN__GEN_SHIFT);
}

struct clpin_block {
  uint64_t magic;
  _Atomic unsigned gen; /* see "handles" above */
  _Atomic int state;    /* block_state */
  bool host_alloc;      /* handed out by clpin_host_alloc */
  unsigned bucket;      /* power of two at least size (the size class it is kept in) */
  unsigned group;       /* node group of its memory (pool->groups); never handed to another */
  /* The stripe that counts it: (group * CLPIN__BUCKETS + bucket) *
   * CLPIN__STRIPES + stripe. Atomic: a release reads it before it holds
   * that stripe's lock, while a thread stealing the block may move it. */
  _Atomic unsigned list;
  clpin_pool *_Atomic pool; /* atomic: a stale handle may read it while the struct is reused */
  cl_mem buffer;
  void *host;
  size_t size;      /* capacity */
  size_t requested; /* bytes asked for, while in use */
  cl_event pending; /* retained, while in flight */
  void *mapping;    /* NUMA-placed: clpin's own mmap under a USE_HOST_PTR buffer, else NULL */
  size_t mapping_len;
  clpin__handoff handoff; /* its mapping handed to the device (clpin_host_lend) */
  clpin_block *next;      /* free, flight or dead list */
};

/* Where a stripe counts a block: the states that hold a buffer, and
 * COUNT_NONE for outside the stripe (a new or freed buffer, or a block
 * stolen from or to another stripe). count_move (below) is the one place
 * the counters change. */
typedef enum {
  COUNT_CACHED,
  COUNT_IN_USE,
  COUNT_IN_FLIGHT,
  COUNT_STATES,
  COUNT_NONE = COUNT_STATES
} count_state;

/* One stripe of one power-of-two size class. Everything here is guarded by
 * `lock`; the alignment keeps two stripes' locks off one cache line.
 * Invariant: blocks[] and bytes[] sum to blocks_reserved / bytes_reserved. */
typedef struct {
  _Alignas(64) clpin__spinlock lock;
  clpin_block *free;   /* idle blocks, most recently used first */
  clpin_block *flight; /* released with a pending event not yet seen complete */
  uint64_t hits, misses, driver_allocs, driver_frees;
  size_t blocks[COUNT_STATES], bytes[COUNT_STATES];
  size_t bytes_requested; /* asked for by the callers of the blocks in use */
  size_t blocks_reserved, bytes_reserved;
} stripe;

/* One counter of a pool's users per stripe, each on its own cache line, so
 * threads entering and leaving the pool at once share no line. A user that
 * enters on one thread and leaves on another (an engine job) moves one
 * count between stripes; only the sum means anything. */
typedef struct {
  _Alignas(64) atomic_long n;
} user_count;

struct clpin_pool {
  uint64_t magic;
  _Atomic unsigned gen; /* see "handles" above */
  /* The lifecycle (see clpin__pool_enter in pool.h): set once, first
   * thing in the release; then the release waits for `users` to drain. */
  atomic_bool released;
  atomic_bool final_ready; /* `final` is written: stats of a released pool */
  user_count users[CLPIN__STRIPES];
  cl_context ctx;
  cl_command_queue queue; /* internal: maps and unmaps */
  cl_uint ndevices;
  cl_device_id *devices;
  bool *unified; /* CL_DEVICE_HOST_UNIFIED_MEMORY per device */
  /* Per device: the engine's DMA queues, one per direction so that
   * asynchronous writes and reads overlap (PCIe is full duplex), and the
   * device's node group. */
  cl_command_queue (*dma)[2];
  unsigned *group;
  _Atomic uint64_t (*dev_bytes)[2]; /* staged bytes by the DMA queue's device and direction */
  /* Node groups: the distinct NUMA nodes of the devices (CLPIN_NUMA). One
   * group, node -1 (no placement), when placement is off. A group placed
   * on a node binds its blocks' memory there and runs its copies on cpus. */
  unsigned ngroups;
  struct clpin__node_group {
    int node;  /* -1: not placed */
    bool bind; /* blocks are mapped and bound by clpin (USE_HOST_PTR) */
    bool has_cpus;
    cpu_set_t cpus;
  } * groups;
  size_t max_alloc;

  /* ngroups * CLPIN__LISTS stripes, group-major then bucket-major: index
   * order is lock order. Mapped
   * with mmap, not malloc: this table (about 128 KiB) is freed when the pool
   * is released while the small retired structs stay, and from the heap it
   * left holes that the allocator could not give back (RSS grew by tens of
   * KiB per released context). A retired pool keeps only this struct and
   * its block structs; its final counters stay in `final`. */
  stripe *lists;
  clpin_stats final;

  _Atomic size_t limit;        /* cap on idle bytes */
  _Atomic size_t cached_total; /* idle bytes, kept beside the buckets for the cap */
  _Atomic size_t reserved_total, peak_reserved;
  _Atomic uint64_t oom_retries;
  _Atomic uint64_t counters[CLPIN__COUNTER_COUNT];

  /* Every live (buffer-holding) block, sorted by host address, for
   * clpin_pool_find and clpin_host_free. Changes only on driver alloc/free. */
  clpin__spinlock index_lock;
  clpin_block **index;
  size_t nindex, capindex;

  /* CLPIN_QUARANTINE: the most recent releases, oldest first, held back
   * from reuse (idle, counted as cached, on no free list) so that a stale
   * second release of one finds it released. A ring of quarantine_max
   * entries; at most CLPIN__QUARANTINE_BYTES are held unless one block is
   * larger. */
  clpin__spinlock quarantine_lock;
  clpin_block **quarantine;
  size_t quarantine_max, quarantine_head, quarantine_len, quarantine_bytes;

  /* Block structs whose buffer was freed, for reuse (the structs live in the
   * arena, arena.c). */
  clpin__spinlock dead_lock;
  clpin_block *dead;

  /* Caller memory pinned in place: held here, filled by register.c. */
  clpin__reg_table regs;

  clpin_pool *next; /* registry list (live pools, or retired ones), or spare slots */
};

/* ---- shared by the pool's files ----------------------------------------- */

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

#define NLISTS(pool) ((pool)->ngroups * CLPIN__LISTS)

/* Functions of one pool file that another calls (slow paths). */
void clpin__poll_all(clpin_pool *pool);                                     /* pool_blocks.c */
size_t clpin__free_idle(clpin_pool *pool);                                  /* pool_blocks.c */
void clpin__enforce_cap(clpin_pool *pool);                                  /* pool_blocks.c */
clpin_block *clpin__new_block_struct(clpin_pool *pool);                     /* pool_handle.c */
void clpin__recycle_block_struct(clpin_pool *pool, clpin_block *blk);       /* pool_handle.c */
clpin_pool *clpin__pool_take_slot(void);                                    /* pool_handle.c */
void clpin__pool_spare_slot(clpin_pool *pool);                              /* pool_handle.c */
void clpin__pool_wait_users(clpin_pool *pool);                              /* pool_handle.c */
void clpin__spare_blocks_add(clpin_pool *pool);                             /* pool_handle.c */
size_t clpin__index_upper(const clpin_pool *pool, const void *p);           /* pool_hostmem.c */
cl_int clpin__index_insert(clpin_pool *pool, clpin_block *blk);             /* pool_hostmem.c */
void clpin__index_remove(clpin_pool *pool, clpin_block *blk);               /* pool_hostmem.c */
void clpin__orphan_add(void *ptr);                                          /* pool_hostmem.c */
void clpin__uncount_cached(clpin_pool *pool, stripe *bk, clpin_block *blk); /* pool.c */
void clpin__free_buffer(clpin_pool *pool, clpin_block *blk);                /* pool.c */
cl_int clpin__alloc_buffer(clpin_pool *pool, size_t cap, clpin_block *blk); /* pool.c */
void clpin__drop_buffer(clpin_pool *pool, clpin_block *blk);                /* pool.c */

/* Small helpers of the hot paths, inline in every pool file. */

/* Stripes of a pool: one set of CLPIN__LISTS per node group. */

static inline unsigned list_of(unsigned group, unsigned bucket, unsigned stripe_no) {
  return (group * CLPIN__BUCKETS + bucket) * CLPIN__STRIPES + stripe_no;
}

static inline unsigned bucket_of(size_t n) {
  if (n < CLPIN_MIN_BLOCK)
    n = CLPIN_MIN_BLOCK;
  return (unsigned)(64 - __builtin_clzll((unsigned long long)(n - 1)));
}

static inline size_t capacity_of(const clpin_pool *pool, unsigned b) {
  size_t cap = (size_t)1 << b;
  return cap > pool->max_alloc ? pool->max_alloc : cap;
}

static inline bool limited(const clpin_pool *pool) {
  return atomic_load_explicit(&pool->limit, memory_order_relaxed) != SIZE_MAX;
}

/* Every stripe balances on its own: the counters of a block move together
 * under its stripe's lock (a stolen block moves its reservation along).
 * Debug builds check it after every move and at every unlock, so every test
 * checks it. */
static inline void assert_balanced(const stripe *s) {
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
static inline void count_move(stripe *s, const clpin_block *blk, count_state from, count_state to) {
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

static inline void stripe_unlock(stripe *s) {
  assert_balanced(s);
  clpin__unlock(&s->lock);
}

static inline void lock_all(clpin_pool *pool) {
  for (unsigned i = 0; i < NLISTS(pool); i++)
    clpin__lock(&pool->lists[i].lock);
}

static inline void unlock_all(clpin_pool *pool) {
  for (unsigned i = NLISTS(pool); i-- > 0;)
    stripe_unlock(&pool->lists[i]);
}

/* This thread's stripe, dealt round-robin on first use. */
static inline unsigned my_stripe(void) {
  static atomic_uint next_stripe;
  static _Thread_local unsigned mine __attribute__((tls_model("initial-exec"))) = UINT_MAX;
  if (mine == UINT_MAX)
    mine = atomic_fetch_add_explicit(&next_stripe, 1, memory_order_relaxed) % CLPIN__STRIPES;
  return mine;
}

/* Whether the handle still named that block (its
 * struct was not reused meanwhile). */
static inline bool block_still(const clpin_block *h) {
  unsigned tag = clpin__tag(h);
  return !tag || atomic_load(&((const clpin_block *)clpin__untag(h))->gen) == tag;
}

/* The caller's handle to a block (NULL stays NULL). */
static inline clpin_block *block_handle(clpin_block *blk) {
  return blk ? clpin__tagged(blk, atomic_load(&blk->gen)) : NULL;
}

/* The struct of a live block's handle, or NULL: not a block, dead, or a
 * handle of an earlier generation (its pool was released). */
static inline const clpin_block *block_ok(const clpin_block *h) {
  if (!h)
    return NULL;
  const clpin_block *b = clpin__untag(h);
  unsigned tag = clpin__tag(h);
  if (b->magic != CLPIN__BLOCK_MAGIC || (tag && atomic_load(&b->gen) != tag) ||
      atomic_load(&b->state) == BLOCK_DEAD)
    return NULL;
  return b;
}

/* The node group of device: its index in the pool, or the first device's
 * for one not in the context. */
static inline unsigned group_of(const clpin_pool *pool, cl_device_id device) {
  for (cl_uint i = 0; i < pool->ndevices; i++)
    if (pool->devices[i] == device)
      return pool->group[i];
  return pool->group[0];
}

#endif /* CLPIN_POOL_IMPL_H */
