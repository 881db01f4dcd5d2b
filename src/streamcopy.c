/* SPDX-License-Identifier: Apache-2.0 */
/* A copy with non-temporal (streaming) stores.
 *
 * Why: a staged rect or image read scatters the packed rows of each chunk
 * into the caller's memory one row at a time (rect.c). memcpy chooses its
 * stores by the size of one call: glibc streams only above a threshold of
 * megabytes (a share of the last-level cache), so rows of kilobytes are
 * written with ordinary stores, and each line of a destination that is not
 * in the cache is first read from memory (read for ownership): half as much
 * memory traffic again as the copy needs. Streaming stores write whole lines
 * without reading them. The destination of a large read is not wanted in
 * the cache anyway: it is far larger than the cache.
 *
 * Lines of the destination are written whole by one call or not streamed at
 * all: the partial lines at either end go through memcpy, so two calls that
 * write the two halves of one line (the copy threads' shares of a chunk
 * meet anywhere in a row) never mix the two kinds of store on it. */
#include "streamcopy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define X86 1
#else
#define X86 0
#endif

#define LINE ((size_t)64)
/* Below this, a call is a plain memcpy: there is at most one whole line to
 * stream. */
#define STREAM_MIN_BYTES (2 * LINE)

typedef void lines_fn(unsigned char *dst, const unsigned char *src, size_t lines);

#if X86
__attribute__((target("sse2"))) static void lines_sse2(unsigned char *d, const unsigned char *s,
                                                       size_t lines) {
  for (; lines; lines--, d += LINE, s += LINE) {
    __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
    _mm_stream_si128((__m128i *)(void *)d, a);
    _mm_stream_si128((__m128i *)(void *)(d + 16), b);
    _mm_stream_si128((__m128i *)(void *)(d + 32), c);
    _mm_stream_si128((__m128i *)(void *)(d + 48), e);
  }
}

__attribute__((target("avx2"))) static void lines_avx2(unsigned char *d, const unsigned char *s,
                                                       size_t lines) {
  for (; lines; lines--, d += LINE, s += LINE) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)s);
    __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(s + 32));
    _mm256_stream_si256((__m256i *)(void *)d, a);
    _mm256_stream_si256((__m256i *)(void *)(d + 32), b);
  }
  _mm256_zeroupper();
}

__attribute__((target("avx512f"))) static void lines_avx512(unsigned char *d,
                                                            const unsigned char *s, size_t lines) {
  for (; lines; lines--, d += LINE, s += LINE)
    _mm512_stream_si512((void *)d, _mm512_loadu_si512((const void *)s));
  _mm256_zeroupper();
}
#endif

bool clpin__copy_supported(clpin__copy_kind k) {
#if X86
  __builtin_cpu_init();
  switch (k) {
  case CLPIN__COPY_PLAIN: return true;
  case CLPIN__COPY_SSE2: return __builtin_cpu_supports("sse2");
  case CLPIN__COPY_AVX2: return __builtin_cpu_supports("avx2");
  case CLPIN__COPY_AVX512: return __builtin_cpu_supports("avx512f");
  default: return false;
  }
#else
  return k == CLPIN__COPY_PLAIN;
#endif
}

clpin__copy_kind clpin__copy_best(void) {
  /* Resolved once; a race only resolves it twice to the same answer. The
   * widest first: one AVX-512 store writes a whole line (rowcopy-bench, in
   * git history since 2026-11-25, timed every kind side by side). */
  static _Atomic int best = -1;
  int b = best;
  if (b < 0) {
    b = clpin__copy_supported(CLPIN__COPY_AVX512) ? CLPIN__COPY_AVX512
        : clpin__copy_supported(CLPIN__COPY_AVX2) ? CLPIN__COPY_AVX2
        : clpin__copy_supported(CLPIN__COPY_SSE2) ? CLPIN__COPY_SSE2
                                                  : CLPIN__COPY_PLAIN;
    best = b;
  }
  return (clpin__copy_kind)b;
}

const char *clpin__copy_name(clpin__copy_kind k) {
  static const char *const names[CLPIN__COPY__COUNT] = {"memcpy", "sse2", "avx2", "avx512"};
  return (unsigned)k < CLPIN__COPY__COUNT ? names[k] : "?";
}

void clpin__copy_with(clpin__copy_kind k, void *dst, const void *src, size_t n) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  lines_fn *fn = NULL;
#if X86
  fn = k == CLPIN__COPY_SSE2     ? lines_sse2
       : k == CLPIN__COPY_AVX2   ? lines_avx2
       : k == CLPIN__COPY_AVX512 ? lines_avx512
                                 : NULL;
#endif
  if (!fn || n < STREAM_MIN_BYTES) {
    memcpy(d, s, n);
    return;
  }
  size_t head = (size_t)(-(uintptr_t)d & (LINE - 1));
  memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  size_t lines = n / LINE;
  fn(d, s, lines);
  memcpy(d + lines * LINE, s + lines * LINE, n % LINE);
}

void clpin__copy_fence(void) {
#if X86
  _mm_sfence();
#endif
}
