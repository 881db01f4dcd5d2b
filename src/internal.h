/* SPDX-License-Identifier: Apache-2.0 */
/* What every source file of clpin needs: argument checks, options and the
 * debug log, the fork flag. Each module's own interface is in its header
 * (pool.h, staging.h, ...); docs/DESIGN.md, "The layer map", says which
 * file may include which. Not installed. */
#ifndef CLPIN_INTERNAL_H
#define CLPIN_INTERNAL_H

#include "clpin.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* ---- argument checks (one line each, pocl style) ------------------------ */

/* A failed check returns `code` and records what failed for
 * clpin_last_error_detail() (and CLPIN_DEBUG=1's log), in a user's words:
 * which argument and why, with the values where they help ("nbytes 0: a
 * block holds at least one byte"), never the condition as C. There is no
 * check that writes its condition: ci/stages/05-format.sh refuses one. */
#define CLPIN__CHECK_WHY(cond, code, why)                                                          \
  do {                                                                                             \
    if (cond) {                                                                                    \
      clpin__fail(__func__, (code), (why));                                                        \
      return (code);                                                                               \
    }                                                                                              \
  } while (0)
/* The same with printf's format and arguments after the code. */
#define CLPIN__CHECK_FMT(cond, code, ...)                                                          \
  do {                                                                                             \
    if (cond) {                                                                                    \
      clpin__failf(__func__, (code), __VA_ARGS__);                                                 \
      return (code);                                                                               \
    }                                                                                              \
  } while (0)
/* The same naming `fn`, the public call, from a helper it runs. */
#define CLPIN__CHECK_IN(fn, cond, code, ...)                                                       \
  do {                                                                                             \
    if (cond) {                                                                                    \
      clpin__failf((fn), (code), __VA_ARGS__);                                                     \
      return (code);                                                                               \
    }                                                                                              \
  } while (0)
/* First thing in a call that takes a lock, waits or calls OpenCL (see
 * clpin__forked below). */
#define CLPIN__FORKED_WHY "called in a child forked from a process that used clpin: exec first"
#define CLPIN__CHECK_FORK() CLPIN__CHECK_WHY(clpin__forked(), CLPIN_ERR_FORKED, CLPIN__FORKED_WHY)
/* Return err when it is an error whose detail was already recorded, in
 * words, by whoever found it (a callee's check): the caller adds nothing,
 * so the detail is set once. */
#define CLPIN__PASS(err)                                                                           \
  do {                                                                                             \
    cl_int pass_err_ = (err);                                                                      \
    if (pass_err_ != CL_SUCCESS)                                                                   \
      return pass_err_;                                                                            \
  } while (0)
/* Return err when an OpenCL call (`what`, in words: "clGetMemObjectInfo on
 * the buffer") failed with it, recording "func: what failed (CODE)". */
#define CLPIN__CHECK_CL(err, what)                                                                 \
  do {                                                                                             \
    cl_int cl_err_ = (err);                                                                        \
    if (cl_err_ != CL_SUCCESS) {                                                                   \
      clpin__failf(__func__, cl_err_, "%s failed", (what));                                        \
      return cl_err_;                                                                              \
    }                                                                                              \
  } while (0)
/* Record (this thread) and log one failure: "func: why (CODE_NAME)". The
 * code's description stays clpin_strerror's: the detail says the rest. */
