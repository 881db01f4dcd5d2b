# SPDX-License-Identifier: Apache-2.0
"""clpin for Python: pinned host memory pools and fast staging transfers for
pyopencl programs and numpy arrays.

The package is a thin layer over ``libclpin.so`` (cffi, ABI mode: no compiled
extension). It finds the library through the dynamic loader's normal search,
or at the path in the ``CLPIN_LIBRARY`` environment variable.

Every foreign call releases the GIL, so several Python threads can transfer
at once. See docs/PYTHON.md for the guide and a PyTorch-to-clpin table.

The modules, each importing only those above it (this file re-exports them):

    _native     the cffi declarations and the libraries (libclpin, libOpenCL)
    _errors     the status codes (every code of clpin.h) and Error
    _args       argument checks shared by every call
    _layout     where each array of a batch lies in a loader's slot (fields)
    _fill       what the loader and its worker processes share (errors, slots)
    _lifetime   arrays kept alive while a non-blocking transfer uses them
    _memory     pinned arrays (empty_pinned, pin_memory), host_register
    _transfer   write, read, from_host, to_host, host_buffer/lend/reclaim
    _pools      stats, release_context
    _files      file_to_array, array_to_file, load_npy/save_npy, load/save_safetensors
    _workers    the worker processes of a Loader
    _loader     Loader, prefetch
    _dataset    DatasetLoader: map-style datasets over Loader
    mpi         clpin.mpi over mpi4py (imported on its own: ``import clpin.mpi``)
"""

from __future__ import annotations

from ._native import has_host_register, library_path
from ._errors import CODES, Error, strerror, version
from ._args import DTYPES, DeviceBuffer, QueueOrContext
from ._lifetime import pending
from ._memory import empty_pinned, host_register, host_unregister, pin_memory
from ._transfer import (
    from_host,
    host_buffer,
    host_lend,
    host_reclaim,
    read,
    to_host,
    write,
)
from ._pools import STATS_FIELDS, release_context, stats
from ._files import (
    array_to_file,
    file_to_array,
    load_npy,
    load_safetensors,
    save_npy,
    save_safetensors,
)
from ._loader import Loader, LoaderError, WorkerError, prefetch
from ._workers import WorkerInfo, worker_info
from ._dataset import DatasetLoader

# Every status code of clpin.h as a constant: clpin.ERR_INVALID_ARGUMENT,
# clpin.ERR_MPI, clpin.END ... (the table is _errors.CODES).
globals().update(CODES)

__all__ = [
    "Error",
    "DTYPES",
    "empty_pinned",
    "pin_memory",
    "from_host",
    "to_host",
    "host_buffer",
    "host_lend",
    "host_reclaim",
    "write",
    "read",
    "host_register",
    "host_unregister",
    "stats",
    "release_context",
    "file_to_array",
    "array_to_file",
    "load_npy",
    "save_npy",
    "load_safetensors",
    "save_safetensors",
    "strerror",
    "pending",
    "version",
    "library_path",
    "has_host_register",
    "Loader",
    "DatasetLoader",
    "LoaderError",
    "WorkerError",
    "WorkerInfo",
    "worker_info",
    "prefetch",
]

