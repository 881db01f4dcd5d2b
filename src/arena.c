/* SPDX-License-Identifier: Apache-2.0 */
/* The arena for records that outlive their pool: pool structs and block
 * structs stay after a release so that stale handles answer
 * CLPIN_ERR_POOL_RELEASED instead of touching freed memory. They are reused
 * (pool.h, "handles"), so the arena holds at most as many as were ever in
 * use at once, plus the released pools the registry keeps answerable. Taken from the
 * heap, these small records sat between the driver's short-lived
 * allocations of every released context and kept their pages resident
 * (RSS grew by kilobytes per context while malloc's count stayed flat).
 * Here they are packed into chunks of their own, so a released context
 * costs its records' bytes and nothing more.
 *
 * Records are never freed one by one: they live until the process ends.
 * The chunks stay reachable from `chunks`, so leak checkers do not count
 * them. */
#include "arena.h"
#include "internal.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#define CHUNK_BYTES ((size_t)64 << 10)

typedef struct chunk {
  struct chunk *next;
  size_t used;
} chunk;

static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
static chunk *chunks; /* newest first; the newest is the one being filled */

void *clpin__arena_alloc(size_t size) {
  size = (size + 63) / 64 * 64; /* every record cache-line aligned */
  size_t head = (sizeof(chunk) + 63) / 64 * 64;
  if (size > CHUNK_BYTES - head)
    return NULL;
  pthread_mutex_lock(&arena_lock);
  chunk *c = chunks;
  if (!c || c->used + size > CHUNK_BYTES) {
    void *m = mmap(NULL, CHUNK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    /* Handles carry a generation in pointer bits 48-63 (pool.h): memory
     * above 2^48 (5-level paging, asked for by a hint clpin never gives)
     * cannot hold a record. */
    if (m != MAP_FAILED && (uintptr_t)m + CHUNK_BYTES > ((uintptr_t)1 << 48)) {
      munmap(m, CHUNK_BYTES);
      m = MAP_FAILED;
    }
    if (m == MAP_FAILED) {
      pthread_mutex_unlock(&arena_lock);
      return NULL;
    }
    c = m;
    c->next = chunks;
    c->used = head;
    chunks = c;
  }
  void *p = (char *)c + c->used;
  c->used += size;
  pthread_mutex_unlock(&arena_lock);
  return p; /* fresh anonymous memory: zeroed */
}
