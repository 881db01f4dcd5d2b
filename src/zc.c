/* SPDX-License-Identifier: Apache-2.0 */
/* Zero copy on host-unified devices (CL_DEVICE_HOST_UNIFIED_MEMORY:
 * integrated GPUs, CPU devices): which memory a device's kernels use in
 * place, per vendor, the probe of a queue's device, and page-aligned memory
 * for clpin's own USE_HOST_PTR buffers. Device knowledge only: no pool.
 *
 * The vendor rules come from the vendors' own guides (docs/ZERO_COPY.md
 * cites each). A host-unified device no rule names is probed once, with
 * memory clpin owns (probe_unnamed): clpin never guesses a zero-copy rule
 * from a name it does not know, and without proof it copies. Discrete
 * devices (no host-unified memory)
 * never take any path of this file: clpin__zc_decide answers COPY for them
 * whatever the rule. */
#include "zc.h"

#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the rule table -------------------------------------------------------- */

/* Match order matters: POCL's CPU device reports the CPU's vendor
 * ("GenuineIntel", "AuthenticAMD"), so POCL is recognised by its platform
 * first. */
static const clpin__zc_rule rules[] = {
    /* POCL: USE_HOST_PTR memory is used in place when aligned to the
     * device's base address alignment; its maps return that memory. */
    {"pocl", "portable computing language", NULL, CLPIN__ZC_USE_HOST, CLPIN__ZC_USE_HOST, 0, 1},
    /* Intel processor graphics (and Intel's CPU runtime): ALLOC_HOST_PTR,
     * or USE_HOST_PTR over memory 4096-aligned whose size is a multiple of
     * 64 bytes; host access through map/unmap. */
    {"intel", "intel", "intel", CLPIN__ZC_USE_HOST, CLPIN__ZC_USE_HOST, 4096, 64},
    /* Arm Mali: ALLOC_HOST_PTR + map is the only copy-free way; its
     * USE_HOST_PTR copies to a driver buffer and back on map. */
    {"arm-mali", "arm", "mali", CLPIN__ZC_ALLOC_MAP, CLPIN__ZC_COPY, 0, 1},
    /* Qualcomm Adreno: ALLOC_HOST_PTR + map; caller memory in place needs
     * the cl_qcom_ext_host_ptr extension, which clpin does not use: copied. */
    {"qualcomm-adreno", "qualcomm", "adreno", CLPIN__ZC_ALLOC_MAP, CLPIN__ZC_COPY, 0, 1},
    /* AMD APUs (AMD's own runtime): ALLOC_HOST_PTR is host-resident
     * zero-copy memory reached through map/unmap; caller memory: copied. */
    {"amd-apu", "amd accelerated parallel processing", NULL, CLPIN__ZC_ALLOC_MAP, CLPIN__ZC_COPY, 0,
     1},
    /* Host-unified devices no rule above names (rusticl's llvmpipe, and
     * rusticl or Mesa on Intel and AMD integrated GPUs) are probed once
     * (probe_unnamed below); these two rules match no name, they are what
     * the probe can find. */
    {"probed-use-host", NULL, NULL, CLPIN__ZC_USE_HOST, CLPIN__ZC_USE_HOST, 0, 1},
    {"probed-alloc-map", NULL, NULL, CLPIN__ZC_ALLOC_MAP, CLPIN__ZC_COPY, 0, 1},
    /* Anything else: no rule known, correct copies. */
    {"unknown", NULL, NULL, CLPIN__ZC_COPY, CLPIN__ZC_COPY, 0, 1},
};
#define NRULES (sizeof rules / sizeof rules[0])

const clpin__zc_rule *clpin__zc_rules(size_t *n) {
  *n = NRULES;
  return rules;
}

/* Case-insensitive substring test; a NULL needle never matches. */
static bool contains(const char *hay, const char *needle) {
  if (!hay || !needle)
    return false;
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] && tolower((unsigned char)hay[i]) == needle[i])
      i++;
    if (i == n)
      return true;
  }
  return false;
}

const clpin__zc_rule *clpin__zc_rule_for(const char *platform, const char *device_name,
                                         const char *device_vendor) {
  for (size_t i = 0; i + 1 < NRULES; i++) {
    const clpin__zc_rule *r = &rules[i];
    if (contains(platform, r->platform) || contains(device_name, r->device) ||
        contains(device_vendor, r->device))
      return r;
  }
  return &rules[NRULES - 1];
}

static const clpin__zc_rule *rule_named(const char *name) {
  for (size_t i = 0; i < NRULES; i++)
    if (strcmp(rules[i].name, name) == 0)
      return &rules[i];
  return NULL;
}

clpin__zc_how clpin__zc_decide(const clpin__zc_rule *rule, bool unified, clpin__zc_whose whose,
                               const void *ptr, size_t nbytes, size_t base_align) {
  if (!rule || !unified)
    return CLPIN__ZC_COPY;
  if (whose == CLPIN__ZC_OWN)
    return rule->own;
  if (rule->caller != CLPIN__ZC_USE_HOST || !ptr || nbytes == 0)
    return CLPIN__ZC_COPY;
  size_t align = rule->align ? rule->align : base_align;
  if (align > 1 && (uintptr_t)ptr % align != 0)
    return CLPIN__ZC_COPY;
  if (rule->size_multiple > 1 && nbytes % rule->size_multiple != 0)
    return CLPIN__ZC_COPY;
  return CLPIN__ZC_USE_HOST;
}

