/* SPDX-License-Identifier: Apache-2.0 */
/* layer_transcript: one fixed sequence of OpenCL calls, valid and invalid,
 * printed as a transcript of every return code, event status and a hash of
 * every byte that came back. ci/stages/35-layer.sh runs it twice, without
 * and with OPENCL_LAYERS=libclpin-layer.so, and diffs the two transcripts:
 * the layer must change nothing an application can observe (what it is
 * allowed to change, CL_EVENT_COMMAND_TYPE of a deferred transfer, is
 * printed as a class, see docs/LAYER.md).
 *
 * Usage: layer_transcript [all|blocking]   ("blocking": for Oclgrind, no
 * call that needs event callbacks or threads, and none of the malformed
 * calls that crash it). CLPIN_TEST_PLATFORM picks the
 * platform by name. Plain OpenCL only: it never calls clpin. */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N ((size_t)3 << 20) /* above the layer's default CLPIN_LAYER_MIN */
#define ODD 4099            /* an unaligned offset */

static cl_platform_id platform;
static cl_device_id device;
static cl_context ctx;
static cl_command_queue q, q2;
static int only_blocking;
static int opencl3; /* the platform is OpenCL 3.0 or later */

#define OUT(...) (printf(__VA_ARGS__), fflush(stdout))

static void die(const char *what, cl_int err) {
  fprintf(stderr, "layer_transcript: %s: %d\n", what, err);
  exit(2);
}
#define MUST(call)                                                                                 \
  do {                                                                                             \
    cl_int e_ = (call);                                                                            \
    if (e_ != CL_SUCCESS)                                                                          \
      die(#call, e_);                                                                              \
  } while (0)

static uint64_t hash(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211u;
  return h;
}

static void fill(void *p, size_t n, unsigned seed) {
  unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    b[i] = (unsigned char)(i * 2654435761u >> 13) ^ (unsigned char)seed;
}

static cl_mem buffer(cl_context c, cl_mem_flags flags, size_t n, void *host) {
  cl_int err;
  cl_mem m = clCreateBuffer(c, flags, n, host, &err);
  if (err != CL_SUCCESS)
    die("clCreateBuffer", err);
  return m;
}

static cl_int status_of(cl_event e) {
  cl_int st = 99;
  cl_int err = clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
  return err == CL_SUCCESS ? st : err;
}

/* The command types the driver gives a marker, and a marker behind a user
 * event, which is what the layer returns for a deferred transfer (main sets
 * them): NVIDIA 580 reports CL_COMMAND_MARKER for the first and 0x4003 for
 * the second (docs/LAYER.md). */
static cl_command_type marker_type = CL_COMMAND_MARKER, gated_marker_type = CL_COMMAND_MARKER;

/* A transfer's event: class of its command type (a transfer deferred behind
 * pending events is a marker under the layer), its queue and context. */
static void describe(const char *tag, cl_event e) {
  cl_command_type type = 0;
  cl_command_queue eq = NULL;
  cl_context ec = NULL;
  cl_int r1 = clGetEventInfo(e, CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL);
  cl_int r2 = clGetEventInfo(e, CL_EVENT_COMMAND_QUEUE, sizeof eq, &eq, NULL);
  cl_int r3 = clGetEventInfo(e, CL_EVENT_CONTEXT, sizeof ec, &ec, NULL);
  /* The layer's event is a marker, of the driver's marker type
   * (docs/LAYER.md): both count as the transfer; the number goes to stderr. */
  fprintf(stderr, "transcript: %s: CL_EVENT_COMMAND_TYPE 0x%x\n", tag, (unsigned)type);
  OUT("%s: info rc=%d/%d/%d type=%s queue=%s context=%s\n", tag, r1, r2, r3,
      type == CL_COMMAND_WRITE_BUFFER || type == CL_COMMAND_READ_BUFFER ||
              type == CL_COMMAND_WRITE_BUFFER_RECT || type == CL_COMMAND_READ_BUFFER_RECT ||
              type == CL_COMMAND_WRITE_IMAGE || type == CL_COMMAND_READ_IMAGE ||
              type == CL_COMMAND_MARKER || type == marker_type || type == gated_marker_type
          ? "transfer"
          : "OTHER",
      eq == q    ? "q"
      : eq == q2 ? "q2"
                 : "?",
      ec == ctx ? "ctx" : "?");
}

/* The device contents of m, read by the driver's own path (a small
 * transfer never goes through the layer... unless CLPIN_LAYER_MIN is tiny;
 * a copy to a fresh buffer and a read below the threshold in pieces). */
static uint64_t device_hash(cl_mem m, size_t n) {
  unsigned char *h = malloc(n);
  size_t piece = 64 << 10;
  for (size_t o = 0; o < n; o += piece) {
    size_t len = n - o < piece ? n - o : piece;
    MUST(clEnqueueReadBuffer(q, m, CL_TRUE, o, len, h + o, 0, NULL, NULL));
  }
  uint64_t r = hash(h, n);
  free(h);
  return r;
}

/* ---- valid transfers -------------------------------------------------------- */

static void blocking_roundtrip(void) {
  unsigned char *in = malloc(N), *out = calloc(N, 1);
  fill(in, N, 1);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, N + ODD, NULL);
  cl_event e = NULL;
  cl_int w = clEnqueueWriteBuffer(q, b, CL_TRUE, ODD, N, in, 0, NULL, &e);
  OUT("blocking write: rc=%d status=%d\n", w, status_of(e));
  describe("blocking write", e);
  clReleaseEvent(e);
  OUT("blocking write: device=%016" PRIx64 "\n", device_hash(b, N + ODD));
  cl_int r = clEnqueueReadBuffer(q, b, CL_TRUE, ODD, N, out, 0, NULL, &e);
  OUT("blocking read: rc=%d status=%d bytes=%016" PRIx64 " same=%d\n", r, status_of(e),
      hash(out, N), memcmp(in, out, N) == 0);
  clReleaseEvent(e);
  /* Blocking read with no event, then the host memory reused at once. */
  memset(out, 0, N);
  r = clEnqueueReadBuffer(q, b, CL_TRUE, ODD, N - 1, out, 0, NULL, NULL);
  OUT("blocking read, no event: rc=%d bytes=%016" PRIx64 "\n", r, hash(out, N));
  clReleaseMemObject(b);
  free(in);
  free(out);
}

