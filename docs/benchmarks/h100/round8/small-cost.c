/* small-cost [evict_bytes] [calls]: a 16-byte blocking rect write, the
 * driver's call against clpin_write_rect (CLPIN_PIN_MEMORY, malloc memory),
 * alternating, each timed alone; run under null-driver.c's layer, the
 * difference is clpin's own part of a small write. evict_bytes > 0 writes
 * that much memory before each call, as a driver's call that evicts the
 * caches would (0: everything warm). Prints three rounds of the means. */
#define CL_TARGET_OPENCL_VERSION 300
#include "clpin.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static unsigned char *evict_mem;
static size_t evict_bytes;

static void evict(void) {
  for (size_t i = 0; i < evict_bytes; i += 64)
    evict_mem[i]++;
}

int main(int argc, char **argv) {
  evict_bytes = argc > 1 ? strtoul(argv[1], NULL, 0) : 0;
  int calls = argc > 2 ? atoi(argv[2]) : 20000;
  evict_mem = malloc(evict_bytes + 64);
  cl_platform_id plat;
  cl_device_id dev;
  cl_int err;
  if (!evict_mem || calls < 1 || clGetPlatformIDs(1, &plat, NULL) ||
      clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL))
    return 1;
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
  cl_mem buf = clCreateBuffer(ctx, 0, 4096, NULL, &err);
  unsigned char *a = calloc(1, 4096), *b = calloc(1, 4096);
  size_t z[3] = {0, 0, 0}, region[3] = {16, 1, 1};
  for (int round = 0; round < 3; round++) {
    double tp = 0, tc = 0;
    for (int i = 0; i < calls; i++) {
      evict();
      double t0 = now();
      err = clEnqueueWriteBufferRect(q, buf, CL_TRUE, z, z, region, 0, 0, 0, 0, a, 0, NULL, NULL);
      tp += now() - t0;
      evict();
      t0 = now();
      err |= clpin_write_rect(q, buf, z, z, region, 0, 0, 0, 0, b, CLPIN_PIN_MEMORY, 0, NULL, NULL);
      tc += now() - t0;
      if (err != CL_SUCCESS) {
        fprintf(stderr, "small-cost: %s\n", clpin_strerror(err));
        return 1;
      }
    }
    printf("evict %zu bytes: driver's call %.1f ns, clpin %.1f ns, clpin's own %.1f ns\n",
           evict_bytes, tp / calls * 1e9, tc / calls * 1e9, (tc - tp) / calls * 1e9);
  }
  clpin_pool_release_context(ctx);
  clReleaseMemObject(buf);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return 0;
}
