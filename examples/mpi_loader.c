/* SPDX-License-Identifier: Apache-2.0 */
/* The loader across MPI ranks: data-parallel training's input side.
 *
 *   mpirun -np N ./mpi_loader [--batches B] [--kib K] [--epochs E] [--grad-kib G] [--seed S]
 *                             [--touch-kib T]
 *
 * One rank per device (rank % number of devices). Every epoch is a shuffled
 * order of B samples, the same order on every rank (a permutation drawn from
 * seed + epoch); the loader of rank r takes the batches i with i % N == r
 * (clpin_loader_desc.shard / nshards), so each sample is read exactly once
 * per epoch, by one rank. Each step, every rank turns its batch into a
 * "gradient" (a copy of the batch's first G KiB as floats, on its device)
 * and clpin_mpi_allreduce sums the gradients of all ranks in place, as
 * data-parallel SGD does. A rank whose shard ran out (B not a multiple of N)
 * takes part with a zero gradient, so the collective calls stay in step.
 * --touch-kib T: fill writes only the first T KiB of each batch (the rest of
 * the pinned slot keeps older bytes, all of it is still uploaded), so the
 * loop is bound by the uploads: bench/gpu-mpi.sh's transfer-bound case.
 *
 * Checks: the union of the ranks' batches is the epoch, each once; every
 * batch holds its sample's bytes; every summed gradient equals the sum the
 * host predicts. Exit status 0 when all hold, 1 otherwise. Prints each
 * rank's device, and the loader's rate per rank and for all ranks (bytes
 * over the wall time of the epochs' loops). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "clpin_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                                \
  do {                                                                                             \
    cl_int err_ = (call);                                                                          \
    if (err_ != CL_SUCCESS) {                                                                      \
      fprintf(stderr, "rank %d: %s:%d: %s: %s\n  %s\n", rank, __FILE__, __LINE__, #call,           \
              clpin_strerror(err_), clpin_mpi_last_error_detail());                                \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                                \
    }                                                                                              \
  } while (0)

static int rank, nranks;

/* The permutation of epoch e: Fisher-Yates driven by a 64-bit LCG seeded
 * with seed + e, so every rank draws the same one. */
static void shuffle(uint64_t *perm, uint64_t n, uint64_t seed) {
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (uint64_t i = 0; i < n; i++)
    perm[i] = i;
  for (uint64_t i = n; i > 1; i--) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t j = (x >> 33) % i, t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
}

/* Sample s's float at position i: small integers, so sums are exact. */
static float sample_value(uint64_t s, size_t i) { return (float)((s * 31 + i * 7) % 257); }

typedef struct {
  const uint64_t *perm; /* this epoch's order */
  size_t touch;         /* bytes fill writes (the rest keeps the slot's old bytes) */
} epoch_ctx;

