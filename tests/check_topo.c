/* SPDX-License-Identifier: Apache-2.0 */
/* Devices, NUMA nodes and footprint, one suite in three cases,
 * each run by its own CTest entry with the POCL device list it needs:
 *
 *   two       POCL_DEVICES="pthread pthread": a two-device context; staged
 *             non-blocking transfers through both devices' queues at once,
 *             each on its own device's DMA queue, read by both devices'
 *             kernels; many threads on both devices racing the release.
 *   numa      POCL_DEVICES="pthread pthread pthread pthread": a made-up
 *             sysfs tree (two nodes, four devices) through the topology
 *             seam; each device's blocks from its node's lists, its copies
 *             on its node's CPUs; real placement checked with get_mempolicy.
 *   footprint one device: large blocks within docs/DESIGN.md's bound
 *             ("Topology and footprint"), reuse, cap
 *             and trim, the stats invariant.
 *
 * TOPO_ROUNDS overrides the rounds of the races. */
#include "testutil.h"

#include "pool.h"
#include "topo.h"
#include "copythreads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define MAXDEV 4

/* Every device of the first platform in one context, a queue on each. */
typedef struct {
  cl_uint n;
  cl_device_id dev[MAXDEV];
  cl_context ctx;
  cl_command_queue q[MAXDEV];
} multi;

static multi M;

static void multi_open(cl_uint want) {
  memset(&M, 0, sizeof M);
  cl_platform_id p;
  CL_OK(clGetPlatformIDs(1, &p, NULL));
  CL_OK(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, MAXDEV, M.dev, &M.n));
  ck_assert_msg(M.n >= want, "%u device(s); this case needs %u (POCL_DEVICES)", M.n, want);
  M.n = want;
  cl_int err;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)p, 0};
  M.ctx = clCreateContext(props, M.n, M.dev, NULL, NULL, &err);
  CL_OK(err);
  for (cl_uint i = 0; i < M.n; i++) {
    M.q[i] = clCreateCommandQueue(M.ctx, M.dev[i], 0, &err);
    CL_OK(err);
  }
}

static void multi_close(void) {
  clpin_pool_release_context(M.ctx);
  for (cl_uint i = 0; i < M.n; i++)
    clReleaseCommandQueue(M.q[i]);
  clReleaseContext(M.ctx);
  memset(&M, 0, sizeof M);
}

static cl_mem buffer(size_t n) {
  cl_int err;
  cl_mem m = clCreateBuffer(M.ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CL_OK(err);
  return m;
}

static void setup_two(void) {
  multi_open(2);
  /* Stage on POCL's host-unified devices too. */
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, 1));
}

static void teardown(void) {
  clpin_shutdown();
  multi_close();
}

/* ---- two devices -------------------------------------------------------- */

/* stderr into a file while capturing (CLPIN_DEBUG lines). */
typedef struct {
  char path[32];
  int fd, saved;
} capture;

static void capture_start(capture *c) {
  snprintf(c->path, sizeof c->path, "/tmp/clpin-topo-XXXXXX");
  c->fd = mkstemp(c->path);
  ck_assert_int_ge(c->fd, 0);
  fflush(stderr);
  c->saved = dup(2);
  dup2(c->fd, 2);
}

/* The captured text (malloc'd, NUL-terminated). */
static char *capture_end(capture *c) {
  fflush(stderr);
  dup2(c->saved, 2);
  close(c->saved);
  off_t n = lseek(c->fd, 0, SEEK_END);
  char *text = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(text);
  ssize_t got = pread(c->fd, text, (size_t)n, 0);
  text[got > 0 ? got : 0] = '\0';
  close(c->fd);
  unlink(c->path);
  return text;
}

static size_t count_lines(const char *text, const char *a, const char *b) {
  size_t n = 0;
  for (const char *line = text; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[600];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf - 1 ? len : sizeof buf - 1), line);
    if (strstr(buf, a) && strstr(buf, b))
      n++;
    line = end ? end + 1 : NULL;
  }
  return n;
}

/* Built for every device of the context: a program built for one device of
 * a POCL context cannot run on another. */
static const char *kernel_src =
    "__kernel void bump(__global const uint *in, __global uint *out, uint k) {\n"
    "  size_t i = get_global_id(0);\n"
    "  out[i] = in[i] + k;\n"
    "}\n";

/* The target: non-blocking staged writes and reads through queues
 * of both devices, 64 MiB each, all in flight at once. Byte-exact, staged
 * (stats and CLPIN_DEBUG), each transfer's DMA on its own device's queue,
 * and both devices' kernels read what was written. */
