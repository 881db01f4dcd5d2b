/* SPDX-License-Identifier: Apache-2.0 */
/* Shared memory segments between ranks of one host. One rank creates an
 * anonymous memfd; the others open it through /proc/<pid>/fd/<fd> (same
 * host, same user), so no name ever exists in /dev/shm and a crash leaves
 * nothing behind. Each process maps it and registers its mapping with
 * clpin_host_register() in its own context: its device then reads and
 * writes the segment by DMA, with no host copy. */
#include "mpi_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_uint_fast64_t serial;

static cl_int map(const char *func, clpin__mpi_seg *seg, size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(seg->fd);
    seg->fd = -1;
    return clpin__mpi_fail(func, CL_OUT_OF_HOST_MEMORY, "mmap of a %zu-byte shared segment: %s",
                           size, strerror(e));
  }
  seg->base = p;
  seg->size = size;
  seg->ctx = NULL;
  return CL_SUCCESS;
}

cl_int clpin__mpi_seg_create(const char *func, size_t size, clpin__mpi_seg *seg) {
  memset(seg, 0, sizeof *seg);
  seg->fd = memfd_create("clpin-mpi", MFD_CLOEXEC);
  if (seg->fd < 0)
    return clpin__mpi_fail(func, CL_OUT_OF_HOST_MEMORY, "memfd_create: %s", strerror(errno));
  if (ftruncate(seg->fd, (off_t)size) != 0) {
    int e = errno;
    close(seg->fd);
    seg->fd = -1;
    return clpin__mpi_fail(func, CL_OUT_OF_HOST_MEMORY, "ftruncate(%zu) of a memfd: %s", size,
                           strerror(e));
  }
  seg->id = ((uint64_t)getpid() << 20) + (atomic_fetch_add(&serial, 1) & 0xfffff) + 1;
  return map(func, seg, size);
}

cl_int clpin__mpi_seg_open(const char *func, int pid, int fd, size_t size, uint64_t id,
                           clpin__mpi_seg *seg) {
  memset(seg, 0, sizeof *seg);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
  seg->fd = open(path, O_RDWR | O_CLOEXEC);
  if (seg->fd < 0)
    return clpin__mpi_fail(func, CL_OUT_OF_HOST_MEMORY, "open(%s): %s", path, strerror(errno));
  /* The size this rank expects comes from its own settings or a peer's
   * message: mapping past the file's end would fault (SIGBUS) on the first
   * copy there, so the file itself must hold it. */
  struct stat sb;
  if (fstat(seg->fd, &sb) != 0 || sb.st_size < 0 || (uint64_t)sb.st_size < size) {
    long long have = fstat(seg->fd, &sb) == 0 ? (long long)sb.st_size : -1;
    close(seg->fd);
    seg->fd = -1;
    return clpin__mpi_fail(func, CLPIN_ERR_MISMATCH,
                           "the shared segment %s holds %lld bytes, fewer than the %zu this rank "
                           "expects (CLPIN_MPI_CHUNK differs between the ranks?)",
                           path, have, size);
  }
  seg->id = id;
  return map(func, seg, size);
}

cl_int clpin__mpi_seg_register(const char *func, clpin__mpi_seg *seg, cl_command_queue q) {
  cl_context ctx = NULL;
  cl_int err = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
  if (err != CL_SUCCESS)
    return clpin__mpi_fail(func, err, "clGetCommandQueueInfo(CL_QUEUE_CONTEXT)");
  if (seg->ctx == ctx)
    return CL_SUCCESS;
  if (seg->ctx) {
    /* Registered in another context before (or the context was released,
     * which ended the registration already: nothing to undo then). */
    clpin_host_unregister(seg->base);
    clReleaseContext(seg->ctx);
    seg->ctx = NULL;
  }
  clpin_pool *pool = NULL;
  err = clpin_pool_get(q, &pool);
  if (err == CL_SUCCESS)
    err = clpin_host_register(pool, seg->base, seg->size);
  if (err != CL_SUCCESS)
    return clpin__mpi_from_clpin(func, err, "clpin_host_register of the shared segment");
  clRetainContext(ctx);
  seg->ctx = ctx;
  return CL_SUCCESS;
}

void clpin__mpi_seg_free(clpin__mpi_seg *seg) {
  if (!seg->base)
    return;
  if (seg->ctx) {
    clpin_host_unregister(seg->base);
    clReleaseContext(seg->ctx);
  }
  munmap(seg->base, seg->size);
  if (seg->fd >= 0)
    close(seg->fd);
  memset(seg, 0, sizeof *seg);
  seg->fd = -1;
}
