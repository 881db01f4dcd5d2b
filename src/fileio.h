/* SPDX-License-Identifier: Apache-2.0 */
/* The file side of a file transfer (fileio.c): a part of the transfer read
 * from the file into memory (pread) or written from memory to it (pwrite),
 * at explicit offsets, through O_DIRECT where the part allows. Internal. */
#ifndef CLPIN_FILEIO_H
#define CLPIN_FILEIO_H

#include "internal.h"

/* A transfer's file (clpin__xfer's `file`; all zero: not a file transfer). */
typedef struct {
  bool on;     /* the host side is this file: the transfer's host pointer is unused */
  int fd;      /* a descriptor through the page cache (or the caller's O_DIRECT one) */
  int dfd;     /* an O_DIRECT descriptor of the same file, or -1 */
  bool own_fd; /* fd, dfd opened by clpin: clpin__file_close closes them */
  bool own_dfd;
  uint64_t pos; /* the file offset of the transfer's first byte */
} clpin__file;

/* What the parts of one transfer met, shared by them (atomics): the first
 * errno (0: none; ENODATA for a file that ended early) and the lowest offset in
 * the transfer that did not arrive (UINT64_MAX: none). */
typedef struct {
  atomic_int err_no;
  _Atomic uint64_t first_bad;
} clpin__file_status;

void clpin__file_status_init(clpin__file_status *st);

/* Bytes [off, off + len) of the transfer: read from the file (at f->pos +
 * off) into mem, or with to_file written from mem into the file. EINTR is
 * retried and short transfers continued. Through f->dfd where it is set:
 * aligned reads straight into mem, unaligned ones through a small aligned
 * buffer; unaligned writes through f->fd. False, with st updated, on failure. */
bool clpin__file_part(const clpin__file *f, bool to_file, uint64_t off, unsigned char *mem,
                      size_t len, clpin__file_status *st);

/* Record CLPIN_ERR_IO's detail for a failed transfer of nbytes of f: the
 * system's text, where, and how many bytes (before the first that failed)
 * had arrived. */
void clpin__file_fail(const char *func, const clpin__file *f, bool to_file,
                      const clpin__file_status *st, uint64_t nbytes);

/* Close the descriptors clpin opened for f (none: nothing). */
void clpin__file_close(clpin__file *f);

#endif /* CLPIN_FILEIO_H */
