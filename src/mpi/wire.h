/* SPDX-License-Identifier: Apache-2.0 */
/* What clpin_mpi_send puts on the wire before a message of more than one
 * chunk, and the sizes that choose a message's form: p2p.c's, in a header
 * of their own so that tests/mpi/test_mpi.c sizes its messages around the
 * very header the library sends (a payload of the header's size, one byte
 * more or less) rather than around a copy of it. Private to p2p.c and that
 * test (ci/layers.sh). A change here is a change of the wire: bump
 * CLPIN__MPI_WIRE (mpi_internal.h). */
#ifndef CLPIN_MPI_WIRE_H
#define CLPIN_MPI_WIRE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

/* Up to this size a message takes the plain path (the stack, blocking copies):
 * measured on an H100, 4 KiB moves in 10 us from malloc memory and 11 us
 * from pool memory; from 64 KiB on, pinned memory is faster (21 vs 13 us). */
enum { CLPIN__MPI_TINY = 16 << 10 };
#define CLPIN__MPI_MAGIC 0x636c70696e6d7069ull /* "clpinmpi" */

/* The header of a message of more than one chunk: the size, the chunk, the
 * host and the shared segment the sender knows. */
typedef struct {
  uint64_t magic, nbytes, chunk, seg_id;
  int32_t want_shm, pid;
  char host[MPI_MAX_PROCESSOR_NAME + 1];
} clpin__mpi_header;

/* A one-message payload of n bytes travels as n bytes below the header's
 * size and as n + 1 from it on (a zero byte after the payload): no payload
 * ever has the size of a header, so a receiver never takes a header for a
 * payload (writing it into the buffer while its sender waits for an answer
 * for ever), nor a payload for a header, and sizes still map one to one. */
static inline size_t clpin__mpi_wire_len(size_t n) {
  return n < sizeof(clpin__mpi_header) ? n : n + 1;
}

#endif /* CLPIN_MPI_WIRE_H */
