/* SPDX-License-Identifier: Apache-2.0 */
/* Argument checks shared by every call, and the collectives' agreement. */
#include "mpi_internal.h"

#include <string.h>

cl_int clpin__mpi_vet_buffer(const char *func, cl_command_queue q, cl_mem buf, size_t offset,
                             size_t nbytes, cl_uint nw, const cl_event *wl) {
  if (!q)
    return clpin__mpi_fail(func, CL_INVALID_COMMAND_QUEUE, "queue is NULL");
  if (!buf)
    return clpin__mpi_fail(func, CL_INVALID_MEM_OBJECT, "buffer is NULL");
  if ((nw == 0) != (wl == NULL))
    return clpin__mpi_fail(func, CL_INVALID_EVENT_WAIT_LIST,
                           "num_events_in_wait_list is %u but event_wait_list is %s", nw,
                           wl ? "not NULL" : "NULL");
  for (cl_uint i = 0; i < nw; i++)
    if (!wl[i])
      return clpin__mpi_fail(func, CL_INVALID_EVENT_WAIT_LIST, "event_wait_list[%u] is NULL", i);
  cl_context qctx = NULL, bctx = NULL;
  cl_int err = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
  if (err != CL_SUCCESS)
    return clpin__mpi_fail(func, err, "queue is not a valid command queue");
  size_t bsize = 0;
  err = clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof bsize, &bsize, NULL);
  if (err == CL_SUCCESS)
    err = clGetMemObjectInfo(buf, CL_MEM_CONTEXT, sizeof bctx, &bctx, NULL);
  if (err != CL_SUCCESS)
    return clpin__mpi_fail(func, err, "buffer is not a valid memory object");
  if (bctx != qctx)
    return clpin__mpi_fail(func, CL_INVALID_CONTEXT,
                           "buffer and queue belong to different contexts");
  if (offset > bsize || nbytes > bsize - offset)
    return clpin__mpi_fail(func, CL_INVALID_VALUE,
                           "offset %zu + %zu bytes lies past the buffer's end (%zu bytes)", offset,
                           nbytes, bsize);
  return CL_SUCCESS;
}

cl_int clpin__mpi_vet_comm(const char *func, MPI_Comm comm, int *rank, int *size) {
  if (comm == MPI_COMM_NULL)
    return clpin__mpi_fail(func, CLPIN_ERR_INVALID_ARGUMENT, "comm is MPI_COMM_NULL");
  int inter = 0;
  int e = MPI_Comm_test_inter(comm, &inter);
  if (e != MPI_SUCCESS)
    return clpin__mpi_check(func, e, "MPI_Comm_test_inter(comm)");
  if (inter)
    return clpin__mpi_fail(func, CLPIN_ERR_INVALID_ARGUMENT,
                           "comm is an intercommunicator: pass an intracommunicator");
  if ((e = MPI_Comm_rank(comm, rank)) != MPI_SUCCESS ||
      (e = MPI_Comm_size(comm, size)) != MPI_SUCCESS)
    return clpin__mpi_check(func, e, "MPI_Comm_rank/size(comm)");
  return CL_SUCCESS;
}

/* One MPI_Allreduce(MAX) over [bad, shm_off, v0, -v0, v1, -v1, ...], the
 * values being the caller's then the settings (chunk, wire version): a rank
 * that refused sets bad; values agree iff max(v) == -max(-v). */
cl_int clpin__mpi_agree(const char *func, MPI_Comm comm, cl_int local, const clpin__mpi_val *vals,
                        int n, size_t chunk, bool *shm_ok) {
  enum { MAXV = 8, NSET = 2 };
  int64_t in[2 + 2 * (MAXV + NSET)], out[2 + 2 * (MAXV + NSET)];
  clpin__mpi_val all[MAXV + NSET];
  if (n > MAXV)
    n = MAXV;
  memcpy(all, vals, (size_t)n * sizeof *vals);
  all[n] = (clpin__mpi_val){"CLPIN_MPI_CHUNK", (int64_t)chunk};
  all[n + 1] = (clpin__mpi_val){"libclpin-mpi's wire version", CLPIN__MPI_WIRE};
  const int m = n + NSET;
  in[0] = local != CL_SUCCESS;
  in[1] = !clpin__mpi_shm_enabled();
  for (int i = 0; i < m; i++) {
    in[2 + 2 * i] = local == CL_SUCCESS ? all[i].v : INT64_MIN + 1;
    in[3 + 2 * i] = local == CL_SUCCESS ? -all[i].v : INT64_MIN + 1;
  }
  /* The detail of a local refusal survives the agreement's own calls. */
  char saved[768];
  strncpy(saved, clpin_mpi_last_error_detail(), sizeof saved - 1);
  saved[sizeof saved - 1] = 0;
  int e = MPI_Allreduce(in, out, 2 + 2 * m, MPI_INT64_T, MPI_MAX, comm);
  if (local != CL_SUCCESS) {
    clpin__mpi_set_detail(saved);
    return local;
  }
  cl_int err = clpin__mpi_check(func, e, "MPI_Allreduce (agreeing on the arguments)");
  if (err != CL_SUCCESS)
    return err;
  if (out[0])
    return clpin__mpi_fail(func, CLPIN_ERR_PEER,
                           "another rank of comm refused its arguments: this rank did nothing");
  for (int i = 0; i < m; i++) {
    long long lo = (long long)-out[3 + 2 * i], hi = (long long)out[2 + 2 * i];
    if (lo == hi)
      continue;
    if (i == n) /* chunk: it sizes every piece on the wire and in the shared segment */
      return clpin__mpi_fail(func, CLPIN_ERR_MISMATCH,
                             "the ranks of comm set different CLPIN_MPI_CHUNK (from %lld to %lld "
                             "bytes; this rank %zu): set the same on every rank; the buffer is "
                             "untouched",
                             lo, hi, chunk);
    return clpin__mpi_fail(func, CLPIN_ERR_MISMATCH,
                           "ranks passed different values for %s (from %lld to %lld; this rank "
                           "%lld); the buffer is untouched",
                           all[i].name, lo, hi, (long long)all[i].v);
  }
  if (shm_ok)
    *shm_ok = out[1] == 0;
  return CL_SUCCESS;
}
