/* SPDX-License-Identifier: Apache-2.0 */
/* layer-image: a small image pipeline as an unmodified OpenCL program
 * writes it (plain OpenCL only, never clpin): per frame, upload a region of
 * interest of a host image into a buffer (clEnqueueWriteBufferRect) and a
 * whole RGBA8 image (clEnqueueWriteImage), run a kernel on each, download
 * both (clEnqueueReadBufferRect, clEnqueueReadImage). Run it without and
 * with OPENCL_LAYERS=libclpin-layer.so: the difference is the layer's gain
 * on rect and image transfers (bench/gpu-rect.sh does).
 *
 * Prints each frame's rates, then per operation the median / min / max over
 * the frames of its rate (GB/s), and the median frame time; the last frame's results are
 * checked against the host's own computation (exit 3 on a mismatch).
 *
 *   layer-image [--platform NAME] [--side N] [--frames N] [--pinned 1]
 *     --side: the image is N x N RGBA8 and the ROI N x N bytes x 4 (default 4096: 64 MiB each)
 *     --pinned 1: the host memory is mapped CL_MEM_ALLOC_HOST_PTR buffers
 *       (pinned) instead of malloc: the bus rate of this program's own
 *       transfers, the ceiling of what staging can reach (run it without
 *       the layer)
 */
#define CL_TARGET_OPENCL_VERSION 120
#include "benchcl.h"
#include "benchstat.h"

#include <CL/cl.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXF 64
#define PAD 64 /* the host image's rows are wider than the ROI */

#define CHECK(expr) BENCH_CL_CHECK("layer-image", expr, bench_cl_code)

static const char *src =
    "__kernel void invert(__read_only image2d_t in, __write_only image2d_t out) {\n"
    "  int2 p = (int2)(get_global_id(0), get_global_id(1));\n"
    "  uint4 v = read_imageui(in, p);\n"
    "  write_imageui(out, p, (uint4)(255) - v);\n"
    "}\n"
    "__kernel void bump(__global uchar *b) { size_t i = get_global_id(0); b[i] = b[i] + 1; }\n";

