/* SPDX-License-Identifier: Apache-2.0 */
/* layer_entry: the loader's side of libclpin-layer.so, without a loader.
 *
 * dlopens the layer, as both ocl-icd and the Khronos loader do, and checks
 * clGetLayerInfo, clInitLayer and clInitLayerWithProperties against a fake
 * next-stage dispatch table: the returned table must wrap the entries the
 * layer intercepts, pass every other entry through unchanged, and leave
 * entries the loader does not know NULL. No OpenCL call is made.
 * Usage: layer_entry /abs/path/libclpin-layer.so */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl_layer.h>

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef cl_int(CL_API_CALL *init_with_props_fn)(cl_uint, const cl_icd_dispatch *, cl_uint *,
                                                const cl_icd_dispatch **, const cl_properties *);

#define NENTRIES (sizeof(cl_icd_dispatch) / sizeof(void *))

static int failures;
#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("layer_entry: FAIL %s: ", #cond);                                                     \
      printf(__VA_ARGS__);                                                                         \
      printf("\n");                                                                                \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* A fake next stage: entry i holds the address 0x1000 + 16 i (never called). */
static void fake_table(cl_icd_dispatch *t) {
  void **slots = (void **)t;
  for (size_t i = 0; i < NENTRIES; i++)
    slots[i] = (void *)(uintptr_t)(0x1000 + 16 * i);
}

static size_t slot_of(size_t offset) { return offset / sizeof(void *); }

/* Checks one returned table against the fake one of which `known` entries
 * the loader passed. */
static void check_table(const char *how, const cl_icd_dispatch *got, cl_uint known) {
  const size_t wrapped[] = {
      slot_of(offsetof(cl_icd_dispatch, clEnqueueWriteBuffer)),
      slot_of(offsetof(cl_icd_dispatch, clEnqueueReadBuffer)),
      slot_of(offsetof(cl_icd_dispatch, clCreateContext)),
      slot_of(offsetof(cl_icd_dispatch, clReleaseContext)),
      slot_of(offsetof(cl_icd_dispatch, clRetainContext)),
      slot_of(offsetof(cl_icd_dispatch, clEnqueueMapBuffer)),
      slot_of(offsetof(cl_icd_dispatch, clEnqueueUnmapMemObject)),
      slot_of(offsetof(cl_icd_dispatch, clReleaseMemObject)),
      slot_of(offsetof(cl_icd_dispatch, clEnqueueWriteBufferRect)),
      slot_of(offsetof(cl_icd_dispatch, clEnqueueReadBufferRect)),
      slot_of(offsetof(cl_icd_dispatch, clEnqueueWriteImage)),
      slot_of(offsetof(cl_icd_dispatch, clEnqueueReadImage)),
  };
  void *const *slots = (void *const *)got;
  size_t same = 0, changed = 0;
  for (size_t i = 0; i < NENTRIES; i++) {
    void *fake = (void *)(uintptr_t)(0x1000 + 16 * i);
    int must_wrap = 0;
    for (size_t k = 0; k < sizeof wrapped / sizeof *wrapped; k++)
      must_wrap |= wrapped[k] == i && i < known;
    if (i >= known) {
      EXPECT(slots[i] == NULL, "%s: entry %zu unknown to the loader is not NULL", how, i);
    } else if (must_wrap) {
      EXPECT(slots[i] != fake && slots[i] != NULL, "%s: entry %zu is not wrapped", how, i);
      changed++;
    } else if (slots[i] == fake) {
      same++;
    } else {
      changed++; /* a wrapped entry beyond the ones listed */
    }
  }
  EXPECT(changed < 20, "%s: %zu entries changed", how, changed);
  printf("layer_entry: %s: %zu entries passed through, %zu wrapped\n", how, same, changed);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: layer_entry /abs/path/libclpin-layer.so\n");
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("layer_entry: FAIL dlopen: %s\n", dlerror());
    return 1;
  }
  /* POSIX's way to turn dlsym's answer into a function pointer. */
  pfn_clGetLayerInfo info;
  pfn_clInitLayer init;
  init_with_props_fn init_props;
  *(void **)&info = dlsym(h, "clGetLayerInfo");
  *(void **)&init = dlsym(h, "clInitLayer");
  *(void **)&init_props = dlsym(h, "clInitLayerWithProperties");
  EXPECT(info && init && init_props, "an entry point is missing");
  EXPECT(!dlsym(h, "clpin_write") && !dlsym(h, "clpin__layer_next"),
         "the layer exports clpin's symbols");
  if (!info || !init || !init_props)
    return 1;

  cl_layer_api_version version = 0;
  size_t size = 0;
  EXPECT(info(CL_LAYER_API_VERSION, sizeof version, &version, &size) == CL_SUCCESS &&
             version == CL_LAYER_API_VERSION_100 && size == sizeof version,
         "version %u", (unsigned)version);
  EXPECT(info(CL_LAYER_API_VERSION, 1, &version, NULL) == CL_INVALID_VALUE, "short buffer");
  char name[256] = "";
  EXPECT(info(CL_LAYER_NAME, 0, NULL, &size) == CL_SUCCESS && size > 1 && size <= sizeof name,
         "name size %zu", size);
  EXPECT(info(CL_LAYER_NAME, sizeof name, name, NULL) == CL_SUCCESS && strstr(name, "clpin"),
         "name '%s'", name);
  EXPECT(info(0x1234, sizeof name, name, NULL) == CL_INVALID_VALUE, "unknown query");

  static cl_icd_dispatch fake;
  fake_table(&fake);
  cl_uint n = 0;
  const cl_icd_dispatch *got = NULL;
  EXPECT(init(NENTRIES, NULL, &n, &got) == CL_INVALID_VALUE, "NULL target accepted");
  EXPECT(init(NENTRIES, &fake, &n, &got) == CL_SUCCESS && got && n == NENTRIES, "clInitLayer");
  if (got)
    check_table("clInitLayer", got, NENTRIES);
  /* A loader that knows only the OpenCL 1.2 entries. */
  cl_uint known = (cl_uint)slot_of(offsetof(cl_icd_dispatch, clCreateCommandQueueWithProperties));
  got = NULL;
  EXPECT(init(known, &fake, &n, &got) == CL_SUCCESS && got, "clInitLayer, short table");
  if (got)
    check_table("clInitLayer, 1.2 loader", got, known);
  const cl_properties props[] = {0};
  got = NULL;
  EXPECT(init_props(NENTRIES, &fake, &n, &got, props) == CL_SUCCESS && got && n == NENTRIES,
         "clInitLayerWithProperties");
  if (got)
    check_table("clInitLayerWithProperties", got, NENTRIES);
  got = NULL;
  EXPECT(init_props(NENTRIES, &fake, &n, &got, NULL) == CL_SUCCESS && got,
         "clInitLayerWithProperties, no properties");
  printf("layer_entry: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
