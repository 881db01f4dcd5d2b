/* SPDX-License-Identifier: Apache-2.0 */
/* Tensors: dtypes, shapes, round trips, non-blocking uploads, and the host
 * mirror's state machine (every transition, with stats proving whether a copy
 * ran). */
#include "testutil.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static test_cl T;

static void setup(void) { test_cl_open(&T); }
static void teardown(void) { test_cl_close(&T); }

/* The mirror case tests the separate mirror of discrete devices: on a
 * host-unified device (POCL) CLPIN_PINNED_H2D=1 keeps tensors on that path
 * (check_unified tests the zero-copy one). */
static size_t pinned_h2d0;
static void setup_mirror(void) {
  pinned_h2d0 = clpin_get_option(CLPIN_OPT_PINNED);
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_PINNED, 1), CL_SUCCESS);
  test_cl_open(&T);
}
static void teardown_mirror(void) {
  test_cl_close(&T);
  clpin_set_option(CLPIN_OPT_PINNED, pinned_h2d0);
}

static const clpin_dtype all_dtypes[] = {CLPIN_U8,  CLPIN_I8,  CLPIN_U16, CLPIN_I16,
                                         CLPIN_U32, CLPIN_I32, CLPIN_U64, CLPIN_I64,
                                         CLPIN_F16, CLPIN_F32, CLPIN_F64};
static const size_t all_sizes[] = {1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8};
#define NDTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

/* The counters of the pool of T's context. */
static clpin_stats stats_now(void) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  return test_stats(pool);
}

/* The device buffer's bytes read with plain OpenCL, bypassing clpin. */
static unsigned char *raw_device(cl_mem buf, size_t n) {
  unsigned char *p = malloc(n);
  ck_assert_ptr_nonnull(p);
  CL_OK(clEnqueueReadBuffer(T.queue, buf, CL_TRUE, 0, n, p, 0, NULL, NULL));
  return p;
}

static void raw_fill_device(cl_mem buf, size_t n, unsigned seed) {
  unsigned char *p = malloc(n);
  ck_assert_ptr_nonnull(p);
  test_fill(p, n, seed);
  CL_OK(clEnqueueWriteBuffer(T.queue, buf, CL_TRUE, 0, n, p, 0, NULL, NULL));
  free(p);
}

static size_t device_max_alloc(void) {
  cl_ulong max;
  CL_OK(clGetDeviceInfo(T.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max, &max, NULL));
  return (size_t)max;
}

/* ---- dtypes and shapes -------------------------------------------------- */

START_TEST(dtype_sizes) {
  for (size_t i = 0; i < NDTYPES; i++)
    ck_assert_uint_eq(clpin_dtype_size(all_dtypes[i]), all_sizes[i]);
  ck_assert_uint_eq(clpin_dtype_size((clpin_dtype)(CLPIN_F64 + 1)), 0);
  ck_assert_uint_eq(clpin_dtype_size((clpin_dtype)-1), 0);
  ck_assert_uint_eq(clpin_dtype_size((clpin_dtype)1000), 0);
}
END_TEST

/* Every dtype, three shapes (one element; odd 3-d; a 3-d shape of more than
 * 5 MiB, past one staging chunk), both staging flags: the device holds exactly
 * the host bytes (read back with plain OpenCL), to_host returns them and
 * writes nothing past nbytes. */
START_TEST(roundtrip_every_dtype) {
  static const unsigned flag_sets[] = {0, CLPIN_PIN_MEMORY};
  static const size_t shapes[3][3] = {{1, 1, 1}, {3, 5, 7}, {131, 97, 53}};
  for (size_t f = 0; f < 2; f++) {
    for (size_t i = 0; i < NDTYPES * 3; i++) {
      const size_t *shape = shapes[i % 3];
      size_t d = i / 3;
      size_t n = shape[0] * shape[1] * shape[2] * all_sizes[d];
      unsigned seed = (unsigned)(i * 2 + f + 1);
      unsigned char *src = malloc(n), *dst = malloc(n + 16);
      test_fill(src, n, seed);
      memset(dst, 0xA5, n + 16);
      clpin_tensor *t = NULL;
      CL_OK(clpin_tensor_from_host(T.queue, src, all_dtypes[d], 3, shape, flag_sets[f], &t));
      ck_assert_ptr_nonnull(t);
      ck_assert_int_eq(clpin_tensor_dtype(t), all_dtypes[d]);
      ck_assert_uint_eq(clpin_tensor_ndim(t), 3);
      ck_assert_uint_eq(clpin_tensor_nbytes(t), n);
      const size_t *sh = clpin_tensor_shape(t);
      ck_assert_ptr_nonnull(sh);
      ck_assert_ptr_ne(sh, shape); /* copied */
      ck_assert_uint_eq(sh[0], shape[0]);
      ck_assert_uint_eq(sh[1], shape[1]);
      ck_assert_uint_eq(sh[2], shape[2]);
      ck_assert_int_eq(clpin_tensor_head(t), CLPIN_HEAD_DEVICE);
      ck_assert_ptr_null(clpin_tensor_event(t));
      cl_mem buf = clpin_tensor_buffer(t);
      ck_assert_ptr_nonnull(buf);
      size_t bufsize = 0;
      CL_OK(clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof bufsize, &bufsize, NULL));
      ck_assert_uint_eq(bufsize, n);
      unsigned char *dev = raw_device(buf, n);
      ck_assert_int_eq(memcmp(dev, src, n), 0);
      free(dev);

      CL_OK(clpin_tensor_to_host(t, T.queue, dst, flag_sets[f], NULL));
      ck_assert_msg(test_check(dst, n, seed) == (size_t)-1,
                    "dtype %zu shape %zu flags %u: mismatch", d, i % 3, flag_sets[f]);
      for (size_t k = n; k < n + 16; k++)
        ck_assert_uint_eq(dst[k], 0xA5);
      clpin_tensor_release(t);
      free(src);
      free(dst);
    }
  }
}
END_TEST