static void profiling(void) {
  cl_int err;
  cl_command_queue pq = clCreateCommandQueue(ctx, device, CL_QUEUE_PROFILING_ENABLE, &err);
  MUST(err);
  unsigned char *in = malloc(N);
  fill(in, N, 2);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, N, NULL);
  for (int nb = 0; nb < (only_blocking ? 1 : 2); nb++) {
    cl_event e = NULL;
    cl_int w = clEnqueueWriteBuffer(pq, b, nb ? CL_FALSE : CL_TRUE, 0, N, in, 0, NULL, &e);
    cl_int wt = clWaitForEvents(1, &e);
    cl_ulong t[4] = {0};
    cl_int rc[4];
    for (int i = 0; i < 4; i++)
      rc[i] = clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_QUEUED + (cl_profiling_info)i,
                                      sizeof t[i], &t[i], NULL);
    OUT("profiling %s write: rc=%d wait=%d status=%d prof rc=%d/%d/%d/%d ordered=%d\n",
        nb ? "non-blocking" : "blocking", w, wt, status_of(e), rc[0], rc[1], rc[2], rc[3],
        t[0] <= t[1] && t[1] <= t[2] && t[2] <= t[3]);
    clReleaseEvent(e);
  }
  /* A non-profiling queue's event has no profiling info. */
  cl_event e = NULL;
  cl_ulong t = 0;
  clEnqueueWriteBuffer(q, b, CL_TRUE, 0, N, in, 0, NULL, &e);
  OUT("no profiling: rc=%d\n",
      clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof t, &t, NULL));
  clReleaseEvent(e);
  OUT("profiling: device=%016" PRIx64 "\n", device_hash(b, N));
  clReleaseMemObject(b);
  clReleaseCommandQueue(pq);
  free(in);
}

/* ---- rect transfers ----------------------------------------------------------- */

typedef struct {
  size_t bo[3], ho[3], region[3];
  size_t brp, bsp, hrp, hsp;
} rect_args;

/* 1D, 2D and 3D; pitches 0 and wider; odd sizes; each above the layer's
 * default threshold. */
static const rect_args rect_cases[] = {
    {{ODD, 0, 0}, {5, 0, 0}, {N, 1, 1}, 0, 0, 0, 0},
    {{0, 0, 0}, {0, 0, 0}, {1024, 3072, 1}, 0, 0, 0, 0},
    {{7, 3, 0}, {2, 5, 0}, {1001, 2500, 1}, 1003, 0, 1064, 0},
    {{1, 2, 3}, {4, 1, 2}, {333, 97, 80}, 340, 340 * 100, 350, 350 * 99},
    {{0, 0, 1}, {9, 0, 0}, {512, 64, 96}, 0, 0, 0, 0},
};

/* Bytes one side spans, pitches resolved as OpenCL resolves 0. */
static size_t rect_extent(const size_t o[3], const size_t r[3], size_t rp, size_t sp) {
  rp = rp ? rp : r[0];
  sp = sp ? sp : rp * r[1];
  return (o[2] + r[2] - 1) * sp + (o[1] + r[1] - 1) * rp + o[0] + r[0];
}

static void rect_transfers(void) {
  for (size_t k = 0; k < sizeof rect_cases / sizeof rect_cases[0]; k++) {
    const rect_args *a = &rect_cases[k];
    size_t dn = rect_extent(a->bo, a->region, a->brp, a->bsp) + 3;
    size_t hn = rect_extent(a->ho, a->region, a->hrp, a->hsp) + 3;
    unsigned char *in = malloc(hn), *out = malloc(hn);
    fill(in, hn, (unsigned)(20 + k));
    cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, dn, NULL);
    unsigned char *zero = calloc(dn, 1);
    MUST(clEnqueueWriteBuffer(q, b, CL_TRUE, 0, dn, zero, 0, NULL, NULL));
    free(zero);
    for (int nb = 0; nb < (only_blocking ? 1 : 2); nb++) {
      const char *how = nb ? "non-blocking" : "blocking";
      cl_event e = NULL;
      cl_int w = clEnqueueWriteBufferRect(q, b, nb ? CL_FALSE : CL_TRUE, a->bo, a->ho, a->region,
                                          a->brp, a->bsp, a->hrp, a->hsp, in, 0, NULL, &e);
      cl_int wt = w ? w : clWaitForEvents(1, &e);
      OUT("rect %zu %s write: rc=%d wait=%d status=%d\n", k, how, w, wt, w ? w : status_of(e));
      if (!w) {
        describe("rect write", e);
        clReleaseEvent(e);
      }
      OUT("rect %zu %s write: device=%016" PRIx64 "\n", k, how, device_hash(b, dn));
      memset(out, 0x5a, hn);
      cl_int r = clEnqueueReadBufferRect(q, b, nb ? CL_FALSE : CL_TRUE, a->bo, a->ho, a->region,
                                         a->brp, a->bsp, a->hrp, a->hsp, out, 0, NULL, &e);
      cl_int rt = r ? r : clWaitForEvents(1, &e);
      OUT("rect %zu %s read: rc=%d wait=%d status=%d bytes=%016" PRIx64 "\n", k, how, r, rt,
          r ? r : status_of(e), hash(out, hn));
      if (!r) {
        describe("rect read", e);
        clReleaseEvent(e);
      }
    }
    clReleaseMemObject(b);
    free(in);
    free(out);
  }
}

/* Rect calls the driver must judge: the layer passes them on untouched. */
static void rect_invalid(void) {
  size_t dn = 4 << 20, z[3] = {0, 0, 0}, r[3] = {1024, 3072, 1}, r0[3] = {1024, 0, 1};
  size_t far[3] = {0, 1100, 0}, big[3] = {1024, 4097, 1};
  unsigned char *h = calloc(dn * 2, 1);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, dn, NULL);
  OUT("rect invalid: zero region=%d row pitch=%d slice pitch=%d host pitch=%d\n",
      clEnqueueWriteBufferRect(q, b, CL_TRUE, z, z, r0, 0, 0, 0, 0, h, 0, NULL, NULL),
      clEnqueueWriteBufferRect(q, b, CL_TRUE, z, z, r, 1000, 0, 0, 0, h, 0, NULL, NULL),
      clEnqueueWriteBufferRect(q, b, CL_TRUE, z, z, r, 1024, 1024 * 3071, 0, 0, h, 0, NULL, NULL),
      clEnqueueReadBufferRect(q, b, CL_TRUE, z, z, r, 0, 0, 1023, 0, h, 0, NULL, NULL));
  OUT("rect invalid: out of range=%d %d null host=%d image as buffer=%d\n",
      clEnqueueWriteBufferRect(q, b, CL_TRUE, z, z, big, 0, 0, 0, 0, h, 0, NULL, NULL),
      clEnqueueReadBufferRect(q, b, CL_TRUE, far, z, r, 0, 0, 0, 0, h, 0, NULL, NULL),
      clEnqueueReadBufferRect(q, b, CL_TRUE, z, z, r, 0, 0, 0, 0, NULL, 0, NULL, NULL),
      clEnqueueReadImage(q, b, CL_TRUE, z, r, 0, 0, h, 0, NULL, NULL));
  clReleaseMemObject(b);
  free(h);
}

