/* SPDX-License-Identifier: Apache-2.0 */
/* Fork: the flag that tells a forked child from its parent (internal.h,
 * clpin__forked), and whether this process has used clpin at all. */
#include "internal.h"

#include <pthread.h>

atomic_bool clpin__child;

/* Set, for good, the first time a pool is asked for. Until then clpin owns
 * no thread and takes no lock (every call that would is a no-op or an
 * answer without one while there is no pool), so a child forked from a
 * process that never used clpin (a test runner, a Python parent that only
 * imported it) may use clpin as if freshly loaded. The store comes before
 * the first lock: a child whose copy of the flag reads false cannot have
 * inherited a held clpin lock. */
static atomic_bool used;

static void note_child(void) {
  if (atomic_load(&used))
    atomic_store_explicit(&clpin__child, true, memory_order_relaxed);
}

/* Registered when the library loads, before any thread of clpin exists or
 * any lock is taken. The handler takes no lock, so it cannot hang either.
 * (glibc drops the handler when a dlopen'ed clpin is unloaded.) */
__attribute__((constructor)) static void watch_fork(void) {
  pthread_atfork(NULL, NULL, note_child);
}

void clpin__note_used(void) { atomic_store(&used, true); }
bool clpin__used(void) { return atomic_load(&used); }
