/* OpenCL helpers the benches share (benchcl.h). */
#include "benchcl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bench_cl_fail(const char *prog, const char *file, int line, const char *expr,
                   const char *why) {
  fprintf(stderr, "%s: %s:%d: %s -> %s\n", prog, file, line, expr, why);
  exit(1);
}

const char *bench_cl_code(cl_int code) {
  static _Thread_local char text[16];
  snprintf(text, sizeof text, "%d", (int)code);
  return text;
}

cl_platform_id bench_cl_platform(const char *prog, const char *want,
                                 const char *(*text_of)(cl_int)) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  BENCH_CL_CHECK(prog, clGetPlatformIDs(16, ps, &np), text_of);
  for (cl_uint i = 0; i < np && i < 16; i++) {
    char name[256] = "";
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    if (!want || strstr(name, want))
      return ps[i];
  }
  fprintf(stderr, "%s: no platform matches %s\n", prog, want ? want : "(any)");
  exit(1);
}

void bench_cl_open(const char *prog, const char *want, const char *(*text_of)(cl_int),
                   cl_device_id *dev, cl_context *ctx, cl_command_queue *q) {
  cl_platform_id plat = bench_cl_platform(prog, want, text_of);
  BENCH_CL_CHECK(prog, clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, dev, NULL), text_of);
  cl_int err;
  *ctx = clCreateContext(NULL, 1, dev, NULL, NULL, &err);
  BENCH_CL_CHECK(prog, err, text_of);
  *q = clCreateCommandQueue(*ctx, *dev, 0, &err);
  BENCH_CL_CHECK(prog, err, text_of);
}
