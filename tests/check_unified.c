/* SPDX-License-Identifier: Apache-2.0 */
/* Host-unified devices (unified.c, the zc paths of tensor.c,
 * clpin_host_buffer): the vendor rule table for every vendor/device it names
 * (no device needed), then each zero-copy path byte-exact in both directions
 * with stats proving which path ran. The device cases run on POCL (CI stage
 * 10-unit; with CLPIN__TEST_UNIFIED=probe, through the probe of unnamed
 * devices), on rusticl's llvmpipe (stage 32, probed) and on Oclgrind with
 * CLPIN__TEST_UNIFIED=pocl (stage 30). */
#include "testutil.h"
#include "zc.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static test_cl T;
static clpin__zc_device Z;

static void setup(void) {
  test_cl_open(&T);
  CL_OK(clpin__zc_probe(T.queue, &Z));
  /* This suite tests the zero-copy paths: a device without them is a
   * failure here, not a skip. */
  ck_assert_msg(Z.unified && Z.rule->own != CLPIN__ZC_COPY,
                "device rule %s (unified %d) has no zero-copy path", Z.rule->name, Z.unified);
}
static void teardown(void) { test_cl_close(&T); }

/* ---- the rule table (no device) ------------------------------------------ */

typedef struct {
  const char *platform, *device, *vendor, *rule;
} device_case;

/* Platform, device and vendor strings as those drivers report them. */
static const device_case devices[] = {
    {"Portable Computing Language", "cpu-haswell-Intel(R) Xeon(R) CPU", "GenuineIntel", "pocl"},
    {"Portable Computing Language", "cpu-znver3-AMD Ryzen 7 5800X", "AuthenticAMD", "pocl"},
    {"Intel(R) OpenCL Graphics", "Intel(R) UHD Graphics 630", "Intel(R) Corporation", "intel"},
    {"Intel(R) OpenCL", "Intel(R) Core(TM) i7-8700 CPU", "Intel(R) Corporation", "intel"},
    {"ARM Platform", "Mali-G78", "ARM", "arm-mali"},
    {"QUALCOMM Snapdragon(TM)", "QUALCOMM Adreno(TM)", "QUALCOMM", "qualcomm-adreno"},
    {"AMD Accelerated Parallel Processing", "gfx90c", "Advanced Micro Devices, Inc.", "amd-apu"},
    {"NVIDIA CUDA", "NVIDIA H100 80GB HBM3", "NVIDIA Corporation", "unknown"},
    {"Oclgrind", "Oclgrind Simulator", "University of Bristol", "unknown"},
    /* Named by no rule: a host-unified one is probed (clpin__zc_probe). */
    {"rusticl", "llvmpipe (LLVM 15.0.6, 256 bits)", "Mesa/X.org", "unknown"},
    {"", "", "", "unknown"},
};

START_TEST(rules_match_devices) {
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
    const device_case *d = &devices[i];
    const clpin__zc_rule *r = clpin__zc_rule_for(d->platform, d->device, d->vendor);
    ck_assert_msg(strcmp(r->name, d->rule) == 0, "%s / %s: rule %s, want %s", d->platform,
                  d->device, r->name, d->rule);
  }
  ck_assert_str_eq(clpin__zc_rule_for(NULL, NULL, NULL)->name, "unknown");
}
END_TEST

static const clpin__zc_rule *rule(const char *name) {
  size_t n;
  const clpin__zc_rule *all = clpin__zc_rules(&n);
  for (size_t i = 0; i < n; i++)
    if (strcmp(all[i].name, name) == 0)
      return &all[i];
  ck_abort_msg("no rule %s", name);
  return NULL;
}

/* One decision: rule, unified, whose, pointer offset from a page, size,
 * base alignment -> expected. */
typedef struct {
  const char *rule;
  bool unified;
  clpin__zc_whose whose;
  size_t misalign, nbytes, base_align;
  clpin__zc_how want;
} decision_case;

#define OWN CLPIN__ZC_OWN
#define CALLER CLPIN__ZC_CALLER
#define COPY CLPIN__ZC_COPY
#define USE CLPIN__ZC_USE_HOST
#define MAP CLPIN__ZC_ALLOC_MAP
static const decision_case decisions[] = {
    /* POCL: own memory in place; caller memory in place when aligned to the
     * device's base address alignment, any size. */
    {"pocl", true, OWN, 0, 4096, 128, USE},
    {"pocl", true, CALLER, 0, 4096, 128, USE},
    {"pocl", true, CALLER, 128, 1000, 128, USE},
    {"pocl", true, CALLER, 64, 4096, 128, COPY},
    {"pocl", true, CALLER, 1, 4096, 128, COPY},
    /* Intel: 4096-aligned and a multiple of 64 bytes, whatever the base
     * alignment says. */
    {"intel", true, OWN, 0, 100, 64, USE},
    {"intel", true, CALLER, 0, 8192, 64, USE},
    {"intel", true, CALLER, 0, 8192 + 64, 64, USE},
    {"intel", true, CALLER, 0, 8192 + 1, 64, COPY},
    {"intel", true, CALLER, 64, 8192, 64, COPY},
    {"intel", true, CALLER, 2048, 8192, 64, COPY},
    /* Mali, Adreno, AMD APUs: ALLOC_HOST_PTR + map for clpin's memory, the
     * caller's copied. */
    {"arm-mali", true, OWN, 0, 4096, 64, MAP},
    {"arm-mali", true, CALLER, 0, 4096, 64, COPY},
    {"qualcomm-adreno", true, OWN, 0, 4096, 64, MAP},
    {"qualcomm-adreno", true, CALLER, 0, 4096, 64, COPY},
    {"amd-apu", true, OWN, 0, 4096, 64, MAP},
    {"amd-apu", true, CALLER, 0, 4096, 64, COPY},
    /* What the probe of an unnamed host-unified device can find: memory
     * used in place (as POCL's rule, the device's base alignment), or
     * ALLOC_HOST_PTR memory mapped in place (as Mali's). */
    {"probed-use-host", true, OWN, 0, 4096, 128, USE},
    {"probed-use-host", true, CALLER, 128, 1000, 128, USE},
    {"probed-use-host", true, CALLER, 64, 4096, 128, COPY},
    {"probed-alloc-map", true, OWN, 0, 4096, 64, MAP},
    {"probed-alloc-map", true, CALLER, 0, 4096, 64, COPY},
    /* Unknown: copies. */
    {"unknown", true, OWN, 0, 4096, 64, COPY},
    {"unknown", true, CALLER, 0, 4096, 64, COPY},
    /* Empty caller memory is nothing to use in place. */
    {"pocl", true, CALLER, 0, 0, 128, COPY},
};