START_TEST(two_devices_at_once) {
  const size_t N = 64 * MiB, words = N / 4;
  clpin_pool *pool;
  CL_OK(clpin_pool_get_for_context(M.ctx, &pool));
  cl_int err;
  cl_program prog = clCreateProgramWithSource(M.ctx, 1, &kernel_src, NULL, &err);
  CL_OK(err);
  CL_OK(clBuildProgram(prog, M.n, M.dev, "", NULL, NULL));
  uint32_t *src[2], *dst[2];
  cl_mem in[2], out[2];
  for (int d = 0; d < 2; d++) {
    src[d] = malloc(N);
    dst[d] = malloc(N);
    ck_assert_ptr_nonnull(src[d]);
    ck_assert_ptr_nonnull(dst[d]);
    for (size_t i = 0; i < words; i++)
      src[d][i] = (uint32_t)(i * 2654435761u) ^ (uint32_t)(d + 1) * 0x9e3779b9u;
    memset(dst[d], 0, N);
    in[d] = buffer(N);
    out[d] = buffer(N);
  }
  clpin_stats before = test_stats(pool);
  CL_OK(clpin_set_option(CLPIN_OPT_DEBUG, 1));
  capture cap;
  capture_start(&cap);
  cl_event w[2];
  for (int d = 0; d < 2; d++)
    CL_OK(clpin_write(M.q[d], in[d], 0, src[d], N, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL,
                      &w[d]));
  cl_event k[2];
  cl_kernel kern[2];
  for (int d = 0; d < 2; d++) {
    kern[d] = clCreateKernel(prog, "bump", &err);
    CL_OK(err);
    cl_uint add = (cl_uint)(d + 1);
    CL_OK(clSetKernelArg(kern[d], 0, sizeof in[d], &in[d]));
    CL_OK(clSetKernelArg(kern[d], 1, sizeof out[d], &out[d]));
    CL_OK(clSetKernelArg(kern[d], 2, sizeof add, &add));
    CL_OK(clEnqueueNDRangeKernel(M.q[d], kern[d], 1, NULL, &words, NULL, 1, &w[d], &k[d]));
  }
  cl_event r[2];
  for (int d = 0; d < 2; d++)
    CL_OK(clpin_read(M.q[d], out[d], 0, dst[d], N, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 1, &k[d],
                     &r[d]));
  CL_OK(clWaitForEvents(2, r));
  char *log = capture_end(&cap);
  CL_OK(clpin_set_option(CLPIN_OPT_DEBUG, 0));
  for (int d = 0; d < 2; d++) {
    for (size_t i = 0; i < words; i++)
      if (dst[d][i] != src[d][i] + (uint32_t)(d + 1))
        ck_abort_msg("device %d: word %zu is %u, expected %u", d, i, dst[d][i],
                     src[d][i] + (uint32_t)(d + 1));
  }
  /* Staged: the pipeline moved all four, nothing fell back or went plain. */
  clpin_stats after = test_stats(pool);
  ck_assert_uint_eq(after.bytes_pipelined - before.bytes_pipelined, 4 * N);
  ck_assert_uint_eq(after.bytes_unpinned, before.bytes_unpinned);
  ck_assert_uint_eq(after.fallbacks, before.fallbacks);
  test_assert_balanced(&after);
  /* Each device's DMA queues moved exactly its own bytes, one write and one
   * read each, and the log names the device's own queue for each. */
  for (int d = 0; d < 2; d++) {
    ck_assert_uint_eq(clpin__pool_device_bytes(pool, M.dev[d], 0), N);
    ck_assert_uint_eq(clpin__pool_device_bytes(pool, M.dev[d], 1), N);
    for (int dir = 0; dir < 2; dir++) {
      cl_command_queue dq = clpin__pool_dma_queue(pool, M.dev[d], dir);
      ck_assert_ptr_nonnull(dq);
      cl_device_id qd;
      CL_OK(clGetCommandQueueInfo(dq, CL_QUEUE_DEVICE, sizeof qd, &qd, NULL));
      ck_assert_ptr_eq(qd, M.dev[d]);
      char q[64], dv[64];
      snprintf(q, sizeof q, "DMA on queue %p of device %p", (void *)dq, (void *)M.dev[d]);
      snprintf(dv, sizeof dv, "%s %zu bytes: pipelined", dir ? "read" : "write", N);
      ck_assert_msg(count_lines(log, q, dv) == 1, "no %s line for device %d on its queue:\n%s",
                    dir ? "read" : "write", d, log);
    }
  }
  ck_assert_msg(!strstr(log, "plain"), "a transfer took a plain path:\n%s", log);
  free(log);
  for (int d = 0; d < 2; d++) {
    clReleaseEvent(w[d]);
    clReleaseEvent(k[d]);
    clReleaseEvent(r[d]);
    clReleaseKernel(kern[d]);
    clReleaseMemObject(in[d]);
    clReleaseMemObject(out[d]);
    free(src[d]);
    free(dst[d]);
  }
  clReleaseProgram(prog);
}
END_TEST

/* The handoff protocol across the devices of one context: clpin_host_alloc
 * memory handed over through one device's queue, read in place by a kernel
 * on that device, given back through the other device's queue; then the
 * other way round. Byte-exact both times, the host's bytes unchanged. */
