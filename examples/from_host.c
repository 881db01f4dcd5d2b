/* SPDX-License-Identifier: Apache-2.0 */
/* A tensor up, a kernel, a tensor back.
 *
 * Uploads a float matrix with clpin_tensor_from_host (pinned staging,
 * non-blocking), runs a kernel that writes an output tensor, and brings the
 * result back twice: with clpin_tensor_to_host into the caller's memory, and
 * through the output tensor's pinned host mirror. Both are checked.
 *
 * Usage: from_host [--platform NAME-SUBSTRING] [--rows N] [--cols N]
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

static const char *source =
    "__kernel void square_plus_one(__global const float *x, __global float *y) {\n"
    "  size_t i = get_global_id(0);\n"
    "  y[i] = x[i] * x[i] + 1.0f;\n"
    "}\n";

static cl_device_id pick_device(const char *want, cl_platform_id *platform) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  CHECK(clGetPlatformIDs(16, ps, &np));
  for (cl_uint i = 0; i < np && i < 16; i++) {
    char name[256] = "";
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    cl_device_id dev;
    if ((!want || strstr(name, want)) &&
        clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_ALL, 1, &dev, NULL) == CL_SUCCESS) {
      *platform = ps[i];
      printf("platform: %s\n", name);
      return dev;
    }
  }
  fprintf(stderr, "no OpenCL device%s%s\n", want ? " on a platform matching " : "",
          want ? want : "");
  exit(EXIT_FAILURE);
}

int main(int argc, char **argv) {
  const char *want = NULL;
  size_t rows = 512, cols = 384;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--platform") && i + 1 < argc)
      want = argv[++i];
    else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
      rows = strtoul(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--cols") && i + 1 < argc)
      cols = strtoul(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: %s [--platform NAME] [--rows N] [--cols N]\n", argv[0]);
      return EXIT_FAILURE;
    }
  }
  if (rows == 0 || cols == 0) {
    fprintf(stderr, "rows and cols must be positive\n");
    return EXIT_FAILURE;
  }

  cl_platform_id platform;
  cl_device_id dev = pick_device(want, &platform);
  cl_int err;
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  CHECK(err);
  cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
  CHECK(err);
  cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
  CHECK(err);
  CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
  cl_kernel kernel = clCreateKernel(prog, "square_plus_one", &err);
  CHECK(err);

  size_t n = rows * cols;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  if (!x || !y) {
    fprintf(stderr, "out of memory\n");
    return EXIT_FAILURE;
  }
  /* Quarters below 125: x*x + 1 is exact in float, fused or not, so the
   * device's result must equal the host's bit for bit. */
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(i % 1000) * 0.25f - 125.0f;

  /* Up: staged through pinned memory, returning once enqueued. x must stay
   * unchanged until the upload's event completes; the kernel below is on the
   * same in-order queue, so it runs after the upload anyway. */
  const size_t shape[2] = {rows, cols};
  clpin_tensor *tx, *ty;
  CHECK(clpin_tensor_from_host(q, x, CLPIN_F32, 2, shape, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING,
                               &tx));
  /* The output: no data yet (head UNINITIALIZED) until the kernel writes it. */
  CHECK(clpin_tensor_create(q, CLPIN_F32, 2, shape, &ty));

  cl_mem mx, my;
  CHECK(clpin_tensor_device_data(tx, q, CLPIN_READ, &mx));
  CHECK(clpin_tensor_device_data(ty, q, CLPIN_WRITE, &my)); /* device side is now newest */
  CHECK(clSetKernelArg(kernel, 0, sizeof mx, &mx));
  CHECK(clSetKernelArg(kernel, 1, sizeof my, &my));
  CHECK(clEnqueueNDRangeKernel(q, kernel, 1, NULL, &n, NULL, 0, NULL, NULL));

  /* Back, into our memory. */
  CHECK(clpin_tensor_to_host(ty, q, y, CLPIN_PIN_MEMORY, NULL));
  /* Back, through the mirror: the first READ copies, the second does not. */
  float *mirror;
  CHECK(clpin_tensor_host_data(ty, q, CLPIN_READ, (void **)&mirror));
  CHECK(clpin_tensor_host_data(ty, q, CLPIN_READ, (void **)&mirror));

  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want_y = x[i] * x[i] + 1.0f;
    if (y[i] != want_y || mirror[i] != want_y) {
      if (bad++ < 5)
        fprintf(stderr, "y[%zu] = %g (mirror %g), want %g\n", i, y[i], mirror[i], want_y);
    }
  }
  printf("from_host: %zu x %zu floats up, kernel, back: %s\n", rows, cols, bad ? "MISMATCH" : "ok");

  clpin_tensor_release(tx);
  clpin_tensor_release(ty);
  clReleaseKernel(kernel);
  clReleaseProgram(prog);
  clpin_pool_release_context(ctx);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  clpin_shutdown();
  free(x);
  free(y);
  return bad ? EXIT_FAILURE : EXIT_SUCCESS;
}
