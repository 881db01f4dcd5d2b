/* SPDX-License-Identifier: Apache-2.0 */
/* mpi-bench: libclpin-mpi against the plain way, under mpirun, one rank per
 * device (rank % devices of the platform --platform names). Run by
 * bench/gpu-mpi.sh on the GPU machine; docs/MPI.md's figures come from it.
 *
 *   mpirun -np N mpi-bench [--mib 256] [--ar-mib 64,256] [--small-kib 4,64] [--runs 5]
 *                          [--iters 200] [--platform NAME]
 *                          [--cases stages,send,exchange,small,allreduce,bcast]
 *                          (or overlap) [--kernel-ranks N]
 *
 * Every case runs --runs times after one warm-up (which also sets up the
 * shared segments and their registrations); each figure prints its median
 * and range, and each target its ratio per run, the median and in how many
 * runs it held (benchstat.h's lines). Each case's baseline runs in the same
 * launch, on the same devices:
 *   stages     on ranks 0 and 1: pinned read and write (pool block <-> device),
 *              pageable read and write, MPI host->host from malloc memory
 *   send       256 MiB rank 0 -> rank 1: clpin shm path, clpin forced
 *              point-to-point (CLPIN_MPI_SHM=0), plain (blocking read into
 *              malloc, MPI_Send, MPI_Recv, blocking write); timed on the
 *              receiver from a common barrier to the upload's end
 *   exchange   256 MiB each way between ranks 0 and 1: the blocking calls in
 *              order against clpin_mpi_isend + clpin_mpi_irecv at once (both
 *              directions together; needs MPI_THREAD_MULTIPLE)
 *   small      4 KiB and 64 KiB ping-pong between ranks 0 and 1, clpin and
 *              plain, time per one-way message
 *   allreduce  float32 sums on all ranks: clpin (shm, and ring with
 *              CLPIN_MPI_SHM=0) against plain (blocking read, MPI_Allreduce,
 *              blocking write); bytes / slowest rank's time
 *   bcast      256 MiB from rank 0: clpin against plain (read, MPI_Bcast, write)
 *   overlap    the first --ar-mib size: allreduce and a kernel of as long
 *              on a second queue, one after the other (blocking) and at once
 *              (clpin_mpi_iallreduce); times of the slowest rank; the kernel
 *              on the ranks below --kernel-ranks only (default all)
 * Data is checked on the first run of every clpin case (exit 1 on a
 * mismatch). */
#include "benchcl.h"
#include "benchstat.h"
#include "clpin_mpi.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "mpi-bench"
#define CHECK(e) BENCH_CL_CHECK(PROG, (e), clpin_strerror)
#define MPICHECK(e) CHECK(clpin_mpi_check_(e, #e))

enum { MAXRUNS = 64 };

static int rank, nranks, runs = 5, iters = 200;
static int kernel_ranks = 1 << 30; /* overlap: the ranks below this run the kernel */
static cl_context ctx;
static cl_command_queue q;
static cl_command_queue q2; /* the exchange's receives: device reads and writes overlap */
static cl_device_id dev;
static int bad;

static cl_int clpin_mpi_check_(cl_int err, const char *what) {
  if (err != CL_SUCCESS && rank >= 0)
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, clpin_mpi_last_error_detail());
  return err;
}

static void set_shm(int on) { setenv("CLPIN_MPI_SHM", on ? "1" : "0", 1); }

static cl_mem dbuf(size_t n) { return bench_cl_buffer(PROG, ctx, n, clpin_strerror); }

static void fill_pattern(cl_mem m, size_t n, unsigned seed) {
  unsigned *h = malloc(n);
  for (size_t i = 0; i < n / 4; i++)
    h[i] = (unsigned)i * 2654435761u + seed;
  CHECK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, n, h, 0, NULL, NULL));
  free(h);
}

static void check_pattern(cl_mem m, size_t n, unsigned seed, const char *what) {
  unsigned *h = malloc(n);
  CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n, h, 0, NULL, NULL));
  for (size_t i = 0; i < n / 4; i++)
    if (h[i] != (unsigned)i * 2654435761u + seed) {
      fprintf(stderr, "rank %d: %s: word %zu differs\n", rank, what, i);
      bad++;
      break;
    }
  free(h);
}