START_TEST(rules_decide) {
  unsigned char *page = aligned_alloc(4096, 3 * 4096);
  ck_assert_ptr_nonnull(page);
  for (size_t i = 0; i < sizeof decisions / sizeof decisions[0]; i++) {
    const decision_case *d = &decisions[i];
    const void *p = d->whose == OWN ? NULL : page + d->misalign;
    clpin__zc_how got =
        clpin__zc_decide(rule(d->rule), d->unified, d->whose, p, d->nbytes, d->base_align);
    ck_assert_msg(got == d->want, "case %zu (%s): %d, want %d", i, d->rule, (int)got, (int)d->want);
  }
  /* A device without host-unified memory (every discrete GPU) takes no
   * zero-copy path, under any rule, for any memory. */
  size_t n;
  const clpin__zc_rule *all = clpin__zc_rules(&n);
  ck_assert_str_eq(all[n - 1].name, "unknown");
  for (size_t i = 0; i < n; i++) {
    ck_assert_int_eq(clpin__zc_decide(&all[i], false, OWN, NULL, 4096, 64), COPY);
    ck_assert_int_eq(clpin__zc_decide(&all[i], false, CALLER, page, 4096, 64), COPY);
  }
  ck_assert_int_eq(clpin__zc_decide(NULL, true, OWN, NULL, 4096, 64), COPY);
  free(page);
}
END_TEST

/* ---- the probe of devices no rule names ---------------------------------- */

/* Under CLPIN__TEST_UNIFIED=probe (or on a host-unified device no rule
 * names, rusticl's llvmpipe), the rule comes from the probe; on POCL and
 * llvmpipe, whose USE_HOST_PTR buffers are the host memory itself, it
 * finds that. A device the table names is never probed. Asked twice, the
 * answer is the same. */
START_TEST(probe_unnamed_device) {
  test_cl_open(&T);
  clpin__zc_device z1, z2;
  CL_OK(clpin__zc_probe(T.queue, &z1));
  CL_OK(clpin__zc_probe(T.queue, &z2));
  char pname[256] = "";
  CL_OK(clGetPlatformInfo(T.platform, CL_PLATFORM_NAME, sizeof pname, pname, NULL));
  const char *seam = getenv("CLPIN__TEST_UNIFIED");
  bool probed = (seam && strcmp(seam, "probe") == 0) || strstr(pname, "rusticl");
  ck_assert_ptr_eq(z1.rule, z2.rule);
  if (probed) {
    ck_assert(z1.unified);
    ck_assert_str_eq(z1.rule->name, "probed-use-host");
  } else {
    /* A device the table names keeps its measured rule: never probed. */
    ck_assert_msg(strncmp(z1.rule->name, "probed", 6) != 0, "%s: rule %s", pname, z1.rule->name);
  }
  /* Every other device of the platform is asked on its own queue (POCL's two
   * devices under POCL_DEVICES="pthread pthread", tests/unified.cmake): each
   * finds the same rule as the first, twice. */
  cl_device_id devs[8];
  cl_uint ndev = 0;
  CL_OK(clGetDeviceIDs(T.platform, CL_DEVICE_TYPE_ALL, 8, devs, &ndev));
  ndev = ndev < 8 ? ndev : 8;
  for (cl_uint d = 0; d < ndev; d++) {
    if (devs[d] == T.device)
      continue;
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &devs[d], NULL, NULL, &err);
    CL_OK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, devs[d], 0, &err);
    CL_OK(err);
    clpin__zc_device zd1, zd2;
    CL_OK(clpin__zc_probe(q, &zd1));
    CL_OK(clpin__zc_probe(q, &zd2));
    ck_assert_msg(zd1.rule == z1.rule && zd2.rule == z1.rule, "device %u: rule %s, first device %s",
                  d, zd1.rule->name, z1.rule->name);
    CL_OK(clReleaseCommandQueue(q));
    CL_OK(clReleaseContext(ctx));
  }
  test_cl_close(&T);
}
END_TEST

/* ---- device paths --------------------------------------------------------- */

static clpin_stats stats_now(void) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  return test_stats(pool);
}

/* What moved between two snapshots, by path. */
typedef struct {
  uint64_t zero_copy, unpinned, other;
} moved;
static moved moved_between(const clpin_stats *a, const clpin_stats *b) {
  moved m;
  m.zero_copy = b->bytes_zero_copy - a->bytes_zero_copy;
  m.unpinned = b->bytes_unpinned - a->bytes_unpinned;
  m.other = (b->bytes_pinned_direct - a->bytes_pinned_direct) +
            (b->bytes_staged - a->bytes_staged) + (b->bytes_pipelined - a->bytes_pipelined);
  return m;
}

/* x[off + i] = x[off + i] * 2 + 1 for i < n (bytes, wrapping). */
static const char *kernel_src = "__kernel void twice(__global uchar *x, uint off) {\n"
                                "  size_t i = get_global_id(0) + off;\n"
                                "  x[i] = (uchar)(x[i] * 2u + 1u);\n"
                                "}\n";

static cl_kernel twice_kernel(cl_program *prog) {
  cl_int err;
  *prog = clCreateProgramWithSource(T.ctx, 1, &kernel_src, NULL, &err);
  CL_OK(err);
  CL_OK(clBuildProgram(*prog, 1, &T.device, "", NULL, NULL));
  cl_kernel k = clCreateKernel(*prog, "twice", &err);
  CL_OK(err);
  return k;
}

static void run_twice(cl_mem m, size_t off, size_t n) {
  cl_program prog;
  cl_kernel k = twice_kernel(&prog);
  cl_uint o = (cl_uint)off;
  CL_OK(clSetKernelArg(k, 0, sizeof m, &m));
  CL_OK(clSetKernelArg(k, 1, sizeof o, &o));
  CL_OK(clEnqueueNDRangeKernel(T.queue, k, 1, NULL, &n, NULL, 0, NULL, NULL));
  CL_OK(clFinish(T.queue));
  clReleaseKernel(k);
  clReleaseProgram(prog);
}