START_TEST(two_devices_handoff) {
  const size_t words = 65536, n = words * 4;
  clpin_pool *pool;
  CL_OK(clpin_pool_get(M.q[0], &pool));
  cl_uint *h = clpin_host_alloc(pool, n);
  ck_assert_ptr_nonnull(h);
  for (size_t i = 0; i < words; i++)
    h[i] = (cl_uint)(i * 2654435761u);
  cl_int err;
  cl_program prog = clCreateProgramWithSource(M.ctx, 1, &kernel_src, NULL, &err);
  CL_OK(err);
  CL_OK(clBuildProgram(prog, M.n, M.dev, "", NULL, NULL));
  cl_kernel kern = clCreateKernel(prog, "bump", &err);
  CL_OK(err);
  cl_mem out = buffer(n), in;
  size_t off;
  cl_uint *got = malloc(n);
  ck_assert_ptr_nonnull(got);
  for (cl_uint d = 0; d < 2; d++) {
    cl_uint add = 7 + d, other = 1 - d;
    CL_OK(clpin_host_lend(M.q[d], h, n, 0, NULL, NULL));
    CL_OK(clpin_host_buffer(pool, h, n, &in, &off));
    ck_assert_uint_eq(off, 0);
    CL_OK(clSetKernelArg(kern, 0, sizeof in, &in));
    CL_OK(clSetKernelArg(kern, 1, sizeof out, &out));
    CL_OK(clSetKernelArg(kern, 2, sizeof add, &add));
    CL_OK(clEnqueueNDRangeKernel(M.q[d], kern, 1, NULL, &words, NULL, 0, NULL, NULL));
    CL_OK(clFinish(M.q[d]));
    clReleaseMemObject(in);
    CL_OK(clpin_host_reclaim(M.q[other], h, n, 0, 0, NULL, NULL));
    CL_OK(clEnqueueReadBuffer(M.q[other], out, CL_TRUE, 0, n, got, 0, NULL, NULL));
    for (size_t i = 0; i < words; i++) {
      ck_assert_uint_eq(h[i], (cl_uint)(i * 2654435761u));
      ck_assert_uint_eq(got[i], (cl_uint)(i * 2654435761u) + add);
    }
  }
  free(got);
  clReleaseMemObject(out);
  clReleaseKernel(kern);
  clReleaseProgram(prog);
  CL_OK(clpin_host_free(h));
}
END_TEST
/* Blocking staged transfers on the second device run on its queue too. */
START_TEST(two_devices_blocking) {
  const size_t N = 24 * MiB;
  clpin_pool *pool;
  CL_OK(clpin_pool_get_for_context(M.ctx, &pool));
  unsigned char *src = malloc(N), *dst = malloc(N);
  ck_assert_ptr_nonnull(src);
  ck_assert_ptr_nonnull(dst);
  for (int d = 1; d >= 0; d--) {
    cl_mem m = buffer(N);
    test_fill(src, N, (unsigned)d + 7);
    memset(dst, 0, N);
    uint64_t w0 = clpin__pool_device_bytes(pool, M.dev[d], 0);
    uint64_t r0 = clpin__pool_device_bytes(pool, M.dev[d], 1);
    CL_OK(clpin_write(M.q[d], m, 0, src, N, CLPIN_PIN_MEMORY, 0, NULL, NULL));
    CL_OK(clpin_read(M.q[d], m, 0, dst, N, CLPIN_PIN_MEMORY, 0, NULL, NULL));
    ck_assert_uint_eq(test_check(dst, N, (unsigned)d + 7), (size_t)-1);
    ck_assert_uint_eq(clpin__pool_device_bytes(pool, M.dev[d], 0) - w0, N);
    ck_assert_uint_eq(clpin__pool_device_bytes(pool, M.dev[d], 1) - r0, N);
    clReleaseMemObject(m);
  }
  free(src);
  free(dst);
  test_assert_pool_balanced(pool);
}
END_TEST

static int rounds(int dflt) { return (int)test_env_count("TOPO_ROUNDS", dflt); }

typedef struct {
  cl_command_queue q;
  cl_mem mem;
  size_t n;
  unsigned seed;
  atomic_int *stop;
  int ok, refused;
} mover;

static bool clean_code(cl_int err) { return err == CL_SUCCESS || err == CLPIN_ERR_POOL_RELEASED; }

/* A round trip; false when the release refused or failed it. */
static bool trip(mover *m, unsigned char *src, unsigned char *dst, size_t n, unsigned flags,
                 unsigned seed) {
  test_fill(src, n, seed);
  memset(dst, 0, n);
  for (int dir = 0; dir < 2; dir++) {
    cl_event ev = NULL;
    cl_event *evp = flags & CLPIN_NON_BLOCKING ? &ev : NULL;
    cl_int err = dir == 0 ? clpin_write(m->q, m->mem, 0, src, n, flags, 0, NULL, evp)
                          : clpin_read(m->q, m->mem, 0, dst, n, flags, 0, NULL, evp);
    ck_assert_msg(clean_code(err), "%s -> %s", dir ? "clpin_read" : "clpin_write",
                  clpin_strerror(err));
    if (err != CL_SUCCESS)
      return false;
    if (ev) {
      cl_int w = clWaitForEvents(1, &ev);
      clReleaseEvent(ev);
      if (w != CL_SUCCESS) {
        clFinish(m->q);
        return false;
      }
    }
  }
  ck_assert_msg(test_check(dst, n, seed) == (size_t)-1, "round trip of %zu bytes differs", n);
  return true;
}

static void *mover_main(void *arg) {
  mover *m = arg;
  unsigned char *src = malloc(m->n), *dst = malloc(m->n);
  ck_assert_ptr_nonnull(src);
  ck_assert_ptr_nonnull(dst);
  for (unsigned it = 0; !atomic_load(m->stop); it++) {
    size_t n = it % 3 == 0 ? 5000 : m->n;
    unsigned flags = CLPIN_PIN_MEMORY | (it & 1 ? CLPIN_NON_BLOCKING : 0);
    if (trip(m, src, dst, n, flags, m->seed * 1000 + it))
      m->ok++;
    else
      m->refused++;
  }
  free(src);
  free(dst);
  return NULL;
}

/* Threads moving data to both devices, blocking and not, while the context
 * is released under them: every call succeeds or is refused cleanly, every
 * round trip that succeeded is byte-exact, and the released pool freed
 * everything. */
