/* SPDX-License-Identifier: Apache-2.0 */
/* How every bench opens its OpenCL device: the platform and devices picked
 * by name (one rule for all programs), a context and queues, and a failing
 * call ended with a message naming it. Plain OpenCL, no clpin: layer-image,
 * which must never call clpin, uses it too. The
 * timing and the statistics are benchstat.h's. */
#ifndef CLPIN_BENCHCL_H
#define CLPIN_BENCHCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include <stddef.h>

/* The most devices bench_cl_find returns, and the most platforms it reads. */
#define BENCH_CL_MAX_DEVICES 16

/* Print "PROG: FILE:LINE: EXPR -> WHY" on stderr (bench_cl_report), and
 * exit 1 (bench_cl_fail). */
void bench_cl_report(const char *prog, const char *file, int line, const char *expr,
                     const char *why);
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

/* The devices a bench measures, by one rule. want (NULL: anything) names
 * a platform, or devices: a platform matches when its name contains want,
 * and then gives its devices; else the devices whose names contain want
 * give themselves. GPUs come first: the first matching platform with a GPU
 * gives its GPUs; only when no matching platform has one, the first with
 * any device gives all of its devices. Up to max (at most
 * BENCH_CL_MAX_DEVICES) into devs, in the platform's order, and *platform
 * set; returns how many, 0 when nothing matches. */
cl_uint bench_cl_find(const char *want, cl_platform_id *platform, cl_device_id *devs, cl_uint max);
/* bench_cl_find, but nothing found ends the program: "PROG: no OpenCL
 * device matches WANT (POCL: ...)" on stderr and exit 1. */
cl_uint bench_cl_devices(const char *prog, const char *want, cl_platform_id *platform,
                         cl_device_id *devs, cl_uint max);

/* A context of platform's n devs, and an in-order queue on one device; a
 * failing call ends the program as BENCH_CL_CHECK with text_of. */
cl_context bench_cl_context(const char *prog, cl_platform_id platform, cl_uint n,
                            const cl_device_id *devs, const char *(*text_of)(cl_int));
cl_command_queue bench_cl_queue(const char *prog, cl_context ctx, cl_device_id dev,
                                const char *(*text_of)(cl_int));

/* A CL_MEM_READ_WRITE buffer of n bytes in ctx; a failing call ends the
 * program as BENCH_CL_CHECK with text_of. */
cl_mem bench_cl_buffer(const char *prog, cl_context ctx, size_t n, const char *(*text_of)(cl_int));

/* The first device bench_cl_devices finds, a context on it alone and an
 * in-order queue. */
void bench_cl_open(const char *prog, const char *want, const char *(*text_of)(cl_int),
                   cl_device_id *dev, cl_context *ctx, cl_command_queue *q);

/* A device's CL_DEVICE_NAME into buf ("" when it cannot be read); buf. */
const char *bench_cl_name(cl_device_id dev, char *buf, size_t len);
/* "platform PLATFORM, device DEVICE" of dev into buf; buf. */
const char *bench_cl_where(cl_device_id dev, char *buf, size_t len);

/* --list: every platform and its devices on stdout, "platform I: NAME" and
 * "  device J: NAME". */
void bench_cl_list(void);

#endif
