/* SPDX-License-Identifier: Apache-2.0 */
/* libclpin-mpi's internals, shared by its files:
 *   fail.c     error details, MPI error text, the call guard (errhandler),
 *              the options CLPIN_MPI_SHM and CLPIN_MPI_CHUNK
 *   vet.c      argument checks shared by every call, the collective agreement
 *   segment.c  shared memory segments (memfd) and their registrations
 *   cache.c    what is cached per communicator (an MPI attribute), counters
 *   wait.c     waiting for OpenCL events while MPI keeps progressing
 *   coll.c     the collectives' segment, second queue, barriers, settling
 *   p2p.c      clpin_mpi_send / clpin_mpi_recv and their argument checks;
 *              wire.h, its wire format (private to it and its test)
 *   turn.c     the order of the collectives on one communicator (tickets)
 *   self.c     messages a rank sends to itself (never through MPI)
 *   allreduce.c, bcast.c   the collectives
 *   request.c  clpin_mpi_isend / irecv / iallreduce / ibcast, wait and test
 *              (a blocking call on a thread of its own)
 *   reduce.c   the host reduction loops; reduce_threads.c runs them on
 *              several threads (CLPIN_MPI_THREADS)
 * Their levels (a file uses only files of its level or below) are
 * docs/DESIGN.md's "The layer map", checked by ci/layers.sh. The library
 * calls clpin's public API, OpenCL and MPI, and of clpin's internals only
 * the files it compiles in itself (cmake/mpi.cmake's CLPIN_MPI_CORE_SOURCES:
 * size.c for CLPIN_MPI_CHUNK, vstruct.c for struct_size). */
#ifndef CLPIN_MPI_INTERNAL_H
#define CLPIN_MPI_INTERNAL_H

#include "clpin_mpi.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- fail.c ---- */
/* Record the detail of a failure ("func: why (NAME: description)") and
 * return code. printf-style. */
