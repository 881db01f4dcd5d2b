/* SPDX-License-Identifier: Apache-2.0 */
/* Files to device buffers: clpin_file_to_buffer and clpin_buffer_to_file.
 * The arguments and the descriptor are checked here, before anything is
 * read; the transfer itself is a staged one whose host copies are the
 * file's reads or writes (fileio.c, through staging.c and engine.c): the
 * pipeline, the engine and the copy threads of clpin_write/clpin_read. On
 * a host-unified device a blocking call reads into (writes from) the
 * buffer's own mapping instead: no pinned block, no copy. */
#include "engine.h"
#include "events.h"
#include "transfer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the descriptor ------------------------------------------------------- */

static const char *kind_name(mode_t m) {
  if (S_ISFIFO(m))
    return "a pipe or FIFO";
  if (S_ISSOCK(m))
    return "a socket";
  if (S_ISCHR(m))
    return "a character device (a terminal, say)";
  if (S_ISDIR(m))
    return "a directory";
  return "not a regular file";
}

/* The same open file again, with access `acc` and `extra` flags, through
 * /proc/self/fd (Linux): -1 (errno set) where that cannot be done. */
static int reopen(int fd, int acc, int extra) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  int r;
  do
    r = open(path, acc | extra | O_CLOEXEC);
  while (r < 0 && errno == EINTR);
  return r;
}

/* Record why fn refused its arguments (printf-style) and give code. */
#define REFUSE(fn, code, ...) (clpin__failf((fn), (code), __VA_ARGS__), (code))

/* Check fd for a transfer of nbytes at file_offset in direction dir and
 * fill f: the descriptors to use. Nothing is read. */
static cl_int open_file(const char *fn, clpin__dir dir, int fd, uint64_t file_offset,
                        uint64_t nbytes, unsigned flags, clpin__file *f) {
  const cl_int bad = CLPIN_ERR_INVALID_ARGUMENT;
  *f = (clpin__file){.on = true, .fd = fd, .dfd = -1, .pos = file_offset};
  if (fd < 0)
    return REFUSE(fn, bad, "fd is %d: not a file descriptor", fd);
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0)
    return REFUSE(fn, bad, "fd %d is not an open descriptor (%s)", fd, strerror(errno));
  int acc = fl & O_ACCMODE;
  if (dir == CLPIN__H2D ? acc == O_WRONLY : acc == O_RDONLY)
    return REFUSE(fn, bad, "fd %d is open for %s only: this call %s it", fd,
                  acc == O_WRONLY ? "writing" : "reading", dir == CLPIN__H2D ? "reads" : "writes");
  if (dir == CLPIN__D2H && (fl & O_APPEND))
    return REFUSE(fn, bad,
                  "fd %d is open with O_APPEND: pwrite would append instead of writing at "
                  "offset %llu",
                  fd, (unsigned long long)file_offset);
  struct stat st;
  if (fstat(fd, &st) != 0)
    return REFUSE(fn, bad, "fd %d cannot be inspected (fstat: %s)", fd, strerror(errno));
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
    return REFUSE(fn, bad, "fd %d is %s: it cannot be %s at an offset (%s)", fd,
                  kind_name(st.st_mode), dir == CLPIN__H2D ? "read" : "written",
                  dir == CLPIN__H2D ? "pread" : "pwrite");
  if (file_offset > (uint64_t)INT64_MAX - nbytes)
    return REFUSE(fn, CL_INVALID_VALUE, "file_offset %llu + nbytes %llu overflows a file offset",
                  (unsigned long long)file_offset, (unsigned long long)nbytes);
  if (dir == CLPIN__H2D && S_ISREG(st.st_mode) && file_offset + nbytes > (uint64_t)st.st_size)
    return REFUSE(fn, CL_INVALID_VALUE,
                  "file_offset %llu + nbytes %llu lies past the end of the file (%llu bytes): "
                  "nothing was read",
                  (unsigned long long)file_offset, (unsigned long long)nbytes,
                  (unsigned long long)st.st_size);
  if (nbytes == 0)
    return CL_SUCCESS;
  if (fl & O_DIRECT) {
    /* The caller's own O_DIRECT descriptor: direct as it is; unaligned
     * writes need one through the page cache. */
    f->dfd = fd;
    int b = dir == CLPIN__D2H ? reopen(fd, acc, 0) : -1;
    if (b >= 0) {
      f->fd = b;
      f->own_fd = true;
    }
  } else if (flags & CLPIN_FILE_DIRECT) {
    int d = reopen(fd, acc, O_DIRECT);
    if (d >= 0) {
      f->dfd = d;
      f->own_dfd = true;
    } else {
      /* tmpfs and some others refuse O_DIRECT (EINVAL): the page cache. */
      clpin__log("%s: fd %d: no O_DIRECT here (%s): through the page cache", fn, fd,
                 strerror(errno));
    }
  }
  return CL_SUCCESS;
}

/* ---- the transfer ------------------------------------------------------------ */

/* A blocking transfer on a host-unified device: the file straight into (out
 * of) the buffer's mapping, after the caller's turn (the map waits for it). */
