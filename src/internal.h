/* Internal interfaces shared between clpin's source files. Not installed. */
#ifndef CLPIN_INTERNAL_H
#define CLPIN_INTERNAL_H

#include "clpin.h"

#include <stdatomic.h>
#include <stdbool.h>

/* ---- argument checks (one line each, pocl style) ------------------------ */

/* A failed check returns `code` and records what failed for
 * clpin_last_error_detail() (and CLPIN_DEBUG=1's log): `why` names the
 * argument and what is wrong with it; CLPIN__CHECK's is the condition. */
#define CLPIN__CHECK_WHY(cond, code, why)                                                          \
  do {                                                                                             \
    if (cond) {                                                                                    \
      clpin__fail(__func__, (code), (why));                                                        \
      return (code);                                                                               \
    }                                                                                              \
  } while (0)
#define CLPIN__CHECK(cond, code) CLPIN__CHECK_WHY(cond, code, #cond)
/* Record (this thread) and log one failure: "func: why (NAME: text)". */
void clpin__fail(const char *func, cl_int code, const char *why);
/* The two flag families of clpin.h, disjoint bits: a flag of one passed
 * where the other is expected is refused, never read as something else. */
#define CLPIN__TRANSFER_FLAGS (CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING | CLPIN_ZERO_COPY)
#define CLPIN__ACCESS_FLAGS (CLPIN_READ | CLPIN_WRITE)
/* CL_SUCCESS when `flags` holds only bits of `allowed`; else records why
 * (naming the first flag of the wrong family, or the unknown bits) and
 * returns CLPIN_ERR_INVALID_ARGUMENT. `arg` names the argument ("flags",
 * "access"), `takes` the bits the call accepts, in words. */
cl_int clpin__check_flags(const char *func, const char *arg, unsigned flags, unsigned allowed,
                          const char *takes);

/* ---- options (options.c) ------------------------------------------------ */

/* Current value of an option; reads the environment on first call. */
size_t clpin__opt(clpin_option opt);
/* Log a line to stderr when CLPIN_DEBUG=1 (prefix "clpin: "). */
void clpin__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Whether CLPIN_DEBUG is on; cheap, for guarding expensive log arguments. */
bool clpin__debug(void);
/* Before the first use only (then nothing): opt's default becomes value,
 * as if built in; the environment still overrides it, and the options line
 * of CLPIN_DEBUG shows it. The layer's cap on idle pinned memory. */
void clpin__opt_default(clpin_option opt, size_t value);
#include "size.h" /* clpin__parse_size */

/* ---- fork (registry.c) ------------------------------------------------- */

/* Set in a child forked from this process (a pthread_atfork handler). A
 * child runs only the forking thread: a lock another thread held at the
 * fork stays held, a worker it waited for does not exist, and the driver
 * the parent initialised may hang. So in a child every clpin call that
 * would take a lock, wait or call OpenCL answers CLPIN_ERR_FORKED (or
 * returns doing nothing), checked first thing, and the exit-time teardown
 * is skipped. Never cleared: a child's children are children too. */
extern atomic_bool clpin__child;
static inline bool clpin__forked(void) {
  return atomic_load_explicit(&clpin__child, memory_order_relaxed);
}

/* ---- locks (lock.c) ----------------------------------------------------- */

/* A test-and-test-and-set spinlock with yield: pool critical sections are a
 * few pointer moves, so a futex sleep would dominate the pool-hit latency. */
typedef struct {
  atomic_int held;
} clpin__spinlock;
#define CLPIN__SPINLOCK_INIT                                                                       \
  { 0 }