static unsigned char twice_of(unsigned char v) { return (unsigned char)(v * 2u + 1u); }

/* Index of the first byte of p that is not twice_of(pattern(seed)), or -1. */
static size_t check_twice(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != twice_of(test_pattern(seed, i)))
      return i;
  return (size_t)-1;
}

/* clpin's own memory: host writes, kernel reads and writes, host reads; no
 * byte copied, each avoided copy counted in bytes_zero_copy. */
START_TEST(own_memory_both_directions) {
  const size_t n = ((size_t)1 << 20) + 37, shape[1] = {n};
  clpin_tensor *t;
  CL_OK(clpin_tensor_create(T.queue, CLPIN_U8, 1, shape, &t));
  clpin_stats s0 = stats_now();
  unsigned char *p;
  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_WRITE, (void **)&p));
  ck_assert_int_eq(clpin_tensor_head(t), CLPIN_HEAD_HOST);
  test_fill(p, n, 3);
  cl_mem m;
  CL_OK(clpin_tensor_device_data(t, T.queue, CLPIN_READ | CLPIN_WRITE, &m));
  ck_assert_ptr_eq(m, clpin_tensor_buffer(t));
  ck_assert_int_eq(clpin_tensor_head(t), CLPIN_HEAD_DEVICE);
  run_twice(m, 0, n);
  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ, (void **)&p));
  ck_assert_int_eq(clpin_tensor_head(t), CLPIN_HEAD_SYNCED);
  ck_assert_uint_eq(check_twice(p, n, 3), (size_t)-1);
  clpin_stats s1 = stats_now();
  moved mv = moved_between(&s0, &s1);
  ck_assert_uint_eq(mv.zero_copy, 2 * n); /* H2D and D2H, neither copied */
  ck_assert_uint_eq(mv.unpinned + mv.other, 0);
  /* to_host copies from the mapping, and after device_data from the buffer. */
  unsigned char *out = malloc(n);
  CL_OK(clpin_tensor_to_host(t, T.queue, out, 0, NULL));
  ck_assert_uint_eq(check_twice(out, n, 3), (size_t)-1);
  CL_OK(clpin_tensor_device_data(t, T.queue, CLPIN_READ, &m));
  memset(out, 0, n);
  CL_OK(clpin_tensor_to_host(t, T.queue, out, 0, NULL));
  ck_assert_uint_eq(check_twice(out, n, 3), (size_t)-1);
  free(out);
  clpin_tensor_release(t);
}
END_TEST

/* Partial updates with READ | WRITE keep the other bytes. */
START_TEST(partial_update_read_write) {
  const size_t n = 256 << 10, shape[1] = {n};
  unsigned char *src = malloc(n);
  test_fill(src, n, 5);
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, src, CLPIN_U8, 1, shape, 0, &t));
  cl_mem m;
  CL_OK(clpin_tensor_device_data(t, T.queue, CLPIN_READ | CLPIN_WRITE, &m));
  run_twice(m, n / 2, n / 2); /* the kernel updates the second half */
  unsigned char *p;
  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ | CLPIN_WRITE, (void **)&p));
  ck_assert_int_eq(memcmp(p, src, n / 2), 0);
  for (size_t i = n / 2; i < n; i++)
    ck_assert_uint_eq(p[i], twice_of(src[i]));
  memset(p, 0xAB, 100); /* the host updates its first 100 bytes */
  CL_OK(clpin_tensor_device_data(t, T.queue, CLPIN_READ | CLPIN_WRITE, &m));
  run_twice(m, 0, 200);
  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ, (void **)&p));
  for (size_t i = 0; i < 100; i++)
    ck_assert_uint_eq(p[i], twice_of(0xAB));
  for (size_t i = 100; i < 200; i++)
    ck_assert_uint_eq(p[i], twice_of(src[i]));
  ck_assert_int_eq(memcmp(p + 200, src + 200, n / 2 - 200), 0);
  /* Copy semantics: the caller's array never changed. */
  for (size_t i = 0; i < n; i++)
    ck_assert_uint_eq(src[i], test_pattern(5, i));
  clpin_tensor_release(t);
  free(src);
}
END_TEST

/* CLPIN_ZERO_COPY over memory the rule accepts: the buffer is the caller's
 * memory, nothing is copied either way, and the caller's array holds the
 * kernel's result once host_data(READ) has mapped it. */
START_TEST(zero_copy_caller_memory) {
  const size_t n = (size_t)2 << 20, shape[1] = {n};
  unsigned char *a = aligned_alloc(4096, n);
  test_fill(a, n, 7);
  /* POCL and Intel take page-aligned memory in place; rules without
   * caller memory in place (Mali, Adreno, AMD: run through the test seam)
   * copy it once and are zero copy from then on. */
  bool inplace =
      clpin__zc_decide(Z.rule, true, CLPIN__ZC_CALLER, a, n, Z.base_align) == CLPIN__ZC_USE_HOST;
  ck_assert(inplace == (Z.rule->caller == CLPIN__ZC_USE_HOST));
  clpin_stats s0 = stats_now();
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, a, CLPIN_U8, 1, shape,
                               CLPIN_ZERO_COPY | CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, &t));
  ck_assert_ptr_null(clpin_tensor_event(t)); /* nothing to wait for */
  ck_assert_int_eq(clpin_tensor_head(t), CLPIN_HEAD_DEVICE);
  void *hp = NULL;
  CL_OK(clGetMemObjectInfo(clpin_tensor_buffer(t), CL_MEM_HOST_PTR, sizeof hp, &hp, NULL));
  if (inplace)
    ck_assert_ptr_eq(hp, a);
  else
    ck_assert_ptr_ne(hp, a);
  clpin_stats s1 = stats_now();
  moved mv = moved_between(&s0, &s1);
  ck_assert_uint_eq(mv.zero_copy, inplace ? n : 0);
  ck_assert_uint_eq(mv.unpinned, inplace ? 0 : n);
  ck_assert_uint_eq(mv.other, 0);

  cl_mem m;
  CL_OK(clpin_tensor_device_data(t, T.queue, CLPIN_READ | CLPIN_WRITE, &m));
  run_twice(m, 0, n);
  unsigned char *p;
  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ | CLPIN_WRITE, (void **)&p));
  ck_assert_uint_eq(check_twice(p, n, 7), (size_t)-1);
  if (inplace) {
    ck_assert_ptr_eq(p, a); /* a USE_HOST_PTR buffer maps to its own memory */
    ck_assert_uint_eq(check_twice(a, n, 7), (size_t)-1);
  } else {
    ck_assert_uint_eq(test_check(a, n, 7), (size_t)-1); /* a copy: untouched */
  }
  /* The host writes, the kernel reads what it wrote. */
  test_fill(p, n, 8);
  CL_OK(clpin_tensor_device_data(t, T.queue, CLPIN_READ | CLPIN_WRITE, &m));
  run_twice(m, 0, n);
  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ, (void **)&p));
  ck_assert_uint_eq(check_twice(p, n, 8), (size_t)-1);
  clpin_stats s2 = stats_now();
  mv = moved_between(&s1, &s2);
  ck_assert_uint_eq(mv.zero_copy, 3 * n); /* D2H, H2D, D2H: none copied */
  ck_assert_uint_eq(mv.unpinned + mv.other, 0);
  clpin_tensor_release(t);
  if (inplace)
    ck_assert_uint_eq(check_twice(a, n, 8), (size_t)-1); /* still the caller's */
  free(a);
}
END_TEST