START_TEST(two_devices_race_release) {
  enum { MOVERS = 4 };
  test_stage_everything(16 * KiB);
  int n = rounds(20), ok = 0;
  uint64_t per_dev[2] = {0, 0};
  for (int round = 0; round < n; round++) {
    clpin_pool *pool;
    CL_OK(clpin_pool_get_for_context(M.ctx, &pool));
    atomic_int stop = 0;
    mover m[MOVERS];
    pthread_t th[MOVERS];
    cl_int err;
    for (int i = 0; i < MOVERS; i++) {
      m[i] = (mover){.q = clCreateCommandQueue(M.ctx, M.dev[i % 2], 0, &err),
                     .mem = NULL,
                     .n = 100 * KiB,
                     .seed = (unsigned)(round * 10 + i),
                     .stop = &stop};
      CL_OK(err);
      m[i].mem = buffer(100 * KiB);
      ck_assert_int_eq(pthread_create(&th[i], NULL, mover_main, &m[i]), 0);
    }
    test_sleep_us(2000 + (round % 5) * 1000);
    for (int d = 0; d < 2; d++)
      per_dev[d] += clpin__pool_device_bytes(pool, M.dev[d], 0);
    CL_OK(clpin_pool_release_context(M.ctx));
    test_sleep_us(500);
    atomic_store(&stop, 1);
    for (int i = 0; i < MOVERS; i++) {
      pthread_join(th[i], NULL);
      ok += m[i].ok;
      clReleaseMemObject(m[i].mem);
      clReleaseCommandQueue(m[i].q);
    }
    clpin_stats s = test_stats(pool);
    test_assert_balanced(&s);
    ck_assert_uint_eq(s.driver_allocs, s.driver_frees);
    ck_assert_uint_eq(s.bytes_reserved, 0);
    clpin_pool *again;
    CL_OK(clpin_pool_get_for_context(M.ctx, &again));
    CL_OK(clpin_pool_release_context(M.ctx));
  }
  ck_assert_int_gt(ok, 0);
  /* Both devices' queues did staged work. */
  ck_assert_uint_gt(per_dev[0], 0);
  ck_assert_uint_gt(per_dev[1], 0);
}
END_TEST

/* ---- a made-up topology: two nodes, four devices ------------------------- */

static char tree[64];

static void write_file(const char *rel, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", tree, rel);
  /* mkdir -p of the parent */
  for (char *p = path + strlen(tree) + 1; (p = strchr(p, '/')) != NULL; p++) {
    *p = '\0';
    mkdir(path, 0755);
    *p = '/';
  }
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static void remove_tree(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tree);
  ck_assert_int_eq(system(cmd), 0);
}

static const char *const pci[MAXDEV] = {"0000:17:00.0", "0000:31:00.0", "0000:b1:00.0",
                                        "0000:ca:00.0"};
static const int node_of_dev[MAXDEV] = {0, 0, 1, 1};

/* A made-up tree with nodes `online` (node 0 has CPU 0, node 1 CPU 1: this
 * machine has both) and no PCI devices yet; the seam reads it. */
static void fake_nodes(const char *online) {
  snprintf(tree, sizeof tree, "/tmp/clpin-sysfs-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tree));
  write_file("devices/system/node/online", online);
  write_file("devices/system/node/node0/cpulist", "0\n");
  write_file("devices/system/node/node1/cpulist", "1\n");
  clpin__topo_test_hook(tree, 0, NULL, NULL);
}

/* The seam back on /sys, the tree gone. */
static void drop_tree(void) {
  clpin__topo_test_hook(NULL, 0, NULL, NULL);
  remove_tree();
}

/* Two nodes, four devices. */
static void setup_numa(void) {
  fake_nodes("0-1\n");
  for (int i = 0; i < MAXDEV; i++) {
    char rel[96], node[8];
    snprintf(rel, sizeof rel, "bus/pci/devices/%s/numa_node", pci[i]);
    snprintf(node, sizeof node, "%d\n", node_of_dev[i]);
    write_file(rel, node);
  }
  multi_open(4);
  clpin__topo_test_hook(tree, M.n, M.dev, pci);
  CL_OK(clpin_set_option(CLPIN_OPT_NUMA, CLPIN_NUMA_AUTO));
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, 1));
}

static void teardown_numa(void) {
  clpin_shutdown();
  multi_close();
  drop_tree();
}

/* The end of a one-device case on a made-up tree: options back, pools gone. */
static void end_fake(void) {
  CL_OK(clpin_set_option(CLPIN_OPT_NUMA, CLPIN_NUMA_AUTO));
  clpin_shutdown();
  drop_tree();
}

START_TEST(seam_reads_the_made_up_tree) {
  ck_assert_int_eq(clpin__topo_node_count(), 2);
  cpu_set_t c;
  ck_assert(clpin__topo_node_cpus(1, &c));
  ck_assert_int_eq(CPU_COUNT(&c), 1);
  ck_assert(CPU_ISSET(1, &c));
  ck_assert(!clpin__topo_node_cpus(2, &c));
  char why[200];
  for (cl_uint i = 0; i < M.n; i++) {
    ck_assert_int_eq(clpin__topo_device_node(M.dev[i], why, sizeof why), node_of_dev[i]);
    ck_assert_msg(strstr(why, pci[i]), "why: %s", why);
  }
}
END_TEST

