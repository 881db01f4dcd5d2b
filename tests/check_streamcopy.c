/* SPDX-License-Identifier: Apache-2.0 */
/* The streaming row copy (src/streamcopy.c) and the row scatter and gather
 * of rect and image transfers that use it (clpin__shape_copy, src/rect.c),
 * without OpenCL: byte-exact for every kind this CPU runs, at every
 * alignment of both sides (0..63) and lengths around every line and vector
 * boundary up to 4 KiB + odd, with the bytes around the destination
 * untouched; rows scattered in parts that start and end anywhere in a row
 * (the copy threads' shares and the pipeline's chunks) equal one scatter by
 * a plain loop, streaming or not. */
#include "staging.h"
#include "streamcopy.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define GUARD 64
#define MAXLEN (4096 + 65)
#define GUARD_BYTE 0xA5

static const size_t lengths[] = {1,   2,   3,   7,   8,   15,   16,   17,   31,   32,   33,
                                 63,  64,  65,  96,  127, 128,  129,  130,  191,  192,  193,
                                 255, 256, 257, 511, 513, 1000, 1023, 4095, 4096, 4097, 4096 + 65};
#define NLENGTHS (sizeof lengths / sizeof *lengths)

/* _i: the copy kind. Kinds this CPU does not run are skipped by name (the
 * test of the dispatch below proves the widest one it runs is taken). */
START_TEST(every_alignment_and_length) {
  clpin__copy_kind k = (clpin__copy_kind)_i;
  if (!clpin__copy_supported(k))
    return;
  static unsigned char src[MAXLEN + 64], dst[GUARD + MAXLEN + 64 + GUARD];
  test_fill(src, sizeof src, 7);
  memset(dst, GUARD_BYTE, sizeof dst);
  size_t copies = 0;
  for (size_t li = 0; li < NLENGTHS; li++) {
    size_t n = lengths[li];
    for (size_t so = 0; so < 64; so++)
      for (size_t dof = 0; dof < 64; dof++) {
        unsigned char *d = dst + GUARD + dof;
        clpin__copy_with(k, d, src + so, n);
        clpin__copy_fence();
        if (memcmp(d, src + so, n) != 0)
          ck_abort_msg("%s: %zu bytes from offset %zu to offset %zu differ", clpin__copy_name(k), n,
                       so, dof);
        for (size_t i = 0; i < GUARD; i++)
          if (d[-1 - (ptrdiff_t)i] != GUARD_BYTE || d[n + i] != GUARD_BYTE)
            ck_abort_msg("%s: %zu bytes from %zu to %zu wrote outside the destination",
                         clpin__copy_name(k), n, so, dof);
        memset(d, GUARD_BYTE, n);
        copies++;
      }
  }
  ck_assert_uint_eq(copies, NLENGTHS * 64 * 64);
}
END_TEST

START_TEST(zero_bytes_touch_nothing) {
  unsigned char a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {0};
  for (int k = 0; k < CLPIN__COPY__COUNT; k++)
    if (clpin__copy_supported((clpin__copy_kind)k))
      clpin__copy_with((clpin__copy_kind)k, b, a, 0);
  clpin__copy_fence();
  for (int i = 0; i < 8; i++)
    ck_assert_uint_eq(b[i], 0);
}
END_TEST

START_TEST(widest_kind_is_taken) {
  ck_assert(clpin__copy_supported(CLPIN__COPY_PLAIN));
  clpin__copy_kind best = clpin__copy_best();
  ck_assert(clpin__copy_supported(best));
  for (int k = best + 1; k < CLPIN__COPY__COUNT; k++)
    ck_assert_msg(!clpin__copy_supported((clpin__copy_kind)k), "%s runs here but %s was taken",
                  clpin__copy_name((clpin__copy_kind)k), clpin__copy_name(best));
#if defined(__x86_64__)
  /* SSE2 is part of x86-64: there is always a streaming kind. */
  ck_assert_int_ne(best, CLPIN__COPY_PLAIN);
#endif
  ck_assert_str_eq(clpin__copy_name(CLPIN__COPY_PLAIN), "memcpy");
  ck_assert_str_eq(clpin__copy_name(CLPIN__COPY__COUNT), "?");
}
END_TEST

/* ---- clpin__shape_copy ------------------------------------------------------ */

/* A rect of rows x slices rows of row_bytes, host rows pitch apart, slices
 * slice_pitch apart, from host offset base; the host block and packed block. */
typedef struct {
  size_t row_bytes, rows, slices, pitch, slice_pitch, base;
} layout;

