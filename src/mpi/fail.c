/* SPDX-License-Identifier: Apache-2.0 */
/* Error details, MPI's error text, the per-call error handler and the
 * library's two options. */
#include "mpi_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char detail[768];

const char *clpin_mpi_last_error_detail(void) { return detail; }

void clpin__mpi_note(const char *fmt, ...) {
  char text[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  fprintf(stderr, "clpin-mpi: %s\n", text);
}

cl_int clpin__mpi_fail(const char *func, cl_int code, const char *fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  snprintf(detail, sizeof detail, "%s: %s (%s)", func, why, clpin_strerror(code));
  return code;
}

cl_int clpin__mpi_check(const char *func, int mpi_err, const char *call) {
  if (mpi_err == MPI_SUCCESS)
    return CL_SUCCESS;
  char text[MPI_MAX_ERROR_STRING + 1] = "";
  int len = 0;
  if (MPI_Error_string(mpi_err, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "MPI error %d", mpi_err);
  return clpin__mpi_fail(func, CLPIN_ERR_MPI, "%s failed: %s", call, text);
}

cl_int clpin__mpi_from_clpin(const char *func, cl_int code, const char *what) {
  const char *d = clpin_last_error_detail();
  if (code <= -20000 && code >= -20099 && d[0])
    return clpin__mpi_fail(func, code, "%s: %s", what, d);
  return clpin__mpi_fail(func, code, "%s failed", what);
}

void clpin__mpi_set_detail(const char *text) { snprintf(detail, sizeof detail, "%s", text); }

void clpin__mpi_partial(size_t lo, size_t hi) {
  if (hi <= lo)
    return;
  size_t n = strlen(detail);
  snprintf(detail + n, sizeof detail - n, " (bytes [%zu, %zu) of the buffer may hold partial data)",
           lo, hi);
}

void clpin__mpi_guard_enter(clpin__mpi_guard *g, MPI_Comm comm) {
  g->comm = comm;
  g->set = false;
  if (comm == MPI_COMM_NULL)
    return;
  if (MPI_Comm_get_errhandler(comm, &g->saved) != MPI_SUCCESS)
    return;
  g->set = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN) == MPI_SUCCESS;
  if (!g->set)
    MPI_Errhandler_free(&g->saved);
}

void clpin__mpi_guard_leave(clpin__mpi_guard *g) {
  if (!g->set)
    return;
  MPI_Comm_set_errhandler(g->comm, g->saved);
  MPI_Errhandler_free(&g->saved); /* get_errhandler took a reference */
  g->set = false;
}

bool clpin__mpi_shm_enabled(void) {
  const char *v = getenv("CLPIN_MPI_SHM");
  return !(v && (strcmp(v, "0") == 0 || strcmp(v, "off") == 0 || strcmp(v, "no") == 0));
}

/* CLPIN_MPI_CHUNK: a size with an optional K/M/G suffix; bad values keep the
 * default (reported once). */
size_t clpin__mpi_chunk(void) {
  static const size_t dflt = (size_t)4 << 20;
  static _Atomic int warned;
  const char *v = getenv("CLPIN_MPI_CHUNK");
  if (!v || !*v)
    return dflt;
  char *end;
  unsigned long long n = strtoull(v, &end, 10);
  unsigned shift = 0;
  switch (*end) {
  case 'k':
  case 'K':
    shift = 10;
    end++;
    break;
  case 'm':
  case 'M':
    shift = 20;
    end++;
    break;
  case 'g':
  case 'G':
    shift = 30;
    end++;
    break;
  default: break;
  }
  if (*end == 'B' || *end == 'b')
    end++;
  if (*end || end == v || n == 0 || n > ((1ull << 30) >> shift) || (n << shift) < 4096) {
    if (!warned++)
      fprintf(stderr,
              "clpin-mpi: CLPIN_MPI_CHUNK=%s is not a size of at least 4K (e.g. 4M); "
              "keeping 4M\n",
              v);
    return dflt;
  }
  return (size_t)(n << shift) & ~(size_t)63; /* whole cache lines, whole elements */
}