/* Memory the rule refuses (misaligned; and, where the rule has a size
 * multiple, odd-sized): CLPIN_ZERO_COPY changes nothing, the tensor is a
 * copy, the caller's array is never written. */
START_TEST(zero_copy_refused_is_a_copy) {
  const size_t sizes[] = {4096 * 16, 4096 * 16 + 3, 1};
  unsigned char *raw = aligned_alloc(4096, 4096 * 18);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    for (size_t mis = 0; mis <= 1; mis++) {
      const size_t n = sizes[k], shape[1] = {n};
      unsigned char *a = raw + mis;
      test_fill(a, n, 11);
      clpin__zc_how how = clpin__zc_decide(Z.rule, true, CLPIN__ZC_CALLER, a, n, Z.base_align);
      if (mis)
        ck_assert_int_eq(how, CLPIN__ZC_COPY); /* base alignment is never 1 byte */
      clpin_stats s0 = stats_now();
      clpin_tensor *t;
      CL_OK(clpin_tensor_from_host(T.queue, a, CLPIN_U8, 1, shape, CLPIN_ZERO_COPY, &t));
      clpin_stats s1 = stats_now();
      moved mv = moved_between(&s0, &s1);
      ck_assert_uint_eq(mv.zero_copy, how == CLPIN__ZC_USE_HOST ? n : 0);
      ck_assert_uint_eq(mv.unpinned, how == CLPIN__ZC_USE_HOST ? 0 : n);
      ck_assert_uint_eq(mv.other, 0);
      cl_mem m;
      CL_OK(clpin_tensor_device_data(t, T.queue, CLPIN_READ | CLPIN_WRITE, &m));
      run_twice(m, 0, n);
      unsigned char *p;
      CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ, (void **)&p));
      ck_assert_uint_eq(check_twice(p, n, 11), (size_t)-1);
      if (how == CLPIN__ZC_COPY)
        ck_assert_uint_eq(test_check(a, n, 11), (size_t)-1); /* a copy: untouched */
      clpin_tensor_release(t);
    }
  free(raw);
}
END_TEST

/* Without CLPIN_ZERO_COPY, from_host copies once, even over aligned memory. */
START_TEST(default_from_host_copies_once) {
  const size_t n = 64 << 10, shape[1] = {n};
  unsigned char *a = aligned_alloc(4096, n);
  test_fill(a, n, 13);
  clpin_stats s0 = stats_now();
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, a, CLPIN_U8, 1, shape, CLPIN_PIN_MEMORY, &t));
  clpin_stats s1 = stats_now();
  moved mv = moved_between(&s0, &s1);
  ck_assert_uint_eq(mv.unpinned, n);
  ck_assert_uint_eq(mv.zero_copy + mv.other, 0);
  memset(a, 0, n); /* the caller's array is free again */
  unsigned char *p;
  CL_OK(clpin_tensor_host_data(t, T.queue, CLPIN_READ, (void **)&p));
  ck_assert_uint_eq(test_check(p, n, 13), (size_t)-1);
  clpin_tensor_release(t);
  free(a);
}
END_TEST

/* ZERO_COPY tensors released before and after their context's pool release:
 * they hold no pool memory, so both work and the data stays right. */
START_TEST(zero_copy_and_pool_release) {
  const size_t n = 128 << 10, shape[1] = {n};
  unsigned char *a = aligned_alloc(4096, n), *b = aligned_alloc(4096, n);
  test_fill(a, n, 17);
  test_fill(b, n, 19);
  clpin_tensor *before, *after, *own;
  CL_OK(clpin_tensor_from_host(T.queue, a, CLPIN_U8, 1, shape, CLPIN_ZERO_COPY, &before));
  CL_OK(clpin_tensor_from_host(T.queue, b, CLPIN_U8, 1, shape, CLPIN_ZERO_COPY, &after));
  CL_OK(clpin_tensor_from_host(T.queue, b, CLPIN_U8, 1, shape, 0, &own));
  unsigned char *p;
  CL_OK(clpin_tensor_host_data(after, T.queue, CLPIN_READ | CLPIN_WRITE, (void **)&p));
  clpin_tensor_release(before);
  CL_OK(clpin_pool_release_context(T.ctx));
  /* Still mapped from before the release: the mapping ends at release. */
  ck_assert_uint_eq(test_check(p, n, 19), (size_t)-1);
  cl_mem m;
  CL_OK(clpin_tensor_device_data(after, T.queue, CLPIN_READ | CLPIN_WRITE, &m));
  run_twice(m, 0, n);
  CL_OK(clpin_tensor_host_data(after, T.queue, CLPIN_READ, (void **)&p));
  ck_assert_uint_eq(check_twice(p, n, 19), (size_t)-1);
  CL_OK(clpin_tensor_host_data(own, T.queue, CLPIN_READ, (void **)&p));
  ck_assert_uint_eq(test_check(p, n, 19), (size_t)-1);
  clpin_tensor_release(after);
  clpin_tensor_release(own);
  ck_assert_uint_eq(test_check(a, n, 17), (size_t)-1);
  free(a);
  free(b);
}
END_TEST