int main(int argc, char **argv) {
  const char *want = NULL;
  size_t side = 4096;
  int frames = 7, pinned = 0;
  const bench_opt opts[] = {
      BENCH_OPT("--platform", BENCH_TEXT, &want), BENCH_OPT("--side", BENCH_SIZE, &side),
      BENCH_OPT("--frames", BENCH_INT, &frames), BENCH_OPT("--pinned", BENCH_INT, &pinned)};
  BENCH_PARSE_OPTS("layer-image", "[--platform NAME] [--side N] [--frames N] [--pinned 0|1]\n",
                   argc, argv, opts);
  if (side < 16 || frames < 1 || frames > MAXF) {
    fprintf(stderr, "layer-image: --side at least 16, --frames 1 ... %d\n", MAXF);
    return 2;
  }
  cl_device_id dev;
  cl_context ctx;
  cl_command_queue q;
  bench_cl_open("layer-image", want, bench_cl_code, &dev, &ctx, &q);
  cl_int err;
  cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
  CHECK(err);
  CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
  cl_kernel invert = clCreateKernel(prog, "invert", &err);
  CHECK(err);
  cl_kernel bump = clCreateKernel(prog, "bump", &err);
  CHECK(err);

  size_t row = side * 4, pitch = row + PAD, n = row * side, hn = pitch * side;
  cl_image_format f = {CL_RGBA, CL_UNSIGNED_INT8};
  cl_image_desc d;
  memset(&d, 0, sizeof d);
  d.image_type = CL_MEM_OBJECT_IMAGE2D;
  d.image_width = side;
  d.image_height = side;
  cl_mem img_in = clCreateImage(ctx, CL_MEM_READ_ONLY, &f, &d, NULL, &err);
  CHECK(err);
  cl_mem img_out = clCreateImage(ctx, CL_MEM_WRITE_ONLY, &f, &d, NULL, &err);
  CHECK(err);
  cl_mem roi = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CHECK(err);
  cl_mem pin[3] = {NULL, NULL, NULL};
  unsigned char *mem[3];
  for (int i = 0; i < 3; i++) {
    if (pinned) {
      pin[i] = clCreateBuffer(ctx, CL_MEM_ALLOC_HOST_PTR, hn, NULL, &err);
      CHECK(err);
      mem[i] = clEnqueueMapBuffer(q, pin[i], CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, hn, 0, NULL,
                                  NULL, &err);
      CHECK(err);
    } else {
      mem[i] = malloc(hn);
      if (!mem[i])
        return 1;
    }
  }
  unsigned char *host = mem[0], *img_back = mem[1], *roi_back = mem[2];
  for (size_t i = 0; i < hn; i++)
    host[i] = (unsigned char)(i * 2654435761u >> 13);
  CHECK(clSetKernelArg(invert, 0, sizeof img_in, &img_in));
  CHECK(clSetKernelArg(invert, 1, sizeof img_out, &img_out));
  CHECK(clSetKernelArg(bump, 0, sizeof roi, &roi));

  enum { UP_RECT, UP_IMAGE, DOWN_RECT, DOWN_IMAGE, NOPS };
  static const char *const names[NOPS] = {"upload rect (GB/s)", "upload image (GB/s)",
                                          "download rect (GB/s)", "download image (GB/s)"};
  double rate[NOPS][MAXF], frame[MAXF];
  size_t z[3] = {0, 0, 0}, rr[3] = {row, side, 1}, ir[3] = {side, side, 1};
  size_t g2[2] = {side, side};
  for (int fr = -1; fr < frames; fr++) { /* frame -1 warms up */
    double t[NOPS + 1];
    double f0 = bench_now_s();
    t[0] = bench_now_s();
    CHECK(clEnqueueWriteBufferRect(q, roi, CL_TRUE, z, z, rr, 0, 0, pitch, 0, host, 0, NULL, NULL));
    t[1] = bench_now_s();
    CHECK(clEnqueueWriteImage(q, img_in, CL_TRUE, z, ir, pitch, 0, host, 0, NULL, NULL));
    t[2] = bench_now_s();
    CHECK(clEnqueueNDRangeKernel(q, bump, 1, NULL, &n, NULL, 0, NULL, NULL));
    CHECK(clEnqueueNDRangeKernel(q, invert, 2, NULL, g2, NULL, 0, NULL, NULL));
    CHECK(clFinish(q));
    double k1 = bench_now_s();
    CHECK(clEnqueueReadBufferRect(q, roi, CL_TRUE, z, z, rr, 0, 0, pitch, 0, roi_back, 0, NULL,
                                  NULL));
    double t3 = bench_now_s();
    CHECK(clEnqueueReadImage(q, img_out, CL_TRUE, z, ir, pitch, 0, img_back, 0, NULL, NULL));
    double t4 = bench_now_s();
    if (fr < 0)
      continue;
    rate[UP_RECT][fr] = (double)n / (t[1] - t[0]) / 1e9;
    rate[UP_IMAGE][fr] = (double)n / (t[2] - t[1]) / 1e9;
    rate[DOWN_RECT][fr] = (double)n / (t3 - k1) / 1e9;
    rate[DOWN_IMAGE][fr] = (double)n / (t4 - t3) / 1e9;
    frame[fr] = (t4 - f0) * 1e3;
  }
  for (size_t y = 0; y < side; y++)
    for (size_t x = 0; x < row; x++) {
      unsigned char h = host[y * pitch + x];
      if (roi_back[y * pitch + x] != (unsigned char)(h + 1) ||
          img_back[y * pitch + x] != (unsigned char)(255 - h)) {
        fprintf(stderr, "layer-image: mismatch at row %zu byte %zu\n", y, x);
        return 3;
      }
    }
  char dname[256];
  bench_cl_name(dev, dname, sizeof dname);
  printf("layer-image on %s: %zu x %zu RGBA8 (%zu MiB) per transfer, %s host memory, results "
         "verified\n",
         dname, side, side, n >> 20, pinned ? "pinned" : "malloc");
  /* Each frame's rates (GB/s: upload rect, upload image, download rect,
   * download image) for held counts; then each one's median line. */
  for (int fr = 0; fr < frames; fr++)
    printf("  frame %d: %.3f %.3f %.3f %.3f GB/s, %.3f ms\n", fr, rate[UP_RECT][fr],
           rate[UP_IMAGE][fr], rate[DOWN_RECT][fr], rate[DOWN_IMAGE][fr], frame[fr]);
  for (int o = 0; o < NOPS; o++)
    bench_print_median(names[o], rate[o], frames, "GB/s");
  bench_print_median("frame (ms)", frame, frames, "ms");
  for (int i = 0; i < 3; i++) {
    if (pinned) {
      CHECK(clEnqueueUnmapMemObject(q, pin[i], mem[i], 0, NULL, NULL));
      CHECK(clFinish(q));
      clReleaseMemObject(pin[i]);
    } else {
      free(mem[i]);
    }
  }
  clReleaseMemObject(img_in);
  clReleaseMemObject(img_out);
  clReleaseMemObject(roi);
  clReleaseKernel(invert);
  clReleaseKernel(bump);
  clReleaseProgram(prog);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return 0;
}