/* Non-blocking rects behind a gate and behind failed wait lists (on a
 * queue of their own: POCL never ends a command behind a failed event). */
static void rect_events(void) {
  cl_int err;
  const rect_args *a = &rect_cases[3];
  size_t dn = rect_extent(a->bo, a->region, a->brp, a->bsp);
  size_t hn = rect_extent(a->ho, a->region, a->hrp, a->hsp);
  unsigned char *in = malloc(hn), *out = malloc(hn);
  fill(in, hn, 40);
  memset(out, 0, hn);
  uint64_t before = hash(out, hn);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, dn, NULL);
  cl_event u = clCreateUserEvent(ctx, &err), w = NULL, r = NULL;
  MUST(err);
  cl_int rw = clEnqueueWriteBufferRect(q, b, CL_FALSE, a->bo, a->ho, a->region, a->brp, a->bsp,
                                       a->hrp, a->hsp, in, 1, &u, &w);
  cl_int rr = clEnqueueReadBufferRect(q, b, CL_FALSE, a->bo, a->ho, a->region, a->brp, a->bsp,
                                      a->hrp, a->hsp, out, 1, &w, &r);
  OUT("gated rect: rc=%d %d pending=%d %d untouched=%d\n", rw, rr, status_of(w) > CL_COMPLETE,
      status_of(r) > CL_COMPLETE, hash(out, hn) == before);
  describe("gated rect write", w);
  cl_int set = clSetUserEventStatus(u, CL_COMPLETE);
  cl_int wt = clWaitForEvents(1, &r);
  OUT("gated rect: set=%d wait=%d status=%d %d bytes=%016" PRIx64 "\n", set, wt, status_of(w),
      status_of(r), hash(out, hn));
  clReleaseEvent(w);
  clReleaseEvent(r);
  clReleaseEvent(u);
  cl_command_queue fq = clCreateCommandQueue(ctx, device, 0, &err);
  MUST(err);
  u = clCreateUserEvent(ctx, &err);
  MUST(clSetUserEventStatus(u, -7));
  (void)status_of(u);
  nanosleep(&(struct timespec){0, 20000000}, NULL);
  cl_int f1 = clEnqueueWriteBufferRect(fq, b, CL_FALSE, a->bo, a->ho, a->region, a->brp, a->bsp,
                                       a->hrp, a->hsp, in, 1, &u, &w);
  nanosleep(&(struct timespec){0, 50000000}, NULL);
  OUT("rect failed wait list: rc=%d status=%d\n", f1,
      f1                           ? 0
      : status_of(w) > CL_COMPLETE ? 1
                                   : status_of(w));
  if (!f1)
    clReleaseEvent(w);
  clReleaseEvent(u);
  u = clCreateUserEvent(ctx, &err);
  cl_int f2 = clEnqueueReadBufferRect(fq, b, CL_FALSE, a->bo, a->ho, a->region, a->brp, a->bsp,
                                      a->hrp, a->hsp, out, 1, &u, &r);
  cl_int f3 = clSetUserEventStatus(u, -8);
  nanosleep(&(struct timespec){0, 50000000}, NULL);
  OUT("rect wait list failed later: rc=%d %d status=%d\n", f2, f3,
      status_of(r) > CL_COMPLETE ? 1 : status_of(r));
  clReleaseEvent(r);
  clReleaseEvent(u);
  clFinish(q);
  clReleaseMemObject(b);
  free(in);
  free(out);
}

/* ---- image transfers ---------------------------------------------------------- */

static const cl_image_format image_formats[] = {
    {CL_RGBA, CL_UNSIGNED_INT8},
    {CL_R, CL_FLOAT},
    {CL_RGBA, CL_FLOAT},
    {CL_R, CL_UNSIGNED_INT8},
};

/* Image contents read by the driver's own path (pieces below the layer's
 * threshold). */
static uint64_t image_hash(cl_mem m, const size_t dim[3], size_t elem) {
  size_t row = dim[0] * elem, rows = (256 << 10) / row ? (256 << 10) / row : 1;
  unsigned char *h = malloc(row * dim[1] * dim[2]);
  for (size_t z = 0; z < dim[2]; z++)
    for (size_t y = 0; y < dim[1]; y += rows) {
      size_t o[3] = {0, y, z}, r[3] = {dim[0], y + rows > dim[1] ? dim[1] - y : rows, 1};
      MUST(
          clEnqueueReadImage(q, m, CL_TRUE, o, r, 0, 0, h + (z * dim[1] + y) * row, 0, NULL, NULL));
    }
  uint64_t v = hash(h, row * dim[1] * dim[2]);
  free(h);
  return v;
}

typedef struct {
  const char *name;
  cl_mem_object_type type;
  size_t dim[3];             /* width, height (1D array: count), depth (2D array: count) */
  size_t origin[3], trim[3]; /* region = dim - origin - trim */
  size_t pad_row, pad_slice; /* host pitches: 0, or tight plus this many bytes */
} image_args;