START_TEST(max_dims_and_argument_errors) {
  size_t shape[CLPIN_MAX_DIMS + 1];
  for (size_t i = 0; i <= CLPIN_MAX_DIMS; i++)
    shape[i] = 2;
  unsigned char src[1 << (CLPIN_MAX_DIMS + 1)];
  test_fill(src, sizeof src, 7);
  clpin_tensor *const sentinel = (clpin_tensor *)(uintptr_t)0x5a5a;
  clpin_tensor *t = sentinel;

  ck_assert_int_eq(clpin_tensor_from_host(T.queue, src, CLPIN_U8, CLPIN_MAX_DIMS + 1, shape, 0, &t),
                   CLPIN_ERR_INVALID_SHAPE);
  ck_assert_int_eq(clpin_tensor_from_host(T.queue, src, CLPIN_U8, 2, NULL, 0, &t),
                   CLPIN_ERR_INVALID_SHAPE);
  ck_assert_int_eq(clpin_tensor_from_host(T.queue, src, (clpin_dtype)42, 1, shape, 0, &t),
                   CLPIN_ERR_INVALID_DTYPE);
  ck_assert_int_eq(clpin_tensor_from_host(NULL, src, CLPIN_U8, 1, shape, 0, &t),
                   CL_INVALID_COMMAND_QUEUE);
  ck_assert_int_eq(clpin_tensor_from_host(T.queue, src, CLPIN_U8, 1, shape, 1u << 7, &t),
                   CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_tensor_from_host(T.queue, src, CLPIN_U8, 1, shape, 0, NULL),
                   CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_tensor_from_host(T.queue, NULL, CLPIN_U8, 1, shape, 0, &t),
                   CLPIN_ERR_INVALID_ARGUMENT); /* no data: clpin_tensor_create */
  ck_assert_int_eq(clpin_tensor_create(T.queue, CLPIN_U8, CLPIN_MAX_DIMS + 1, shape, &t),
                   CLPIN_ERR_INVALID_SHAPE);
  ck_assert_int_eq(clpin_tensor_create(T.queue, (clpin_dtype)42, 1, shape, &t),
                   CLPIN_ERR_INVALID_DTYPE);
  ck_assert_int_eq(clpin_tensor_create(NULL, CLPIN_U8, 1, shape, &t), CL_INVALID_COMMAND_QUEUE);
  ck_assert_ptr_eq(t, sentinel);

  /* Exactly CLPIN_MAX_DIMS dimensions is fine: 2^8 bytes. */
  CL_OK(clpin_tensor_from_host(T.queue, src, CLPIN_U8, CLPIN_MAX_DIMS, shape, 0, &t));
  ck_assert_uint_eq(clpin_tensor_ndim(t), CLPIN_MAX_DIMS);
  ck_assert_uint_eq(clpin_tensor_nbytes(t), 1u << CLPIN_MAX_DIMS);
  unsigned char back[1 << CLPIN_MAX_DIMS];
  CL_OK(clpin_tensor_to_host(t, T.queue, back, 0, NULL));
  ck_assert_int_eq(memcmp(back, src, sizeof back), 0);
  ck_assert_int_eq(clpin_tensor_to_host(t, T.queue, NULL, 0, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_tensor_to_host(NULL, T.queue, back, 0, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_tensor_to_host(t, T.queue, back, 1u << 9, NULL),
                   CLPIN_ERR_INVALID_ARGUMENT);
  clpin_tensor_release(t);

  /* NULL tensors: accessors give 0/NULL, release does nothing. */
  ck_assert_ptr_null(clpin_tensor_buffer(NULL));
  ck_assert_ptr_null(clpin_tensor_shape(NULL));
  ck_assert_ptr_null(clpin_tensor_event(NULL));
  ck_assert_uint_eq(clpin_tensor_ndim(NULL), 0);
  ck_assert_uint_eq(clpin_tensor_nbytes(NULL), 0);
  ck_assert_int_eq(clpin_tensor_head(NULL), CLPIN_HEAD_UNINITIALIZED);
  clpin_tensor_release(NULL);
}
END_TEST

START_TEST(overflowing_shapes) {
  clpin_tensor *const sentinel = (clpin_tensor *)(uintptr_t)0x5a5a;
  clpin_tensor *t = sentinel;
  unsigned char src[16] = {0};
  /* Element count overflows. */
  const size_t count_ovf[2] = {SIZE_MAX / 2 + 1, 2};
  ck_assert_int_eq(clpin_tensor_from_host(T.queue, src, CLPIN_U8, 2, count_ovf, 0, &t),
                   CLPIN_ERR_OVERFLOW);
  const size_t big[3] = {(size_t)1 << 22, (size_t)1 << 22, (size_t)1 << 22};
  ck_assert_int_eq(clpin_tensor_from_host(T.queue, src, CLPIN_U8, 3, big, 0, &t),
                   CLPIN_ERR_OVERFLOW);
  /* The count fits, the byte size does not. */
  const size_t bytes_ovf[1] = {SIZE_MAX / 4 + 1};
  ck_assert_int_eq(clpin_tensor_from_host(T.queue, src, CLPIN_F32, 1, bytes_ovf, 0, &t),
                   CLPIN_ERR_OVERFLOW);
  const size_t bytes_ovf2[2] = {SIZE_MAX / 16 + 1, 2};
  ck_assert_int_eq(clpin_tensor_from_host(T.queue, src, CLPIN_F64, 2, bytes_ovf2, 0, &t),
                   CLPIN_ERR_OVERFLOW);
  ck_assert_int_eq(clpin_tensor_create(T.queue, CLPIN_F64, 2, bytes_ovf2, &t), CLPIN_ERR_OVERFLOW);
  ck_assert_ptr_eq(t, sentinel);
  /* The largest byte size that does not overflow is refused by the device
   * limit instead. */
  const size_t fits[1] = {SIZE_MAX / 8};
  ck_assert_int_eq(clpin_tensor_from_host(T.queue, src, CLPIN_F64, 1, fits, 0, &t),
                   CLPIN_ERR_INVALID_SIZE);
  ck_assert_ptr_eq(t, sentinel);
  /* A zero anywhere makes it empty, whatever the other dimensions. */
  const size_t empty_huge[3] = {SIZE_MAX, 0, SIZE_MAX};
  CL_OK(clpin_tensor_from_host(T.queue, NULL, CLPIN_F64, 3, empty_huge, 0, &t));
  ck_assert_uint_eq(clpin_tensor_nbytes(t), 0);
  clpin_tensor_release(t);
}
END_TEST

START_TEST(above_device_max_alloc) {
  size_t max = device_max_alloc();
  clpin_tensor *const sentinel = (clpin_tensor *)(uintptr_t)0x5a5a;
  clpin_tensor *t = sentinel;
  unsigned char src[16] = {0};
  const size_t one_over[1] = {max + 1};
  ck_assert_int_eq(clpin_tensor_from_host(T.queue, src, CLPIN_U8, 1, one_over, 0, &t),
                   CLPIN_ERR_INVALID_SIZE);
  const size_t half_over[2] = {max / 4 + 1, 2};
  ck_assert_int_eq(clpin_tensor_from_host(T.queue, src, CLPIN_U16, 2, half_over, 0, &t),
                   CLPIN_ERR_INVALID_SIZE);
  ck_assert_ptr_eq(t, sentinel);
}
END_TEST

START_TEST(scalar_tensor) {
  double v = 3.25, back = 0;
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, &v, CLPIN_F64, 0, NULL, CLPIN_PIN_MEMORY, &t));
  ck_assert_uint_eq(clpin_tensor_ndim(t), 0);
  ck_assert_uint_eq(clpin_tensor_nbytes(t), sizeof(double));
  ck_assert_ptr_nonnull(clpin_tensor_buffer(t));
  CL_OK(clpin_tensor_to_host(t, T.queue, &back, 0, NULL));
  ck_assert(back == 3.25);
  void *p;
  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ, &p));
  ck_assert(*(double *)p == 3.25);
  clpin_tensor_release(t);
}
END_TEST

