/* SPDX-License-Identifier: Apache-2.0 */
/* Files to device buffers (src/files.c, src/fileio.c): clpin_file_to_buffer
 * and clpin_buffer_to_file byte-exact at unaligned offsets and sizes, through
 * the page cache and O_DIRECT, on the host-unified device's in-place path and
 * staged in many chunks, blocking and not; every refusal leaves the buffer
 * untouched. */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK ((size_t)64 << 10)
#define FILE_BYTES ((size_t)(3 << 20) + 123)
#define BUF_BYTES ((size_t)(3 << 20) + 8192)
#define FILE_SEED 7u
#define BUF_SEED 9u

static test_cl T;
static unsigned char *want;   /* the file's bytes */
static unsigned char *bufpat; /* a fresh buffer's bytes */
static char path[128];

/* A file of FILE_BYTES of FILE_SEED's pattern in dir. */
static void make_file(const char *dir) {
  snprintf(path, sizeof path, "%s/clpin-check-file-XXXXXX", dir);
  int fd = mkstemp(path);
  ck_assert_msg(fd >= 0, "mkstemp in %s: %s", dir, strerror(errno));
  want = malloc(FILE_BYTES);
  ck_assert_ptr_nonnull(want);
  test_fill(want, FILE_BYTES, FILE_SEED);
  ck_assert_int_eq(pwrite(fd, want, FILE_BYTES, 0), (ssize_t)FILE_BYTES);
  close(fd);
}

static void setup_common(const char *dir) {
  test_cl_open(&T);
  make_file(dir);
  bufpat = malloc(BUF_BYTES);
  ck_assert_ptr_nonnull(bufpat);
  test_fill(bufpat, BUF_BYTES, BUF_SEED);
}
static void setup_inplace(void) { setup_common("/tmp"); }
static void setup_staged(void) {
  setup_common("/tmp");
  test_stage_everything(CHUNK);
}
static void teardown(void) {
  unlink(path);
  free(want);
  free(bufpat);
  test_shutdown_close(&T);
}

static int open_file(int flags) {
  int fd = open(path, flags);
  ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
  return fd;
}

/* A buffer holding BUF_SEED's pattern. */
static cl_mem patterned_buffer(void) {
  cl_mem b = test_buffer(&T, BUF_BYTES);
  CL_OK(clEnqueueWriteBuffer(T.queue, b, CL_TRUE, 0, BUF_BYTES, bufpat, 0, NULL, NULL));
  return b;
}

static unsigned char *buffer_bytes(cl_mem b) {
  unsigned char *h = malloc(BUF_BYTES);
  CL_OK(clEnqueueReadBuffer(T.queue, b, CL_TRUE, 0, BUF_BYTES, h, 0, NULL, NULL));
  return h;
}

/* The buffer holds the file's [foff, foff + n) at boff and its own pattern
 * around it. */
static void assert_buffer(cl_mem b, size_t boff, uint64_t foff, size_t n) {
  unsigned char *h = buffer_bytes(b);
  /* memcmp first (fast under the sanitizers), the byte only on a mismatch. */
  if (memcmp(h, bufpat, boff) || memcmp(h + boff, want + foff, n) ||
      memcmp(h + boff + n, bufpat + boff + n, BUF_BYTES - boff - n)) {
    for (size_t i = 0; i < BUF_BYTES; i++) {
      unsigned char w = i >= boff && i < boff + n ? want[foff + (i - boff)] : bufpat[i];
      if (h[i] != w)
        ck_abort_msg("buffer byte %zu is %u, wanted %u (range at %zu, %zu bytes, file offset "
                     "%llu)",
                     i, h[i], w, boff, n, (unsigned long long)foff);
    }
  }
  free(h);
}

static void assert_untouched(cl_mem b) { assert_buffer(b, 0, 0, 0); }

/* (buffer offset, file offset, bytes): 0, 1, odd, a page +- 1, a chunk +-
 * 1, many chunks, at unaligned offsets on both sides. */
