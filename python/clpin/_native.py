# SPDX-License-Identifier: Apache-2.0
"""Loading libclpin.so (and the OpenCL ICD loader) through cffi's ABI mode.

No compiled extension: the declarations below mirror include/clpin.h and are
parsed by cffi at import time; the libraries are opened with dlopen. cffi
releases the GIL for the duration of every foreign call, so several Python
threads can transfer at once.
"""

from __future__ import annotations

import ctypes.util
import os

import cffi

ffi = cffi.FFI()
ffi.cdef(
    """
    typedef int32_t cl_int;
    typedef uint32_t cl_uint;
    typedef struct _cl_context *cl_context;
    typedef struct _cl_command_queue *cl_command_queue;
    typedef struct _cl_mem *cl_mem;
    typedef struct _cl_event *cl_event;
    typedef struct clpin_pool clpin_pool;
    typedef struct clpin_block clpin_block;

    typedef struct clpin_stats {
      size_t struct_size;
      uint64_t hits, misses;
      uint64_t driver_allocs, driver_frees;
      size_t blocks_cached, bytes_cached;
      size_t blocks_in_use, bytes_in_use;
      size_t blocks_in_flight, bytes_in_flight;
      size_t bytes_requested;
      size_t bytes_reserved, peak_bytes_reserved;
      uint64_t oom_retries, fallbacks;
      uint64_t bytes_pinned_direct;
      uint64_t bytes_staged;
      uint64_t bytes_pipelined;
      uint64_t bytes_unpinned;
      size_t bytes_registered;
      uint64_t bytes_zero_copy;
      uint64_t bytes_file_read;
      uint64_t bytes_file_written;
    } clpin_stats;

    unsigned clpin_version(void);
    const char *clpin_version_string(void);
    const char *clpin_strerror(cl_int code);
    const char *clpin_last_error_detail(void);
    cl_int clpin_pool_get(cl_command_queue queue, clpin_pool **pool);
    cl_int clpin_pool_get_for_context(cl_context ctx, clpin_pool **pool);
    cl_int clpin_pool_release_context(cl_context ctx);
    cl_int clpin_acquire(clpin_pool *pool, size_t nbytes, clpin_block **block);
    void *clpin_block_host(const clpin_block *block);
    size_t clpin_block_size(const clpin_block *block);
    cl_int clpin_release(clpin_block *block, cl_event pending);
    cl_int clpin_pool_stats(clpin_pool *pool, clpin_stats *stats);
    cl_int clpin_write(cl_command_queue q, cl_mem dst, size_t offset, const void *src,
                       size_t nbytes, unsigned flags, cl_uint num_wait,
                       const cl_event *wait_list, cl_event *event);
    cl_int clpin_read(cl_command_queue q, cl_mem src, size_t offset, void *dst,
                      size_t nbytes, unsigned flags, cl_uint num_wait,
                      const cl_event *wait_list, cl_event *event);
    """
)
# Declared apart: a library older than clpin_host_register lacks them, and
# cffi resolves each symbol only when it is first used.
ffi.cdef(
    """
    cl_int clpin_host_register(clpin_pool *pool, void *ptr, size_t nbytes);
    cl_int clpin_host_unregister(void *ptr);
    """
)
# Zero copy on host-unified devices (declared apart, as above).
ffi.cdef(
    """
    typedef struct clpin_tensor clpin_tensor;
    cl_int clpin_tensor_from_host(cl_command_queue q, const void *host, int dtype,
                                  cl_uint ndim, const size_t *shape, unsigned flags,
                                  clpin_tensor **tensor);
    cl_mem clpin_tensor_buffer(const clpin_tensor *t);
    void clpin_tensor_release(clpin_tensor *t);
    cl_int clpin_host_buffer(clpin_pool *pool, const void *ptr, size_t nbytes, cl_mem *mem,
                             size_t *offset);
    cl_int clpin_host_lend(cl_command_queue q, const void *ptr, size_t nbytes,
                           cl_uint num_wait, const cl_event *wait_list, cl_event *event);
    cl_int clpin_host_reclaim(cl_command_queue q, const void *ptr, size_t nbytes,
                              unsigned flags, cl_uint num_wait, const cl_event *wait_list,
                              cl_event *event);
    """
)

# Files to device buffers (declared apart, as above).
ffi.cdef(
    """
    cl_int clpin_file_to_buffer(cl_command_queue q, cl_mem buffer, size_t offset, size_t nbytes,
                                int fd, uint64_t file_offset, unsigned flags, cl_uint num_wait,
                                const cl_event *wait_list, cl_event *event);
    cl_int clpin_buffer_to_file(cl_command_queue q, cl_mem buffer, size_t offset, size_t nbytes,
                                int fd, uint64_t file_offset, unsigned flags, cl_uint num_wait,
                                const cl_event *wait_list, cl_event *event);
    """
)