/* Rank 0 prints; v holds rank 0's (or the receiver's, sent to 0) samples. */
/* A case's heading line; the figures after it are named for its text
 * before " (" in their RAW lines, which bench/gpu-mpi.sh pools. */
static char section[160];
static void head0(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(section, sizeof section, fmt, ap);
  va_end(ap);
  if (rank == 0)
    printf("%s:\n", section);
  size_t end = strcspn(section, "(");
  while (end > 0 && section[end - 1] == ' ')
    end--;
  section[end] = '\0';
}

static void raw0(const char *what, const char *unit, double goal, const double *v, int n) {
  char name[320];
  snprintf(name, sizeof name, "%s %s%s%s", section, what, *unit ? " " : "", unit);
  bench_print_raw(name, goal, v, n);
}

static void range0(const char *what, const double *v, int n, const char *unit) {
  if (rank != 0)
    return;
  bench_print_range(what, v, n, unit);
  raw0(what, unit, 0, v, n);
}

static void ratio0(const char *what, const double *a, const double *b, int n, double goal) {
  if (rank != 0)
    return;
  double r[MAXRUNS];
  for (int i = 0; i < n; i++)
    r[i] = b[i] > 0 ? a[i] / b[i] : 0;
  bench_print_ratio(what, r, n, goal);
  raw0(what, goal > 0 ? "" : "x", goal, r, n);
}

/* The receiver's samples to rank 0. */
static void to0(double *v, int n, int from) {
  if (from == 0)
    return;
  if (rank == from)
    MPI_Send(v, n, MPI_DOUBLE, 0, 99, MPI_COMM_WORLD);
  else if (rank == 0)
    MPI_Recv(v, n, MPI_DOUBLE, from, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

/* Bytes this rank received through shared segments so far. */
static uint64_t path_bytes(void) {
  struct clpin_mpi_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  clpin_mpi_stats(&st);
  return st.bytes_received_shm;
}

/* ---------------------------------------------------------------- stages -- */

static double stages_pinned_r[MAXRUNS], stages_pinned_w[MAXRUNS], stages_mpi[MAXRUNS];

static void case_stages(size_t n) {
  double pr[MAXRUNS], pw[MAXRUNS], gr[MAXRUNS], gw[MAXRUNS], hh[MAXRUNS];
  cl_mem m = dbuf(n);
  clpin_pool *pool;
  clpin_block *b;
  CHECK(clpin_pool_get(q, &pool));
  CHECK(clpin_acquire(pool, n, &b));
  void *pin = clpin_block_host(b), *pg = malloc(n);
  memset(pg, 1, n);
  for (int r = -1; r < runs; r++) {
    double t0 = bench_now_s();
    CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n, pin, 0, NULL, NULL));
    double t1 = bench_now_s();
    CHECK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, n, pin, 0, NULL, NULL));
    double t2 = bench_now_s();
    CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n, pg, 0, NULL, NULL));
    double t3 = bench_now_s();
    CHECK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, n, pg, 0, NULL, NULL));
    double t4 = bench_now_s();
    MPI_Barrier(MPI_COMM_WORLD);
    double t5 = bench_now_s();
    if (rank == 0)
      MPI_Send(pg, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
    else if (rank == 1)
      MPI_Recv(pg, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    double t6 = bench_now_s();
    if (r >= 0) {
      pr[r] = n / (t1 - t0) / 1e9;
      pw[r] = n / (t2 - t1) / 1e9;
      gr[r] = n / (t3 - t2) / 1e9;
      gw[r] = n / (t4 - t3) / 1e9;
      hh[r] = n / (t6 - t5) / 1e9;
    }
  }
  to0(hh, runs, 1);
  head0("stages (%zu MiB, rank 0's device; MPI: rank 0 -> 1, timed on the receiver)", n >> 20);
  range0("pinned read (device -> pool block)", pr, runs, "GB/s");
  range0("pinned write (pool block -> device)", pw, runs, "GB/s");
  range0("pageable read (device -> malloc)", gr, runs, "GB/s");
  range0("pageable write (malloc -> device)", gw, runs, "GB/s");
  range0("MPI host->host (malloc, MPI_Send/MPI_Recv)", hh, runs, "GB/s");
  memcpy(stages_pinned_r, pr, sizeof pr);
  memcpy(stages_pinned_w, pw, sizeof pw);
  memcpy(stages_mpi, hh, sizeof hh);
  clpin_release(b, NULL);
  free(pg);
  clReleaseMemObject(m);
}

