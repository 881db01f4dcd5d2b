/* SPDX-License-Identifier: Apache-2.0 */
/* file-bench: a file into a device buffer and back (docs/FILES.md), each way
 * against the storage's own rate and the plain path, measured side by side on
 * one file in one process run. Uses only <clpin.h> (and the benches' tested
 * statistics) and links the shared library.
 *
 * For each size (--sizes, default 64M,1G), --runs runs of each:
 *   pread hot       the storage's sequential read from the page cache: --depth
 *                   threads pread 4 MiB pieces of the file into malloc memory
 *   pread cold      the same after posix_fadvise(DONTNEED) (the page cache
 *                   dropped for the file, where the kernel allows)
 *   pread direct    the same through O_DIRECT (where the file system takes it)
 *   one pread       one thread, one pass into malloc memory (hot)
 *   pread hot, T    the pread loop on as many threads as clpin_file_to_buffer
 *                   reads with (T: CLPIN_THREADS and CLPIN_TRANSFER_THREADS'
 *                   smaller), hot
 *   pinned bus      the device's pinned write rate: clEnqueueWriteBuffer from
 *                   mapped CL_MEM_ALLOC_HOST_PTR memory (up to 1 GiB of it,
 *                   written over again to cover the size)
 *   plain hot/cold  read into malloc, then a blocking clEnqueueWriteBuffer
 *   clpin hot/cold  clpin_file_to_buffer
 *   clpin direct    clpin_file_to_buffer with CLPIN_FILE_DIRECT
 *   pwrite+fsync    the buffer's bytes from memory to the file, then fsync
 *   clpin write+fsync   clpin_buffer_to_file, then fsync
 * Rates in GB/s (1e9 bytes), median [min .. max]; then the ratios of
 * medians (cold direct >= 0.9x pread direct; hot >= 1.3x plain, >= 0.8x one
 * pread and >= 0.9x the smaller of the pinned bus and pread hot, T; write
 * >= 0.9x pwrite). The first run of clpin hot checks the
 * bytes the buffer got; a mismatch exits 3.
 *
 *   file-bench [--platform NAME] [--sizes LIST] [--runs N] [--depth N]
 *              [--file PATH] [--quick]
 * (--file: default /var/tmp/clpin-file-bench-PID.bin, a disk rather than
 * tmpfs; removed at the end.)
 */
#include "benchcl.h"
#include "benchstat.h"
#include "clpin.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define PIECE (4 * MiB)
#define MAXR 64
#define MAXS 16

static struct {
  cl_context ctx;
  cl_command_queue q;
  cl_device_id dev;
  int runs;
  unsigned depth;
  const char *path;
} B = {.runs = 5, .depth = 4};

#define CHECK(expr) BENCH_CL_CHECK("file-bench", expr, clpin_strerror)

