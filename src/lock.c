/* Spinlock for the pool's short critical sections. */
#include "internal.h"

#include <sched.h>

void clpin__lock_slow(clpin__spinlock *l) {
  for (;;) {
    if (!atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
      return;
    /* Spin on a plain load (no cache-line ping-pong), then give the core up:
     * with more threads than cores the holder may be descheduled. */
    for (int i = 0; atomic_load_explicit(&l->held, memory_order_relaxed); i++) {
      if (i >= 64) {
        sched_yield();
        i = 0;
      }
    }
  }
}