/* ------------------------------------------------------------------ send -- */

/* One transfer 0 -> 1; the receiver's GB/s (others: 0). mode 0 plain,
 * 1 clpin shm, 2 clpin forced point-to-point. */
static double one_send(cl_mem m, size_t n, int mode, void *host) {
  set_shm(mode == 1);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now_s();
  if (rank == 0) {
    if (mode == 0) {
      CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n, host, 0, NULL, NULL));
      MPI_Send(host, (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD);
    } else
      MPICHECK(clpin_mpi_send(q, m, 0, n, 1, 2, MPI_COMM_WORLD, 0, NULL));
  } else if (rank == 1) {
    if (mode == 0) {
      MPI_Recv(host, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      CHECK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, n, host, 0, NULL, NULL));
    } else {
      cl_event ev;
      MPICHECK(clpin_mpi_recv(q, m, 0, n, 0, 2, MPI_COMM_WORLD, 0, NULL, &ev));
      CHECK(clWaitForEvents(1, &ev));
      clReleaseEvent(ev);
    }
  }
  double t = bench_now_s() - t0;
  set_shm(1);
  return rank == 1 ? n / t / 1e9 : 0;
}

static void case_send(size_t n) {
  const char *names[3] = {"plain (read to malloc, MPI_Send/Recv, write)", "clpin shm (one host)",
                          "clpin point-to-point (CLPIN_MPI_SHM=0)"};
  double v[3][MAXRUNS];
  cl_mem m = dbuf(n);
  void *host = malloc(n);
  memset(host, 0, n);
  uint64_t shm_bytes = 0;
  for (int mode = 0; mode < 3; mode++) {
    if (rank == 0)
      fill_pattern(m, n, 17u + (unsigned)mode);
    one_send(m, n, mode, host); /* warm-up: segments, registrations, pool blocks */
    if (rank == 1)
      check_pattern(m, n, 17u + (unsigned)mode, names[mode]);
    uint64_t before = path_bytes();
    for (int r = 0; r < runs; r++)
      v[mode][r] = one_send(m, n, mode, host);
    if (mode == 1)
      shm_bytes = path_bytes() - before;
    to0(v[mode], runs, 1);
  }
  /* Say so when the shm figure is not the shm path's (ranks that could not
   * share memory fall back to point-to-point, with a note on stderr). */
  if (rank == 1 && shm_bytes != (uint64_t)runs * n)
    printf("  WARNING: the shm case moved %llu of %llu bytes through shared memory\n",
           (unsigned long long)shm_bytes, (unsigned long long)runs * n);
  head0("send/recv %zu MiB, rank 0 -> rank 1 (timed on the receiver, upload done)", n >> 20);
  for (int mode = 0; mode < 3; mode++)
    range0(names[mode], v[mode], runs, "GB/s");
  double minpin[MAXRUNS];
  for (int r = 0; r < runs; r++)
    minpin[r] = stages_pinned_r[r] < stages_pinned_w[r] ? stages_pinned_r[r] : stages_pinned_w[r];
  if (stages_pinned_r[0] > 0) {
    ratio0("shm / min(pinned read, pinned write)", v[1], minpin, runs, 0.8);
    ratio0("p2p / MPI host->host", v[2], stages_mpi, runs, 0.9);
  }
  ratio0("shm / plain", v[1], v[0], runs, 10);
  ratio0("p2p / plain", v[2], v[0], runs, 2);
  free(host);
  clReleaseMemObject(m);
}

/* -------------------------------------------------------------- exchange -- */

/* Ranks 0 and 1 swap n bytes each way: the blocking calls in order (rank 0
 * sends first, rank 1 receives first), or clpin_mpi_isend and
 * clpin_mpi_irecv posted together, then waited (both directions at once).
 * GB/s: 2 n over the slower rank's time, the uploads done. */