/* ---- clpin_host_buffer ---------------------------------------------------- */

/* clpin_host_alloc memory and registered memory used by a kernel in place,
 * through clpin_host_buffer's buffer and offset, handed over and back. */
START_TEST(host_buffer_in_place) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  const size_t n = 300000;
  unsigned char *h = clpin_host_alloc(pool, n + 1000);
  ck_assert_ptr_nonnull(h);
  test_fill(h + 1000, n, 23);
  cl_mem m;
  size_t off;
  CL_OK(clpin_host_buffer(pool, h + 1000, n, &m, &off));
  ck_assert_uint_eq(off, 1000); /* h starts its block */
  CL_OK(clpin_host_lend(T.queue, h + 1000, n, 0, NULL, NULL));
  run_twice(m, off, n);
  CL_OK(clpin_host_reclaim(T.queue, h + 1000, n, 0, 0, NULL, NULL));
  ck_assert_uint_eq(check_twice(h + 1000, n, 23), (size_t)-1);
  clReleaseMemObject(m);
  CL_OK(clpin_host_free(h));

  size_t page = 4096, len = 5 * page;
  unsigned char *r = aligned_alloc(page, len + page);
  test_fill(r, len + page, 29);
  CL_OK(clpin_host_register(pool, r + 100, len));
  CL_OK(clpin_host_buffer(pool, r + 300, 7000, &m, &off));
  ck_assert_uint_eq(off, 300);
  CL_OK(clpin_host_lend(T.queue, r + 300, 7000, 0, NULL, NULL));
  run_twice(m, off, 7000);
  CL_OK(clpin_host_reclaim(T.queue, r + 300, 7000, 0, 0, NULL, NULL));
  for (size_t i = 0; i < len + page; i++) {
    unsigned char want = test_pattern(29, i);
    ck_assert_uint_eq(r[i], i >= 300 && i < 7300 ? twice_of(want) : want);
  }
  clReleaseMemObject(m);
  CL_OK(clpin_host_unregister(r + 100));
  free(r);
}
END_TEST

START_TEST(host_buffer_bad_input) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  unsigned char *h = clpin_host_alloc(pool, 4096);
  cl_mem m = (cl_mem)(uintptr_t)1;
  size_t off = 77;
  unsigned char local[64];
  ck_assert_int_eq(clpin_host_buffer(NULL, h, 1, &m, &off), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_host_buffer(pool, NULL, 1, &m, &off), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_host_buffer(pool, h, 1, NULL, &off), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_host_buffer(pool, h, 1, &m, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_host_buffer(pool, h, 0, &m, &off), CLPIN_ERR_INVALID_SIZE);
  ck_assert_int_eq(clpin_host_buffer(pool, (void *)(UINTPTR_MAX - 10), 100, &m, &off),
                   CLPIN_ERR_OVERFLOW);
  ck_assert_int_eq(clpin_host_buffer(pool, local, sizeof local, &m, &off),
                   CLPIN_ERR_FOREIGN_POINTER);
  /* A range that runs past the allocation's block is not inside it. */
  ck_assert_int_eq(clpin_host_buffer(pool, h, (size_t)1 << 40, &m, &off),
                   CLPIN_ERR_FOREIGN_POINTER);
  ck_assert_ptr_eq(m, (cl_mem)(uintptr_t)1);
  ck_assert_uint_eq(off, 77);
  CL_OK(clpin_host_free(h));
  /* ZERO_COPY is a from_host flag only. */
  unsigned char out[4];
  const size_t shape[1] = {4};
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, out, CLPIN_U8, 1, shape, 0, &t));
  ck_assert_int_eq(clpin_tensor_to_host(t, T.queue, out, CLPIN_ZERO_COPY, NULL),
                   CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(
      clpin_write(T.queue, clpin_tensor_buffer(t), 0, out, 4, CLPIN_ZERO_COPY, 0, NULL, NULL),
      CLPIN_ERR_INVALID_ARGUMENT);
  clpin_tensor_release(t);
}
END_TEST

/* A user event already complete, for wait lists. */
static cl_event user_event_complete(void) {
  cl_int err;
  cl_event e = clCreateUserEvent(T.ctx, &err);
  CL_OK(err);
  CL_OK(clSetUserEventStatus(e, CL_COMPLETE));
  return e;
}

/* ---- the handoff protocol: clpin_host_lend / clpin_host_reclaim ------ */

/* Host writes [p, p + n), hands it over, a kernel doubles it in place, the
 * host takes it back and reads the kernel's bytes; twice, so that the second
 * round shows the device the host's new data after a map. Counted as zero
 * copy, nothing else. */
static void handoff_round_trip(clpin_pool *pool, unsigned char *p, size_t n, unsigned seed) {
  for (unsigned round = 0; round < 2; round++) {
    test_fill(p, n, seed + round);
    clpin_stats a = stats_now();
    cl_event ev = NULL;
    CL_OK(clpin_host_lend(T.queue, p, n, 0, NULL, &ev));
    ck_assert_ptr_nonnull(ev);
    CL_OK(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    cl_mem m;
    size_t off;
    CL_OK(clpin_host_buffer(pool, p, n, &m, &off));
    run_twice(m, off, n);
    clReleaseMemObject(m);
    CL_OK(clpin_host_reclaim(T.queue, p, n, 0, 0, NULL, NULL));
    size_t bad = check_twice(p, n, seed + round);
    ck_assert_msg(bad == (size_t)-1, "round %u: byte %zu of %zu differs", round, bad, n);
    clpin_stats b = stats_now();
    moved mv = moved_between(&a, &b);
    ck_assert_uint_eq(mv.zero_copy, n);
    ck_assert_uint_eq(mv.unpinned + mv.other, 0);
  }
}

/* A pool block, clpin_host_alloc memory and registered memory: byte-exact
 * both ways through the protocol; the bytes around the range untouched. */
START_TEST(handoff_both_directions) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  clpin_block *b;
  CL_OK(clpin_acquire(pool, 200000, &b));
  handoff_round_trip(pool, clpin_block_host(b), 200000, 41);
  CL_OK(clpin_release(b, NULL));

  const size_t n = 300001;
  unsigned char *h = clpin_host_alloc(pool, n + 2000);
  ck_assert_ptr_nonnull(h);
  memset(h, 0xa5, n + 2000);
  handoff_round_trip(pool, h + 1000, n, 43);
  for (size_t i = 0; i < 1000; i++)
    ck_assert_uint_eq(h[i] & h[1000 + n + i], 0xa5);
  CL_OK(clpin_host_free(h));

  size_t page = 4096, len = 6 * page;
  unsigned char *r = aligned_alloc(page, len);
  ck_assert_ptr_nonnull(r);
  memset(r, 0x5a, len);
  CL_OK(clpin_host_register(pool, r + 100, len - 200));
  handoff_round_trip(pool, r + 300, 9000, 47);
  for (size_t i = 0; i < 300; i++)
    ck_assert_uint_eq(r[i], 0x5a);
  for (size_t i = 9300; i < len; i++)
    ck_assert_uint_eq(r[i], 0x5a);
  CL_OK(clpin_host_unregister(r + 100));
  free(r);
}
END_TEST

