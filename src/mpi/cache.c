/* SPDX-License-Identifier: Apache-2.0 */
/* What the library keeps per communicator: the shared segments with each
 * peer and the collectives' segment. It hangs on the communicator as an MPI
 * attribute, so MPI_Comm_free (or MPI_Finalize) frees it; a duplicate of the
 * communicator starts empty (MPI_COMM_NULL_COPY_FN). Freeing is local:
 * munmap, unregister, close. Also the process's counters. */
#include "mpi_internal.h"

#include "../vstruct.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int keyval = MPI_KEYVAL_INVALID;
static _Atomic uint64_t counters[ST__COUNT];

static void state_free(clpin__mpi_comm *st) {
  if (!st)
    return;
  for (int i = 0; i < st->size; i++) {
    clpin__mpi_seg_free(&st->pairs[i].in.seg);
    clpin__mpi_seg_free(&st->pairs[i].out.seg);
  }
  clpin__mpi_seg_free(&st->coll);
  if (st->aux) {
    clReleaseCommandQueue(st->aux);
    clReleaseContext(st->aux_ctx);
  }
  free(st->pairs);
  pthread_mutex_destroy(&st->mu);
  free(st);
}

static int delete_fn(MPI_Comm comm, int kv, void *value, void *extra) {
  (void)comm, (void)kv, (void)extra;
  state_free(value);
  return MPI_SUCCESS;
}

static void make_keyval(void) {
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_fn, &keyval, NULL);
}

/* Two threads' first calls on one communicator (a send and a receive
 * running at once) make one state, not two. */
static pthread_mutex_t make_mu = PTHREAD_MUTEX_INITIALIZER;

static clpin__mpi_comm *state_make(MPI_Comm comm) {
  int size = 0;
  if (MPI_Comm_size(comm, &size) != MPI_SUCCESS)
    return NULL;
  clpin__mpi_comm *st = calloc(1, sizeof *st);
  if (!st)
    return NULL;
  st->size = size;
  st->pairs = calloc((size_t)size, sizeof *st->pairs);
  if (!st->pairs || pthread_mutex_init(&st->mu, NULL) != 0) {
    free(st->pairs);
    free(st);
    return NULL;
  }
  for (int i = 0; i < size; i++)
    st->pairs[i].in.seg.fd = st->pairs[i].out.seg.fd = -1;
  st->coll.fd = -1;
  if (MPI_Comm_set_attr(comm, keyval, st) != MPI_SUCCESS) {
    state_free(st);
    return NULL;
  }
  return st;
}

clpin__mpi_comm *clpin__mpi_comm_state(MPI_Comm comm) {
  pthread_once(&once, make_keyval);
  if (keyval == MPI_KEYVAL_INVALID)
    return NULL;
  void *v = NULL;
  int found = 0;
  pthread_mutex_lock(&make_mu);
  clpin__mpi_comm *st = NULL;
  if (MPI_Comm_get_attr(comm, keyval, &v, &found) == MPI_SUCCESS)
    st = found ? v : state_make(comm);
  pthread_mutex_unlock(&make_mu);
  return st;
}

cl_int clpin_mpi_release(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL)
    return clpin__mpi_fail(__func__, CLPIN_ERR_INVALID_ARGUMENT, "comm is MPI_COMM_NULL");
  pthread_once(&once, make_keyval);
  void *v = NULL;
  int found = 0;
  if (keyval != MPI_KEYVAL_INVALID && MPI_Comm_get_attr(comm, keyval, &v, &found) == MPI_SUCCESS &&
      found)
    MPI_Comm_delete_attr(comm, keyval); /* runs delete_fn */
  return CL_SUCCESS;
}

void clpin__mpi_count(clpin__mpi_stat s, uint64_t n) { atomic_fetch_add(&counters[s], n); }

cl_int clpin_mpi_stats(struct clpin_mpi_stats *stats) {
  if (!stats)
    return clpin__mpi_fail(__func__, CLPIN_ERR_INVALID_ARGUMENT, "stats is NULL");
  /* clpin's versioned-struct rule (vstruct.c, as clpin_pool_stats): an
   * older caller's smaller struct gets its fields, a newer one's fields
   * beyond ours read 0, one below the first released layout is refused. */
  char why[200];
  if (clpin__vstruct_short("stats", "struct clpin_mpi_stats", stats->struct_size,
                           CLPIN_MPI_STATS_SIZE_V0_3, why, sizeof why))
    return clpin__mpi_fail(__func__, CLPIN_ERR_INVALID_ARGUMENT, "%s", why);
  struct clpin_mpi_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  uint64_t *f = &s.bytes_sent_shm;
  for (int i = 0; i < ST__COUNT; i++)
    f[i] = atomic_load(&counters[i]);
  clpin__vstruct_out(stats, &s, sizeof s);
  return CL_SUCCESS;
}
