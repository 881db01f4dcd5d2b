/* small-probe: where a small blocking write's time goes on the driver, and
 * whether a pool block can ever carry one (README.md beside this file).
 * Every figure: ITERS calls a round, ROUNDS rounds after one warm-up, the
 * median of the rounds' means (us), the cases of a part interleaved and
 * taken in turn first.
 *
 * Part 1, 16 bytes, all from one malloc buffer (no placement effect):
 *   rect      clEnqueueWriteBufferRect, region {16,1,1} (rect-bench's tiny rect)
 *   linear    clEnqueueWriteBuffer of the same 16 bytes
 *   c-rect    clpin_write_rect (CLPIN_PIN_MEMORY)
 *   c-linear  clpin_write (CLPIN_PIN_MEMORY)
 *   q-info    clGetCommandQueueInfo(CL_QUEUE_CONTEXT) alone, after a rect
 *   m-info    clGetMemObjectInfo(CL_MEM_SIZE) alone, after a rect
 *   pool-get  clpin_pool_get alone, after a rect
 * Part 2, 64 KiB rect (64 rows of 1 KiB, host pitch 1088), from page-aligned
 * malloc memory:
 *   p-same    the driver's call from buffer X
 *   c-same    clpin_write_rect from buffer X (the same memory as p-same)
 *   p-other   the driver's call from buffer Y (the A/A control)
 *   p-off16   the driver's call from X + 16 bytes (alignment)
 *   p-off48   the driver's call from X + 48 bytes
 * Part 3, a pool block after the driver's 64 KiB DMA from it (copies of
 * 64 KiB from a warm malloc source):
 *   page0..page15  each page's memcpy timed alone, in order, after a DMA
 *   rev       the 64 KiB copied last page first, after a DMA
 *   wait50    the DMA, 50 us of spinning, then the copy
 *   pfw       the DMA, a prefetch-for-write of every line, then the copy
 *             (the prefetch timed with it)
 *   touch     the DMA, one byte written in every page, then the copy (both)
 *   no-dma    the copy into a block no DMA has read (as "fresh" in round 8)
 *   small-probe [PLATFORM-SUBSTRING] */
#define CL_TARGET_OPENCL_VERSION 300
#include "benchcl.h"
#include "benchstat.h"
#include "clpin.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ITERS 200
#define ROUNDS 7
#define KiB ((size_t)1024)
#define PAGE ((size_t)4096)
#define PAD 64

static cl_command_queue q;
static cl_mem m16, m64;

#define CHECK(expr) BENCH_CL_CHECK("small-probe", expr, clpin_strerror)

static double now(void) { return bench_now_s(); }

static const size_t zero[3] = {0, 0, 0};
static const size_t r16[3] = {16, 1, 1};
static const size_t r64[3] = {KiB, 64, 1};

static void rect16(const void *h) {
  CHECK(clEnqueueWriteBufferRect(q, m16, CL_TRUE, zero, zero, r16, 0, 0, 16 + PAD, 0, h, 0, NULL,
                                 NULL));
}

static void rect64(const void *h) {
  CHECK(clEnqueueWriteBufferRect(q, m64, CL_TRUE, zero, zero, r64, 0, 0, KiB + PAD, 0, h, 0, NULL,
                                 NULL));
}

static void print(const char *part, const char *const *names, double (*t)[ROUNDS], int n) {
  printf("%s\n", part);
  for (int k = 0; k < n; k++)
    bench_print_median(names[k], t[k], ROUNDS, "us");
}

enum { RECT, LINEAR, C_RECT, C_LINEAR, Q_INFO, M_INFO, POOL_GET, N1 };
static const char *const names1[N1] = {"rect",   "linear", "c-rect",  "c-linear",
                                       "q-info", "m-info", "pool-get"};

static double one16(int k, unsigned char *h) {
  double t0 = now(), t = 0;
  switch (k) {
  case RECT: rect16(h); break;
  case LINEAR: CHECK(clEnqueueWriteBuffer(q, m16, CL_TRUE, 0, 16, h, 0, NULL, NULL)); break;
  case C_RECT:
    CHECK(clpin_write_rect(q, m16, zero, zero, r16, 0, 0, 16 + PAD, 0, h, CLPIN_PIN_MEMORY, 0, NULL,
                           NULL));
    break;
  case C_LINEAR: CHECK(clpin_write(q, m16, 0, h, 16, CLPIN_PIN_MEMORY, 0, NULL, NULL)); break;
  default: {
    rect16(h);
    cl_context c;
    size_t size;
    clpin_pool *pool;
    t0 = now();
    if (k == Q_INFO)
      CHECK(clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof c, &c, NULL));
    else if (k == M_INFO)
      CHECK(clGetMemObjectInfo(m16, CL_MEM_SIZE, sizeof size, &size, NULL));
    else
      CHECK(clpin_pool_get(q, &pool));
  }
  }
  t = now() - t0;
  return t;
}

enum { P_SAME, C_SAME, P_OTHER, P_OFF16, P_OFF48, N2 };
static const char *const names2[N2] = {"p-same", "c-same", "p-other", "p-off16", "p-off48"};

