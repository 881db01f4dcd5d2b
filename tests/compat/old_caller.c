/* SPDX-License-Identifier: Apache-2.0 */
/* A program written against an older release's clpin.h (0.2.0's or
 * 0.3.0's: the copies beside this file, unchanged; CLPIN_OLD_HEADER names
 * which), built and linked against today's libclpin: it must run unchanged
 * (clpin.h, "API rules"). It uses what those callers use whose layout or
 * values later releases touch: clpin_stats (its release's and 0.1's
 * layouts), clpin_loader_desc with its release's CLPIN_LOADER_UNORDERED
 * (0.2's bit 0), struct clpin_loader_stats, CLPIN_END,
 * CLPIN_OPT_PINNED_H2D, the transfer and access flags. Prints "N passed,
 * N failed"; exits 1 on a failure. */
#define CL_TARGET_OPENCL_VERSION 120
#ifndef CLPIN_OLD_HEADER
#define CLPIN_OLD_HEADER "clpin-0.2.h"
#endif
#include CLPIN_OLD_HEADER

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
#define EXPECT(cond)                                                                               \
  do {                                                                                             \
    if (cond) {                                                                                    \
      passed++;                                                                                    \
    } else {                                                                                       \
      failed++;                                                                                    \
      fprintf(stderr, "old_caller.c:%d: %s failed (%s)\n", __LINE__, #cond,                        \
              clpin_last_error_detail());                                                          \
    }                                                                                              \
  } while (0)

enum { BATCH = 4096, BATCHES = 12 };

static cl_int fill(void *user, uint64_t index, void *host, size_t capacity, size_t *used) {
  (void)user;
  memset(host, (int)(index * 7 + 1), capacity);
  *used = capacity;
  return CL_SUCCESS;
}

static void loader(cl_command_queue q, unsigned flags) {
  clpin_loader_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d; /* the old release's size */
  d.batch_bytes = BATCH;
  d.batches = BATCHES;
  d.workers = 3;
  d.flags = flags;
  d.fill = fill;
  clpin_loader *L = NULL;
  EXPECT(clpin_loader_create(1, &q, &d, &L) == CL_SUCCESS);
  if (!L)
    return;
  unsigned seen = 0;
  unsigned char *back = malloc(BATCH);
  for (;;) {
    clpin_batch *b = NULL;
    cl_int rc = clpin_loader_next(L, &b);
    if (rc == CLPIN_END)
      break;
    EXPECT(rc == CL_SUCCESS);
    if (rc != CL_SUCCESS)
      break;
    uint64_t i = clpin_batch_index(b);
    cl_event ev = clpin_batch_event(b);
    EXPECT(clEnqueueReadBuffer(q, clpin_batch_buffer(b), CL_TRUE, 0, BATCH, back, 1, &ev, NULL) ==
           CL_SUCCESS);
    EXPECT(back[0] == (unsigned char)(i * 7 + 1) && back[BATCH - 1] == back[0]);
    if (i < 32)
      seen |= 1u << i;
    clpin_batch_release(b, 0, NULL);
  }
  EXPECT(seen == (1u << BATCHES) - 1);
  struct clpin_loader_stats s;
  memset(&s, 0xab, sizeof s);
  s.struct_size = sizeof s; /* the old release's size */
  EXPECT(clpin_loader_stats(L, &s) == CL_SUCCESS);
  EXPECT(s.struct_size == sizeof s && s.batches == BATCHES && s.workers == 3);
  EXPECT(clpin_loader_destroy(L) == CL_SUCCESS);
  free(back);
}

int main(void) {
  cl_platform_id plat;
  cl_device_id dev;
  cl_int err;
  if (clGetPlatformIDs(1, &plat, NULL) != CL_SUCCESS ||
      clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL) != CL_SUCCESS) {
    fprintf(stderr, "old_caller: no OpenCL device\n");
    return 1;
  }
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);

  EXPECT(clpin_version() >= CLPIN_VERSION_NUMBER);
  EXPECT(CLPIN_END == -20019 && strncmp(clpin_strerror(CLPIN_END), "CLPIN_END", 9) == 0);
  EXPECT(clpin_set_option(CLPIN_OPT_PINNED_H2D, 1) == CL_SUCCESS);
  EXPECT(clpin_get_option(CLPIN_OPT_PINNED_H2D) == 1);
  EXPECT(clpin_set_option(CLPIN_OPT_PINNED_H2D, CLPIN_PINNED_AUTO) == CL_SUCCESS);

  /* Transfers with 0.2's flags, then the pool's counters in 0.2's and
   * 0.1's layouts (a 0.1 caller's struct_size stops at bytes_unpinned). */
  enum { N = 1 << 20 };
  unsigned char *src = malloc(N), *dst = malloc(N);
  for (size_t i = 0; i < N; i++)
    src[i] = (unsigned char)(i * 13 + 5);
  cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N, NULL, &err);
  EXPECT(clpin_write(q, buf, 0, src, N, CLPIN_PIN_MEMORY, 0, NULL, NULL) == CL_SUCCESS);
  EXPECT(clpin_read(q, buf, 0, dst, N, CLPIN_PIN_MEMORY, 0, NULL, NULL) == CL_SUCCESS);
  EXPECT(memcmp(src, dst, N) == 0);
  EXPECT(clpin_write(q, buf, 0, src, N, CLPIN_READ, 0, NULL, NULL) == CLPIN_ERR_INVALID_ARGUMENT);
  clpin_pool *pool = NULL;
  EXPECT(clpin_pool_get(q, &pool) == CL_SUCCESS);
  clpin_stats st;
  memset(&st, 0xab, sizeof st);
  st.struct_size = sizeof st;
  EXPECT(clpin_pool_stats(pool, &st) == CL_SUCCESS);
  EXPECT(st.struct_size == sizeof st);
  EXPECT(st.bytes_cached + st.bytes_in_use + st.bytes_in_flight == st.bytes_reserved);
  size_t v01 = offsetof(clpin_stats, bytes_unpinned) + sizeof(uint64_t);
  memset(&st, 0xab, sizeof st);
  st.struct_size = v01;
  EXPECT(clpin_pool_stats(pool, &st) == CL_SUCCESS);
  EXPECT(st.struct_size == v01 && st.bytes_registered == (size_t)0xabababababababab);
  EXPECT(st.bytes_cached + st.bytes_in_use + st.bytes_in_flight == st.bytes_reserved);

  /* Tensors with 0.2's transfer and access flags. */
  size_t shape[1] = {N / 4};
  clpin_tensor *t = NULL;
  EXPECT(clpin_tensor_from_host(q, src, CLPIN_F32, 1, shape, CLPIN_PIN_MEMORY, &t) == CL_SUCCESS);
  void *host = NULL;
  EXPECT(clpin_tensor_host_data(t, q, CLPIN_READ, &host) == CL_SUCCESS);
  EXPECT(host && memcmp(host, src, N) == 0);
  clpin_tensor_release(t);

  loader(q, 0);
  loader(q, CLPIN_LOADER_UNORDERED); /* the old release's value (0.2's: bit 0) */

  clReleaseMemObject(buf);
  clpin_shutdown();
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  free(src);
  free(dst);
  printf("old_caller: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