static double one_exchange(cl_mem out, cl_mem in, size_t n, bool requests) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now_s();
  if (rank <= 1) {
    int peer = 1 - rank;
    cl_event ev = NULL;
    if (!requests && rank == 0) {
      MPICHECK(clpin_mpi_send(q, out, 0, n, peer, 11, MPI_COMM_WORLD, 0, NULL));
      MPICHECK(clpin_mpi_recv(q, in, 0, n, peer, 12, MPI_COMM_WORLD, 0, NULL, &ev));
    } else if (!requests) {
      MPICHECK(clpin_mpi_recv(q, in, 0, n, peer, 11, MPI_COMM_WORLD, 0, NULL, &ev));
      MPICHECK(clpin_mpi_send(q, out, 0, n, peer, 12, MPI_COMM_WORLD, 0, NULL));
    } else {
      clpin_mpi_request *r, *s;
      /* The receive on a queue of its own: on one in-order queue the
       * device would run the send's reads and the receive's writes one
       * after the other. */
      MPICHECK(clpin_mpi_irecv(q2, in, 0, n, peer, 21 + peer, MPI_COMM_WORLD, 0, NULL, &r));
      MPICHECK(clpin_mpi_isend(q, out, 0, n, peer, 21 + rank, MPI_COMM_WORLD, 0, NULL, &s));
      MPICHECK(clpin_mpi_wait(s, NULL));
      MPICHECK(clpin_mpi_wait(r, &ev));
    }
    CHECK(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
  }
  double t = bench_now_s() - t0, tmax = 0;
  MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return 2.0 * (double)n / tmax / 1e9;
}

/* Modes: blocking and requests on the shm path, then on MPI's
 * point-to-point (CLPIN_MPI_SHM=0, the path between hosts). */
static void case_exchange(size_t n) {
  const char *names[4] = {
      "clpin shm, blocking in order (send / recv)", "clpin shm, isend + irecv at once",
      "clpin point-to-point, blocking in order", "clpin point-to-point, isend + irecv at once"};
  double v[4][MAXRUNS];
  cl_mem out = dbuf(n), in = dbuf(n);
  for (int mode = 0; mode < 4; mode++) { /* warm-up: segments each way, threads; data checked */
    set_shm(mode < 2);
    fill_pattern(out, n, 40u + (unsigned)(rank + 2 * mode));
    one_exchange(out, in, n, mode % 2);
    if (rank <= 1)
      check_pattern(in, n, 40u + (unsigned)(1 - rank + 2 * mode), names[mode]);
  }
  for (int r = 0; r < runs; r++) /* interleaved: every mode sees the same drift */
    for (int mode = 0; mode < 4; mode++) {
      set_shm(mode < 2);
      v[mode][r] = one_exchange(out, in, n, mode % 2);
    }
  set_shm(1);
  head0("exchange %zu MiB each way, ranks 0 <-> 1 (2 x bytes / time, uploads done)", n >> 20);
  for (int mode = 0; mode < 4; mode++)
    range0(names[mode], v[mode], runs, "GB/s");
  ratio0("shm: isend + irecv / blocking in order", v[1], v[0], runs, 1.5);
  ratio0("point-to-point: isend + irecv / blocking in order", v[3], v[2], runs, 1.5);
  clReleaseMemObject(out);
  clReleaseMemObject(in);
}

/* ----------------------------------------------------------------- small -- */

/* One leg of a small message between this rank and peer. Modes: M_PLAIN
 * (blocking read, MPI_Send / MPI_Recv, blocking write), M_CLPIN
 * (clpin_mpi_send / clpin_mpi_recv, waiting for recv's event). */
enum { M_PLAIN, M_CLPIN, M__COUNT };
static const char *mode_names[M__COUNT] = {"plain (blocking read/write, MPI_Send/Recv)", "clpin"};

static void send_leg(cl_mem m, size_t n, int mode, int peer, void *host) {
  if (mode == M_PLAIN) {
    CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n, host, 0, NULL, NULL));
    MPI_Send(host, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
  } else {
    MPICHECK(clpin_mpi_send(q, m, 0, n, peer, 3, MPI_COMM_WORLD, 0, NULL));
  }
}