static const size_t CASES[][3] = {
    {0, 0, 0},
    {5, 3, 1},
    {0, 0, 4095},
    {4096, 4096, 4097},
    {3, 4099, CHUNK - 1},
    {1, 1, CHUNK + 1},
    {0, 0, FILE_BYTES},
    {8191, 77, (size_t)(1 << 20) + 7},
    {4096, 8192, (size_t)(2 << 20) + 4096},
    {17, FILE_BYTES - 1000, 1000},
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static void read_case(int i, int open_flags, unsigned flags) {
  size_t boff = CASES[i][0], foff = CASES[i][1], n = CASES[i][2];
  cl_mem b = patterned_buffer();
  int fd = open_file(open_flags);
  off_t pos = lseek(fd, 11, SEEK_SET);
  cl_event ev = NULL;
  CL_OK(clpin_file_to_buffer(T.queue, b, boff, n, fd, foff, flags, 0, NULL, &ev));
  ck_assert_ptr_nonnull(ev);
  cl_int st;
  CL_OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  ck_assert_int_eq(st, CL_COMPLETE); /* blocking: the bytes are in place */
  clReleaseEvent(ev);
  ck_assert_int_eq(lseek(fd, 0, SEEK_CUR), pos); /* pread: the position is not moved */
  close(fd);
  assert_buffer(b, boff, foff, n);
  clReleaseMemObject(b);
}

START_TEST(file_to_buffer_exact) {
  for (int i = 0; i < (int)NCASES; i++)
    read_case(i, O_RDONLY, 0);
}
END_TEST

START_TEST(file_to_buffer_direct_flag) {
  for (int i = 0; i < (int)NCASES; i++)
    read_case(i, O_RDONLY, CLPIN_FILE_DIRECT);
}
END_TEST

/* The caller's own O_DIRECT descriptor at unaligned offsets and sizes. */
START_TEST(file_to_buffer_odirect_fd) {
  for (int i = 0; i < (int)NCASES; i++)
    read_case(i, O_RDONLY | O_DIRECT, 0);
}
END_TEST

/* A file of the buffer's bytes written at file offset foff into a file of
 * FILE_SEED's pattern: the bytes around the range stay. */
static void write_case(int i, int open_flags, unsigned flags) {
  size_t boff = CASES[i][0], foff = CASES[i][1], n = CASES[i][2];
  cl_mem b = patterned_buffer();
  int fd = open_file(O_WRONLY | O_TRUNC); /* the file as it was before the last case */
  ck_assert_int_eq(pwrite(fd, want, FILE_BYTES, 0), (ssize_t)FILE_BYTES);
  close(fd);
  fd = open_file(open_flags);
  cl_event ev = NULL;
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  clpin_stats s0 = test_stats(pool);
  CL_OK(clpin_buffer_to_file(T.queue, b, boff, n, fd, foff, flags, 0, NULL, &ev));
  clpin_stats s1 = test_stats(pool);
  ck_assert_uint_eq(s1.bytes_file_written - s0.bytes_file_written, n);
  ck_assert_uint_eq(s1.bytes_file_read, s0.bytes_file_read);
  if (n)
    ck_assert_ptr_nonnull(ev);
  if (ev)
    clReleaseEvent(ev);
  close(fd);
  unsigned char *got = malloc(FILE_BYTES + n);
  int rfd = open_file(O_RDONLY);
  ssize_t len = pread(rfd, got, FILE_BYTES + n, 0);
  close(rfd);
  size_t end = foff + n > FILE_BYTES ? foff + n : FILE_BYTES;
  ck_assert_int_eq(len, (ssize_t)end);
  size_t after = FILE_BYTES > foff + n ? FILE_BYTES - foff - n : 0;
  if (memcmp(got, want, foff) || memcmp(got + foff, bufpat + boff, n) ||
      memcmp(got + foff + n, want + foff + n, after)) {
    for (size_t k = 0; k < end; k++) {
      unsigned char w = k >= foff && k < foff + n ? bufpat[boff + (k - foff)] : want[k];
      if (got[k] != w)
        ck_abort_msg("file byte %zu is %u, wanted %u (case %d)", k, got[k], w, i);
    }
  }
  free(got);
  assert_untouched(b);
  clReleaseMemObject(b);
}

START_TEST(buffer_to_file_exact) {
  for (int i = 0; i < (int)NCASES; i++)
    write_case(i, O_RDWR, 0);
}
END_TEST

START_TEST(buffer_to_file_direct) {
  for (int i = 0; i < (int)NCASES; i++)
    write_case(i, O_WRONLY, CLPIN_FILE_DIRECT);
}
END_TEST

START_TEST(buffer_to_file_odirect_fd) {
  for (int i = 0; i < (int)NCASES; i++)
    write_case(i, O_RDWR | O_DIRECT, 0);
}
END_TEST

/* Buffer -> file -> another buffer, through CLPIN_FILE_DIRECT both ways. */
START_TEST(round_trip) {
  cl_mem a = patterned_buffer(), b = test_buffer(&T, BUF_BYTES);
  char p2[128];
  snprintf(p2, sizeof p2, "/var/tmp/clpin-check-rt-XXXXXX");
  int fd = mkstemp(p2);
  ck_assert_int_ge(fd, 0);
  CL_OK(clpin_buffer_to_file(T.queue, a, 0, BUF_BYTES, fd, 0, CLPIN_FILE_DIRECT, 0, NULL, NULL));
  CL_OK(fsync(fd) == 0 ? CL_SUCCESS : CLPIN_ERR_IO);
  CL_OK(clpin_file_to_buffer(T.queue, b, 0, BUF_BYTES, fd, 0, CLPIN_FILE_DIRECT, 0, NULL, NULL));
  close(fd);
  unlink(p2);
  unsigned char *h = buffer_bytes(b);
  ck_assert_int_eq(memcmp(h, bufpat, BUF_BYTES), 0);
  free(h);
  clReleaseMemObject(a);
  clReleaseMemObject(b);
}
END_TEST

/* tmpfs: CLPIN_FILE_DIRECT works whether the file system takes O_DIRECT
 * (Linux 6.6 on) or refuses it (the page cache then). */
START_TEST(tmpfs_direct) {
  unlink(path);
  free(want);
  make_file("/dev/shm");
  int probe = open(path, O_RDONLY | O_DIRECT);
  if (probe >= 0)
    close(probe);
  else
    ck_assert_int_eq(errno, EINVAL);
  read_case(7, O_RDONLY, CLPIN_FILE_DIRECT);
  write_case(8, O_RDWR, CLPIN_FILE_DIRECT);
}
END_TEST

/* A file system that refuses O_DIRECT (sysfs: EINVAL at open, as tmpfs
 * before Linux 6.6): CLPIN_FILE_DIRECT reads through the page cache. */
START_TEST(direct_refused_falls_back) {
  const char *sys = "/sys/devices/system/cpu/online";
  int fd = open(sys, O_RDONLY);
  ck_assert_msg(fd >= 0, "open %s: %s", sys, strerror(errno));
  int probe = open(sys, O_RDONLY | O_DIRECT);
  ck_assert_msg(probe < 0 && errno == EINVAL, "%s took O_DIRECT: pick another file", sys);
  char text[2];
  ck_assert_int_eq(pread(fd, text, sizeof text, 0), (ssize_t)sizeof text);
  cl_mem b = patterned_buffer();
  CL_OK(clpin_file_to_buffer(T.queue, b, 7, sizeof text, fd, 0, CLPIN_FILE_DIRECT, 0, NULL, NULL));
  close(fd);
  unsigned char *h = buffer_bytes(b);
  ck_assert_int_eq(memcmp(h + 7, text, sizeof text), 0);
  ck_assert_int_eq(memcmp(h, bufpat, 7), 0);
  ck_assert_int_eq(memcmp(h + 9, bufpat + 9, BUF_BYTES - 9), 0);
  free(h);
  clReleaseMemObject(b);
}
END_TEST

/* Non-blocking, behind a user event: nothing moves until it is set, then
 * the event completes with the bytes in place; both directions. */
START_TEST(non_blocking_wait_list) {
  cl_int err;
  cl_mem b = patterned_buffer();
  int fd = open_file(O_RDWR);
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  clpin_stats s0 = test_stats(pool);
  cl_event gate = clCreateUserEvent(T.ctx, &err);
  CL_OK(err);
  cl_event ev = NULL;
  size_t n = (size_t)(1 << 20) + 5;
  CL_OK(clpin_file_to_buffer(T.queue, b, 3, n, fd, 1, CLPIN_NON_BLOCKING, 1, &gate, &ev));
  ck_assert_ptr_nonnull(ev);
  test_sleep_us(50000);
  cl_int st;
  CL_OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  ck_assert_int_gt(st, CL_COMPLETE);
  CL_OK(clSetUserEventStatus(gate, CL_COMPLETE));
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);
  clReleaseEvent(gate);
  assert_buffer(b, 3, 1, n);
  clpin_stats s1 = test_stats(pool);
  ck_assert_uint_eq(s1.bytes_file_read - s0.bytes_file_read, n);
  /* And back, into a fresh file, behind another gate. */
  char p2[128];
  snprintf(p2, sizeof p2, "/tmp/clpin-check-nb-XXXXXX");
  int out = mkstemp(p2);
  ck_assert_int_ge(out, 0);
  gate = clCreateUserEvent(T.ctx, &err);
  CL_OK(err);
  CL_OK(clpin_buffer_to_file(T.queue, b, 3, n, out, 10, CLPIN_NON_BLOCKING, 1, &gate, &ev));
  test_sleep_us(50000);
  struct stat sb;
  ck_assert_int_eq(fstat(out, &sb), 0);
  ck_assert_int_eq(sb.st_size, 0); /* nothing written before the gate */
  CL_OK(clSetUserEventStatus(gate, CL_COMPLETE));
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);
  clReleaseEvent(gate);
  unsigned char *got = malloc(n);
  ck_assert_int_eq(pread(out, got, n, 10), (ssize_t)n);
  ck_assert_int_eq(memcmp(got, want + 1, n), 0);
  free(got);
  close(out);
  unlink(p2);
  close(fd);
  clReleaseMemObject(b);
}
END_TEST

