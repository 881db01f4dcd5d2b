/* SPDX-License-Identifier: Apache-2.0 */
/* The control for check_fork's hang exclusion: the same fork
 * pattern with no clpin at all. Four threads keep the allocator and the
 * OpenCL driver busy the way check_fork's four clpin threads do (mixed-size
 * malloc/free, blocking and non-blocking transfers from freshly allocated
 * host memory, realloc/calloc), while the main thread forks children that
 * call exit(0); each must be reaped within 5 s, and a hung one's stacks are
 * classified by the same rule as check_fork's (tests/forkwatch.c).
 *
 * If children of this program hang in the sanitizer runtime's allocator as
 * often as check_fork's do, those hangs are the runtime's, not clpin's
 * (docs/RELIABILITY.md, "Fork and context churn"); it is no CTest test (it
 * asserts nothing about clpin), run by hand beside check_fork.
 *
 * Usage: fork_control [forks]   (default 1000; FORK_ROUNDS also sets it).
 * FORK_CONTROL_SMALL=k: thread 0 also makes and frees k tiny blocks at once
 * per round (default 0).
 * Prints one line "fork_control: N forks ... H hung (R in the sanitizer
 * runtime's allocator, O other), ... L exited late" and each hang's frames; exits 0 unless the
 * setup failed. */
#define CL_TARGET_OPENCL_VERSION 120
#include "forkwatch.h"

#include <CL/cl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)

#define MAX_SMALL 4096
static int small; /* FORK_CONTROL_SMALL */

static cl_context ctx;
static cl_device_id device;

#define DIE(...)                                                                                   \
  do {                                                                                             \
    fprintf(stderr, "fork_control: " __VA_ARGS__);                                                 \
    fputc('\n', stderr);                                                                           \
    exit(2);                                                                                       \
  } while (0)

static void open_cl(void) {
  cl_platform_id ps[16];
  cl_uint np = 0;
  if (clGetPlatformIDs(16, ps, &np) != CL_SUCCESS || np == 0)
    DIE("no OpenCL platform");
  const char *want = getenv("CLPIN_TEST_PLATFORM");
  cl_platform_id plat = NULL;
  for (cl_uint i = 0; i < np && i < 16 && !plat; i++) {
    char name[256] = "";
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    if (!want || !*want || strstr(name, want))
      plat = ps[i];
  }
  if (!plat)
    DIE("no platform matches CLPIN_TEST_PLATFORM=%s", want);
  if (clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &device, NULL) != CL_SUCCESS)
    DIE("no device");
  cl_int err;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
  ctx = clCreateContext(props, 1, &device, NULL, NULL, &err);
  if (err != CL_SUCCESS)
    DIE("clCreateContext: %d", err);
}

/* The counterparts of check_fork's four threads: 0 pool calls (small
 * bookkeeping allocations), 1 blocking and 2 non-blocking transfers (the
 * staging copies through fresh buffers), 3 host allocations. */
