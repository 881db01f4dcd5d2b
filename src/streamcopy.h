/* SPDX-License-Identifier: Apache-2.0 */
/* A copy with non-temporal (streaming) stores, for the row scatter of rect
 * and image reads (shape.c). Internal. */
#ifndef CLPIN_STREAMCOPY_H
#define CLPIN_STREAMCOPY_H

#include <stdbool.h>
#include <stddef.h>

/* How the whole 64-byte lines of a destination are written. PLAIN is
 * memcpy; the others load unaligned and store with non-temporal stores of
 * their width (x86 only). */
typedef enum {
  CLPIN__COPY_PLAIN,
  CLPIN__COPY_SSE2,
  CLPIN__COPY_AVX2,
  CLPIN__COPY_AVX512,
  CLPIN__COPY__COUNT
} clpin__copy_kind;

/* Whether this CPU runs kind k (PLAIN: always). */
bool clpin__copy_supported(clpin__copy_kind k);
/* The widest streaming kind this CPU runs; PLAIN where it has none. */
clpin__copy_kind clpin__copy_best(void);
/* "memcpy", "sse2", "avx2", "avx512". */
const char *clpin__copy_name(clpin__copy_kind k);

/* Copy n bytes from src to dst (not overlapping) as kind k, which must be
 * supported: the bytes up to dst's first 64-byte boundary and after its
 * last one by memcpy, the whole lines between with streaming stores. A
 * thread that has made such copies must call clpin__copy_fence before it
 * reports them done: streaming stores are weakly ordered. */
void clpin__copy_with(clpin__copy_kind k, void *dst, const void *src, size_t n);
/* Order this thread's streaming stores before its later stores (sfence). */
void clpin__copy_fence(void);

#endif /* CLPIN_STREAMCOPY_H */