/* The contended part, out of line. */
void clpin__lock_slow(clpin__spinlock *l);
static inline void clpin__lock(clpin__spinlock *l) {
  if (atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
    clpin__lock_slow(l);
}
static inline void clpin__unlock(clpin__spinlock *l) {
  atomic_store_explicit(&l->held, 0, memory_order_release);
}

/* ---- records that outlive their pool (arena.c) --------------------------- */

/* Zeroed, 64-byte aligned memory that lives until the process ends (pool and
 * block structs, which stale handles may still reach). NULL when out of
 * memory or larger than a chunk. Never freed. */
void *clpin__arena_alloc(size_t size);

/* ---- events (events.c) ------------------------------------------------- */

/* A new user event on ctx, already complete, for calls that had nothing to
 * enqueue but were asked for an event. */
cl_int clpin__completed_event(cl_context ctx, cl_event *event);
/* The event's execution status: CL_COMPLETE, a negative failure, or a
 * positive state still running; CLPIN__STATUS_UNKNOWN (positive: not known
 * to have ended) when the query itself fails. */
#define CLPIN__STATUS_UNKNOWN 0x7fffffff
cl_int clpin__event_status(cl_event ev);
/* clSetUserEventStatus, retried for a while when it fails. */
void clpin__set_user_status(cl_event ev, cl_int status);
/* Wait until ev has ended, completed or failed. False when not even its
 * status can be read: the command may still be using its memory. */
bool clpin__event_settle(cl_event ev);

/* ---- pools (pool.c, registry.c) ----------------------------------------- */

/* The lifecycle of a pool: every user of a pool enters it first and leaves
 * it when done; clpin_pool_release_context marks the pool released, cancels
 * the engine's transfers that have not started, waits until every user has
 * left, and only then frees anything. Users are calls in progress on any
 * thread and the engine's queued transfers (entered when queued, left when
 * their last DMA has ended). Entering a released pool fails, so a stale
 * handle answers CLPIN_ERR_POOL_RELEASED and nothing touches freed memory.
 * Entering nests; enter and leave may happen on different threads. */
/* *pool is a caller's handle (tagged with the pool's generation, pool.h) or
 * an internal pointer; on success it is replaced by the pool's struct. */
cl_int
clpin__pool_enter(clpin_pool **pool); /* CL_SUCCESS, _INVALID_ARGUMENT, _POOL_RELEASED, _FORKED */
void clpin__pool_leave(clpin_pool *pool); /* a handle or the struct */
/* clpin_acquire and clpin_release for a user already inside the pool (the
 * staging pipeline, run by a call or an engine job that entered it): they
 * do not enter again, so a release of the pool that began meanwhile (and
 * waits for this user) does not fail a transfer already moving data. */
cl_int clpin__acquire(clpin_pool *pool, size_t nbytes, clpin_block **block);
cl_int clpin__release(clpin_block *block, cl_event pending);
/* clpin__acquire for the transfers of one device of the pool: a block on
 * its NUMA node's free lists (never one of another node's). A device not in
 * the pool gets the first device's. */
cl_int clpin__acquire_for(clpin_pool *pool, cl_device_id device, size_t nbytes,
                          clpin_block **block);

/* Transfer counters staging bumps (atomics; no lock). */
typedef enum {
  CLPIN__FALLBACKS,
  CLPIN__BYTES_PINNED_DIRECT,
  CLPIN__BYTES_STAGED,
  CLPIN__BYTES_PIPELINED,
  CLPIN__BYTES_UNPINNED,
  CLPIN__BYTES_ZERO_COPY, /* host-unified devices: bytes used in place (unified.c) */
  CLPIN__COUNTER_COUNT
} clpin__counter;
void clpin__count(clpin_pool *pool, clpin__counter c, uint64_t amount);

/* The pool's context and its internal queue (used for maps; owned by the
 * pool). */
cl_context clpin__pool_context(const clpin_pool *pool);
cl_command_queue clpin__pool_queue(const clpin_pool *pool);
/* The engine's DMA queue for one direction (0 host to device, 1 device to
 * host) of one device of the pool (owned by the pool); NULL for a device
 * not in the pool's context. */
cl_command_queue clpin__pool_dma_queue(const clpin_pool *pool, cl_device_id device, int dir);
/* The NUMA node the pool places device's blocks on, -1 for none (CLPIN_NUMA
 * off, one node, or the node unknown). */
int clpin__pool_device_node(const clpin_pool *pool, cl_device_id device);
/* The CPUs that run device's copy work (its node's), or NULL: any CPU.
 * Owned by the pool; a cpu_set_t. */
const void *clpin__pool_device_cpus(const clpin_pool *pool, cl_device_id device);
/* Staged bytes by the device of the queue their DMAs ran on (q's), and
 * direction: what shows that a transfer ran for its own device. */
void clpin__pool_count_device(clpin_pool *pool, cl_command_queue q, int dir, uint64_t nbytes);
uint64_t clpin__pool_device_bytes(clpin_pool *pool, cl_device_id device, int dir);
/* The NUMA node of a block's free lists (-1: not placed). */
int clpin__block_node(const clpin_block *block);
/* The pool's first device (the device of its internal queues). */
cl_device_id clpin__pool_device(const clpin_pool *pool);
/* Whether device (of the pool's context) reports CL_DEVICE_HOST_UNIFIED_MEMORY;
 * cached at pool creation, no OpenCL call. Unknown device: false. */
bool clpin__pool_device_unified(const clpin_pool *pool, cl_device_id device);
/* Smallest CL_DEVICE_MAX_MEM_ALLOC_SIZE over the context's devices. */
size_t clpin__pool_max_alloc(const clpin_pool *pool);

/* Whether err is one of the driver's out-of-memory codes
 * (CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY):
 * the pool frees idle blocks and retries once on them, and staging falls back
 * to the pageable path. */
bool clpin__is_oom(cl_int err);

/* ---- host mappings handed to the device (unified.c) --------------------- */

/* The host mapping of a pool block or a registration, handed to the device
 * range by range (clpin_host_to_device / clpin_host_to_host). OpenCL lets no
 * command use a buffer while a mapping of it for writing exists, so the first
 * range handed over unmaps the whole buffer and the last one given back maps
 * it again; the calls between only record their range (and their ordering
 * event). One call moves a handoff at a time: it takes the turn (`moving`,
 * set under `lock`), makes its OpenCL calls without any lock, then ends the
 * turn; only the turn's holder touches the fields below `moving`. */
typedef struct clpin__handoff {
  clpin__spinlock lock;
  atomic_bool moving;
  atomic_size_t nout; /* ranges with the device now; read without the lock by transfers */
  struct clpin__range {
    uintptr_t beg;
    size_t len;
  } * out; /* those ranges (duplicates allowed), capout slots */
  size_t capout;
  cl_event unmapped; /* the unmap's event, retained, while nout > 0 */
  cl_event *back;    /* markers of ranges given back while others stayed out */
  size_t nback, capback;
} clpin__handoff;
/* A handoff with nothing out (a new block or registration). */
void clpin__handoff_init(clpin__handoff *h);
/* Whether some range of it is with the device, or on its way there or back:
 * then clpin_write/clpin_read, clpin_release, clpin_host_free and
 * clpin_host_unregister refuse the memory (CLPIN_ERR_ON_DEVICE). */
bool clpin__handoff_out(clpin__handoff *h);
/* The end of a block or registration whose ranges may be out (a pool's
 * release): wait for the recorded events, release them, free the lists.
 * Returns whether the buffer is still mapped (nothing was out). */
bool clpin__handoff_end(clpin__handoff *h);
/* Whether no host range of any pool is handed to a device, nor on its way
 * there or back (a snapshot: a transfer racing a handoff of its own memory
 * is the caller's race, as it is for clpin_write). */
bool clpin__handoffs_idle(void);

/* The memory a handoff moves: a block's or a registration's whole buffer,
 * its host mapping (the pointer the caller holds) and whose it is. */
typedef struct {
  cl_mem buffer;
  void *host;
  size_t size;
  clpin__handoff *h;
  void *reg; /* a registration, claimed: clpin__register_unclaim gives it back */
} clpin__handoff_target;
/* pool.c: the live block holding [ptr, ptr + n) as a target; false if none. */
bool clpin__block_target(clpin_pool *pool, const void *ptr, size_t n, clpin__handoff_target *t);
/* Whether a block handle's memory is handed to the device. */
bool clpin__block_out(const clpin_block *block);
/* pool.c: the live block of pool (entered: its struct) whose range contains
 * [ptr, ptr+n), untagged, or NULL. */
clpin_block *clpin__pool_lookup(clpin_pool *pool, const void *ptr, size_t n);
/* register.c: the live registration holding [ptr, ptr + n), claimed (its
 * unregister waits) until clpin__register_unclaim; false if none, or if it
 * is not mapped (a device that is not host-unified: no handoff there). */
bool clpin__register_target(clpin_pool *pool, const void *ptr, size_t n, clpin__handoff_target *t);
void clpin__register_unclaim(void *reg);

/* Registrations (register.c): the buffer of the live registration holding
 * [ptr, ptr + nbytes), retained (the caller releases it), and ptr's offset
 * in it; NULL when none. */
cl_mem clpin__register_buffer(clpin_pool *pool, const void *ptr, size_t nbytes, size_t *offset);

#endif /* CLPIN_INTERNAL_H */