# The loader (clpin_loader_*, clpin_batch_*; declared apart, as above).
ffi.cdef(
    """
    typedef struct clpin_loader clpin_loader;
    typedef struct clpin_batch clpin_batch;
    typedef cl_int (*clpin_fill_fn)(void *user, uint64_t index, void *host, size_t capacity,
                                    size_t *used);
    typedef struct clpin_loader_desc {
      size_t struct_size;
      size_t batch_bytes;
      uint64_t batches;
      unsigned depth;
      unsigned workers;
      unsigned flags;
      unsigned shard;
      unsigned nshards;
      clpin_fill_fn fill;
      void *user;
      void *slot_memory;
      size_t slot_memory_bytes;
      size_t slot_stride;
    } clpin_loader_desc;
    struct clpin_loader_stats {
      size_t struct_size;
      uint64_t batches, bytes;
      uint64_t pinned_allocations;
      uint64_t buffers_created;
      uint64_t fill_ns;
      uint64_t upload_ns;
      uint64_t wait_ns;
      uint64_t slot_wait_ns;
      uint64_t buffer_wait_ns;
      uint64_t failed;
      uint64_t slots, buffers;
      uint64_t workers;
      uint64_t slot_bytes;
    };
    cl_int clpin_loader_create(cl_uint num_queues, const cl_command_queue *queues,
                               const clpin_loader_desc *desc, clpin_loader **loader);
    cl_int clpin_loader_next(clpin_loader *loader, clpin_batch **batch);
    cl_int clpin_loader_next_timed(clpin_loader *loader, clpin_batch **batch, uint64_t timeout_ns);
    cl_mem clpin_batch_buffer(const clpin_batch *batch);
    cl_event clpin_batch_event(const clpin_batch *batch);
    cl_command_queue clpin_batch_queue(const clpin_batch *batch);
    size_t clpin_batch_bytes(const clpin_batch *batch);
    uint64_t clpin_batch_index(const clpin_batch *batch);
    cl_int clpin_batch_release(clpin_batch *batch, cl_uint num_done, const cl_event *done);
    cl_int clpin_loader_reset(clpin_loader *loader);
    cl_int clpin_loader_cancel(clpin_loader *loader);
    cl_int clpin_loader_destroy(clpin_loader *loader);
    cl_int clpin_loader_stats(const clpin_loader *loader, struct clpin_loader_stats *stats);
    cl_int clpin_loader_slots(cl_uint num_queues, const clpin_loader_desc *desc, size_t *slots);
    """
)

# The OpenCL calls the package makes itself: event callbacks and references.
ocl_ffi = cffi.FFI()
ocl_ffi.cdef(
    """
    typedef int32_t cl_int;
    typedef uint32_t cl_uint;
    typedef struct _cl_event *cl_event;
    cl_int clSetEventCallback(cl_event event, cl_int type,
                              void (*fn)(cl_event, cl_int, void *), void *user_data);
    cl_int clRetainEvent(cl_event event);
    cl_int clReleaseEvent(cl_event event);
    cl_int clWaitForEvents(cl_uint num, const cl_event *list);
    """
)

CLPIN_PIN_MEMORY = 1 << 0
CLPIN_NON_BLOCKING = 1 << 1
CLPIN_ZERO_COPY = 1 << 2
CLPIN_U8 = 0
CLPIN_LOADER_UNORDERED = 1 << 16
CLPIN_LOADER_WAIT_UPLOADS = 1 << 17
CLPIN_LOADER_HOST_DONE = 1 << 18
CL_COMPLETE = 0


def _open(what: ffi, names: list[str], env: str | None):
    path = os.environ.get(env) if env else None
    if path:
        # An explicit choice: no fallback that would hide a wrong path.
        return what.dlopen(path), path
    errors = []
    for name in names:
        if name is None:
            continue
        try:
            return what.dlopen(name), name
        except OSError as exc:  # try the next name
            errors.append(f"{name}: {exc}")
    raise ImportError(
        "clpin: cannot load the shared library ("
        + "; ".join(errors)
        + (f"); set {env} to its path" if env else ")")
    )


def _installed_library() -> str | None:
    """The library installed with this module by clpin's CMake install (its
    _installed.py says where), if that is how the module came."""
    try:
        from . import _installed  # written by cmake/python.cmake
    except ImportError:  # a source tree or a pip install
        return None
    return _installed.LIBRARY if os.path.exists(_installed.LIBRARY) else None


#: The SONAME's version of the library this module is written for
#: (CMakeLists.txt's policy: 0.MINOR before 1.0); ci/stages/50-package.sh
#: checks it against CMake's.
SOVERSION = "0.4"

# CLPIN_LIBRARY first, then the library installed with the module, then the
# dynamic loader's search, then /usr/local/lib, where a CMake install puts it
# by default and where the loader looks only after `ldconfig`.
lib, library_path = _open(
    ffi,
    [
        _installed_library(),
        f"libclpin.so.{SOVERSION}",
        "libclpin.so",
        ctypes.util.find_library("clpin"),
        f"/usr/local/lib/libclpin.so.{SOVERSION}",
    ],
    "CLPIN_LIBRARY",
)
ocl, _ = _open(ocl_ffi, ["libOpenCL.so.1", "libOpenCL.so", ctypes.util.find_library("OpenCL")], None)


def has_host_register() -> bool:
    """Whether the loaded library exports clpin_host_register/unregister."""
    try:
        lib.clpin_host_register  # noqa: B018 - resolves the symbol
        lib.clpin_host_unregister  # noqa: B018
    except AttributeError:
        return False
    return True
