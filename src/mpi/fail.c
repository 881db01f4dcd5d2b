/* SPDX-License-Identifier: Apache-2.0 */
/* Error details, MPI's error text, the per-call error handler and the
 * library's two options. */
#include "mpi_internal.h"

#include "../size.h"

#include <pthread.h>
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

/* Calls running at once on one communicator (a request's thread and the
 * caller's, or two requests) share one swap of the error handler: the first
 * to enter saves the caller's and sets MPI_ERRORS_RETURN, the last to leave
 * puts it back. A list, under a mutex, of the communicators in a call. */
typedef struct held {
  MPI_Comm comm;
  MPI_Errhandler saved;
  int users;
  struct held *next;
} held;
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static held *guards;

void clpin__mpi_guard_enter(clpin__mpi_guard *g, MPI_Comm comm) {
  g->comm = comm;
  g->set = false;
  if (comm == MPI_COMM_NULL)
    return;
  pthread_mutex_lock(&guard_mu);
  held *h = guards;
  while (h && h->comm != comm)
    h = h->next;
  if (h) {
    h->users++;
    g->set = true;
  } else if ((h = calloc(1, sizeof *h)) != NULL) {
    if (MPI_Comm_get_errhandler(comm, &h->saved) == MPI_SUCCESS) {
      if (MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN) == MPI_SUCCESS) {
        h->comm = comm;
        h->users = 1;
        h->next = guards;
        guards = h;
        g->set = true;
      } else {
        MPI_Errhandler_free(&h->saved);
      }
    }
    if (!g->set)
      free(h);
  }
  pthread_mutex_unlock(&guard_mu);
}

void clpin__mpi_guard_leave(clpin__mpi_guard *g) {
  if (!g->set)
    return;
  pthread_mutex_lock(&guard_mu);
  for (held **at = &guards; *at; at = &(*at)->next) {
    held *h = *at;
    if (h->comm != g->comm)
      continue;
    if (--h->users == 0) {
      MPI_Comm_set_errhandler(h->comm, h->saved);
      MPI_Errhandler_free(&h->saved); /* get_errhandler took a reference */
      *at = h->next;
      free(h);
    }
    break;
  }
  pthread_mutex_unlock(&guard_mu);
  g->set = false;
}

bool clpin__mpi_shm_enabled(void) {
  const char *v = getenv("CLPIN_MPI_SHM");
  return !(v && (strcmp(v, "0") == 0 || strcmp(v, "off") == 0 || strcmp(v, "no") == 0));
}

/* CLPIN_MPI_CHUNK: a size option read as clpin's own are (size.c: the same
 * parser, the same words for a refusal), from 4K to 1G; a bad value keeps
 * the default, said once. */
size_t clpin__mpi_chunk(void) {
  static const size_t dflt = (size_t)4 << 20;
  static _Atomic int warned;
  const char *v = getenv("CLPIN_MPI_CHUNK");
  if (!v || !*v)
    return dflt;
  size_t n;
  const char *why = clpin__size_option(v, 4096, (size_t)1 << 30, &n);
  if (why) {
    if (!warned++)
      fprintf(stderr,
              "clpin-mpi: ignoring CLPIN_MPI_CHUNK=\"%s\": %s; valid: a size from 4K to 1G "
              "(suffixes K, M, G, T), such as 4M; using the default 4M\n",
              v, why);
    return dflt;
  }
  return n & ~(size_t)63; /* whole cache lines, whole elements */
}