/* Every refusal: the code, a detail naming the problem, the buffer as it was. */
static void refused(cl_int got, cl_int code, const char *words, cl_mem b) {
  ck_assert_msg(got == code, "got %d (%s), wanted %d (%s)", got, clpin_strerror(got), code,
                clpin_strerror(code));
  const char *d = clpin_last_error_detail();
  ck_assert_msg(strstr(d, words), "detail \"%s\" does not say \"%s\"", d, words);
  assert_untouched(b);
}

START_TEST(refusals) {
  cl_mem b = patterned_buffer();
  int fd = open_file(O_RDONLY);
  cl_command_queue q = T.queue;
  refused(clpin_file_to_buffer(q, b, 0, 200, fd, FILE_BYTES - 100, 0, 0, NULL, NULL),
          CL_INVALID_VALUE, "past the end of the file", b);
  refused(clpin_file_to_buffer(q, b, BUF_BYTES - 10, 11, fd, 0, 0, 0, NULL, NULL), CL_INVALID_VALUE,
          "past the end of the", b);
  refused(clpin_file_to_buffer(q, b, 0, 10, fd, UINT64_MAX - 3, 0, 0, NULL, NULL), CL_INVALID_VALUE,
          "overflows", b);
  refused(clpin_file_to_buffer(q, b, 0, 10, -1, 0, 0, 0, NULL, NULL), CLPIN_ERR_INVALID_ARGUMENT,
          "not a file descriptor", b);
  int closed = dup(fd);
  close(closed);
  refused(clpin_file_to_buffer(q, b, 0, 10, closed, 0, 0, 0, NULL, NULL),
          CLPIN_ERR_INVALID_ARGUMENT, "not an open descriptor", b);
  int pipefd[2];
  ck_assert_int_eq(pipe(pipefd), 0);
  ck_assert_int_eq(write(pipefd[1], want, 100), 100);
  refused(clpin_file_to_buffer(q, b, 0, 10, pipefd[0], 0, 0, 0, NULL, NULL),
          CLPIN_ERR_INVALID_ARGUMENT, "a pipe", b);
  refused(clpin_buffer_to_file(q, b, 0, 10, pipefd[1], 0, 0, 0, NULL, NULL),
          CLPIN_ERR_INVALID_ARGUMENT, "a pipe", b);
  char c[100];
  ck_assert_int_eq(read(pipefd[0], c, 100), 100); /* the pipe's bytes were not taken */
  close(pipefd[0]);
  close(pipefd[1]);
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  refused(clpin_file_to_buffer(q, b, 0, 10, sv[0], 0, 0, 0, NULL, NULL), CLPIN_ERR_INVALID_ARGUMENT,
          "a socket", b);
  close(sv[0]);
  close(sv[1]);
  int wo = open_file(O_WRONLY);
  refused(clpin_file_to_buffer(q, b, 0, 10, wo, 0, 0, 0, NULL, NULL), CLPIN_ERR_INVALID_ARGUMENT,
          "open for writing only", b);
  close(wo);
  refused(clpin_buffer_to_file(q, b, 0, 10, fd, 0, 0, 0, NULL, NULL), CLPIN_ERR_INVALID_ARGUMENT,
          "open for reading only", b);
  int ap = open_file(O_WRONLY | O_APPEND);
  refused(clpin_buffer_to_file(q, b, 0, 10, ap, 0, 0, 0, NULL, NULL), CLPIN_ERR_INVALID_ARGUMENT,
          "O_APPEND", b);
  close(ap);
  refused(clpin_file_to_buffer(q, b, 0, 10, fd, 0, CLPIN_PIN_MEMORY, 0, NULL, NULL),
          CLPIN_ERR_INVALID_ARGUMENT, "CLPIN_PIN_MEMORY", b);
  refused(clpin_file_to_buffer(q, b, 0, 10, fd, 0, 1u << 30, 0, NULL, NULL),
          CLPIN_ERR_INVALID_ARGUMENT, "unknown bits", b);
  refused(clpin_file_to_buffer(q, b, 0, 10, fd, 0, CLPIN_READ, 0, NULL, NULL),
          CLPIN_ERR_INVALID_ARGUMENT, "CLPIN_READ", b);
  refused(clpin_file_to_buffer(q, b, 0, 10, fd, 0, 0, 1, NULL, NULL), CL_INVALID_EVENT_WAIT_LIST,
          "wait list", b);
  refused(clpin_file_to_buffer(NULL, b, 0, 10, fd, 0, 0, 0, NULL, NULL), CL_INVALID_COMMAND_QUEUE,
          "queue", b);
  refused(clpin_file_to_buffer(q, NULL, 0, 10, fd, 0, 0, 0, NULL, NULL), CL_INVALID_MEM_OBJECT,
          "buffer", b);
  /* The file flag is no transfer flag. */
  char h[16];
  cl_int err = clpin_write(q, b, 0, h, sizeof h, CLPIN_FILE_DIRECT, 0, NULL, NULL);
  refused(err, CLPIN_ERR_INVALID_ARGUMENT, "a file flag", b);
  /* A failed wait list: nothing is read. */
  cl_event gate = clCreateUserEvent(T.ctx, &err);
  CL_OK(err);
  CL_OK(clSetUserEventStatus(gate, -77));
  refused(clpin_file_to_buffer(q, b, 0, 10, fd, 0, 0, 1, &gate, NULL),
          CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, "nothing was read", b);
  clReleaseEvent(gate);
  close(fd);
  clReleaseMemObject(b);
}
END_TEST