static double one64(int k, unsigned char *x, unsigned char *y) {
  double t0 = now();
  switch (k) {
  case P_SAME: rect64(x); break;
  case C_SAME:
    CHECK(clpin_write_rect(q, m64, zero, zero, r64, 0, 0, KiB + PAD, 0, x, CLPIN_PIN_MEMORY, 0,
                           NULL, NULL));
    break;
  case P_OTHER: rect64(y); break;
  case P_OFF16: rect64(x + 16); break;
  default: rect64(x + 48); break;
  }
  return now() - t0;
}

enum { REV = 16, WAIT50, PFW, TOUCH, NO_DMA, N3 };
static const char *const names3[N3] = {"page0",  "page1",  "page2",  "page3",  "page4",  "page5",
                                       "page6",  "page7",  "page8",  "page9",  "page10", "page11",
                                       "page12", "page13", "page14", "page15", "rev",    "wait50",
                                       "pfw",    "touch",  "no-dma"};

static void dma(const void *blk) {
  CHECK(clEnqueueWriteBuffer(q, m64, CL_TRUE, 0, 64 * KiB, blk, 0, NULL, NULL));
}

/* Part 3's cases but the pages: the time of one. */
static double after(int k, unsigned char *blk, unsigned char *fresh, const unsigned char *src) {
  if (k != NO_DMA)
    dma(blk);
  if (k == WAIT50) {
    double until = now() + 50e-6;
    while (now() < until) {
    }
  }
  double t0 = now();
  switch (k) {
  case REV:
    for (size_t p = 16; p-- > 0;)
      memcpy(blk + p * PAGE, src + p * PAGE, PAGE);
    break;
  case PFW:
    for (size_t i = 0; i < 64 * KiB; i += 64)
      __builtin_prefetch(blk + i, 1, 3);
    memcpy(blk, src, 64 * KiB);
    break;
  case TOUCH:
    for (size_t i = 0; i < 64 * KiB; i += PAGE)
      ((volatile unsigned char *)blk)[i] = 0;
    memcpy(blk, src, 64 * KiB);
    break;
  case NO_DMA: memcpy(fresh, src, 64 * KiB); break;
  default: memcpy(blk, src, 64 * KiB); break;
  }
  return now() - t0;
}

int main(int argc, char **argv) {
  cl_device_id d;
  cl_context c;
  cl_int e;
  bench_cl_open("small-probe", argc > 1 ? argv[1] : "NVIDIA", clpin_strerror, &d, &c, &q);
  m16 = clCreateBuffer(c, CL_MEM_READ_WRITE, 4096, NULL, &e);
  CHECK(e);
  m64 = clCreateBuffer(c, CL_MEM_READ_WRITE, 64 * KiB, NULL, &e);
  CHECK(e);
  clpin_pool *pool;
  CHECK(clpin_pool_get(q, &pool));
  size_t hb = 64 * (KiB + PAD) + PAGE;
  unsigned char *h16 = aligned_alloc(PAGE, PAGE), *x = aligned_alloc(PAGE, hb);
  unsigned char *y = aligned_alloc(PAGE, hb), *src = aligned_alloc(PAGE, 64 * KiB);
  unsigned char *blk = clpin_host_alloc(pool, 64 * KiB), *fresh = clpin_host_alloc(pool, 64 * KiB);
  if (!h16 || !x || !y || !src || !blk || !fresh)
    return 1;
  memset(h16, 1, PAGE);
  memset(x, 2, hb);
  memset(y, 3, hb);
  memset(src, 4, 64 * KiB);
  char dname[128] = "";
  clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof dname, dname, NULL);
  printf("small-probe on %s: %d calls a round, median of %d rounds (us)\n", dname, ITERS, ROUNDS);

  double t1[N1][ROUNDS], t2[N2][ROUNDS], t3[N3][ROUNDS];
  for (int r = -1; r < ROUNDS; r++) {
    double s1[N1] = {0}, s2[N2] = {0}, s3[N3] = {0};
    for (int i = 0; i < ITERS; i++) {
      for (int k = 0; k < N1; k++) {
        int j = (i + k) % N1;
        s1[j] += one16(j, h16);
      }
      for (int k = 0; k < N2; k++) {
        int j = (i + k) % N2;
        s2[j] += one64(j, x, y);
      }
      dma(blk);
      for (size_t p = 0; p < 16; p++) {
        double t0 = now();
        memcpy(blk + p * PAGE, src + p * PAGE, PAGE);
        s3[p] += now() - t0;
      }
      for (int k = 0; k < N3 - REV; k++) {
        int j = REV + (i + k) % (N3 - REV);
        s3[j] += after(j, blk, fresh, src);
      }
    }
    for (int k = 0; r >= 0 && k < N1; k++)
      t1[k][r] = s1[k] / ITERS * 1e6;
    for (int k = 0; r >= 0 && k < N2; k++)
      t2[k][r] = s2[k] / ITERS * 1e6;
    for (int k = 0; r >= 0 && k < N3; k++)
      t3[k][r] = s3[k] / ITERS * 1e6;
  }
  print("part 1: 16 bytes", names1, t1, N1);
  print("part 2: 64 KiB rect", names2, t2, N2);
  print("part 3: a pool block after a DMA from it", names3, t3, N3);
  clpin_host_free(blk);
  clpin_host_free(fresh);
  free(h16);
  free(x);
  free(y);
  free(src);
  clReleaseMemObject(m16);
  clReleaseMemObject(m64);
  clpin_pool_release_context(c);
  clReleaseCommandQueue(q);
  clReleaseContext(c);
  return 0;
}
