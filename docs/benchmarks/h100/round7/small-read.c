/* small-read: where a small blocking rect read through one pool block
 * spends its time (round 7, README.md beside it). 64 rows of 1 KiB, host
 * pitch 1088, 200 calls per figure, interleaved, 5 rounds:
 *   plain      the driver's call into malloc memory
 *   clpin      clpin_read_rect (CLPIN_PIN_MEMORY)
 *   kept       the driver's call into one pool block kept across calls,
 *              rows packed, then the rows copied out
 *   acquired   the same with clpin_acquire / clpin_release around each call
 *   dma-kept   the driver's call into the kept block alone
 *   dma-acq    the same into a block acquired and released around each call
 *   dma-pitch  dma-kept with the packed pitches given (1024, 65536) instead
 *              of 0 (tight)
 *   clpin-buf  clpin_read of the 64 KiB (CLPIN_PIN_MEMORY)
 *   clpin-own  clpin_read_rect into memory of its own, which the driver's
 *              plain read never touches (every other figure uses one host
 *              buffer, the one "plain" reads into just before "clpin")
 * Prints each figure's median in us and the pool's counters.
 *   small-read [PLATFORM-SUBSTRING] */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clpin.h"

#define ROWS 64
#define ROW 1024
#define HP (ROW + 64)
#define ITERS 200
#define ROUNDS 5

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static cl_command_queue q;
static cl_mem m;
static size_t z[3], region[3] = {ROW, ROWS, 1};

static void dma(void *dst, size_t hp) {
  size_t hsp = hp == ROW ? ROW * ROWS : 0;
  cl_int e =
      clEnqueueReadBufferRect(q, m, CL_TRUE, z, z, region, 0, 0, hp, hsp, dst, 0, NULL, NULL);
  if (e) {
    fprintf(stderr, "read: %d\n", e);
    exit(1);
  }
}

static void rows_out(unsigned char *host, const unsigned char *blk) {
  for (int r = 0; r < ROWS; r++)
    memcpy(host + r * HP, blk + r * ROW, ROW);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  const char *want = argc > 1 ? argv[1] : "NVIDIA";
  cl_platform_id ps[8];
  cl_uint np = 0;
  clGetPlatformIDs(8, ps, &np);
  cl_platform_id p = ps[0];
  for (cl_uint i = 0; i < np; i++) {
    char name[128] = "";
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    if (strstr(name, want))
      p = ps[i];
  }
  cl_device_id d;
  cl_int e;
  clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL);
  cl_context c = clCreateContext(NULL, 1, &d, NULL, NULL, &e);
  q = clCreateCommandQueueWithProperties(c, d, NULL, &e);
  m = clCreateBuffer(c, CL_MEM_READ_WRITE, ROWS * ROW, NULL, &e);
  unsigned char *host = calloc(1, ROWS * HP), *own = calloc(1, ROWS * HP);
  clpin_pool *pool;
  clpin_pool_get(q, &pool);
  clpin_block *kept;
  clpin_acquire(pool, ROWS * ROW, &kept);
  unsigned char *kb = clpin_block_host(kept);
  const char *names[9] = {"plain",   "clpin",     "kept",      "acquired", "dma-kept",
                          "dma-acq", "dma-pitch", "clpin-buf", "clpin-own"};
  double t[9][ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    double s[9] = {0};
    for (int i = 0; i < ITERS; i++) {
      double t0 = now();
      dma(host, HP);
      double t1 = now();
      if (clpin_read_rect(q, m, z, z, region, 0, 0, HP, 0, host, CLPIN_PIN_MEMORY, 0, NULL, NULL))
        exit(1);
      double t2 = now();
      dma(kb, 0);
      rows_out(host, kb);
      double t3 = now();
      clpin_block *b;
      clpin_acquire(pool, ROWS * ROW, &b);
      dma(clpin_block_host(b), 0);
      rows_out(host, clpin_block_host(b));
      clpin_release(b, NULL);
      double t4 = now();
      dma(kb, 0);
      double t5 = now();
      clpin_acquire(pool, ROWS * ROW, &b);
      dma(clpin_block_host(b), 0);
      clpin_release(b, NULL);
      double t6 = now();
      dma(kb, ROW);
      double t7 = now();
      if (clpin_read(q, m, 0, host, ROWS * ROW, CLPIN_PIN_MEMORY, 0, NULL, NULL))
        exit(1);
      double t8 = now();
      if (clpin_read_rect(q, m, z, z, region, 0, 0, HP, 0, own, CLPIN_PIN_MEMORY, 0, NULL, NULL))
        exit(1);
      double t9 = now();
      s[0] += t1 - t0, s[1] += t2 - t1, s[2] += t3 - t2, s[3] += t4 - t3, s[4] += t5 - t4,
          s[5] += t6 - t5, s[6] += t7 - t6, s[7] += t8 - t7, s[8] += t9 - t8;
    }
    for (int k = 0; k < 9; k++)
      t[k][r] = s[k] / ITERS * 1e6;
  }
  for (int k = 0; k < 9; k++) {
    qsort(t[k], ROUNDS, sizeof t[k][0], cmp);
    printf("%-9s %7.2f us (min %.2f, max %.2f)\n", names[k], t[k][ROUNDS / 2], t[k][0],
           t[k][ROUNDS - 1]);
  }
  clpin_stats st = {.struct_size = sizeof st};
  clpin_pool_stats(pool, &st);
  printf("pool: hits %llu misses %llu staged %llu unpinned %llu blocks cached %zu\n",
         (unsigned long long)st.hits, (unsigned long long)st.misses,
         (unsigned long long)st.bytes_staged, (unsigned long long)st.bytes_unpinned,
         (size_t)st.blocks_cached);
  clpin_release(kept, NULL);
  clpin_pool_release_context(c);
  return 0;
}
