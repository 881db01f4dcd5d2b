/* SPDX-License-Identifier: Apache-2.0 */
/* Messages a rank sends to itself (clpin_mpi_send / clpin_mpi_recv with
 * dest or source equal to the caller's rank: a halo exchange on one rank).
 *
 * They never pass through MPI. The pipelined protocol (p2p.c) sends
 * replies back on the sender's own (comm, tag): with a peer of one's own,
 * a reply and the message it answers have the same source and tag, so the
 * sender took its own header for the answer (MPI_ERR_TRUNCATE) and its own
 * "chunk ready" for "slot free" (both sides waiting for ever). And a
 * blocking multi-chunk send to oneself could never end: no receive can be
 * posted while it runs.
 *
 * Instead the send reads the buffer into host memory and leaves it in a
 * mailbox hung on the communicator (an MPI attribute of its own, so
 * clpin_mpi_release(), which frees the segments, keeps messages not yet
 * received; MPI_Comm_free and MPI_Finalize drop them). A send to oneself
 * thus returns once the bytes are read, like MPI's buffered send, whether
 * or not the receive was posted; the receive takes the first message of its
 * tag (MPI's order) and writes it to its buffer, waiting for one to come if
 * none is there yet. A send whose read failed still leaves a message that
 * fails its receive, so no receive waits for ever. */
#include "mpi_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct msg {
  int tag;
  size_t nbytes;
  cl_int failed; /* the send's read failed: no bytes */
  char *bytes;   /* malloc'd, nbytes (NULL when failed or empty) */
  struct msg *next;
} msg;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  msg *head, *tail;
} mailbox;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int keyval = MPI_KEYVAL_INVALID;
static pthread_mutex_t make_mu = PTHREAD_MUTEX_INITIALIZER;

static int delete_fn(MPI_Comm comm, int kv, void *value, void *extra) {
  (void)comm, (void)kv, (void)extra;
  mailbox *mb = value;
  for (msg *m = mb->head, *next; m; m = next) {
    next = m->next;
    free(m->bytes);
    free(m);
  }
  pthread_cond_destroy(&mb->cv);
  pthread_mutex_destroy(&mb->mu);
  free(mb);
  return MPI_SUCCESS;
}

static void make_keyval(void) {
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_fn, &keyval, NULL);
}

static mailbox *mailbox_of(MPI_Comm comm) {
  pthread_once(&once, make_keyval);
  if (keyval == MPI_KEYVAL_INVALID)
    return NULL;
  void *v = NULL;
  int found = 0;
  mailbox *mb = NULL;
  pthread_mutex_lock(&make_mu);
  if (MPI_Comm_get_attr(comm, keyval, &v, &found) == MPI_SUCCESS) {
    if (found) {
      mb = v;
    } else if ((mb = calloc(1, sizeof *mb)) != NULL) {
      pthread_mutex_init(&mb->mu, NULL);
      pthread_cond_init(&mb->cv, NULL);
      if (MPI_Comm_set_attr(comm, keyval, mb) != MPI_SUCCESS) {
        delete_fn(comm, keyval, mb, NULL);
        mb = NULL;
      }
    }
  }
  pthread_mutex_unlock(&make_mu);
  return mb;
}

cl_int clpin__mpi_send_self(cl_command_queue q, cl_mem buf, size_t off, size_t n, int tag,
                            MPI_Comm comm, cl_uint nw, const cl_event *wl) {
  static const char *fn = "clpin_mpi_send";
  mailbox *mb = mailbox_of(comm);
  msg *m = calloc(1, sizeof *m);
  if (!mb || !m) {
    free(m);
    return clpin__mpi_fail(fn, CL_OUT_OF_HOST_MEMORY,
                           "no memory for a message to this rank itself (%zu bytes, tag %d)", n,
                           tag);
  }
  m->tag = tag;
  m->nbytes = n;
  cl_int err = CL_SUCCESS;
  if (n && !(m->bytes = malloc(n))) {
    err = clpin__mpi_fail(fn, CL_OUT_OF_HOST_MEMORY,
                          "no host memory to hold a %zu-byte message to this rank itself", n);
  } else {
    err = n    ? clEnqueueReadBuffer(q, buf, CL_TRUE, off, n, m->bytes, nw, wl, NULL)
          : nw ? clWaitForEvents(nw, wl)
               : CL_SUCCESS;
    if (err != CL_SUCCESS)
      err = clpin__mpi_fail(fn, err, "reading the buffer of a message to this rank itself");
  }
  if (err != CL_SUCCESS) {
    /* Its receive fails rather than waits. */
    free(m->bytes);
    m->bytes = NULL;
    m->failed = err;
  }
  pthread_mutex_lock(&mb->mu);
  if (mb->tail)
    mb->tail->next = m;
  else
    mb->head = m;
  mb->tail = m;
  pthread_cond_broadcast(&mb->cv);
  pthread_mutex_unlock(&mb->mu);
  return err;
}

/* A marker after the given events: the caller's *event. */
static cl_int give_event(cl_command_queue q, cl_uint n, const cl_event *evs, cl_event *event) {
  if (!event)
    return CL_SUCCESS;
  cl_int err = clEnqueueMarkerWithWaitList(q, n, n ? evs : NULL, event);
  if (err != CL_SUCCESS) {
    *event = NULL;
    return clpin__mpi_fail("clpin_mpi_recv", err, "clEnqueueMarkerWithWaitList");
  }
  return CL_SUCCESS;
}

cl_int clpin__mpi_recv_self(cl_command_queue q, cl_mem buf, size_t off, size_t n, int rank, int tag,
                            MPI_Comm comm, cl_uint nw, const cl_event *wl, cl_event *event) {
  static const char *fn = "clpin_mpi_recv";
  mailbox *mb = mailbox_of(comm);
  if (!mb)
    return clpin__mpi_fail(fn, CL_OUT_OF_HOST_MEMORY,
                           "no memory for the messages of this rank to itself");
  /* The first message of this tag, in the order they were sent. */
  pthread_mutex_lock(&mb->mu);
  msg *m, *prev;
  for (;;) {
    for (prev = NULL, m = mb->head; m && m->tag != tag; prev = m, m = m->next)
      ;
    if (m)
      break;
    pthread_cond_wait(&mb->cv, &mb->mu);
  }
  if (prev)
    prev->next = m->next;
  else
    mb->head = m->next;
  if (mb->tail == m)
    mb->tail = prev;
  pthread_mutex_unlock(&mb->mu);
  cl_int err;
  if (m->failed != CL_SUCCESS)
    err = clpin__mpi_fail(fn, CLPIN_ERR_PEER,
                          "rank %d (this rank) failed to read the buffer of its send of %zu bytes "
                          "with tag %d (that call returned %s); the buffer is untouched",
                          rank, m->nbytes, tag, clpin_strerror(m->failed));
  else if (m->nbytes != n)
    err = clpin__mpi_fail(fn, CLPIN_ERR_MISMATCH,
                          "rank %d (this rank) sent %zu bytes with tag %d, this call expects %zu; "
                          "the buffer is untouched",
                          rank, m->nbytes, tag, n);
  else if (n == 0)
    err = give_event(q, nw, wl, event);
  else {
    cl_event ev = NULL;
    err = clEnqueueWriteBuffer(q, buf, CL_TRUE, off, n, m->bytes, nw, wl, event ? &ev : NULL);
    if (err != CL_SUCCESS)
      err = clpin__mpi_fail(fn, err, "writing a message of this rank to itself to the buffer");
    else if (event)
      *event = ev;
  }
  free(m->bytes);
  free(m);
  return err;
}