/* Several ranges of one block: the block comes back when the last does;
 * until then every byte of it is the device's. */
START_TEST(handoff_several_ranges) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  const size_t r = 65536;
  unsigned char *h = clpin_host_alloc(pool, 3 * r);
  ck_assert_ptr_nonnull(h);
  test_fill(h, 3 * r, 53);
  cl_mem dev = test_buffer(&T, 64);
  cl_event ea = NULL, eb = NULL;
  CL_OK(clpin_host_lend(T.queue, h, r, 0, NULL, &ea));
  CL_OK(clpin_host_lend(T.queue, h + 2 * r, r, 1, &ea, &eb));
  CL_OK(clWaitForEvents(1, &eb));
  cl_mem m;
  size_t off;
  CL_OK(clpin_host_buffer(pool, h, r, &m, &off));
  run_twice(m, off, r);
  run_twice(m, off + 2 * r, r);
  clReleaseMemObject(m);
  /* A range never handed over, or named with another size, is refused. */
  ck_assert_int_eq(clpin_host_reclaim(T.queue, h + r, r, 0, 0, NULL, NULL),
                   CLPIN_ERR_NOT_ON_DEVICE);
  ck_assert_int_eq(clpin_host_reclaim(T.queue, h, r - 1, 0, 0, NULL, NULL),
                   CLPIN_ERR_NOT_ON_DEVICE);
  CL_OK(clpin_host_reclaim(T.queue, h, r, 0, 0, NULL, NULL));
  /* The other range is still out: the whole block is the device's. */
  ck_assert_int_eq(clpin_write(T.queue, dev, 0, h + r, 64, 0, 0, NULL, NULL), CLPIN_ERR_ON_DEVICE);
  ck_assert_int_eq(clpin_host_reclaim(T.queue, h, r, 0, 0, NULL, NULL), CLPIN_ERR_NOT_ON_DEVICE);
  cl_event back = NULL;
  CL_OK(clpin_host_reclaim(T.queue, h + 2 * r, r, CLPIN_NON_BLOCKING, 0, NULL, &back));
  ck_assert_ptr_nonnull(back);
  CL_OK(clWaitForEvents(1, &back));
  for (size_t i = 0; i < 3 * r; i++) {
    unsigned char want = test_pattern(53, i);
    ck_assert_uint_eq(h[i], i >= r && i < 2 * r ? want : twice_of(want));
  }
  CL_OK(clpin_write(T.queue, dev, 0, h + r, 64, 0, 0, NULL, NULL));
  /* The same range twice is two ranges: both must come back. */
  CL_OK(clpin_host_lend(T.queue, h, 64, 0, NULL, NULL));
  CL_OK(clpin_host_lend(T.queue, h, 64, 0, NULL, NULL));
  CL_OK(clpin_host_reclaim(T.queue, h, 64, 0, 0, NULL, NULL));
  ck_assert_int_eq(clpin_host_free(h), CLPIN_ERR_ON_DEVICE);
  CL_OK(clpin_host_reclaim(T.queue, h, 64, 0, 0, NULL, NULL));
  CL_OK(clpin_host_free(h));
  clReleaseEvent(ea);
  clReleaseEvent(eb);
  clReleaseEvent(back);
  clReleaseMemObject(dev);
}
END_TEST

/* While a range is out, what would touch the memory or free it is refused
 * with CLPIN_ERR_ON_DEVICE and changes nothing; afterwards all of it works. */
