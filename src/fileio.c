/* SPDX-License-Identifier: Apache-2.0 */
/* The file side of file transfers: pread/pwrite of one part at explicit
 * offsets (never the descriptor's position, which other threads may share),
 * EINTR retried, short transfers continued, and O_DIRECT's alignment rule
 * (offset, length and memory aligned) kept inside: aligned reads go straight
 * into the caller's memory, unaligned ones through a small aligned buffer;
 * unaligned writes go through the page cache (a direct write of part of a
 * block would need a read of the rest first). */
#include "fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* O_DIRECT's alignment: the logical block size, 512 on most disks, 4096 on
 * some; 4096 serves both. */
#define DIRECT_ALIGN ((uint64_t)4096)
/* The aligned buffer of unaligned direct reads, read piece by piece (at
 * most this much, less for a smaller part). POCL maps buffers 128 bytes
 * into a page, so a host-unified device's direct reads all come here. */
#define BOUNCE_BYTES ((size_t)4 << 20)
/* One call moves at most this much: Linux moves at most 2 GiB - 4 KiB. */
#define CALL_MAX ((size_t)1 << 30)

void clpin__file_status_init(clpin__file_status *st) {
  atomic_init(&st->err_no, 0);
  atomic_init(&st->first_bad, UINT64_MAX);
}

static void record(clpin__file_status *st, int err_no, uint64_t at) {
  int none = 0;
  atomic_compare_exchange_strong(&st->err_no, &none, err_no ? err_no : EIO);
  uint64_t cur = atomic_load(&st->first_bad);
  while (at < cur && !atomic_compare_exchange_weak(&st->first_bad, &cur, at)) {
  }
}

/* Move [pos, pos + len) between fd and mem; returns the bytes moved, less
 * than len at the file's end (*err_no 0) or on an error (*err_no set). */
static size_t move(int fd, bool to_file, uint64_t pos, unsigned char *mem, size_t len,
                   int *err_no) {
  size_t done = 0;
  *err_no = 0;
  while (done < len) {
    size_t n = len - done < CALL_MAX ? len - done : CALL_MAX;
    ssize_t got = to_file ? pwrite(fd, mem + done, n, (off_t)(pos + done))
                          : pread(fd, mem + done, n, (off_t)(pos + done));
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      *err_no = errno;
      break;
    }
    if (got == 0) { /* the file's end; a write of 0 bytes would loop */
      if (to_file)
        *err_no = EIO;
      break;
    }
    done += (size_t)got;
  }
  return done;
}

static bool aligned(uint64_t v) { return (v & (DIRECT_ALIGN - 1)) == 0; }

/* A direct read of [pos, pos + len) into mem, which need not be aligned:
 * aligned pieces read into an aligned buffer, the wanted bytes copied out.
 * Returns the bytes delivered. */
static size_t read_bounced(int dfd, uint64_t pos, unsigned char *mem, size_t len, int *err_no) {
  unsigned char *b = NULL;
  size_t cap = (len + 2 * DIRECT_ALIGN - 1) & ~(size_t)(DIRECT_ALIGN - 1);
  if (cap > BOUNCE_BYTES)
    cap = BOUNCE_BYTES;
  *err_no = posix_memalign((void **)&b, DIRECT_ALIGN, cap);
  if (*err_no)
    return 0;
  size_t done = 0;
  while (done < len) {
    uint64_t p = pos + done, a0 = p & ~(DIRECT_ALIGN - 1);
    uint64_t end = pos + len, a1 = (end + DIRECT_ALIGN - 1) & ~(DIRECT_ALIGN - 1);
    size_t want = a1 - a0 < cap ? (size_t)(a1 - a0) : cap;
    size_t got = move(dfd, false, a0, b, want, err_no);
    size_t useful = a0 + got > p ? (size_t)(a0 + got - p) : 0;
    if (useful > len - done)
      useful = len - done;
    memcpy(mem + done, b + (p - a0), useful);
    done += useful;
    if (*err_no || got < want)
      break; /* an error, or the file's end: what is missing is reported */
  }
  free(b);
  return done;
}

bool clpin__file_part(const clpin__file *f, bool to_file, uint64_t off, unsigned char *mem,
                      size_t len, clpin__file_status *st) {
  uint64_t pos = f->pos + off;
  size_t done = 0;
  int err_no = 0;
  if (f->dfd >= 0 && aligned(pos) && aligned((uintptr_t)mem)) {
    /* The aligned body straight, the rest as below. */
    size_t body = len & ~(size_t)(DIRECT_ALIGN - 1);
    done = move(f->dfd, to_file, pos, mem, body, &err_no);
  }
  if (done < len && !err_no) {
    size_t rest = len - done;
    if (f->dfd >= 0 && !to_file)
      done += read_bounced(f->dfd, pos + done, mem + done, rest, &err_no);
    else
      done += move(f->fd, to_file, pos + done, mem + done, rest, &err_no);
  }
  if (done == len)
    return true;
  /* A read that met the file's end: the file is shorter than when the
   * call checked it. */
  record(st, err_no ? err_no : ENODATA, off + done);
  return false;
}

void clpin__file_fail(const char *func, const clpin__file *f, bool to_file,
                      const clpin__file_status *st, uint64_t nbytes) {
  int e = atomic_load(&st->err_no);
  uint64_t at = atomic_load(&st->first_bad);
  if (at == UINT64_MAX)
    at = 0;
  char why[360];
  if (!to_file && e == ENODATA)
    snprintf(why, sizeof why,
             "the file ended at offset %llu, before the %llu bytes asked for from offset %llu "
             "(it shrank during the call): %llu bytes had arrived",
             (unsigned long long)(f->pos + at), (unsigned long long)nbytes,
             (unsigned long long)f->pos, (unsigned long long)at);
  else
    snprintf(
        why, sizeof why, "%s the file failed at offset %llu: %s; %llu of the %llu bytes had %s",
        to_file ? "writing" : "reading", (unsigned long long)(f->pos + at), strerror(e),
        (unsigned long long)at, (unsigned long long)nbytes, to_file ? "been written" : "arrived");
  clpin__fail(func, CLPIN_ERR_IO, why);
}

void clpin__file_close(clpin__file *f) {
  if (f->own_dfd && f->dfd >= 0)
    close(f->dfd);
  if (f->own_fd && f->fd >= 0)
    close(f->fd);
  f->own_dfd = f->own_fd = false;
  f->dfd = f->fd = -1;
}
