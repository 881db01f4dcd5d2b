/* SPDX-License-Identifier: Apache-2.0 */
/* A program that forgets clpin_pool_release_context: with CLPIN_DEBUG=1,
 * clpin names the pool at exit (tests/registry.cmake checks the line). */
#include "clpin.h"

#include <stdio.h>

int main(void) {
  cl_platform_id platform;
  cl_device_id device;
  cl_int err;
  if (clGetPlatformIDs(1, &platform, NULL) != CL_SUCCESS ||
      clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL) != CL_SUCCESS)
    return 1;
  cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  if (err != CL_SUCCESS)
    return 1;
  clpin_pool *pool;
  clpin_block *block;
  if (clpin_pool_get_for_context(ctx, &pool) != CL_SUCCESS ||
      clpin_acquire(pool, 1 << 20, &block) != CL_SUCCESS)
    return 1;
  printf("exiting with the pool unreleased\n");
  return 0; /* no clpin_pool_release_context, no clReleaseContext */
}
