/* SPDX-License-Identifier: Apache-2.0 */
/* Records that outlive their pool (arena.c). */
#ifndef CLPIN_ARENA_H
#define CLPIN_ARENA_H

#include <stddef.h>

/* Zeroed, 64-byte aligned memory that lives until the process ends (pool and
 * block structs, which stale handles may still reach). NULL when out of
 * memory or larger than a chunk. Never freed. */
void *clpin__arena_alloc(size_t size);

#endif /* CLPIN_ARENA_H */