static void image_transfers(void) {
  cl_bool images = CL_FALSE;
  clGetDeviceInfo(device, CL_DEVICE_IMAGE_SUPPORT, sizeof images, &images, NULL);
  OUT("images: supported=%d\n", images);
  if (!images)
    return;
  for (size_t f = 0; f < sizeof image_formats / sizeof image_formats[0]; f++) {
    const cl_image_format *fmt = &image_formats[f];
    size_t elem = (fmt->image_channel_order == CL_RGBA ? 4 : 1) *
                  (fmt->image_channel_data_type == CL_FLOAT ? 4 : 1);
    size_t mib3 = (size_t)3 << 20;
    const image_args cases[] = {
        {"2D", CL_MEM_OBJECT_IMAGE2D, {1024, mib3 / (1024 * elem), 1}, {0}, {0}, 0, 0},
        {"2D sub",
         CL_MEM_OBJECT_IMAGE2D,
         {1024, mib3 / (1024 * elem), 1},
         {3, 5, 0},
         {4, 4, 0},
         64,
         0},
        {"3D",
         CL_MEM_OBJECT_IMAGE3D,
         {128, 64, mib3 / (128 * 64 * elem)},
         {1, 2, 1},
         {2, 1, 1},
         24,
         100},
        {"2D array",
         CL_MEM_OBJECT_IMAGE2D_ARRAY,
         {256, 128, mib3 / (256 * 128 * elem)},
         {0},
         {0},
         0,
         0},
        {"1D array",
         CL_MEM_OBJECT_IMAGE1D_ARRAY,
         {4096, mib3 / (4096 * elem), 1},
         {0, 1, 0},
         {0, 1, 0},
         0,
         0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      const image_args *a = &cases[k];
      cl_image_format all[128];
      cl_uint nf = 0;
      clGetSupportedImageFormats(ctx, CL_MEM_READ_WRITE, a->type, 128, all, &nf);
      int ok = 0;
      for (cl_uint i = 0; i < nf && i < 128; i++)
        ok |= all[i].image_channel_order == fmt->image_channel_order &&
              all[i].image_channel_data_type == fmt->image_channel_data_type;
      if (!ok) {
        OUT("image %zu %s: format unsupported\n", f, a->name);
        continue;
      }
      cl_image_desc d;
      memset(&d, 0, sizeof d);
      d.image_type = a->type;
      d.image_width = a->dim[0];
      if (a->type == CL_MEM_OBJECT_IMAGE1D_ARRAY) {
        d.image_array_size = a->dim[1];
      } else {
        d.image_height = a->dim[1];
        if (a->type == CL_MEM_OBJECT_IMAGE2D_ARRAY)
          d.image_array_size = a->dim[2];
        if (a->type == CL_MEM_OBJECT_IMAGE3D)
          d.image_depth = a->dim[2];
      }
      cl_int err;
      cl_mem m = clCreateImage(ctx, CL_MEM_READ_WRITE, fmt, &d, NULL, &err);
      if (err != CL_SUCCESS) {
        OUT("image %zu %s: create rc=%d\n", f, a->name, err);
        continue;
      }
      size_t region[3], all_r[3] = {a->dim[0], a->dim[1], a->dim[2]}, zo[3] = {0, 0, 0};
      for (int i = 0; i < 3; i++)
        region[i] = a->dim[i] - a->origin[i] - a->trim[i];
      bool flat = a->type == CL_MEM_OBJECT_IMAGE2D;
      size_t rp = a->pad_row ? region[0] * elem + a->pad_row : 0;
      size_t rpt = rp ? rp : region[0] * elem;
      size_t sp = flat || !a->pad_slice ? 0 : rpt * region[1] + a->pad_slice;
      size_t spt = sp ? sp : rpt * region[1];
      size_t hn = a->type == CL_MEM_OBJECT_IMAGE1D_ARRAY ? rpt * region[1] : spt * region[2];
      size_t whole = a->dim[0] * a->dim[1] * a->dim[2] * elem;
      unsigned char *in = malloc(hn), *out = malloc(hn), *zero = calloc(whole, 1);
      fill(in, hn, (unsigned)(50 + f * 8 + k));
      if (fmt->image_channel_data_type == CL_FLOAT) /* no NaNs: their bits may change */
        for (size_t i = 3; i < hn; i += 4)
          in[i] &= 0x3f;
      MUST(clEnqueueWriteImage(q, m, CL_TRUE, zo, all_r, 0, 0, zero, 0, NULL, NULL));
      for (int nb = 0; nb < (only_blocking ? 1 : 2); nb++) {
        const char *how = nb ? "non-blocking" : "blocking";
        cl_event e = NULL;
        cl_int w = clEnqueueWriteImage(q, m, nb ? CL_FALSE : CL_TRUE, a->origin, region, rp, sp, in,
                                       0, NULL, &e);
        cl_int wt = w ? w : clWaitForEvents(1, &e);
        OUT("image %zu %s %s write: rc=%d wait=%d status=%d\n", f, a->name, how, w, wt,
            w ? w : status_of(e));
        if (!w) {
          describe("image write", e);
          clReleaseEvent(e);
        }
        OUT("image %zu %s %s write: device=%016" PRIx64 "\n", f, a->name, how,
            image_hash(m, all_r, elem));
        memset(out, 0x5a, hn);
        cl_int r = clEnqueueReadImage(q, m, nb ? CL_FALSE : CL_TRUE, a->origin, region, rp, sp, out,
                                      0, NULL, &e);
        cl_int rt = r ? r : clWaitForEvents(1, &e);
        OUT("image %zu %s %s read: rc=%d wait=%d status=%d bytes=%016" PRIx64 "\n", f, a->name, how,
            r, rt, r ? r : status_of(e), hash(out, hn));
        if (!r) {
          describe("image read", e);
          clReleaseEvent(e);
        }
      }
      /* Calls the driver must judge. */
      size_t far[3] = {a->dim[0], 0, 0};
      OUT("image %zu %s invalid: out of range=%d row pitch=%d null=%d\n", f, a->name,
          clEnqueueWriteImage(q, m, CL_TRUE, far, region, 0, 0, in, 0, NULL, NULL),
          clEnqueueReadImage(q, m, CL_TRUE, a->origin, region, region[0] * elem - 1, 0, out, 0,
                             NULL, NULL),
          clEnqueueReadImage(q, m, CL_TRUE, a->origin, region, 0, 0, NULL, 0, NULL, NULL));
      clReleaseMemObject(m);
      free(in);
      free(out);
      free(zero);
    }
  }
}

static atomic_int callbacks;
static void CL_CALLBACK on_event(cl_event e, cl_int status, void *data) {
  (void)e;
  (void)data;
  if (status == CL_COMPLETE)
    atomic_fetch_add(&callbacks, 1);
}

/* Callbacks may run on a driver thread after the wait returns. */
static int wait_callbacks(int want) {
  for (int i = 0; i < 2000 && atomic_load(&callbacks) < want; i++)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  return atomic_load(&callbacks);
}

static void nonblocking_events(void) {
  unsigned char *in = malloc(N), *out = calloc(N, 1);
  fill(in, N, 3);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, N, NULL);
  cl_event w = NULL, r = NULL;
  cl_int rw = clEnqueueWriteBuffer(q, b, CL_FALSE, 0, N, in, 0, NULL, &w);
  OUT("nb write: rc=%d cb=%d\n", rw, clSetEventCallback(w, CL_COMPLETE, on_event, NULL));
  describe("nb write", w);
  OUT("nb write: retain=%d\n", clRetainEvent(w));
  /* Read on the second queue, ordered by the wait list only. */
  cl_int rr = clEnqueueReadBuffer(q2, b, CL_FALSE, 0, N, out, 1, &w, &r);
  cl_int cr = clSetEventCallback(r, CL_COMPLETE, on_event, NULL);
  cl_int wt = clWaitForEvents(1, &r);
  OUT("nb read on q2 after w: rc=%d cb=%d wait=%d status=%d/%d bytes=%016" PRIx64 "\n", rr, cr, wt,
      status_of(w), status_of(r), hash(out, N));
  describe("nb read", r);
  OUT("callbacks: %d\n", wait_callbacks(2));
  cl_int rel1 = clReleaseEvent(w), rel2 = clReleaseEvent(w), rel3 = clReleaseEvent(r);
  OUT("release: %d %d %d\n", rel1, rel2, rel3);
  OUT("finish: %d %d\n", clFinish(q), clFinish(q2));
  clReleaseMemObject(b);
  free(in);
  free(out);
}

/* Later commands on an in-order queue see the transfer: a non-blocking
 * write, then a copy, a fill and a read enqueued behind it. */
