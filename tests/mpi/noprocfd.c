/* SPDX-License-Identifier: Apache-2.0 */
/* A preloaded library for `test_mpi --segments-refused` (tests/mpi.cmake):
 * libclpin-mpi's opens of another process's descriptor through
 * /proc/<pid>/fd/<n> fail with EACCES, as they do between ranks of other
 * users, of other PID namespaces (containers) or of other hosts whose names
 * are the same. The rank it is loaded in can map no peer's shared segment;
 * libclpin-mpi must then fall back to MPI's point-to-point and ring paths,
 * bytes exact. Only libclpin-mpi's own calls are refused (the caller's
 * address, dladdr): MPI itself may share memory the same way (MPICH's UCX
 * does, in MPI_Init). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <sys/types.h>

/* The build hides symbols by default: these must be seen from outside. */
#define SHIM __attribute__((visibility("default")))

/* Looked up by the test (dlsym): the rank knows the library is loaded. */
SHIM int clpin_test_noprocfd = 1;
/* How many opens it refused: the test checks that some were. */
SHIM int clpin_test_noprocfd_refused;

static bool digits(const char **p) {
  const char *s = *p;
  while (**p >= '0' && **p <= '9')
    (*p)++;
  return *p > s;
}

/* "/proc/<digits>/fd/<digits>", nothing after. */
static bool refused(const char *path) {
  if (!path || strncmp(path, "/proc/", 6) != 0)
    return false;
  const char *p = path + 6;
  if (!digits(&p) || strncmp(p, "/fd/", 4) != 0)
    return false;
  p += 4;
  return digits(&p) && *p == 0;
}

typedef int (*open_fn)(const char *, int, ...);

/* Whether code at `caller` belongs to libclpin-mpi. */
static bool from_clpin_mpi(const void *caller) {
  Dl_info di;
  return dladdr(caller, &di) && di.dli_fname && strstr(di.dli_fname, "libclpin-mpi");
}

static int forward(const char *name, const void *caller, const char *path, int flags, va_list ap) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE))
    mode = (mode_t)va_arg(ap, int);
  if (refused(path) && from_clpin_mpi(caller)) {
    __atomic_add_fetch(&clpin_test_noprocfd_refused, 1, __ATOMIC_RELAXED);
    errno = EACCES;
    return -1;
  }
  open_fn real;
  *(void **)&real = dlsym(RTLD_NEXT, name); /* POSIX's way to a function pointer */
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  return real(path, flags, mode);
}

SHIM int open(const char *path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  int fd = forward("open", __builtin_return_address(0), path, flags, ap);
  va_end(ap);
  return fd;
}

SHIM int open64(const char *path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  int fd = forward("open64", __builtin_return_address(0), path, flags, ap);
  va_end(ap);
  return fd;
}