static cl_int in_place(clpin__xfer *x) {
  cl_int err;
  cl_map_flags mf = x->dir == CLPIN__H2D ? CL_MAP_WRITE_INVALIDATE_REGION : CL_MAP_READ;
  unsigned char *m = clEnqueueMapBuffer(x->q, x->mem, CL_TRUE, mf, x->offset, x->nbytes,
                                        x->num_wait, x->wait_list, NULL, &err);
  if (err != CL_SUCCESS)
    return err;
  cl_int io = clpin__file_copy(x, m);
  cl_event ev = NULL;
  err = clEnqueueUnmapMemObject(x->q, x->mem, m, 0, NULL, &ev);
  if (err == CL_SUCCESS) {
    clFlush(x->q);
    err = clpin__event_wait(ev);
    if (err == CL_SUCCESS && io == CL_SUCCESS && x->event)
      *x->event = ev;
    else
      clReleaseEvent(ev);
  }
  if (io != CL_SUCCESS)
    return io;
  if (err != CL_SUCCESS)
    return err;
  const char *why = "in place (host-unified device: the buffer's mapping)";
  clpin__path_set(CLPIN__PATH_DIRECT, why);
  clpin__count(x->pool, CLPIN__BYTES_ZERO_COPY, x->nbytes);
  clpin__log("%s %zu bytes of a file: %s", x->dir == CLPIN__H2D ? "read" : "write", x->nbytes, why);
  return CL_SUCCESS;
}

static cl_int route(clpin__xfer *x) {
  cl_int err = clGetCommandQueueInfo(x->q, CL_QUEUE_DEVICE, sizeof x->device, &x->device, NULL);
  if (err != CL_SUCCESS)
    return err;
  err = clpin__check_access(x);
  if (err != CL_SUCCESS)
    return err;
  bool nb = x->flags & CLPIN_NON_BLOCKING;
  if (!nb && clpin__pool_device_unified(x->pool, x->device) && clpin__opt(CLPIN_OPT_PINNED) != 1)
    return in_place(x);
  return clpin__staged_transfer(x);
}

static cl_int file_transfer(const char *fn, clpin__xfer *x, int fd, uint64_t file_offset) {
  if (clpin__forked()) /* before any OpenCL call */
    return REFUSE(fn, CLPIN_ERR_FORKED, CLPIN__FORKED_WHY);
  if (!x->q)
    return REFUSE(fn, CL_INVALID_COMMAND_QUEUE, "the queue is NULL");
  if (!x->mem)
    return REFUSE(fn, CL_INVALID_MEM_OBJECT, "the buffer is NULL");
  cl_int err = CLPIN__CHECK_FLAGS(fn, "flags", x->flags, FILE);
  if (err != CL_SUCCESS)
    return err;
  err = clpin__check_wait_list(fn, x->num_wait, x->wait_list);
  if (err != CL_SUCCESS)
    return err;
  size_t size = 0;
  cl_context ctx = NULL;
  err = clGetMemObjectInfo(x->mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  if (err == CL_SUCCESS)
    err = clGetMemObjectInfo(x->mem, CL_MEM_CONTEXT, sizeof ctx, &ctx, NULL);
  if (err != CL_SUCCESS)
    return err;
  if (x->offset > SIZE_MAX - x->nbytes || x->offset + x->nbytes > size)
    return REFUSE(fn, CL_INVALID_VALUE,
                  "offset %zu + nbytes %zu lies past the end of the %zu-byte buffer: nothing "
                  "was moved",
                  x->offset, x->nbytes, size);
  err = open_file(fn, x->dir, fd, file_offset, x->nbytes, x->flags, &x->file);
  if (err != CL_SUCCESS)
    return err;
  if (x->nbytes == 0)
    return x->event ? clpin__completed_event(ctx, x->event) : CL_SUCCESS;
  /* As clEnqueueWriteBuffer may for blocking calls: POCL never ends a
   * command behind a failed event. */
  if (clpin__wait_list_failed(x)) {
    clpin__file_close(&x->file);
    return REFUSE(fn, CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST,
                  "an event of the wait list has failed: nothing was %s",
                  x->dir == CLPIN__H2D ? "read" : "written");
  }
  err = clpin_pool_get(x->q, &x->pool);
  if (err == CL_SUCCESS)
    err = clpin__pool_enter(&x->pool); /* from here on x->pool is the struct */
  if (err == CL_SUCCESS) {
    err = route(x);
    clpin__pool_leave(x->pool);
  }
  clpin__file_close(&x->file);
  return err;
}

cl_int clpin_file_to_buffer(cl_command_queue q, cl_mem buffer, size_t offset, size_t nbytes, int fd,
                            uint64_t file_offset, unsigned flags, cl_uint num_wait,
                            const cl_event *wait_list, cl_event *event) {
  clpin__xfer x = {.q = q,
                   .mem = buffer,
                   .offset = offset,
                   .nbytes = nbytes,
                   .flags = flags,
                   .num_wait = num_wait,
                   .wait_list = wait_list,
                   .event = event,
                   .dir = CLPIN__H2D};
  return file_transfer(__func__, &x, fd, file_offset);
}

cl_int clpin_buffer_to_file(cl_command_queue q, cl_mem buffer, size_t offset, size_t nbytes, int fd,
                            uint64_t file_offset, unsigned flags, cl_uint num_wait,
                            const cl_event *wait_list, cl_event *event) {
  clpin__xfer x = {.q = q,
                   .mem = buffer,
                   .offset = offset,
                   .nbytes = nbytes,
                   .flags = flags,
                   .num_wait = num_wait,
                   .wait_list = wait_list,
                   .event = event,
                   .dir = CLPIN__D2H};
  return file_transfer(__func__, &x, fd, file_offset);
}
