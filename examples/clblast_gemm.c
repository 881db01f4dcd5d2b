/* SPDX-License-Identifier: Apache-2.0 */
/* clblast_gemm: clpin feeding a real OpenCL library it knows nothing about.
 *
 * C = alpha * A * B + beta * C with CLBlast's SGEMM (C API). A comes from
 * ordinary malloc'ed memory and is staged through the pool; B is produced
 * straight into pinned memory from clpin_host_alloc() and goes to the device
 * without a host copy; C is read back into pinned memory the same way. The
 * result is checked against a CPU reference; the program exits non-zero on
 * any mismatch.
 *
 * Usage: clblast_gemm [M N K]   (default 200 150 300: sizes that are not
 * multiples of CLBlast's tile sizes, to exercise its edge handling). */
#include <clpin.h>
#include <clblast_c.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(expr)                                                                                \
  do {                                                                                             \
    cl_int err_ = (expr);                                                                          \
    if (err_ != CL_SUCCESS) {                                                                      \
      fprintf(stderr, "clblast_gemm: %s failed: %s\n", #expr, clpin_strerror(err_));               \
      exit(EXIT_FAILURE);                                                                          \
    }                                                                                              \
  } while (0)

/* Small exact-ish values (multiples of 1/8) keep the float sums well away
 * from rounding trouble, so the tolerance can be tight. */
static float value(size_t i, unsigned seed) {
  return (float)((int)((i * 2654435761u + seed * 97u) % 17u) - 8) / 8.0f;
}

static cl_mem device_buffer(cl_context ctx, size_t n) {
  cl_int err;
  cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CHECK(err);
  return m;
}

int main(int argc, char **argv) {
  size_t m = 200, n = 150, k = 300;
  if (argc == 4) {
    m = strtoul(argv[1], NULL, 10);
    n = strtoul(argv[2], NULL, 10);
    k = strtoul(argv[3], NULL, 10);
  }
  if (argc != 1 && argc != 4) {
    fprintf(stderr, "usage: %s [M N K]\n", argv[0]);
    return EXIT_FAILURE;
  }
  if (m < 1 || n < 1 || k < 1 || m > 8192 || n > 8192 || k > 8192) {
    fprintf(stderr, "clblast_gemm: sizes must be 1 ... 8192\n");
    return EXIT_FAILURE;
  }
  const float alpha = 1.5f, beta = -0.5f;

  cl_platform_id platform;
  cl_device_id device;
  cl_int err;
  CHECK(clGetPlatformIDs(1, &platform, NULL));
  CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
  cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  CHECK(err);
  cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
  CHECK(err);
  clpin_pool *pool;
  CHECK(clpin_pool_get(q, &pool));

  /* Host data, row-major: A (m x k) pageable, B (k x n) and C (m x n) pinned. */
  float *a = malloc(m * k * sizeof *a);
  float *b = clpin_host_alloc(pool, k * n * sizeof *b);
  float *c = clpin_host_alloc(pool, m * n * sizeof *c);
  float *ref = malloc(m * n * sizeof *ref);
  if (!a || !b || !c || !ref) {
    fprintf(stderr, "clblast_gemm: out of memory\n");
    return EXIT_FAILURE;
  }
  for (size_t i = 0; i < m * k; i++)
    a[i] = value(i, 1);
  for (size_t i = 0; i < k * n; i++)
    b[i] = value(i, 2);
  for (size_t i = 0; i < m * n; i++)
    c[i] = value(i, 3);

  cl_mem da = device_buffer(ctx, m * k * sizeof *a);
  cl_mem db = device_buffer(ctx, k * n * sizeof *b);
  cl_mem dc = device_buffer(ctx, m * n * sizeof *c);

  /* Up: three non-blocking writes; clpin picks each one's path. */
  cl_event up[3];
  const unsigned flags = CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING;
  CHECK(clpin_write(q, da, 0, a, m * k * sizeof *a, flags, 0, NULL, &up[0]));
  CHECK(clpin_write(q, db, 0, b, k * n * sizeof *b, flags, 0, NULL, &up[1]));
  CHECK(clpin_write(q, dc, 0, c, m * n * sizeof *c, flags, 0, NULL, &up[2]));
  /* CLBlast takes no wait list: it enqueues on q after the writes, and the
   * writes' events are waited for explicitly in case q is out of order. */
  CHECK(clWaitForEvents(3, up));
  for (int i = 0; i < 3; i++)
    clReleaseEvent(up[i]);

  cl_event gemm = NULL;
  CLBlastStatusCode st =
      CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, m, n, k, alpha,
                   da, 0, k, db, 0, n, beta, dc, 0, n, &q, &gemm);
  if (st != CLBlastSuccess) {
    fprintf(stderr, "clblast_gemm: CLBlastSgemm failed with status %d\n", (int)st);
    return EXIT_FAILURE;
  }

  /* CPU reference while the device works (c still holds the input C). */
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double acc = 0;
      for (size_t p = 0; p < k; p++)
        acc += (double)a[i * k + p] * b[p * n + j];
      ref[i * n + j] = (float)(alpha * acc + beta * c[i * n + j]);
    }

  /* Down, into pinned memory: after the GEMM, no host copy. */
  CHECK(clpin_read(q, dc, 0, c, m * n * sizeof *c, CLPIN_PIN_MEMORY, 1, &gemm, NULL));
  clReleaseEvent(gemm);

  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < m * n; i++) {
    double diff = fabs((double)c[i] - ref[i]);
    double tol = 1e-4 * (1.0 + fabs(ref[i]));
    if (diff > worst)
      worst = diff;
    if (!(diff <= tol) && bad++ < 5)
      fprintf(stderr, "clblast_gemm: C[%zu] = %g, want %g\n", i, c[i], ref[i]);
  }

  clpin_stats s = {.struct_size = sizeof s};
  CHECK(clpin_pool_stats(pool, &s));
  printf("clblast_gemm: %zux%zu * %zux%zu, max |error| %.3g, %zu mismatches\n", m, k, k, n, worst,
         bad);
  printf("clblast_gemm: bytes %llu pinned-direct, %llu staged, %llu pipelined, %llu unpinned\n",
         (unsigned long long)s.bytes_pinned_direct, (unsigned long long)s.bytes_staged,
         (unsigned long long)s.bytes_pipelined, (unsigned long long)s.bytes_unpinned);
  /* B up and C down came from pinned memory: both must have taken the
   * direct path, whatever the device. */
  int ok = bad == 0 && s.bytes_pinned_direct >= (k * n + m * n + m * n) * sizeof(float);
  if (!ok && bad == 0)
    fprintf(stderr, "clblast_gemm: pinned host memory did not take the direct path\n");

  CHECK(clpin_host_free(b));
  CHECK(clpin_host_free(c));
  CHECK(clpin_pool_release_context(ctx));
  clReleaseMemObject(da);
  clReleaseMemObject(db);
  clReleaseMemObject(dc);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  free(a);
  free(ref);
  puts(ok ? "clblast_gemm: ok" : "clblast_gemm: FAILED");
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
