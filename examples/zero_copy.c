/* SPDX-License-Identifier: Apache-2.0 */
/* Zero copy on a host-unified device (an integrated GPU, a CPU device).
 *
 * Three ways a kernel uses host memory in place, each checked:
 *   1. a tensor over the caller's page-aligned array (CLPIN_ZERO_COPY);
 *   2. a tensor clpin allocates, filled and read through host_data (maps);
 *   3. clpin_host_alloc() memory handed to the kernel by clpin_host_buffer(),
 *      around the kernel given to the device and back (clpin_host_lend,
 *      clpin_host_reclaim: an unmap and a map, correct on every such device).
 * The pool's bytes_zero_copy counts the bytes that needed no copy. On a
 * device without host-unified memory the same program runs, copying
 * (1 and 2), and says that clpin_host_buffer does not apply (3).
 *
 * Usage: zero_copy [--platform NAME-SUBSTRING] [--n ELEMENTS]
 */
#include <clpin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(expr)                                                                                \
  do {                                                                                             \
    cl_int err_ = (expr);                                                                          \
    if (err_ != CL_SUCCESS) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, clpin_strerror(err_));         \
      exit(EXIT_FAILURE);                                                                          \
    }                                                                                              \
  } while (0)

static const char *source = "__kernel void axpb(__global float *x, uint off) {\n"
                            "  size_t i = get_global_id(0) + off;\n"
                            "  x[i] = x[i] * 2.0f + 1.0f;\n"
                            "}\n";

static cl_device_id pick_device(const char *want) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  CHECK(clGetPlatformIDs(16, ps, &np));
  for (cl_uint i = 0; i < np && i < 16; i++) {
    char name[256] = "";
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    cl_device_id dev;
    if ((!want || strstr(name, want)) &&
        clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_ALL, 1, &dev, NULL) == CL_SUCCESS)
      return dev;
  }
  fprintf(stderr, "zero_copy: no OpenCL device%s%s\n", want ? " on a platform matching " : "",
          want ? want : "");
  exit(EXIT_FAILURE);
}

static void run(cl_command_queue q, cl_kernel k, cl_mem m, size_t off, size_t n) {
  cl_uint o = (cl_uint)off;
  CHECK(clSetKernelArg(k, 0, sizeof m, &m));
  CHECK(clSetKernelArg(k, 1, sizeof o, &o));
  CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL));
  CHECK(clFinish(q));
}

static int verify(const char *what, const float *x, size_t n, float (*want)(size_t)) {
  for (size_t i = 0; i < n; i++)
    if (x[i] != want(i)) {
      fprintf(stderr, "zero_copy: %s: element %zu is %g, want %g\n", what, i, x[i], want(i));
      return 1;
    }
  return 0;
}
static float start(size_t i) { return (float)(i % 1000) * 0.25f; }
static float once(size_t i) { return start(i) * 2.0f + 1.0f; }

static uint64_t zero_copied(clpin_pool *pool) {
  clpin_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CHECK(clpin_pool_stats(pool, &s));
  return s.bytes_zero_copy;
}

int main(int argc, char **argv) {
  const char *want = NULL;
  size_t n = (size_t)1 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--platform") == 0)
      want = argv[i + 1];
    else if (strcmp(argv[i], "--n") == 0)
      n = strtoul(argv[i + 1], NULL, 10);
  }
  cl_int err;
  cl_device_id dev = pick_device(want);
  cl_bool unified = CL_FALSE;
  CHECK(clGetDeviceInfo(dev, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL));
  printf("device: %s host-unified memory\n", unified ? "with" : "without");
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  CHECK(err);
  cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
  CHECK(err);
  cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
  CHECK(err);
  CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
  cl_kernel k = clCreateKernel(prog, "axpb", &err);
  CHECK(err);
  clpin_pool *pool;
  CHECK(clpin_pool_get(q, &pool));
  int bad = 0;
  const size_t bytes = n * sizeof(float), shape[1] = {n};

  /* 1. The caller's page-aligned array, used in place. */
  size_t cap = (bytes + 4095) / 4096 * 4096;
  float *a = aligned_alloc(4096, cap);
  for (size_t i = 0; i < n; i++)
    a[i] = start(i);
  uint64_t z0 = zero_copied(pool);
  clpin_tensor *t;
  CHECK(clpin_tensor_from_host(q, a, CLPIN_F32, 1, shape, CLPIN_ZERO_COPY, &t));
  cl_mem m;
  CHECK(clpin_tensor_device_data(t, q, CLPIN_READ | CLPIN_WRITE, &m));
  run(q, k, m, 0, n);
  float *h;
  CHECK(clpin_tensor_host_data(t, q, CLPIN_READ, (void **)&h));
  bad |= verify("CLPIN_ZERO_COPY tensor", h, n, once);
  clpin_tensor_release(t);
  printf("1. CLPIN_ZERO_COPY tensor over the caller's array: %llu bytes used in place\n",
         (unsigned long long)(zero_copied(pool) - z0));
  free(a);

  /* 2. A tensor clpin allocates: the host fills it through host_data. */
  z0 = zero_copied(pool);
  CHECK(clpin_tensor_create(q, CLPIN_F32, 1, shape, &t));
  CHECK(clpin_tensor_host_data(t, q, CLPIN_WRITE, (void **)&h));
  for (size_t i = 0; i < n; i++)
    h[i] = start(i);
  CHECK(clpin_tensor_device_data(t, q, CLPIN_READ | CLPIN_WRITE, &m));
  run(q, k, m, 0, n);
  CHECK(clpin_tensor_host_data(t, q, CLPIN_READ, (void **)&h));
  bad |= verify("tensor_create", h, n, once);
  clpin_tensor_release(t);
  printf("2. tensor_create + host_data: %llu bytes needed no copy\n",
         (unsigned long long)(zero_copied(pool) - z0));

  /* 3. clpin_host_alloc memory given to the kernel in place: the host
   * writes it while it holds it mapped, hands it to the device (unmap), the
   * kernel runs, the host takes it back (map) and reads the result. */
  float *p = clpin_host_alloc(pool, bytes);
  if (!p) {
    fprintf(stderr, "zero_copy: clpin_host_alloc failed\n");
    return EXIT_FAILURE;
  }
  for (size_t i = 0; i < n; i++)
    p[i] = start(i);
  size_t off;
  err = clpin_host_buffer(pool, p, bytes, &m, &off);
  if (err == CL_SUCCESS) {
    CHECK(clpin_host_lend(q, p, bytes, 0, NULL, NULL));
    run(q, k, m, off / sizeof(float), n);
    CHECK(clpin_host_reclaim(q, p, bytes, 0, 0, NULL, NULL));
    bad |= verify("clpin_host_buffer", p, n, once);
    clReleaseMemObject(m);
    printf("3. clpin_host_alloc memory through clpin_host_buffer: in place\n");
  } else if (err == CLPIN_ERR_NOT_UNIFIED) {
    printf("3. clpin_host_buffer: not for this device (not host-unified); use "
           "clpin_write/clpin_read\n");
  } else {
    CHECK(err);
  }
  CHECK(clpin_host_free(p));

  clReleaseKernel(k);
  clReleaseProgram(prog);
  clReleaseCommandQueue(q);
  clpin_pool_release_context(ctx);
  clReleaseContext(ctx);
  printf("zero_copy: %s\n", bad ? "FAILED" : "ok");
  return bad ? EXIT_FAILURE : EXIT_SUCCESS;
}