static void recv_leg(cl_mem m, size_t n, int mode, int peer, void *host) {
  if (mode == M_PLAIN) {
    MPI_Recv(host, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, n, host, 0, NULL, NULL));
    return;
  }
  cl_event ev;
  MPICHECK(clpin_mpi_recv(q, m, 0, n, peer, 3, MPI_COMM_WORLD, 0, NULL, &ev));
  CHECK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);
}

/* Ping-pong 0 <-> 1, iters round trips, plain or clpin: microseconds per
 * one-way message. */
static double pingpong(cl_mem m, size_t n, int mode, void *host) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now_s();
  if (rank <= 1)
    for (int i = 0; i < iters; i++)
      for (int leg = 0; leg < 2; leg++) {
        if ((leg == 0) == (rank == 0))
          send_leg(m, n, mode, 1 - rank, host);
        else
          recv_leg(m, n, mode, 1 - rank, host);
      }
  return (bench_now_s() - t0) / (2.0 * iters) * 1e6;
}

static void case_small(const size_t *sizes, int ns) {
  cl_mem m = dbuf(1 << 20);
  void *host = malloc(1 << 20);
  for (int k = 0; k < ns; k++) {
    size_t n = sizes[k];
    double t[2][MAXRUNS];
    for (int mode = M_PLAIN; mode <= M_CLPIN; mode++)
      pingpong(m, n, mode, host);
    /* Interleaved, so that both modes see the same drift of the machine. */
    for (int r = 0; r < runs; r++)
      for (int mode = M_PLAIN; mode <= M_CLPIN; mode++)
        t[mode][r] = pingpong(m, n, mode, host);
    head0("small messages, %zu KiB, ping-pong rank 0 <-> 1, time per message", n >> 10);
    range0(mode_names[M_CLPIN], t[M_CLPIN], runs, "us");
    range0(mode_names[M_PLAIN], t[M_PLAIN], runs, "us");
    if (rank == 0) {
      double r[MAXRUNS];
      for (int i = 0; i < runs; i++)
        r[i] = t[M_CLPIN][i] / t[M_PLAIN][i];
      char what[96];
      snprintf(what, sizeof what, "clpin / plain time, %zu KiB", n >> 10);
      bench_print_target(what, r, runs, 1.1, false);
    }
  }
  free(host);
  clReleaseMemObject(m);
}

/* ------------------------------------------------------------- allreduce -- */

/* mode 0 plain, 1 clpin (shm where possible), 2 clpin ring. GB/s: bytes /
 * the slowest rank's time. */
static double one_allreduce(cl_mem m, size_t n, int mode, float *host) {
  set_shm(mode != 2);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now_s();
  if (mode == 0) {
    CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n, host, 0, NULL, NULL));
    MPI_Allreduce(MPI_IN_PLACE, host, (int)(n / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, n, host, 0, NULL, NULL));
  } else {
    cl_event ev;
    MPICHECK(clpin_mpi_allreduce(q, m, n / 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, &ev));
    CHECK(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
  }
  double t = bench_now_s() - t0, tmax = 0;
  MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  set_shm(1);
  return n / tmax / 1e9;
}

static void case_allreduce(const size_t *sizes, int ns) {
  for (int k = 0; k < ns; k++) {
    size_t n = sizes[k];
    cl_mem m = dbuf(n);
    float *host = malloc(n);
    double v[3][MAXRUNS];
    for (int mode = 0; mode < 3; mode++) {
      /* Ones everywhere: after one sum every element is nranks. */
      float one = 1;
      CHECK(clEnqueueFillBuffer(q, m, &one, sizeof one, 0, n, 0, NULL, NULL));
      CHECK(clFinish(q));
      one_allreduce(m, n, mode, host);
      if (mode) {
        CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n, host, 0, NULL, NULL));
        for (size_t i = 0; i < n / 4; i += 997)
          if (host[i] != (float)nranks) {
            fprintf(stderr, "rank %d: allreduce mode %d: element %zu is %g\n", rank, mode, i,
                    host[i]);
            bad++;
            break;
          }
      }
      for (int r = 0; r < runs; r++)
        v[mode][r] = one_allreduce(m, n, mode, host);
    }
    head0("allreduce float32 sum, %zu MiB, %d ranks (bytes / slowest rank's time)", n >> 20,
          nranks);
    range0("plain (read, MPI_Allreduce, write)", v[0], runs, "GB/s");
    range0("clpin", v[1], runs, "GB/s");
    range0("clpin ring (CLPIN_MPI_SHM=0)", v[2], runs, "GB/s");
    if (rank == 0) {
      char what[96];
      snprintf(what, sizeof what, "clpin allreduce %zu MiB GB/s", n >> 20);
      bench_print_target(what, v[1], runs, 10, true);
      bench_print_raw(what, 0, v[1], runs);
    }
    ratio0("clpin / plain", v[1], v[0], runs, 10);
    free(host);
    clReleaseMemObject(m);
  }
}