START_TEST(empty_tensor) {
  const size_t shape[3] = {4, 0, 3};
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, NULL, CLPIN_F32, 3, shape, CLPIN_NON_BLOCKING, &t));
  ck_assert_uint_eq(clpin_tensor_nbytes(t), 0);
  ck_assert_ptr_null(clpin_tensor_buffer(t));
  ck_assert_ptr_null(clpin_tensor_event(t));
  ck_assert_uint_eq(clpin_tensor_shape(t)[1], 0);
  ck_assert_int_eq(clpin_tensor_head(t), CLPIN_HEAD_SYNCED);
  CL_OK(clpin_tensor_to_host(t, T.queue, NULL, 0, NULL));
  cl_event ev = NULL;
  CL_OK(clpin_tensor_to_host(t, T.queue, NULL, CLPIN_NON_BLOCKING, &ev));
  ck_assert_ptr_nonnull(ev);
  cl_int st = -1;
  CL_OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  ck_assert_int_eq(st, CL_COMPLETE);
  clReleaseEvent(ev);
  void *p = (void *)&st;
  cl_mem m = (cl_mem)(uintptr_t)1;
  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ | CLPIN_WRITE, &p));
  CL_OK(clpin_tensor_device_data(t, T.queue, CLPIN_READ | CLPIN_WRITE, &m));
  ck_assert_ptr_null(p);
  ck_assert_ptr_null(m);
  ck_assert_int_eq(clpin_tensor_head(t), CLPIN_HEAD_SYNCED);
  clpin_tensor_release(t);
  /* Created without data, an empty tensor is still SYNCED: nothing to copy. */
  CL_OK(clpin_tensor_create(T.queue, CLPIN_F32, 3, shape, &t));
  ck_assert_uint_eq(clpin_tensor_nbytes(t), 0);
  ck_assert_ptr_null(clpin_tensor_buffer(t));
  ck_assert_int_eq(clpin_tensor_head(t), CLPIN_HEAD_SYNCED);
  clpin_tensor_release(t);
}
END_TEST

