/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file clpin.h
 * @brief clpin — pinned host memory pools and fast staging transfers for OpenCL.
 *
 * This header is the whole public API and its reference manual; docs/API.md
 * is the guided tour.
 *
 * @par Thread safety
 * Every function may be called from any thread at any time, on the same or
 * different pools, unless its comment says otherwise. The exceptions are
 * marked where they occur: a tensor is used from one thread at a time, a
 * block is released once, clpin_shutdown() runs alone.
 *
 * @par Lifecycle of a pool
 * A pool's release (clpin_pool_release_context(), clpin_shutdown()) may race
 * any other call, on any thread. One rule decides every race: a call on a
 * pool, and a transfer queued by a non-blocking call, is a user of the pool
 * from its start until its last DMA has ended. The release first marks the
 * pool released (from then on every call on it returns
 * CLPIN_ERR_POOL_RELEASED, or NULL where it has no code), lets go of the
 * queued transfers still waiting for their wait list (each still runs,
 * unstaged, once its wait list ends), waits for every user still inside,
 * and only then frees the pool's memory. A call
 * either ran wholly before the release or fails cleanly; nothing touches
 * freed memory. What the library cannot guard is memory it has handed out:
 * a block's host memory, clpin_host_alloc() memory and a tensor's mirror are
 * freed with the pool, so stop using them before releasing their context.
 * A pool or block handle kept past the release keeps answering
 * CLPIN_ERR_POOL_RELEASED (NULL or 0 from getters) however many pools came
 * after it: handles carry a generation, and released pools' memory is
 * reused, so a program may create and release contexts for ever in bounded
 * memory. A child forked from a process that used clpin gets
 * CLPIN_ERR_FORKED from every call that would lock, wait or call OpenCL,
 * and always exits cleanly (docs/API.md, "Fork").
 *
 * @par Errors
 * Every function that can fail returns cl_int: CL_SUCCESS (0) or a negative
 * code. OpenCL's own codes pass through unchanged; clpin's codes are
 * CLPIN_ERR_* in -20000 ... -20099 (::clpin_error). clpin_strerror() names
 * any of them. One rule decides which a bad argument gets, in every call:
 * an argument OpenCL itself would vet gets OpenCL's code, as from a
 * drop-in for the OpenCL call: a NULL queue CL_INVALID_COMMAND_QUEUE, a NULL
 * context CL_INVALID_CONTEXT, a NULL buffer or image CL_INVALID_MEM_OBJECT, a
 * wait list whose count and pointer disagree or that holds NULL
 * CL_INVALID_EVENT_WAIT_LIST, and, in the transfers (clpin_write(),
 * clpin_read() and their rect and image forms), a NULL host pointer or an
 * offset, size, origin, region or pitch out of bounds CL_INVALID_VALUE (an
 * invalid non-NULL object gets the driver's code, the same one). Everything
 * that is clpin's own gets a CLPIN_ERR_* code: its handles (pool, block,
 * tensor), output pointers, flags, access, dtype, shape, option, sizes of
 * its memory, pointers into its memory, and its conditions (released pool,
 * not host-unified, ...). clpin_last_error_detail() says which argument
 * and why. A call that fails changes nothing: no pool state, no output
 * argument. The exceptions, which have no code to return:
 * - clpin_host_alloc() and clpin_pool_find() return NULL on failure;
 * - getters (clpin_block_host(), clpin_block_buffer(), clpin_block_size(),
 *   clpin_tensor_buffer(), clpin_tensor_dtype(), clpin_tensor_ndim(),
 *   clpin_tensor_shape(), clpin_tensor_nbytes(), clpin_tensor_event(),
 *   clpin_tensor_head(), clpin_dtype_size(), clpin_get_option()) return
 *   NULL or 0 for a bad argument, as each one's comment says;
 * - clpin_tensor_release() and clpin_shutdown() return nothing;
 * - clpin_version(), clpin_version_string() and clpin_strerror() never fail.
 *
 * @par Ownership
 * Functions that hand out an object say who releases it. Every release
 * function accepts NULL and then does nothing.
 */
#ifndef CLPIN_H
#define CLPIN_H

#include <stddef.h>
#include <stdint.h>

#ifndef CL_TARGET_OPENCL_VERSION
/** The OpenCL target version is the program's choice: define
 *  CL_TARGET_OPENCL_VERSION (120, 200, 300, ...) before including clpin.h or
 *  any OpenCL header, or on the command line, and it is kept. clpin needs
 *  OpenCL 1.2's declarations only; when nothing chose a version, 1.2 is the
 *  default here (so that OpenCL 1.2 programs see no deprecation warnings). */
#define CL_TARGET_OPENCL_VERSION 120
#endif
#if CL_TARGET_OPENCL_VERSION < 120
#error "clpin.h needs CL_TARGET_OPENCL_VERSION 120 or later"
#endif

