/* SPDX-License-Identifier: Apache-2.0 */
/* Spinlock for the pool's short critical sections. */
#include "lock.h"

#include <sched.h>

void clpin__lock_slow(clpin__spinlock *l) {
  for (;;) {
    if (!atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
      return;
    /* Spin on a plain load (no cache-line ping-pong) with a pause; give the
     * core up only after a long wait: with more threads than cores the
     * holder may be descheduled, but a yield costs tens of microseconds. */
    for (int i = 0; atomic_load_explicit(&l->held, memory_order_relaxed); i++) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (i >= 4096) {
        sched_yield();
        i = 0;
      }
    }
  }
}