/* A non-blocking upload: the tensor exposes its event, which completes with
 * the data on the device; a non-blocking to_host gives its own event. */
/* Oclgrind runs event callbacks only when clFinish returns and its runtime
 * is not thread-safe, so clpin's non-blocking pipeline (completed from DMA
 * callbacks and worker threads) cannot run there (see ci/stages/30-oclgrind.sh);
 * on Oclgrind the non-blocking test uses the plain path, which still proves
 * the tensor's own event handling. */
static bool on_oclgrind(void) {
  char name[256] = "";
  CL_OK(clGetPlatformInfo(T.platform, CL_PLATFORM_NAME, sizeof name, name, NULL));
  return strstr(name, "Oclgrind") != NULL;
}

START_TEST(non_blocking_from_host_with_event) {
  const size_t n = (size_t)3 << 20;
  const size_t shape[1] = {n / 4};
  bool pipelined = !on_oclgrind();
  unsigned flags = CLPIN_NON_BLOCKING | (pipelined ? CLPIN_PIN_MEMORY : 0);
  /* Three chunks: the upload and the read go through the pipeline. The
   * options are put back at the end: without fork (valgrind) the next
   * tests run in this process. */
  size_t chunk0 = clpin_get_option(CLPIN_OPT_CHUNK);
  size_t stage_min0 = clpin_get_option(CLPIN_OPT_STAGE_MIN);
  size_t stage_min_h2d0 = clpin_get_option(CLPIN_OPT_STAGE_MIN_H2D);
  size_t pinned0 = clpin_get_option(CLPIN_OPT_PINNED);
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, (size_t)1 << 20));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, 0)); /* stage every size: the paths under test */
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, 0));
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, 1)); /* stage on POCL too */
  unsigned char *src = malloc(n), *dst = malloc(n);
  test_fill(src, n, 11);
  memset(dst, 0, n);
  clpin_stats s0 = stats_now();
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, src, CLPIN_I32, 1, shape, flags, &t));
  cl_event up = clpin_tensor_event(t);
  ck_assert_ptr_nonnull(up);
  CL_OK(clWaitForEvents(1, &up));
  clpin_stats s1 = stats_now();
  if (pipelined)
    ck_assert_uint_eq(s1.bytes_pipelined - s0.bytes_pipelined, n);
  else
    ck_assert_uint_eq(s1.bytes_unpinned - s0.bytes_unpinned, n);
  cl_int st = -1;
  CL_OK(clGetEventInfo(up, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  ck_assert_int_eq(st, CL_COMPLETE);
  unsigned char *dev = raw_device(clpin_tensor_buffer(t), n);
  ck_assert_msg(test_check(dev, n, 11) == (size_t)-1, "device data wrong after the event");
  free(dev);

  cl_event down = NULL;
  CL_OK(clpin_tensor_to_host(t, T.queue, dst, flags, &down));
  ck_assert_ptr_nonnull(down);
  CL_OK(clWaitForEvents(1, &down));
  if (pipelined)
    ck_assert_uint_eq(stats_now().bytes_pipelined - s1.bytes_pipelined, n);
  clReleaseEvent(down);
  ck_assert_msg(test_check(dst, n, 11) == (size_t)-1, "to_host data wrong");
  clpin_tensor_release(t);

  /* Released right after a non-blocking upload: release waits for it, and a
   * to_host chained on the upload without any wait sees the data. */
  CL_OK(clpin_tensor_from_host(T.queue, src, CLPIN_I32, 1, shape, CLPIN_NON_BLOCKING, &t));
  memset(dst, 0, n);
  CL_OK(clpin_tensor_to_host(t, T.queue, dst, 0, NULL));
  ck_assert_msg(test_check(dst, n, 11) == (size_t)-1, "chained to_host data wrong");
  clpin_tensor_release(t);
  free(src);
  free(dst);
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, chunk0));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, stage_min0));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, stage_min_h2d0));
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, pinned0));
}
END_TEST

