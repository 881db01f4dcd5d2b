/* SPDX-License-Identifier: Apache-2.0 */
/* libclpin-mpi under mpirun (ci/stages/47-mpi.sh: 2 and 3 ranks, POCL).
 *
 * Check forks each test, which MPI does not survive, so this is a plain
 * runner: every rank runs every test in the same order, counts what passed,
 * and rank 0 prints "N passed, M failed" over all ranks. Exit status 0 only
 * when nothing failed anywhere. The chunk is small (CLPIN_MPI_CHUNK=64K) so
 * that "many chunks" stays fast on a 2-core CI machine. */
#include "clpin_mpi.h"
#include "wire.h" /* src/mpi/: p2p.c's wire format */

#include <dlfcn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, nranks, passed, failed;
static cl_context ctx;
static cl_command_queue q;
static const char *current;

#define CHUNK ((size_t)64 << 10)
/* The size of the header a multi-chunk send starts with (src/mpi/wire.h,
 * the library's own): a one-message payload of just that size must never
 * be taken for one, nor a header for such a payload. TINY is the largest
 * payload of the plain path (through the stack). */
#define HDR sizeof(clpin__mpi_header)
#define TINY ((size_t)CLPIN__MPI_TINY)

static void check_at(bool ok, const char *file, int line, const char *fmt, ...) {
  if (ok) {
    passed++;
    return;
  }
  failed++;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d: %s: %s:%d: FAIL: ", rank, current, file, line);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n  detail: %s\n", clpin_mpi_last_error_detail());
  va_end(ap);
}
#define CHECK(cond, ...) check_at((cond), __FILE__, __LINE__, __VA_ARGS__)
#define CHECK_OK(err, what) CHECK((err) == CL_SUCCESS, "%s returned %s", what, clpin_strerror(err))

static void die(const char *what, cl_int err) {
  fprintf(stderr, "rank %d: %s: %d\n", rank, what, err);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static void open_cl(void) {
  cl_platform_id plat;
  cl_device_id dev = NULL;
  cl_int err = clGetPlatformIDs(1, &plat, NULL);
  if (err == CL_SUCCESS)
    err = clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
  if (err != CL_SUCCESS)
    die("no OpenCL device", err);
  ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  if (err != CL_SUCCESS)
    die("clCreateContext", err);
  q = clCreateCommandQueue(ctx, dev, 0, &err);
  if (err != CL_SUCCESS)
    die("clCreateCommandQueue", err);
}

static cl_mem buffer(size_t n) {
  cl_int err;
  cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n ? n : 1, NULL, &err);
  if (err != CL_SUCCESS)
    die("clCreateBuffer", err);
  return m;
}

static void put(cl_mem m, size_t off, const void *p, size_t n) {
  if (n && clEnqueueWriteBuffer(q, m, CL_TRUE, off, n, p, 0, NULL, NULL) != CL_SUCCESS)
    die("clEnqueueWriteBuffer", 0);
}
static void get(cl_mem m, size_t off, void *p, size_t n) {
  if (n && clEnqueueReadBuffer(q, m, CL_TRUE, off, n, p, 0, NULL, NULL) != CL_SUCCESS)
    die("clEnqueueReadBuffer", 0);
}

static unsigned char pattern(int from, size_t i, unsigned salt) {
  return (unsigned char)(i * 131u + (unsigned)from * 29u + salt * 7u + (i >> 9));
}

