/* The pool's data structures, shared by pool.c and registry.c only. */
#ifndef CLPIN_POOL_H
#define CLPIN_POOL_H

#include "internal.h"

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
  clpin__handoff handoff; /* its mapping handed to the device (clpin_host_to_device) */
  clpin_block *next;      /* free, flight or dead list */
};

/* Where a stripe counts a block: the states that hold a buffer, and
 * COUNT_NONE for outside the stripe (a new or freed buffer, or a block
 * stolen from or to another stripe). count_move in pool.c is the one place
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
  /* The lifecycle (see clpin__pool_enter in internal.h): set once, first
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

  /* Caller memory pinned in place (register.c): registrations sorted by
   * address, guarded by reg_lock. nregs is also read without the lock, so a
   * transfer skips the lookup while there are none. */
  clpin__spinlock reg_lock;
  struct clpin__reg **regs;
  _Atomic size_t nregs;
  size_t capregs;
  _Atomic size_t bytes_registered;

  clpin_pool *next; /* registry list (live pools, or retired ones), or spare slots */
};

/* pool.c */
cl_int clpin__pool_create(cl_context ctx, clpin_pool **out);
/* A pool's release, in the three steps the registry orchestrates (registry.c
 * says the order and why; pool.c calls nothing above it):
 * close: mark the pool released, so that entering it fails from now on;
 * drain: wait until every user that entered before has left;
 * destroy: (every user gone, the registrations dropped) wait for in-flight
 * blocks and free every buffer, in use or not; release the queues and the
 * context. The struct stays (retired) for stale handles. */
void clpin__pool_close(clpin_pool *pool);
void clpin__pool_drain(clpin_pool *pool);
void clpin__pool_destroy(clpin_pool *pool);
/* CLPIN_DEBUG at exit: log that a live pool was never released, and what it
 * holds. No OpenCL call. */
void clpin__pool_report_unreleased(clpin_pool *pool);
/* Free the structs of a retired pool (process exit). */
void clpin__pool_free_retired(clpin_pool *pool);
/* Reuse a destroyed pool's slot for a later pool: its generation moves on,
 * so every handle to the released pool (its final counters too) answers
 * CLPIN_ERR_POOL_RELEASED from now on. The registry calls it once the
 * released pool has aged (registry.c). */
void clpin__pool_recycle(clpin_pool *pool);
/* The caller's handle to a pool (tagged with its generation). */
clpin_pool *clpin__pool_handle(clpin_pool *pool);

/* registry.c: visit every live pool under the registry lock. The callback
 * must not call OpenCL. Returns the first non-NULL result of fn. */
void *clpin__registry_find(void *(*fn)(clpin_pool *pool, void *arg), void *arg);

#endif /* CLPIN_POOL_H */