/* ---- the host mirror ---------------------------------------------------- */

#define MIRROR_BYTES ((size_t)64 << 10)

/* Apply one mirror call and assert the head after it and whether a copy ran
 * (bytes_pinned_direct moves by exactly nbytes, or not at all). */
static void step(clpin_tensor *t, int device_side, unsigned access, clpin_head want, int copies,
                 int line) {
  clpin_stats before = stats_now();
  if (device_side) {
    cl_mem m = NULL;
    CL_OK(clpin_tensor_device_data(t, T.queue, access, &m));
    ck_assert_msg(m == clpin_tensor_buffer(t), "line %d: wrong buffer", line);
  } else {
    void *p = NULL;
    CL_OK(clpin_tensor_host_data(t, T.queue, access, &p));
    ck_assert_msg(p != NULL, "line %d: NULL mirror", line);
  }
  clpin_stats after = stats_now();
  ck_assert_msg(clpin_tensor_head(t) == want, "line %d: head %d, want %d", line,
                (int)clpin_tensor_head(t), (int)want);
  uint64_t moved = after.bytes_pinned_direct - before.bytes_pinned_direct;
  ck_assert_msg(moved == (copies ? clpin_tensor_nbytes(t) : 0),
                "line %d: bytes_pinned_direct moved by %llu, want %s", line,
                (unsigned long long)moved, copies ? "nbytes" : "0");
  /* Nothing else moves: mirror copies never stage or go unpinned. */
  ck_assert_msg(after.bytes_staged == before.bytes_staged &&
                    after.bytes_pipelined == before.bytes_pipelined &&
                    after.bytes_unpinned == before.bytes_unpinned,
                "line %d: a mirror copy took a staging path", line);
}
#define HOST(t, acc, want, copies) step(t, 0, acc, want, copies, __LINE__)
#define DEV(t, acc, want, copies) step(t, 1, acc, want, copies, __LINE__)

static void *mirror_of(clpin_tensor *t) {
  void *p;
  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ, &p)); /* no copy unless DEVICE */
  return p;
}