/* A write the file system refuses midway (the file size limit): CLPIN_ERR_IO
 * with the system's text and the bytes written before. */
START_TEST(write_error_is_io) {
  /* The limit is the process's: restored before any assertion, so the
   * cases after this one (CK_FORK=no under valgrind runs them in this
   * process) write their files whole. */
  void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
  struct rlimit old, rl = {.rlim_cur = (rlim_t)1 << 20, .rlim_max = RLIM_INFINITY};
  ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  rl.rlim_max = old.rlim_max;
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
  cl_mem b = patterned_buffer();
  char p2[128];
  snprintf(p2, sizeof p2, "/tmp/clpin-check-io-XXXXXX");
  int fd = mkstemp(p2);
  cl_int err = fd >= 0
                   ? clpin_buffer_to_file(T.queue, b, 0, (size_t)2 << 20, fd, 0, 0, 0, NULL, NULL)
                   : CL_SUCCESS;
  int limit_back = setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, was);
  ck_assert_int_eq(limit_back, 0);
  ck_assert_int_ge(fd, 0);
  close(fd);
  unlink(p2);
  ck_assert_msg(err == CLPIN_ERR_IO, "got %d (%s)", err, clpin_strerror(err));
  const char *d = clpin_last_error_detail();
  ck_assert_msg(strstr(d, strerror(EFBIG)) && strstr(d, "1048576 of the 2097152 bytes"),
                "detail: %s", d);
  clReleaseMemObject(b);
}
END_TEST