static struct clpin_mpi_stats stats_now(void) {
  struct clpin_mpi_stats s = {sizeof s, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  clpin_mpi_stats(&s);
  return s;
}

static void set_shm(bool on) { setenv("CLPIN_MPI_SHM", on ? "1" : "0", 1); }

/* ---------------------------------------------------------------- p2p -- */

/* Rank `from` sends n bytes at offset soff; rank `to` receives at roff into
 * a buffer whose other bytes must stay untouched. */
static void one_transfer(int from, int to, size_t n, size_t soff, size_t roff, unsigned salt) {
  size_t cap = n + soff + roff + 16;
  if (rank == from) {
    cl_mem m = buffer(cap);
    unsigned char *h = malloc(cap);
    for (size_t i = 0; i < cap; i++)
      h[i] = pattern(from, i >= soff ? i - soff : 999, salt);
    /* Written non-blocking: the send's wait list orders it. */
    cl_event w;
    if (clEnqueueWriteBuffer(q, m, CL_FALSE, 0, cap, h, 0, NULL, &w) != CL_SUCCESS)
      die("write", 0);
    cl_int err = clpin_mpi_send(q, m, soff, n, to, (int)salt, MPI_COMM_WORLD, 1, &w);
    CHECK_OK(err, "clpin_mpi_send");
    clReleaseEvent(w);
    clReleaseMemObject(m);
    free(h);
  } else if (rank == to) {
    cl_mem m = buffer(cap);
    unsigned char *h = malloc(cap), *back = malloc(cap);
    memset(h, 0xA5, cap);
    put(m, 0, h, cap);
    cl_event ev = NULL;
    cl_int err = clpin_mpi_recv(q, m, roff, n, from, (int)salt, MPI_COMM_WORLD, 0, NULL, &ev);
    CHECK_OK(err, "clpin_mpi_recv");
    CHECK(err != CL_SUCCESS || ev != NULL, "no event");
    if (ev) {
      CHECK(clWaitForEvents(1, &ev) == CL_SUCCESS, "event failed");
      clReleaseEvent(ev);
    }
    get(m, 0, back, cap);
    size_t bad = cap;
    for (size_t i = 0; i < cap && bad == cap; i++) {
      unsigned char want = i >= roff && i < roff + n ? pattern(from, i - roff, salt) : 0xA5;
      if (back[i] != want)
        bad = i;
    }
    CHECK(bad == cap, "%zu bytes %d->%d (offsets %zu, %zu): byte %zu differs", n, from, to, soff,
          roff, bad);
    clReleaseMemObject(m);
    free(h);
    free(back);
  }
}

static void test_p2p_sizes(bool shm) {
  current = shm ? "p2p sizes (shm)" : "p2p sizes (forced point-to-point)";
  set_shm(shm);
  struct clpin_mpi_stats before = stats_now();
  const size_t sizes[] = {0,         1,        7,         4096,      4097,
                          TINY,      TINY + 1, HDR - 1,   HDR,       HDR + 1,
                          CHUNK - 1, CHUNK,    CHUNK + 1, 2 * CHUNK, 9 * CHUNK + 3};
  unsigned salt = 1;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    for (size_t o = 0; o < 2; o++) {
      one_transfer(0, 1, sizes[i], o * 3, o * 5, salt++);
      one_transfer(1, 0, sizes[i], o * 1, o * 2, salt++);
    }
  struct clpin_mpi_stats after = stats_now();
  if (rank <= 1) {
    /* The multi-chunk messages took the path asked for. */
    uint64_t shm_bytes = after.bytes_sent_shm - before.bytes_sent_shm;
    uint64_t p2p_bytes = after.bytes_sent_p2p - before.bytes_sent_p2p;
    uint64_t shm_in = after.bytes_received_shm - before.bytes_received_shm;
    if (shm) {
      CHECK(shm_bytes == 2 * (CHUNK + 1 + 2 * CHUNK + 9 * CHUNK + 3), "shm bytes sent %llu",
            (unsigned long long)shm_bytes);
      CHECK(shm_in == shm_bytes, "shm bytes received %llu, sent %llu", (unsigned long long)shm_in,
            (unsigned long long)shm_bytes);
    } else {
      CHECK(shm_bytes == 0 && shm_in == 0, "shm used although CLPIN_MPI_SHM=0");
      CHECK(p2p_bytes > 2 * 9 * CHUNK, "p2p bytes sent %llu", (unsigned long long)p2p_bytes);
    }
  }
  set_shm(true);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Every other rank sends to rank 0, which receives from each in turn (and
 * in reverse order of arrival: rank 0 names the source). */
static void test_many_senders(void) {
  current = "several senders";
  for (int shm = 1; shm >= 0; shm--) {
    set_shm(shm);
    size_t n = 3 * CHUNK + 11;
    if (rank != 0) {
      one_transfer(rank, 0, n, 0, 0, 40 + (unsigned)rank);
    } else {
      for (int from = nranks - 1; from >= 1; from--)
        one_transfer(from, 0, n, 0, 0, 40 + (unsigned)from);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  set_shm(true);
}

static void test_mismatch(void) {
  current = "size mismatch";
  const size_t pairs[][2] = {{100, 200},
                             {200, 100},
                             {3 * CHUNK, 2 * CHUNK},
                             {CHUNK / 2, 3 * CHUNK},
                             {3 * CHUNK, CHUNK / 2},
                             {3 * CHUNK, HDR},
                             {HDR, 3 * CHUNK},
                             {HDR, HDR + 1},
                             {HDR + 1, HDR},
                             {4096, 4097},
                             {TINY + 1, TINY},
                             {CHUNK, 100}};
  for (size_t k = 0; k < sizeof pairs / sizeof *pairs; k++) {
    size_t sn = pairs[k][0], rn = pairs[k][1];
    if (rank == 0) {
      cl_mem m = buffer(sn);
      cl_int err = clpin_mpi_send(q, m, 0, sn, 1, 7, MPI_COMM_WORLD, 0, NULL);
      /* A multi-chunk sender learns of it; a one-message sender cannot. */
      if (sn > CHUNK)
        CHECK(err == CLPIN_ERR_MISMATCH, "send %zu to a recv of %zu: %s", sn, rn,
              clpin_strerror(err));
      else
        CHECK(err == CL_SUCCESS, "one-message send: %s", clpin_strerror(err));
      clReleaseMemObject(m);
    } else if (rank == 1) {
      cl_mem m = buffer(rn);
      unsigned char *h = malloc(rn), *back = malloc(rn);
      memset(h, 0x5A, rn);
      put(m, 0, h, rn);
      cl_event ev = NULL;
      cl_int err = clpin_mpi_recv(q, m, 0, rn, 0, 7, MPI_COMM_WORLD, 0, NULL, &ev);
      CHECK(err == CLPIN_ERR_MISMATCH, "recv %zu from a send of %zu: %s", rn, sn,
            clpin_strerror(err));
      CHECK(ev == NULL, "an event from a failed call");
      CHECK(strstr(clpin_mpi_last_error_detail(), "untouched") != NULL, "detail: %s",
            clpin_mpi_last_error_detail());
      get(m, 0, back, rn);
      CHECK(memcmp(h, back, rn) == 0, "the buffer changed");
      clReleaseMemObject(m);
      free(h);
      free(back);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  /* Nothing was left pending: a correct message still goes through. */
  one_transfer(0, 1, 3 * CHUNK + 1, 0, 0, 7);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* The sender's device reads fail (a wait list holding an event of another
 * context: each read is refused with CL_INVALID_CONTEXT; POCL 3.1 leaves a
 * command behind a failed user event queued for ever, so that cannot be it):
 * the sender returns the error and the receiver fails too, naming the
 * sender, instead of waiting for chunks that never come. Nothing is left
 * pending: a good message follows on the same tag. */
static void test_sender_fails(void) {
  current = "sender's device fails";
  const size_t sizes[] = {100, CHUNK, 3 * CHUNK + 5};
  cl_context other = NULL;
  if (rank == 0) {
    cl_device_id dev;
    clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
    other = clCreateContext(NULL, 1, &dev, NULL, NULL, NULL);
  }
  for (int shm = 1; shm >= 0; shm--) {
    set_shm(shm);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
      size_t n = sizes[k];
      if (rank == 0) {
        cl_int e;
        cl_event u = clCreateUserEvent(other, &e);
        clSetUserEventStatus(u, CL_COMPLETE);
        cl_mem m = buffer(n);
        cl_int err = clpin_mpi_send(q, m, 0, n, 1, 11, MPI_COMM_WORLD, 1, &u);
        CHECK(err == CL_INVALID_CONTEXT, "send of %zu, its reads refused: %s", n,
              clpin_strerror(err));
        clReleaseEvent(u);
        clReleaseMemObject(m);
      } else if (rank == 1) {
        cl_mem m = buffer(n);
        cl_int err = clpin_mpi_recv(q, m, 0, n, 0, 11, MPI_COMM_WORLD, 0, NULL, NULL);
        cl_int want = n > CHUNK ? CLPIN_ERR_PEER : CLPIN_ERR_MISMATCH;
        CHECK(err == want, "recv of %zu from a failing sender: %s", n, clpin_strerror(err));
        CHECK(strstr(clpin_mpi_last_error_detail(), "rank 0") != NULL, "detail: %s",
              clpin_mpi_last_error_detail());
        clReleaseMemObject(m);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      one_transfer(0, 1, n + 7, 0, 0, 11);
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  if (other)
    clReleaseContext(other);
  set_shm(true);
}

/* ---------------------------------------------------------- allreduce -- */

typedef struct {
  MPI_Datatype t;
  size_t size;
  const char *name;
} tinfo;

static double value(int r, size_t i) {
  return (double)((long)((i * 7 + (size_t)r * 13) % 101) - 50);
}

static void fill_typed(void *p, MPI_Datatype t, size_t n, int r) {
  for (size_t i = 0; i < n; i++) {
    double v = value(r, i);
    if (t == MPI_FLOAT)
      ((float *)p)[i] = (float)v;
    else if (t == MPI_DOUBLE)
      ((double *)p)[i] = v;
    else if (t == MPI_INT)
      ((int *)p)[i] = (int)v;
    else
      ((long long *)p)[i] = (long long)v * 1000000007LL;
  }
}

static bool expect_ok(const void *got, MPI_Datatype t, MPI_Op op, size_t n, size_t *where) {
  for (size_t i = 0; i < n; i++) {
    double acc = 0;
    for (int r = 0; r < nranks; r++) {
      double v = value(r, i);
      acc = r == 0          ? v
            : op == MPI_SUM ? acc + v
            : op == MPI_MAX ? (v > acc ? v : acc)
                            : (v < acc ? v : acc);
    }
    bool ok;
    if (t == MPI_FLOAT)
      ok = ((const float *)got)[i] == (float)acc;
    else if (t == MPI_DOUBLE)
      ok = ((const double *)got)[i] == acc;
    else if (t == MPI_INT)
      ok = ((const int *)got)[i] == (int)acc;
    else
      ok = ((const long long *)got)[i] == (long long)acc * 1000000007LL;
    if (!ok) {
      *where = i;
      return false;
    }
  }
  return true;
}

static void test_allreduce(bool shm) {
  current = shm ? "allreduce (shm)" : "allreduce (ring)";
  set_shm(shm);
  const tinfo types[] = {{MPI_FLOAT, sizeof(float), "float"},
                         {MPI_DOUBLE, sizeof(double), "double"},
                         {MPI_INT, sizeof(int), "int"},
                         {MPI_LONG_LONG, sizeof(long long), "long long"}};
  const MPI_Op ops[] = {MPI_SUM, MPI_MAX, MPI_MIN};
  const char *opn[] = {"sum", "max", "min"};
  struct clpin_mpi_stats before = stats_now();
  int big = 0;
  for (size_t ti = 0; ti < 4; ti++)
    for (size_t oi = 0; oi < 3; oi++) {
      size_t es = types[ti].size;
      const size_t counts[] = {1, 1000, 3 * CHUNK / es + 5, 20 * CHUNK / es + 1};
      for (size_t ci = 0; ci < 4; ci++) {
        size_t n = counts[ci];
        if (ci == 3 && (ti != 0 || oi != 0))
          continue; /* many chunks: float sum only (the time goes to the others) */
        big += n * es > (64 << 10);
        void *h = malloc(n * es + 8), *back = malloc(n * es + 8);
        fill_typed(h, types[ti].t, n, rank);
        memset((char *)h + n * es, 0x3C, 8); /* past count: must not change */
        cl_mem m = buffer(n * es + 8);
        /* Written non-blocking: the wait list orders it before the reads. */
        cl_event w;
        if (clEnqueueWriteBuffer(q, m, CL_FALSE, 0, n * es + 8, h, 0, NULL, &w) != CL_SUCCESS)
          die("write", 0);
        cl_event ev = NULL;
        cl_int err = clpin_mpi_allreduce(q, m, n, types[ti].t, ops[oi], MPI_COMM_WORLD, 1, &w, &ev);
        clReleaseEvent(w);
        CHECK_OK(err, "clpin_mpi_allreduce");
        if (ev) {
          clWaitForEvents(1, &ev);
          clReleaseEvent(ev);
        }
        get(m, 0, back, n * es + 8);
        size_t where = 0;
        CHECK(expect_ok(back, types[ti].t, ops[oi], n, &where), "%s %s of %zu: element %zu wrong",
              types[ti].name, opn[oi], n, where);
        CHECK(memcmp((char *)back + n * es, (char *)h + n * es, 8) == 0,
              "bytes past count changed");
        clReleaseMemObject(m);
        free(h);
        free(back);
      }
    }
  struct clpin_mpi_stats after = stats_now();
  if (shm)
    CHECK(after.allreduce_shm - before.allreduce_shm == (uint64_t)big &&
              after.allreduce_ring == before.allreduce_ring,
          "shm allreduces %llu of %d",
          (unsigned long long)(after.allreduce_shm - before.allreduce_shm), big);
  else
    CHECK(after.allreduce_ring - before.allreduce_ring == (uint64_t)big &&
              after.allreduce_shm == before.allreduce_shm,
          "ring allreduces %llu of %d",
          (unsigned long long)(after.allreduce_ring - before.allreduce_ring), big);
  set_shm(true);
}

/* Chunks large enough that each rank's reduction runs on several threads
 * (CLPIN_MPI_THREADS), every op and a type of each width. */
static void test_allreduce_threads(void) {
  current = "allreduce on reduction threads";
  setenv("CLPIN_MPI_CHUNK", "1M", 1);
  setenv("CLPIN_MPI_THREADS", "3", 1);
  const MPI_Datatype types[] = {MPI_FLOAT, MPI_LONG_LONG};
  const size_t sizes[] = {4, 8};
  const MPI_Op ops[] = {MPI_SUM, MPI_MAX, MPI_MIN};
  for (int ti = 0; ti < 2; ti++)
    for (int oi = 0; oi < 3; oi++) {
      size_t n = (5u << 20) / 2 / sizes[ti] + 3, es = sizes[ti];
      void *h = malloc(n * es), *back = malloc(n * es);
      fill_typed(h, types[ti], n, rank);
      cl_mem m = buffer(n * es);
      put(m, 0, h, n * es);
      cl_int err = clpin_mpi_allreduce(q, m, n, types[ti], ops[oi], MPI_COMM_WORLD, 0, NULL, NULL);
      CHECK_OK(err, "clpin_mpi_allreduce");
      clFinish(q);
      get(m, 0, back, n * es);
      size_t where = 0;
      CHECK(expect_ok(back, types[ti], ops[oi], n, &where), "type %d op %d: element %zu wrong", ti,
            oi, where);
      clReleaseMemObject(m);
      free(h);
      free(back);
    }
  setenv("CLPIN_MPI_CHUNK", "64K", 1);
  unsetenv("CLPIN_MPI_THREADS");
}

/* One rank's device fails inside a collective (its wait list holds an event
 * of another context, which every device copy of it refuses): it keeps in
 * step, returns its error, and every other rank gets CLPIN_ERR_PEER; nobody
 * hangs, and the next collective works. */
static void test_collective_device_failure(void) {
  current = "a device failing inside a collective";
  cl_device_id dev;
  clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, NULL);
  cl_int e;
  cl_event foreign = clCreateUserEvent(other, &e);
  clSetUserEventStatus(foreign, CL_COMPLETE);
  const size_t counts[] = {100, 3 * CHUNK / 4 + 1}; /* the small path, and chunks */
  for (int shm = 1; shm >= 0; shm--) {
    set_shm(shm);
    for (int bad = 0; bad < nranks; bad++)
      for (size_t k = 0; k < 2; k++) {
        size_t n = counts[k];
        cl_mem m = buffer(n * 4);
        cl_int err = clpin_mpi_allreduce(q, m, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                         rank == bad ? 1 : 0, rank == bad ? &foreign : NULL, NULL);
        CHECK(err == (rank == bad ? CL_INVALID_CONTEXT : CLPIN_ERR_PEER),
              "allreduce of %zu, rank %d's device failing: %s", n, bad, clpin_strerror(err));
        err = clpin_mpi_bcast(q, m, 0, n * 4, 0, MPI_COMM_WORLD, rank == bad ? 1 : 0,
                              rank == bad ? &foreign : NULL, NULL);
        CHECK(err == (rank == bad ? CL_INVALID_CONTEXT : CLPIN_ERR_PEER),
              "bcast of %zu from 0, rank %d's device failing: %s", n * 4, bad, clpin_strerror(err));
        err = clpin_mpi_allreduce(q, m, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, NULL);
        CHECK_OK(err, "the next allreduce");
        clFinish(q);
        clReleaseMemObject(m);
      }
  }
  set_shm(true);
  clReleaseEvent(foreign);
  clReleaseContext(other);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* -------------------------------------------------------------- bcast -- */

static void test_bcast(bool shm) {
  current = shm ? "bcast (shm)" : "bcast (point-to-point)";
  set_shm(shm);
  const size_t sizes[] = {0, 1, 4097, CHUNK + 1, 7 * CHUNK + 7};
  for (int root = 0; root < nranks; root++)
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
      size_t n = sizes[si], off = (size_t)rank * 3, cap = n + off + 8;
      unsigned char *h = malloc(cap), *back = malloc(cap);
      for (size_t i = 0; i < cap; i++)
        h[i] =
            rank == root && i >= off && i < off + n ? pattern(root, i - off, (unsigned)si) : 0x11;
      cl_mem m = buffer(cap);
      put(m, 0, h, cap);
      cl_event ev = NULL;
      cl_int err = clpin_mpi_bcast(q, m, off, n, root, MPI_COMM_WORLD, 0, NULL, &ev);
      CHECK_OK(err, "clpin_mpi_bcast");
      if (ev) {
        clWaitForEvents(1, &ev);
        clReleaseEvent(ev);
      }
      get(m, 0, back, cap);
      size_t bad = cap;
      for (size_t i = 0; i < cap && bad == cap; i++) {
        unsigned char want = i >= off && i < off + n ? pattern(root, i - off, (unsigned)si) : 0x11;
        if (back[i] != want)
          bad = i;
      }
      CHECK(bad == cap, "bcast of %zu from %d: byte %zu differs", n, root, bad);
      clReleaseMemObject(m);
      free(h);
      free(back);
    }
  set_shm(true);
}

/* ------------------------------------------- settings that must agree -- */

/* A watchdog for a test that once hung or crashed a rank: past `s` seconds
 * SIGALRM ends the rank (and mpirun the job) instead of CTest's 300 s. */
static void watchdog(unsigned s) { alarm(s); }

static bool all_equal(const unsigned char *a, unsigned char v, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != v)
      return false;
  return true;
}

/* One rank's CLPIN_MPI_CHUNK differs from the others': every collective,
 * blocking or a request, on either path, fails with CLPIN_ERR_MISMATCH on
 * every rank, naming the setting, each buffer untouched (the chunk sizes
 * the pieces on the wire and the shared segment: a rank with a larger one
 * wrote past a pinned block or a segment's end). Then, set alike again,
 * the ranks are still in step. */
static void test_chunk_mismatch(bool shm) {
  current = shm ? "CLPIN_MPI_CHUNK differs (shm)" : "CLPIN_MPI_CHUNK differs (point-to-point)";
  set_shm(shm);
  watchdog(60);
  const size_t n = 9 * CHUNK + 5, count = n / sizeof(float);
  unsigned char *h = malloc(n), *back = malloc(n);
  memset(h, 0x3C, n);
  cl_mem m = buffer(n);
  for (int k = 0; k < 4; k++) {
    /* 64K against 128K; then 64K against 8K: larger and smaller chunks. */
    setenv("CLPIN_MPI_CHUNK", rank == 0 ? (k < 2 ? "128K" : "8K") : "64K", 1);
    put(m, 0, h, n);
    cl_int err;
    clpin_mpi_request *r = NULL;
    bool reduce = k % 2 == 0;
    for (int nb = 0; nb < 2; nb++) {
      if (reduce)
        err =
            nb ? clpin_mpi_iallreduce(q, m, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, &r)
               : clpin_mpi_allreduce(q, m, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL,
                                     NULL);
      else
        err = nb ? clpin_mpi_ibcast(q, m, 0, n, nranks - 1, MPI_COMM_WORLD, 0, NULL, &r)
                 : clpin_mpi_bcast(q, m, 0, n, nranks - 1, MPI_COMM_WORLD, 0, NULL, NULL);
      if (nb && err == CL_SUCCESS)
        err = clpin_mpi_wait(r, NULL);
      CHECK(err == CLPIN_ERR_MISMATCH &&
                strstr(clpin_mpi_last_error_detail(), "CLPIN_MPI_CHUNK") != NULL,
            "%s%s with CLPIN_MPI_CHUNK %s on rank 0 only: %s", nb ? "i" : "",
            reduce ? "allreduce" : "bcast", getenv("CLPIN_MPI_CHUNK"), clpin_strerror(err));
      get(m, 0, back, n);
      CHECK(all_equal(back, 0x3C, n), "the buffer changed");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  setenv("CLPIN_MPI_CHUNK", "64K", 1);
  /* In step: a bcast and an allreduce that work, with CLPIN_MPI_SHM=0 on
   * rank 0 only (the agreement turns the shared segment off for all). */
  set_shm(rank != 0);
  put(m, 0, h, n);
  cl_int err = clpin_mpi_bcast(q, m, 0, n, 0, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK_OK(err, "clpin_mpi_bcast after the mismatch");
  float *f = (float *)back;
  for (size_t i = 0; i < count; i++)
    f[i] = 1.0f;
  put(m, 0, f, count * sizeof(float));
  err = clpin_mpi_allreduce(q, m, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK_OK(err, "clpin_mpi_allreduce after the mismatch");
  get(m, 0, f, count * sizeof(float));
  size_t bad = count;
  for (size_t i = 0; i < count && bad == count; i++)
    if (f[i] != (float)nranks)
      bad = i;
  CHECK(bad == count, "allreduce after the mismatch: element %zu is wrong", bad);
  clReleaseMemObject(m);
  free(h);
  free(back);
  watchdog(0);
  set_shm(true);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* ------------------------------------------------ messages to oneself -- */

/* n bytes from this rank to itself, tag `tag`, both calls as `how` says:
 * 0 blocking send then blocking recv, 1 isend then irecv, 2 irecv then
 * isend, 3 irecv then blocking send, 4 isend then blocking recv. */
static void self_transfer(size_t n, int how, int tag, unsigned salt) {
  size_t cap = n + 16;
  unsigned char *h = malloc(cap), *back = malloc(cap);
  for (size_t i = 0; i < cap; i++)
    h[i] = pattern(rank, i, salt);
  cl_mem src = buffer(cap), dst = buffer(cap);
  put(src, 0, h, cap);
  memset(back, 0x5A, cap);
  put(dst, 0, back, cap);
  clpin_mpi_request *sr = NULL, *rr = NULL;
  cl_event ev = NULL;
  cl_int se = CL_SUCCESS, re = CL_SUCCESS;
  MPI_Comm w = MPI_COMM_WORLD;
  switch (how) {
  case 0:
    se = clpin_mpi_send(q, src, 3, n, rank, tag, w, 0, NULL);
    re = clpin_mpi_recv(q, dst, 5, n, rank, tag, w, 0, NULL, &ev);
    break;
  case 1:
    se = clpin_mpi_isend(q, src, 3, n, rank, tag, w, 0, NULL, &sr);
    re = clpin_mpi_irecv(q, dst, 5, n, rank, tag, w, 0, NULL, &rr);
    break;
  case 2:
    re = clpin_mpi_irecv(q, dst, 5, n, rank, tag, w, 0, NULL, &rr);
    se = clpin_mpi_isend(q, src, 3, n, rank, tag, w, 0, NULL, &sr);
    break;
  case 3:
    re = clpin_mpi_irecv(q, dst, 5, n, rank, tag, w, 0, NULL, &rr);
    se = clpin_mpi_send(q, src, 3, n, rank, tag, w, 0, NULL);
    break;
  default:
    se = clpin_mpi_isend(q, src, 3, n, rank, tag, w, 0, NULL, &sr);
    re = clpin_mpi_recv(q, dst, 5, n, rank, tag, w, 0, NULL, &ev);
    break;
  }
  if (se == CL_SUCCESS && sr)
    se = clpin_mpi_wait(sr, NULL);
  if (re == CL_SUCCESS && rr)
    re = clpin_mpi_wait(rr, &ev);
  CHECK(se == CL_SUCCESS && re == CL_SUCCESS, "%zu bytes to itself (way %d): send %s, recv %s", n,
        how, clpin_strerror(se), clpin_strerror(re));
  CHECK(re != CL_SUCCESS || ev != NULL, "no event from a receive");
  if (ev) {
    CHECK(clWaitForEvents(1, &ev) == CL_SUCCESS, "event failed");
    clReleaseEvent(ev);
  }
  get(dst, 0, back, cap);
  size_t bad = cap;
  for (size_t i = 0; i < cap && bad == cap; i++)
    if (back[i] != (i >= 5 && i < 5 + n ? pattern(rank, i - 5 + 3, salt) : 0x5A))
      bad = i;
  CHECK(bad == cap, "%zu bytes to itself (way %d): byte %zu differs", n, how, bad);
  clReleaseMemObject(src);
  clReleaseMemObject(dst);
  free(h);
  free(back);
}

/* CLPIN_MPI_CHUNK is read as clpin's own size options are (src/size.c):
 * rank 0's value is refused where clpin refuses it ("+64K": no sign; "1T":
 * above 1G; "0": below 4K), said once on stderr in clpin's words, and the
 * rank keeps 4M, so a collective with the others' 64K fails with
 * CLPIN_ERR_MISMATCH everywhere; "64KiB", which clpin takes, agrees with
 * 64K. */
static void test_chunk_refused(void) {
  current = "CLPIN_MPI_CHUNK refused as clpin refuses a size";
  watchdog(60);
  const size_t n = 3 * CHUNK;
  cl_mem m = buffer(n);
  static const char *const bad[] = {"+64K", "1T", "0"};
  for (int k = 0; k < 4; k++) {
    setenv("CLPIN_MPI_CHUNK", rank == 0 ? (k < 3 ? bad[k] : "64KiB") : "64K", 1);
    /* Rank 0's stderr, into a file for the first (the only line said). */
    char path[] = "/tmp/clpin-test-mpi-XXXXXX";
    int fd = rank == 0 && k == 0 ? mkstemp(path) : -1, saved = -1;
    if (fd >= 0) {
      fflush(stderr);
      saved = dup(2);
      dup2(fd, 2);
    }
    cl_int err = clpin_mpi_bcast(q, m, 0, n, 0, MPI_COMM_WORLD, 0, NULL, NULL);
    if (fd >= 0) {
      fflush(stderr);
      dup2(saved, 2);
      close(saved);
      char text[512] = "";
      ssize_t got = pread(fd, text, sizeof text - 1, 0);
      text[got > 0 ? got : 0] = '\0';
      close(fd);
      unlink(path);
      CHECK(strstr(text, "clpin-mpi: ignoring CLPIN_MPI_CHUNK=\"+64K\": not a size; valid: a size "
                         "from 4K to 1G") != NULL &&
                strstr(text, "using the default 4M") != NULL,
            "rank 0's stderr for CLPIN_MPI_CHUNK=+64K: \"%s\"", text);
    }
    if (k < 3)
      CHECK(err == CLPIN_ERR_MISMATCH &&
                strstr(clpin_mpi_last_error_detail(), "CLPIN_MPI_CHUNK") != NULL,
            "bcast with CLPIN_MPI_CHUNK=%s on rank 0 (64K elsewhere): %s", bad[k],
            clpin_strerror(err));
    else
      CHECK_OK(err, "bcast with CLPIN_MPI_CHUNK=64KiB on rank 0, 64K elsewhere");
    MPI_Barrier(MPI_COMM_WORLD);
  }
  setenv("CLPIN_MPI_CHUNK", "64K", 1);
  clReleaseMemObject(m);
  watchdog(0);
}

/* clpin_mpi_stats follows clpin's versioned-struct rule: a struct_size
 * below CLPIN_MPI_STATS_SIZE_V0_3 (the 0.3.0 layout) is refused with the
 * core's words, the struct untouched; a larger one gets zeros past this
 * library's fields and keeps its struct_size. Local: no communication. */
static void test_stats_struct_size(void) {
  current = "clpin_mpi_stats struct_size";
  const size_t shorts[] = {0, sizeof(size_t) + sizeof(uint64_t), CLPIN_MPI_STATS_SIZE_V0_3 - 8};
  for (int i = 0; i < 3; i++) {
    struct clpin_mpi_stats s;
    memset(&s, 0x5A, sizeof s);
    s.struct_size = shorts[i];
    cl_int err = clpin_mpi_stats(&s);
    char want[160];
    snprintf(want, sizeof want,
             "stats.struct_size is %zu, below the first released layout (%zu): set it to "
             "sizeof(struct clpin_mpi_stats)",
             shorts[i], (size_t)CLPIN_MPI_STATS_SIZE_V0_3);
    CHECK(err == CLPIN_ERR_INVALID_ARGUMENT && strstr(clpin_mpi_last_error_detail(), want) != NULL,
          "struct_size %zu: %s", shorts[i], clpin_strerror(err));
    CHECK(s.struct_size == shorts[i] && s.bytes_sent_shm == 0x5A5A5A5A5A5A5A5Aull,
          "a refused struct was written");
  }
  struct {
    struct clpin_mpi_stats s;
    uint64_t newer[2];
  } big;
  memset(&big, 0x5A, sizeof big);
  big.s.struct_size = sizeof big;
  cl_int err = clpin_mpi_stats(&big.s);
  CHECK_OK(err, "clpin_mpi_stats with a newer, larger struct");
  CHECK(big.s.struct_size == sizeof big && big.newer[0] == 0 && big.newer[1] == 0 &&
            big.s.segments != 0x5A5A5A5A5A5A5A5Aull,
        "a larger struct: struct_size %zu (set %zu), past ours %llx %llx", big.s.struct_size,
        sizeof big, (unsigned long long)big.newer[0], (unsigned long long)big.newer[1]);
  struct clpin_mpi_stats s = {.struct_size = CLPIN_MPI_STATS_SIZE_V0_3};
  CHECK_OK(clpin_mpi_stats(&s), "clpin_mpi_stats with struct_size CLPIN_MPI_STATS_SIZE_V0_3");
  CHECK_OK(clpin_mpi_stats(NULL) == CLPIN_ERR_INVALID_ARGUMENT ? CL_SUCCESS : -1,
           "clpin_mpi_stats(NULL) refused");
}

/* Every rank sends to itself (a halo exchange on one rank) while the
 * others do too: one message and multi-chunk, blocking and requests in
 * every order, on either path; two tags received out of order; a size
 * mismatch fails the receive alone, its buffer untouched. Runs on 1 rank
 * too (`--self`). */
static void test_self(void) {
  current = "messages to oneself";
  watchdog(60);
  const size_t sizes[] = {0, 7, HDR, TINY + 1, CHUNK + 1, 5 * CHUNK + 3};
  unsigned salt = 140;
  for (int shm = 1; shm >= 0; shm--) {
    set_shm(shm);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
      for (int how = 0; how < 5; how++)
        self_transfer(sizes[i], how, 30 + how, salt++);
  }
  set_shm(true);
  /* Two sends, tags 41 then 42, received 42 first; then two of one tag
   * arrive in the order sent. */
  size_t n = 3 * CHUNK + 1;
  cl_mem a = buffer(n), b = buffer(n), d = buffer(n);
  unsigned char *h = malloc(n), *back = malloc(n);
  memset(h, 0x11, n);
  put(a, 0, h, n);
  memset(h, 0x22, n);
  put(b, 0, h, n);
  cl_int err = clpin_mpi_send(q, a, 0, n, rank, 41, MPI_COMM_WORLD, 0, NULL);
  CHECK_OK(err, "send to itself, tag 41");
  err = clpin_mpi_send(q, b, 0, n, rank, 42, MPI_COMM_WORLD, 0, NULL);
  CHECK_OK(err, "send to itself, tag 42");
  err = clpin_mpi_send(q, b, 0, n, rank, 43, MPI_COMM_WORLD, 0, NULL);
  CHECK_OK(err, "send to itself, tag 43");
  err = clpin_mpi_send(q, a, 0, n, rank, 43, MPI_COMM_WORLD, 0, NULL);
  CHECK_OK(err, "send to itself, tag 43 again");
  const int tags[] = {42, 41, 43, 43};
  const unsigned char want[] = {0x22, 0x11, 0x22, 0x11};
  for (int k = 0; k < 4; k++) {
    err = clpin_mpi_recv(q, d, 0, n, rank, tags[k], MPI_COMM_WORLD, 0, NULL, NULL);
    CHECK_OK(err, "recv from itself");
    get(d, 0, back, n);
    CHECK(all_equal(back, want[k], n), "receive %d (tag %d) holds the wrong message", k, tags[k]);
  }
  /* A size mismatch: the receive fails, its buffer untouched; the next
   * message of the tag still arrives. */
  memset(h, 0x77, n);
  put(d, 0, h, n);
  err = clpin_mpi_send(q, a, 0, n, rank, 44, MPI_COMM_WORLD, 0, NULL);
  CHECK_OK(err, "send to itself before a mismatch");
  cl_event ev = NULL;
  err = clpin_mpi_recv(q, d, 0, n - 1, rank, 44, MPI_COMM_WORLD, 0, NULL, &ev);
  CHECK(err == CLPIN_ERR_MISMATCH && ev == NULL &&
            strstr(clpin_mpi_last_error_detail(), "untouched") != NULL,
        "recv of %zu from a send to itself of %zu: %s", n - 1, n, clpin_strerror(err));
  get(d, 0, back, n);
  CHECK(all_equal(back, 0x77, n), "the buffer of a refused receive changed");
  self_transfer(2 * CHUNK + 9, 1, 44, 7);
  /* clpin_mpi_release frees the segments, not a message not yet received. */
  err = clpin_mpi_send(q, b, 0, n, rank, 45, MPI_COMM_WORLD, 0, NULL);
  CHECK_OK(err, "send to itself before clpin_mpi_release");
  CHECK_OK(clpin_mpi_release(MPI_COMM_WORLD), "clpin_mpi_release");
  err = clpin_mpi_recv(q, d, 0, n, rank, 45, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK_OK(err, "recv from itself after clpin_mpi_release");
  get(d, 0, back, n);
  CHECK(all_equal(back, 0x22, n), "the message kept over clpin_mpi_release changed");
  clReleaseMemObject(a);
  clReleaseMemObject(b);
  clReleaseMemObject(d);
  free(h);
  free(back);
  watchdog(0);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* ---------------------------------------------------- non-blocking -- */

/* Ranks 0 and 1 each post a receive from the other and a send to it (one
 * tag each way), then wait: both directions at once, which the blocking
 * calls cannot do (a multi-chunk send waits for its receiver). */
static void exchange(size_t n, unsigned salt, bool poll) {
  if (rank > 1)
    return;
  int peer = 1 - rank, out_tag = 20 + rank, in_tag = 20 + peer;
  size_t cap = n + 16;
  unsigned char *h = malloc(cap), *back = malloc(cap);
  for (size_t i = 0; i < cap; i++)
    h[i] = i < n ? pattern(rank, i, salt) : 0x5A;
  cl_mem src = buffer(cap), dst = buffer(cap);
  put(src, 0, h, cap);
  memset(back, 0x5A, cap);
  put(dst, 0, back, cap);
  clpin_mpi_request *rr = NULL, *sr = NULL;
  cl_int err = clpin_mpi_irecv(q, dst, 0, n, peer, in_tag, MPI_COMM_WORLD, 0, NULL, &rr);
  CHECK_OK(err, "clpin_mpi_irecv");
  err = clpin_mpi_isend(q, src, 0, n, peer, out_tag, MPI_COMM_WORLD, 0, NULL, &sr);
  CHECK_OK(err, "clpin_mpi_isend");
  if (poll && rr && sr) { /* test() until both ended: no wait blocks then */
    int a = 0, b = 0;
    double end = MPI_Wtime() + 60;
    while ((!a || !b) && MPI_Wtime() < end) {
      err = clpin_mpi_test(rr, &a);
      CHECK_OK(err, "clpin_mpi_test");
      err = clpin_mpi_test(sr, &b);
      CHECK_OK(err, "clpin_mpi_test");
    }
    CHECK(a && b, "requests of %zu bytes still running after 60 s", n);
  }
  cl_event ev = NULL;
  if (sr) {
    err = clpin_mpi_wait(sr, NULL);
    CHECK_OK(err, "clpin_mpi_wait (send)");
  }
  if (rr) {
    err = clpin_mpi_wait(rr, &ev);
    CHECK_OK(err, "clpin_mpi_wait (recv)");
    CHECK(err != CL_SUCCESS || ev != NULL, "no event from a receive");
  }
  if (ev) {
    CHECK(clWaitForEvents(1, &ev) == CL_SUCCESS, "event failed");
    clReleaseEvent(ev);
  }
  get(dst, 0, back, cap);
  size_t bad = cap;
  for (size_t i = 0; i < cap && bad == cap; i++)
    if (back[i] != (i < n ? pattern(peer, i, salt) : 0x5A))
      bad = i;
  CHECK(bad == cap, "exchange of %zu bytes: byte %zu from rank %d differs", n, bad, peer);
  clReleaseMemObject(src);
  clReleaseMemObject(dst);
  free(h);
  free(back);
}

static void test_nonblocking(bool shm) {
  current = shm ? "non-blocking (shm)" : "non-blocking (point-to-point)";
  set_shm(shm);
  struct clpin_mpi_stats before = stats_now();
  const size_t sizes[] = {0, 1, 4097, CHUNK + 1, 9 * CHUNK + 3};
  unsigned salt = 60;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    for (int poll = 0; poll < 2; poll++)
      exchange(sizes[i], salt++, poll);
  struct clpin_mpi_stats after = stats_now();
  if (rank <= 1) {
    uint64_t shm_out = after.bytes_sent_shm - before.bytes_sent_shm;
    uint64_t shm_in = after.bytes_received_shm - before.bytes_received_shm;
    if (shm) /* each direction on its own segment, both at once */
      CHECK(shm_out == 2 * (CHUNK + 1 + 9 * CHUNK + 3) && shm_in == shm_out,
            "shm bytes sent %llu, received %llu", (unsigned long long)shm_out,
            (unsigned long long)shm_in);
    else
      CHECK(shm_out == 0 && shm_in == 0, "shm used although CLPIN_MPI_SHM=0");
  }
  /* A ring: every rank sends right and receives from the left at once (the
   * tag names the sender: with 2 ranks left and right are one peer). */
  size_t n = 5 * CHUNK + 7;
  int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
  unsigned char *h = malloc(n), *back = malloc(n);
  for (size_t i = 0; i < n; i++)
    h[i] = pattern(rank, i, 77);
  cl_mem src = buffer(n), dst = buffer(n);
  put(src, 0, h, n);
  clpin_mpi_request *sr = NULL, *rr = NULL;
  cl_int err = clpin_mpi_isend(q, src, 0, n, right, 100 + rank, MPI_COMM_WORLD, 0, NULL, &sr);
  CHECK_OK(err, "clpin_mpi_isend (ring)");
  err = clpin_mpi_irecv(q, dst, 0, n, left, 100 + left, MPI_COMM_WORLD, 0, NULL, &rr);
  CHECK_OK(err, "clpin_mpi_irecv (ring)");
  err = sr ? clpin_mpi_wait(sr, NULL) : CL_SUCCESS;
  CHECK_OK(err, "clpin_mpi_wait (ring send)");
  err = rr ? clpin_mpi_wait(rr, NULL) : CL_SUCCESS; /* no event asked: the queue orders the read */
  CHECK_OK(err, "clpin_mpi_wait (ring recv)");
  get(dst, 0, back, n);
  size_t bad = n;
  for (size_t i = 0; i < n && bad == n; i++)
    if (back[i] != pattern(left, i, 77))
      bad = i;
  CHECK(bad == n, "ring: byte %zu from rank %d differs", bad, left);
  clReleaseMemObject(src);
  clReleaseMemObject(dst);
  free(h);
  free(back);
  set_shm(true);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Bad requests are refused on the caller's thread, before anything is
 * sent; a size mismatch and MPI_PROC_NULL end through the wait. */
static void test_nonblocking_errors(void) {
  current = "non-blocking errors";
  cl_mem m = buffer(4 * CHUNK);
  clpin_mpi_request *r = (clpin_mpi_request *)&r; /* must be set to NULL */
  cl_int err = clpin_mpi_isend(NULL, m, 0, 16, 0, 1, MPI_COMM_WORLD, 0, NULL, &r);
  CHECK(err == CL_INVALID_COMMAND_QUEUE && r == NULL, "isend, NULL queue: %s", clpin_strerror(err));
  err = clpin_mpi_irecv(q, m, 0, 16, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, 0, NULL, &r);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT && r == NULL, "irecv, MPI_ANY_SOURCE: %s",
        clpin_strerror(err));
  err = clpin_mpi_irecv(q, m, 0, 16, 0, MPI_ANY_TAG, MPI_COMM_WORLD, 0, NULL, &r);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT && r == NULL, "irecv, MPI_ANY_TAG: %s",
        clpin_strerror(err));
  err = clpin_mpi_isend(q, m, 4 * CHUNK - 8, 16, 0, 1, MPI_COMM_WORLD, 0, NULL, &r);
  CHECK(err == CL_INVALID_VALUE && r == NULL, "isend past the end: %s", clpin_strerror(err));
  err = clpin_mpi_isend(q, m, 0, 16, nranks, 1, MPI_COMM_WORLD, 0, NULL, &r);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT && r == NULL, "isend to rank %d: %s", nranks,
        clpin_strerror(err));
  err = clpin_mpi_isend(q, m, 0, 16, 0, 1, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT &&
            strstr(clpin_mpi_last_error_detail(), "request") != NULL,
        "isend, NULL request: %s", clpin_strerror(err));
  err = clpin_mpi_wait(NULL, NULL);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT, "wait(NULL): %s", clpin_strerror(err));
  int done = 0;
  err = clpin_mpi_test(NULL, &done);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT, "test(NULL): %s", clpin_strerror(err));
  /* MPI_PROC_NULL: nothing moves, the request is done at once. */
  err = clpin_mpi_isend(q, m, 0, 16, MPI_PROC_NULL, 1, MPI_COMM_WORLD, 0, NULL, &r);
  CHECK_OK(err, "isend to MPI_PROC_NULL");
  if (err == CL_SUCCESS) {
    err = clpin_mpi_test(r, &done);
    CHECK(err == CL_SUCCESS && done == 1, "a request to MPI_PROC_NULL is not done at once");
    err = clpin_mpi_wait(r, NULL);
    CHECK_OK(err, "wait (MPI_PROC_NULL)");
  }
  /* Sizes that disagree, multi-chunk both: both waits fail, nothing hangs,
   * the receiver's buffer is untouched. */
  if (rank <= 1) {
    size_t n = rank == 0 ? 2 * CHUNK : 3 * CHUNK;
    unsigned char *h = malloc(n), *back = malloc(n);
    memset(h, 0x33, n);
    put(m, 0, h, n);
    err = rank == 0 ? clpin_mpi_isend(q, m, 0, n, 1, 9, MPI_COMM_WORLD, 0, NULL, &r)
                    : clpin_mpi_irecv(q, m, 0, n, 0, 9, MPI_COMM_WORLD, 0, NULL, &r);
    CHECK_OK(err, "posting the mismatched request");
    if (err == CL_SUCCESS) {
      cl_event ev = (cl_event)&ev; /* must be set to NULL */
      err = clpin_mpi_wait(r, &ev);
      CHECK(err == CLPIN_ERR_MISMATCH && ev == NULL, "mismatched sizes: %s", clpin_strerror(err));
      CHECK(strstr(clpin_mpi_last_error_detail(), rank == 0 ? "refused" : "expects") != NULL,
            "detail: %s", clpin_mpi_last_error_detail());
    }
    get(m, 0, back, n);
    CHECK(memcmp(back, h, n) == 0, "a refused message changed the buffer");
    free(h);
    free(back);
  }
  clReleaseMemObject(m);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Collective requests: several outstanding on one communicator, with a
 * blocking collective made between them, each of another count, so that
 * ranks that ran them in different orders would fail with a mismatch; the
 * waits in reverse order, the first one polled. Ranks post at different
 * times. */
static void test_collective_requests(bool shm) {
  current = shm ? "collective requests (shm)" : "collective requests (ring)";
  set_shm(shm);
  enum { NA = 3 };
  const size_t counts[NA] = {1000, 3 * CHUNK / 4 + 5, 20 * CHUNK / 4 + 1}; /* floats */
  const size_t bn = 7 * CHUNK + 7;                                         /* the bcast's bytes */
  const size_t cn = 2 * CHUNK / 8 + 3; /* the blocking doubles */
  cl_mem am[NA], bm = buffer(bn), cm = buffer(cn * 8);
  void *ah[NA];
  clpin_mpi_request *ar[NA] = {NULL}, *br = NULL;
  for (int k = 0; k < NA; k++) {
    ah[k] = malloc(counts[k] * 4);
    fill_typed(ah[k], MPI_FLOAT, counts[k], rank);
    am[k] = buffer(counts[k] * 4);
    put(am[k], 0, ah[k], counts[k] * 4);
  }
  unsigned char *bh = malloc(bn), *bback = malloc(bn);
  int root = nranks - 1;
  for (size_t i = 0; i < bn; i++)
    bh[i] = rank == root ? pattern(root, i, 55) : 0x11;
  put(bm, 0, bh, bn);
  void *ch = malloc(cn * 8), *cback = malloc(cn * 8);
  fill_typed(ch, MPI_DOUBLE, cn, rank);
  put(cm, 0, ch, cn * 8);
  usleep((useconds_t)(1000 * rank));
  cl_int err = clpin_mpi_iallreduce(q, am[0], counts[0], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0,
                                    NULL, &ar[0]);
  CHECK_OK(err, "clpin_mpi_iallreduce 0");
  err = clpin_mpi_ibcast(q, bm, 0, bn, root, MPI_COMM_WORLD, 0, NULL, &br);
  CHECK_OK(err, "clpin_mpi_ibcast");
  for (int k = 1; k < NA; k++) {
    err = clpin_mpi_iallreduce(q, am[k], counts[k], MPI_FLOAT, k == 1 ? MPI_MAX : MPI_SUM,
                               MPI_COMM_WORLD, 0, NULL, &ar[k]);
    CHECK_OK(err, "clpin_mpi_iallreduce");
  }
  /* Blocking, after the requests made before it. */
  cl_event cev = NULL;
  err = clpin_mpi_allreduce(q, cm, cn, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD, 0, NULL, &cev);
  CHECK_OK(err, "clpin_mpi_allreduce between requests");
  if (cev) {
    clWaitForEvents(1, &cev);
    clReleaseEvent(cev);
  }
  /* The blocking call ran after every request made before it. */
  for (int k = 0; k < NA; k++) {
    int done = 0;
    CHECK(ar[k] && clpin_mpi_test(ar[k], &done) == CL_SUCCESS && done == 1,
          "allreduce request %d not done when a later blocking collective returned", k);
  }
  for (int k = NA - 1; k >= 0; k--) {
    if (!ar[k])
      continue;
    cl_event ev = NULL;
    err = clpin_mpi_wait(ar[k], &ev);
    CHECK_OK(err, "clpin_mpi_wait (iallreduce)");
    CHECK(err != CL_SUCCESS || ev != NULL, "no event from an allreduce request");
    if (ev) {
      clWaitForEvents(1, &ev);
      clReleaseEvent(ev);
    }
    void *back = malloc(counts[k] * 4);
    get(am[k], 0, back, counts[k] * 4);
    size_t where = 0;
    CHECK(expect_ok(back, MPI_FLOAT, k == 1 ? MPI_MAX : MPI_SUM, counts[k], &where),
          "iallreduce %d of %zu: element %zu wrong", k, counts[k], where);
    free(back);
  }
  if (br) {
    int done = 0;
    while (clpin_mpi_test(br, &done) == CL_SUCCESS && !done)
      usleep(100);
    err = clpin_mpi_wait(br, NULL);
    CHECK_OK(err, "clpin_mpi_wait (ibcast)");
  }
  get(bm, 0, bback, bn);
  size_t bad = bn;
  for (size_t i = 0; i < bn && bad == bn; i++)
    if (bback[i] != pattern(root, i, 55))
      bad = i;
  CHECK(bad == bn, "ibcast from %d: byte %zu differs", root, bad);
  get(cm, 0, cback, cn * 8);
  size_t where = 0;
  CHECK(expect_ok(cback, MPI_DOUBLE, MPI_MIN, cn, &where),
        "blocking allreduce between requests: element %zu wrong", where);
  for (int k = 0; k < NA; k++) {
    clReleaseMemObject(am[k]);
    free(ah[k]);
  }
  clReleaseMemObject(bm);
  clReleaseMemObject(cm);
  free(bh);
  free(bback);
  free(ch);
  free(cback);
  set_shm(true);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* A collective request refused on one rank fails through its wait there
 * and with CLPIN_ERR_PEER on the others; disagreeing ranks all get
 * CLPIN_ERR_MISMATCH; buffers untouched; the next request works. What no
 * request can do (NULL request, MPI_COMM_NULL) is refused at once. */
static void test_collective_request_errors(void) {
  current = "collective request errors";
  size_t n = 3 * CHUNK / 4;
  cl_mem m = buffer(n * 4);
  float *h = malloc(n * 4), *back = malloc(n * 4);
  fill_typed(h, MPI_FLOAT, n, rank);
  put(m, 0, h, n * 4);
  clpin_mpi_request *r = (clpin_mpi_request *)&r;
  cl_int err = clpin_mpi_iallreduce(q, m, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT, "iallreduce, NULL request: %s", clpin_strerror(err));
  err = clpin_mpi_iallreduce(q, m, n, MPI_FLOAT, MPI_SUM, MPI_COMM_NULL, 0, NULL, &r);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT && r == NULL, "iallreduce, MPI_COMM_NULL: %s",
        clpin_strerror(err));
  err = clpin_mpi_ibcast(q, m, 0, 16, 0, MPI_COMM_NULL, 0, NULL, &r);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT && r == NULL, "ibcast, MPI_COMM_NULL: %s",
        clpin_strerror(err));
  /* Rank 0 passes a bad type. */
  err = clpin_mpi_iallreduce(q, m, n, rank == 0 ? MPI_CHAR : MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0,
                             NULL, &r);
  CHECK_OK(err, "iallreduce posted (refusal through the wait)");
  if (err == CL_SUCCESS) {
    cl_event ev = (cl_event)&ev;
    err = clpin_mpi_wait(r, &ev);
    if (rank == 0)
      CHECK(err == CLPIN_ERR_INVALID_ARGUMENT &&
                strstr(clpin_mpi_last_error_detail(), "type") != NULL,
            "bad type: %s (%s)", clpin_strerror(err), clpin_mpi_last_error_detail());
    else
      CHECK(err == CLPIN_ERR_PEER, "another rank's bad type: %s", clpin_strerror(err));
    CHECK(ev == NULL, "an event from a failed request");
  }
  /* Rank 1 passes a NULL queue to ibcast. */
  err = clpin_mpi_ibcast(rank == 1 ? NULL : q, m, 0, 64, 0, MPI_COMM_WORLD, 0, NULL, &r);
  CHECK_OK(err, "ibcast posted (refusal through the wait)");
  if (err == CL_SUCCESS) {
    err = clpin_mpi_wait(r, NULL);
    CHECK(rank == 1 ? err == CL_INVALID_COMMAND_QUEUE : err == CLPIN_ERR_PEER,
          "ibcast, rank 1's NULL queue: %s", clpin_strerror(err));
  }
  /* Counts that differ. */
  err =
      clpin_mpi_iallreduce(q, m, n - (size_t)rank, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, &r);
  CHECK_OK(err, "iallreduce posted (mismatch)");
  if (err == CL_SUCCESS) {
    err = clpin_mpi_wait(r, NULL);
    CHECK(err == CLPIN_ERR_MISMATCH, "counts that differ: %s", clpin_strerror(err));
  }
  get(m, 0, back, n * 4);
  CHECK(memcmp(back, h, n * 4) == 0, "a refused collective changed the buffer");
  /* And then one that works. */
  err = clpin_mpi_iallreduce(q, m, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, &r);
  CHECK_OK(err, "iallreduce after the refusals");
  if (err == CL_SUCCESS) {
    err = clpin_mpi_wait(r, NULL);
    CHECK_OK(err, "wait after the refusals");
    get(m, 0, back, n * 4);
    size_t where = 0;
    CHECK(expect_ok(back, MPI_FLOAT, MPI_SUM, n, &where), "element %zu wrong", where);
  }
  clReleaseMemObject(m);
  free(h);
  free(back);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* `--thread-single`: MPI initialised with MPI_Init (MPI_THREAD_SINGLE):
 * requests are refused with a detail that says why; the blocking calls
 * still work. */
static void test_thread_single(void) {
  current = "requests under MPI_THREAD_SINGLE";
  cl_mem m = buffer(64);
  clpin_mpi_request *r = NULL;
  cl_int err = clpin_mpi_isend(q, m, 0, 16, 1 - rank % 2, 1, MPI_COMM_WORLD, 0, NULL, &r);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT && r == NULL &&
            strstr(clpin_mpi_last_error_detail(), "MPI_THREAD_MULTIPLE") != NULL,
        "isend without MPI_THREAD_MULTIPLE: %s (%s)", clpin_strerror(err),
        clpin_mpi_last_error_detail());
  err = clpin_mpi_irecv(q, m, 0, 16, 0, 1, MPI_COMM_WORLD, 0, NULL, &r);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT && r == NULL, "irecv without MPI_THREAD_MULTIPLE: %s",
        clpin_strerror(err));
  err = clpin_mpi_iallreduce(q, m, 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, &r);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT && r == NULL,
        "iallreduce without MPI_THREAD_MULTIPLE: %s", clpin_strerror(err));
  clReleaseMemObject(m);
  one_transfer(0, 1, 3 * CHUNK, 1, 2, 91);
  one_transfer(1, 0, 3 * CHUNK, 2, 1, 92);
  /* A blocking multi-chunk send to oneself needs no thread either. */
  self_transfer(5 * CHUNK + 3, 0, 93, 93);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* ------------------------------------------- segments that cannot open -- */

/* `--segments-refused`: every rank but 0 runs with tests/mpi/noprocfd.c
 * preloaded, so it can open no peer's shared segment, as between ranks of
 * other users or containers whose host names agree. Sends, receives,
 * allreduce and bcast must all still arrive exact, through MPI's
 * point-to-point and ring paths, with no segment set up. */
static void test_segments_refused(void) {
  current = "segments refused (point-to-point fallback)";
  const int *loaded = dlsym(RTLD_DEFAULT, "clpin_test_noprocfd");
  const int *refusals = dlsym(RTLD_DEFAULT, "clpin_test_noprocfd_refused");
  CHECK((rank == 0) == (loaded == NULL),
        "tests/mpi/noprocfd.c is %sloaded on rank %d (it belongs on every rank but 0)",
        loaded ? "" : "not ", rank);
  set_shm(true);
  struct clpin_mpi_stats before = stats_now();
  /* Rank 1 sends first: rank 0 makes the pair's segment, rank 1 cannot open
   * it and says so, and from then on the pair takes point-to-point both
   * ways (a later message from 0 finds no segment to use either). */
  const size_t sizes[] = {2 * CHUNK, 9 * CHUNK + 3, 4097, CHUNK + 1};
  unsigned salt = 40;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    one_transfer(1, 0, sizes[i], i, 2 * i, salt++);
    one_transfer(0, 1, sizes[i], 2 * i, i, salt++);
  }
  /* The collectives' segment: rank 0 makes it, the others cannot open it,
   * every rank agrees on the ring (allreduce) and point-to-point (bcast). */
  size_t n = 3 * CHUNK / sizeof(float) + 5;
  float *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
  fill_typed(h, MPI_FLOAT, n, rank);
  cl_mem m = buffer(n * sizeof *h);
  put(m, 0, h, n * sizeof *h);
  cl_event ev = NULL;
  cl_int err = clpin_mpi_allreduce(q, m, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, &ev);
  CHECK_OK(err, "clpin_mpi_allreduce");
  if (ev) {
    clWaitForEvents(1, &ev);
    clReleaseEvent(ev);
  }
  get(m, 0, back, n * sizeof *back);
  size_t where = 0;
  CHECK(expect_ok(back, MPI_FLOAT, MPI_SUM, n, &where), "allreduce: element %zu wrong", where);
  for (size_t i = 0; i < n; i++)
    h[i] = rank == 1 ? (float)i * 0.5f : -1.0f;
  put(m, 0, h, n * sizeof *h);
  ev = NULL;
  err = clpin_mpi_bcast(q, m, 0, n * sizeof *h, 1, MPI_COMM_WORLD, 0, NULL, &ev);
  CHECK_OK(err, "clpin_mpi_bcast");
  if (ev) {
    clWaitForEvents(1, &ev);
    clReleaseEvent(ev);
  }
  get(m, 0, back, n * sizeof *back);
  size_t bad = n;
  for (size_t i = 0; i < n && bad == n; i++)
    if (back[i] != (float)i * 0.5f)
      bad = i;
  CHECK(bad == n, "bcast from rank 1: element %zu differs", bad);
  clReleaseMemObject(m);
  free(h);
  free(back);
  struct clpin_mpi_stats after = stats_now();
  CHECK(after.bytes_sent_shm == before.bytes_sent_shm &&
            after.bytes_received_shm == before.bytes_received_shm,
        "%llu bytes sent and %llu received through a segment nobody could share",
        (unsigned long long)(after.bytes_sent_shm - before.bytes_sent_shm),
        (unsigned long long)(after.bytes_received_shm - before.bytes_received_shm));
  if (rank <= 1)
    CHECK(after.bytes_sent_p2p - before.bytes_sent_p2p > 11 * CHUNK,
          "point-to-point bytes sent %llu",
          (unsigned long long)(after.bytes_sent_p2p - before.bytes_sent_p2p));
  CHECK(after.segments == before.segments, "%llu segments set up",
        (unsigned long long)(after.segments - before.segments));
  CHECK(after.allreduce_ring - before.allreduce_ring == 1 &&
            after.allreduce_shm == before.allreduce_shm,
        "allreduce took the shm path (%llu) rather than the ring",
        (unsigned long long)(after.allreduce_shm - before.allreduce_shm));
  CHECK(after.bcast_p2p - before.bcast_p2p == 1 && after.bcast_shm == before.bcast_shm,
        "bcast took the shm path (%llu)", (unsigned long long)(after.bcast_shm - before.bcast_shm));
  /* The preloaded library did refuse opens (else nothing here was tested). */
  if (rank >= 1)
    CHECK(refusals && *refusals >= 1, "noprocfd refused %d opens", refusals ? *refusals : -1);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* ------------------------------------------------------- bad arguments -- */

static void test_bad_arguments(void) {
  current = "bad arguments";
  cl_mem m = buffer(4096);
  cl_int err;
  /* One rank's bad call: refused there, CLPIN_ERR_PEER everywhere else. */
  for (int bad = 0; bad < nranks; bad++) {
    err = clpin_mpi_allreduce(rank == bad ? NULL : q, m, 16, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0,
                              NULL, NULL);
    CHECK(err == (rank == bad ? CL_INVALID_COMMAND_QUEUE : CLPIN_ERR_PEER),
          "allreduce with a NULL queue on rank %d: %s", bad, clpin_strerror(err));
    CHECK(strstr(clpin_mpi_last_error_detail(), rank == bad ? "queue" : "another rank") != NULL,
          "detail: %s", clpin_mpi_last_error_detail());
    err = clpin_mpi_bcast(q, m, rank == bad ? 4000 : 0, 200, 0, MPI_COMM_WORLD, 0, NULL, NULL);
    CHECK(err == (rank == bad ? CL_INVALID_VALUE : CLPIN_ERR_PEER),
          "bcast past the end on rank %d: %s", bad, clpin_strerror(err));
  }
  err = clpin_mpi_allreduce(q, m, 16, MPI_CHAR, MPI_SUM, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT, "MPI_CHAR: %s", clpin_strerror(err));
  err = clpin_mpi_allreduce(q, m, 16, MPI_INT, MPI_PROD, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT, "MPI_PROD: %s", clpin_strerror(err));
  err = clpin_mpi_allreduce(q, m, 2000, MPI_INT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK(err == CL_INVALID_VALUE, "count past the buffer: %s", clpin_strerror(err));
  err =
      clpin_mpi_allreduce(q, m, 10 + (size_t)rank, MPI_INT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK(err == CLPIN_ERR_MISMATCH, "counts differ: %s", clpin_strerror(err));
  err = clpin_mpi_allreduce(q, m, 10, MPI_INT, rank ? MPI_MAX : MPI_MIN, MPI_COMM_WORLD, 0, NULL,
                            NULL);
  CHECK(err == CLPIN_ERR_MISMATCH, "ops differ: %s", clpin_strerror(err));
  err = clpin_mpi_bcast(q, m, 0, 100, nranks, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT, "root out of range: %s", clpin_strerror(err));
  err = clpin_mpi_bcast(q, m, 0, 100 + (size_t)rank, 0, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK(err == CLPIN_ERR_MISMATCH, "sizes differ: %s", clpin_strerror(err));
  err = clpin_mpi_bcast(q, m, 0, 100, rank % 2, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK(err == CLPIN_ERR_MISMATCH, "roots differ: %s", clpin_strerror(err));
  cl_event nul = NULL;
  err = clpin_mpi_allreduce(q, m, 16, MPI_INT, MPI_SUM, MPI_COMM_WORLD, 1, &nul, NULL);
  CHECK(err == CL_INVALID_EVENT_WAIT_LIST, "NULL event: %s", clpin_strerror(err));
  /* Point-to-point: local refusals, nothing sent. */
  err = clpin_mpi_send(q, m, 0, 16, nranks, 0, MPI_COMM_WORLD, 0, NULL);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT, "dest out of range: %s", clpin_strerror(err));
  err = clpin_mpi_send(q, m, 0, 16, 0, -1, MPI_COMM_WORLD, 0, NULL);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT, "negative tag: %s", clpin_strerror(err));
  err = clpin_mpi_send(q, NULL, 0, 16, 0, 0, MPI_COMM_WORLD, 0, NULL);
  CHECK(err == CL_INVALID_MEM_OBJECT, "NULL buffer: %s", clpin_strerror(err));
  err = clpin_mpi_send(q, m, 4090, 16, 0, 0, MPI_COMM_WORLD, 0, NULL);
  CHECK(err == CL_INVALID_VALUE, "past the end: %s", clpin_strerror(err));
  err = clpin_mpi_send(q, m, 0, 16, 0, 0, MPI_COMM_NULL, 0, NULL);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT, "MPI_COMM_NULL: %s", clpin_strerror(err));
  err = clpin_mpi_recv(q, m, 0, 16, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT, "MPI_ANY_SOURCE: %s", clpin_strerror(err));
  err = clpin_mpi_recv(q, m, 0, 16, 0, MPI_ANY_TAG, MPI_COMM_WORLD, 0, NULL, NULL);
  CHECK(err == CLPIN_ERR_INVALID_ARGUMENT, "MPI_ANY_TAG: %s", clpin_strerror(err));
  cl_event ev = NULL;
  err = clpin_mpi_recv(q, m, 0, 16, MPI_PROC_NULL, 0, MPI_COMM_WORLD, 0, NULL, &ev);
  CHECK(err == CL_SUCCESS && ev, "MPI_PROC_NULL: %s", clpin_strerror(err));
  if (ev)
    clReleaseEvent(ev);
  CHECK(clpin_mpi_stats(NULL) == CLPIN_ERR_INVALID_ARGUMENT, "stats(NULL)");
  CHECK(clpin_mpi_release(MPI_COMM_NULL) == CLPIN_ERR_INVALID_ARGUMENT, "release(NULL)");
  /* The caller's error handler is back after every call. */
  MPI_Errhandler eh;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh);
  CHECK(eh == MPI_ERRORS_ARE_FATAL, "MPI_COMM_WORLD's error handler was not restored");
  MPI_Errhandler_free(&eh);
  clReleaseMemObject(m);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Buffers released and the cache dropped between calls: nothing is in
 * flight after a call returns (recv's and allreduce's events waited), so
 * everything set up again works. */
static void test_release_between(void) {
  current = "release between calls";
  for (int round = 0; round < 2; round++) {
    one_transfer(0, 1, 4 * CHUNK + 9, 0, 0, 90 + (unsigned)round);
    size_t n = 3 * CHUNK / 4;
    float *h = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
      h[i] = (float)(rank + 1);
    cl_mem m = buffer(n * 4);
    put(m, 0, h, n * 4);
    cl_event ev = NULL;
    cl_int err = clpin_mpi_allreduce(q, m, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, &ev);
    CHECK_OK(err, "allreduce");
    if (ev) {
      clWaitForEvents(1, &ev);
      clReleaseEvent(ev);
    }
    clReleaseMemObject(m); /* nothing of it is in flight any more */
    CHECK(clpin_mpi_release(MPI_COMM_WORLD) == CL_SUCCESS, "clpin_mpi_release");
    free(h);
  }
  /* A duplicate communicator starts with nothing cached and works alike. */
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  size_t n = 2 * CHUNK;
  int *h = malloc(n), *back = malloc(n);
  for (size_t i = 0; i < n / 4; i++)
    h[i] = rank;
  cl_mem m = buffer(n);
  put(m, 0, h, n);
  cl_int err = clpin_mpi_allreduce(q, m, n / 4, MPI_INT, MPI_MAX, dup, 0, NULL, NULL);
  CHECK_OK(err, "allreduce on a dup");
  clFinish(q);
  get(m, 0, back, n);
  CHECK(back[0] == nranks - 1 && back[n / 4 - 1] == nranks - 1, "max on a dup: %d", back[0]);
  MPI_Comm_free(&dup);
  clReleaseMemObject(m);
  free(h);
  free(back);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* ------------------------------------------------------------- loader -- */

static cl_int fill(void *user, uint64_t index, void *host, size_t capacity, size_t *used) {
  (void)user;
  uint64_t *p = host;
  for (size_t i = 0; i < capacity / 8; i++)
    p[i] = index * 1000 + i;
  *used = capacity;
  return CL_SUCCESS;
}

static void test_loader_shards(void) {
  current = "loader shards";
  const uint64_t counts[] = {12, 13, 2, 1};
  for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
    uint64_t nb = counts[k];
    clpin_loader_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.batch_bytes = 4096;
    d.batches = nb;
    d.shard = (unsigned)rank;
    d.nshards = (unsigned)nranks;
    d.fill = fill;
    clpin_loader *ld = NULL;
    cl_int err = clpin_loader_create(1, &q, &d, &ld);
    CHECK_OK(err, "clpin_loader_create");
    if (err != CL_SUCCESS)
      continue;
    for (int epoch = 0; epoch < 2; epoch++) {
      int seen[64] = {0}, mine = 0;
      clpin_batch *b;
      while ((err = clpin_loader_next(ld, &b)) == CL_SUCCESS) {
        uint64_t idx = clpin_batch_index(b), got[2];
        clWaitForEvents(1, (cl_event[]){clpin_batch_event(b)});
        get(clpin_batch_buffer(b), 0, got, sizeof got);
        CHECK(got[0] == idx * 1000 && got[1] == idx * 1000 + 1, "batch %llu holds %llu",
              (unsigned long long)idx, (unsigned long long)got[0]);
        CHECK(idx % (uint64_t)nranks == (uint64_t)rank, "batch %llu on rank %d",
              (unsigned long long)idx, rank);
        if (idx < 64)
          seen[idx]++;
        mine++;
        clpin_batch_release(b, 0, NULL);
      }
      CHECK(err == CLPIN_END, "the epoch ended with %s", clpin_strerror(err));
      int all[64];
      MPI_Allreduce(seen, all, 64, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      bool ok = true;
      for (uint64_t i = 0; i < 64; i++)
        ok = ok && all[i] == (i < nb ? 1 : 0);
      CHECK(ok, "%llu batches on %d ranks: not each exactly once (epoch %d)",
            (unsigned long long)nb, nranks, epoch);
      uint64_t want = nb / (uint64_t)nranks + ((uint64_t)rank < nb % (uint64_t)nranks);
      CHECK((uint64_t)mine == want, "rank %d got %d batches of %llu, wants %llu", rank, mine,
            (unsigned long long)nb, (unsigned long long)want);
      clpin_loader_reset(ld);
    }
    clpin_loader_destroy(ld);
  }
}

static void run_all(void);

int main(int argc, char **argv) {
  setenv("CLPIN_MPI_CHUNK", "64K", 0);
  bool single = argc > 1 && strcmp(argv[1], "--thread-single") == 0;
  int provided = MPI_THREAD_SINGLE;
  if (single)
    MPI_Init(&argc, &argv);
  else
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const char *mode = argc > 1 ? argv[1] : "";
  bool self_only = strcmp(mode, "--self") == 0;
  if (nranks < 2 && !self_only) {
    fprintf(stderr, "test_mpi: run under mpirun with at least 2 ranks (--self: 1 or more)\n");
    MPI_Finalize();
    return 2;
  }
  open_cl();
  if (self_only) {
    test_self();
  } else if (strcmp(mode, "--segments-refused") == 0) {
    test_segments_refused();
  } else if (single) {
    test_thread_single();
  } else {
    /* The requests need it; Debian's Open MPI and MPICH both provide it. */
    current = "MPI_Init_thread";
    CHECK(provided == MPI_THREAD_MULTIPLE, "MPI provides thread level %d, not MPI_THREAD_MULTIPLE",
          provided);
    run_all();
  }
  int mine[2] = {passed, failed}, all[2];
  MPI_Reduce(mine, all, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Bcast(all, 2, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("test_mpi%s%s on %d ranks: %d passed, %d failed\n", *mode ? " " : "", mode, nranks,
           all[0], all[1]);
  clReleaseCommandQueue(q);
  clpin_mpi_release(MPI_COMM_WORLD);
  clpin_shutdown();
  clReleaseContext(ctx);
  MPI_Finalize();
  return all[1] ? 1 : 0;
}

static void run_all(void) {
  test_bad_arguments();
  test_p2p_sizes(true);
  test_p2p_sizes(false);
  test_many_senders();
  test_mismatch();
  test_sender_fails();
  test_self();
  test_chunk_mismatch(true);
  test_chunk_mismatch(false);
  test_chunk_refused();
  test_stats_struct_size();
  test_allreduce(true);
  test_allreduce(false);
  test_allreduce_threads();
  test_collective_device_failure();
  test_bcast(true);
  test_bcast(false);
  test_nonblocking(true);
  test_nonblocking(false);
  test_nonblocking_errors();
  test_collective_requests(true);
  test_collective_requests(false);
  test_collective_request_errors();
  test_release_between();
  test_loader_shards();
}
