/* SPDX-License-Identifier: Apache-2.0 */
/* A program that knows clpin only as an installed package: built by
 * tests/package/cmake (find_package) and tests/package/pkgconfig (clpin.pc)
 * against the tree `cmake --install` wrote, by ci/stages/50-package.sh.
 *
 * It checks that the three version sources agree (the build system's package
 * version, passed in as EXPECTED_VERSION; the header macros; the library
 * actually loaded), then makes one real round trip through a pool so every
 * kind of symbol (pool, block, stats, errors) must resolve from the package.
 *
 * The OpenCL target version is the consumer's: the builds pass
 * -DCL_TARGET_OPENCL_VERSION=120 or 300 (with -Werror, so a second,
 * different definition from the package would fail them), and the 3.0 build
 * creates its queue with clCreateCommandQueueWithProperties, which a 1.2
 * target forced on it would leave undeclared. */
#include <clpin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef EXPECTED_VERSION
#error "build with -DEXPECTED_VERSION=\"x.y.z\" from the package's own version"
#endif

#ifndef EXPECTED_CL_TARGET
#error "build with -DEXPECTED_CL_TARGET=<the CL_TARGET_OPENCL_VERSION it chose>"
#endif
#if CL_TARGET_OPENCL_VERSION != EXPECTED_CL_TARGET
#error "the package changed the consumer's CL_TARGET_OPENCL_VERSION"
#endif

#define STR2(x) #x
#define STR(x) STR2(x)
#define HEADER_VERSION                                                                             \
  STR(CLPIN_VERSION_MAJOR) "." STR(CLPIN_VERSION_MINOR) "." STR(CLPIN_VERSION_PATCH)

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "consumer: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);           \
      return EXIT_FAILURE;                                                                         \
    }                                                                                              \
  } while (0)

#define CHECK_CL(expr)                                                                             \
  do {                                                                                             \
    cl_int err_ = (expr);                                                                          \
    if (err_ != CL_SUCCESS) {                                                                      \
      fprintf(stderr, "consumer: %s -> %s\n", #expr, clpin_strerror(err_));                        \
      return EXIT_FAILURE;                                                                         \
    }                                                                                              \
  } while (0)

static int check_version(void) {
  CHECK(strcmp(EXPECTED_VERSION, HEADER_VERSION) == 0);
  CHECK(strcmp(clpin_version_string(), HEADER_VERSION) == 0);
  CHECK(clpin_version() == CLPIN_VERSION_NUMBER);
  return EXIT_SUCCESS;
}

static int round_trip(void) {
  cl_platform_id platform;
  cl_device_id device;
  cl_int err;
  CHECK_CL(clGetPlatformIDs(1, &platform, NULL));
  CHECK_CL(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
  cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  CHECK_CL(err);

#if CL_TARGET_OPENCL_VERSION >= 200
  cl_command_queue q = clCreateCommandQueueWithProperties(ctx, device, NULL, &err);
#else
  cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
#endif
  CHECK_CL(err);
  cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096, NULL, &err);
  CHECK_CL(err);
  unsigned char in[4096], out[4096] = {0};
  memset(in, 0x3c, sizeof in);
  CHECK_CL(clpin_write(q, buf, 0, in, sizeof in, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  CHECK_CL(clpin_read(q, buf, 0, out, sizeof out, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  CHECK(memcmp(in, out, sizeof in) == 0);
  clReleaseMemObject(buf);

  clpin_pool *pool;
  clpin_block *block;
  CHECK_CL(clpin_pool_get_for_context(ctx, &pool));
  CHECK_CL(clpin_acquire(pool, 1000, &block));
  CHECK(clpin_block_size(block) >= 1000);
  memset(clpin_block_host(block), 0x5a, 1000);
  CHECK_CL(clpin_release(block, NULL));
  CHECK_CL(clpin_acquire(pool, 1000, &block)); /* served from the cache */
  CHECK_CL(clpin_release(block, NULL));

  clpin_stats st = {.struct_size = sizeof st};
  CHECK_CL(clpin_pool_stats(pool, &st));
  CHECK(st.misses >= 1 && st.hits >= 1);
  CHECK(clpin_release(NULL, NULL) == CL_SUCCESS);
  CHECK(strstr(clpin_strerror(CLPIN_ERR_DOUBLE_RELEASE), "CLPIN_ERR_DOUBLE_RELEASE") != NULL);

  CHECK_CL(clpin_pool_release_context(ctx));
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  clpin_shutdown();
  return EXIT_SUCCESS;
}

int main(int argc, char **argv) {
  (void)argc;
  if (check_version() != EXIT_SUCCESS || round_trip() != EXIT_SUCCESS)
    return EXIT_FAILURE;
  printf("%s: clpin %s from the installed package works (CL_TARGET_OPENCL_VERSION %d)\n", argv[0],
         clpin_version_string(), CL_TARGET_OPENCL_VERSION);
  return EXIT_SUCCESS;
}