/* A file that shrinks before a non-blocking read runs: its event fails
 * (CLPIN_ERR_IO inside), nothing hangs. */
START_TEST(file_shrinks_before_the_read) {
  cl_int err;
  cl_mem b = patterned_buffer();
  int fd = open_file(O_RDWR);
  cl_event gate = clCreateUserEvent(T.ctx, &err), ev = NULL;
  CL_OK(err);
  CL_OK(clpin_file_to_buffer(T.queue, b, 0, (size_t)1 << 20, fd, 0, CLPIN_NON_BLOCKING, 1, &gate,
                             &ev));
  ck_assert_int_eq(ftruncate(fd, 100 << 10), 0);
  CL_OK(clSetUserEventStatus(gate, CL_COMPLETE));
  clWaitForEvents(1, &ev);
  cl_int st;
  CL_OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  ck_assert_int_lt(st, 0);
  clReleaseEvent(ev);
  clReleaseEvent(gate);
  close(fd);
  clReleaseMemObject(b);
}
END_TEST

/* Four threads read one file (one descriptor) into four buffers at once. */
typedef struct {
  cl_command_queue q;
  cl_mem b;
  int fd;
  size_t foff;
  cl_int err;
} reader;

static void *read_thread(void *arg) {
  reader *r = arg;
  r->err = clpin_file_to_buffer(r->q, r->b, 0, (size_t)1 << 20, r->fd, r->foff, 0, 0, NULL, NULL);
  return NULL;
}