static void queue_order(void) {
  unsigned char *in = malloc(N), *out = calloc(N, 1), *early = calloc(N, 1);
  fill(in, N, 4);
  cl_mem a = buffer(ctx, CL_MEM_READ_WRITE, N, NULL), b = buffer(ctx, CL_MEM_READ_WRITE, N, NULL);
  cl_int r1 = clEnqueueWriteBuffer(q, a, CL_FALSE, 0, N, in, 0, NULL, NULL);
  cl_int r2 = clEnqueueCopyBuffer(q, a, b, 0, 0, N, 0, NULL, NULL);
  cl_int r3 = clEnqueueReadBuffer(q, a, CL_FALSE, 0, N, early, 0, NULL, NULL);
  unsigned char zero = 0;
  cl_int r4 = clEnqueueFillBuffer(q, a, &zero, 1, 0, N, 0, NULL, NULL);
  cl_int r5 = clEnqueueReadBuffer(q, b, CL_TRUE, 0, N, out, 0, NULL, NULL);
  cl_int r6 = clFinish(q);
  OUT("queue order: rc=%d %d %d %d %d %d copy=%016" PRIx64 " early=%016" PRIx64
      " filled=%016" PRIx64 "\n",
      r1, r2, r3, r4, r5, r6, hash(out, N), hash(early, N), device_hash(a, N));
  clReleaseMemObject(a);
  clReleaseMemObject(b);
  free(in);
  free(out);
  free(early);
}

/* Transfers behind a user event the application sets after the call: the
 * call must return at once, and its event complete only afterwards. */
static void user_events(void) {
  cl_int err;
  unsigned char *in = malloc(N), *out = calloc(N, 1), *out2 = calloc(N, 1);
  fill(in, N, 5);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, N, NULL);
  MUST(clEnqueueWriteBuffer(q, b, CL_TRUE, 0, N, in, 0, NULL, NULL));
  /* In the wait list. */
  cl_event u = clCreateUserEvent(ctx, &err), r = NULL, w = NULL;
  MUST(err);
  cl_int rr = clEnqueueReadBuffer(q, b, CL_FALSE, 0, N, out, 1, &u, &r);
  OUT("gated read: rc=%d pending=%d\n", rr, status_of(r) > CL_COMPLETE);
  describe("gated read", r);
  cl_int set = clSetUserEventStatus(u, CL_COMPLETE);
  cl_int wt = clWaitForEvents(1, &r);
  OUT("gated read: set=%d wait=%d status=%d bytes=%016" PRIx64 "\n", set, wt, status_of(r),
      hash(out, N));
  clReleaseEvent(r);
  clReleaseEvent(u);
  /* Behind an earlier command of the in-order queue. */
  u = clCreateUserEvent(ctx, &err);
  MUST(clEnqueueMarkerWithWaitList(q, 1, &u, NULL));
  fill(in, N, 6);
  cl_int rw = clEnqueueWriteBuffer(q, b, CL_FALSE, 0, N, in, 0, NULL, &w);
  cl_int rr2 = clEnqueueReadBuffer(q, b, CL_FALSE, 0, N, out2, 0, NULL, &r);
  OUT("queued behind a gate: rc=%d %d pending=%d %d\n", rw, rr2, status_of(w) > CL_COMPLETE,
      status_of(r) > CL_COMPLETE);
  cl_int cb = clSetEventCallback(r, CL_COMPLETE, on_event, NULL);
  int before = atomic_load(&callbacks);
  set = clSetUserEventStatus(u, CL_COMPLETE);
  wt = clWaitForEvents(1, &r);
  int calls = wait_callbacks(before + 1) - before;
  OUT("queued behind a gate: set=%d wait=%d status=%d %d bytes=%016" PRIx64 " cb=%d calls=%d\n",
      set, wt, status_of(w), status_of(r), hash(out2, N), cb, calls);
  clReleaseEvent(w);
  clReleaseEvent(r);
  clReleaseEvent(u);
  /* Failed wait lists, on a queue of their own that is never finished:
   * POCL never ends a command behind a failed event (a blocking call would
   * hang, with or without the layer). Already failed at the call, and
   * failed after it. */
  cl_command_queue fq = clCreateCommandQueue(ctx, device, 0, &err);
  MUST(err);
  u = clCreateUserEvent(ctx, &err);
  MUST(clSetUserEventStatus(u, -7));
  /* Let the driver notice the failure before the call, in both runs:
   * NVIDIA's enqueue behind an event failed a moment ago returns 0 (the
   * command then fails with -7), but -7 itself once the driver has seen the
   * failure, which a status query (the layer makes one) or a short wait
   * brings about. */
  (void)status_of(u);
  nanosleep(&(struct timespec){0, 20000000}, NULL);
  cl_int f1 = clEnqueueWriteBuffer(fq, b, CL_FALSE, 0, N, in, 1, &u, &w);
  nanosleep(&(struct timespec){0, 50000000}, NULL);
  OUT("failed wait list: rc=%d status=%d\n", f1,
      f1                           ? 0
      : status_of(w) > CL_COMPLETE ? 1
                                   : status_of(w));
  if (!f1)
    clReleaseEvent(w);
  clReleaseEvent(u);
  u = clCreateUserEvent(ctx, &err);
  cl_int f2 = clEnqueueReadBuffer(fq, b, CL_FALSE, 0, N, out2, 1, &u, &r);
  cl_int f3 = clSetUserEventStatus(u, -8);
  nanosleep(&(struct timespec){0, 50000000}, NULL);
  OUT("wait list failed later: rc=%d %d status=%d\n", f2, f3,
      status_of(r) > CL_COMPLETE ? 1 : status_of(r));
  clReleaseEvent(r);
  clReleaseEvent(u);
  clFinish(q);
  clReleaseMemObject(b);
  free(in);
  free(out);
  free(out2);
}