START_TEST(handoff_refusals) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  cl_mem dev = test_buffer(&T, 4096);
  clpin_block *b;
  CL_OK(clpin_acquire(pool, 4096, &b));
  unsigned char *bh = clpin_block_host(b);
  unsigned char *h = clpin_host_alloc(pool, 4096);
  size_t page = 4096;
  unsigned char *r = aligned_alloc(page, 2 * page);
  ck_assert_ptr_nonnull(h);
  ck_assert_ptr_nonnull(r);
  test_fill(bh, 4096, 61);
  test_fill(h, 4096, 62);
  test_fill(r, 2 * page, 63);
  CL_OK(clpin_host_register(pool, r, 2 * page));
  CL_OK(clpin_host_lend(T.queue, bh + 8, 100, 0, NULL, NULL));
  CL_OK(clpin_host_lend(T.queue, h, 4096, 0, NULL, NULL));
  CL_OK(clpin_host_lend(T.queue, r + page, 10, 0, NULL, NULL));
  clpin_stats before = stats_now();
  ck_assert_int_eq(clpin_release(b, NULL), CLPIN_ERR_ON_DEVICE);
  ck_assert_int_eq(clpin_host_free(h), CLPIN_ERR_ON_DEVICE);
  ck_assert_int_eq(clpin_host_unregister(r), CLPIN_ERR_ON_DEVICE);
  ck_assert_int_eq(clpin_write(T.queue, dev, 0, bh, 16, 0, 0, NULL, NULL), CLPIN_ERR_ON_DEVICE);
  ck_assert_int_eq(clpin_read(T.queue, dev, 0, h + 5, 16, CLPIN_PIN_MEMORY, 0, NULL, NULL),
                   CLPIN_ERR_ON_DEVICE);
  ck_assert_int_eq(clpin_write(T.queue, dev, 0, r, 16, 0, 0, NULL, NULL), CLPIN_ERR_ON_DEVICE);
  /* Rect transfers take the same routes: refused for memory that is out. */
  size_t o[3] = {0, 0, 0}, rg[3] = {16, 4, 1};
  ck_assert_int_eq(clpin_write_rect(T.queue, dev, o, o, rg, 0, 0, 64, 0, bh, 0, 0, NULL, NULL),
                   CLPIN_ERR_ON_DEVICE);
  ck_assert_int_eq(
      clpin_read_rect(T.queue, dev, o, o, rg, 0, 0, 64, 0, h, CLPIN_PIN_MEMORY, 0, NULL, NULL),
      CLPIN_ERR_ON_DEVICE);
  ck_assert_int_eq(clpin_read_rect(T.queue, dev, o, o, rg, 0, 0, 64, 0, r + page, 0, 0, NULL, NULL),
                   CLPIN_ERR_ON_DEVICE);
  clpin_stats after = stats_now();
  ck_assert_uint_eq(after.blocks_in_use, before.blocks_in_use);
  ck_assert_uint_eq(after.bytes_registered, before.bytes_registered);
  ck_assert_uint_eq(after.bytes_pinned_direct, before.bytes_pinned_direct);
  /* Bad input: each refused with its code, nothing handed over. */
  cl_event e = user_event_complete();
  ck_assert_int_eq(clpin_host_lend(NULL, h, 1, 0, NULL, NULL), CL_INVALID_COMMAND_QUEUE);
  ck_assert_int_eq(clpin_host_lend(T.queue, NULL, 1, 0, NULL, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_host_lend(T.queue, h, 0, 0, NULL, NULL), CLPIN_ERR_INVALID_SIZE);
  ck_assert_int_eq(clpin_host_lend(T.queue, (void *)(UINTPTR_MAX - 10), 100, 0, NULL, NULL),
                   CLPIN_ERR_OVERFLOW);
  ck_assert_int_eq(clpin_host_lend(T.queue, h, 1, 1, NULL, NULL), CL_INVALID_EVENT_WAIT_LIST);
  ck_assert_int_eq(clpin_host_lend(T.queue, h, 1, 0, &e, NULL), CL_INVALID_EVENT_WAIT_LIST);
  cl_event null_ev = NULL;
  ck_assert_int_eq(clpin_host_lend(T.queue, h, 1, 1, &null_ev, NULL), CL_INVALID_EVENT_WAIT_LIST);
  unsigned char local[64];
  ck_assert_int_eq(clpin_host_lend(T.queue, local, sizeof local, 0, NULL, NULL),
                   CLPIN_ERR_FOREIGN_POINTER);
  ck_assert_int_eq(clpin_host_lend(T.queue, h, 8192, 0, NULL, NULL), CLPIN_ERR_FOREIGN_POINTER);
  ck_assert_int_eq(clpin_host_reclaim(T.queue, h, 4096, 1u << 5, 0, NULL, NULL),
                   CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_host_reclaim(T.queue, h, 4096, CLPIN_PIN_MEMORY, 0, NULL, NULL),
                   CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(
      strstr(clpin_last_error_detail(), "CLPIN_PIN_MEMORY, which this call does not take"));
  ck_assert_int_eq(clpin_host_reclaim(T.queue, h, 4096, 0, 1, NULL, NULL),
                   CL_INVALID_EVENT_WAIT_LIST);
  ck_assert_int_eq(clpin_host_reclaim(T.queue, local, 8, 0, 0, NULL, NULL),
                   CLPIN_ERR_FOREIGN_POINTER);
  ck_assert_int_eq(clpin_host_reclaim(T.queue, bh, 100, 0, 0, NULL, NULL), CLPIN_ERR_NOT_ON_DEVICE);
  /* Back: everything works again, the data as the host left it. */
  CL_OK(clpin_host_reclaim(T.queue, bh + 8, 100, 0, 1, &e, NULL));
  CL_OK(clpin_host_reclaim(T.queue, h, 4096, 0, 0, NULL, NULL));
  CL_OK(clpin_host_reclaim(T.queue, r + page, 10, 0, 0, NULL, NULL));
  ck_assert_uint_eq(test_check(bh, 4096, 61), (size_t)-1);
  ck_assert_uint_eq(test_check(h, 4096, 62), (size_t)-1);
  ck_assert_uint_eq(test_check(r, 2 * page, 63), (size_t)-1);
  CL_OK(clpin_write(T.queue, dev, 0, bh, 4096, 0, 0, NULL, NULL));
  CL_OK(clpin_read(T.queue, dev, 0, h, 4096, 0, 0, NULL, NULL));
  ck_assert_uint_eq(test_check(h, 4096, 61), (size_t)-1);
  CL_OK(clpin_write(T.queue, dev, 0, r, 4096, 0, 0, NULL, NULL));
  CL_OK(clpin_release(b, NULL));
  CL_OK(clpin_host_free(h));
  CL_OK(clpin_host_unregister(r));
  free(r);
  clReleaseEvent(e);
  clReleaseMemObject(dev);
}
END_TEST

/* A pool released while ranges are out: it frees them as any memory of
 * its own; the pointers then name no live memory. */
START_TEST(handoff_pool_release) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  unsigned char *h = clpin_host_alloc(pool, 8192);
  unsigned char *r = aligned_alloc(4096, 8192);
  ck_assert_ptr_nonnull(h);
  ck_assert_ptr_nonnull(r);
  CL_OK(clpin_host_register(pool, r, 8192));
  CL_OK(clpin_host_lend(T.queue, h, 100, 0, NULL, NULL));
  CL_OK(clpin_host_lend(T.queue, h + 200, 100, 0, NULL, NULL));
  CL_OK(clpin_host_lend(T.queue, r, 8192, 0, NULL, NULL));
  CL_OK(clpin_host_reclaim(T.queue, h, 100, CLPIN_NON_BLOCKING, 0, NULL, NULL));
  CL_OK(clpin_pool_release_context(T.ctx));
  ck_assert_int_eq(clpin_host_reclaim(T.queue, h + 200, 100, 0, 0, NULL, NULL),
                   CLPIN_ERR_FOREIGN_POINTER);
  ck_assert_int_eq(clpin_host_reclaim(T.queue, r, 8192, 0, 0, NULL, NULL),
                   CLPIN_ERR_FOREIGN_POINTER);
  ck_assert_int_eq(clpin_host_free(h), CLPIN_ERR_POOL_RELEASED);
  ck_assert_int_eq(clpin_host_unregister(r), CLPIN_ERR_NOT_REGISTERED);
  free(r);
}
END_TEST