START_TEST(four_threads_one_file) {
  int fd = open_file(O_RDONLY);
  reader r[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    cl_int err;
    r[i] = (reader){.q = clCreateCommandQueue(T.ctx, T.device, 0, &err),
                    .b = patterned_buffer(),
                    .fd = fd,
                    .foff = (size_t)i * 500001};
    CL_OK(err);
    ck_assert_int_eq(pthread_create(&th[i], NULL, read_thread, &r[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CL_OK(r[i].err);
    assert_buffer(r[i].b, 0, r[i].foff, (size_t)1 << 20);
    clReleaseMemObject(r[i].b);
    clReleaseCommandQueue(r[i].q);
  }
  close(fd);
}
END_TEST

/* Pinned memory in use is bounded by the pipeline, not by the file: the
 * whole file (48 chunks) read blocking and non-blocking and written back
 * reserves at most READ_SLOTS (8) chunk blocks (src/staging.c) at any time. */
START_TEST(pinned_memory_bounded_by_the_pipeline) {
  cl_mem b = patterned_buffer();
  int fd = open_file(O_RDWR);
  cl_event ev = NULL;
  CL_OK(clpin_file_to_buffer(T.queue, b, 0, FILE_BYTES, fd, 0, 0, 0, NULL, NULL));
  CL_OK(clpin_file_to_buffer(T.queue, b, 0, FILE_BYTES, fd, 0, CLPIN_NON_BLOCKING, 0, NULL, &ev));
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);
  CL_OK(clpin_buffer_to_file(T.queue, b, 0, FILE_BYTES, fd, 0, 0, 0, NULL, NULL));
  close(fd);
  assert_buffer(b, 0, 0, FILE_BYTES);
  clpin_pool *pool;
  CL_OK(clpin_pool_get(T.queue, &pool));
  clpin_stats st = {.struct_size = sizeof st};
  CL_OK(clpin_pool_stats(pool, &st));
  ck_assert_uint_eq(st.bytes_file_read, 2 * FILE_BYTES);
  ck_assert_uint_eq(st.bytes_file_written, FILE_BYTES);
  ck_assert_msg(st.peak_bytes_reserved > 0 && st.peak_bytes_reserved <= 8 * CHUNK,
                "%zu bytes of pinned memory reserved at the peak for a %zu-byte file, wanted at "
                "most 8 chunks of %zu",
                st.peak_bytes_reserved, FILE_BYTES, CHUNK);
  clReleaseMemObject(b);
}
END_TEST

static Suite *file_suite(void) {
  Suite *s = suite_create("file");
  void (*setups[2])(void) = {setup_inplace, setup_staged};
  const char *names[2] = {"inplace", "staged"};
  for (int k = 0; k < 2; k++) {
    TCase *tc = test_tcase(s, names[k], setups[k], teardown, 120);
    tcase_add_test(tc, file_to_buffer_exact);
    tcase_add_test(tc, file_to_buffer_direct_flag);
    tcase_add_test(tc, file_to_buffer_odirect_fd);
    tcase_add_test(tc, buffer_to_file_exact);
    tcase_add_test(tc, buffer_to_file_direct);
    tcase_add_test(tc, buffer_to_file_odirect_fd);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, tmpfs_direct);
    tcase_add_test(tc, direct_refused_falls_back);
    tcase_add_test(tc, four_threads_one_file);
    tcase_add_test(tc, write_error_is_io);
  }
  TCase *nb = test_tcase(s, "nonblocking", setup_staged, teardown, 120);
  tcase_add_test(nb, non_blocking_wait_list);
  tcase_add_test(nb, pinned_memory_bounded_by_the_pipeline);
  tcase_add_test(nb, file_shrinks_before_the_read);
  TCase *nb2 = test_tcase(s, "nonblocking-default", setup_inplace, teardown, 120);
  tcase_add_test(nb2, non_blocking_wait_list);
  TCase *errs = test_tcase(s, "errors", setup_inplace, teardown, 120);
  tcase_add_test(errs, refusals);
  return s;
}

int main(void) { return test_run_suite(file_suite()); }
