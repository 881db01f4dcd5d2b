/* SPDX-License-Identifier: Apache-2.0 */
/* Round 16 probe: does a device copy on one queue run while a kernel runs
 * on another queue of the same context? One process, no MPI. Copies of
 * MIB MiB between a device buffer and (a) a pool block, (b) memory
 * registered with clpin_host_register; the copy enqueued from the main
 * thread or from another thread. Times: the kernel alone, the copy alone,
 * both at once (ms, median of 7).
 *   cc -O2 -pthread overlap_probe.c -Iinclude -Lbuild -lclpin -lOpenCL
 *   ./a.out [platform-substring] [MiB] */
#define CL_TARGET_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_1_APIS
#include "clpin.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(e)                                                                                      \
  do {                                                                                             \
    cl_int e_ = (e);                                                                               \
    if (e_ != CL_SUCCESS) {                                                                        \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #e, clpin_strerror(e_));              \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static const char *src = "__kernel void busy(__global float *x, int n) {\n"
                         "  size_t i = get_global_id(0); float a = x[i];\n"
                         "  for (int k = 0; k < n; k++) a = a * 0.9999f + 0.0001f;\n"
                         "  x[i] = a; }\n";

static cl_command_queue qk, qc;
static cl_kernel kern;
static size_t items;
static cl_mem dev;
static void *host;
static size_t nbytes;
static int write_dir;
/* How the copy is ordered after the copy queue's own earlier work, as
 * libclpin-mpi's allreduce orders its reads: 0 not at all; 1 a marker with
 * no wait list on qm, the copy on qc waiting for it; 2 the same with
 * clEnqueueBarrierWithWaitList; 3 clEnqueueMarker (OpenCL 1.1); 4 16
 * chunks, each with an event waited for (clWaitForEvents) before the next;
 * 5 the marker of 1, then the chunks of 4. */
static int order;
static cl_command_queue qm;

static void copy(void) {
  cl_event m = NULL;
  if (order == 1)
    CK(clEnqueueMarkerWithWaitList(qm, 0, NULL, &m));
  else if (order == 2)
    CK(clEnqueueBarrierWithWaitList(qm, 0, NULL, &m));
  else if (order == 3)
    CK(clEnqueueMarker(qm, &m));
  if (order == 5)
    CK(clEnqueueMarkerWithWaitList(qm, 0, NULL, &m));
  if (m)
    CK(clFlush(qm));
  if (order >= 4) {
    size_t c = nbytes / 16;
    for (int i = 0; i < 16; i++) {
      cl_event e;
      if (write_dir)
        CK(clEnqueueWriteBuffer(qc, dev, CL_FALSE, i * c, c, (char *)host + i * c, m ? 1 : 0,
                                m ? &m : NULL, &e));
      else
        CK(clEnqueueReadBuffer(qc, dev, CL_FALSE, i * c, c, (char *)host + i * c, m ? 1 : 0,
                               m ? &m : NULL, &e));
      CK(clFlush(qc));
      CK(clWaitForEvents(1, &e));
      clReleaseEvent(e);
    }
    if (m)
      clReleaseEvent(m);
    return;
  }
  if (write_dir)
    CK(clEnqueueWriteBuffer(qc, dev, CL_FALSE, 0, nbytes, host, m ? 1 : 0, m ? &m : NULL, NULL));
  else
    CK(clEnqueueReadBuffer(qc, dev, CL_FALSE, 0, nbytes, host, m ? 1 : 0, m ? &m : NULL, NULL));
  CK(clFlush(qc));
  if (m)
    clReleaseEvent(m);
}
static void *copy_thread(void *a) {
  (void)a;
  copy();
  CK(clFinish(qc));
  return NULL;
}

static double once(int mode, int threaded) { /* 0 kernel, 1 copy, 2 both */
  double t0 = now();
  if (mode != 1) {
    CK(clEnqueueNDRangeKernel(qk, kern, 1, NULL, &items, NULL, 0, NULL, NULL));
    CK(clFlush(qk));
  }
  pthread_t th;
  if (mode != 0) {
    if (threaded)
      pthread_create(&th, NULL, copy_thread, NULL);
    else
      copy();
  }
  if (mode != 0 && threaded)
    pthread_join(th, NULL);
  CK(clFinish(qc));
  CK(clFinish(qk));
  return (now() - t0) * 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double med(int mode, int threaded) {
  double v[7];
  for (int i = 0; i < 7; i++)
    v[i] = once(mode, threaded);
  qsort(v, 7, sizeof *v, cmp);
  return v[3];
}

int main(int argc, char **argv) {
  const char *want = argc > 1 ? argv[1] : "";
  nbytes = (size_t)(argc > 2 ? atoi(argv[2]) : 64) << 20;
  cl_platform_id ps[8];
  cl_uint np = 0;
  CK(clGetPlatformIDs(8, ps, &np));
  cl_platform_id p = NULL;
  char name[256];
  for (cl_uint i = 0; i < np && !p; i++) {
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    if (strstr(name, want))
      p = ps[i];
  }
  if (!p)
    return fprintf(stderr, "no platform %s\n", want), 1;
  cl_device_id d;
  CK(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL));
  clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof name, name, NULL);
  cl_int err;
  cl_context ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &err);
  CK(err);
  qk = clCreateCommandQueue(ctx, d, 0, &err);
  CK(err);
  qc = clCreateCommandQueue(ctx, d, 0, &err);
  CK(err);
  qm = clCreateCommandQueue(ctx, d, 0, &err);
  CK(err);
  cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
  CK(err);
  CK(clBuildProgram(prog, 1, &d, "", NULL, NULL));
  kern = clCreateKernel(prog, "busy", &err);
  CK(err);
  cl_uint units;
  clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
  items = (size_t)units * 2048;
  cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_WRITE, items * 4, NULL, &err);
  CK(err);
  dev = clCreateBuffer(ctx, CL_MEM_READ_WRITE, nbytes, NULL, &err);
  CK(err);
  clpin_pool *pool;
  CK(clpin_pool_get(qc, &pool));
  clpin_block *b;
  CK(clpin_acquire(pool, nbytes, &b));
  void *reg = aligned_alloc(4096, nbytes);
  memset(reg, 1, nbytes);
  CK(clpin_host_register(pool, reg, nbytes));
  CK(clSetKernelArg(kern, 0, sizeof x, &x));
  int spins = 1024;
  host = clpin_block_host(b);
  double tc = med(1, 0);
  for (;;) { /* a kernel of about the copy's time */
    CK(clSetKernelArg(kern, 1, sizeof spins, &spins));
    double tk = med(0, 0);
    if (tk > 0.8 * tc || spins > (1 << 28))
      break;
    double s = tc / tk;
    spins = (int)(spins * (s > 16 ? 16 : s < 1.2 ? 1.2 : s));
  }
  printf("overlap_probe: %s, %zu MiB copies, a kernel of %d iterations on %zu items\n", name,
         nbytes >> 20, spins, items);
  const char *hn[2] = {"pool block", "registered"};
  const char *on[6] = {"no order", "marker", "barrier", "1.1 marker", "chunks", "marker+chunks"};
  for (order = 0; order < 6; order++)
    for (int h = 0; h < 2; h++)
      for (write_dir = 0; write_dir < 2; write_dir++)
        for (int th = 0; th < 2; th++) {
          if (order && (h || th))
            continue; /* the orderings: pool block, same thread */
          host = h ? reg : clpin_block_host(b);
          double k = med(0, th), c = med(1, th), both = med(2, th);
          printf("  %-10s %-10s %-5s %-13s kernel %7.2f ms  copy %7.2f ms  both %7.2f ms  both / "
                 "longer %.2f\n",
                 on[order], hn[h], write_dir ? "write" : "read", th ? "other thread" : "same thread",
                 k, c, both, both / (k > c ? k : c));
        }
  return 0;
}