START_TEST(mirror_transitions_from_device) {
  const size_t n = MIRROR_BYTES, shape[2] = {128, n / 128 / 4};
  unsigned char *src = malloc(n);
  test_fill(src, n, 21);
  size_t in_use0 = stats_now().blocks_in_use;
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, src, CLPIN_F32, 2, shape, CLPIN_PIN_MEMORY, &t));
  ck_assert_int_eq(clpin_tensor_head(t), CLPIN_HEAD_DEVICE);

  HOST(t, CLPIN_READ, CLPIN_HEAD_SYNCED, 1);                 /* DEVICE -READ-> SYNCED, copy */
  ck_assert_uint_eq(stats_now().blocks_in_use, in_use0 + 1); /* the mirror */
  void *p = mirror_of(t);
  ck_assert(test_check(p, n, 21) == (size_t)-1);
  HOST(t, CLPIN_READ, CLPIN_HEAD_SYNCED, 0); /* SYNCED -READ-> SYNCED */
  DEV(t, CLPIN_READ, CLPIN_HEAD_SYNCED, 0);  /* SYNCED -dREAD-> SYNCED */
  HOST(t, CLPIN_WRITE, CLPIN_HEAD_HOST, 0);  /* SYNCED -WRITE-> HOST */
  test_fill(p, n, 22);
  HOST(t, CLPIN_READ, CLPIN_HEAD_HOST, 0);               /* HOST -READ-> HOST */
  HOST(t, CLPIN_READ | CLPIN_WRITE, CLPIN_HEAD_HOST, 0); /* HOST -RW-> HOST */

  /* to_host of a HOST-headed tensor returns the mirror's (newer) data and
   * moves nothing over the bus. */
  unsigned char *dst = malloc(n);
  clpin_stats s0 = stats_now();
  CL_OK(clpin_tensor_to_host(t, T.queue, dst, 0, NULL));
  ck_assert(test_check(dst, n, 22) == (size_t)-1);
  clpin_stats s1 = stats_now();
  ck_assert_uint_eq(
      s1.bytes_pinned_direct + s1.bytes_staged + s1.bytes_pipelined + s1.bytes_unpinned,
      s0.bytes_pinned_direct + s0.bytes_staged + s0.bytes_pipelined + s0.bytes_unpinned);

  unsigned char *dev = raw_device(clpin_tensor_buffer(t), n);
  ck_assert(test_check(dev, n, 21) == (size_t)-1); /* device still stale */
  free(dev);
  DEV(t, CLPIN_READ, CLPIN_HEAD_SYNCED, 1); /* HOST -dREAD-> SYNCED, copy */
  dev = raw_device(clpin_tensor_buffer(t), n);
  ck_assert(test_check(dev, n, 22) == (size_t)-1);
  free(dev);

  DEV(t, CLPIN_WRITE, CLPIN_HEAD_DEVICE, 0);              /* SYNCED -dWRITE-> DEVICE */
  raw_fill_device(clpin_tensor_buffer(t), n, 23);         /* stands in for a kernel */
  DEV(t, CLPIN_READ, CLPIN_HEAD_DEVICE, 0);               /* DEVICE -dREAD-> DEVICE */
  DEV(t, CLPIN_WRITE, CLPIN_HEAD_DEVICE, 0);              /* DEVICE -dWRITE-> DEVICE */
  DEV(t, CLPIN_READ | CLPIN_WRITE, CLPIN_HEAD_DEVICE, 0); /* DEVICE -dRW-> DEVICE */
  ck_assert(test_check(p, n, 22) == (size_t)-1);          /* mirror untouched */
  HOST(t, CLPIN_READ | CLPIN_WRITE, CLPIN_HEAD_HOST, 1);  /* DEVICE -RW-> HOST, copy */
  ck_assert(test_check(p, n, 23) == (size_t)-1);
  test_fill(p, n, 24);
  DEV(t, CLPIN_READ | CLPIN_WRITE, CLPIN_HEAD_DEVICE, 1); /* HOST -dRW-> DEVICE, copy */
  dev = raw_device(clpin_tensor_buffer(t), n);
  ck_assert(test_check(dev, n, 24) == (size_t)-1);
  free(dev);
  HOST(t, CLPIN_WRITE, CLPIN_HEAD_HOST, 0);               /* DEVICE -WRITE-> HOST, no copy */
  DEV(t, CLPIN_WRITE, CLPIN_HEAD_DEVICE, 0);              /* HOST -dWRITE-> DEVICE, no copy */
  HOST(t, CLPIN_READ, CLPIN_HEAD_SYNCED, 1);              /* DEVICE -READ-> SYNCED, copy */
  HOST(t, CLPIN_READ | CLPIN_WRITE, CLPIN_HEAD_HOST, 0);  /* SYNCED -RW-> HOST */
  DEV(t, CLPIN_READ, CLPIN_HEAD_SYNCED, 1);               /* HOST -dREAD-> SYNCED, copy */
  DEV(t, CLPIN_READ | CLPIN_WRITE, CLPIN_HEAD_DEVICE, 0); /* SYNCED -dRW-> DEVICE */
  ck_assert_ptr_eq(mirror_of(t), p);                      /* one mirror for the tensor's life */

  clpin_tensor_release(t);
  ck_assert_uint_eq(stats_now().blocks_in_use, in_use0); /* mirror given back */
  free(src);
  free(dst);
}
END_TEST