/* Each device's blocks come from its node's lists: a block released by a
 * device of node 1 is never handed to a device of node 0, and is handed
 * back to the other device of node 1. */
START_TEST(blocks_stay_on_their_node) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get_for_context(M.ctx, &pool));
  for (cl_uint i = 0; i < M.n; i++)
    ck_assert_int_eq(clpin__pool_device_node(pool, M.dev[i]), node_of_dev[i]);
  clpin_block *b[MAXDEV];
  for (cl_uint i = 0; i < M.n; i++) {
    CL_OK(clpin__acquire_for(pool, M.dev[i], 1 * MiB, &b[i]));
    ck_assert_int_eq(clpin__block_node(b[i]), node_of_dev[i]);
  }
  void *host2 = clpin_block_host(b[2]);
  for (cl_uint i = 0; i < M.n; i++)
    CL_OK(clpin_release(b[i], NULL));
  /* Two idle blocks per node now. Node 0's devices take node 0's. */
  clpin_stats s0 = test_stats(pool);
  clpin_block *x, *y, *z;
  CL_OK(clpin__acquire_for(pool, M.dev[0], 1 * MiB, &x));
  CL_OK(clpin__acquire_for(pool, M.dev[1], 1 * MiB, &y));
  ck_assert_int_eq(clpin__block_node(x), 0);
  ck_assert_int_eq(clpin__block_node(y), 0);
  ck_assert_ptr_ne(clpin_block_host(x), host2);
  ck_assert_ptr_ne(clpin_block_host(y), host2);
  /* A third on node 0 is a miss although node 1 has two idle blocks. */
  CL_OK(clpin__acquire_for(pool, M.dev[0], 1 * MiB, &z));
  ck_assert_int_eq(clpin__block_node(z), 0);
  clpin_stats s1 = test_stats(pool);
  ck_assert_uint_eq(s1.hits - s0.hits, 2);
  ck_assert_uint_eq(s1.misses - s0.misses, 1);
  ck_assert_uint_eq(s1.blocks_cached, 2);
  CL_OK(clpin_release(x, NULL));
  CL_OK(clpin_release(y, NULL));
  CL_OK(clpin_release(z, NULL));
  /* Node 1's devices get node 1's blocks back: hits. */
  CL_OK(clpin__acquire_for(pool, M.dev[3], 1 * MiB, &x));
  CL_OK(clpin__acquire_for(pool, M.dev[2], 1 * MiB, &y));
  ck_assert_int_eq(clpin__block_node(x), 1);
  ck_assert_int_eq(clpin__block_node(y), 1);
  clpin_stats s2 = test_stats(pool);
  ck_assert_uint_eq(s2.hits - s1.hits, 2);
  ck_assert_uint_eq(s2.misses, s1.misses);
  CL_OK(clpin_release(x, NULL));
  CL_OK(clpin_release(y, NULL));
  test_assert_pool_balanced(pool);
}
END_TEST

/* Staged transfers take their staging blocks from their device's node. */
START_TEST(staging_uses_the_device_node) {
  const size_t N = 32 * MiB;
  clpin_pool *pool;
  CL_OK(clpin_pool_get_for_context(M.ctx, &pool));
  unsigned char *src = malloc(N), *dst = malloc(N);
  ck_assert_ptr_nonnull(src);
  ck_assert_ptr_nonnull(dst);
  cl_mem m = buffer(N);
  test_fill(src, N, 3);
  cl_event ev;
  CL_OK(clpin_write(M.q[2], m, 0, src, N, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &ev));
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);
  CL_OK(clpin_read(M.q[2], m, 0, dst, N, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  ck_assert_uint_eq(test_check(dst, N, 3), (size_t)-1);
  clpin_stats s = test_stats(pool);
  ck_assert_uint_gt(s.blocks_cached, 0);
  /* Every idle block is node 1's: a device of node 0 finds none to reuse,
   * a device of node 1 finds one. */
  clpin_block *b;
  CL_OK(clpin__acquire_for(pool, M.dev[0], 8 * MiB, &b));
  ck_assert_int_eq(clpin__block_node(b), 0);
  clpin_stats s1 = test_stats(pool);
  ck_assert_uint_eq(s1.misses - s.misses, 1);
  CL_OK(clpin_release(b, NULL));
  CL_OK(clpin__acquire_for(pool, M.dev[3], 8 * MiB, &b));
  ck_assert_int_eq(clpin__block_node(b), 1);
  clpin_stats s2 = test_stats(pool);
  ck_assert_uint_eq(s2.hits - s1.hits, 1);
  CL_OK(clpin_release(b, NULL));
  clReleaseMemObject(m);
  free(src);
  free(dst);
}
END_TEST

/* Node 0 exists on this machine: its devices' blocks are clpin's own
 * mappings, bound there (MPOL_BIND), as the kernel reports. Node 1 does
 * not: binding fails, and its blocks are the driver's, still on node 1's
 * lists. */
#define MPOL_BIND_ 2
#define MPOL_F_NODE_ 1
#define MPOL_F_ADDR_ 2

static long mempolicy(int *mode, unsigned long *mask, unsigned long maxnode, void *addr,
                      unsigned long flags) {
  return syscall(SYS_get_mempolicy, mode, mask, maxnode, addr, flags);
}

START_TEST(placement_is_real_where_the_node_exists) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get_for_context(M.ctx, &pool));
  clpin_block *b0, *b2;
  CL_OK(clpin__acquire_for(pool, M.dev[0], 4 * MiB, &b0));
  CL_OK(clpin__acquire_for(pool, M.dev[2], 4 * MiB, &b2));
  unsigned char *p = clpin_block_host(b0);
  memset(p, 1, 4 * MiB); /* fault the pages in */
  int mode = -1;
  unsigned long mask[16] = {0};
  ck_assert_int_eq(mempolicy(&mode, mask, 16 * 64, p, MPOL_F_ADDR_), 0);
  ck_assert_int_eq(mode, MPOL_BIND_);
  ck_assert_uint_eq(mask[0], 1ul);
  for (size_t off = 0; off < 4 * MiB; off += MiB) {
    int node = -1;
    ck_assert_int_eq(mempolicy(&node, NULL, 0, p + off, MPOL_F_NODE_ | MPOL_F_ADDR_), 0);
    ck_assert_int_eq(node, 0);
  }
  /* The same seam, straight: a mapping bound to node 0. */
  void *q = clpin__topo_map_on_node(MiB, 0);
  ck_assert_ptr_nonnull(q);
  memset(q, 2, MiB);
  int node = -1;
  ck_assert_int_eq(mempolicy(&node, NULL, 0, q, MPOL_F_NODE_ | MPOL_F_ADDR_), 0);
  ck_assert_int_eq(node, 0);
  munmap(q, MiB);
  ck_assert_int_eq(clpin__block_node(b2), 1);
  memset(clpin_block_host(b2), 3, 4 * MiB);
  CL_OK(clpin_release(b0, NULL));
  CL_OK(clpin_release(b2, NULL));
}
END_TEST