static void *busy_main(void *arg) {
  forkwatch_busy *b = arg;
  size_t n = 256 * KiB;
  cl_int err;
  cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  forkwatch_note(b, err);
  cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
  forkwatch_note(b, err);
  unsigned seed = (unsigned)b->kind * 7919u + 1;
  void *keep[8] = {0}, *tiny[MAX_SMALL];
  while (!atomic_load(b->stop) && b->err == CL_SUCCESS) {
    seed = seed * 1103515245u + 12345u;
    size_t len = 4 * KiB + (seed >> 8) % (n - 4 * KiB);
    switch (b->kind) {
    case 0: { /* many small allocations of mixed sizes, some kept a while */
      size_t i = (seed >> 4) % 8, sz = 16u << ((seed >> 12) % 10);
      free(keep[i]);
      keep[i] = malloc(sz);
      if (!keep[i])
        forkwatch_note(b, CL_OUT_OF_HOST_MEMORY);
      else
        memset(keep[i], 1, sz);
      /* With FORK_CONTROL_SMALL=k: k more tiny blocks (16-64 B) made and
       * freed at once, as a library's bookkeeping does; more than a
       * thread's allocator cache holds, so the shared free lists (and
       * their locks) are used often. */
      for (int k = 0; k < small; k++)
        tiny[k] = malloc(16u << (k % 3));
      for (int k = 0; k < small; k++)
        free(tiny[k]);
      break;
    }
    case 1: { /* blocking transfers from fresh host memory */
      unsigned char *h = malloc(len);
      if (!h) {
        forkwatch_note(b, CL_OUT_OF_HOST_MEMORY);
        break;
      }
      memset(h, (int)b->ops, len);
      forkwatch_note(b, clEnqueueWriteBuffer(q, buf, CL_TRUE, 0, len, h, 0, NULL, NULL));
      forkwatch_note(b, clEnqueueReadBuffer(q, buf, CL_TRUE, 0, len, h, 0, NULL, NULL));
      free(h);
      break;
    }
    case 2: { /* non-blocking transfers, waited for */
      unsigned char *h = malloc(len);
      if (!h) {
        forkwatch_note(b, CL_OUT_OF_HOST_MEMORY);
        break;
      }
      cl_event ev[2] = {NULL, NULL};
      forkwatch_note(b, clEnqueueWriteBuffer(q, buf, CL_FALSE, 0, len, h, 0, NULL, &ev[0]));
      forkwatch_note(b,
                     clEnqueueReadBuffer(q, buf, CL_FALSE, 0, len, h, ev[0] ? 1 : 0, ev, &ev[1]));
      for (int i = 0; i < 2; i++)
        if (ev[i]) {
          clWaitForEvents(1, &ev[i]);
          clReleaseEvent(ev[i]);
        }
      free(h);
      break;
    }
    default: { /* host allocations: calloc, grown with realloc */
      unsigned char *p = calloc(1, len / 2);
      unsigned char *g = p ? realloc(p, len) : NULL;
      if (!g) {
        free(p);
        forkwatch_note(b, CL_OUT_OF_HOST_MEMORY);
        break;
      }
      g[len - 1] = 1;
      free(g);
      break;
    }
    }
    b->ops++;
  }
  for (int i = 0; i < 8; i++)
    free(keep[i]);
  if (q) {
    clFinish(q);
    clReleaseCommandQueue(q);
  }
  if (buf)
    clReleaseMemObject(buf);
  return NULL;
}

int main(int argc, char **argv) {
  const char *e = argc > 1 ? argv[1] : getenv("FORK_ROUNDS");
  int n = e ? atoi(e) : 0;
  n = n > 0 ? n : 1000;
  const char *sm = getenv("FORK_CONTROL_SMALL");
  small = sm ? atoi(sm) : 0;
  small = small < 0 ? 0 : small > MAX_SMALL ? MAX_SMALL : small;
  open_cl();
  atomic_int stop = 0;
  forkwatch_busy b[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    b[i] = (forkwatch_busy){.kind = i, .stop = &stop};
    if (pthread_create(&th[i], NULL, busy_main, &b[i]) != 0)
      DIE("pthread_create");
  }
  int hung = 0, runtime = 0, bad = 0, late = 0;
  double worst = 0, start = forkwatch_now();
  for (int i = 0; i < n; i++) {
    double t0 = forkwatch_now();
    fflush(NULL); /* or the child's exit prints the parent's pending lines again */
    pid_t pid = fork();
    if (pid < 0)
      DIE("fork");
    if (pid == 0) {
      forkwatch_in_child = 1;
      exit(0);
    }
    forkwatch_stacks s;
    int status = forkwatch_reap(pid, 5.0, NULL, &s);
    double took = forkwatch_now() - t0;
    worst = took > worst ? took : worst;
    if (status == -3)
      DIE("waitpid");
    if (status == -1) {
      hung++;
      runtime += forkwatch_is_runtime(&s);
      printf("fork_control: child %d hung in %s\n", i, s.any ? s.frames : "(no stack: gdb?)");
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      bad++;
    } else {
      late += took > 5.0;
    }
  }
  double took = forkwatch_now() - start;
  atomic_store(&stop, 1);
  long ops = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    ops += b[i].ops;
    if (b[i].err != CL_SUCCESS)
      DIE("thread %d: %d", i, b[i].err);
  }
  clReleaseContext(ctx);
  printf("fork_control: %d forks while 4 threads ran %ld ops: %d hung (%d in the sanitizer "
         "runtime's allocator, %d other), %d failed, %d exited late (after 5 s, by "
         "themselves), slowest reaped after %.3f s, %.1f s\n",
         n, ops, hung, runtime, hung - runtime, bad, late, worst, took);
  return 0;
}