cl_int clpin__mpi_fail(const char *func, cl_int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An MPI return code: CL_SUCCESS for MPI_SUCCESS, else CLPIN_ERR_MPI with
 * MPI's text and the call's name in the detail. */
cl_int clpin__mpi_check(const char *func, int mpi_err, const char *call);
/* A code from clpin: its detail is copied into ours. */
cl_int clpin__mpi_from_clpin(const char *func, cl_int code, const char *what);
/* One line on stderr, "clpin-mpi: ...": a fallback worth knowing about
 * (ranks of one host that could not share memory). */
void clpin__mpi_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Put back a detail saved earlier. */
void clpin__mpi_set_detail(const char *text);
/* Append " (bytes [a, b) of the buffer may hold partial data)" to the detail. */
void clpin__mpi_partial(size_t lo, size_t hi);

/* Sets MPI_ERRORS_RETURN on comm for the length of a call, then restores the
 * caller's handler; calls running at once on one comm share one swap. */
typedef struct {
  MPI_Comm comm;
  bool set;
} clpin__mpi_guard;
void clpin__mpi_guard_enter(clpin__mpi_guard *g, MPI_Comm comm);
void clpin__mpi_guard_leave(clpin__mpi_guard *g);

/* ---- options (fail.c) ---- */
bool clpin__mpi_shm_enabled(void);
size_t clpin__mpi_chunk(void);

/* ---- vet.c ---- */
/* queue, buffer, range and wait list as OpenCL would vet them. */
cl_int clpin__mpi_vet_buffer(const char *func, cl_command_queue q, cl_mem buf, size_t offset,
                             size_t nbytes, cl_uint nw, const cl_event *wl);
/* comm a valid intracommunicator; sets *rank and *size. A rank whose comm
 * is bad cannot take part in any agreement: it fails alone. */
cl_int clpin__mpi_vet_comm(const char *func, MPI_Comm comm, int *rank, int *size);
/* The version of what libclpin-mpi's collectives put on the wire and of the
 * thresholds that choose their paths (allreduce's small-message size, the
 * collectives' slots): bump it with any change to either, so that ranks
 * running different builds refuse a collective rather than misread it. */
enum { CLPIN__MPI_WIRE = 2 };
/* One value every rank of a collective must pass alike, and its name for a
 * mismatch's detail ("count", "root"). */
typedef struct {
  const char *name;
  int64_t v;
} clpin__mpi_val;
/* The agreement of a collective: every rank contributes its local verdict
 * (CL_SUCCESS or its code), the values that must match (vals[0..n)) and the
 * settings that change what travels: `chunk` (the rank's CLPIN_MPI_CHUNK,
 * which the caller then uses for the whole call) and CLPIN__MPI_WIRE.
 * Returns CL_SUCCESS when every rank is fine and agrees; the rank's own code
 * when it was refused; CLPIN_ERR_PEER when another rank was;
 * CLPIN_ERR_MISMATCH, on every rank, when a value or a setting differs.
 * shm_ok receives whether every rank allows the shared-memory path (one
 * rank's CLPIN_MPI_SHM=0 turns it off for all). */
cl_int clpin__mpi_agree(const char *func, MPI_Comm comm, cl_int local, const clpin__mpi_val *vals,
                        int n, size_t chunk, bool *shm_ok);

/* ---- allreduce.c, bcast.c: the collectives, for the blocking calls and
 * the requests ---- */
/* The local checks of clpin_mpi_allreduce() / clpin_mpi_bcast() (size:
 * comm's), CL_SUCCESS or the code, with its detail. */
cl_int clpin__mpi_allreduce_vet(cl_command_queue queue, cl_mem buffer, size_t count,
                                MPI_Datatype type, MPI_Op op, cl_uint nw, const cl_event *wl);
cl_int clpin__mpi_bcast_vet(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                            int root, int size, cl_uint nw, const cl_event *wl);
/* The collective itself, with the local verdict of its checks (a refusal
 * still takes part in the agreement, with this thread's detail): the caller
 * holds comm's turn. */
cl_int clpin__mpi_allreduce_run(cl_command_queue queue, cl_mem buffer, size_t count,
                                MPI_Datatype type, MPI_Op op, MPI_Comm comm, cl_uint nw,
                                const cl_event *wl, cl_int local, cl_event *event);
cl_int clpin__mpi_bcast_run(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                            int root, MPI_Comm comm, cl_uint nw, const cl_event *wl, cl_int local,
                            cl_event *event);

/* ---- p2p.c ---- */
/* All of a send's (recv false) or receive's arguments as clpin_mpi_send()
 * and clpin_mpi_recv() check them, before any communication. */
cl_int clpin__mpi_vet_p2p(const char *fn, bool recv, cl_command_queue queue, cl_mem buffer,
                          size_t offset, size_t nbytes, int peer, int tag, MPI_Comm comm,
                          cl_uint nw, const cl_event *wl);

/* ---- self.c: messages to oneself (dest / source == the caller's rank) ---- */
/* Read the buffer into a message left for this rank's receive; returns once
 * read (a failed read leaves a message that fails the receive). */
cl_int clpin__mpi_send_self(cl_command_queue q, cl_mem buf, size_t off, size_t n, int tag,
                            MPI_Comm comm, cl_uint nw, const cl_event *wl);
/* Take the first message of tag this rank sent itself (waiting for one). */
cl_int clpin__mpi_recv_self(cl_command_queue q, cl_mem buf, size_t off, size_t n, int rank, int tag,
                            MPI_Comm comm, cl_uint nw, const cl_event *wl, cl_event *event);

/* ---- turn.c: collectives on one communicator run in the order their
 * calls were made on this rank, blocking calls and requests alike ---- */
typedef struct clpin__mpi_turn clpin__mpi_turn;
/* A ticket for comm's next collective (the caller's thread, when the call
 * is made); NULL when no memory: then nothing is pending on comm and the
 * call runs at once. */
clpin__mpi_turn *clpin__mpi_turn_ticket(MPI_Comm comm, uint64_t *ticket);
/* Wait until the collectives before the ticket have ended. */
void clpin__mpi_turn_wait(clpin__mpi_turn *t, uint64_t ticket);
/* Ticket and wait, for a blocking call. */
clpin__mpi_turn *clpin__mpi_turn_take(MPI_Comm comm);
/* The holder's collective has ended: the next may run. NULL: nothing. */
void clpin__mpi_turn_end(clpin__mpi_turn *t);

/* ---- segment.c ---- */
typedef struct clpin__mpi_seg {
  int fd;         /* the memfd (creator) or the opened one */
  void *base;     /* this process's mapping */
  size_t size;    /* bytes mapped */
  cl_context ctx; /* the context it is registered in (NULL: not registered) */
  uint64_t id;    /* (creator's pid << 20) + serial: both sides name it so */
} clpin__mpi_seg;
cl_int clpin__mpi_seg_create(const char *func, size_t size, clpin__mpi_seg *seg);
cl_int clpin__mpi_seg_open(const char *func, int pid, int fd, size_t size, uint64_t id,
                           clpin__mpi_seg *seg);
/* Register the segment in queue's context (moving the registration if it was
 * in another context). */
cl_int clpin__mpi_seg_register(const char *func, clpin__mpi_seg *seg, cl_command_queue q);
void clpin__mpi_seg_free(clpin__mpi_seg *seg);

/* ---- cache.c ---- */
/* One direction of a pair's shared memory: a segment of nslots slots of
 * slot bytes, used by one transfer at a time (busy). */
typedef struct clpin__mpi_dir {
  clpin__mpi_seg seg;
  size_t slot;
  int nslots;
  bool busy; /* under clpin__mpi_comm.mu */
} clpin__mpi_dir;

typedef struct clpin__mpi_pair {
  clpin__mpi_dir in;  /* made by this rank: the peer's messages to it */
  clpin__mpi_dir out; /* the peer's `in`, opened here: this rank's messages to the peer */
  bool no_shm;        /* the peer cannot share memory with us: never try again (under mu) */
} clpin__mpi_pair;

typedef struct clpin__mpi_comm {
  int size;
  /* Guards the pairs' busy and no_shm flags: a send and a receive with one
   * peer may run at once (clpin_mpi_isend / clpin_mpi_irecv), each on its
   * own direction's segment. */
  pthread_mutex_t mu;
  clpin__mpi_pair *pairs; /* [size], by peer rank */
  clpin__mpi_seg coll;    /* the collectives' segment: size regions */
  size_t coll_slot;       /* bytes per slot in a region */
  int coll_nslots;
  int coll_state; /* 0: not tried, 1: ready, -1: not possible */
  /* allreduce's reads run on a queue of their own beside the caller's, so
   * device reads and writes overlap (PCIe is full duplex): one per comm, for
   * the context and device of the last call. */
  cl_command_queue aux;
  cl_context aux_ctx;
  cl_device_id aux_dev;
} clpin__mpi_comm;
/* The state cached on comm, created on first use (local). NULL: out of memory. */
clpin__mpi_comm *clpin__mpi_comm_state(MPI_Comm comm);

/* Counters (stats) */
typedef enum {
  ST_SENT_SHM,
  ST_SENT_P2P,
  ST_RECV_SHM,
  ST_RECV_P2P,
  ST_AR_SHM,
  ST_AR_RING,
  ST_AR_SMALL,
  ST_BC_SHM,
  ST_BC_P2P,
  ST_SEGMENTS,
  ST__COUNT
} clpin__mpi_stat;
void clpin__mpi_count(clpin__mpi_stat s, uint64_t n);

/* ---- coll.c ---- */
/* Collective: sets *st to the comm's state when the collectives' segment is
 * usable (every rank on one host, shm allowed everywhere), else NULL. */
cl_int clpin__mpi_coll_ready(const char *func, MPI_Comm comm, cl_command_queue q, size_t chunk,
                             bool shm_ok, clpin__mpi_comm **st);
/* The comm's second queue on q's context and device (made, or remade for
 * another device, here); q itself when one cannot be made. */
cl_command_queue clpin__mpi_aux_queue(clpin__mpi_comm *st, cl_command_queue q);
char *clpin__mpi_coll_slot(const clpin__mpi_comm *st, int rank, size_t slot);
cl_int clpin__mpi_ibarrier(const char *func, MPI_Comm comm, MPI_Request *req);
cl_int clpin__mpi_wait_barrier(const char *func, MPI_Request *req);
cl_int clpin__mpi_wait_cl(const char *func, cl_event *ev, const char *what, size_t chunk);
void clpin__mpi_drain(MPI_Request *reqs, int n, cl_event *evs, int nev);
cl_int clpin__mpi_settle(const char *func, MPI_Comm comm, cl_int local);
/* The caller's *event of a call (nothing when event is NULL): it ends once
 * the n events of evs have ended and, on an in-order q, what q held before.
 * With n == 0 a barrier on an in-order q, never a marker (NVIDIA's marker
 * with an empty wait list waits for every queue of the context), and on an
 * out-of-order q a user event already complete (a barrier there would hold
 * back the caller's later commands). q is flushed, so the caller may poll
 * the event. A failure's detail names func. */
cl_int clpin__mpi_give_event(const char *func, cl_command_queue q, cl_uint n, const cl_event *evs,
                             cl_event *event);

/* ---- wait.c ---- */
/* Wait for an OpenCL event while driving MPI's progress (a rank blocked in
 * clWaitForEvents would stall its peers' transfers). Returns the event's
 * status: CL_COMPLETE (0) or its negative error. */
cl_int clpin__mpi_wait_event(cl_event ev);
bool clpin__mpi_event_done(cl_event ev, cl_int *status);
/* Wait for an MPI request while polling; returns the MPI code. */
int clpin__mpi_wait_req(MPI_Request *req, MPI_Status *st);
/* Yield the CPU between two polls. */
void clpin__mpi_pause(unsigned *spins);
/* The end of a pipeline's turn: if nothing moved, drive MPI's progress and
 * pause; else start counting pauses anew. */
void clpin__mpi_idle(bool moved, unsigned *spins);
/* Whether the device command of chunk k (*ev; NULL: none, ended) has ended.
 * Once it has, *ev is released and set to NULL, and a failure becomes
 * *failed ("<what> chunk k: ..."), unless *failed holds one already. */
bool clpin__mpi_chunk_ended(const char *func, const char *what, cl_event *ev, size_t k,
                            cl_int *failed);

/* ---- reduce.c ---- */
typedef enum { RT_FLOAT, RT_DOUBLE, RT_INT, RT_LLONG, RT__BAD } clpin__mpi_rtype;
typedef enum { RO_SUM, RO_MAX, RO_MIN, RO__BAD } clpin__mpi_rop;
clpin__mpi_rtype clpin__mpi_rtype_of(MPI_Datatype t);
clpin__mpi_rop clpin__mpi_rop_of(MPI_Op op);
size_t clpin__mpi_rtype_size(clpin__mpi_rtype t);
/* dst[i] = op(dst[i], src[i]) for n elements. */
void clpin__mpi_reduce(clpin__mpi_rtype t, clpin__mpi_rop op, void *dst, const void *src, size_t n);

/* ---- reduce_threads.c ---- */
typedef struct {
  clpin__mpi_rtype t;
  clpin__mpi_rop op;
  char *dst;
  const char *src[64];
  int nsrc;
  size_t n; /* elements */
} clpin__mpi_rjob;
/* Threads for this process's reductions (CLPIN_MPI_THREADS, else cores /
 * ranks on the host, at most 8). */
int clpin__mpi_reduce_threads(int ranks_here);
/* dst = op(dst, src[0], src[1], ...) on T threads (the caller one of them). */
void clpin__mpi_reduce_many(const clpin__mpi_rjob *j, int T);

/* A chunked range: chunk k covers [k*chunk, min((k+1)*chunk, n)). */
static inline size_t clpin__mpi_nchunks(size_t n, size_t chunk) {
  return n ? (n + chunk - 1) / chunk : 0;
}
static inline size_t clpin__mpi_chunk_len(size_t n, size_t chunk, size_t k) {
  size_t lo = k * chunk;
  return n - lo < chunk ? n - lo : chunk;
}

#endif