void clpin__fail(const char *func, cl_int code, const char *why);
void clpin__failf(const char *func, cl_int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The name alone of a code clpin_strerror knows ("CLPIN_ERR_FORKED"), in
 * buf; "code N" for one it does not. */
const char *clpin__code_name(cl_int code, char *buf, size_t len);
/* The versioned-struct rule of clpin.h ("API rules"), written once in
 * vstruct.c (libclpin-mpi compiles it too), with the refusal recorded as
 * clpin's last error. clpin__struct_in: the caller's struct `src` (its struct_size
 * read from its first field) over `dst`, which holds `cur` bytes of the
 * library's layout with the defaults already in (zeros for fields the caller
 * may leave out); dst's struct_size becomes cur. clpin__struct_out: `src`
 * (`cur` bytes) into the caller's `dst` up to dst's struct_size, zeroing
 * bytes past cur and keeping dst's struct_size. Both refuse a struct_size
 * below `min` (the first released layout), and struct_in a larger one whose
 * bytes past `cur` are not all zero: CLPIN_ERR_INVALID_ARGUMENT with a
 * detail naming `arg`. */
cl_int clpin__struct_in(const char *func, const char *arg, void *dst, size_t cur, const void *src,
                        size_t min);
cl_int clpin__struct_out(const char *func, const char *arg, void *dst, const void *src, size_t cur,
                         size_t min);
/* ---- flag families: what each call's flags take ------------------------ */

/* One definition per family of calls: the bits the calls accept (from
 * clpin.h's flags, whose families CLPIN_TRANSFER_FLAGS ... errors.c asserts
 * disjoint) and, beside them, the words a refusal's detail says they take.
 * Every check of a call's flags goes through CLPIN__CHECK_FLAGS with its
 * family, so the bits and the words cannot drift apart. */

/* clpin_write, clpin_read, the rect and image calls, clpin_tensor_to_host. */
#define CLPIN__FLAGS_TRANSFER (CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING)
#define CLPIN__FLAGS_TRANSFER_TAKES                                                                \
  "the transfer flags CLPIN_PIN_MEMORY and CLPIN_NON_BLOCKING (either, both or none)"
/* clpin_tensor_from_host: the transfer flags and the tensor flag. */
#define CLPIN__FLAGS_TENSOR (CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING | CLPIN_ZERO_COPY)
#define CLPIN__FLAGS_TENSOR_TAKES                                                                  \
  "the transfer flags CLPIN_PIN_MEMORY and CLPIN_NON_BLOCKING and the tensor flag "                \
  "CLPIN_ZERO_COPY (any of them, or none)"
/* The `access` of clpin_tensor_host_data, clpin_tensor_device_data (0 is
 * refused on its own: ACCESS_ZERO, tensor.c). */
#define CLPIN__FLAGS_ACCESS (CLPIN_READ | CLPIN_WRITE)
#define CLPIN__FLAGS_ACCESS_TAKES "the access flags CLPIN_READ and CLPIN_WRITE (either or both)"
/* clpin_host_reclaim: whether the map blocks. */
#define CLPIN__FLAGS_RECLAIM CLPIN_NON_BLOCKING
#define CLPIN__FLAGS_RECLAIM_TAKES "CLPIN_NON_BLOCKING or nothing (0)"
/* clpin_file_to_buffer, clpin_buffer_to_file. */
#define CLPIN__FLAGS_FILE (CLPIN_NON_BLOCKING | CLPIN_FILE_DIRECT)
#define CLPIN__FLAGS_FILE_TAKES                                                                    \
  "CLPIN_NON_BLOCKING and the file flag CLPIN_FILE_DIRECT (either, both or none)"
/* clpin_loader_desc.flags (clpin_loader_create). */
#define CLPIN__FLAGS_LOADER                                                                        \
  (CLPIN_LOADER_UNORDERED | CLPIN_LOADER_WAIT_UPLOADS | CLPIN_LOADER_HOST_DONE)
#define CLPIN__FLAGS_LOADER_TAKES                                                                  \
  "the loader flags CLPIN_LOADER_UNORDERED, CLPIN_LOADER_WAIT_UPLOADS and "                        \
  "CLPIN_LOADER_HOST_DONE (any of them, or none)"

/* CL_SUCCESS when `flags` holds only bits of `allowed`; else records why and
 * returns CLPIN_ERR_INVALID_ARGUMENT: the first flag not allowed, what it
 * is for (clpin.h's own flags), and `takes`, the bits the call accepts, in
 * words; or the unknown bits. `arg` names the argument ("flags", "access",
 * "desc.flags"). Called through CLPIN__CHECK_FLAGS. */
cl_int clpin__check_flags(const char *func, const char *arg, unsigned flags, unsigned allowed,
                          const char *takes);
/* CL_SUCCESS when a call's wait list is well formed: num_wait 0 with
 * wait_list NULL, or a count with a list of that many events, none NULL.
 * Else records why (the count, whether the list is NULL, or which event is)
 * and returns CL_INVALID_EVENT_WAIT_LIST. */
cl_int clpin__check_wait_list(const char *func, cl_uint num_wait, const cl_event *wait_list);
/* clpin__check_flags with a family above (TRANSFER, TENSOR, ACCESS,
 * RECLAIM, FILE, LOADER): its bits and its words. */
#define CLPIN__CHECK_FLAGS(func, arg, flags, family)                                               \
  clpin__check_flags((func), (arg), (flags), CLPIN__FLAGS_##family, CLPIN__FLAGS_##family##_TAKES)

/* ---- options (options.c) ------------------------------------------------ */

/* Current value of an option; reads the environment on first call. */
size_t clpin__opt(clpin_option opt);
/* Log a line to stderr (prefix "clpin: ") when CLPIN_DEBUG is on: at 1 a
 * line whose text was logged before is only counted (clpin__log_new), at 2
 * every line is written. */
void clpin__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same at CLPIN_DEBUG=2 only: the pool's events (hits, misses,
 * releases, frees), too many for a program's own output at 1. */
void clpin__log_event(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Whether CLPIN_DEBUG is on; cheap, for guarding expensive log arguments. */
bool clpin__debug(void);
/* Whether a debug line (its whole text, prefix included) is to be written:
 * at CLPIN_DEBUG=1 only the first time that text comes (a transfer repeated
 * by a benchmark loop is named once); at 2 always. The OpenCL layer's lines
 * go through it too. */
bool clpin__log_new(const char *line);
/* Before the first use only (then nothing): opt's default becomes value,
 * as if built in; the environment still overrides it, and the options line
 * of CLPIN_DEBUG shows it. The layer's cap on idle pinned memory. */
void clpin__opt_default(clpin_option opt, size_t value);
#include "size.h" /* clpin__parse_size */

/* ---- errors (errors.c) --------------------------------------------------- */

/* Whether err is one of the driver's out-of-memory codes
 * (CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY):
 * the pool frees idle blocks and retries once on them, and staging falls back
 * to the pageable path. */
bool clpin__is_oom(cl_int err);
/* Whether err is in the range clpin.h reserves for clpin's own codes
 * (CLPIN_ERR_INVALID_ARGUMENT ... CLPIN_ERR__LAST), named there or not. */
static inline bool clpin__is_clpin_error(cl_int err) {
  return err <= CLPIN_ERR_INVALID_ARGUMENT && err >= CLPIN_ERR__LAST;
}

/* ---- time ----------------------------------------------------------------- */

/* The monotonic clock in nanoseconds: time spent waiting, in stats. */
static inline uint64_t clpin__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- fork (fork.c) ----------------------------------------------------- */

/* Set in a child forked from this process (a pthread_atfork handler). A
 * child runs only the forking thread: a lock another thread held at the
 * fork stays held, a thread it waited for does not exist, and the driver
 * the parent initialised may hang. So in a child every clpin call that
 * would take a lock, wait or call OpenCL answers CLPIN_ERR_FORKED (or
 * returns doing nothing), checked first thing, and the exit-time teardown
 * is skipped. Never cleared: a child's children are children too. */
extern atomic_bool clpin__child;
static inline bool clpin__forked(void) {
  return atomic_load_explicit(&clpin__child, memory_order_relaxed);
}
/* Whether a pool was ever asked for: set once, for good, before the first
 * lock (fork.c says why). */
void clpin__note_used(void);
bool clpin__used(void);

#endif /* CLPIN_INTERNAL_H */