/* ---- host-unified devices no rule names ---------------------------------- */

#define PAGE ((size_t)4096)

static void CL_CALLBACK free_probe_memory(cl_mem mem, void *p) {
  (void)mem;
  free(p);
}

/* Whether a USE_HOST_PTR buffer over page-aligned memory is that memory:
 * the device reads what the host wrote there after the buffer was made,
 * and the host sees what the device wrote, with no map in between. The
 * specification leaves such access undefined (it promises the bytes only
 * through a map), but the memory is clpin's own and ordinary: a driver
 * that keeps a copy shows stale bytes, nothing worse. (A map proves
 * nothing: for USE_HOST_PTR it returns the host pointer on every driver,
 * copying into it where the driver keeps its own storage, as Mali's does.) */
static bool use_host_in_place(cl_context ctx, cl_command_queue q) {
  size_t n = 2 * PAGE;
  unsigned char *p = aligned_alloc(PAGE, n), back[64];
  if (!p)
    return false;
  memset(p, 0x11, n);
  cl_int err;
  cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, n, p, &err);
  if (err != CL_SUCCESS) {
    free(p);
    return false;
  }
  if (clSetMemObjectDestructorCallback(b, free_probe_memory, p) != CL_SUCCESS) {
    clReleaseMemObject(b);
    return false; /* p's end unknown: left to the process rather than freed early */
  }
  memset(p + PAGE, 0x22, sizeof back); /* the host writes, unmapped */
  bool in_place =
      clEnqueueReadBuffer(q, b, CL_TRUE, PAGE, sizeof back, back, 0, NULL, NULL) == CL_SUCCESS &&
      back[0] == 0x22 && back[sizeof back - 1] == 0x22;
  const unsigned char pattern = 0x33; /* the device writes; the host looks */
  in_place = in_place &&
             clEnqueueFillBuffer(q, b, &pattern, 1, 0, sizeof back, 0, NULL, NULL) == CL_SUCCESS &&
             clFinish(q) == CL_SUCCESS && p[0] == 0x33 && p[sizeof back - 1] == 0x33;
  clFinish(q);
  clReleaseMemObject(b);
  return in_place;
}

/* Whether an ALLOC_HOST_PTR buffer is mapped at the same address each time,
 * across a device write: memory the host reaches in place, not a copy the
 * driver makes per map. */
static bool alloc_map_stable(cl_context ctx, cl_command_queue q) {
  size_t n = 2 * PAGE;
  cl_int err;
  cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &err);
  if (err != CL_SUCCESS)
    return false;
  void *at[2] = {NULL, NULL};
  const unsigned char pattern = 0x44;
  for (int i = 0; i < 2 && err == CL_SUCCESS; i++) {
    at[i] =
        clEnqueueMapBuffer(q, b, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, n, 0, NULL, NULL, &err);
    if (err == CL_SUCCESS)
      err = clEnqueueUnmapMemObject(q, b, at[i], 0, NULL, NULL);
    if (err == CL_SUCCESS && i == 0)
      err = clEnqueueFillBuffer(q, b, &pattern, 1, 0, n, 0, NULL, NULL);
  }
  clFinish(q);
  clReleaseMemObject(b);
  return err == CL_SUCCESS && at[0] && at[0] == at[1];
}

/* The rule of a host-unified device no rule names, probed once per device
 * on a queue of its own (the caller's queue sees nothing of it). */
#define PROBED_MAX 16
static pthread_mutex_t probed_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  cl_device_id dev;
  const clpin__zc_rule *rule;
} probed[PROBED_MAX];
static size_t nprobed;

static const clpin__zc_rule *rule_named(const char *name);

