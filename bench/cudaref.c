/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA baseline, loaded at run time (see cudaref.h). */
#include "cudaref.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The few CUDA runtime entry points used, by their documented C signatures;
 * cudaError_t is an int-sized enum whose success value is 0. */
typedef int (*set_device_fn)(int);
typedef int (*host_alloc_fn)(void **, size_t, unsigned);
typedef int (*free_fn)(void *);
typedef int (*malloc_fn)(void **, size_t);
typedef int (*memcpy_fn)(void *, const void *, size_t, int);
typedef int (*sync_fn)(void);
typedef const char *(*error_string_fn)(int);
typedef int (*version_fn)(int *);
/* Driver API, only for the device's name. */
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_device_get_fn)(int *, int);
typedef int (*cu_device_name_fn)(char *, int, int);

static struct {
  void *lib;
  set_device_fn set_device;
  host_alloc_fn host_alloc;
  free_fn free_host, free_dev;
  malloc_fn dev_alloc;
  memcpy_fn copy;
  sync_fn sync;
  error_string_fn error_string;
  char name[256], lib_name[128];
  const char *opened; /* the soname cudaref_load opened */
} cu;

/* dlsym's object pointer into a function pointer: ISO C has no cast for it,
 * POSIX guarantees the representation, so copy the bytes. */
static void load_from(void *lib, void *fn_ptr, const char *name) {
  void *p = dlsym(lib, name);
  memcpy(fn_ptr, &p, sizeof p);
}
#define load(field, name) load_from(cu.lib, (field), (name))

/* The entry points every CUDA baseline uses, after the library loads. */
static void load_common(void) {
  load(&cu.set_device, "cudaSetDevice");
  load(&cu.host_alloc, "cudaHostAlloc");
  load(&cu.free_host, "cudaFreeHost");
  load(&cu.dev_alloc, "cudaMalloc");
  load(&cu.free_dev, "cudaFree");
  load(&cu.sync, "cudaDeviceSynchronize");
  load(&cu.error_string, "cudaGetErrorString");
  if (!(cu.set_device && cu.host_alloc && cu.free_host && cu.dev_alloc && cu.free_dev && cu.sync &&
        cu.error_string)) {
    dlclose(cu.lib);
    cu.lib = NULL;
  }
}

const char *cudaref_load(void) {
  static const char *names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                "libcudart.so.11.0"};
  const char *env = getenv("CLPIN_BENCH_CUDART");
  if (cu.lib)
    return cu.opened;
  cu.opened = NULL;
  if (env && *env && (cu.lib = dlopen(env, RTLD_NOW | RTLD_LOCAL)))
    cu.opened = env;
  for (size_t i = 0; !cu.lib && i < sizeof names / sizeof *names; i++)
    if ((cu.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)))
      cu.opened = names[i];
  if (cu.lib)
    load_common();
  return cu.lib ? cu.opened : NULL;
}

void cudaref_symbol(void *fn_ptr, const char *name) {
  void *none = NULL;
  if (cu.lib)
    load(fn_ptr, name);
  else
    memcpy(fn_ptr, &none, sizeof none);
}

static void read_device_name(int device) {
  void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!drv)
    return;
  cu_init_fn init;
  cu_device_get_fn get;
  cu_device_name_fn name;
  load_from(drv, &init, "cuInit");
  load_from(drv, &get, "cuDeviceGet");
  load_from(drv, &name, "cuDeviceGetName");
  int dev;
  if (init && get && name && init(0) == 0 && get(&dev, device) == 0)
    name(cu.name, (int)sizeof cu.name, dev);
  /* The driver library stays loaded: the runtime uses it anyway. */
}

bool cudaref_open(int device, char *why, size_t why_len) {
  const char *opened = cudaref_load();
  if (!opened) {
    snprintf(why, why_len, "no usable CUDA runtime (libcudart) found; set CLPIN_BENCH_CUDART");
    return false;
  }
  load(&cu.copy, "cudaMemcpy");
  int err = -1;
  if (cu.copy && (err = cu.set_device(device)) == 0 && cu.sync() == 0) {
    read_device_name(device);
    version_fn version;
    int v = 0;
    load(&version, "cudaRuntimeGetVersion");
    if (!version || version(&v) != 0)
      v = 0;
    snprintf(cu.lib_name, sizeof cu.lib_name, "%s, runtime %d.%d", opened, v / 1000, v % 1000 / 10);
    return true;
  }
  snprintf(why, why_len, "CUDA runtime unusable (device %d: %s)", device,
           err > 0 && cu.error_string ? cu.error_string(err) : "missing entry points");
  dlclose(cu.lib);
  cu.lib = NULL;
  return false;
}

const char *cudaref_device_name(void) { return cu.name; }
const char *cudaref_library(void) { return cu.lib_name; }

bool cudaref_set_device(int device) { return cu.lib && cu.set_device(device) == 0; }

void *cudaref_host_alloc_flags(size_t n, unsigned flags) {
  void *p = NULL;
  return cu.lib && cu.host_alloc(&p, n, flags) == 0 ? p : NULL;
}

void *cudaref_host_alloc(size_t n) { return cudaref_host_alloc_flags(n, 0); }

void cudaref_host_free(void *p) {
  if (cu.lib && p)
    cu.free_host(p);
}

void *cudaref_dev_alloc(size_t n) {
  void *p = NULL;
  return cu.lib && cu.dev_alloc(&p, n) == 0 ? p : NULL;
}

void cudaref_dev_free(void *p) {
  if (cu.lib && p)
    cu.free_dev(p);
}

bool cudaref_copy(void *host, void *dev, size_t n, cudaref_dir dir) {
  int err = dir == CUDAREF_H2D ? cu.copy(dev, host, n, (int)dir) : cu.copy(host, dev, n, (int)dir);
  /* cudaMemcpy from pageable memory may return before the DMA ends: wait,
   * so every path is timed to completion, as the OpenCL ones are. */
  if (err == 0)
    err = cu.sync();
  if (err != 0)
    fprintf(stderr, "clpin-bench: cudaMemcpy: %s\n", cu.error_string(err));
  return err == 0;
}