/* Copy threads run a device's parts on its node's CPUs, and go back to
 * their own CPUs for work of no node. */
typedef struct {
  pthread_t caller;
  atomic_int on_copy_threads, off_node;
  cpu_set_t want;
  bool any;
} affinity_probe;

static void probe_part(void *arg, size_t part) {
  (void)part;
  affinity_probe *p = arg;
  /* Long enough that the caller does not take every part itself. */
  test_sleep_us(2000);
  if (pthread_equal(pthread_self(), p->caller))
    return;
  cpu_set_t now;
  ck_assert_int_eq(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
  atomic_fetch_add(&p->on_copy_threads, 1);
  bool ok = p->any ? CPU_COUNT(&now) >= CPU_COUNT(&p->want) : CPU_EQUAL(&now, &p->want);
  if (!ok)
    atomic_fetch_add(&p->off_node, 1);
}

START_TEST(copies_run_on_the_node_cpus) {
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, 2));
  ck_assert_uint_ge(clpin__copythreads_start(), 1);
  clpin_pool *pool;
  CL_OK(clpin_pool_get_for_context(M.ctx, &pool));
  for (cl_uint d = 0; d < M.n; d++) {
    const cpu_set_t *cpus = clpin__pool_device_cpus(pool, M.dev[d]);
    ck_assert_ptr_nonnull(cpus);
    ck_assert_int_eq(CPU_COUNT(cpus), 1);
    ck_assert(CPU_ISSET(node_of_dev[d], cpus));
  }
  for (int round = 0; round < 6; round++) {
    cl_uint d = (cl_uint)round % M.n;
    affinity_probe p = {.caller = pthread_self()};
    const cpu_set_t *cpus = round == 5 ? NULL : clpin__pool_device_cpus(pool, M.dev[d]);
    if (cpus) {
      p.want = *cpus;
    } else {
      /* Back home: at least every CPU of the process. */
      p.any = true;
      ck_assert_int_eq(sched_getaffinity(0, sizeof p.want, &p.want), 0);
    }
    clpin__task t = {.run = probe_part, .arg = &p, .nparts = 16, .cpus = cpus};
    clpin__copythreads_run(&t);
    ck_assert_int_gt(atomic_load(&p.on_copy_threads), 0);
    ck_assert_int_eq(atomic_load(&p.off_node), 0);
  }
}
END_TEST

/* ---- footprint ------------------------------------------------------------ */

static test_cl one;

static void setup_one(void) { test_cl_open(&one); }

static void teardown_one(void) {
  clpin_set_option(CLPIN_OPT_ROUND_MAX, 64 * MiB);
  clpin_shutdown();
  test_cl_close(&one);
}

static size_t bound(size_t n) {
  size_t a = n + n / 8, b = n + 2 * MiB;
  return a > b ? a : b;
}

/* 200 acquire/release rounds of random sizes in 65 MiB - 1 GiB, up to four
 * held: each block within the bound, bytes_in_use / bytes_requested <= 1.10
 * at every step, reuse happening, the invariant throughout. Idle bytes are
 * capped (memory on the CI machine is modest). */