static const clpin__zc_rule *probe_unnamed(cl_command_queue caller_q, cl_device_id dev) {
  pthread_mutex_lock(&probed_lock);
  for (size_t i = 0; i < nprobed; i++)
    if (probed[i].dev == dev) {
      const clpin__zc_rule *r = probed[i].rule;
      pthread_mutex_unlock(&probed_lock);
      return r;
    }
  pthread_mutex_unlock(&probed_lock);
  const clpin__zc_rule *r = &rules[NRULES - 1];
  cl_context ctx;
  cl_int err = clGetCommandQueueInfo(caller_q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
  cl_command_queue q = err == CL_SUCCESS ? clCreateCommandQueue(ctx, dev, 0, &err) : NULL;
  if (err != CL_SUCCESS)
    return r; /* not remembered: the next call probes again */
  if (use_host_in_place(ctx, q))
    r = rule_named("probed-use-host");
  else if (alloc_map_stable(ctx, q))
    r = rule_named("probed-alloc-map");
  clReleaseCommandQueue(q);
  clpin__log("zero copy: a host-unified device no rule names, probed: rule %s", r->name);
  pthread_mutex_lock(&probed_lock);
  if (nprobed < PROBED_MAX) {
    probed[nprobed].dev = dev;
    probed[nprobed].rule = r;
    nprobed++;
  }
  pthread_mutex_unlock(&probed_lock);
  return r;
}

cl_int clpin__zc_probe(cl_command_queue q, clpin__zc_device *out) {
  cl_device_id dev;
  cl_bool unified = CL_FALSE;
  cl_int err = clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(dev, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
  if (err != CL_SUCCESS)
    return err;
  const char *seam = getenv("CLPIN__TEST_UNIFIED");
  const clpin__zc_rule *forced = seam && *seam ? rule_named(seam) : NULL;
  out->rule = &rules[NRULES - 1];
  out->unified = unified == CL_TRUE || forced || (seam && strcmp(seam, "probe") == 0);
  out->base_align = 1;
  if (!out->unified)
    return CL_SUCCESS; /* a discrete device: one query, nothing of this file applies */
  cl_platform_id plat;
  char pname[256] = "", dname[256] = "", vname[256] = "";
  cl_uint bits = 0;
  err = clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL);
  if (err == CL_SUCCESS)
    err = clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof vname - 1, vname, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL);
  if (err != CL_SUCCESS)
    return err;
  out->rule = forced ? forced : clpin__zc_rule_for(pname, dname, vname);
  /* No name matched (or the seam asks for the probe, CLPIN__TEST_UNIFIED=probe):
   * ask the device itself. */
  if ((!forced && out->rule == &rules[NRULES - 1]) || (seam && strcmp(seam, "probe") == 0))
    out->rule = probe_unnamed(q, dev);
  out->base_align = bits / 8 ? bits / 8 : 1;
  return CL_SUCCESS;
}

/* ---- page-aligned memory for clpin's own USE_HOST_PTR buffers ------------ */

#define CACHE_SLOTS 8
#define CACHE_BYTES ((size_t)1 << 30)

typedef struct {
  void *p;
  size_t cap;
} region;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static region cache[CACHE_SLOTS];
static size_t ncache, cached_bytes;

/* A region of at least need bytes (a page multiple): a cached one at most
 * twice as large, else a fresh one. */
static region region_get(size_t need) {
  region got = {NULL, 0};
  pthread_mutex_lock(&cache_lock);
  size_t best = CACHE_SLOTS;
  for (size_t i = 0; i < ncache; i++)
    if (cache[i].cap >= need && cache[i].cap / 2 <= need &&
        (best == CACHE_SLOTS || cache[i].cap < cache[best].cap))
      best = i;
  if (best != CACHE_SLOTS) {
    got = cache[best];
    cache[best] = cache[--ncache];
    cached_bytes -= got.cap;
  }
  pthread_mutex_unlock(&cache_lock);
  if (!got.p) {
    got.p = aligned_alloc(PAGE, need);
    got.cap = got.p ? need : 0;
  }
  return got;
}

/* Keep a region for reuse, dropping the oldest over the cache's bounds. */
static void region_put(region r) {
  region evicted[CACHE_SLOTS];
  size_t nevicted = 0;
  pthread_mutex_lock(&cache_lock);
  if (r.cap <= CACHE_BYTES) {
    while (ncache > 0 && (ncache == CACHE_SLOTS || cached_bytes + r.cap > CACHE_BYTES)) {
      evicted[nevicted++] = cache[0];
      cached_bytes -= cache[0].cap;
      memmove(cache, cache + 1, (ncache - 1) * sizeof *cache);
      ncache--;
    }
    cache[ncache++] = r;
    cached_bytes += r.cap;
    r.p = NULL;
  }
  pthread_mutex_unlock(&cache_lock);
  for (size_t i = 0; i < nevicted; i++)
    free(evicted[i].p);
  free(r.p);
}

static void CL_CALLBACK region_back(cl_mem mem, void *arg) {
  (void)mem;
  region *r = arg;
  region_put(*r);
  free(r);
}

cl_mem clpin__zc_own_buffer(cl_context ctx, size_t nbytes, size_t size_multiple, const void *fill,
                            cl_int *err) {
  size_t m = size_multiple > 1 ? size_multiple : 1;
  size_t size = (nbytes + m - 1) / m * m;
  size_t need = (size + PAGE - 1) / PAGE * PAGE;
  region *r = malloc(sizeof *r);
  if (!r) {
    *err = CL_OUT_OF_HOST_MEMORY;
    return NULL;
  }
  *r = region_get(need);
  if (!r->p) {
    free(r);
    *err = CL_OUT_OF_HOST_MEMORY;
    return NULL;
  }
  /* Filled before any buffer exists: the memory is still the host's alone. */
  if (fill)
    memcpy(r->p, fill, nbytes);
  cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, size, r->p, err);
  if (*err != CL_SUCCESS) {
    region_put(*r);
    free(r);
    return NULL;
  }
  *err = clSetMemObjectDestructorCallback(buf, region_back, r);
  if (*err != CL_SUCCESS) {
    /* Without the callback the memory's end is unknown: leak it rather
     * than free memory a command may still use. */
    clReleaseMemObject(buf);
    return NULL;
  }
  return buf;
}
