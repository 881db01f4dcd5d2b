/* A program that knows clpin only as an installed package: built by
 * tests/package/cmake (find_package) and tests/package/pkgconfig (clpin.pc)
 * against the tree `cmake --install` wrote, by ci/stages/50-package.sh.
 *
 * It checks that the three version sources agree (the build system's package
 * version, passed in as EXPECTED_VERSION; the header macros; the library
 * actually loaded), then makes one real round trip through a pool so every
 * kind of symbol (pool, block, stats, errors) must resolve from the package. */
#include <clpin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef EXPECTED_VERSION
#error "build with -DEXPECTED_VERSION=\"x.y.z\" from the package's own version"
#endif

#define STR2(x) #x
#define STR(x) STR2(x)
#define HEADER_VERSION                                                         \
  STR(CLPIN_VERSION_MAJOR) "." STR(CLPIN_VERSION_MINOR) "." STR(CLPIN_VERSION_PATCH)

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "consumer: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return EXIT_FAILURE;                                                     \
    }                                                                          \
  } while (0)

#define CHECK_CL(expr)                                                         \
  do {                                                                         \
    cl_int err_ = (expr);                                                      \
    if (err_ != CL_SUCCESS) {                                                  \
      fprintf(stderr, "consumer: %s -> %s\n", #expr, clpin_strerror(err_));    \
      return EXIT_FAILURE;                                                     \
    }                                                                          \
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
  CHECK(st.misses == 1 && st.hits == 1);
  CHECK(clpin_release(NULL, NULL) == CL_SUCCESS);
  CHECK(strstr(clpin_strerror(CLPIN_ERR_DOUBLE_RELEASE), "CLPIN_ERR_DOUBLE_RELEASE") != NULL);

  CHECK_CL(clpin_pool_release_context(ctx));
  clReleaseContext(ctx);
  clpin_shutdown();
  return EXIT_SUCCESS;
}

int main(int argc, char **argv) {
  (void)argc;
  if (check_version() != EXIT_SUCCESS || round_trip() != EXIT_SUCCESS)
    return EXIT_FAILURE;
  printf("%s: clpin %s from the installed package works\n", argv[0], clpin_version_string());
  return EXIT_SUCCESS;
}