START_TEST(mirror_transitions_from_uninitialized) {
  const size_t shape[1] = {MIRROR_BYTES / 8};
  const size_t n = MIRROR_BYTES;
  unsigned char *zeros = calloc(1, n);
  clpin_tensor *a, *b, *c;
  /* UNINITIALIZED -READ-> HOST: a zeroed mirror, nothing transferred. */
  CL_OK(clpin_tensor_create(T.queue, CLPIN_U64, 1, shape, &a));
  ck_assert_int_eq(clpin_tensor_head(a), CLPIN_HEAD_UNINITIALIZED);
  ck_assert_ptr_nonnull(clpin_tensor_buffer(a));
  HOST(a, CLPIN_READ, CLPIN_HEAD_HOST, 0);
  ck_assert_int_eq(memcmp(mirror_of(a), zeros, n), 0);
  DEV(a, CLPIN_READ, CLPIN_HEAD_SYNCED, 1); /* the zeros go up */
  unsigned char *dev = raw_device(clpin_tensor_buffer(a), n);
  ck_assert_int_eq(memcmp(dev, zeros, n), 0);
  free(dev);

  /* to_host of an UNINITIALIZED tensor: zeros, nothing transferred. */
  CL_OK(clpin_tensor_create(T.queue, CLPIN_U64, 1, shape, &c));
  unsigned char *dst = malloc(n);
  memset(dst, 0xFF, n);
  clpin_stats s0 = stats_now();
  cl_event ev = NULL;
  CL_OK(clpin_tensor_to_host(c, T.queue, dst, CLPIN_NON_BLOCKING, &ev));
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);
  ck_assert_int_eq(memcmp(dst, zeros, n), 0);
  ck_assert_uint_eq(stats_now().bytes_unpinned + stats_now().bytes_pinned_direct,
                    s0.bytes_unpinned + s0.bytes_pinned_direct);
  ck_assert_int_eq(clpin_tensor_head(c), CLPIN_HEAD_UNINITIALIZED);
  clpin_tensor_release(c);
  free(dst);

  /* UNINITIALIZED -dREAD-> DEVICE: the device is zero-filled. */
  CL_OK(clpin_tensor_create(T.queue, CLPIN_U64, 1, shape, &b));
  raw_fill_device(clpin_tensor_buffer(b), n, 31); /* garbage the fill must clear */
  DEV(b, CLPIN_READ, CLPIN_HEAD_DEVICE, 0);
  dev = raw_device(clpin_tensor_buffer(b), n);
  ck_assert_int_eq(memcmp(dev, zeros, n), 0);
  free(dev);
  HOST(b, CLPIN_READ, CLPIN_HEAD_SYNCED, 1);
  ck_assert_int_eq(memcmp(mirror_of(b), zeros, n), 0);

  /* WRITE alone from UNINITIALIZED: no copy, no fill, the writer's side wins. */
  CL_OK(clpin_tensor_create(T.queue, CLPIN_U64, 1, shape, &c));
  DEV(c, CLPIN_WRITE, CLPIN_HEAD_DEVICE, 0);
  clpin_tensor_release(c);
  CL_OK(clpin_tensor_create(T.queue, CLPIN_U64, 1, shape, &c));
  HOST(c, CLPIN_WRITE, CLPIN_HEAD_HOST, 0);
  void *p = mirror_of(c);
  test_fill(p, n, 32);
  DEV(c, CLPIN_READ, CLPIN_HEAD_SYNCED, 1);
  dev = raw_device(clpin_tensor_buffer(c), n);
  ck_assert(test_check(dev, n, 32) == (size_t)-1);
  free(dev);

  clpin_tensor_release(a);
  clpin_tensor_release(b);
  clpin_tensor_release(c);
  free(zeros);
}
END_TEST

START_TEST(mirror_after_release_context) {
  /* The mirror is freed with the pool: every later use is refused, never a
   * touch of freed memory (ASan checks that in the sanitizer stage). */
  const size_t shape[1] = {4096};
  unsigned char src[4096], back[4096];
  test_fill(src, sizeof src, 43);
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, src, CLPIN_U8, 1, shape, 0, &t));
  void *p;
  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ | CLPIN_WRITE, &p));
  ck_assert_int_eq(clpin_tensor_head(t), CLPIN_HEAD_HOST);
  CL_OK(clpin_pool_release_context(T.ctx));
  ck_assert_int_eq(clpin_tensor_host_data(t, T.queue, CLPIN_READ, &p), CLPIN_ERR_POOL_RELEASED);
  ck_assert_int_eq(clpin_tensor_to_host(t, T.queue, back, 0, NULL), CLPIN_ERR_POOL_RELEASED);
  cl_mem m;
  ck_assert_int_eq(clpin_tensor_device_data(t, T.queue, CLPIN_READ, &m), CLPIN_ERR_POOL_RELEASED);
  ck_assert_int_eq(clpin_tensor_head(t), CLPIN_HEAD_HOST);
  clpin_tensor_release(t);
}
END_TEST

