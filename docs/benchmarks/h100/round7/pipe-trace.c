/* pipe-trace: 64 MiB staged reads, then writes (a buffer rect with host
 * pitch row + 64, an RGBA8 image, a plain buffer) through clpin on a profiling queue, with
 * the library built from trace.patch: the patched read pipeline prints, per
 * transfer, where its time goes (waits for the DMA, for the copy-out, the
 * enqueues) and how busy the DMA engine was (profiling START/END of its
 * calls). Round 7's experiment; run by run.sh beside it.
 *
 *   pipe-trace [RUNS [MIB]]   (CLPIN_* settings from the environment; MIB, default 64,
 *                              a multiple of 64: the image grows to match) */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clpin.h"

#define CHECK(x)                                                                                   \
  do {                                                                                             \
    cl_int e_ = (x);                                                                               \
    if (e_ != CL_SUCCESS) {                                                                        \
      fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_);                            \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 5;
  size_t mib = argc > 2 ? strtoul(argv[2], NULL, 0) : 64;
  if (runs < 1 || mib < 64 || mib % 64) {
    fprintf(stderr, "usage: pipe-trace [RUNS [MIB]] (MIB a multiple of 64)\n");
    return 2;
  }
  cl_platform_id plats[8];
  cl_uint np = 0;
  CHECK(clGetPlatformIDs(8, plats, &np));
  cl_platform_id plat = plats[0];
  for (cl_uint i = 0; i < np; i++) {
    char name[128] = "";
    clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    if (strstr(name, "NVIDIA"))
      plat = plats[i];
  }
  cl_device_id dev;
  CHECK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
  cl_int err;
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  CHECK(err);
  cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
  cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, props, &err);
  CHECK(err);
  size_t rows = 4096 * (mib / 64), row = 16384, hp = row + 64, n = rows * row;
  cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CHECK(err);
  cl_image_format f = {CL_RGBA, CL_UNSIGNED_INT8};
  cl_image_desc d = {
      .image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = 4096, .image_height = rows};
  cl_mem img = clCreateImage(ctx, CL_MEM_READ_WRITE, &f, &d, NULL, &err);
  CHECK(err);
  unsigned char *host = malloc(rows * hp);
  memset(host, 1, rows * hp);
  size_t z[3] = {0, 0, 0}, region[3] = {row, rows, 1}, ir[3] = {4096, rows, 1};
  static const char *kinds[6] = {"read-rect",  "read-image",  "read-buffer",
                                 "write-rect", "write-image", "write-buffer"};
  for (int r = -1; r < runs; r++) {
    for (int k = 0; k < 6; k++) {
      double t0 = now();
      if (k == 0)
        CHECK(clpin_read_rect(q, buf, z, z, region, 0, 0, hp, 0, host, CLPIN_PIN_MEMORY, 0, NULL,
                              NULL));
      else if (k == 1)
        CHECK(clpin_read_image(q, img, z, ir, hp, 0, host, CLPIN_PIN_MEMORY, 0, NULL, NULL));
      else if (k == 2)
        CHECK(clpin_read(q, buf, 0, host, n, CLPIN_PIN_MEMORY, 0, NULL, NULL));
      else if (k == 3)
        CHECK(clpin_write_rect(q, buf, z, z, region, 0, 0, hp, 0, host, CLPIN_PIN_MEMORY, 0, NULL,
                               NULL));
      else if (k == 4)
        CHECK(clpin_write_image(q, img, z, ir, hp, 0, host, CLPIN_PIN_MEMORY, 0, NULL, NULL));
      else
        CHECK(clpin_write(q, buf, 0, host, n, CLPIN_PIN_MEMORY, 0, NULL, NULL));
      double t = now() - t0;
      if (r >= 0)
        fprintf(stderr, "run %d %zu MiB %s: %.2f GB/s\n", r, mib, kinds[k], (double)n / t / 1e9);
    }
  }
  clpin_pool_release_context(ctx);
  clReleaseMemObject(buf);
  clReleaseMemObject(img);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  free(host);
  return 0;
}