static void out_of_order(void) {
  cl_int err;
  cl_command_queue oq =
      clCreateCommandQueue(ctx, device, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
  if (err != CL_SUCCESS) {
    OUT("out-of-order queue: create rc=%d\n", err);
    return;
  }
  unsigned char *in = malloc(2 * N), *out = calloc(2 * N, 1);
  fill(in, 2 * N, 7);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, 2 * N, NULL);
  cl_event w[2] = {0}, r = NULL;
  cl_int r0 = clEnqueueWriteBuffer(oq, b, CL_FALSE, 0, N, in, 0, NULL, &w[0]);
  cl_int r1 = clEnqueueWriteBuffer(oq, b, CL_FALSE, N, N, in + N, 0, NULL, &w[1]);
  cl_int r2 = clEnqueueReadBuffer(oq, b, CL_FALSE, 0, 2 * N, out, 2, w, &r);
  cl_int wt = clWaitForEvents(1, &r);
  OUT("out-of-order: rc=%d %d %d wait=%d status=%d %d %d bytes=%016" PRIx64 "\n", r0, r1, r2, wt,
      status_of(w[0]), status_of(w[1]), status_of(r), hash(out, 2 * N));
  /* Behind a user event, in the wait list only. */
  cl_event u = clCreateUserEvent(ctx, &err), g = NULL;
  memset(out, 0, 2 * N);
  cl_int r3 = clEnqueueReadBuffer(oq, b, CL_FALSE, 0, N, out, 1, &u, &g);
  int pending = status_of(g) > CL_COMPLETE;
  cl_int set = clSetUserEventStatus(u, CL_COMPLETE);
  cl_int wg = clWaitForEvents(1, &g);
  OUT("out-of-order gated: rc=%d pending=%d set=%d wait=%d status=%d bytes=%016" PRIx64 "\n", r3,
      pending, set, wg, status_of(g), hash(out, N));
  clReleaseEvent(u);
  clReleaseEvent(g);
  clReleaseEvent(w[0]);
  clReleaseEvent(w[1]);
  clReleaseEvent(r);
  clFinish(oq);
  clReleaseCommandQueue(oq);
  clReleaseMemObject(b);
  free(in);
  free(out);
}

/* ---- what the layer must leave to the driver ------------------------------- */

static void invalid_calls(void) {
  cl_int err;
  unsigned char *in = malloc(N), *out = calloc(N, 1);
  fill(in, N, 8);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, N, NULL);
  OUT("null queue: %d\n", clEnqueueWriteBuffer(NULL, b, CL_TRUE, 0, N, in, 0, NULL, NULL));
  OUT("null buffer: %d\n", clEnqueueWriteBuffer(q, NULL, CL_TRUE, 0, N, in, 0, NULL, NULL));
  OUT("null host: %d %d\n", clEnqueueWriteBuffer(q, b, CL_TRUE, 0, N, NULL, 0, NULL, NULL),
      clEnqueueReadBuffer(q, b, CL_TRUE, 0, N, NULL, 0, NULL, NULL));
  OUT("past the end: %d %d\n", clEnqueueWriteBuffer(q, b, CL_TRUE, 1, N, in, 0, NULL, NULL),
      clEnqueueReadBuffer(q, b, CL_TRUE, N, N, out, 0, NULL, NULL));
  /* Objects of another context. */
  cl_context other = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  MUST(err);
  cl_mem ob = buffer(other, CL_MEM_READ_WRITE, N, NULL);
  cl_event ou = clCreateUserEvent(other, &err);
  MUST(clSetUserEventStatus(ou, CL_COMPLETE));
  OUT("buffer of another context: %d\n",
      clEnqueueWriteBuffer(q, ob, CL_TRUE, 0, N, in, 0, NULL, NULL));
  OUT("event of another context: %d\n",
      clEnqueueWriteBuffer(q, b, CL_FALSE, 0, N, in, 1, &ou, NULL));
  clFinish(q);
  clReleaseEvent(ou);
  clReleaseMemObject(ob);
  clReleaseContext(other);
  /* Host-access flags. */
  cl_mem na = buffer(ctx, CL_MEM_READ_WRITE | CL_MEM_HOST_NO_ACCESS, N, NULL);
  cl_mem ro = buffer(ctx, CL_MEM_READ_WRITE | CL_MEM_HOST_READ_ONLY, N, NULL);
  cl_mem wo = buffer(ctx, CL_MEM_READ_WRITE | CL_MEM_HOST_WRITE_ONLY, N, NULL);
  OUT("host no access: %d %d\n", clEnqueueWriteBuffer(q, na, CL_TRUE, 0, N, in, 0, NULL, NULL),
      clEnqueueReadBuffer(q, na, CL_TRUE, 0, N, out, 0, NULL, NULL));
  OUT("host read only: write %d\n", clEnqueueWriteBuffer(q, ro, CL_TRUE, 0, N, in, 0, NULL, NULL));
  cl_int wor = clEnqueueReadBuffer(q, wo, CL_TRUE, 0, N, out, 0, NULL, NULL);
  OUT("host write only: read %d write %d\n", wor,
      clEnqueueWriteBuffer(q, wo, CL_TRUE, 0, N, in, 0, NULL, NULL));
  clReleaseMemObject(na);
  clReleaseMemObject(ro);
  clReleaseMemObject(wo);
  /* A released buffer is not passed here: the loader dereferences it. */
  clReleaseMemObject(b);
  free(in);
  free(out);
}

/* Malformed calls, one section each: Oclgrind (1.2) accepts an overflowing
 * offset and then writes out of bounds, and crashes on a malformed wait list
 * (not run on a simulator); NVIDIA's driver 580 segfaults on one of them
 * without any layer (docs/LAYER.md), so each can be left out by name. */
static void offset_overflow(void) {
  unsigned char *in = calloc(N, 1);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, N, NULL);
  OUT("offset overflow: %d\n",
      clEnqueueWriteBuffer(q, b, CL_TRUE, SIZE_MAX - 8, N, in, 0, NULL, NULL));
  clReleaseMemObject(b);
  free(in);
}

static void wait_count_without_list(void) {
  unsigned char *in = calloc(N, 1);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, N, NULL);
  OUT("wait list count without list: %d\n",
      clEnqueueWriteBuffer(q, b, CL_TRUE, 0, N, in, 1, NULL, NULL));
  clReleaseMemObject(b);
  free(in);
}

static void wait_list_without_count(void) {
  unsigned char *in = calloc(N, 1);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, N, NULL);
  cl_event ev = NULL;
  OUT("wait list without count: %d\n", clEnqueueWriteBuffer(q, b, CL_TRUE, 0, N, in, 0, &ev, NULL));
  clReleaseMemObject(b);
  free(in);
}

static void null_event_in_wait_list(void) {
  unsigned char *out = calloc(N, 1);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, N, NULL);
  cl_event nul = NULL;
  OUT("null event in wait list: %d\n",
      clEnqueueReadBuffer(q, b, CL_TRUE, 0, N, out, 1, &nul, NULL));
  clReleaseMemObject(b);
  free(out);
}