START_TEST(mirror_errors_change_nothing) {
  const size_t shape[1] = {1024};
  unsigned char src[1024];
  test_fill(src, sizeof src, 41);
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, src, CLPIN_U8, 1, shape, 0, &t));
  void *p = (void *)src;
  cl_mem m = (cl_mem)(uintptr_t)1;
  ck_assert_int_eq(clpin_tensor_host_data(t, T.queue, 0, &p), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_tensor_host_data(t, T.queue, 1u << 2, &p), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_tensor_host_data(t, NULL, CLPIN_READ, &p), CL_INVALID_COMMAND_QUEUE);
  /* The other flag family is refused, never read as access bits. */
  ck_assert_int_eq(clpin_tensor_host_data(t, T.queue, CLPIN_PIN_MEMORY, &p),
                   CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "CLPIN_PIN_MEMORY is a transfer flag"));
  ck_assert_int_eq(clpin_tensor_device_data(t, T.queue, CLPIN_READ | CLPIN_NON_BLOCKING, &m),
                   CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "CLPIN_NON_BLOCKING is a transfer flag"));
  ck_assert_int_eq(clpin_tensor_host_data(t, T.queue, CLPIN_READ, NULL),
                   CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_tensor_host_data(NULL, T.queue, CLPIN_READ, &p),
                   CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_tensor_device_data(t, T.queue, 0, &m), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_tensor_device_data(t, T.queue, 8, &m), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_tensor_device_data(NULL, T.queue, CLPIN_READ, &m),
                   CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_eq(p, src);
  ck_assert_ptr_eq(m, (cl_mem)(uintptr_t)1);

  /* A queue of another context cannot serve the mirror. */
  cl_int err;
  cl_context other = clCreateContext(NULL, 1, &T.device, NULL, NULL, &err);
  CL_OK(err);
  cl_command_queue oq = clCreateCommandQueue(other, T.device, 0, &err);
  CL_OK(err);
  ck_assert_int_eq(clpin_tensor_host_data(t, oq, CLPIN_READ, &p), CL_INVALID_CONTEXT);
  ck_assert_ptr_eq(p, src);
  ck_assert_int_eq(clpin_tensor_head(t), CLPIN_HEAD_DEVICE);
  clReleaseCommandQueue(oq);
  clpin_pool_release_context(other);
  clReleaseContext(other);

  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ, &p));
  ck_assert_int_eq(memcmp(p, src, sizeof src), 0);
  clpin_tensor_release(t);
}
END_TEST

/* A kernel writes the device side; host_data(READ) sees it, copying once. */
static const char *kernel_src = "__kernel void axpb(__global float *x) {\n"
                                "  size_t i = get_global_id(0);\n"
                                "  x[i] = x[i] * 2.0f + 1.0f;\n"
                                "}\n";

START_TEST(kernel_result_through_mirror) {
  enum { N = 4096 };
  float *src = malloc(N * sizeof *src);
  for (int i = 0; i < N; i++)
    src[i] = (float)i * 0.5f - 7.0f;
  const size_t shape[1] = {N};
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, src, CLPIN_F32, 1, shape,
                               CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, &t));
  float *h;
  HOST(t, CLPIN_READ, CLPIN_HEAD_SYNCED, 1);
  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ, (void **)&h));
  ck_assert_ptr_null(clpin_tensor_event(t)); /* the copy waited for the upload */

  cl_int err;
  cl_program prog = clCreateProgramWithSource(T.ctx, 1, &kernel_src, NULL, &err);
  CL_OK(err);
  CL_OK(clBuildProgram(prog, 1, &T.device, "", NULL, NULL));
  cl_kernel k = clCreateKernel(prog, "axpb", &err);
  CL_OK(err);
  cl_mem m;
  DEV(t, CLPIN_READ | CLPIN_WRITE, CLPIN_HEAD_DEVICE, 0);
  CL_OK(clpin_tensor_device_data(t, T.queue, CLPIN_READ | CLPIN_WRITE, &m));
  CL_OK(clSetKernelArg(k, 0, sizeof m, &m));
  size_t global = N;
  CL_OK(clEnqueueNDRangeKernel(T.queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
  /* No clFinish: the mirror's copy is ordered after the kernel on q. */
  HOST(t, CLPIN_READ, CLPIN_HEAD_SYNCED, 1);
  for (int i = 0; i < N; i++)
    ck_assert_msg(h[i] == src[i] * 2.0f + 1.0f, "x[%d] = %g, want %g", i, h[i],
                  src[i] * 2.0f + 1.0f);
  HOST(t, CLPIN_READ, CLPIN_HEAD_SYNCED, 0);
  clReleaseKernel(k);
  clReleaseProgram(prog);
  clpin_tensor_release(t);
  free(src);
}
END_TEST

static Suite *tensor_suite(void) {
  Suite *s = suite_create("tensor");
  TCase *tc = tcase_create("shapes");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120); /* Oclgrind simulates every copy */
  tcase_add_test(tc, dtype_sizes);
  tcase_add_test(tc, roundtrip_every_dtype);
  tcase_add_test(tc, max_dims_and_argument_errors);
  tcase_add_test(tc, overflowing_shapes);
  tcase_add_test(tc, above_device_max_alloc);
  tcase_add_test(tc, scalar_tensor);
  tcase_add_test(tc, empty_tensor);
  tcase_add_test(tc, non_blocking_from_host_with_event);
  suite_add_tcase(s, tc);
  tc = tcase_create("mirror");
  tcase_add_checked_fixture(tc, setup_mirror, teardown_mirror);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, mirror_transitions_from_device);
  tcase_add_test(tc, mirror_transitions_from_uninitialized);
  tcase_add_test(tc, mirror_errors_change_nothing);
  tcase_add_test(tc, mirror_after_release_context);
  tcase_add_test(tc, kernel_result_through_mirror);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return test_run_suite(tensor_suite()); }
