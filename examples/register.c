/* SPDX-License-Identifier: Apache-2.0 */
/* register: pin a training loop's input array once, stream it every step.
 *
 * A training loop refills the same host array with each batch and sends it
 * to the device. Three ways to send it, timed over the same loop:
 *
 *   plain       clpin_write(..., 0, ...): the driver copies from pageable memory
 *   staged      clpin_write(..., CLPIN_PIN_MEMORY, ...): through clpin's pool
 *   registered  clpin_host_register() once, then clpin_write(): straight to DMA
 *
 * On a discrete GPU the registered loop runs at pinned speed with no host
 * copy; on a host-unified device (POCL's CPU device) all three are plain
 * copies and registering buys nothing. Every batch is checked on the device,
 * and the pool's counters must show that the registered loop went direct.
 *
 *   register [MiB per batch, default 64] [steps, default 10]
 *
 * Exits non-zero on a wrong byte or a path other than the one expected. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <clpin.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(expr)                                                                                \
  do {                                                                                             \
    cl_int err_ = (expr);                                                                          \
    if (err_ != CL_SUCCESS) {                                                                      \
      fprintf(stderr, "register: %s failed: %s\n", #expr, clpin_strerror(err_));                   \
      exit(EXIT_FAILURE);                                                                          \
    }                                                                                              \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "Load" batch `step` into the array: cheap, but different every step. */
static void load_batch(uint32_t *x, size_t n, unsigned step) {
  for (size_t i = 0; i < n; i++)
    x[i] = (uint32_t)(i * 2654435761u) ^ step;
}

/* Read a few words of the device buffer back and compare them. */
static int batch_arrived(cl_command_queue q, cl_mem dev, size_t n, unsigned step) {
  const size_t probes[] = {0, 1, n / 3, n / 2 + 7, n - 1};
  for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
    uint32_t got, want = (uint32_t)(probes[k] * 2654435761u) ^ step;
    CHECK(clEnqueueReadBuffer(q, dev, CL_TRUE, probes[k] * 4, 4, &got, 0, NULL, NULL));
    if (got != want) {
      fprintf(stderr, "register: step %u: word %zu is %08x, want %08x\n", step, probes[k], got,
              want);
      return 0;
    }
  }
  return 1;
}

typedef enum { PLAIN, STAGED, REGISTERED } mode;
static const char *const mode_name[] = {"plain", "staged", "registered"};

/* The loop: load, send, (train). Only the sends are timed. */
static double run(mode m, cl_command_queue q, cl_mem dev, uint32_t *x, size_t n, unsigned steps) {
  double busy = 0;
  unsigned flags = m == STAGED ? CLPIN_PIN_MEMORY : 0;
  for (unsigned step = 0; step < steps; step++) {
    load_batch(x, n, step + 100 * (unsigned)m);
    double t0 = now_s();
    CHECK(clpin_write(q, dev, 0, x, n * 4, flags, 0, NULL, NULL));
    busy += now_s() - t0;
    if (!batch_arrived(q, dev, n, step + 100 * (unsigned)m))
      exit(EXIT_FAILURE);
  }
  return (double)n * 4 * steps / busy / 1e9;
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
  unsigned steps = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 10;
  if (mib == 0 || steps == 0) {
    fprintf(stderr, "usage: register [MiB per batch] [steps]\n");
    return EXIT_FAILURE;
  }
  size_t bytes = mib << 20, n = bytes / 4;

  cl_platform_id platform;
  cl_device_id device;
  cl_int err;
  CHECK(clGetPlatformIDs(1, &platform, NULL));
  CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
  cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  CHECK(err);
  cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
  CHECK(err);
  cl_mem dev = clCreateBuffer(ctx, CL_MEM_READ_ONLY, bytes, NULL, &err);
  CHECK(err);
  clpin_pool *pool;
  CHECK(clpin_pool_get(q, &pool));

  /* The loop's input array: ordinary memory the program already has. */
  uint32_t *x = malloc(bytes);
  if (!x) {
    fprintf(stderr, "register: no memory for %zu MiB\n", mib);
    return EXIT_FAILURE;
  }

  /* One untimed send first: the device buffer's first use costs extra on
   * some drivers, and no loop should pay it. */
  memset(x, 0, bytes);
  CHECK(clpin_write(q, dev, 0, x, bytes, 0, 0, NULL, NULL));

  double plain = run(PLAIN, q, dev, x, n, steps);
  double staged = run(STAGED, q, dev, x, n, steps);

  /* Register once, before the loop; every step's send then goes direct. */
  clpin_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
  double t0 = now_s();
  CHECK(clpin_host_register(pool, x, bytes));
  double reg_ms = (now_s() - t0) * 1e3;
  CHECK(clpin_pool_stats(pool, &before));
  double registered = run(REGISTERED, q, dev, x, n, steps);
  CHECK(clpin_pool_stats(pool, &after));
  CHECK(clpin_host_unregister(x));

  printf("%zu MiB per batch, %u steps\n", mib, steps);
  printf("  %-10s %7.2f GB/s\n", mode_name[PLAIN], plain);
  printf("  %-10s %7.2f GB/s\n", mode_name[STAGED], staged);
  printf("  %-10s %7.2f GB/s  (registering took %.2f ms, %zu B pinned)\n", mode_name[REGISTERED],
         registered, reg_ms, before.bytes_registered);

  int ok = 1;
  uint64_t direct = after.bytes_pinned_direct - before.bytes_pinned_direct;
  if (direct != (uint64_t)bytes * steps) {
    fprintf(stderr, "register: the registered loop moved %llu B direct, want %llu\n",
            (unsigned long long)direct, (unsigned long long)bytes * steps);
    ok = 0;
  }
  if (before.bytes_registered < bytes) {
    fprintf(stderr, "register: bytes_registered %zu < %zu\n", before.bytes_registered, bytes);
    ok = 0;
  }

  free(x);
  clReleaseMemObject(dev);
  clpin_pool_release_context(ctx);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