static void die(const char *what) {
  fprintf(stderr, "file-bench: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* Drop the file's pages from the page cache (cold reads); false where the
 * kernel keeps them (dirty pages are written first). */
static bool drop_cache(int fd) {
  fdatasync(fd);
  return posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
}

/* ---- the storage's own read: depth threads pread pieces in turn ---------- */

typedef struct {
  int fd;
  unsigned char *mem;
  size_t n;
  unsigned depth, id;
} reader;

static void *read_pieces(void *arg) {
  reader *r = arg;
  for (size_t off = (size_t)r->id * PIECE; off < r->n; off += (size_t)r->depth * PIECE) {
    size_t len = r->n - off < PIECE ? r->n - off : PIECE;
    /* O_DIRECT reads whole pages: the last piece is asked for rounded up
     * (the memory has room) and ends short at the file's end. */
    size_t ask = (len + 4095) & ~(size_t)4095;
    for (size_t done = 0; done < len;) {
      ssize_t got = pread(r->fd, r->mem + off + done, ask - done, (off_t)(off + done));
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0)
        die("pread");
      done += (size_t)got;
    }
  }
  return NULL;
}

/* Read n bytes of fd into mem with depth threads; seconds. */
static double pread_loop(int fd, unsigned char *mem, size_t n, unsigned depth) {
  pthread_t t[64];
  reader r[64];
  double t0 = bench_now_s();
  for (unsigned i = 0; i < depth; i++) {
    r[i] = (reader){fd, mem, n, depth, i};
    pthread_create(&t[i], NULL, read_pieces, &r[i]);
  }
  for (unsigned i = 0; i < depth; i++)
    pthread_join(t[i], NULL);
  return bench_now_s() - t0;
}

/* ---- one size ------------------------------------------------------------------ */

enum {
  PREAD_HOT,
  PREAD_COLD,
  PREAD_DIRECT,
  ONE_PREAD,
  PREAD_HOT_T,
  PINNED_BUS,
  PLAIN_HOT,
  PLAIN_COLD,
  CLPIN_HOT,
  CLPIN_COLD,
  CLPIN_DIRECT,
  PWRITE_SYNC,
  CLPIN_WRITE_SYNC,
  NCASES
};
static const char *NAMES[NCASES] = {
    "pread hot",    "pread cold",   "pread direct",     "one pread", "pread hot, T",
    "pinned bus",   "plain hot",    "plain cold",       "clpin hot", "clpin cold",
    "clpin direct", "pwrite+fsync", "clpin write+fsync"};

static double median_of(double *v, int n) {
  bench_summary s = bench_summary_of(v, n);
  return s.median;
}

static void ratio(const char *what, const double *a, const double *b, int n, double goal) {
  double *r = malloc(sizeof(double) * (size_t)n);
  for (int i = 0; i < n; i++)
    r[i] = b[i] > 0 ? a[i] / b[i] : 0;
  bench_print_ratio(what, r, n, goal);
  free(r);
}

/* The threads clpin_file_to_buffer reads with: one transfer's share of the
 * copy threads. */
static unsigned clpin_read_threads(void) {
  size_t budget = clpin_get_option(CLPIN_OPT_THREADS);
  size_t share = clpin_get_option(CLPIN_OPT_TRANSFER_THREADS);
  size_t t = budget < share ? budget : share;
  return t < 1 ? 1 : t > 64 ? 64 : (unsigned)t;
}

/* n bytes from pinned host memory into buf (the bus); seconds. */
static double pinned_write(cl_mem buf, size_t n) {
  size_t piece = n < 1024 * MiB ? n : 1024 * MiB;
  cl_int err;
  cl_mem host = clCreateBuffer(B.ctx, CL_MEM_ALLOC_HOST_PTR, piece, NULL, &err);
  CHECK(err);
  void *p = clEnqueueMapBuffer(B.q, host, CL_TRUE, CL_MAP_WRITE, 0, piece, 0, NULL, NULL, &err);
  CHECK(err);
  memset(p, 7, piece);
  CHECK(clEnqueueWriteBuffer(B.q, buf, CL_TRUE, 0, piece, p, 0, NULL, NULL)); /* warm */
  double t0 = bench_now_s();
  for (size_t off = 0; off < n; off += piece)
    CHECK(clEnqueueWriteBuffer(B.q, buf, CL_FALSE, off, n - off < piece ? n - off : piece, p, 0,
                               NULL, NULL));
  CHECK(clFinish(B.q));
  double t = bench_now_s() - t0;
  CHECK(clEnqueueUnmapMemObject(B.q, host, p, 0, NULL, NULL));
  CHECK(clFinish(B.q));
  clReleaseMemObject(host);
  return t;
}

static void run_size(size_t n) {
  char sz[32];
  bench_fmt_size(n, sz, sizeof sz);
  int fd = open(B.path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    die(B.path);
  unsigned char *mem = NULL;
  if (posix_memalign((void **)&mem, 4096, (n + 4095) & ~(size_t)4095))
    die("posix_memalign");
  bench_fill(mem, n, 42);
  for (size_t off = 0; off < n; off += PIECE)
    if (pwrite(fd, mem + off, n - off < PIECE ? n - off : PIECE, (off_t)off) < 0)
      die("pwrite");
  fsync(fd);
  int dfd = open(B.path, O_RDONLY | O_DIRECT);
  bool cold = drop_cache(fd);
  cl_mem buf = bench_cl_buffer("file-bench", B.ctx, n, clpin_strerror);
  static double v[NCASES][MAXR];
  memset(v, 0, sizeof v);
  unsigned threads = clpin_read_threads();
  for (int r = 0; r < B.runs; r++) {
    double t0;
    /* Hot: the file was just read (warm it first). */
    pread_loop(fd, mem, n, B.depth);
    v[PREAD_HOT][r] = n / pread_loop(fd, mem, n, B.depth) / 1e9;
    v[ONE_PREAD][r] = n / pread_loop(fd, mem, n, 1) / 1e9;
    v[PREAD_HOT_T][r] = n / pread_loop(fd, mem, n, threads) / 1e9;
    v[PINNED_BUS][r] = n / pinned_write(buf, n) / 1e9;
    t0 = bench_now_s();
    pread_loop(fd, mem, n, 1);
    CHECK(clEnqueueWriteBuffer(B.q, buf, CL_TRUE, 0, n, mem, 0, NULL, NULL));
    v[PLAIN_HOT][r] = n / (bench_now_s() - t0) / 1e9;
    t0 = bench_now_s();
    CHECK(clpin_file_to_buffer(B.q, buf, 0, n, fd, 0, 0, 0, NULL, NULL));
    v[CLPIN_HOT][r] = n / (bench_now_s() - t0) / 1e9;
    if (r == 0) {
      memset(mem, 0, n);
      CHECK(clEnqueueReadBuffer(B.q, buf, CL_TRUE, 0, n, mem, 0, NULL, NULL));
      size_t bad = bench_mismatch(mem, n, 42);
      if (bad != SIZE_MAX) {
        fprintf(stderr, "file-bench: clpin_file_to_buffer of %s: byte %zu differs\n", sz, bad);
        exit(3);
      }
    }
    /* Cold, where the page cache can be dropped. */
    if (cold) {
      drop_cache(fd);
      v[PREAD_COLD][r] = n / pread_loop(fd, mem, n, B.depth) / 1e9;
      drop_cache(fd);
      t0 = bench_now_s();
      pread_loop(fd, mem, n, 1);
      CHECK(clEnqueueWriteBuffer(B.q, buf, CL_TRUE, 0, n, mem, 0, NULL, NULL));
      v[PLAIN_COLD][r] = n / (bench_now_s() - t0) / 1e9;
      drop_cache(fd);
      t0 = bench_now_s();
      CHECK(clpin_file_to_buffer(B.q, buf, 0, n, fd, 0, 0, 0, NULL, NULL));
      v[CLPIN_COLD][r] = n / (bench_now_s() - t0) / 1e9;
    }
    if (dfd >= 0) {
      drop_cache(fd);
      v[PREAD_DIRECT][r] = n / pread_loop(dfd, mem, n, B.depth) / 1e9;
      t0 = bench_now_s();
      CHECK(clpin_file_to_buffer(B.q, buf, 0, n, fd, 0, CLPIN_FILE_DIRECT, 0, NULL, NULL));
      v[CLPIN_DIRECT][r] = n / (bench_now_s() - t0) / 1e9;
    }
    /* Writes, each ended by fsync. */
    CHECK(clEnqueueReadBuffer(B.q, buf, CL_TRUE, 0, n, mem, 0, NULL, NULL));
    t0 = bench_now_s();
    for (size_t off = 0; off < n; off += PIECE)
      if (pwrite(fd, mem + off, n - off < PIECE ? n - off : PIECE, (off_t)off) < 0)
        die("pwrite");
    fsync(fd);
    v[PWRITE_SYNC][r] = n / (bench_now_s() - t0) / 1e9;
    t0 = bench_now_s();
    CHECK(clpin_buffer_to_file(B.q, buf, 0, n, fd, 0, 0, 0, NULL, NULL));
    fsync(fd);
    v[CLPIN_WRITE_SYNC][r] = n / (bench_now_s() - t0) / 1e9;
  }
  printf("%s file (%s), %d runs, pread depth %u, T = %u:\n", sz, B.path, B.runs, B.depth, threads);
  for (int c = 0; c < NCASES; c++) {
    if ((c == PREAD_COLD || c == PLAIN_COLD || c == CLPIN_COLD) && !cold)
      printf("  %-18s (the page cache could not be dropped)\n", NAMES[c]);
    else if ((c == PREAD_DIRECT || c == CLPIN_DIRECT) && dfd < 0)
      printf("  %-18s (O_DIRECT refused here)\n", NAMES[c]);
    else
      bench_print_range(NAMES[c], v[c], B.runs, "GB/s");
  }
  ratio("clpin hot / plain hot", v[CLPIN_HOT], v[PLAIN_HOT], B.runs, 1.3);
  ratio("clpin hot / one pread", v[CLPIN_HOT], v[ONE_PREAD], B.runs, 0.8);
  double bound[MAXR];
  for (int r = 0; r < B.runs; r++)
    bound[r] = v[PINNED_BUS][r] < v[PREAD_HOT_T][r] ? v[PINNED_BUS][r] : v[PREAD_HOT_T][r];
  ratio("clpin hot / min(pinned bus, pread hot T)", v[CLPIN_HOT], bound, B.runs, 0.9);
  if (cold)
    ratio("clpin cold / plain cold", v[CLPIN_COLD], v[PLAIN_COLD], B.runs, 0);
  if (dfd >= 0)
    ratio("clpin direct / pread direct", v[CLPIN_DIRECT], v[PREAD_DIRECT], B.runs, 0.9);
  ratio("clpin write / pwrite (fsync)", v[CLPIN_WRITE_SYNC], v[PWRITE_SYNC], B.runs, 0.9);
  for (int c = 0; c < NCASES; c++)
    if (median_of(v[c], B.runs) > 0) {
      char what[64];
      snprintf(what, sizeof what, "%s %s", NAMES[c], sz);
      bench_print_raw(what, 0, v[c], B.runs);
    }
  clReleaseMemObject(buf);
  if (dfd >= 0)
    close(dfd);
  close(fd);
  unlink(B.path);
  free(mem);
}

int main(int argc, char **argv) {
  const char *platform = NULL;
  size_t sizes[MAXS] = {64 * MiB, 1024 * MiB};
  int nsizes = 2;
  bool quick = false;
  int depth = (int)B.depth;
  const bench_opt opts[] = {BENCH_OPT("--platform", BENCH_TEXT, &platform),
                            BENCH_OPT_LIST("--sizes", BENCH_SIZES, sizes, &nsizes, MAXS),
                            BENCH_OPT("--runs", BENCH_INT, &B.runs),
                            BENCH_OPT("--depth", BENCH_INT, &depth),
                            BENCH_OPT("--file", BENCH_TEXT, &B.path),
                            BENCH_OPT("--quick", BENCH_FLAG, &quick)};
  BENCH_PARSE_OPTS(
      "file-bench",
      "[--platform NAME] [--sizes LIST] [--runs N] [--depth N] [--file PATH] [--quick]\n", argc,
      argv, opts);
  if (B.runs < 1 || B.runs > MAXR || depth < 1 || depth > 64) {
    fprintf(stderr, "file-bench: --runs takes 1 ... %d, --depth 1 ... 64, --sizes a list\n", MAXR);
    return 2;
  }
  B.depth = (unsigned)depth;
  /* One file per process: runs at once (CI stages, two processes) never
   * share it. */
  static char default_path[64];
  if (!B.path) {
    snprintf(default_path, sizeof default_path, "/var/tmp/clpin-file-bench-%d.bin", (int)getpid());
    B.path = default_path;
  }
  if (quick) {
    sizes[0] = 8 * MiB + 4096 + 5; /* not a multiple of a chunk or a page */
    nsizes = 1;
    if (B.runs > 2)
      B.runs = 2;
  }
  bench_cl_open("file-bench", platform, clpin_strerror, &B.dev, &B.ctx, &B.q);
  char where[600];
  printf("file-bench: %s, clpin %s\n", bench_cl_where(B.dev, where, sizeof where),
         clpin_version_string());
  for (int i = 0; i < nsizes; i++)
    run_size(sizes[i]);
  clpin_pool_release_context(B.ctx);
  clReleaseCommandQueue(B.q);
  clReleaseContext(B.ctx);
  clpin_shutdown();
  return 0;
}