static cl_int fill(void *user, uint64_t index, void *host, size_t capacity, size_t *used) {
  const epoch_ctx *e = user;
  uint64_t s = e->perm[index];
  float *f = host;
  size_t n = (e->touch < capacity ? e->touch : capacity) / sizeof(float);
  for (size_t i = 0; i < n; i++)
    f[i] = sample_value(s, i);
  *used = capacity;
  return CL_SUCCESS;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Device rank % count among every platform's devices (GPUs first, when
 * there are any; CLPIN_MPI_PLATFORM: a substring of the platform's name). */
static void pick_device(cl_platform_id *plat, cl_device_id *dev, char *name, size_t cap) {
  cl_platform_id plats[16];
  cl_uint np = 0;
  CHECK(clGetPlatformIDs(16, plats, &np));
  const char *want = getenv("CLPIN_MPI_PLATFORM");
  cl_platform_id ps[64];
  cl_device_id ds[64];
  cl_uint n = 0;
  for (int gpu = 1; gpu >= 0 && n == 0; gpu--)
    for (cl_uint p = 0; p < np; p++) {
      char pname[256] = "";
      clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
      if (want && *want && !strstr(pname, want))
        continue;
      cl_uint k = 0;
      if (clGetDeviceIDs(plats[p], gpu ? CL_DEVICE_TYPE_GPU : CL_DEVICE_TYPE_ALL, 64 - n, ds + n,
                         &k) != CL_SUCCESS)
        continue;
      for (cl_uint i = 0; i < k; i++)
        ps[n + i] = plats[p];
      n += k;
    }
  if (n == 0) {
    fprintf(stderr, "rank %d: no OpenCL device\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  *plat = ps[rank % n];
  *dev = ds[rank % n];
  clGetDeviceInfo(*dev, CL_DEVICE_NAME, cap, name, NULL);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  uint64_t batches = 20, seed = 42;
  size_t kib = 256, grad_kib = 64, touch_kib = 0;
  int epochs = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--batches"))
      batches = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--kib"))
      kib = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--grad-kib"))
      grad_kib = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--epochs"))
      epochs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--touch-kib"))
      touch_kib = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--seed"))
      seed = strtoull(argv[i + 1], NULL, 10);
  }
  size_t batch_bytes = kib << 10, grad_n = (grad_kib << 10) / sizeof(float);
  if (grad_n * sizeof(float) > batch_bytes)
    grad_n = batch_bytes / sizeof(float);

  cl_platform_id plat;
  cl_device_id dev;
  char dname[256] = "";
  pick_device(&plat, &dev, dname, sizeof dname);
  printf("rank %d of %d: device %s\n", rank, nranks, dname);
  fflush(stdout);
  cl_int err;
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  CHECK(err);
  cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
  CHECK(err);
  cl_mem grad = clCreateBuffer(ctx, CL_MEM_READ_WRITE, grad_n * sizeof(float), NULL, &err);
  CHECK(err);

  uint64_t *perm = malloc(batches * sizeof *perm);
  /* --touch-kib K: fill writes only each batch's first K KiB (at least
   * the gradient), so the loader is bound by its uploads, not by fill. */
  size_t touch = touch_kib ? touch_kib << 10 : batch_bytes;
  if (touch < grad_n * sizeof(float))
    touch = grad_n * sizeof(float);
  epoch_ctx ec = {perm, touch};
  clpin_loader_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.batch_bytes = batch_bytes;
  d.batches = batches;
  d.shard = (unsigned)rank;
  d.nshards = (unsigned)nranks;
  d.fill = fill;
  d.user = &ec;
  clpin_loader *ld;
  shuffle(perm, batches, seed); /* epoch 0's order: the loader fills ahead from create on */
  CHECK(clpin_loader_create(1, &q, &d, &ld));

  uint64_t steps = (batches + (uint64_t)nranks - 1) / (uint64_t)nranks;
  float *got = malloc(grad_n * sizeof(float)), *first = malloc(2 * sizeof(float));
  int bad = 0;
  double wall = 0; /* the epochs' step loops, barrier to last step */
  uint64_t loaded = 0;
  int *seen = calloc(batches ? batches : 1, sizeof(int)),
      *all = calloc(batches ? batches : 1, sizeof(int));
  for (int e = 0; e < epochs; e++) {
    memset(seen, 0, batches * sizeof(int));
    if (e > 0) { /* the loader is idle between epochs: a new order, then reset */
      shuffle(perm, batches, seed + (uint64_t)e);
      CHECK(clpin_loader_reset(ld));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double te = now();
    for (uint64_t s = 0; s < steps; s++) {
      clpin_batch *b = NULL;
      cl_int r = clpin_loader_next(ld, &b);
      cl_event ev = NULL;
      if (r == CL_SUCCESS) {
        uint64_t idx = clpin_batch_index(b);
        cl_event up = clpin_batch_event(b);
        CHECK(clEnqueueCopyBuffer(q, clpin_batch_buffer(b), grad, 0, 0, grad_n * sizeof(float), 1,
                                  &up, &ev));
        CHECK(clWaitForEvents(1, &up));
        loaded++;
        seen[idx]++;
        CHECK(clEnqueueReadBuffer(q, clpin_batch_buffer(b), CL_TRUE, 0, 2 * sizeof(float), first, 0,
                                  NULL, NULL));
        if (first[0] != sample_value(perm[idx], 0) || first[1] != sample_value(perm[idx], 1)) {
          fprintf(stderr, "rank %d: batch %llu does not hold sample %llu\n", rank,
                  (unsigned long long)idx, (unsigned long long)perm[idx]);
          bad++;
        }
        CHECK(clpin_batch_release(b, 1, &ev));
      } else if (r == CLPIN_END) {
        float zero = 0; /* this rank's shard is done: it adds nothing */
        CHECK(clEnqueueFillBuffer(q, grad, &zero, sizeof zero, 0, grad_n * sizeof(float), 0, NULL,
                                  &ev));
      } else
        CHECK(r);
      cl_event reduced;
      CHECK(clpin_mpi_allreduce(q, grad, grad_n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, 1, &ev,
                                &reduced));
      clReleaseEvent(ev);
      CHECK(clWaitForEvents(1, &reduced));
      clReleaseEvent(reduced);
      CHECK(clEnqueueReadBuffer(q, grad, CL_TRUE, 0, grad_n * sizeof(float), got, 0, NULL, NULL));
      /* Step s summed the batches s*N ... s*N + N-1 (those that exist). */
      for (size_t i = 0; i < grad_n; i++) {
        float want = 0;
        for (uint64_t k = s * (uint64_t)nranks; k < (s + 1) * (uint64_t)nranks && k < batches; k++)
          want += sample_value(perm[k], i);
        if (got[i] != want) {
          fprintf(stderr, "rank %d: epoch %d step %llu: gradient[%zu] = %g, expected %g\n", rank, e,
                  (unsigned long long)s, i, got[i], want);
          bad++;
          break;
        }
      }
    }
    wall += now() - te;
    clpin_batch *b = NULL;
    cl_int r = clpin_loader_next(ld, &b);
    if (r != CLPIN_END) {
      fprintf(stderr, "rank %d: a batch past this rank's shard (%s)\n", rank, clpin_strerror(r));
      bad++;
      clpin_batch_release(b, 0, NULL);
    }
    MPI_Allreduce(seen, all, (int)batches, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (uint64_t i = 0; i < batches; i++)
      if (all[i] != 1) {
        if (rank == 0)
          fprintf(stderr, "epoch %d: batch %llu read %d times\n", e, (unsigned long long)i, all[i]);
        bad++;
      }
  }
  /* Rates over wall time (every step: next, the copy, the allreduce, the
   * checks): one rank's bytes / its time; all ranks' bytes / the slowest. */
  double bytes = (double)loaded * (double)batch_bytes, rate = wall > 0 ? bytes / wall / 1e9 : 0;
  double all_bytes = 0, max_wall = 0, total = 0;
  MPI_Reduce(&bytes, &all_bytes, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&wall, &max_wall, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (max_wall > 0)
    total = all_bytes / max_wall / 1e9;
  int anybad = 0;
  MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("rank %d: %llu batches of %zu KiB, loader %.2f GB/s\n", rank, (unsigned long long)loaded,
         kib, rate);
  fflush(stdout);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0)
    printf("mpi_loader: %d ranks, %llu batches x %d epochs, each once per epoch, shuffled alike; "
           "gradients summed by clpin_mpi_allreduce; all ranks %.2f GB/s; %s\n",
           nranks, (unsigned long long)batches, epochs, total, anybad ? "FAILED" : "all checks OK");
  CHECK(clpin_loader_destroy(ld));
  clReleaseMemObject(grad);
  clpin_mpi_release(MPI_COMM_WORLD);
  clReleaseCommandQueue(q);
  clpin_pool_release_context(ctx);
  clReleaseContext(ctx);
  free(perm);
  free(got);
  free(first);
  free(seen);
  free(all);
  MPI_Finalize();
  return anybad ? 1 : 0;
}