/* --------------------------------------------------------------- overlap -- */

/* Gradients summed while the device computes: on every rank an allreduce
 * of the first --ar-mib size and a kernel of about the allreduce's own time
 * on the second queue, on a buffer of its own. Timed from a common barrier
 * to the slowest rank's end: each alone, one after the other (the blocking
 * call, then the kernel), and at once (clpin_mpi_iallreduce, the kernel,
 * both waited); ideal: the longer alone. */
static const char *busy_src = "__kernel void busy(__global float *x, int n) {\n"
                              "  size_t i = get_global_id(0);\n"
                              "  float a = x[i];\n"
                              "  for (int k = 0; k < n; k++) a = a * 0.9999f + 0.0001f;\n"
                              "  x[i] = a;\n"
                              "}\n";

enum { O_AR, O_KERNEL, O_SEQ, O_OVERLAP, O__COUNT };
static double overlap_once(cl_mem m, size_t n, cl_kernel k, size_t items, int mode) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now_s();
  cl_event ev = NULL;
  clpin_mpi_request *r = NULL;
  if (mode == O_AR || mode == O_SEQ)
    MPICHECK(clpin_mpi_allreduce(q, m, n / 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, &ev));
  if (ev) {
    CHECK(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
  }
  if (mode == O_OVERLAP)
    MPICHECK(clpin_mpi_iallreduce(q, m, n / 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 0, NULL, &r));
  if (mode != O_AR && rank < kernel_ranks) {
    CHECK(clEnqueueNDRangeKernel(q2, k, 1, NULL, &items, NULL, 0, NULL, NULL));
    CHECK(clFlush(q2));
  }
  if (r) {
    MPICHECK(clpin_mpi_wait(r, &ev));
    if (ev) {
      CHECK(clWaitForEvents(1, &ev));
      clReleaseEvent(ev);
    }
  }
  CHECK(clFinish(q2));
  double t = bench_now_s() - t0, slowest = 0;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest * 1e3;
}