START_TEST(large_rounds_stay_within_the_bound) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(one.queue, &pool));
  CL_OK(clpin_pool_set_limit(pool, 3 * GiB));
  clpin_block *held[4] = {0};
  size_t asked[4] = {0};
  unsigned r = 12345;
  double worst = 0;
  /* 200 rounds; TOPO_ROUNDS fewer where each round costs more (the
   * sanitizer stages: a round moves up to 1 GiB of poisoned memory). */
  int rounds = (int)test_env_count("TOPO_ROUNDS", 200);
  for (int round = 0; round < rounds; round++) {
    r = r * 1103515245u + 12345u;
    unsigned k = (r >> 16) % 4;
    if (held[k]) {
      CL_OK(clpin_release(held[k], NULL));
      held[k] = NULL;
    }
    r = r * 1103515245u + 12345u;
    size_t n = 65 * MiB + (size_t)(((uint64_t)r << 16 ^ r) % (GiB - 65 * MiB + 1));
    CL_OK(clpin_acquire(pool, n, &held[k]));
    asked[k] = n;
    size_t cap = clpin_block_size(held[k]);
    ck_assert_msg(cap >= n && cap <= bound(n), "round %d: %zu B for %zu B (bound %zu)", round, cap,
                  n, bound(n));
    clpin_stats s = test_stats(pool);
    test_assert_balanced(&s);
    double ratio = (double)s.bytes_in_use / (double)s.bytes_requested;
    if (ratio > worst)
      worst = ratio;
    ck_assert_msg(ratio <= 1.10, "round %d: in use / requested = %.4f", round, ratio);
  }
  clpin_stats s = test_stats(pool);
  ck_assert_uint_gt(s.hits, 0); /* some blocks were reused */
  for (int k = 0; k < 4; k++)
    if (held[k])
      CL_OK(clpin_release(held[k], NULL));
  (void)asked;
  printf("large rounds: worst in use / requested %.4f, %llu hits, %llu misses\n", worst,
         (unsigned long long)s.hits, (unsigned long long)s.misses);
}
END_TEST

START_TEST(large_blocks_are_reused_within_the_bound) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(one.queue, &pool));
  clpin_block *a, *b;
  CL_OK(clpin_acquire(pool, 100 * MiB + 1, &a));
  size_t cap = clpin_block_size(a);
  ck_assert_uint_eq(cap, 102 * MiB); /* rounded up to 2 MiB only */
  void *a_host = clpin_block_host(a);
  CL_OK(clpin_release(a, NULL));
  /* 92 MiB: 102 <= 92 x 1.125 = 103.5: the same block. (Handles are
   * compared by memory: Debug + ASan builds give a released block a new
   * handle.) */
  CL_OK(clpin_acquire(pool, 92 * MiB, &b));
  ck_assert_ptr_eq(clpin_block_host(b), a_host);
  clpin_stats s = test_stats(pool);
  ck_assert_uint_eq(s.hits, 1);
  ck_assert_uint_eq(s.bytes_requested, 92 * MiB);
  ck_assert_uint_eq(s.bytes_in_use, 102 * MiB);
  CL_OK(clpin_release(b, NULL));
  /* 80 MiB: 102 > 90: not within its bound, a new block. */
  CL_OK(clpin_acquire(pool, 80 * MiB, &b));
  ck_assert_ptr_ne(clpin_block_host(b), a_host);
  ck_assert_uint_eq(clpin_block_size(b), 80 * MiB);
  /* 110 MiB: larger than the idle block, a new one. */
  clpin_block *c;
  CL_OK(clpin_acquire(pool, 110 * MiB, &c));
  ck_assert_uint_eq(clpin_block_size(c), 110 * MiB);
  /* Up to CLPIN_ROUND_MAX: powers of two as before. */
  clpin_block *d;
  CL_OK(clpin_acquire(pool, 40 * MiB, &d));
  ck_assert_uint_eq(clpin_block_size(d), 64 * MiB);
  /* Best fit: of two idle blocks that fit, the smaller. */
  CL_OK(clpin_release(c, NULL));
  CL_OK(clpin_acquire(pool, 100 * MiB, &c)); /* 102 and 110 fit; 102 is taken */
  ck_assert_uint_eq(clpin_block_size(c), 102 * MiB);
  CL_OK(clpin_release(b, NULL));
  CL_OK(clpin_release(c, NULL));
  CL_OK(clpin_release(d, NULL));
  test_assert_pool_balanced(pool);
  /* CLPIN_ROUND_MAX=unlimited: power-of-two buckets for every size. */
  CL_OK(clpin_pool_trim(pool));
  CL_OK(clpin_set_option(CLPIN_OPT_ROUND_MAX, SIZE_MAX));
  CL_OK(clpin_acquire(pool, 65 * MiB, &a));
  ck_assert_uint_eq(clpin_block_size(a), 128 * MiB);
  CL_OK(clpin_release(a, NULL));
  /* A large block of a lowered threshold is never handed to a smaller
   * request that would not fit in it. */
  CL_OK(clpin_pool_trim(pool));
  CL_OK(clpin_set_option(CLPIN_OPT_ROUND_MAX, 8 * MiB));
  CL_OK(clpin_acquire(pool, 20 * MiB, &a));
  ck_assert_uint_eq(clpin_block_size(a), 20 * MiB);
  CL_OK(clpin_release(a, NULL));
  CL_OK(clpin_set_option(CLPIN_OPT_ROUND_MAX, 64 * MiB));
  CL_OK(clpin_acquire(pool, 30 * MiB, &b)); /* bucket 32 MiB holds the 20 MiB block */
  ck_assert_uint_eq(clpin_block_size(b), 32 * MiB);
  CL_OK(clpin_acquire(pool, 18 * MiB, &c)); /* 20 MiB fits within 32: taken */
  ck_assert_uint_eq(clpin_block_size(c), 20 * MiB);
  CL_OK(clpin_release(b, NULL));
  CL_OK(clpin_release(c, NULL));
  test_assert_pool_balanced(pool);
}
END_TEST

