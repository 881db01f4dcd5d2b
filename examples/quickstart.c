/* SPDX-License-Identifier: Apache-2.0 */
/* quickstart: clpin in one minute.
 *
 * One pool per OpenCL context; blocks of pinned memory from it; transfers
 * through it; counters that show what happened. Run with CLPIN_DEBUG=1 to see
 * each decision clpin makes, with CLPIN_DEBUG=2 also the pool's events (a
 * miss, then a hit for the same size).
 * Exits non-zero if the data or the counters are not what they must be. */
#include <clpin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(expr)                                                                                \
  do {                                                                                             \
    cl_int err_ = (expr);                                                                          \
    if (err_ != CL_SUCCESS) {                                                                      \
      fprintf(stderr, "quickstart: %s failed: %s\n", #expr, clpin_strerror(err_));                 \
      exit(EXIT_FAILURE);                                                                          \
    }                                                                                              \
  } while (0)
#define EXPECT(cond)                                                                               \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "quickstart: expected %s\n", #cond);                                         \
      exit(EXIT_FAILURE);                                                                          \
    }                                                                                              \
  } while (0)

int main(void) {
  /* Plain OpenCL setup: the first device of the first platform. */
  cl_platform_id platform;
  cl_device_id device;
  cl_int err;
  CHECK(clGetPlatformIDs(1, &platform, NULL));
  CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
  cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  CHECK(err);
  cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
  CHECK(err);
  const size_t n = (size_t)1 << 20;
  cl_mem dev = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CHECK(err);

  /* 1. The pool of the queue's context: created now, owned by clpin. */
  clpin_pool *pool;
  CHECK(clpin_pool_get(q, &pool));

  /* 2. A pinned block. The first of its size is a miss: a driver call. */
  clpin_block *block;
  CHECK(clpin_acquire(pool, n, &block));
  unsigned char *pinned = clpin_block_host(block);
  printf("block: %zu bytes asked, %zu capacity\n", n, clpin_block_size(block));

  /* 3. Produce data straight into pinned memory and send it: clpin sees the
   *    source inside a block and goes to DMA without a host copy. */
  for (size_t i = 0; i < n; i++)
    pinned[i] = (unsigned char)(i * 31 + 7);
  CHECK(clpin_write(q, dev, 0, pinned, n, CLPIN_PIN_MEMORY, 0, NULL, NULL));

  /* 4. Read it back into ordinary memory: staged through the pool. */
  unsigned char *back = malloc(n);
  EXPECT(back != NULL);
  CHECK(clpin_read(q, dev, 0, back, n, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  EXPECT(memcmp(back, pinned, n) == 0);

  /* 5. Give the block back and take one of the same size: a hit, served from
   *    the cache without any OpenCL call. */
  CHECK(clpin_release(block, NULL));
  clpin_stats before = {.struct_size = sizeof before};
  CHECK(clpin_pool_stats(pool, &before));
  CHECK(clpin_acquire(pool, n, &block));
  clpin_stats after = {.struct_size = sizeof after};
  CHECK(clpin_pool_stats(pool, &after));
  EXPECT(after.hits == before.hits + 1);
  EXPECT(after.misses == before.misses);
  EXPECT(after.driver_allocs == before.driver_allocs);

  /* 6. Asynchronous use: a non-blocking write from the block, then release it
   *    with the write's event. The pool keeps it "in flight" and hands it out
   *    again only after the write is done. */
  cl_event done;
  memset(clpin_block_host(block), 0xab, n);
  CHECK(clpin_write(q, dev, 0, clpin_block_host(block), n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0,
                    NULL, &done));
  CHECK(clpin_release(block, done));
  CHECK(clReleaseEvent(done)); /* the pool holds its own reference */
  CHECK(clFinish(q));

  /* 7. What happened, in numbers. */
  clpin_stats st = {.struct_size = sizeof st};
  CHECK(clpin_pool_stats(pool, &st));
  EXPECT(st.bytes_pinned_direct >= 2 * n);
  EXPECT(st.bytes_cached + st.bytes_in_use + st.bytes_in_flight == st.bytes_reserved);
  printf("hits %llu, misses %llu, driver allocations %llu\n", (unsigned long long)st.hits,
         (unsigned long long)st.misses, (unsigned long long)st.driver_allocs);
  printf("bytes: %llu sent from pinned memory directly, %llu staged, %llu pipelined, "
         "%llu unpinned\n",
         (unsigned long long)st.bytes_pinned_direct, (unsigned long long)st.bytes_staged,
         (unsigned long long)st.bytes_pipelined, (unsigned long long)st.bytes_unpinned);
  printf("pinned memory held: %zu bytes (%zu cached for reuse)\n", st.bytes_reserved,
         st.bytes_cached);

  /* 8. Before the context goes: waits for in-flight blocks, frees them all. */
  CHECK(clpin_pool_release_context(ctx));
  free(back);
  clReleaseMemObject(dev);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  puts("quickstart: ok");
  return EXIT_SUCCESS;
}