static void case_overlap(size_t n) {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0)
      printf("overlap: skipped, MPI gave no MPI_THREAD_MULTIPLE\n");
    return;
  }
  cl_int err;
  cl_program prog = clCreateProgramWithSource(ctx, 1, &busy_src, NULL, &err);
  CHECK(err);
  CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
  cl_kernel k = clCreateKernel(prog, "busy", &err);
  CHECK(err);
  cl_uint units = 1;
  CHECK(clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL));
  size_t items = (size_t)units * 2048;
  cl_mem x = dbuf(items * 4), m = dbuf(n);
  float one = 1;
  CHECK(clEnqueueFillBuffer(q, m, &one, sizeof one, 0, n, 0, NULL, NULL));
  CHECK(clEnqueueFillBuffer(q2, x, &one, sizeof one, 0, items * 4, 0, NULL, NULL));
  CHECK(clFinish(q));
  CHECK(clFinish(q2));
  /* The kernel's length: grown until it takes about the allreduce's time
   * alone (a short kernel is mostly its launch), then scaled to it. */
  int spins = 256;
  CHECK(clSetKernelArg(k, 0, sizeof x, &x));
  CHECK(clSetKernelArg(k, 1, sizeof spins, &spins));
  double ta = overlap_once(m, n, k, items, O_AR);
  ta = overlap_once(m, n, k, items, O_AR);
  for (int tries = 0; tries < 40; tries++) {
    double tk = overlap_once(m, n, k, items, O_KERNEL);
    double scale = ta / (tk > 1e-3 ? tk : 1e-3);
    MPI_Bcast(&scale, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    bool last = scale < 2 || spins >= (1 << 28);
    if (!last && scale > 16)
      scale = 16;
    double next = spins * scale;
    spins = next < 1 ? 1 : next > (double)(1 << 28) ? (1 << 28) : (int)next;
    CHECK(clSetKernelArg(k, 1, sizeof spins, &spins));
    if (last)
      break;
  }
  double t[O__COUNT][MAXRUNS];
  for (int r = 0; r < runs; r++)
    for (int mode = 0; mode < O__COUNT; mode++)
      t[mode][r] = overlap_once(m, n, k, items, mode);
  /* Sums of ones: after 1 + 2 (warm-up, scaling) + 3 * runs allreduces the
   * values are nranks to that power; check one sum instead. */
  CHECK(clEnqueueFillBuffer(q, m, &one, sizeof one, 0, n, 0, NULL, NULL));
  CHECK(clFinish(q));
  overlap_once(m, n, k, items, O_OVERLAP);
  float *h = malloc(n);
  CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n, h, 0, NULL, NULL));
  for (size_t i = 0; i < n / 4; i += 997)
    if (h[i] != (float)nranks) {
      fprintf(stderr, "rank %d: overlap: element %zu is %g\n", rank, i, h[i]);
      bad++;
      break;
    }
  free(h);
  if (rank == 0) {
    printf("overlap, allreduce float32 %zu MiB and a kernel of %d iterations on %zu items on "
           "%d of %d ranks (slowest rank):\n",
           n >> 20, spins, items, kernel_ranks < nranks ? kernel_ranks : nranks, nranks);
    static const char *names[O__COUNT] = {"allreduce alone", "kernel alone",
                                          "allreduce, then the kernel (blocking)",
                                          "iallreduce and the kernel at once"};
    for (int mode = 0; mode < O__COUNT; mode++)
      bench_print_range(names[mode], t[mode], runs, "ms");
    double g[MAXRUNS], id[MAXRUNS];
    for (int r = 0; r < runs; r++) {
      double ideal = t[O_AR][r] > t[O_KERNEL][r] ? t[O_AR][r] : t[O_KERNEL][r];
      g[r] = t[O_SEQ][r] / t[O_OVERLAP][r];
      id[r] = t[O_OVERLAP][r] / ideal;
    }
    bench_print_range("gain: blocking / at once", g, runs, "x");
    bench_print_range("at once / the longer alone (1 = full overlap)", id, runs, "x");
  }
  clReleaseMemObject(x);
  clReleaseMemObject(m);
  clReleaseKernel(k);
  clReleaseProgram(prog);
}

/* ----------------------------------------------------------------- bcast -- */

static double one_bcast(cl_mem m, size_t n, int clpin, void *host) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = bench_now_s();
  if (clpin) {
    cl_event ev;
    MPICHECK(clpin_mpi_bcast(q, m, 0, n, 0, MPI_COMM_WORLD, 0, NULL, &ev));
    CHECK(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
  } else {
    if (rank == 0)
      CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n, host, 0, NULL, NULL));
    MPI_Bcast(host, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank != 0)
      CHECK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, n, host, 0, NULL, NULL));
  }
  double t = bench_now_s() - t0, tmax = 0;
  MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return n / tmax / 1e9;
}

static void case_bcast(size_t n) {
  cl_mem m = dbuf(n);
  void *host = malloc(n);
  double c[MAXRUNS], p[MAXRUNS];
  if (rank == 0)
    fill_pattern(m, n, 5);
  one_bcast(m, n, 1, host);
  if (rank != 0)
    check_pattern(m, n, 5, "bcast");
  one_bcast(m, n, 0, host);
  for (int r = 0; r < runs; r++) {
    c[r] = one_bcast(m, n, 1, host);
    p[r] = one_bcast(m, n, 0, host);
  }
  head0("bcast %zu MiB from rank 0, %d ranks (bytes / slowest rank's time)", n >> 20, nranks);
  range0("clpin", c, runs, "GB/s");
  range0("plain (read, MPI_Bcast, write)", p, runs, "GB/s");
  ratio0("clpin / plain", c, p, runs, 0);
  free(host);
  clReleaseMemObject(m);
}