/* The cap and trim with large blocks: idle bytes stay under the cap, trim
 * frees them all, the counters balance at every step. */
START_TEST(large_blocks_cap_and_trim) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(one.queue, &pool));
  CL_OK(clpin_pool_set_limit(pool, 300 * MiB));
  size_t sizes[] = {200 * MiB, 150 * MiB, 100 * MiB, 70 * MiB};
  clpin_block *b[4];
  for (int i = 0; i < 4; i++)
    CL_OK(clpin_acquire(pool, sizes[i], &b[i]));
  clpin_stats s = test_stats(pool);
  ck_assert_uint_eq(s.bytes_requested, 520 * MiB);
  ck_assert_uint_eq(s.bytes_in_use, 520 * MiB);
  for (int i = 0; i < 4; i++) {
    CL_OK(clpin_release(b[i], NULL));
    s = test_stats(pool);
    test_assert_balanced(&s);
    ck_assert_uint_le(s.bytes_cached, 300 * MiB);
  }
  ck_assert_uint_gt(s.driver_frees, 0);
  /* Lowering the cap frees the largest idle blocks first. */
  CL_OK(clpin_pool_set_limit(pool, 100 * MiB));
  s = test_stats(pool);
  ck_assert_uint_le(s.bytes_cached, 100 * MiB);
  test_assert_balanced(&s);
  CL_OK(clpin_pool_trim(pool));
  s = test_stats(pool);
  test_assert_balanced(&s);
  ck_assert_uint_eq(s.bytes_cached, 0);
  ck_assert_uint_eq(s.bytes_reserved, 0);
  ck_assert_uint_eq(s.driver_allocs, s.driver_frees);
}
END_TEST

/* CLPIN_NUMA=1 on a host of two nodes: POCL's CPU devices have no PCI
 * address, so no device is placed, and every block shares one list. */
START_TEST(no_pci_address_no_placement) {
  fake_nodes("0-1\n");
  ck_assert_int_eq(clpin__topo_only_node(), -1);
  CL_OK(clpin_set_option(CLPIN_OPT_NUMA, 1));
  clpin_pool *pool;
  CL_OK(clpin_pool_get(one.queue, &pool));
  ck_assert_int_eq(clpin__pool_device_node(pool, one.device), -1);
  ck_assert_ptr_null(clpin__pool_device_cpus(pool, one.device));
  char why[200];
  ck_assert_int_eq(clpin__topo_device_node(one.device, why, sizeof why), -1);
  ck_assert_msg(strstr(why, "no PCI address"), "why: %s", why);
  clpin_block *b;
  CL_OK(clpin_acquire(pool, MiB, &b));
  ck_assert_int_eq(clpin__block_node(b), -1);
  CL_OK(clpin_release(b, NULL));
  end_fake();
}
END_TEST

/* CLPIN_NUMA=1 on a host of one node: a device that names no node is on that node, its blocks bound
 * there and its copies on its CPUs; auto places nothing on such a host. */
START_TEST(one_node_host_forced_on) {
  fake_nodes("0\n");
  ck_assert_int_eq(clpin__topo_only_node(), 0);
  clpin_pool *pool;
  CL_OK(clpin_pool_get(one.queue, &pool));
  ck_assert_int_eq(clpin__pool_device_node(pool, one.device), -1); /* auto */
  clpin_shutdown();
  CL_OK(clpin_set_option(CLPIN_OPT_NUMA, 1));
  CL_OK(clpin_pool_get(one.queue, &pool));
  ck_assert_int_eq(clpin__pool_device_node(pool, one.device), 0);
  const cpu_set_t *cpus = clpin__pool_device_cpus(pool, one.device);
  ck_assert_ptr_nonnull(cpus);
  ck_assert(CPU_ISSET(0, cpus));
  ck_assert_int_eq(CPU_COUNT(cpus), 1);
  clpin_block *b;
  CL_OK(clpin_acquire(pool, MiB, &b));
  ck_assert_int_eq(clpin__block_node(b), 0);
  CL_OK(clpin_release(b, NULL));
  end_fake();
}
END_TEST

static Suite *topo_suite(void) {
  Suite *s = suite_create("topo");
  TCase *two = test_tcase(s, "two", setup_two, teardown, 600);
  tcase_add_test(two, two_devices_at_once);
  tcase_add_test(two, two_devices_blocking);
  tcase_add_test(two, two_devices_race_release);
  tcase_add_test(two, two_devices_handoff);
  TCase *numa = test_tcase(s, "numa", setup_numa, teardown_numa, 300);
  tcase_add_test(numa, seam_reads_the_made_up_tree);
  tcase_add_test(numa, blocks_stay_on_their_node);
  tcase_add_test(numa, staging_uses_the_device_node);
  tcase_add_test(numa, placement_is_real_where_the_node_exists);
  tcase_add_test(numa, copies_run_on_the_node_cpus);
  TCase *fp = test_tcase(s, "footprint", setup_one, teardown_one, 600);
  tcase_add_test(fp, large_rounds_stay_within_the_bound);
  tcase_add_test(fp, large_blocks_are_reused_within_the_bound);
  tcase_add_test(fp, large_blocks_cap_and_trim);
  tcase_add_test(fp, no_pci_address_no_placement);
  tcase_add_test(fp, one_node_host_forced_on);
  return s;
}

int main(void) { return test_run_suite(topo_suite()); }
