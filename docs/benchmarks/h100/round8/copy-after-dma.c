/* copy-after-dma: why copying a small write's rows into pool memory was slow
 * in round 8 (64 KiB in 5.8-6.4 us on the H200, README.md beside it), and
 * whether a small write through one pool block can beat the driver's own.
 * 64 KiB (16 pages) per copy, 200 calls per figure, interleaved, 5 rounds,
 * the median of the rounds' means in us:
 *   fresh      memcpy into a pool block no DMA has touched
 *   after      the driver's blocking write from a pool block, then (timed)
 *              memcpy into that block
 *   again      right after "after", a second memcpy into the same block
 *              (first touch of each page after the DMA, or every touch?)
 *   after-nt   as "after", the copy with non-temporal stores
 *   after-page as "after", one 4 KiB page copied (per page, or per call?)
 *   other      the DMA from one pool block, the copy into another
 *   malloc     the driver's write from malloc memory, then memcpy into it
 *   dma-pool   the driver's blocking write of 64 KiB from a pool block
 *   dma-malloc the same from malloc memory (the plain call)
 *   via-nt     "after-nt" and "dma-pool" together: a one-block small write
 *              with a streaming copy, against dma-malloc
 * Built with bench/benchcl.c and bench/benchstat.c (run-copy.sh).
 *   copy-after-dma [PLATFORM-SUBSTRING] */
#define CL_TARGET_OPENCL_VERSION 300
#include "benchcl.h"
#include "benchstat.h"
#include "clpin.h"

#include <emmintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BYTES ((size_t)64 << 10)
#define PAGE ((size_t)4096)
#define ITERS 200
#define ROUNDS 5

enum { FRESH, AFTER, AGAIN, AFTER_NT, AFTER_PAGE, OTHER, MALLOC, DMA_POOL, DMA_MALLOC, VIA_NT, N };
static const char *names[N] = {"fresh", "after",  "again",    "after-nt",   "after-page",
                               "other", "malloc", "dma-pool", "dma-malloc", "via-nt"};

static cl_command_queue q;
static cl_mem m;

#define CHECK(expr) BENCH_CL_CHECK("copy-after-dma", expr, clpin_strerror)

static double now(void) { return bench_now_s(); }

static double dma(const void *src) {
  double t0 = now();
  CHECK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, BYTES, src, 0, NULL, NULL));
  return now() - t0;
}

static double copy(void *dst, const void *src, size_t n) {
  double t0 = now();
  memcpy(dst, src, n);
  return now() - t0;
}

/* Both pointers 16-byte aligned, n a multiple of 64. */
static double copy_nt(void *dst, const void *src, size_t n) {
  double t0 = now();
  __m128i *d = dst;
  const __m128i *s = src;
  for (size_t i = 0; i < n / 16; i += 4) {
    __m128i a = _mm_load_si128(s + i), b = _mm_load_si128(s + i + 1);
    __m128i c = _mm_load_si128(s + i + 2), e = _mm_load_si128(s + i + 3);
    _mm_stream_si128(d + i, a);
    _mm_stream_si128(d + i + 1, b);
    _mm_stream_si128(d + i + 2, c);
    _mm_stream_si128(d + i + 3, e);
  }
  _mm_sfence();
  return now() - t0;
}

int main(int argc, char **argv) {
  cl_device_id d;
  cl_context c;
  cl_int e;
  bench_cl_open("copy-after-dma", argc > 1 ? argv[1] : "NVIDIA", clpin_strerror, &d, &c, &q);
  m = clCreateBuffer(c, CL_MEM_READ_WRITE, BYTES, NULL, &e);
  CHECK(e);
  clpin_pool *pool;
  CHECK(clpin_pool_get(q, &pool));
  unsigned char *fresh = clpin_host_alloc(pool, BYTES), *blk = clpin_host_alloc(pool, BYTES);
  unsigned char *other = clpin_host_alloc(pool, BYTES), *src = aligned_alloc(64, BYTES);
  unsigned char *plain = aligned_alloc(64, BYTES);
  if (!fresh || !blk || !other || !src || !plain || ((uintptr_t)blk | (uintptr_t)src) % 16)
    return 1;
  memset(src, 1, BYTES);
  memset(plain, 2, BYTES);
  double t[N][ROUNDS];
  for (int r = -1; r < ROUNDS; r++) {
    double sum[N] = {0};
    for (int i = 0; i < ITERS; i++) {
      sum[FRESH] += copy(fresh, src, BYTES);
      sum[DMA_POOL] += dma(blk);
      sum[AFTER] += copy(blk, src, BYTES);
      sum[AGAIN] += copy(blk, src, BYTES);
      dma(blk);
      sum[AFTER_NT] += copy_nt(blk, src, BYTES);
      dma(blk);
      sum[AFTER_PAGE] += copy(blk, src, PAGE);
      dma(other);
      sum[OTHER] += copy(blk, src, BYTES);
      sum[DMA_MALLOC] += dma(plain);
      sum[MALLOC] += copy(plain, src, BYTES);
      sum[VIA_NT] += copy_nt(blk, src, BYTES) + dma(blk);
    }
    for (int k = 0; r >= 0 && k < N; k++)
      t[k][r] = sum[k] / ITERS * 1e6;
  }
  char dname[128] = "";
  clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof dname, dname, NULL);
  printf("copy-after-dma on %s: 64 KiB, %d calls a round, median of %d rounds (us)\n", dname, ITERS,
         ROUNDS);
  for (int k = 0; k < N; k++) {
    bench_print_median(names[k], t[k], ROUNDS, "us");
  }
  clpin_host_free(fresh);
  clpin_host_free(blk);
  clpin_host_free(other);
  free(src);
  free(plain);
  clReleaseMemObject(m);
  clpin_pool_release_context(c);
  clReleaseCommandQueue(q);
  clReleaseContext(c);
  return 0;
}
