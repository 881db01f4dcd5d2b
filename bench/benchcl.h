/* OpenCL helpers the benches share: a failing call ends the program with a
 * message naming it, and the platform is picked by name. Plain OpenCL, no
 * clpin: layer-image, which must never call clpin, uses them too. */
#ifndef CLPIN_BENCHCL_H
#define CLPIN_BENCHCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

/* Print "PROG: FILE:LINE: EXPR -> WHY" on stderr and exit 1. */
_Noreturn void bench_cl_fail(const char *prog, const char *file, int line, const char *expr,
                             const char *why);
/* A status as its decimal number ("-5"), for programs without clpin's
 * clpin_strerror; a buffer of the calling thread. */
const char *bench_cl_code(cl_int code);

/* Check a call that returns a cl_int status: anything but CL_SUCCESS ends
 * the program through bench_cl_fail, with text_of(status) as the reason
 * (clpin_strerror, or bench_cl_code). Each bench defines its CHECK(expr)
 * with this and its own name. */
#define BENCH_CL_CHECK(prog, expr, text_of)                                                        \
  do {                                                                                             \
    cl_int bench_e_ = (expr);                                                                      \
    if (bench_e_ != CL_SUCCESS)                                                                    \
      bench_cl_fail(prog, __FILE__, __LINE__, #expr, text_of(bench_e_));                           \
  } while (0)

/* The first platform whose name contains want (the first platform when
 * want is NULL). On none: "PROG: no platform matches WANT" on stderr and
 * exit 1; a failing clGetPlatformIDs ends the program as BENCH_CL_CHECK
 * with text_of. */
cl_platform_id bench_cl_platform(const char *prog, const char *want,
                                 const char *(*text_of)(cl_int));

/* The first device of that platform, a context on it alone and an
 * in-order queue; a failing call ends the program as BENCH_CL_CHECK. */
void bench_cl_open(const char *prog, const char *want, const char *(*text_of)(cl_int),
                   cl_device_id *dev, cl_context *ctx, cl_command_queue *q);

#endif
