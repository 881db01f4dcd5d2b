/* SPDX-License-Identifier: Apache-2.0 */
/* Under the fault layer's hold mode (FAULTLAYER_HOLD=1, tests/faultlayer/):
 * the layer really holds a command until its queue is flushed (the suites
 * run through it in tests/faults.cmake prove nothing otherwise), and no
 * path of clpin enqueues a marker with an empty wait list, which on NVIDIA
 * waits for every queue of the context (docs/RELIABILITY.md). */
#include "faultlayer.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static test_cl cl;

static void setup(void) {
  /* ocl-icd loads the layer at the first OpenCL call. */
  ck_assert_msg(faultlayer_active() || (clGetPlatformIDs(0, NULL, NULL), faultlayer_active()),
                "the fault layer is not loaded (OPENCL_LAYERS)");
  ck_assert_msg(faultlayer_holding(), "the fault layer does not hold commands (FAULTLAYER_HOLD)");
  test_cl_open(&cl);
  test_stage_everything((size_t)64 << 10);
}

static void teardown(void) { test_shutdown_close(&cl); }

/* A command nobody flushed stays unfinished; a flush lets it go. */
START_TEST(held_until_flush) {
  size_t n = 4096;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *src = malloc(n);
  test_fill(src, n, 3);
  unsigned long held0 = faultlayer_held();
  cl_event ev = NULL;
  CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_FALSE, 0, n, src, 0, NULL, &ev));
  ck_assert_uint_gt(faultlayer_held(), held0);
  double t0 = test_now();
  while (test_now() - t0 < 0.2) {
    ck_assert_int_gt(faultlayer_raw_event_status(ev), CL_COMPLETE);
    test_sleep_us(5000);
  }
  CL_OK(clFlush(cl.queue));
  t0 = test_now();
  while (faultlayer_raw_event_status(ev) > CL_COMPLETE && test_now() - t0 < 10)
    test_sleep_us(1000);
  ck_assert_int_eq(faultlayer_raw_event_status(ev), CL_COMPLETE);
  clReleaseEvent(ev);
  clReleaseMemObject(m);
  free(src);
}
END_TEST

/* Every transfer path that orders itself after the caller's queue, with no
 * wait list, on an in-order queue: not one empty-list marker. */
START_TEST(no_empty_list_marker) {
  size_t n = (size_t)1 << 20;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *src = malloc(n), *dst = malloc(n);
  test_fill(src, n, 5);
  unsigned long before = faultlayer_empty_markers();
  cl_event ev = NULL;
  /* the engine (W, M), then a blocking staged write (its turn) */
  CL_OK(clpin_write(cl.queue, m, 0, src, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &ev));
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);
  CL_OK(clpin_write(cl.queue, m, 0, src, n, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  memset(dst, 0, n);
  CL_OK(clpin_read(cl.queue, m, 0, dst, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &ev));
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);
  ck_assert_uint_eq(test_check(dst, n, 5), (size_t)-1);
  /* a tensor's non-blocking upload goes through the engine too */
  const size_t shape[1] = {n / 4};
  clpin_tensor *t = NULL;
  CL_OK(clpin_tensor_from_host(cl.queue, src, CLPIN_I32, 1, shape,
                               CLPIN_NON_BLOCKING | CLPIN_PIN_MEMORY, &t));
  CL_OK(clFinish(cl.queue));
  clpin_tensor_release(t);
  ck_assert_msg(faultlayer_empty_markers() == before,
                "%lu markers with an empty wait list were enqueued (a barrier serves there)",
                faultlayer_empty_markers() - before);
  clReleaseMemObject(m);
  free(src);
  free(dst);
}
END_TEST

/* On an out-of-order queue, a non-blocking transfer with no wait list puts
 * no barrier on it (that would hold back the caller's later commands) and
 * no empty-list marker, and moves the data. */
START_TEST(out_of_order_queue_stays_free) {
  cl_int err;
  cl_command_queue oq =
      clCreateCommandQueue(cl.ctx, cl.device, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
  if (err == CL_INVALID_QUEUE_PROPERTIES || err == CL_INVALID_VALUE) {
    /* A reason printed, as the suite's rule asks. */
    fprintf(stderr, "check_lazy: out_of_order_queue_stays_free: no out-of-order queues here\n");
    return;
  }
  CL_OK(err);
  size_t n = (size_t)1 << 20;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *src = malloc(n), *dst = malloc(n);
  test_fill(src, n, 9);
  int barrier = faultlayer_entry_index("clEnqueueBarrierWithWaitList");
  unsigned long barriers = faultlayer_calls(barrier), empty = faultlayer_empty_markers();
  cl_event w = NULL, r = NULL;
  CL_OK(clpin_write(oq, m, 0, src, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &w));
  CL_OK(clWaitForEvents(1, &w));
  memset(dst, 0, n);
  CL_OK(clpin_read(oq, m, 0, dst, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &r));
  CL_OK(clWaitForEvents(1, &r));
  ck_assert_uint_eq(test_check(dst, n, 9), (size_t)-1);
  ck_assert_uint_eq(faultlayer_calls(barrier), barriers);
  ck_assert_uint_eq(faultlayer_empty_markers(), empty);
  clReleaseEvent(w);
  clReleaseEvent(r);
  clReleaseMemObject(m);
  clReleaseCommandQueue(oq);
  free(src);
  free(dst);
}
END_TEST

int main(void) {
  Suite *s = suite_create("lazy");
  TCase *tc = test_tcase(s, "hold", setup, teardown, 60);
  tcase_add_test(tc, held_until_flush);
  tcase_add_test(tc, no_empty_list_marker);
  tcase_add_test(tc, out_of_order_queue_stays_free);
  return test_run_suite(s);
}