static const layout layouts[] = {
    {16384, 6, 1, 16384 + 64, 0, 16}, /* the bench's rows, an odd start */
    {1000, 9, 3, 1037, 1037 * 9 + 5, 3},
    {3, 40, 2, 7, 7 * 40 + 1, 1},
    {4097, 5, 2, 4097 + 63, (4097 + 63) * 5 + 64, 63},
    {129, 33, 1, 129, 0, 0}, /* tight rows: one contiguous run */
};
#define NLAYOUTS (sizeof layouts / sizeof *layouts)

static size_t host_bytes(const layout *l) {
  size_t slice = l->slices > 1 ? l->slice_pitch : l->pitch * l->rows;
  return l->base + (l->slices - 1) * slice + (l->rows - 1) * l->pitch + l->row_bytes + GUARD;
}

static clpin__xfer xfer_of(const layout *l, clpin__dir dir, unsigned char *host) {
  clpin__xfer x = {.host = host, .dir = dir, .nbytes = l->row_bytes * l->rows * l->slices};
  x.shape.kind = CLPIN__RECT;
  x.shape.row_bytes = l->row_bytes;
  x.shape.rows = l->rows;
  x.shape.host_row_step = l->pitch;
  x.shape.host_slice_step = l->slices > 1 ? l->slice_pitch : 0;
  x.shape.host_base = l->base;
  return x;
}

/* Where packed byte i lies in host memory. */
static size_t host_at(const layout *l, size_t i) {
  size_t r = i / l->row_bytes, col = i % l->row_bytes;
  size_t slice = l->slices > 1 ? l->slice_pitch : 0;
  return l->base + (r % l->rows) * l->pitch + (r / l->rows) * slice + col;
}

/* Copy x's packed bytes in parts of part bytes (the last one shorter),
 * starting at packed byte first (the parts before it too, after). */
static void copy_in_parts(const clpin__xfer *x, unsigned char *packed, size_t part, size_t first) {
  size_t n = x->nbytes;
  for (size_t off = first; off < n; off += part)
    clpin__shape_copy(x, off, part < n - off ? part : n - off, packed + off);
  for (size_t off = first; off > 0;) {
    size_t len = part < off ? part : off;
    off -= len;
    clpin__shape_copy(x, off, len, packed + off);
  }
}

/* _i: layout x 2 (memcpy rows, streaming rows) x parts (4 ways to cut). */
START_TEST(scatter_in_parts_matches) {
  const layout *l = &layouts[_i / 8];
  bool stream = (_i / 4) % 2;
  static const size_t parts[4] = {4096, 4093, 1, 0};
  size_t part = parts[_i % 4];
  CL_OK(clpin_set_option(CLPIN_OPT_STREAM_MIN, stream ? 0 : SIZE_MAX));
  size_t hb = host_bytes(l), n = l->row_bytes * l->rows * l->slices;
  if (!part)
    part = n; /* one call for everything */
  unsigned char *host = malloc(hb), *packed = malloc(n), *want = malloc(hb);
  ck_assert(host && packed && want);
  memset(host, GUARD_BYTE, hb);
  memset(want, GUARD_BYTE, hb);
  test_fill(packed, n, 11);
  for (size_t i = 0; i < n; i++)
    want[host_at(l, i)] = packed[i];
  clpin__xfer x = xfer_of(l, CLPIN__D2H, host);
  copy_in_parts(&x, packed, part, part < n ? (n / 2) / part * part : 0);
  for (size_t i = 0; i < hb; i++)
    if (host[i] != want[i])
      ck_abort_msg("layout %d, %s, parts of %zu: host byte %zu is %u, not %u", _i / 8,
                   stream ? "streaming" : "memcpy", part, i, host[i], want[i]);
  /* The gather takes the rows back out: packed again. */
  x.dir = CLPIN__H2D;
  memset(packed, 0, n);
  copy_in_parts(&x, packed, part, 0);
  ck_assert_uint_eq(test_check(packed, n, 11), SIZE_MAX);
  free(host);
  free(packed);
  free(want);
}
END_TEST

static Suite *streamcopy_suite(void) {
  Suite *s = suite_create("streamcopy");
  TCase *c = tcase_create("copy");
  tcase_set_timeout(c, 600);
  tcase_add_loop_test(c, every_alignment_and_length, 0, CLPIN__COPY__COUNT);
  tcase_add_test(c, zero_bytes_touch_nothing);
  tcase_add_test(c, widest_kind_is_taken);
  suite_add_tcase(s, c);
  TCase *rows = tcase_create("rows");
  tcase_add_loop_test(rows, scatter_in_parts_matches, 0, (int)(NLAYOUTS * 8));
  suite_add_tcase(s, rows);
  return s;
}

int main(void) { return test_run_suite(streamcopy_suite()); }