/* A forked child gets CLPIN_ERR_FORKED before any OpenCL call. */
START_TEST(handoff_forked_child) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  unsigned char *h = clpin_host_alloc(pool, 4096);
  ck_assert_ptr_nonnull(h);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    int ok = clpin_host_lend(T.queue, h, 16, 0, NULL, NULL) == CLPIN_ERR_FORKED &&
             clpin_host_reclaim(T.queue, h, 16, 0, 0, NULL, NULL) == CLPIN_ERR_FORKED;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  CL_OK(clpin_host_free(h));
}
END_TEST

/* Threads hand disjoint ranges of one block over and back, round after
 * round: the count stays exact (the block frees at the end, its bytes
 * unchanged). Run under TSan and ASan by their stages. */
#define HANDOFF_THREADS 4
#define HANDOFF_ROUNDS 500
typedef struct {
  unsigned char *base;
  size_t len;
  int failures;
} handoff_arg;

static void *handoff_thread(void *p) {
  handoff_arg *a = p;
  for (int i = 0; i < HANDOFF_ROUNDS; i++) {
    cl_event ev = NULL;
    if (clpin_host_lend(T.queue, a->base, a->len, 0, NULL, &ev) != CL_SUCCESS) {
      a->failures++;
      continue;
    }
    if (clpin_host_reclaim(T.queue, a->base, a->len, i % 2 ? CLPIN_NON_BLOCKING : 0, 1, &ev,
                           NULL) != CL_SUCCESS)
      a->failures++;
    clReleaseEvent(ev);
  }
  return NULL;
}

START_TEST(handoff_threads) {
  /* On rusticl 22.3, clpin_host_lend's unmap is refused (CL_INVALID_VALUE)
   * now and then when several threads lend ranges of one buffer at once;
   * one thread's turns pass (the "handoff" case). Not yet understood: an
   * open item of docs/RELIABILITY.md, "Implementations". */
  if (test_skip_on(
          &T, "rusticl", "handoff_threads",
          "unmaps refused when threads lend one buffer at once (open, docs/RELIABILITY.md)"))
    return;
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  const size_t r = 4096;
  unsigned char *h = clpin_host_alloc(pool, HANDOFF_THREADS * r);
  ck_assert_ptr_nonnull(h);
  test_fill(h, HANDOFF_THREADS * r, 71);
  pthread_t th[HANDOFF_THREADS];
  handoff_arg args[HANDOFF_THREADS];
  for (int i = 0; i < HANDOFF_THREADS; i++) {
    args[i] = (handoff_arg){h + (size_t)i * r, r, 0};
    ck_assert_int_eq(pthread_create(&th[i], NULL, handoff_thread, &args[i]), 0);
  }
  for (int i = 0; i < HANDOFF_THREADS; i++) {
    pthread_join(th[i], NULL);
    ck_assert_int_eq(args[i].failures, 0);
  }
  CL_OK(clFinish(T.queue));
  /* Every range came back: the last map made the block the host's again. */
  ck_assert_uint_eq(test_check(h, HANDOFF_THREADS * r, 71), (size_t)-1);
  /* And nothing counts as handed over any more: a small blocking rect
   * write from the block skips the pool again (rect.c, small_write), so no
   * counter moves. */
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, (size_t)1 << 20));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, (size_t)1 << 20));
  cl_int e;
  cl_mem m = clCreateBuffer(T.ctx, CL_MEM_READ_WRITE, r, NULL, &e);
  CL_OK(e);
  clpin_stats before = test_stats(pool);
  const size_t o[3] = {0, 0, 0}, reg[3] = {r, 1, 1};
  CL_OK(clpin_write_rect(T.queue, m, o, o, reg, 0, 0, 0, 0, h, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  clpin_stats after = test_stats(pool);
  ck_assert_uint_eq(after.bytes_pinned_direct, before.bytes_pinned_direct);
  clReleaseMemObject(m);
  CL_OK(clpin_host_free(h));
}
END_TEST

static Suite *unified_suite(void) {
  Suite *s = suite_create("unified");
  TCase *tc = tcase_create("rules");
  tcase_add_test(tc, rules_match_devices);
  tcase_add_test(tc, rules_decide);
  suite_add_tcase(s, tc);
  tc = test_tcase(s, "probe", NULL, NULL, 120);
  tcase_add_test(tc, probe_unnamed_device);
  tc = test_tcase(s, "tensors", setup, teardown, 120);
  tcase_add_test(tc, own_memory_both_directions);
  tcase_add_test(tc, partial_update_read_write);
  tcase_add_test(tc, zero_copy_caller_memory);
  tcase_add_test(tc, zero_copy_refused_is_a_copy);
  tcase_add_test(tc, default_from_host_copies_once);
  tcase_add_test(tc, zero_copy_and_pool_release);
  tc = test_tcase(s, "host_buffer", setup, teardown, 120);
  tcase_add_test(tc, host_buffer_in_place);
  tcase_add_test(tc, host_buffer_bad_input);
  /* The handoff protocol: correct OpenCL on every host-unified device, so
   * it runs on POCL, under CLPIN__TEST_UNIFIED for each rule, and on
   * Oclgrind (stage 30). */
  tc = test_tcase(s, "handoff", setup, teardown, 120);
  tcase_add_test(tc, handoff_both_directions);
  tcase_add_test(tc, handoff_several_ranges);
  tcase_add_test(tc, handoff_refusals);
  tcase_add_test(tc, handoff_pool_release);
  tcase_add_test(tc, handoff_forked_child);
  /* Threads (not on Oclgrind: its runtime is not thread-safe). */
  tc = test_tcase(s, "handoff_threads", setup, teardown, 120);
  tcase_add_loop_test(tc, handoff_threads, 0, 3);
  return s;
}

int main(void) { return test_run_suite(unified_suite()); }