int main(int argc, char **argv) {
  int provided = 0; /* the exchange case's requests need MPI_THREAD_MULTIPLE */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int mib = 256, nar = 2, nsm = 2;
  unsigned ar_mib[8] = {64, 256}, sm_kib[8] = {4, 64};
  const char *platform = NULL, *cases = "stages,send,exchange,small,allreduce,bcast";
  const bench_opt opts[] = {BENCH_OPT("--mib", BENCH_INT, &mib),
                            BENCH_OPT_LIST("--ar-mib", BENCH_COUNTS, ar_mib, &nar, 8),
                            BENCH_OPT_LIST("--small-kib", BENCH_COUNTS, sm_kib, &nsm, 8),
                            BENCH_OPT("--runs", BENCH_INT, &runs),
                            BENCH_OPT("--iters", BENCH_INT, &iters),
                            BENCH_OPT("--platform", BENCH_TEXT, &platform),
                            BENCH_OPT("--cases", BENCH_TEXT, &cases),
                            BENCH_OPT("--kernel-ranks", BENCH_INT, &kernel_ranks)};
  BENCH_PARSE_OPTS(PROG,
                   "[--mib 256] [--ar-mib 64,256] [--small-kib 4,64] [--runs 5] [--iters 200] "
                   "[--platform NAME] [--cases LIST] [--kernel-ranks N]\n",
                   argc, argv, opts);
  size_t ar[8], sm[8];
  for (int i = 0; i < nar; i++)
    ar[i] = (size_t)ar_mib[i] << 20;
  for (int i = 0; i < nsm; i++)
    sm[i] = (size_t)sm_kib[i] << 10;
  if (runs < 1 || runs > MAXRUNS || mib < 1 || iters < 1 || nranks < 2) {
    if (rank == 0)
      fprintf(stderr,
              "mpi-bench: --runs 1 ... %d, --mib and --iters at least 1, and at least 2 ranks\n",
              MAXRUNS);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  cl_platform_id plat;
  cl_device_id devs[BENCH_CL_MAX_DEVICES];
  cl_uint nd = bench_cl_devices(PROG, platform, &plat, devs, BENCH_CL_MAX_DEVICES);
  dev = devs[rank % (int)nd];
  ctx = bench_cl_context(PROG, plat, 1, &dev, clpin_strerror);
  q = bench_cl_queue(PROG, ctx, dev, clpin_strerror);
  q2 = bench_cl_queue(PROG, ctx, dev, clpin_strerror);
  char name[256], all[64][256];
  bench_cl_name(dev, name, sizeof name);
  MPI_Gather(name, 256, MPI_CHAR, rank == 0 ? all : NULL, 256, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    char hostn[MPI_MAX_PROCESSOR_NAME];
    int hl;
    MPI_Get_processor_name(hostn, &hl);
    printf("mpi-bench: %d ranks on %s, %d runs per figure, chunk %s\n", nranks, hostn, runs,
           getenv("CLPIN_MPI_CHUNK") ? getenv("CLPIN_MPI_CHUNK") : "4M (default)");
    for (int r = 0; r < nranks && r < 64; r++)
      printf("  rank %d: device %d of %u: %s\n", r, r % (int)nd, nd, all[r]);
  }
  size_t n = (size_t)mib << 20;
  if (strstr(cases, "stages"))
    case_stages(n);
  if (strstr(cases, "send"))
    case_send(n);
  if (strstr(cases, "exchange"))
    case_exchange(n);
  if (strstr(cases, "small"))
    case_small(sm, nsm);
  if (strstr(cases, "allreduce"))
    case_allreduce(ar, nar);
  if (strstr(cases, "bcast"))
    case_bcast(n);
  if (strstr(cases, "overlap"))
    case_overlap(ar[0]);
  int anybad = 0;
  MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("mpi-bench: data %s\n", anybad ? "MISMATCH" : "checked, exact");
  clpin_mpi_release(MPI_COMM_WORLD);
  clReleaseCommandQueue(q2);
  clReleaseCommandQueue(q);
  clpin_pool_release_context(ctx);
  clReleaseContext(ctx);
  MPI_Finalize();
  return anybad ? 1 : 0;
}