static void special_memory(void) {
  cl_int err;
  unsigned char *in = malloc(2 * N), *out = calloc(2 * N, 1);
  fill(in, 2 * N, 9);
  cl_mem b = buffer(ctx, CL_MEM_READ_WRITE, 2 * N, NULL);
  MUST(clEnqueueWriteBuffer(q, b, CL_TRUE, 0, 2 * N, in, 0, NULL, NULL));
  /* A sub-buffer. */
  cl_buffer_region reg = {N, N};
  cl_mem sub = clCreateSubBuffer(b, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &reg, &err);
  if (err == CL_SUCCESS) {
    cl_int r = clEnqueueReadBuffer(q, sub, CL_TRUE, 0, N, out, 0, NULL, NULL);
    cl_int w = clEnqueueWriteBuffer(q, sub, CL_TRUE, 1, N - 1, in, 0, NULL, NULL);
    OUT("sub-buffer: rc=%d %d bytes=%016" PRIx64 " device=%016" PRIx64 "\n", r, w, hash(out, N),
        device_hash(b, 2 * N));
    clReleaseMemObject(sub);
  } else {
    OUT("sub-buffer: create rc=%d\n", err);
  }
  /* A USE_HOST_PTR buffer, and transfers from/to memory behind one. */
  unsigned char *host = aligned_alloc(4096, 2 * N);
  fill(host, 2 * N, 10);
  cl_mem u = buffer(ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, 2 * N, host);
  cl_int r1 = clEnqueueReadBuffer(q, u, CL_TRUE, 0, N, out, 0, NULL, NULL);
  cl_int r2 = clEnqueueWriteBuffer(q, b, CL_TRUE, 0, N, host + 100, 0, NULL, NULL);
  cl_int r3 = clEnqueueReadBuffer(q, b, CL_TRUE, N, N, host + N, 0, NULL, NULL);
  OUT("use_host_ptr: rc=%d %d %d bytes=%016" PRIx64 " host=%016" PRIx64 " device=%016" PRIx64 "\n",
      r1, r2, r3, hash(out, N), hash(host, 2 * N), device_hash(b, 2 * N));
  clReleaseMemObject(u);
  free(host);
  /* Mapped memory: a transfer to the mapped buffer, and one from/to the
   * mapped host region of another buffer. */
  cl_mem m = buffer(ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, N, NULL);
  MUST(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, N, in + N, 0, NULL, NULL));
  unsigned char *p =
      clEnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, N, 0, NULL, NULL, &err);
  MUST(err);
  cl_int w1 = clEnqueueWriteBuffer(q, b, CL_TRUE, 0, N, p, 0, NULL, NULL);
  cl_int w2 = clEnqueueReadBuffer(q, b, CL_TRUE, N, N, p, 0, NULL, NULL);
  uint64_t hp = hash(p, N);
  cl_int w3 = clEnqueueUnmapMemObject(q, m, p, 0, NULL, NULL);
  clFinish(q);
  OUT("mapped: rc=%d %d %d map=%016" PRIx64 " device=%016" PRIx64 " %016" PRIx64 "\n", w1, w2, w3,
      hp, device_hash(b, 2 * N), device_hash(m, N));
  clReleaseMemObject(m);
  /* SVM, where the device has it. */
  cl_device_svm_capabilities svm = 0;
  clGetDeviceInfo(device, CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, NULL);
  void *s = svm && opencl3 ? clSVMAlloc(ctx, CL_MEM_READ_WRITE, N, 0) : NULL;
  if (s) {
    memcpy(s, in, N);
    cl_int s1 = clEnqueueWriteBuffer(q, b, CL_TRUE, 0, N, s, 0, NULL, NULL);
    cl_int s2 = clEnqueueReadBuffer(q, b, CL_TRUE, N, N, s, 0, NULL, NULL);
    OUT("svm: rc=%d %d bytes=%016" PRIx64 "\n", s1, s2, hash(s, N));
    clSVMFree(ctx, s);
  } else {
    OUT("svm: none\n");
  }
  clReleaseMemObject(b);
  free(in);
  free(out);
}

/* ---- threads ---------------------------------------------------------------- */

enum { THREADS = 4, ROUNDS = 3 };
static uint64_t thread_hash[THREADS];
static cl_int thread_rc[THREADS];

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  cl_int err;
  cl_command_queue own = clCreateCommandQueue(ctx, device, 0, &err);
  if (err != CL_SUCCESS) {
    thread_rc[id] = err;
    return NULL;
  }
  size_t n = N / 2 + (size_t)id * 4096;
  unsigned char *in = malloc(n), *out = calloc(n, 1);
  cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  uint64_t h = 0;
  for (int r = 0; r < ROUNDS && err == CL_SUCCESS; r++) {
    fill(in, n, (unsigned)(id * 16 + r));
    /* Half on the shared queue, half on this thread's own. */
    cl_command_queue use = r % 2 ? q : own;
    cl_event w = NULL;
    err = clEnqueueWriteBuffer(use, b, CL_FALSE, 0, n, in, 0, NULL, &w);
    if (err == CL_SUCCESS)
      err = clEnqueueReadBuffer(own, b, CL_TRUE, 0, n, out, 1, &w, NULL);
    if (w)
      clReleaseEvent(w);
    h ^= hash(out, n) + (uint64_t)r;
  }
  thread_rc[id] = err;
  thread_hash[id] = h;
  clReleaseMemObject(b);
  clReleaseCommandQueue(own);
  free(in);
  free(out);
  return NULL;
}

static void threads(void) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < THREADS; i++)
    OUT("thread %d: rc=%d bytes=%016" PRIx64 "\n", i, thread_rc[i], thread_hash[i]);
}

/* ---- context lifetime --------------------------------------------------------- */

static atomic_int contexts_destroyed;
static void CL_CALLBACK on_destroy_count(cl_context c, void *data) {
  (void)c;
  (void)data;
  atomic_fetch_add(&contexts_destroyed, 1);
}

/* Contexts created, used and released on several threads at once: every
 * one must be freed by the application's last release. */
static void *context_worker(void *arg) {
  int id = (int)(intptr_t)arg;
  cl_int err;
  cl_context c = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  if (err != CL_SUCCESS) {
    thread_rc[id] = err;
    return NULL;
  }
  clSetContextDestructorCallback(c, on_destroy_count, NULL);
  cl_command_queue cq = clCreateCommandQueue(c, device, 0, &err);
  size_t n = N / 2 + (size_t)id * 8192;
  unsigned char *in = malloc(n), *out = calloc(n, 1);
  fill(in, n, (unsigned)(100 + id));
  cl_mem b = clCreateBuffer(c, CL_MEM_READ_WRITE, n, NULL, &err);
  cl_event e = NULL;
  err = clEnqueueWriteBuffer(cq, b, CL_FALSE, 0, n, in, 0, NULL, &e);
  if (err == CL_SUCCESS)
    err = clEnqueueReadBuffer(cq, b, CL_TRUE, 0, n, out, 1, &e, NULL);
  if (e)
    clReleaseEvent(e);
  thread_rc[id] = err;
  thread_hash[id] = hash(out, n);
  /* Half release the context first, half last. */
  if (id % 2)
    clReleaseContext(c);
  clReleaseMemObject(b);
  clReleaseCommandQueue(cq);
  if (!(id % 2))
    clReleaseContext(c);
  free(in);
  free(out);
  return NULL;
}