#ifdef __APPLE__
#include <OpenCL/cl.h>
#else
#include <CL/cl.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* CLPIN_API marks the exported functions: the shared library hides every
 * other symbol. CLPIN_BUILDING is defined (privately, by clpin's CMake) only
 * while compiling the library itself: on Windows its functions are then
 * exported, and imported by everyone else. CLPIN_STATIC_DEFINE (set by
 * clpin::clpin_static and by `pkg-config --static --cflags clpin`) drops the
 * attribute for static linking. */
#if defined(CLPIN_STATIC_DEFINE)
#define CLPIN_API
#elif defined(_WIN32) && defined(CLPIN_BUILDING)
#define CLPIN_API __declspec(dllexport)
#elif defined(_WIN32)
#define CLPIN_API __declspec(dllimport)
#elif defined(__GNUC__)
#define CLPIN_API __attribute__((visibility("default")))
#else
#define CLPIN_API
#endif

/** CLPIN_DEPRECATED(msg) marks an old name kept after a rename until the
 *  release its comment names: using it warns, with msg saying what to use
 *  instead (on a function, or after an enumerator's name). */
#if defined(__GNUC__) || defined(__clang__)
#define CLPIN_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define CLPIN_DEPRECATED(msg)
#endif

/* ------------------------------------------------------------------------ */
/** @name Version
 *  The header's version (macros) and the loaded library's (functions).
 *  @{ */
/* ------------------------------------------------------------------------ */

#define CLPIN_VERSION_MAJOR 0 /**< Incompatible API changes bump it. */
#define CLPIN_VERSION_MINOR 4 /**< Additions; before 1.0 also breaking changes. */
#define CLPIN_VERSION_PATCH 0 /**< Fixes only. */
/** MAJOR*10000 + MINOR*100 + PATCH, comparable with integer operators. */
#define CLPIN_VERSION_NUMBER                                                                       \
  (CLPIN_VERSION_MAJOR * 10000 + CLPIN_VERSION_MINOR * 100 + CLPIN_VERSION_PATCH)

/** The version of the library actually loaded.
 *  @return the library's CLPIN_VERSION_NUMBER. Compare it with the macro to
 *          detect a header/library mismatch. Never fails. */
CLPIN_API unsigned clpin_version(void);
/** The loaded library's version as text.
 *  @return "MAJOR.MINOR.PATCH", a static string owned by clpin; never NULL. */
CLPIN_API const char *clpin_version_string(void);

/** @} */

/* ------------------------------------------------------------------------ */
/** @name API rules
 *  Two rules every call follows, so a program built against an older
 *  clpin.h keeps working with a newer library.
 *
 *  **Versioned structs.** Every struct that crosses the API starts with
 *  `size_t struct_size`, which the caller sets to `sizeof` the struct as its
 *  header declares it. Fields are only ever added at the end. One rule reads
 *  them all:
 *  - a struct the caller fills (clpin_loader_desc): any size from the first
 *    released layout (the `..._SIZE_V0_x` macro of that struct) up to the
 *    library's own is taken, and the fields the caller did not pass take
 *    their defaults (what a zero means for that field); a larger size (a
 *    caller newer than the library) is taken only if every byte past the
 *    library's layout is zero, and refused otherwise, with a detail
 *    (clpin_last_error_detail()) naming the size;
 *  - a struct the caller receives (clpin_stats, struct clpin_loader_stats):
 *    any size from the first released layout up is filled up to the
 *    caller's size (bytes past the library's layout are zeroed) and its
 *    struct_size is left as the caller set it;
 *  - below the first released layout: CLPIN_ERR_INVALID_ARGUMENT.
 *
 *  **Flag families.** Each family of flags has bits of its own, checked at
 *  compile time: transfer flags (CLPIN_PIN_MEMORY, CLPIN_NON_BLOCKING) in
 *  bits 0-1, the tensor flag CLPIN_ZERO_COPY in bit 2, access flags
 *  (CLPIN_READ, CLPIN_WRITE) in bits 8-9, loader flags
 *  (CLPIN_LOADER_UNORDERED, CLPIN_LOADER_WAIT_UPLOADS, CLPIN_LOADER_HOST_DONE)
 *  from bit 16, the file
 *  flag CLPIN_FILE_DIRECT in bit 24. A call
 *  refuses another family's
 *  bits with CLPIN_ERR_INVALID_ARGUMENT and a detail naming the flag, so a
 *  flag passed to the wrong call never silently means something else.
 *  @{ */
/* ------------------------------------------------------------------------ */

/** The transfer flags (clpin_write(), clpin_read(), the rect and image calls,
 *  clpin_tensor_from_host(), clpin_tensor_to_host()). */
#define CLPIN_TRANSFER_FLAGS ((1u << 0) | (1u << 1))
/** The tensor flags (clpin_tensor_from_host() only). */
#define CLPIN_TENSOR_FLAGS (1u << 2)
/** The access flags (clpin_tensor_host_data(), clpin_tensor_device_data()). */
#define CLPIN_ACCESS_FLAGS ((1u << 8) | (1u << 9))
/** The loader flags (clpin_loader_desc::flags). */
#define CLPIN_LOADER_FLAGS ((1u << 16) | (1u << 17) | (1u << 18))
/** The file flags (clpin_file_to_buffer(), clpin_buffer_to_file(), which
 *  also take CLPIN_NON_BLOCKING). */
#define CLPIN_FILE_FLAGS (1u << 24)

/** @} */

/* ------------------------------------------------------------------------ */
/** @name Errors
 *  @{ */
/* ------------------------------------------------------------------------ */

/** The one table of the core's error codes: X(name, value, description).
 *  The ::clpin_error enum and clpin_strerror() are both generated from it,
 *  so they cannot disagree. Codes are never renumbered; new ones are
 *  appended. The reserved range -20000 ... -20099 is divided: the core's
 *  codes in -20000 ... -20059, but for -20022 ... -20024, which are
 *  libclpin-mpi's (::CLPIN_MPI_ERROR_TABLE, clpin_mpi_errors.h, included
 *  below: clpin_strerror() names them too); -20060 ... -20069 kept for
 *  libclpin-mpi's next codes; -20090 ... -20099 the Python package's. */
#define CLPIN_ERROR_TABLE(X)                                                                       \
  X(CLPIN_ERR_INVALID_ARGUMENT, -20000,                                                            \
    "an argument is NULL, malformed or outside its domain (clpin_last_error_detail says which)")   \
  X(CLPIN_ERR_INVALID_SIZE, -20001, "size is zero or larger than the device can allocate")         \
  X(CLPIN_ERR_OVERFLOW, -20002, "the size computation overflows size_t")                           \
  X(CLPIN_ERR_INVALID_BLOCK, -20003, "not a block handed out by clpin")                            \
  X(CLPIN_ERR_DOUBLE_RELEASE, -20004, "the block was already released")                            \
  X(CLPIN_ERR_FOREIGN_POINTER, -20005, "the pointer was not allocated by clpin_host_alloc")        \
  X(CLPIN_ERR_POOL_RELEASED, -20006,                                                               \
    "the pool was released (clpin_pool_release_context or clpin_shutdown)")                        \
  X(CLPIN_ERR_OUT_OF_RANGE, -20007,                                                                \
    "offset + size lies past the end of the buffer (not returned since 0.2: CL_INVALID_VALUE)")    \
  X(CLPIN_ERR_INVALID_DTYPE, -20008, "unknown dtype")                                              \
  X(CLPIN_ERR_INVALID_SHAPE, -20009, "ndim is too large or the shape is NULL")                     \
  X(CLPIN_ERR_NO_DEVICE, -20010, "the context or queue has no usable device")                      \
  X(CLPIN_ERR_THREAD, -20011, "a thread or lock could not be created")                             \
  X(CLPIN_ERR_INVALID_OPTION, -20012, "unknown option or value out of range")                      \
  X(CLPIN_ERR_ALREADY_REGISTERED, -20013,                                                          \
    "the range's pages overlap memory already registered or pinned by clpin")                      \
  X(CLPIN_ERR_NOT_REGISTERED, -20014,                                                              \
    "the pointer is not the start of a live registration (clpin_host_register)")                   \
  X(CLPIN_ERR_FORKED, -20015,                                                                      \
    "called in a child forked from a process that used clpin; exec first (see docs/API.md)")       \
  X(CLPIN_ERR_ON_DEVICE, -20016,                                                                   \
    "the memory is lent to the device (clpin_host_lend): reclaim it first (clpin_host_reclaim)")   \
  X(CLPIN_ERR_NOT_ON_DEVICE, -20017,                                                               \
    "the range was not lent to the device (clpin_host_lend with this pointer and size)")           \
  X(CLPIN_ERR_MAP_MOVED, -20018,                                                                   \
    "the driver mapped the memory back at another address; it stays with the device")              \
  X(CLPIN_ERR_CANCELLED, -20020, "the loader was cancelled (clpin_loader_cancel)")                 \
  X(CLPIN_ERR_NOT_UNIFIED, -20021,                                                                 \
    "the device does not share memory with the host (not host-unified): in-place use "             \
    "(clpin_host_buffer, clpin_host_lend) needs one; use clpin_write/clpin_read there")            \
  X(CLPIN_ERR_IO, -20025,                                                                          \
    "reading or writing a file failed (clpin_last_error_detail holds the system's text and how "   \
    "many bytes arrived)")

#define CLPIN__ERR_ENUM(name, value, text) name = value, /**< text */
/** clpin's own error codes, in -20000 ... -20099 (see ::CLPIN_ERROR_TABLE
 *  for each one's meaning). */
enum clpin_error {
  CLPIN_ERROR_TABLE(CLPIN__ERR_ENUM) CLPIN_ERR__LAST = -20099 /**< end of the range */
};
#undef CLPIN__ERR_ENUM

/* libclpin-mpi's codes (CLPIN_ERR_MPI, CLPIN_ERR_MISMATCH, CLPIN_ERR_PEER):
 * defined by the add-on, named by clpin_strerror(). */
#include "clpin_mpi_errors.h"

/** Statuses that are not errors: X(name, value, description), in the same
 *  reserved range (so a caller testing `< 0` still stops), never a value of
 *  ::CLPIN_ERROR_TABLE. clpin_strerror() names them too. CLPIN_END was in
 *  the error table until 0.2; its value is unchanged. */
#define CLPIN_STATUS_TABLE(X)                                                                      \
  X(CLPIN_END, -20019, "the epoch is over: no more batches (clpin_loader_reset starts the next)")

#define CLPIN__STATUS_ENUM(name, value, text) name = value, /**< text */
/** clpin's statuses that are not errors (see ::CLPIN_STATUS_TABLE). */
enum clpin_status { CLPIN_STATUS_TABLE(CLPIN__STATUS_ENUM) CLPIN_STATUS__LAST = -20019 };
#undef CLPIN__STATUS_ENUM

/** Name and describe a status code.
 *  @param code any CL_*, CLPIN_ERR_* or CLPIN_STATUS_TABLE code, or CL_SUCCESS.
 *  @return a static text "NAME: description" owned by clpin; for an unknown
 *          code "unknown error code". Never NULL, never fails. */
CLPIN_API const char *clpin_strerror(cl_int code);

/** @} */

/* ------------------------------------------------------------------------ */
/** @name Options
 *
 * Options are read from the environment once, on first use of the library;
 * clpin_set_option() overrides them. Every option, its valid values, its
 * default and what it does: the table of docs/API.md, "Options" (generated
 * from src/options.c by ci/options-table.sh).
 *
 * Sizes accept a decimal number with an optional K, M, G or T suffix
 * (powers of 1024, an optional trailing "B" or "iB"); "unlimited" and
 * "none" mean no cap for CLPIN_MAX_CACHED. A bad value is reported once on
 * stderr, saying what is wrong, the valid form and the default, and the
 * default is kept. clpin_set_option() overrides the environment.
 * @{ */
/* ------------------------------------------------------------------------ */

/** CLPIN_OPT_PINNED's default value, `auto` in the environment (the
 *  others are 0: no staging on host-unified-memory devices, and 1: staging
 *  on every device): stage only where it pays. On host-unified-memory
 *  devices (POCL's CPU device, integrated GPUs) staging is slower than a
 *  plain transfer, so there it is not done, as with 0. */
#define CLPIN_PINNED_AUTO 2

/** CLPIN_OPT_NUMA's default value, `auto` in the environment: place blocks
 *  and copy work by NUMA node only on hosts with more than one node (0: never;
 *  1: wherever a device's node is known, even on one node). */
#define CLPIN_NUMA_AUTO 2

/** The process-wide options, each with its environment variable. Valid
 *  options are exactly 0 ... CLPIN_OPT__COUNT - 1; new ones are added before
 *  CLPIN_OPT__COUNT, never renumbered. */
typedef enum clpin_option {
  /* clang-format off */
  CLPIN_OPT_PINNED = 0,     /**< env CLPIN_PINNED_H2D: 0, 1 or CLPIN_PINNED_AUTO (2); whether writes AND reads stage through pinned memory on host-unified devices */
  CLPIN_OPT_PINNED_H2D CLPIN_DEPRECATED("use CLPIN_OPT_PINNED") = 0, /**< deprecated since 0.3: the old name of CLPIN_OPT_PINNED (it governs reads too), same value; kept through 0.4.x for old callers, removed in 0.5 */
  CLPIN_OPT_MAX_CACHED = 1, /**< CLPIN_MAX_CACHED: bytes; SIZE_MAX = unlimited; new pools only */
  CLPIN_OPT_CHUNK = 2,      /**< CLPIN_CHUNK: bytes, >= 4096, no maximum (clamped to the device's max allocation when used) */
  CLPIN_OPT_THREADS = 3,    /**< CLPIN_THREADS: 1 ... 256 */
  CLPIN_OPT_DEBUG = 4,      /**< CLPIN_DEBUG: 0, 1 or 2 */
  CLPIN_OPT_LAYER_MIN = 5,  /**< CLPIN_LAYER_MIN: bytes, at least 1; the OpenCL layer's threshold */
  CLPIN_OPT_STAGE_MIN = 6,  /**< CLPIN_STAGE_MIN: bytes, any size; smaller transfers are not pipelined (a blocking read up to 256 KiB: one pool block) */
  CLPIN_OPT_QUARANTINE = 7, /**< CLPIN_QUARANTINE: 0 ... 65536 released blocks held back from reuse (a debug aid); new pools only */
  CLPIN_OPT_STAGE_MIN_H2D = 8, /**< CLPIN_STAGE_MIN_H2D: bytes, any size; smaller writes are not staged (nor any below CLPIN_STAGE_MIN) */
  CLPIN_OPT_NUMA = 9,       /**< CLPIN_NUMA: 0, 1 or CLPIN_NUMA_AUTO (2); new pools only */
  CLPIN_OPT_ROUND_MAX = 10, /**< CLPIN_ROUND_MAX: bytes, any size; SIZE_MAX = unlimited (always power-of-two buckets) */
  CLPIN_OPT_STREAM_MIN = 11, /**< CLPIN_STREAM_MIN: bytes, any size; SIZE_MAX = unlimited (rect and image transfers never stream) */
  CLPIN_OPT_TRANSFER_THREADS = 12, /**< CLPIN_TRANSFER_THREADS: 1 ... 256; the most of CLPIN_THREADS one transfer copies with at once */
  CLPIN_OPT__COUNT          /**< the number of options (not an option) */
  /* clang-format on */
} clpin_option;

/** Set an option for the whole process, overriding its environment variable.
 *  CLPIN_OPT_MAX_CACHED applies to pools created afterwards; use
 *  clpin_pool_set_limit() for an existing pool.
 *  @param opt   the option.
 *  @param value the new value, within the option's range (see ::clpin_option).
 *  @return CL_SUCCESS, or CLPIN_ERR_INVALID_OPTION for an unknown option or a
 *          value out of its range (nothing changes then). */
CLPIN_API cl_int clpin_set_option(clpin_option opt, size_t value);
/** Read an option.
 *  @param opt the option, one of ::clpin_option below CLPIN_OPT__COUNT.
 *  @return its current value (environment, default or last set). An unknown
 *          option gives 0, which is also a valid value of several options:
 *          this function cannot report the mistake, so check
 *          `(unsigned)opt < CLPIN_OPT__COUNT` first when opt is not a
 *          constant (clpin_set_option() does report it, with
 *          CLPIN_ERR_INVALID_OPTION). Never fails otherwise. */
CLPIN_API size_t clpin_get_option(clpin_option opt);

/** @} */

/* ------------------------------------------------------------------------ */
/** @name Pools
 *  One pool of pinned buffers per cl_context, created on first use.
 *  @{ */
/* ------------------------------------------------------------------------ */

/** A pool of pinned buffers: one per cl_context, owned by clpin. */
typedef struct clpin_pool clpin_pool;
/** One pinned (CL_MEM_ALLOC_HOST_PTR) buffer, mapped, handed out by a pool. */
typedef struct clpin_block clpin_block;

/** The pool of the queue's context, created on first use. Two threads asking
 *  at once get the same pool. Creating the pool retains the context and
 *  creates one internal command queue.
 *  @param queue a command queue; its context selects the pool.
 *  @param[out] pool set to the pool. It belongs to clpin: do not free it; it
 *         lives until clpin_pool_release_context() or clpin_shutdown().
 *  @return CL_SUCCESS; CL_INVALID_COMMAND_QUEUE (NULL queue, or the
 *          driver's code for an invalid one); CLPIN_ERR_INVALID_ARGUMENT
 *          (NULL pool); CLPIN_ERR_NO_DEVICE; or the OpenCL code of the
 *          failing query. */
CLPIN_API cl_int clpin_pool_get(cl_command_queue queue, clpin_pool **pool);
/** The pool of a context, created on first use; as clpin_pool_get().
 *  @param ctx the context.
 *  @param[out] pool set to the pool, owned by clpin.
 *  @return CL_SUCCESS; CL_INVALID_CONTEXT (NULL ctx, or the driver's code
 *          for an invalid one); CLPIN_ERR_INVALID_ARGUMENT (NULL pool);
 *          CLPIN_ERR_NO_DEVICE; or the OpenCL code of the failing query. */
CLPIN_API cl_int clpin_pool_get_for_context(cl_context ctx, clpin_pool **pool);

/** Release ctx's pool (see "Lifecycle of a pool" above): mark it released,
 *  let go of the non-blocking transfers still waiting for their wait list
 *  (each still moves its data once its wait list ends, as a plain driver
 *  transfer, and its event completes then; it fails, moving nothing, if the
 *  wait list fails), wait for calls in
 *  progress on other threads and for transfers already moving data, wait for
 *  every in-flight block, free all its buffers (registrations too), release
 *  the context reference and forget the pool. Blocks still in use are freed
 *  too: their handles and host pointers become invalid, and releasing them
 *  later returns CLPIN_ERR_POOL_RELEASED. A pool handle kept past this call
 *  stays safe to pass: calls on it return CLPIN_ERR_POOL_RELEASED, except
 *  clpin_pool_stats(), which answers the final counters (all freed) while
 *  the pool is one of the last 64 released, CLPIN_ERR_POOL_RELEASED after.
 *  Handles carry a generation: released pools' records are reused, and
 *  what released contexts leave behind is bounded by a constant (docs/API.md,
 *  "A pool's lifecycle"), however many contexts a program makes.
 *  Blocks the calling thread until every pending event given to
 *  clpin_release() completes; it never waits for a transfer's wait list.
 *  @param ctx the context whose pool goes.
 *  @return CL_SUCCESS, also for a context that has no pool (nothing to do);
 *          CL_INVALID_CONTEXT for NULL. */
CLPIN_API cl_int clpin_pool_release_context(cl_context ctx);
/** clpin_pool_release_context() for every context, and stop clpin's copy
 *  threads. clpin may be used again afterwards (pools are created anew).
 *  Not to be called while other threads still use clpin. In a child forked
 *  from a process that used clpin it does nothing (docs/API.md, "Fork").
 *
 *  Fork: in such a child every call that would take a lock, wait or call
 *  OpenCL returns CLPIN_ERR_FORKED (NULL from clpin_host_alloc() and
 *  clpin_pool_find(); nothing from the void ones) and never hangs; exiting
 *  is always clean. A child of a process that never asked for a pool may
 *  use clpin normally. */
CLPIN_API void clpin_shutdown(void);

/** Smallest block capacity: requests below it get a block of this size
 *  (pinned memory is page-granular, and each block costs a driver call). */
#define CLPIN_MIN_BLOCK ((size_t)4096)

/** Hand out a pinned, mapped block of at least nbytes. Up to
 *  CLPIN_ROUND_MAX (64 MiB) its capacity is the next power of two >=
 *  max(nbytes, CLPIN_MIN_BLOCK), except where that power of two exceeds the
 *  device's CL_DEVICE_MAX_MEM_ALLOC_SIZE: then it is that maximum. Above
 *  CLPIN_ROUND_MAX it is at most max(nbytes x 1.125, nbytes + 2 MiB): an idle
 *  block within that bound (the smallest) is reused, else a new one of
 *  nbytes rounded up to 2 MiB is made. With NUMA placement on (CLPIN_NUMA),
 *  blocks come from the node of the context's first device. A cached block is reused without any OpenCL call (a hit);
 *  otherwise a CL_MEM_ALLOC_HOST_PTR buffer is created and mapped (a miss).
 *  On an out-of-memory code from the driver the pool frees its idle blocks
 *  and retries once (stats.oom_retries).
 *  @param pool   the pool.
 *  @param nbytes bytes wanted, 1 ... CL_DEVICE_MAX_MEM_ALLOC_SIZE.
 *  @param[out] block set to the block; the caller owns it until
 *         clpin_release().
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (NULL pool or block);
 *          CLPIN_ERR_INVALID_SIZE (0, or above CL_DEVICE_MAX_MEM_ALLOC_SIZE);
 *          CLPIN_ERR_POOL_RELEASED; or the driver's code
 *          (CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES,
 *          CL_OUT_OF_HOST_MEMORY) when it cannot allocate even after the
 *          retry. */
CLPIN_API cl_int clpin_acquire(clpin_pool *pool, size_t nbytes, clpin_block **block);

/** The block's mapped host pointer.
 *  @param block a block in use (acquired, not yet released).
 *  @return the pointer, valid until the block is released; NULL for a NULL
 *          or invalid block. */
CLPIN_API void *clpin_block_host(const clpin_block *block);
/** The block's OpenCL buffer, for enqueueing transfers or kernels on it.
 *  @param block a block in use.
 *  @return the CL_MEM_ALLOC_HOST_PTR buffer, owned by the pool (do not release
 *          it, and do not unmap it: it stays mapped); NULL for a NULL or
 *          invalid block. */
CLPIN_API cl_mem clpin_block_buffer(const clpin_block *block);
/** The block's capacity.
 *  @param block a block in use.
 *  @return the capacity in bytes (>= the size asked for); 0 for NULL. */
CLPIN_API size_t clpin_block_size(const clpin_block *block);

/** Give a block back to its pool. If pending is not NULL the pool retains the
 *  event and reuses the block only after it completes (also when it completes
 *  with an error status), so a transfer still reading or writing the block
 *  never sees it handed out again. Over the pool's cap, the block is freed
 *  instead of cached. The handle is invalid after a successful release:
 *  release each block once. Of two racing releases exactly one succeeds; a
 *  later second release is detected while the pool still holds the block,
 *  but not after the block was handed out again: then it returns CL_SUCCESS
 *  and the block has two owners. A Debug build of clpin with
 *  AddressSanitizer refuses it always (each release gives the block a new
 *  handle and the old one dies); CLPIN_QUARANTINE holds released blocks
 *  back from reuse so that it is refused while the block is held back.
 *  @param block   the block, or NULL (then CL_SUCCESS and nothing happens).
 *  @param pending an event the block is still used by, or NULL.
 *  @return CL_SUCCESS; CLPIN_ERR_DOUBLE_RELEASE (the pool already holds it);
 *          CLPIN_ERR_INVALID_BLOCK (not a clpin block); CLPIN_ERR_POOL_RELEASED;
 *          CL_INVALID_EVENT (pending is not a valid event);
 *          CLPIN_ERR_ON_DEVICE (a range of it is lent to the device:
 *          clpin_host_reclaim() first). On error nothing
 *          changes: the block is still the caller's. */
CLPIN_API cl_int clpin_release(clpin_block *block, cl_event pending);

/** Free every idle (cached) buffer of the pool. Blocks in use or in flight
 *  are kept.
 *  @param pool the pool.
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (NULL);
 *          CLPIN_ERR_POOL_RELEASED. */
CLPIN_API cl_int clpin_pool_trim(clpin_pool *pool);
/** Cap the pool's idle pinned bytes. Idle blocks over the new cap are freed
 *  now; later releases over it free the block instead of caching it. Blocks
 *  in use and in flight do not count against the cap.
 *  @param pool the pool.
 *  @param max_cached_bytes the cap; SIZE_MAX means unlimited, 0 caches nothing.
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (NULL);
 *          CLPIN_ERR_POOL_RELEASED. */
CLPIN_API cl_int clpin_pool_set_limit(clpin_pool *pool, size_t max_cached_bytes);

/** Pool counters, filled by clpin_pool_stats(). Fields may be added at the
 *  end, never reordered. Invariant in every snapshot:
 *  bytes_cached + bytes_in_use + bytes_in_flight == bytes_reserved. */
typedef struct clpin_stats {
  size_t struct_size;           /**< the caller sets sizeof(clpin_stats) */
  uint64_t hits;                /**< acquires served from the cache (no OpenCL call) */
  uint64_t misses;              /**< acquires that needed a new buffer from the driver */
  uint64_t driver_allocs;       /**< clCreateBuffer calls */
  uint64_t driver_frees;        /**< clReleaseMemObject calls */
  size_t blocks_cached;         /**< idle blocks, ready for reuse */
  size_t bytes_cached;          /**< their capacity in bytes */
  size_t blocks_in_use;         /**< blocks handed out */
  size_t bytes_in_use;          /**< their capacity in bytes */
  size_t blocks_in_flight;      /**< released blocks waiting for their pending event */
  size_t bytes_in_flight;       /**< their capacity in bytes */
  size_t bytes_requested;       /**< what users asked for, of the blocks in use */
  size_t bytes_reserved;        /**< all bytes held from the driver */
  size_t peak_bytes_reserved;   /**< the largest bytes_reserved so far */
  uint64_t oom_retries;         /**< allocations retried after freeing idle blocks */
  uint64_t fallbacks;           /**< transfers that fell back to the pageable path */
  uint64_t bytes_pinned_direct; /**< bytes moved from/to memory already in a block */
  uint64_t bytes_staged;        /**< bytes copied through one staging block */
  uint64_t bytes_pipelined;     /**< bytes copied through the chunked pipeline */
  uint64_t bytes_unpinned;      /**< bytes moved by direct, zero-copy or fallback paths */
  /* fields added after 0.1.0 (a 0.1 struct_size stops above) */
  size_t bytes_registered;  /**< caller memory registered now (clpin_host_register()),
                                in whole pages: the bytes actually pinned */
  uint64_t bytes_zero_copy; /**< bytes that needed no copy: on a host-unified device the
                                 buffer is host memory, used in place (docs/ZERO_COPY.md) */
  /* fields added after 0.3 (an older struct_size stops above; they read 0 there) */
  uint64_t bytes_file_read;    /**< bytes read from files into buffers (clpin_file_to_buffer()) */
  uint64_t bytes_file_written; /**< bytes written from buffers to files (clpin_buffer_to_file()) */
} clpin_stats;

/** clpin_stats as released in 0.1.0 (up to bytes_unpinned): the smallest
 *  struct_size clpin_pool_stats() takes. */
#define CLPIN_STATS_SIZE_V0_1 (offsetof(clpin_stats, bytes_unpinned) + sizeof(uint64_t))
/** clpin_stats as released in 0.2.0 (up to bytes_zero_copy). */
#define CLPIN_STATS_SIZE_V0_2 (offsetof(clpin_stats, bytes_zero_copy) + sizeof(uint64_t))

/** A consistent snapshot of the pool's counters. A pool already released
 *  (clpin_pool_release_context(), clpin_shutdown()) still answers, with its
 *  final counters.
 *  @param pool the pool.
 *  @param[in,out] stats the caller sets stats->struct_size; read by the
 *         versioned-struct rule ("API rules" above).
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (NULL or not a pool, or
 *          struct_size below CLPIN_STATS_SIZE_V0_1). */
CLPIN_API cl_int clpin_pool_stats(clpin_pool *pool, clpin_stats *stats);

/** @} */

/* ------------------------------------------------------------------------ */
/** @name Pinned host memory by pointer
 *  The cudaMallocHost analogue, backed by the pool's blocks, and the
 *  cudaHostRegister analogue for memory the caller already has.
 *  @{ */
/* ------------------------------------------------------------------------ */

/** Allocate pinned host memory from a pool (a block acquired for you).
 *  clpin_write() / clpin_read() from or to this memory skip the host copy.
 *  @param pool   the pool.
 *  @param nbytes bytes wanted (> 0).
 *  @return the memory, which the caller frees with clpin_host_free(); NULL on
 *          any failure (NULL pool, 0 bytes, too large, no memory, released
 *          pool). */
CLPIN_API void *clpin_host_alloc(clpin_pool *pool, size_t nbytes);
/** Free memory from clpin_host_alloc(); its block goes back to the pool.
 *  @param ptr the pointer clpin_host_alloc() returned, or NULL (then
 *         CL_SUCCESS and nothing happens).
 *  @return CL_SUCCESS; CLPIN_ERR_POOL_RELEASED for memory whose pool was
 *          released since (the release freed it; a second free of it then
 *          answers CLPIN_ERR_FOREIGN_POINTER); CLPIN_ERR_FOREIGN_POINTER for
 *          a pointer clpin did not allocate, one already freed, or one inside
 *          the allocation but not its start (nothing changes then);
 *          CLPIN_ERR_ON_DEVICE (a range of it is lent to the device:
 *          clpin_host_reclaim() first; nothing changes). */
CLPIN_API cl_int clpin_host_free(void *ptr);
/** Find the live block that holds a host range. No OpenCL call.
 *  @param pool   the pool to search.
 *  @param ptr    start of the range.
 *  @param nbytes length of the range.
 *  @param[out] offset set to ptr's offset in the block when one is found (may
 *         be NULL).
 *  @return the block (acquired or from clpin_host_alloc(), not yet released,
 *          still owned by whoever acquired it) when [ptr, ptr + nbytes) lies
 *          inside it; else NULL (also for a NULL pool or ptr). */
CLPIN_API clpin_block *clpin_pool_find(clpin_pool *pool, const void *ptr, size_t nbytes,
                                       size_t *offset);

/** Pin memory the caller already has, in place (the cudaHostRegister
 *  analogue): while registered, clpin_write() / clpin_read() from or to any
 *  range that lies wholly inside it, aligned or not, go straight to DMA with
 *  no host copy (counted in clpin_stats::bytes_pinned_direct, with or
 *  without CLPIN_PIN_MEMORY). A range that runs past the region's end is
 *  not registered memory and takes the usual path.
 *
 *  The mechanism is a CL_MEM_USE_HOST_PTR buffer over the memory, which the
 *  pool keeps while the registration lives: drivers of discrete GPUs pin the
 *  pages under such a buffer (measured on NVIDIA: plain transfers from the
 *  range then run at pinned speed). Drivers pin whole pages, so clpin
 *  registers the enclosing pages: [ptr, ptr + nbytes) rounded down and up to
 *  the page size. Two registrations may therefore not share a page, even
 *  when their byte ranges are disjoint; memory of clpin's own pool blocks is
 *  pinned already and is refused too. The memory stays the caller's: clpin
 *  never reads or writes it outside the transfers asked for, and the caller
 *  must not free it while it is registered.
 *
 *  On a host-unified-memory device (POCL's CPU device, integrated GPUs)
 *  there is nothing to pin: registering costs one buffer creation and buys
 *  nothing but the skipped path decision; transfers stay correct.
 *
 *  Registrations belong to the pool: clpin_pool_release_context() and
 *  clpin_shutdown() wait for the transfers still using them and drop them.
 *
 *  Fork: private memory (malloc) stays copy-on-write shared with a child
 *  forked while it is registered. Linux 5.9 and later copy pinned pages at
 *  the fork, so the parent keeps the pages the device reads; older kernels
 *  need madvise(MADV_DONTFORK) on the range (RDMA's ibv_fork_init problem),
 *  which clpin does not set: a child touching anything else on those pages
 *  would crash. MAP_SHARED memory (memfd_create) is never copied at all.
 *  @param pool   the pool of the context the transfers run in.
 *  @param ptr    start of the memory (any alignment).
 *  @param nbytes its length (> 0); its pages may span at most
 *                CL_DEVICE_MAX_MEM_ALLOC_SIZE bytes.
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (NULL pool or ptr);
 *          CLPIN_ERR_INVALID_SIZE (0, or pages above
 *          CL_DEVICE_MAX_MEM_ALLOC_SIZE); CLPIN_ERR_OVERFLOW (ptr + nbytes
 *          wraps around); CLPIN_ERR_ALREADY_REGISTERED (a page of the range
 *          is registered already, in this pool, or lies in a live block of
 *          this pool); CLPIN_ERR_POOL_RELEASED; or the driver's code of
 *          clCreateBuffer. On error nothing is registered and the pool is
 *          unchanged. */
CLPIN_API cl_int clpin_host_register(clpin_pool *pool, void *ptr, size_t nbytes);

/** A buffer over memory clpin already holds (a live pool block, clpin_host_alloc()
 *  memory, or registered memory), for kernels to use in place on a
 *  host-unified device (docs/ZERO_COPY.md). The kernel gets the buffer and
 *  the offset (pass it as an argument, or make a sub-buffer when the offset
 *  is a multiple of CL_DEVICE_MEM_BASE_ADDR_ALIGN). Between the host's
 *  accesses and the kernels, hand the range over with
 *  clpin_host_lend() and take it back with clpin_host_reclaim():
 *  OpenCL lets no kernel use a buffer that is mapped for the host. No byte
 *  is copied.
 *  @param pool   the pool of the context the kernels run in (its first device decides).
 *  @param ptr    start of the range.
 *  @param nbytes its length (> 0); the range must lie inside one block or registration.
 *  @param[out] mem    set to the buffer holding the range, retained: the caller
 *                     releases it (it stays valid, but the memory is the
 *                     block's or the caller's and is freed with them).
 *  @param[out] offset set to ptr's offset in *mem.
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (NULL argument);
 *          CLPIN_ERR_INVALID_SIZE (0); CLPIN_ERR_OVERFLOW (the range wraps);
 *          CLPIN_ERR_FOREIGN_POINTER (no live block or registration holds the
 *          whole range); CLPIN_ERR_NOT_UNIFIED (the device is not
 *          host-unified: a discrete GPU; use clpin_write()/clpin_read() or a
 *          tensor there); CLPIN_ERR_POOL_RELEASED. On error *mem and *offset
 *          are unchanged. */
CLPIN_API cl_int clpin_host_buffer(clpin_pool *pool, const void *ptr, size_t nbytes, cl_mem *mem,
                                   size_t *offset);

/** Lend a range of pool memory (an acquired block, clpin_host_alloc()
 *  memory) or registered memory to the device, on a host-unified device:
 *  from the event on, kernels may use it in place through
 *  clpin_host_buffer()'s buffer, and the host must not touch it.
 *
 *  The protocol is OpenCL's own map/unmap, correct on every host-unified
 *  device (POCL, Intel, Arm Mali, Qualcomm Adreno, AMD APUs): the host
 *  holds each block and registration mapped, and the first range of it
 *  handed over enqueues the unmap of the whole mapping on q (no command may
 *  use a buffer that is mapped for writing). Further ranges of the same
 *  block or registration are counted (each enqueues a marker on q ordered
 *  after that unmap); the host gets the whole memory back when the last of
 *  them comes back through clpin_host_reclaim(). While any range of it is
 *  out, clpin_write()/clpin_read() (and the rect and image calls) from or to
 *  any of its bytes,
 *  clpin_release() / clpin_host_free() of the block and
 *  clpin_host_unregister() of the registration answer CLPIN_ERR_ON_DEVICE
 *  and change nothing. A pool's release frees out blocks as any others.
 *  Counted in clpin_stats::bytes_zero_copy.
 *  @param q         the queue the kernels use (its context's pool holds the memory).
 *  @param ptr       start of the range (clpin_host_reclaim() names it again).
 *  @param nbytes    its length (> 0), inside one block or registration.
 *  @param num_wait  events to wait for before the unmap, as OpenCL's.
 *  @param wait_list those events (NULL when num_wait is 0).
 *  @param[out] event set to an event that completes when the range is the
 *         device's (may be NULL); the caller releases it. On an in-order q,
 *         commands enqueued later run after it anyway.
 *  @return CL_SUCCESS; CL_INVALID_COMMAND_QUEUE (NULL q);
 *          CL_INVALID_EVENT_WAIT_LIST (num_wait and wait_list disagree, or a
 *          NULL event in it); CLPIN_ERR_INVALID_ARGUMENT (NULL ptr);
 *          CLPIN_ERR_INVALID_SIZE (0); CLPIN_ERR_OVERFLOW;
 *          CLPIN_ERR_NOT_UNIFIED (q's device is not host-unified);
 *          CLPIN_ERR_FOREIGN_POINTER (no live block or registration of q's
 *          context holds the whole range: also memory of a released pool);
 *          CLPIN_ERR_FORKED; or the driver's code of the unmap or marker.
 *          On error nothing changes, with one exception: when event is not
 *          NULL and the driver refuses both the retain of the unmap's event
 *          and the map that would undo the unmap, the range stays out
 *          (clpin_host_reclaim() brings it back). */
CLPIN_API cl_int clpin_host_lend(cl_command_queue q, const void *ptr, size_t nbytes,
                                 cl_uint num_wait, const cl_event *wait_list, cl_event *event);

/** Reclaim a range lent by clpin_host_lend(): give it back to the host.
 *  The last range of its block or registration to come back enqueues a map
 *  of the whole memory on q, after the wait list and after the ranges given
 *  back before it, at the pointer the caller holds (OpenCL guarantees it
 *  for registered memory, a CL_MEM_USE_HOST_PTR buffer; for a pool block's
 *  CL_MEM_ALLOC_HOST_PTR buffer clpin checks it). Until then the memory
 *  stays the device's: a range given back while others are out only
 *  enqueues a marker (after its wait list) that the final map waits for.
 *  @param q         a queue of the same context (the kernels' queue).
 *  @param ptr       the pointer given to clpin_host_lend().
 *  @param nbytes    the size given to it.
 *  @param flags     0 (blocking: the call returns once done), or
 *                   CLPIN_NON_BLOCKING (then the host waits for *event).
 *  @param num_wait  events to wait for first (the kernels'), as OpenCL's.
 *  @param wait_list those events (NULL when num_wait is 0).
 *  @param[out] event set to the map's (or the marker's) event (may be NULL);
 *         the caller releases it.
 *  @return CL_SUCCESS; CL_INVALID_COMMAND_QUEUE (NULL q);
 *          CL_INVALID_EVENT_WAIT_LIST (as clpin_host_lend());
 *          CLPIN_ERR_INVALID_ARGUMENT (NULL ptr; flags other than
 *          CLPIN_NON_BLOCKING); CLPIN_ERR_INVALID_SIZE (0);
 *          CLPIN_ERR_OVERFLOW; CLPIN_ERR_NOT_UNIFIED (not host-unified);
 *          CLPIN_ERR_FOREIGN_POINTER (no live block or registration);
 *          CLPIN_ERR_NOT_ON_DEVICE (this ptr and nbytes were not lent);
 *          CLPIN_ERR_MAP_MOVED (the driver mapped the memory back
 *          elsewhere: clpin unmapped it again, the range stays out and its
 *          data stays in the buffer, readable with clEnqueueReadBuffer);
 *          CLPIN_ERR_FORKED; or the driver's code of the map or marker
 *          (nothing changes then). */
CLPIN_API cl_int clpin_host_reclaim(cl_command_queue q, const void *ptr, size_t nbytes,
                                    unsigned flags, cl_uint num_wait, const cl_event *wait_list,
                                    cl_event *event);

/** End a registration: wait for every transfer that used the region and may
 *  still be running (a non-blocking clpin_write() / clpin_read() whose
 *  event has not completed), then release the pinning. The memory is
 *  ordinary pageable memory again afterwards. Blocks the calling thread for
 *  as long as those transfers take, including their wait lists.
 *  @param ptr the pointer exactly as given to clpin_host_register().
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (NULL);
 *          CLPIN_ERR_NOT_REGISTERED (not the start of a live registration:
 *          never registered, an interior pointer, unregistered already, or
 *          its pool was released, which ended the registration);
 *          CLPIN_ERR_ON_DEVICE (a range of it is lent to the device:
 *          clpin_host_reclaim() first). On error nothing changes. */
CLPIN_API cl_int clpin_host_unregister(void *ptr);

/** @} */

/* ------------------------------------------------------------------------ */
/** @name Staging transfers
 *  clEnqueueWriteBuffer / clEnqueueReadBuffer through the fastest path.
 *  @{ */
/* ------------------------------------------------------------------------ */

/** Transfer flag (the `flags` of the transfers and tensor uploads; see
 *  CLPIN_READ for the other family): stage pageable data through pinned
 *  memory. Off unless given (as PyTorch's pin_memory): without it, data that is not already pinned moves
 *  by a plain pageable transfer. With it, a discrete device stages; a
 *  host-unified-memory device takes the plain path unless
 *  CLPIN_PINNED_H2D is 1. Data already in pool memory goes straight to DMA
 *  either way. */
#define CLPIN_PIN_MEMORY (1u << 0)
/** Return at once: a staged transfer is queued in clpin's engine (its host
 *  copies and DMAs run on clpin's threads; returning takes tens of
 *  microseconds whatever the size), a plain one is enqueued. *event (when
 *  event is not NULL) completes when the data is in place: for a read, in
 *  the caller's memory. Until then the caller's memory belongs to the
 *  transfer; after, clpin never touches it. Without this flag the call
 *  returns with the data in place. */
#define CLPIN_NON_BLOCKING (1u << 1)
/** clpin_tensor_from_host() only: the tensor may use the caller's memory in
 *  place (the torch.from_numpy contract). Where the device shares memory
 *  with the host and the memory meets the device's zero-copy rule
 *  (docs/ZERO_COPY.md: alignment, size), the tensor's buffer is a
 *  CL_MEM_USE_HOST_PTR buffer over host itself and nothing is copied
 *  (counted in clpin_stats::bytes_zero_copy); the caller keeps host alive,
 *  reaches it only through clpin_tensor_host_data() until the tensor is
 *  released, and finishes the commands using the buffer before releasing
 *  the tensor. Anywhere else (a discrete GPU, a device without a known
 *  rule, misaligned or odd-sized memory) the flag changes nothing: the
 *  tensor is a copy. Other calls reject it. */
#define CLPIN_ZERO_COPY (1u << 2)

/** Write nbytes from host src to dst at offset, through the fastest path:
 *  - src inside a live pool block, or wholly inside a registration
 *    (clpin_host_register()): straight to DMA, no host copy;
 *  - CLPIN_PIN_MEMORY on a discrete device (or with CLPIN_PINNED_H2D=1):
 *    staged through pool blocks, large transfers pipelined in chunks with the
 *    host copies spread over copy threads; below CLPIN_STAGE_MIN (writes:
 *    also below CLPIN_STAGE_MIN_H2D) a plain transfer, where staging does
 *    not pay, but for a blocking read of at most 256 KiB (clpin_read()),
 *    which goes through one pool block: the driver reads into pinned
 *    memory faster than into pageable;
 *  - host-unified-memory device with CLPIN_PINNED_H2D 0 or auto (the
 *    default), or no flag: a plain transfer;
 *  - the pool cannot allocate: falls back to a plain transfer (counted in
 *    stats.fallbacks).
 *
 *  The transfer starts after the num_wait events in wait_list; if one of
 *  them fails after the call, nothing moves and *event fails with the
 *  status the driver gives a command behind a failed event. With
 *  CLPIN_NON_BLOCKING, src must stay valid and unchanged until *event (or
 *  clFinish on q) completes.
 *  @param q        the queue the transfer runs on (its context's pool stages it).
 *  @param dst      the device buffer.
 *  @param offset   byte offset in dst.
 *  @param src      host data (may be NULL when nbytes is 0).
 *  @param nbytes   bytes to move; 0 moves nothing.
 *  @param flags    CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, or 0.
 *  @param num_wait number of events in wait_list.
 *  @param wait_list events the transfer waits for (NULL when num_wait is 0).
 *  @param[out] event NULL, or set to a new event that completes when the data
 *         is in dst; the caller releases it (clReleaseEvent). For nbytes 0 it
 *         is a completed event.
 *  @return CL_SUCCESS; CL_INVALID_COMMAND_QUEUE (NULL q);
 *          CL_INVALID_MEM_OBJECT (NULL dst); CL_INVALID_VALUE (NULL src with
 *          nbytes > 0; offset + nbytes past the end of dst, or overflowing);
 *          CL_INVALID_EVENT_WAIT_LIST (num_wait and wait_list disagree, or a
 *          NULL event in it); CLPIN_ERR_INVALID_ARGUMENT (flags other than
 *          CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING: an access flag such as
 *          CLPIN_READ, CLPIN_ZERO_COPY, unknown bits);
 *          CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST (an event of
 *          wait_list already failed: nothing is enqueued); or the OpenCL code
 *          of a failing enqueue. */
CLPIN_API cl_int clpin_write(cl_command_queue q, cl_mem dst, size_t offset, const void *src,
                             size_t nbytes, unsigned flags, cl_uint num_wait,
                             const cl_event *wait_list, cl_event *event);
/** Read nbytes from src at offset into host dst; the mirror of clpin_write(),
 *  with the same paths. With CLPIN_NON_BLOCKING, dst must stay valid and
 *  untouched until *event completes, which is when the data is in dst.
 *  @param q        the queue the transfer runs on.
 *  @param src      the device buffer.
 *  @param offset   byte offset in src.
 *  @param dst      host destination (may be NULL when nbytes is 0).
 *  @param nbytes   bytes to move; 0 moves nothing.
 *  @param flags    CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, or 0.
 *  @param num_wait number of events in wait_list.
 *  @param wait_list events the transfer waits for (NULL when num_wait is 0).
 *  @param[out] event NULL, or set to a new event that completes when the data
 *         is in dst; the caller releases it.
 *  @return as clpin_write(). */
CLPIN_API cl_int clpin_read(cl_command_queue q, cl_mem src, size_t offset, void *dst, size_t nbytes,
                            unsigned flags, cl_uint num_wait, const cl_event *wait_list,
                            cl_event *event);

/** Write a rectangular region of host src into buffer dst: the arguments
 *  and error codes of clEnqueueWriteBufferRect() (origins and regions in
 *  bytes; a pitch of 0 means tight), the paths, flags, wait-list and event
 *  semantics of clpin_write(). The host bytes the region spans decide the
 *  path: wholly inside a pool block or a registration, straight to DMA;
 *  pageable with CLPIN_PIN_MEMORY on a discrete device and at least
 *  CLPIN_STAGE_MIN (writes: CLPIN_STAGE_MIN_H2D) of region bytes, staged:
 *  rows gathered into pool blocks on the copy threads while earlier chunks
 *  are in DMA (with non-temporal stores from CLPIN_STREAM_MIN bytes);
 *  otherwise the driver's own call. A blocking write below both staging
 *  minimums with no wait list is that call at once, without finding the
 *  pool (which costs 2-5% of such a call): it is counted in no pool's
 *  stats, and while any memory is handed to a device (clpin_host_lend)
 *  it takes the pool's route, which refuses such memory. The same holds for
 *  clpin_write_image(). With CLPIN_NON_BLOCKING, src
 *  must stay valid and unchanged until *event completes.
 *  @param q        the queue the transfer runs on (its context's pool stages it).
 *  @param dst      the device buffer.
 *  @param buffer_origin (x in bytes, y, z) of the region in the buffer.
 *  @param host_origin   (x in bytes, y, z) of the region in host memory.
 *  @param region   (width in bytes, height, depth) of the region; none 0.
 *  @param buffer_row_pitch   bytes between the buffer's rows (0: region[0]).
 *  @param buffer_slice_pitch bytes between the buffer's slices (0: region[1] x row pitch).
 *  @param host_row_pitch     bytes between the host's rows (0: region[0]).
 *  @param host_slice_pitch   bytes between the host's slices (0: region[1] x row pitch).
 *  @param src      host memory, host_origin counted from it.
 *  @param flags    CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, or 0.
 *  @param num_wait number of events in wait_list.
 *  @param wait_list events the transfer waits for (NULL when num_wait is 0).
 *  @param[out] event NULL, or set to a new event that completes when the data
 *         is in place; the caller releases it.
 *  @return CL_SUCCESS; CL_INVALID_COMMAND_QUEUE (NULL q);
 *          CL_INVALID_MEM_OBJECT (NULL dst, or not a buffer);
 *          CL_INVALID_VALUE (NULL src, origin or region; a region of 0; a
 *          pitch below its minimum or a slice pitch not a multiple of its row
 *          pitch; the region out of dst's bounds; sizes that overflow);
 *          CL_INVALID_EVENT_WAIT_LIST (num_wait and wait_list disagree, or a
 *          NULL event in it); CLPIN_ERR_INVALID_ARGUMENT (flags other than
 *          CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING);
 *          CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST (an event of
 *          wait_list already failed); or the OpenCL code of a failing
 *          enqueue. */
CLPIN_API cl_int clpin_write_rect(cl_command_queue q, cl_mem dst, const size_t buffer_origin[3],
                                  const size_t host_origin[3], const size_t region[3],
                                  size_t buffer_row_pitch, size_t buffer_slice_pitch,
                                  size_t host_row_pitch, size_t host_slice_pitch, const void *src,
                                  unsigned flags, cl_uint num_wait, const cl_event *wait_list,
                                  cl_event *event);
/** Read a rectangular region of buffer src into host dst: the mirror of
 *  clpin_write_rect() (clEnqueueReadBufferRect()'s arguments and codes),
 *  rows scattered out of the pool blocks when staged (a read of
 *  CLPIN_STREAM_MIN bytes or more with non-temporal stores, which leave dst's
 *  lines out of the cache). With CLPIN_NON_BLOCKING, dst must stay untouched
 *  until *event completes.
 *  @param q        the queue the transfer runs on (its context's pool stages it).
 *  @param src      the device buffer.
 *  @param buffer_origin (x in bytes, y, z) of the region in the buffer.
 *  @param host_origin   (x in bytes, y, z) of the region in host memory.
 *  @param region   (width in bytes, height, depth) of the region; none 0.
 *  @param buffer_row_pitch   bytes between the buffer's rows (0: region[0]).
 *  @param buffer_slice_pitch bytes between the buffer's slices (0: region[1] x row pitch).
 *  @param host_row_pitch     bytes between the host's rows (0: region[0]).
 *  @param host_slice_pitch   bytes between the host's slices (0: region[1] x row pitch).
 *  @param dst      host memory, host_origin counted from it.
 *  @param flags    CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, or 0.
 *  @param num_wait number of events in wait_list.
 *  @param wait_list events the transfer waits for (NULL when num_wait is 0).
 *  @param[out] event NULL, or set to a new event that completes when the data
 *         is in place; the caller releases it.
 *  @return as clpin_write_rect(). */
CLPIN_API cl_int clpin_read_rect(cl_command_queue q, cl_mem src, const size_t buffer_origin[3],
                                 const size_t host_origin[3], const size_t region[3],
                                 size_t buffer_row_pitch, size_t buffer_slice_pitch,
                                 size_t host_row_pitch, size_t host_slice_pitch, void *dst,
                                 unsigned flags, cl_uint num_wait, const cl_event *wait_list,
                                 cl_event *event);
/** Write a region of host src into an image: the arguments and error codes
 *  of clEnqueueWriteImage() (origin and region in pixels, or image indices
 *  for arrays; row_pitch 0 means tight; slice_pitch must be 0 for 1D and 2D
 *  images, 0 means tight otherwise), the paths and semantics of
 *  clpin_write_rect(): staged, the rows are gathered into pool blocks and
 *  each chunk written with the driver's image call on its rows. A 1D image
 *  array always takes the driver's own call (implementations disagree on
 *  where its images lie in host memory).
 *  @param q        the queue the transfer runs on.
 *  @param image    the image (1D, 1D buffer, 1D array, 2D, 2D array or 3D).
 *  @param origin   (x, y, z) in pixels of the region; for arrays the image
 *         index in y (1D) or z (2D).
 *  @param region   (width, height, depth) in pixels, or images of an array; none 0.
 *  @param row_pitch   host bytes between rows (0: width x element size).
 *  @param slice_pitch host bytes between slices or array images (0: tight;
 *         must be 0 for 1D and 2D images).
 *  @param src      host memory.
 *  @param flags    CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, or 0.
 *  @param num_wait number of events in wait_list.
 *  @param wait_list events the transfer waits for (NULL when num_wait is 0).
 *  @param[out] event NULL, or set to a new event that completes when the data
 *         is in place; the caller releases it.
 *  @return as clpin_write_rect(); CL_INVALID_MEM_OBJECT when image is not an
 *          image; the driver's code for an unsupported format or a device
 *          without images. */
CLPIN_API cl_int clpin_write_image(cl_command_queue q, cl_mem image, const size_t origin[3],
                                   const size_t region[3], size_t row_pitch, size_t slice_pitch,
                                   const void *src, unsigned flags, cl_uint num_wait,
                                   const cl_event *wait_list, cl_event *event);
/** Read a region of an image into host dst: the mirror of
 *  clpin_write_image() (clEnqueueReadImage()'s arguments and codes); a
 *  staged read scatters its rows as clpin_read_rect() does.
 *  @param q        the queue the transfer runs on.
 *  @param image    the image (1D, 1D buffer, 1D array, 2D, 2D array or 3D).
 *  @param origin   (x, y, z) in pixels of the region; for arrays the image
 *         index in y (1D) or z (2D).
 *  @param region   (width, height, depth) in pixels, or images of an array; none 0.
 *  @param row_pitch   host bytes between rows (0: width x element size).
 *  @param slice_pitch host bytes between slices or array images (0: tight;
 *         must be 0 for 1D and 2D images).
 *  @param dst      host memory.
 *  @param flags    CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, or 0.
 *  @param num_wait number of events in wait_list.
 *  @param wait_list events the transfer waits for (NULL when num_wait is 0).
 *  @param[out] event NULL, or set to a new event that completes when the data
 *         is in place; the caller releases it.
 *  @return as clpin_write_image(). */
CLPIN_API cl_int clpin_read_image(cl_command_queue q, cl_mem image, const size_t origin[3],
                                  const size_t region[3], size_t row_pitch, size_t slice_pitch,
                                  void *dst, unsigned flags, cl_uint num_wait,
                                  const cl_event *wait_list, cl_event *event);

/** @} */

/* ------------------------------------------------------------------------ */
/** @name Files to device buffers
 *  A file's bytes straight into a device buffer and back, through clpin's
 *  pinned memory and threads: the file is read (written) in chunks with
 *  pread (pwrite) at explicit offsets, several reads in flight, pipelined
 *  with the uploads (downloads). docs/FILES.md is the guide.
 *  @{ */
/* ------------------------------------------------------------------------ */

/** File flag (clpin_file_to_buffer(), clpin_buffer_to_file() only): bypass
 *  the page cache (O_DIRECT) where the file system allows it. clpin opens
 *  the file again with O_DIRECT for the transfer and aligns inside: any
 *  offset and size work (unaligned edges are read through a small aligned
 *  buffer, written through the page cache). Where the file system refuses
 *  O_DIRECT (tmpfs) the transfer goes through the page cache, silently
 *  (logged under CLPIN_DEBUG). A descriptor the caller opened with O_DIRECT
 *  is read and written that way with or without the flag. */
#define CLPIN_FILE_DIRECT (1u << 24)

/** Read nbytes of the file open at fd, from file_offset on, into buffer at
 *  offset. The file is read at explicit offsets (pread: the descriptor's
 *  own position is neither used nor moved) on clpin's copy threads into
 *  pinned pool blocks, several chunks in flight, each uploaded as soon as
 *  it is read; pinned memory in use is bounded by the pipeline (a few
 *  chunks of CLPIN_CHUNK), never by the file's size. On a host-unified
 *  device (CLPIN_PINNED_H2D 0 or auto) a blocking call reads straight into
 *  the buffer's mapping, no pinned block and no copy (counted in
 *  clpin_stats::bytes_zero_copy). Every byte read is counted in
 *  clpin_stats::bytes_file_read. Short reads are continued and EINTR is
 *  retried.
 *
 *  Refused before anything is read, the buffer untouched: a range past the
 *  end of a regular file or past the end of the buffer, a descriptor that is
 *  not open, not open for reading, or cannot be read at an offset (a pipe,
 *  a socket, a terminal). The wait list and event work as clpin_write()'s:
 *  the upload starts after the wait list; with CLPIN_NON_BLOCKING the call
 *  returns at once and the caller keeps fd open until *event completes.
 *  @param q        the queue the upload runs on.
 *  @param buffer   the device buffer.
 *  @param offset   byte offset in buffer.
 *  @param nbytes   bytes to move; 0 moves nothing.
 *  @param fd       a descriptor of a regular file (or block device) open for
 *         reading, with or without O_DIRECT.
 *  @param file_offset where in the file the bytes start.
 *  @param flags    CLPIN_NON_BLOCKING | CLPIN_FILE_DIRECT, or 0.
 *  @param num_wait number of events in wait_list.
 *  @param wait_list events the upload waits for (NULL when num_wait is 0).
 *  @param[out] event NULL, or set to a new event that completes when every
 *         byte is in buffer; the caller releases it. For nbytes 0 it is a
 *         completed event.
 *  @return CL_SUCCESS; CL_INVALID_COMMAND_QUEUE (NULL q);
 *          CL_INVALID_MEM_OBJECT (NULL buffer); CL_INVALID_VALUE (offset +
 *          nbytes past the end of buffer, file_offset + nbytes past the end
 *          of a regular file, or either overflowing);
 *          CL_INVALID_EVENT_WAIT_LIST (as clpin_write());
 *          CLPIN_ERR_INVALID_ARGUMENT (flags other than CLPIN_NON_BLOCKING |
 *          CLPIN_FILE_DIRECT; fd negative, closed, write-only, in append mode
 *          or not seekable: a pipe, a socket);
 *          CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST (an event of
 *          wait_list already failed: nothing is read); CLPIN_ERR_IO (a read
 *          failed, or the file shrank under the call: the detail holds the
 *          system's text and how many bytes had arrived; with
 *          CLPIN_NON_BLOCKING *event fails with it); or the OpenCL code of a
 *          failing enqueue. */
CLPIN_API cl_int clpin_file_to_buffer(cl_command_queue q, cl_mem buffer, size_t offset,
                                      size_t nbytes, int fd, uint64_t file_offset, unsigned flags,
                                      cl_uint num_wait, const cl_event *wait_list, cl_event *event);
/** Write nbytes of buffer, from offset on, into the file open at fd at
 *  file_offset (pwrite; the file grows as needed): the mirror of
 *  clpin_file_to_buffer(), chunks downloaded into pinned blocks and written
 *  from them on clpin's threads while the next chunks download. The caller
 *  calls fsync when it needs the bytes on the storage. Counted in
 *  clpin_stats::bytes_file_written.
 *  @param q        the queue the download runs on.
 *  @param buffer   the device buffer.
 *  @param offset   byte offset in buffer.
 *  @param nbytes   bytes to move; 0 moves nothing.
 *  @param fd       a descriptor open for writing (O_WRONLY or O_RDWR, not
 *         O_APPEND, where pwrite would ignore the offset).
 *  @param file_offset where in the file the bytes go.
 *  @param flags    CLPIN_NON_BLOCKING | CLPIN_FILE_DIRECT, or 0.
 *  @param num_wait number of events in wait_list.
 *  @param wait_list events the download waits for (NULL when num_wait is 0).
 *  @param[out] event NULL, or set to a new event that completes when every
 *         byte is written; the caller releases it.
 *  @return as clpin_file_to_buffer(), but for the file's end: writing past
 *          it is allowed. */
CLPIN_API cl_int clpin_buffer_to_file(cl_command_queue q, cl_mem buffer, size_t offset,
                                      size_t nbytes, int fd, uint64_t file_offset, unsigned flags,
                                      cl_uint num_wait, const cl_event *wait_list, cl_event *event);

/** @} */

/* ------------------------------------------------------------------------ */
/** @name Tensors
 *  A device buffer with a dtype and a shape, and an optional pinned host
 *  mirror. Not thread-safe per tensor: the mirror functions change its head
 *  state, so use one tensor from one thread at a time (different tensors
 *  from different threads are fine).
 *  @{ */
/* ------------------------------------------------------------------------ */

/** Element types of a tensor. */
typedef enum clpin_dtype {
  CLPIN_U8,  /**< uint8_t */
  CLPIN_I8,  /**< int8_t */
  CLPIN_U16, /**< uint16_t */
  CLPIN_I16, /**< int16_t */
  CLPIN_U32, /**< uint32_t */
  CLPIN_I32, /**< int32_t */
  CLPIN_U64, /**< uint64_t */
  CLPIN_I64, /**< int64_t */
  CLPIN_F16, /**< IEEE 754 half (16 bits, OpenCL half) */
  CLPIN_F32, /**< float */
  CLPIN_F64  /**< double */
} clpin_dtype;

/** Which side of a tensor holds the newest data. */
typedef enum clpin_head {
  CLPIN_HEAD_UNINITIALIZED, /**< no side holds data yet (clpin_tensor_create) */
  CLPIN_HEAD_HOST,          /**< the host mirror is newer; the device is stale */
  CLPIN_HEAD_DEVICE,        /**< the device buffer is newer (or the only copy) */
  CLPIN_HEAD_SYNCED         /**< both sides hold the same data */
} clpin_head;

/** Maximum number of dimensions of a tensor. */
#define CLPIN_MAX_DIMS 8

/** Size of one element.
 *  @param dtype the element type.
 *  @return its size in bytes; 0 for an unknown dtype. */
CLPIN_API size_t clpin_dtype_size(clpin_dtype dtype);

/** A device tensor: buffer, dtype, shape and host mirror, owned by the caller
 *  who created it. */
typedef struct clpin_tensor clpin_tensor;

/** Create a device tensor on q's context and fill it from host through
 *  clpin_write() with the same flags.
 *
 *  The shape is copied. The new tensor's head is CLPIN_HEAD_DEVICE
 *  (CLPIN_HEAD_SYNCED when empty). With CLPIN_NON_BLOCKING the call returns
 *  once the upload is enqueued: host must stay valid and unchanged until the
 *  tensor's clpin_tensor_event() completes (or clFinish on q). The other
 *  tensor calls order themselves after that upload; commands the caller
 *  enqueues on another queue must wait for the event themselves.
 *  On any failure nothing is allocated and `*tensor` is not written.
 *  @param q     the queue (its context owns the buffer).
 *  @param host  row-major data of nbytes = product of shape * dtype size;
 *               may be NULL only for an empty tensor (see
 *               clpin_tensor_create() for a tensor without data).
 *  @param dtype the element type.
 *  @param ndim  number of dimensions, 0 ... CLPIN_MAX_DIMS; 0 is a scalar
 *               (one element).
 *  @param shape ndim extents (may be NULL when ndim is 0); a zero extent makes
 *               an empty tensor (no buffer; the size being exactly 0, the
 *               other extents are not checked for overflow).
 *
 *  On a host-unified device with a known zero-copy rule (docs/ZERO_COPY.md)
 *  the buffer is host memory: it is filled by one host copy before the call
 *  returns (counted in bytes_unpinned; clpin_tensor_event() is then NULL even
 *  with CLPIN_NON_BLOCKING), or, with CLPIN_ZERO_COPY over memory that meets
 *  the rule, it is host itself and nothing is copied. CLPIN_PINNED_H2D=1
 *  keeps such devices on the copying path of discrete GPUs (but for memory
 *  offered with CLPIN_ZERO_COPY that meets the rule).
 *  @param flags CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING | CLPIN_ZERO_COPY, or 0.
 *  @param[out] tensor set to the new tensor; the caller releases it with
 *               clpin_tensor_release(). Untouched on failure.
 *  @return CL_SUCCESS; CL_INVALID_COMMAND_QUEUE (NULL q);
 *          CLPIN_ERR_INVALID_ARGUMENT (NULL tensor, a flag other than these
 *          three, NULL host with a non-empty shape); CLPIN_ERR_INVALID_DTYPE; CLPIN_ERR_INVALID_SHAPE (ndim >
 *          CLPIN_MAX_DIMS, or shape NULL with ndim > 0); CLPIN_ERR_OVERFLOW
 *          (element count or byte size overflows size_t);
 *          CLPIN_ERR_INVALID_SIZE (above the device's
 *          CL_DEVICE_MAX_MEM_ALLOC_SIZE); or OpenCL's code (clCreateBuffer,
 *          the upload). */
CLPIN_API cl_int clpin_tensor_from_host(cl_command_queue q, const void *host, clpin_dtype dtype,
                                        cl_uint ndim, const size_t *shape, unsigned flags,
                                        clpin_tensor **tensor);
/** Create a device tensor whose contents are not yet defined (as
 *  torch.empty), e.g. for a kernel's output: the buffer is allocated and
 *  nothing is transferred. Its head is CLPIN_HEAD_UNINITIALIZED (SYNCED when
 *  empty): reading it through the mirror or clpin_tensor_to_host() gives
 *  zeros; clpin_tensor_device_data() with CLPIN_WRITE marks a kernel's
 *  result as the data.
 *  @param q     the queue (its context owns the buffer).
 *  @param dtype the element type.
 *  @param ndim  number of dimensions, 0 ... CLPIN_MAX_DIMS.
 *  @param shape ndim extents (may be NULL when ndim is 0).
 *  @param[out] tensor set to the new tensor; the caller releases it with
 *               clpin_tensor_release(). Untouched on failure.
 *  @return as clpin_tensor_from_host(), without the upload's codes. */
CLPIN_API cl_int clpin_tensor_create(cl_command_queue q, clpin_dtype dtype, cl_uint ndim,
                                     const size_t *shape, clpin_tensor **tensor);
/** Copy the whole tensor into host memory through clpin_read().
 *
 *  The tensor's value is its head's: when the host mirror is newer
 *  (CLPIN_HEAD_HOST) the data is copied from the mirror on the calling
 *  thread, nothing crosses the bus, and *event is an already completed
 *  event; an uninitialized tensor reads as zeros, the same way. The head does not change. The read waits for a non-blocking
 *  upload of the tensor.
 *  @param t     the tensor.
 *  @param q     the queue to read on.
 *  @param host  destination of clpin_tensor_nbytes(t) bytes; may be NULL only
 *               for an empty tensor.
 *  @param flags CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, or 0.
 *  @param[out] event NULL, or, with CLPIN_NON_BLOCKING, a new event that
 *         completes when host holds the data; the caller releases it.
 *  @return CL_SUCCESS; CL_INVALID_COMMAND_QUEUE (NULL q);
 *          CLPIN_ERR_INVALID_ARGUMENT (NULL t, NULL host for a non-empty
 *          tensor, a flag other than these two); CLPIN_ERR_POOL_RELEASED
 *          (the newer host mirror was freed with its pool); or clpin_read()'s
 *          code. */
CLPIN_API cl_int clpin_tensor_to_host(const clpin_tensor *t, cl_command_queue q, void *host,
                                      unsigned flags, cl_event *event);
/** The tensor's device buffer.
 *  @param t the tensor.
 *  @return the buffer, owned by the tensor (do not release it); NULL for NULL
 *          or an empty tensor. */
CLPIN_API cl_mem clpin_tensor_buffer(const clpin_tensor *t);
/** The tensor's element type.
 *  @param t the tensor.
 *  @return its dtype; 0 (CLPIN_U8) for NULL. */
CLPIN_API clpin_dtype clpin_tensor_dtype(const clpin_tensor *t);
/** The tensor's number of dimensions.
 *  @param t the tensor.
 *  @return ndim (0 for a scalar); 0 for NULL. */
CLPIN_API cl_uint clpin_tensor_ndim(const clpin_tensor *t);
/** The tensor's shape.
 *  @param t the tensor.
 *  @return ndim extents, owned by the tensor and valid until it is released;
 *          NULL for NULL. */
CLPIN_API const size_t *clpin_tensor_shape(const clpin_tensor *t);
/** The tensor's size in bytes.
 *  @param t the tensor.
 *  @return product of the shape * dtype size; 0 for NULL or an empty tensor. */
CLPIN_API size_t clpin_tensor_nbytes(const clpin_tensor *t);
/** The upload of a non-blocking clpin_tensor_from_host().
 *  @param t the tensor.
 *  @return the upload's event, owned by the tensor (retain it to keep it
 *          past the tensor or past the next mirror copy); NULL for NULL,
 *          when the upload was blocking or empty, or once a mirror copy has
 *          waited for it. */
CLPIN_API cl_event clpin_tensor_event(const clpin_tensor *t);
/** Free the tensor, its device buffer and its host mirror, after waiting for
 *  a non-blocking upload still in progress. Safe also after
 *  clpin_pool_release_context() or clpin_shutdown() of the tensor's context,
 *  which already freed the mirror's pinned memory with the pool.
 *  @param t the tensor, or NULL (then nothing happens). */
CLPIN_API void clpin_tensor_release(clpin_tensor *t);

/** Access flag for the host mirror: the caller reads the data. The access
 *  flags (CLPIN_READ, CLPIN_WRITE) and the transfer flags (CLPIN_PIN_MEMORY,
 *  CLPIN_NON_BLOCKING, CLPIN_ZERO_COPY) are disjoint bits, and each call
 *  refuses the other family's (CLPIN_ERR_INVALID_ARGUMENT, naming the flag),
 *  so passing one for the other cannot silently mean something else. Bits
 *  changed in 0.2 (they were 1 and 2, the transfer flags' bits): recompile. */
#define CLPIN_READ (1u << 8)
/** Access flag for the host mirror: the caller writes the data. */
#define CLPIN_WRITE (1u << 9)

/** The host side of the tensor's mirror (as Caffe's SyncedMemory): a pinned
 *  host copy, allocated on first use, and a head state saying which side is
 *  newer. Copies device to host only if the device is newer and access
 *  includes CLPIN_READ; marks the host newer when access includes
 *  CLPIN_WRITE.
 *
 *  The mirror is clpin_host_alloc() memory from the pool of q's context, so
 *  its copies take clpin_write()/clpin_read()'s already-pinned path (counted
 *  in clpin_stats::bytes_pinned_direct). Copies are blocking and enqueued on
 *  q: the call returns with the data in place, after everything enqueued
 *  before it on an in-order q (a kernel that wrote the buffer, say).
 *
 *  State machine of both mirror calls (head before, then after; "copy" marks
 *  the only transfers, "zero" a fill with zero bytes):
 *
 *  | call        | head before   | READ              | WRITE   | READ \| WRITE     |
 *  |-------------|---------------|-------------------|---------|-------------------|
 *  | host_data   | UNINITIALIZED | zero mirror: HOST | HOST    | zero mirror: HOST |
 *  | host_data   | HOST          | HOST              | HOST    | HOST              |
 *  | host_data   | DEVICE        | copy D2H: SYNCED  | HOST    | copy D2H: HOST    |
 *  | host_data   | SYNCED        | SYNCED            | HOST    | HOST              |
 *  | device_data | UNINITIALIZED | zero device: DEVICE | DEVICE | zero device: DEVICE |
 *  | device_data | HOST          | copy H2D: SYNCED  | DEVICE  | copy H2D: DEVICE  |
 *  | device_data | DEVICE        | DEVICE            | DEVICE  | DEVICE            |
 *  | device_data | SYNCED        | SYNCED            | DEVICE  | DEVICE            |
 *
 *  CLPIN_WRITE alone promises to overwrite every byte (like
 *  CL_MAP_WRITE_INVALIDATE_REGION): nothing is copied, even from a newer
 *  side. Use CLPIN_READ | CLPIN_WRITE to update part of the data.
 *  clpin_tensor_buffer() gives the buffer without touching the head: after
 *  writing it directly, call clpin_tensor_device_data() with CLPIN_WRITE so
 *  the mirror knows. An empty tensor stays CLPIN_HEAD_SYNCED and gives NULL.
 *  Not thread-safe on one tensor (an exception to the global rule): calls
 *  on the same tensor must not run concurrently.
 *
 *  On a host-unified device with a known zero-copy rule (docs/ZERO_COPY.md)
 *  the mirror and the buffer are one memory: host_data maps the buffer (on
 *  q) and device_data unmaps it, no byte is copied (the copies of the table
 *  count in clpin_stats::bytes_zero_copy instead), and the head keeps its
 *  meaning. There *ptr is valid until the next clpin_tensor_device_data() or
 *  the release (call host_data again after device_data; the pointer may
 *  differ), and a kernel may use clpin_tensor_buffer() only after
 *  clpin_tensor_device_data().
 *  @param t      the tensor.
 *  @param q      the queue for a copy, on the tensor's context.
 *  @param access CLPIN_READ and/or CLPIN_WRITE (not 0).
 *  @param[out] ptr set to the host copy, owned by the tensor and valid until
 *         it is released; NULL for an empty tensor.
 *  @return CL_SUCCESS; CL_INVALID_COMMAND_QUEUE (NULL q);
 *          CLPIN_ERR_INVALID_ARGUMENT (NULL t or ptr, access 0, or a bit
 *          other than CLPIN_READ | CLPIN_WRITE: a transfer flag such as
 *          CLPIN_PIN_MEMORY is refused); CL_INVALID_CONTEXT (q is on another
 *          context);
 *          CL_MEM_OBJECT_ALLOCATION_FAILURE (no pinned memory for the
 *          mirror); CLPIN_ERR_POOL_RELEASED (the mirror was freed with its
 *          pool by clpin_pool_release_context() or clpin_shutdown()); or the
 *          code of the failing transfer. On failure the head and *ptr are
 *          unchanged. */
CLPIN_API cl_int clpin_tensor_host_data(clpin_tensor *t, cl_command_queue q, unsigned access,
                                        void **ptr);
/** The device side of the mirror: copies host to device only if the host is
 *  newer and access includes CLPIN_READ, and marks the device newer when
 *  access includes CLPIN_WRITE; see clpin_tensor_host_data() for the state
 *  machine.
 *  @param t      the tensor.
 *  @param q      the queue for a copy or fill.
 *  @param access CLPIN_READ and/or CLPIN_WRITE (not 0).
 *  @param[out] mem set to the device buffer, owned by the tensor; NULL for an
 *         empty tensor.
 *  @return CL_SUCCESS; codes as clpin_tensor_host_data();
 *          CLPIN_ERR_POOL_RELEASED (a copy from a mirror freed with its
 *          pool); or the code of the failing transfer or fill. On failure the head and *mem are
 *          unchanged. */
CLPIN_API cl_int clpin_tensor_device_data(clpin_tensor *t, cl_command_queue q, unsigned access,
                                          cl_mem *mem);

/** The tensor's head state.
 *  @param t the tensor.
 *  @return its ::clpin_head; CLPIN_HEAD_UNINITIALIZED for NULL. */
CLPIN_API clpin_head clpin_tensor_head(const clpin_tensor *t);

/** @} */

/* ------------------------------------------------------------------------ */
/** @name The loader
 *  A loop that prepares batch b+1 on the host while the device computes on
 *  batch b (PyTorch's DataLoader(pin_memory=True) + non_blocking), without
 *  extra copies: worker threads run the caller's fill() straight into pinned
 *  slots from the context's pool, each filled slot is uploaded on a queue of
 *  the loader's own (so uploads overlap the caller's kernels), and next()
 *  hands out a device buffer with the upload's event. See docs/LOADER.md.
 *
 *  Never a wrong byte: a pinned slot is refilled only after its upload
 *  completed; a device buffer is uploaded into again only after the `done`
 *  events its release named. Steady state creates nothing: every slot,
 *  buffer and thread exists from clpin_loader_create().
 *  @{ */
/* ------------------------------------------------------------------------ */

typedef struct clpin_loader clpin_loader; /**< A loader (clpin_loader_create()). */
typedef struct clpin_batch clpin_batch;   /**< One delivered batch (clpin_loader_next()). */

/** The caller's fill callback, run on a loader worker thread: write batch
 *  `index` into `host` (at most `capacity` bytes, pinned memory) and set
 *  *used to the bytes written (it starts at capacity).
 *  @return CL_SUCCESS; CLPIN_END when there is no batch `index` (the epoch
 *          ends before it); or any other code, which clpin_loader_next()
 *          delivers for that batch. Several workers call it at once, each
 *          with its own index and slot. */
typedef cl_int (*clpin_fill_fn)(void *user, uint64_t index, void *host, size_t capacity,
                                size_t *used);

/** Loader flag (clpin_loader_desc::flags): batches may be delivered in any
 *  order (as they are ready). It was 1u << 0 in 0.2, the bit of
 *  CLPIN_PIN_MEMORY: a desc of 0.2's size (CLPIN_LOADER_DESC_SIZE_V0_2)
 *  still means unordered by bit 0, through 0.3; a larger desc refuses bit 0. */
#define CLPIN_LOADER_UNORDERED (1u << 16)

/** Loader flag (clpin_loader_desc::flags, new in 0.4): each loader thread,
 *  once it has handed over a batch, waits for that batch's upload before it
 *  takes the next one, instead of registering an event callback. For
 *  loaders whose fills another party does (worker processes filling
 *  slot_memory), where the threads mostly wait anyway: NVIDIA's driver
 *  keeps a thread of its own busy while callbacks are pending, ~1.2 ms of
 *  CPU a batch on an H200 host. The caller's part of the bargain: the
 *  `done` events it gives clpin_batch_release() complete by themselves
 *  (kernels, markers, flushed), never only after further
 *  clpin_loader_next() calls; else the threads may all end up waiting. */
#define CLPIN_LOADER_WAIT_UPLOADS (1u << 17)

/** Loader flag (clpin_loader_desc::flags, new in 0.4): a released batch's
 *  `done` events are waited for by the loader thread that uploads into its
 *  buffer next, on the host, instead of being the upload's wait list. On
 *  NVIDIA's driver an upload and a kernel that wait for each other's events
 *  across two queues run one after the other: measured on an H200 (64 MiB
 *  batches, a kernel 3 ms a batch on its own queue), 1.44x the kernel's
 *  time a batch with the events as wait lists, 1.08x with either wait
 *  removed (bench/engine-bench.c, case overlap). The caller's part, as for
 *  CLPIN_LOADER_WAIT_UPLOADS: its `done` events complete by themselves
 *  (kernels, markers, barriers, flushed), never only after further
 *  clpin_loader_next() calls. */
#define CLPIN_LOADER_HOST_DONE (1u << 18)

/** How to make a loader. */
typedef struct clpin_loader_desc {
  size_t struct_size; /**< caller sets sizeof(clpin_loader_desc); "API rules" above */
  size_t batch_bytes; /**< capacity of one batch, > 0 */
  uint64_t batches;   /**< batches per epoch; 0: until fill returns CLPIN_END */
  unsigned depth;     /**< batches uploaded ahead, per queue; 0: default (2) */
  unsigned workers;   /**< fill threads; 0: default (min(4, cores)) */
  unsigned flags;     /**< CLPIN_LOADER_UNORDERED: batches in any order;
                          CLPIN_LOADER_WAIT_UPLOADS: threads wait for their uploads;
                          CLPIN_LOADER_HOST_DONE: done events waited for on the host */
  unsigned shard;     /**< this process takes batches i with i % nshards == shard */
  unsigned nshards;   /**< 0 or 1: all batches */
  clpin_fill_fn fill; /**< the fill callback, not NULL */
  void *user;         /**< passed to fill */
  /* Added in 0.3 (a 0.2 caller's struct_size ends before them: they take
   * their defaults, NULL and 0): */
  void *slot_memory;        /**< NULL: the slots are blocks of the queues' pools. Else the caller's
                          memory holding every slot, slot s at slot_memory + s * batch_bytes
                          (clpin_loader_slots() says how many); fill's `host` is always one
                          of them. The caller keeps it alive until clpin_loader_destroy()
                          returns, and pins it (clpin_host_register() in each queue's pool)
                          for pinned-speed uploads: the loader uploads from it as is. Shared
                          memory that other processes write (memfd_create + MAP_SHARED) is
                          how clpin's Python workers fill batches from processes. */
  size_t slot_memory_bytes; /**< bytes at slot_memory: at least slots x batch_bytes (with a
                                 slot_stride: (slots - 1) x slot_stride + batch_bytes) */
  /* Added in 0.4 (an older caller's struct_size ends before it: 0): */
  size_t slot_stride; /**< with slot_memory: slot s is at slot_memory + s * slot_stride
                          (>= batch_bytes); 0: batch_bytes. Slots that start on pages
                          let a caller map each one by itself with an inaccessible page
                          after it, so that a fill writing past its batch faults instead
                          of changing another batch (clpin's Python workers do). */
} clpin_loader_desc;

/** clpin_loader_desc as released in 0.2.0 (up to user): the smallest
 *  struct_size clpin_loader_create() takes. */
#define CLPIN_LOADER_DESC_SIZE_V0_2 (offsetof(clpin_loader_desc, user) + sizeof(void *))

/** How many pinned slots a loader made with these arguments holds: the
 *  size of the caller's slot memory is this times desc->batch_bytes. It is
 *  (ceil(workers / num_queues) + 1) x num_queues, workers after its default;
 *  slot s serves the context of queues[s % num_queues].
 *  @param num_queues as for clpin_loader_create() (>= 1).
 *  @param desc the desc clpin_loader_create() will take (its slot_memory
 *         fields are not read).
 *  @param slots receives the count.
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (NULL, num_queues 0 or
 *          above 1024, workers above 256, a struct_size below
 *          CLPIN_LOADER_DESC_SIZE_V0_2). */
CLPIN_API cl_int clpin_loader_slots(cl_uint num_queues, const clpin_loader_desc *desc,
                                    size_t *slots);

/** Make a loader and start filling the first batches at once.
 *  @param num_queues how many queues (>= 1). With several, batch i goes to
 *         queues[i % num_queues] (one batch stream per queue, round robin;
 *         data-parallel work over several devices or contexts).
 *  @param queues the caller's queues; each batch's device buffer lives in
 *         its queue's context, and the upload runs on a queue the loader
 *         makes on the same device.
 *  @param desc what to load; copied.
 *  @param loader receives the loader.
 *  @return CL_SUCCESS; CL_INVALID_COMMAND_QUEUE (no queue, or a NULL one);
 *          CLPIN_ERR_INVALID_ARGUMENT (NULL argument,
 *          a struct_size below CLPIN_LOADER_DESC_SIZE_V0_2 or a larger one
 *          with nonzero bytes past this library's layout, no fill, shard >=
 *          nshards, a flag of another family or an unknown bit,
 *          slot_memory_bytes or slot_stride set without slot_memory, a
 *          slot_stride below batch_bytes); CLPIN_ERR_INVALID_SIZE
 *          (batch_bytes 0 or above a device's CL_DEVICE_MAX_MEM_ALLOC_SIZE, or
 *          slot_memory_bytes below what the slots span);
 *          CLPIN_ERR_THREAD; or the driver's
 *          code (nothing is left behind). */
CLPIN_API cl_int clpin_loader_create(cl_uint num_queues, const cl_command_queue *queues,
                                     const clpin_loader_desc *desc, clpin_loader **loader);
/** The next batch, in index order (unless CLPIN_LOADER_UNORDERED). Waits
 *  until it is uploaded or failed; never waits for the upload to finish on
 *  the device: put clpin_batch_event() in the wait list of the kernels that
 *  read it.
 *  @param loader the loader.
 *  @param batch receives the batch; also set (with its index) when fill or
 *         the upload failed; NULL when the return is CLPIN_END or
 *         CLPIN_ERR_CANCELLED.
 *  @return CL_SUCCESS; CLPIN_END when the epoch is over; CLPIN_ERR_CANCELLED
 *          after clpin_loader_cancel(); the code fill returned for this
 *          batch, or the upload's; CLPIN_ERR_INVALID_ARGUMENT (NULL, or the
 *          caller holds every device buffer of the batch's queue: release
 *          one first, or it would wait forever). */
CLPIN_API cl_int clpin_loader_next(clpin_loader *loader, clpin_batch **batch);
/** clpin_loader_next(), waiting at most timeout_ns (new in 0.4): for a caller
 *  that must stay responsive while a fill is slow (Python runs its signal
 *  handlers, Ctrl-C among them, only between two such waits).
 *  @param loader the loader.
 *  @param batch as for clpin_loader_next(); NULL when the time ran out.
 *  @param timeout_ns how long to wait at most; 0: only take a batch that is
 *         ready now.
 *  @return as clpin_loader_next(); CL_SUCCESS with *batch NULL when no batch
 *          was ready in time (nothing was taken: call again). */
CLPIN_API cl_int clpin_loader_next_timed(clpin_loader *loader, clpin_batch **batch,
                                         uint64_t timeout_ns);
/** The batch's device buffer.
 *  @param batch the batch.
 *  @return a buffer of batch_bytes, exactly; NULL for a failed batch. */
CLPIN_API cl_mem clpin_batch_buffer(const clpin_batch *batch);
/** The upload's event.
 *  @param batch the batch.
 *  @return the event, owned by the batch (retain it to keep it past the
 *          batch's release); NULL for a failed batch. */
CLPIN_API cl_event clpin_batch_event(const clpin_batch *batch);
/** The caller's queue of this batch's stream.
 *  @param batch the batch.
 *  @return the queue to run its kernels on (the upload itself ran on the
 *          loader's queue of the same device); NULL for NULL. */
CLPIN_API cl_command_queue clpin_batch_queue(const clpin_batch *batch);
/** The bytes fill wrote.
 *  @param batch the batch.
 *  @return fill's *used; 0 for NULL. */
CLPIN_API size_t clpin_batch_bytes(const clpin_batch *batch);
/** The batch's index in the epoch.
 *  @param batch the batch.
 *  @return the index; UINT64_MAX for NULL. */
CLPIN_API uint64_t clpin_batch_index(const clpin_batch *batch);
/** Give a batch back. Its device buffer is uploaded into again only after
 *  the `done` events (the caller's kernels that read it) complete; events of
 *  another context are waited for on the host before that upload.
 *  @param batch the batch, or NULL.
 *  @param num_done how many events done holds.
 *  @param done the events of the caller's work that reads the buffer.
 *  @return CL_SUCCESS (NULL batch: nothing); CLPIN_ERR_INVALID_ARGUMENT
 *          (num_done without done, a NULL event, or a batch not handed
 *          out); the driver's code of clRetainEvent (the batch is then
 *          released after a wait for those events on the host). */
CLPIN_API cl_int clpin_batch_release(clpin_batch *batch, cl_uint num_done, const cl_event *done);
/** Start the next epoch with the same threads and memory: batches not yet
 *  delivered are dropped, batches the caller holds stay valid. Also ends a
 *  cancel. Waits for fills in progress.
 *  @param loader the loader.
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (NULL). */
CLPIN_API cl_int clpin_loader_reset(clpin_loader *loader);
/** Cancel from any thread: workers stop taking batches, every waiter in
 *  next() returns CLPIN_ERR_CANCELLED. Returns at once (fills in progress
 *  finish on their threads).
 *  @param loader the loader.
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (NULL). */
CLPIN_API cl_int clpin_loader_cancel(clpin_loader *loader);
/** Cancel, join the workers, wait for the uploads, free everything (batches
 *  the caller still holds included: their handles become invalid).
 *  @param loader the loader, or NULL.
 *  @return CL_SUCCESS (NULL: nothing). */
CLPIN_API cl_int clpin_loader_destroy(clpin_loader *loader);

/** What a loader did. The type has no typedef: C cannot give a typedef and
 *  a function the same name, and the function keeps the contract's name;
 *  write `struct clpin_loader_stats s = {sizeof s};`. */
struct clpin_loader_stats {
  size_t struct_size;          /**< caller sets sizeof(clpin_loader_stats) */
  uint64_t batches;            /**< batches delivered by next() (failed ones not counted) */
  uint64_t bytes;              /**< their bytes */
  uint64_t pinned_allocations; /**< pinned slots taken from the pool, ever */
  uint64_t buffers_created;    /**< device buffers created, ever */
  uint64_t fill_ns;            /**< time in fill, all workers together */
  uint64_t upload_ns;          /**< time uploads ran on the device (profiling) */
  uint64_t wait_ns;            /**< time callers waited in next() */
  /* Added at the end: */
  uint64_t slot_wait_ns;   /**< workers waiting for a free pinned slot (uploads behind) */
  uint64_t buffer_wait_ns; /**< filled batches waiting for a device buffer (the caller behind) */
  uint64_t failed;         /**< batches delivered with an error */
  uint64_t slots;          /**< pinned slots the loader holds */
  uint64_t buffers;        /**< device buffers the loader holds */
  uint64_t workers;        /**< fill threads */
  uint64_t slot_bytes;     /**< bytes of the slots: slots x batch_bytes, or slots x
                                slot_stride (pool blocks may round up; caller slot
                                memory is exactly this) */
};
/** A consistent snapshot of the loader's counters.
 *  @param loader the loader.
 *  @param stats receives the counters; the caller sets stats->struct_size.
 *  @return CL_SUCCESS; CLPIN_ERR_INVALID_ARGUMENT (NULL, or struct_size
 *          below CLPIN_LOADER_STATS_SIZE_V0_2). */
CLPIN_API cl_int clpin_loader_stats(const clpin_loader *loader, struct clpin_loader_stats *stats);
/** struct clpin_loader_stats as released in 0.2.0 (up to workers): the
 *  smallest struct_size clpin_loader_stats() takes. */
#define CLPIN_LOADER_STATS_SIZE_V0_2                                                               \
  (offsetof(struct clpin_loader_stats, workers) + sizeof(uint64_t))

/** @} */

/* ------------------------------------------------------------------------ */
/** @name Error details
 *  @{ */
/* ------------------------------------------------------------------------ */

/** Why this thread's last failed clpin call failed, in words: the public
 *  function, the argument and what is wrong with it, with the values where
 *  they help, and the name of the code returned, e.g.
 *  "clpin_acquire: nbytes is 0: a block holds at least one byte
 *  (CLPIN_ERR_INVALID_SIZE)". The code's description is clpin_strerror()'s.
 *  Every call that refuses an argument, a handle or a pointer sets it,
 *  clpin_host_alloc() and clpin_pool_find() (which return NULL) included,
 *  and so does every CLPIN_ERR_* code and every driver failure clpin meets
 *  in its own queries (naming the OpenCL call). An OpenCL code that comes
 *  back from the command clpin enqueued for the caller may leave an older
 *  detail: the detail is this call's when it ends with "(NAME)" of the
 *  code the call returned. The same line is logged under CLPIN_DEBUG=1.
 *  Like errno it is meaningful only right after a call that returned an
 *  error: a success leaves it unchanged.
 *  @return a thread-local text owned by clpin, valid until this thread's
 *          next failing clpin call; "" when nothing failed yet. Never NULL,
 *          never fails. */
CLPIN_API const char *clpin_last_error_detail(void);

/** @} */

#ifdef __cplusplus
}
#endif
#endif /* CLPIN_H */
