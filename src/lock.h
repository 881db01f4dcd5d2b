/* SPDX-License-Identifier: Apache-2.0 */
/* Spinlocks (lock.c): the pool's and the handoffs' short critical sections. */
#ifndef CLPIN_LOCK_H
#define CLPIN_LOCK_H

#include <stdatomic.h>

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

#endif /* CLPIN_LOCK_H */
