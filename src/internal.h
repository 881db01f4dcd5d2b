/* Internal interfaces shared between clpin's source files. Not installed. */
#ifndef CLPIN_INTERNAL_H
#define CLPIN_INTERNAL_H

#include "clpin.h"

#include <stdatomic.h>
#include <stdbool.h>

/* ---- argument checks (one line each, pocl style) ------------------------ */

#define CLPIN__CHECK(cond, code)                                               \
  do {                                                                         \
    if (cond) {                                                                \
      clpin__log("%s: %s: %s", __func__, #cond, clpin_strerror(code));         \
      return (code);                                                           \
    }                                                                          \
  } while (0)

/* ---- options (options.c) ------------------------------------------------ */

/* Current value of an option; reads the environment on first call. */
size_t clpin__opt(clpin_option opt);
/* Log a line to stderr when CLPIN_DEBUG=1 (prefix "clpin: "). */
void clpin__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Whether CLPIN_DEBUG is on; cheap, for guarding expensive log arguments. */
bool clpin__debug(void);
/* Parse a size with K/M/G/T suffix; false on any malformed input. Exposed for
 * tests through the options suite. */
bool clpin__parse_size(const char *text, size_t *out);

/* ---- locks (lock.c) ----------------------------------------------------- */

/* A test-and-test-and-set spinlock with yield: pool critical sections are a
 * few pointer moves, so a futex sleep would dominate the pool-hit latency. */
typedef struct {
  atomic_int held;
} clpin__spinlock;
#define CLPIN__SPINLOCK_INIT {0}
/* The contended part, out of line. */
void clpin__lock_slow(clpin__spinlock *l);
static inline void clpin__lock(clpin__spinlock *l) {
  if (atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
    clpin__lock_slow(l);
}
static inline void clpin__unlock(clpin__spinlock *l) {
  atomic_store_explicit(&l->held, 0, memory_order_release);
}

/* ---- pools (pool.c, registry.c) ----------------------------------------- */

/* Transfer counters staging bumps (atomics; no lock). */
typedef enum {
  CLPIN__FALLBACKS,
  CLPIN__BYTES_PINNED_DIRECT,
  CLPIN__BYTES_STAGED,
  CLPIN__BYTES_PIPELINED,
  CLPIN__BYTES_UNPINNED,
  CLPIN__COUNTER_COUNT
} clpin__counter;
void clpin__count(clpin_pool *pool, clpin__counter c, uint64_t amount);

/* The pool's context and its internal queue (used for maps; owned by the
 * pool). */
cl_context clpin__pool_context(const clpin_pool *pool);
cl_command_queue clpin__pool_queue(const clpin_pool *pool);
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

/* Stop staging's copy workers (workers.c); clpin_shutdown calls it after
 * releasing every pool. */
void clpin__workers_shutdown(void);

#endif /* CLPIN_INTERNAL_H */
