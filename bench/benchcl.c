/* SPDX-License-Identifier: Apache-2.0 */
/* How every bench opens its OpenCL device (benchcl.h). */
#include "benchcl.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bench_cl_report(const char *prog, const char *file, int line, const char *expr,
                     const char *why) {
  fprintf(stderr, "%s: %s:%d: %s -> %s\n", prog, file, line, expr, why);
}

void bench_cl_fail(const char *prog, const char *file, int line, const char *expr,
                   const char *why) {
  bench_cl_report(prog, file, line, expr, why);
  exit(1);
}

const char *bench_cl_code(cl_int code) {
  static _Thread_local char text[16];
  snprintf(text, sizeof text, "%d", (int)code);
  return text;
}

const char *bench_cl_name(cl_device_id dev, char *buf, size_t len) {
  if (len)
    buf[0] = '\0';
  if (clGetDeviceInfo(dev, CL_DEVICE_NAME, len, buf, NULL) != CL_SUCCESS && len)
    buf[0] = '\0';
  return buf;
}

static bool contains(const char *text, const char *want) { return !want || strstr(text, want); }

/* The devices of type on platform p that match want (all of them when the
 * platform's name does); how many, into devs. */
static cl_uint matching(cl_platform_id p, cl_device_type type, const char *want, cl_device_id *devs,
                        cl_uint max) {
  char name[256] = "";
  clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof name, name, NULL);
  cl_device_id all[BENCH_CL_MAX_DEVICES];
  cl_uint nd = 0;
  if (clGetDeviceIDs(p, type, BENCH_CL_MAX_DEVICES, all, &nd) != CL_SUCCESS)
    return 0;
  nd = nd < BENCH_CL_MAX_DEVICES ? nd : BENCH_CL_MAX_DEVICES;
  bool whole = contains(name, want);
  cl_uint n = 0;
  for (cl_uint d = 0; d < nd && n < max; d++) {
    char dname[256];
    if (whole || contains(bench_cl_name(all[d], dname, sizeof dname), want))
      devs[n++] = all[d];
  }
  return n;
}

cl_uint bench_cl_find(const char *want, cl_platform_id *platform, cl_device_id *devs, cl_uint max) {
  cl_platform_id ps[BENCH_CL_MAX_DEVICES];
  cl_uint np = 0;
  if (clGetPlatformIDs(BENCH_CL_MAX_DEVICES, ps, &np) != CL_SUCCESS)
    return 0;
  np = np < BENCH_CL_MAX_DEVICES ? np : BENCH_CL_MAX_DEVICES;
  max = max < BENCH_CL_MAX_DEVICES ? max : BENCH_CL_MAX_DEVICES;
  static const cl_device_type pass[2] = {CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ALL};
  for (int k = 0; k < 2; k++)
    for (cl_uint i = 0; i < np; i++) {
      cl_uint n = matching(ps[i], pass[k], want, devs, max);
      if (n) {
        *platform = ps[i];
        return n;
      }
    }
  return 0;
}

cl_uint bench_cl_devices(const char *prog, const char *want, cl_platform_id *platform,
                         cl_device_id *devs, cl_uint max) {
  cl_uint n = bench_cl_find(want, platform, devs, max);
  if (!n) {
    fprintf(stderr, "%s: no OpenCL device matches %s (--list names them)\n", prog,
            want ? want : "(any)");
    exit(1);
  }
  return n;
}

cl_context bench_cl_context(const char *prog, cl_platform_id platform, cl_uint n,
                            const cl_device_id *devs, const char *(*text_of)(cl_int)) {
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
  cl_int err;
  cl_context ctx = clCreateContext(props, n, devs, NULL, NULL, &err);
  BENCH_CL_CHECK(prog, err, text_of);
  return ctx;
}

cl_command_queue bench_cl_queue(const char *prog, cl_context ctx, cl_device_id dev,
                                const char *(*text_of)(cl_int)) {
  cl_int err;
  cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
  BENCH_CL_CHECK(prog, err, text_of);
  return q;
}

cl_mem bench_cl_buffer(const char *prog, cl_context ctx, size_t n, const char *(*text_of)(cl_int)) {
  cl_int err;
  cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  BENCH_CL_CHECK(prog, err, text_of);
  return m;
}

const char *bench_cl_where(cl_device_id dev, char *buf, size_t len) {
  char plat[256] = "", name[256];
  cl_platform_id p;
  if (clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof p, &p, NULL) == CL_SUCCESS)
    clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof plat, plat, NULL);
  snprintf(buf, len, "platform %s, device %s", plat, bench_cl_name(dev, name, sizeof name));
  return buf;
}

void bench_cl_open(const char *prog, const char *want, const char *(*text_of)(cl_int),
                   cl_device_id *dev, cl_context *ctx, cl_command_queue *q) {
  cl_platform_id plat;
  bench_cl_devices(prog, want, &plat, dev, 1);
  *ctx = bench_cl_context(prog, plat, 1, dev, text_of);
  *q = bench_cl_queue(prog, *ctx, *dev, text_of);
}

void bench_cl_list(void) {
  cl_platform_id ps[BENCH_CL_MAX_DEVICES];
  cl_uint np = 0;
  if (clGetPlatformIDs(BENCH_CL_MAX_DEVICES, ps, &np) != CL_SUCCESS)
    np = 0;
  for (cl_uint i = 0; i < np && i < BENCH_CL_MAX_DEVICES; i++) {
    char name[256] = "";
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    printf("platform %u: %s\n", i, name);
    cl_device_id ds[BENCH_CL_MAX_DEVICES];
    cl_uint nd = 0;
    if (clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_ALL, BENCH_CL_MAX_DEVICES, ds, &nd) != CL_SUCCESS)
      nd = 0;
    for (cl_uint j = 0; j < nd && j < BENCH_CL_MAX_DEVICES; j++)
      printf("  device %u: %s\n", j, bench_cl_name(ds[j], name, sizeof name));
  }
}
