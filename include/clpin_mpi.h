/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file clpin_mpi.h
 * @brief libclpin-mpi — OpenCL device buffers across MPI ranks, staged
 *        through clpin's pinned memory.
 *
 * An optional library beside clpin (CMake target clpin::mpi, pkg-config
 * clpin-mpi), built where MPI is found. It uses clpin's public API, OpenCL
 * and MPI, and compiles in clpin's size parser and versioned-struct rule so
 * that its options and structs follow clpin's. docs/MPI.md says when to use
 * which call and how fast each runs.
 *
 * @par Paths
 * Every call stages through pinned host memory and pipelines in chunks: the
 * device read of chunk k+1, the network of chunk k and the device write of
 * chunk k-1 overlap. Between ranks of one host the bytes do not pass through
 * MPI at all: the ranks share a memory segment (anonymous, memfd_create),
 * each registers it with clpin_host_register() in its own context, the
 * sender's device reads straight into it and the receiver's device writes
 * straight from it; small MPI messages only say which chunk is ready. Between
 * hosts (or with CLPIN_MPI_SHM=0) chunks travel through MPI's point-to-point
 * on pinned pool blocks. Allreduce on one host reduces in the shared segment
 * (each rank its slice of every chunk); across hosts it runs a ring
 * reduce-scatter and allgather on pinned memory. Messages of at most one
 * chunk move in one MPI message with no handshake (up to 16 KiB through the
 * stack, as the plain path: pinned memory does not pay there).
 *
 * @par Environment (read on each call; give every rank the same values)
 * - CLPIN_MPI_SHM: `0` forces MPI's point-to-point even between ranks of one
 *   host (the path between hosts, testable on one); default `1`.
 * - CLPIN_MPI_CHUNK: pipeline chunk size, written as clpin's size options
 *   (suffixes K, M, G, T), default 4M, from 4K to 1G; a value clpin would
 *   refuse keeps 4M, said once on stderr. A message of at most one chunk
 *   moves without handshake.
 * - CLPIN_MPI_THREADS: threads per rank for allreduce's host sums on one
 *   host; default the host's cores over its ranks, at most 8.
 *
 * @par Errors
 * Returns as clpin's: CL_SUCCESS or a negative code; OpenCL's codes pass
 * through, clpin's are CLPIN_ERR_* (clpin_strerror() names them), the
 * library's own (CLPIN_ERR_MPI, CLPIN_ERR_MISMATCH, CLPIN_ERR_PEER) in its
 * sub-range of clpin's, defined in clpin_mpi_errors.h. A bad
 * argument is refused before any communication, with a code and a detail
 * (clpin_mpi_last_error_detail()). The collectives (allreduce, bcast) agree
 * on their arguments first, with one small MPI_Allreduce: a call refused on
 * one rank returns CLPIN_ERR_PEER on every other, and no rank hangs; ranks
 * whose counts, types, ops, sizes or roots differ all get
 * CLPIN_ERR_MISMATCH, and so do ranks whose CLPIN_MPI_CHUNK differs (it
 * sizes what travels: the agreement covers it) or whose libclpin-mpi
 * builds put other bytes on the wire. A rank whose device fails during a collective keeps
 * taking part (without more device work) and returns its error; every
 * other rank returns CLPIN_ERR_PEER. A failing MPI call gives CLPIN_ERR_MPI
 * with MPI's error text in the detail (the library sets MPI_ERRORS_RETURN
 * on the communicator for the length of the call and restores the
 * caller's handler after). A receive whose sender sent another size gets
 * CLPIN_ERR_MISMATCH, and the sender's call fails the same way when both
 * are multi-chunk. When a call fails after it started writing the caller's
 * device buffer, the detail says which bytes may have changed ("bytes
 * [a, b) of the buffer may hold partial data"); otherwise the buffer is
 * untouched.
 *
 * @par Threads and messages
 * Calls on one communicator run one at a time (as MPI's blocking calls on one
 * communicator from one thread), but for sends and receives, which may also
 * run at once (clpin_mpi_isend(), clpin_mpi_irecv(), or from several
 * threads) when MPI was initialised with MPI_THREAD_MULTIPLE; calls on
 * different communicators may then run on different threads too.
 * Send and recv use the communicator and tag they are given for all their
 * messages: while one runs, let no other message with the same peer, tag
 * and communicator be pending (MPI's own rule for ordering makes the rest
 * safe). The ring allreduce uses tags 32766 and 32767 of its communicator.
 * MPI_ANY_SOURCE and MPI_ANY_TAG are refused: a pipelined message needs a
 * named peer. MPI_PROC_NULL is accepted and moves nothing. A send of more
 * than one chunk waits for its receiver (it needs the receiver's answer),
 * as MPI_Ssend does: ranks that exchange buffers order their calls, or post
 * them as requests (clpin_mpi_isend(), clpin_mpi_irecv()).
 *
 * @par Memory
 * Pinned chunks come from the pool of the queue's context (clpin_acquire()),
 * and return to it. Shared segments are cached per communicator (an MPI
 * attribute) and freed with it (MPI_Comm_free, or MPI_Finalize for
 * MPI_COMM_WORLD), or at once by clpin_mpi_release(). Nothing has a name in
 * /dev/shm: a crash leaves nothing behind.
 */
#ifndef CLPIN_MPI_H
#define CLPIN_MPI_H

#include <mpi.h>

#include "clpin.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Send `nbytes` of `buffer` from `offset` to rank `dest` of `comm`.
 *  Waits for its wait list first (each device read waits on it). Returns
 *  when the buffer may be reused: every read of it has completed (the bytes
 *  may still be on their way, as with MPI_Send).
 *  @param queue the queue of the device that holds `buffer`; the reads run
 *         on it, after what was enqueued on it before (in-order queue).
 *  @param buffer the device buffer (not owned: the caller keeps it).
 *  @param offset where the bytes start in `buffer`.
 *  @param nbytes 0 sends an empty message (the receiver must expect 0).
 *  @param dest a rank of `comm`, or MPI_PROC_NULL (nothing happens). This
 *         rank itself too: the bytes are read into host memory and the call
 *         returns, whether or not the receive was made yet; its
 *         clpin_mpi_recv() (or clpin_mpi_irecv()) takes them.
 *  @param tag 0 ... MPI_TAG_UB.
 *  @param comm an intracommunicator.
 *  @param num_events_in_wait_list, event_wait_list events the reads wait
 *         for, as OpenCL's (0 and NULL: none).
 *  @return CL_SUCCESS; CL_INVALID_COMMAND_QUEUE (NULL queue);
 *          CL_INVALID_MEM_OBJECT (NULL buffer); CL_INVALID_VALUE (offset +
 *          nbytes past the buffer's end); CL_INVALID_EVENT_WAIT_LIST;
 *          CLPIN_ERR_INVALID_ARGUMENT (comm MPI_COMM_NULL or an
 *          intercommunicator, dest or tag out of range, MPI_ANY_*);
 *          CLPIN_ERR_MISMATCH (the receiver expected another size);
 *          CLPIN_ERR_MPI; or an OpenCL or clpin code from staging. */
CLPIN_API cl_int clpin_mpi_send(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                                int dest, int tag, MPI_Comm comm, cl_uint num_events_in_wait_list,
                                const cl_event *event_wait_list);

/** Receive `nbytes` from rank `source` of `comm` into `buffer` at `offset`.
 *  Each device write waits for the wait list. Returns once every byte has
 *  arrived and its upload is enqueued on `queue`.
 *  @param queue the queue of the device that holds `buffer`; the writes run on it.
 *  @param buffer the device buffer (not owned).
 *  @param offset where the bytes go in `buffer`.
 *  @param nbytes what the sender sends, exactly.
 *  @param source a rank of `comm` (not MPI_ANY_SOURCE), or MPI_PROC_NULL
 *         (nothing arrives; the event completes after the wait list). This
 *         rank itself too: takes the first message of `tag` it sent itself,
 *         waiting for one if none was sent yet.
 *  @param tag 0 ... MPI_TAG_UB (not MPI_ANY_TAG).
 *  @param comm an intracommunicator.
 *  @param num_events_in_wait_list, event_wait_list events the writes wait
 *         for, as OpenCL's.
 *  @param event NULL, or receives an event (the caller releases it) that
 *         completes when the whole upload has.
 *  @return as clpin_mpi_send(); CLPIN_ERR_MISMATCH when the sender sent
 *          another number of bytes, or its one-message send failed (the
 *          detail says how many; the buffer is untouched); CLPIN_ERR_PEER
 *          when a multi-chunk sender's call failed part way (its device
 *          could not read: the detail names the chunk and the bytes that may
 *          hold partial data). With an error no event is returned. */
CLPIN_API cl_int clpin_mpi_recv(cl_command_queue queue, cl_mem buffer, size_t offset, size_t nbytes,
                                int source, int tag, MPI_Comm comm, cl_uint num_events_in_wait_list,
                                const cl_event *event_wait_list, cl_event *event);

/** A send, a receive or a collective running while its caller goes on
 *  (clpin_mpi_isend(), clpin_mpi_irecv(), clpin_mpi_iallreduce(),
 *  clpin_mpi_ibcast()), until clpin_mpi_wait() ends it. */
typedef struct clpin_mpi_request clpin_mpi_request;

/** clpin_mpi_send() that returns at once: the send runs on a thread of the
 *  library, and clpin_mpi_wait() gives its result. Its arguments are
 *  checked here first, as clpin_mpi_send() checks them: a bad one is
 *  refused with no request made and nothing sent. Needs MPI initialised
 *  with MPI_THREAD_MULTIPLE (MPI_Init_thread; mpi4py's default). Until the
 *  wait, enqueue nothing that writes the bytes being sent. Requests with one
 *  peer on one communicator that run at once must differ in tag (a send and
 *  a receive between two ranks, for instance: one tag each way); each
 *  direction between two ranks of one host carries one message at a time
 *  through shared memory, and a second one meanwhile through MPI's
 *  point-to-point.
 *  @param queue, buffer, offset, nbytes, dest, tag, comm,
 *         num_events_in_wait_list, event_wait_list as clpin_mpi_send()'s
 *         (the queue, the buffer and the events are retained until the wait).
 *  @param request receives the request; NULL when refused.
 *  @return CL_SUCCESS; the argument codes of clpin_mpi_send();
 *          CLPIN_ERR_INVALID_ARGUMENT (request NULL, or MPI not initialised
 *          with MPI_THREAD_MULTIPLE); CL_OUT_OF_HOST_MEMORY; CLPIN_ERR_THREAD
 *          (no thread could be started). */
CLPIN_API cl_int clpin_mpi_isend(cl_command_queue queue, cl_mem buffer, size_t offset,
                                 size_t nbytes, int dest, int tag, MPI_Comm comm,
                                 cl_uint num_events_in_wait_list, const cl_event *event_wait_list,
                                 clpin_mpi_request **request);

/** clpin_mpi_recv() that returns at once, as clpin_mpi_isend() is to
 *  clpin_mpi_send(). Until clpin_mpi_wait() gives the upload's event, the
 *  buffer's bytes may change at any time: read them only after it. For the
 *  device to run a receive's writes and a send's reads at once, give them
 *  two queues of the device (one in-order queue runs them one after the
 *  other).
 *  @param queue, buffer, offset, nbytes, source, tag, comm,
 *         num_events_in_wait_list, event_wait_list as clpin_mpi_recv()'s.
 *  @param request receives the request; NULL when refused.
 *  @return as clpin_mpi_isend(), with clpin_mpi_recv()'s argument codes. */
CLPIN_API cl_int clpin_mpi_irecv(cl_command_queue queue, cl_mem buffer, size_t offset,
                                 size_t nbytes, int source, int tag, MPI_Comm comm,
                                 cl_uint num_events_in_wait_list, const cl_event *event_wait_list,
                                 clpin_mpi_request **request);

/** clpin_mpi_allreduce() that returns at once: the collective runs on a
 *  thread of the library, and clpin_mpi_wait() gives its result and the
 *  upload's event. Collectives on one communicator run in the order this
 *  rank made them, blocking calls and requests alike (MPI's rule: every
 *  rank makes them in the same order); so several requests may be
 *  outstanding at once, e.g. one per bucket of gradients while the device
 *  computes the next. Its arguments are checked here, as
 *  clpin_mpi_allreduce() checks them, but a refusal is returned by the wait:
 *  the request still tells the other ranks, whose waits return
 *  CLPIN_ERR_PEER, so that none is left waiting. Needs MPI initialised with
 *  MPI_THREAD_MULTIPLE. Until the wait, enqueue nothing that reads or
 *  writes the buffer.
 *  @param queue, buffer, count, type, op, comm, num_events_in_wait_list,
 *         event_wait_list as clpin_mpi_allreduce()'s (retained until the
 *         wait).
 *  @param request receives the request; NULL when refused.
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (request NULL, comm not
 *          an intracommunicator, or MPI not initialised with
 *          MPI_THREAD_MULTIPLE: this rank takes no part, as the blocking
 *          call with a bad comm); CL_OUT_OF_HOST_MEMORY (no request made;
 *          the other ranks were told). */
CLPIN_API cl_int clpin_mpi_iallreduce(cl_command_queue queue, cl_mem buffer, size_t count,
                                      MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                                      cl_uint num_events_in_wait_list,
                                      const cl_event *event_wait_list, clpin_mpi_request **request);

/** clpin_mpi_bcast() that returns at once, as clpin_mpi_iallreduce() is to
 *  clpin_mpi_allreduce(), in the same order as the communicator's other
 *  collectives.
 *  @param queue, buffer, offset, nbytes, root, comm, num_events_in_wait_list,
 *         event_wait_list as clpin_mpi_bcast()'s.
 *  @param request receives the request; NULL when refused.
 *  @return as clpin_mpi_iallreduce(). */
CLPIN_API cl_int clpin_mpi_ibcast(cl_command_queue queue, cl_mem buffer, size_t offset,
                                  size_t nbytes, int root, MPI_Comm comm,
                                  cl_uint num_events_in_wait_list, const cl_event *event_wait_list,
                                  clpin_mpi_request **request);

/** Wait until a request has ended, and free it. Every request must be
 *  waited for, before MPI_Finalize and before its communicator is freed or
 *  released (clpin_mpi_release()).
 *  @param request from clpin_mpi_isend(), clpin_mpi_irecv(),
 *         clpin_mpi_iallreduce() or clpin_mpi_ibcast(); not usable after
 *         this call.
 *  @param event NULL, or receives, for a receive or a collective that
 *         succeeded, an event (the caller releases it) that completes when
 *         the whole upload has, as the blocking call's; NULL for a send or a
 *         failed call.
 *  @return the call's own result, as the blocking call would have
 *          returned it, with its detail in
 *          clpin_mpi_last_error_detail() of the caller's thread;
 *          CLPIN_ERR_INVALID_ARGUMENT for a NULL request. */
CLPIN_API cl_int clpin_mpi_wait(clpin_mpi_request *request, cl_event *event);

/** Whether a request has ended (clpin_mpi_wait() then returns at once).
 *  Local: no communication, no waiting.
 *  @param request a request not yet waited for.
 *  @param done receives 1 when it has ended, else 0.
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (request or done NULL). */
CLPIN_API cl_int clpin_mpi_test(clpin_mpi_request *request, int *done);

/** Every rank's first `count` elements of `buffer` combined with `op`, the
 *  result in every rank's buffer, in place. Collective over `comm`: every
 *  rank passes the same count, type and op.
 *  @param queue the queue of the device that holds `buffer`.
 *  @param buffer the device buffer, from its start (not owned).
 *  @param count elements; 0 does nothing (the event completes after the
 *         wait list).
 *  @param comm an intracommunicator; every rank of it takes part.
 *  @param num_events_in_wait_list, event_wait_list events the first read
 *         waits for, as OpenCL's.
 *  @param type MPI_FLOAT, MPI_DOUBLE, MPI_INT or MPI_LONG_LONG.
 *  @param op MPI_SUM, MPI_MAX or MPI_MIN. Sums of floating types may be
 *         added in any order (bit-identical on every rank, but not
 *         necessarily to a sequential sum); integer sums wrap as two's
 *         complement.
 *  @param event NULL, or receives an event (the caller releases it) that
 *         completes when the result is in the buffer.
 *  @return CL_SUCCESS; the argument codes of clpin_mpi_send() (count *
 *          size of type past the buffer: CL_INVALID_VALUE; another type or
 *          op: CLPIN_ERR_INVALID_ARGUMENT); CLPIN_ERR_PEER (another rank's
 *          arguments were refused: nothing was done; or its device failed
 *          during the call: this rank's buffer may hold partial data, the
 *          detail says which bytes); CLPIN_ERR_MISMATCH
 *          (ranks passed different counts, types or ops, or set
 *          different CLPIN_MPI_CHUNK); CLPIN_ERR_MPI;
 *          or an OpenCL or clpin code. */
CLPIN_API cl_int clpin_mpi_allreduce(cl_command_queue queue, cl_mem buffer, size_t count,
                                     MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                                     cl_uint num_events_in_wait_list,
                                     const cl_event *event_wait_list, cl_event *event);

/** `nbytes` of root's `buffer` from `offset` into every other rank's buffer
 *  at its `offset`. Collective over `comm`: every rank passes the same
 *  nbytes and root (offsets may differ).
 *  @param queue the queue of the device that holds `buffer`.
 *  @param buffer the device buffer (not owned).
 *  @param offset where the bytes are (root) or go (the others).
 *  @param nbytes the same on every rank; 0 does nothing.
 *  @param root a rank of `comm`.
 *  @param comm an intracommunicator; every rank of it takes part.
 *  @param num_events_in_wait_list, event_wait_list events the device
 *         copies wait for, as OpenCL's.
 *  @param event NULL, or receives an event (the caller releases it) that
 *         completes when the bytes are in this rank's buffer (at the root:
 *         at once after its reads).
 *  @return as clpin_mpi_allreduce(); a root out of range is
 *          CLPIN_ERR_INVALID_ARGUMENT. */
CLPIN_API cl_int clpin_mpi_bcast(cl_command_queue queue, cl_mem buffer, size_t offset,
                                 size_t nbytes, int root, MPI_Comm comm,
                                 cl_uint num_events_in_wait_list, const cl_event *event_wait_list,
                                 cl_event *event);

/** Free what the library caches for `comm` now (shared segments and their
 *  registrations, allreduce's second queue and its hold on the context)
 *  rather than when the communicator is freed. Local: no communication. A
 *  later call on `comm` sets them up again. Messages this rank sent itself
 *  and has not yet received are kept.
 *  @param comm the communicator.
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (MPI_COMM_NULL). */
CLPIN_API cl_int clpin_mpi_release(MPI_Comm comm);

/** What this process moved, per path, since it started (messages a rank
 *  sends to itself pass through no path here and are not counted). */
struct clpin_mpi_stats {
  size_t struct_size;          /**< caller sets sizeof(struct clpin_mpi_stats) */
  uint64_t bytes_sent_shm;     /**< sent through a shared segment (one host) */
  uint64_t bytes_sent_p2p;     /**< sent through MPI point-to-point on pinned chunks */
  uint64_t bytes_received_shm; /**< received through a shared segment */
  uint64_t bytes_received_p2p; /**< received through MPI point-to-point */
  uint64_t allreduce_shm;      /**< allreduce calls reduced in a shared segment */
  uint64_t allreduce_ring;     /**< allreduce calls by ring over MPI */
  uint64_t allreduce_small;    /**< allreduce calls small enough for one MPI_Allreduce */
  uint64_t bcast_shm;          /**< bcast calls through a shared segment */
  uint64_t bcast_p2p;          /**< bcast calls through MPI_Ibcast of pinned chunks */
  uint64_t segments;           /**< shared segments set up, ever */
};
/** The first released layout of struct clpin_mpi_stats (0.3.0): the
 *  smallest struct_size clpin_mpi_stats() takes (clpin.h, "API rules"). */
#define CLPIN_MPI_STATS_SIZE_V0_3 (offsetof(struct clpin_mpi_stats, segments) + sizeof(uint64_t))
/** A snapshot of this process's counters (all threads).
 *  @param stats receives the counters; the caller sets stats->struct_size
 *         to sizeof(struct clpin_mpi_stats) (clpin.h's rule for versioned
 *         structs: a larger, newer struct's fields beyond this library's
 *         read 0).
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (NULL, or a struct_size
 *          below CLPIN_MPI_STATS_SIZE_V0_3). */
CLPIN_API cl_int clpin_mpi_stats(struct clpin_mpi_stats *stats);

/** What the last failed clpin_mpi_* call of this thread found, in words:
 *  the function, the argument or the MPI call, MPI's error text, and the
 *  bytes of the caller's buffer that may hold partial data. As
 *  clpin_last_error_detail(): meaningful only right after a call that
 *  failed. A code passed through from clpin carries clpin's own detail.
 *  @return thread-local text owned by the library; "" when nothing failed;
 *          never NULL. */
CLPIN_API const char *clpin_mpi_last_error_detail(void);

#ifdef __cplusplus
}
#endif
#endif /* CLPIN_MPI_H */