static void thread_contexts(void) {
  if (!opencl3)
    return;
  atomic_store(&contexts_destroyed, 0);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&t[i], NULL, context_worker, (void *)(intptr_t)i);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 2000 && atomic_load(&contexts_destroyed) < THREADS; i++)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  for (int i = 0; i < THREADS; i++)
    OUT("context thread %d: rc=%d bytes=%016" PRIx64 "\n", i, thread_rc[i], thread_hash[i]);
  OUT("context threads: %d of %d contexts destroyed\n", atomic_load(&contexts_destroyed), THREADS);
}

static atomic_int destroyed;
static void CL_CALLBACK on_destroy(cl_context c, void *data) {
  (void)c;
  (void)data;
  atomic_store(&destroyed, 1);
}

/* After the application's last release of everything, the context is gone:
 * its destructor callback has run, although the layer's pool held it. */
static void lifetime(int release_context_first) {
  cl_int err;
  cl_context c = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  MUST(err);
  atomic_store(&destroyed, 0);
  /* OpenCL 3.0; ocl-icd does not stop a 1.2 driver's missing entry. */
  cl_int cb = opencl3 ? clSetContextDestructorCallback(c, on_destroy, NULL) : CL_INVALID_OPERATION;
  cl_command_queue cq = clCreateCommandQueue(c, device, 0, &err);
  MUST(err);
  unsigned char *in = malloc(N), *out = calloc(N, 1);
  fill(in, N, 11);
  cl_mem b = buffer(c, CL_MEM_READ_WRITE, N, NULL);
  cl_event e = NULL;
  cl_int w = clEnqueueWriteBuffer(cq, b, only_blocking ? CL_TRUE : CL_FALSE, 0, N, in, 0, NULL, &e);
  cl_int r = clEnqueueReadBuffer(cq, b, CL_TRUE, 0, N, out, 1, &e, NULL);
  clReleaseEvent(e);
  MUST(clRetainContext(c));
  MUST(clReleaseContext(c));
  if (release_context_first) {
    MUST(clReleaseContext(c));
    /* The queue and buffer still hold it; a transfer on them still works. */
    memset(out, 0, N);
    cl_int r2 = clEnqueueReadBuffer(cq, b, CL_TRUE, 0, N, out, 0, NULL, NULL);
    OUT("lifetime (context released first): read rc=%d bytes=%016" PRIx64 " destroyed=%d\n", r2,
        hash(out, N), atomic_load(&destroyed));
    clReleaseMemObject(b);
    clReleaseCommandQueue(cq);
  } else {
    clReleaseMemObject(b);
    clReleaseCommandQueue(cq);
    MUST(clReleaseContext(c));
  }
  /* The driver may free the last objects on its own thread a little later. */
  for (int i = 0; i < 2000 && !atomic_load(&destroyed); i++)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  OUT("lifetime %d: rc=%d %d %d bytes=%016" PRIx64 " destroyed=%d\n", release_context_first, cb, w,
      r, hash(out, N), atomic_load(&destroyed));
  free(in);
  free(out);
}

/* Each section names itself on stderr before it runs, so a run that dies
 * inside a driver (the plain run segfaulted on NVIDIA once, section
 * unknown) says where; LAYER_TRANSCRIPT_SKIP="name,name" leaves sections
 * out (the same in the runs compared, so the transcripts still match). */
static bool skipped(const char *call) {
  const char *skip = getenv("LAYER_TRANSCRIPT_SKIP");
  size_t len = strcspn(call, "(");
  for (const char *p = skip; p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
    if (strcspn(p, ",") == len && strncmp(p, call, len) == 0)
      return true;
  }
  return false;
}
#define SECTION(call)                                                                              \
  do {                                                                                             \
    if (skipped(#call)) {                                                                          \
      fprintf(stderr, "transcript: skipping %s\n", #call);                                         \
    } else {                                                                                       \
      fprintf(stderr, "transcript: %s\n", #call);                                                  \
      call;                                                                                        \
    }                                                                                              \
  } while (0)

int main(int argc, char **argv) {
  only_blocking = argc > 1 && strcmp(argv[1], "blocking") == 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  cl_platform_id ps[16];
  cl_uint np = 0;
  MUST(clGetPlatformIDs(16, ps, &np));
  const char *want = getenv("CLPIN_TEST_PLATFORM");
  for (cl_uint i = 0; i < np && !platform; i++) {
    char name[256] = "";
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    if (!want || !*want || strstr(name, want))
      platform = ps[i];
  }
  if (!platform)
    die("no platform matches CLPIN_TEST_PLATFORM", 0);
  MUST(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
  char version[256] = "";
  clGetPlatformInfo(platform, CL_PLATFORM_VERSION, sizeof version, version, NULL);
  opencl3 = strncmp(version, "OpenCL ", 7) == 0 && atoi(version + 7) >= 3;
  cl_int err;
  ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  MUST(err);
  q = clCreateCommandQueue(ctx, device, 0, &err);
  MUST(err);
  q2 = clCreateCommandQueue(ctx, device, 0, &err);
  MUST(err);
  cl_event probe, gate = clCreateUserEvent(ctx, &err);
  MUST(err);
  MUST(clEnqueueMarkerWithWaitList(q, 0, NULL, &probe));
  MUST(clGetEventInfo(probe, CL_EVENT_COMMAND_TYPE, sizeof marker_type, &marker_type, NULL));
  MUST(clWaitForEvents(1, &probe));
  clReleaseEvent(probe);
  MUST(clEnqueueMarkerWithWaitList(q, 1, &gate, &probe));
  MUST(clGetEventInfo(probe, CL_EVENT_COMMAND_TYPE, sizeof gated_marker_type, &gated_marker_type,
                      NULL));
  MUST(clSetUserEventStatus(gate, CL_COMPLETE));
  MUST(clWaitForEvents(1, &probe));
  clReleaseEvent(probe);
  clReleaseEvent(gate);
  fprintf(stderr, "transcript: the driver's markers are of type 0x%x, behind a user event 0x%x\n",
          (unsigned)marker_type, (unsigned)gated_marker_type);

  SECTION(blocking_roundtrip());
  SECTION(profiling());
  SECTION(invalid_calls());
  if (!only_blocking) {
    SECTION(offset_overflow());
    SECTION(wait_count_without_list());
    SECTION(wait_list_without_count());
    SECTION(null_event_in_wait_list());
  }
  SECTION(special_memory());
  SECTION(rect_transfers());
  SECTION(rect_invalid());
  SECTION(image_transfers());
  if (!only_blocking) {
    SECTION(rect_events());
    SECTION(nonblocking_events());
    SECTION(queue_order());
    SECTION(user_events());
    SECTION(out_of_order());
    SECTION(threads());
    SECTION(thread_contexts());
  }
  SECTION(lifetime(0));
  SECTION(lifetime(1));

  clReleaseCommandQueue(q);
  clReleaseCommandQueue(q2);
  clReleaseContext(ctx);
  OUT("end\n");
  return 0;
}
