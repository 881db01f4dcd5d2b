# SPDX-License-Identifier: Apache-2.0
"""Pinned host memory: pool blocks as numpy arrays (empty_pinned,
pin_memory) and the caller's arrays registered in place (host_register).
"""

from __future__ import annotations

import weakref
from typing import Any, Sequence, Union

import numpy as np
import pyopencl as cl

from ._native import ffi, has_host_register, lib, library_path
from ._errors import _check, version
from ._args import QueueOrContext, _addr, _context, _dtype, _ndarray, _pool, _shape
from ._lifetime import _lock

# ------------------------------------------------------------ pinned arrays

_owners: dict[int, "weakref.WeakSet[_Block]"] = {}  # context int_ptr -> live blocks


def _release_block(block: int) -> None:
    # A pool already released (release_context) answers CLPIN_ERR_POOL_RELEASED:
    # nothing left to give back.
    lib.clpin_release(ffi.cast("clpin_block *", block), ffi.NULL)


class _Block:
    """Owner of one pool block: the base of every array on it. The block goes
    back to the pool when the last array (or view) referring to it dies."""

    __slots__ = ("__array_interface__", "block", "context", "__weakref__")

    def __init__(self, block: Any, nbytes: int, context: int) -> None:
        self.block = _addr(block)
        self.context = context
        self.__array_interface__ = {
            "data": (_addr(lib.clpin_block_host(block)), False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
        }
        # Not at exit: a non-blocking transfer may still read the block then,
        # and the process's end frees it anyway.
        weakref.finalize(self, _release_block, self.block).atexit = False


def _pinned(ctx: cl.Context, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    count = 1
    for d in shape:
        count *= d
    nbytes = count * dt.itemsize
    if nbytes >= 1 << 63:
        raise ValueError(f"shape {shape} of {dt} is too large")
    pool = _pool(ctx)
    out = ffi.new("clpin_block **")
    _check(lib.clpin_acquire(pool, max(nbytes, 1), out), "clpin_acquire")
    owner = _Block(out[0], nbytes, ctx.int_ptr)
    with _lock:
        _owners.setdefault(ctx.int_ptr, weakref.WeakSet()).add(owner)
    return np.asarray(owner).view(dt).reshape(shape)


def empty_pinned(queue: QueueOrContext, shape: Union[int, Sequence[int]],
                 dtype: Any = np.float32) -> np.ndarray:
    """A numpy array whose memory is a pinned pool block (``pin_memory`` analogue).

    Transfers from or to it (or any slice of it) go straight to DMA with no
    host copy. The block goes back to the pool when the array and every view
    of it have been garbage-collected.

    Parameters
    ----------
    queue : pyopencl.CommandQueue or pyopencl.Context
        Selects the context whose pool provides the memory.
    shape : int or sequence of int
        The array's shape (C order).
    dtype : numpy dtype, optional
        One of :data:`DTYPES`; float32 by default.

    Returns
    -------
    numpy.ndarray
        Uninitialised, C-contiguous, writeable.

    Raises
    ------
    TypeError, ValueError
        Bad queue, shape or dtype (before any OpenCL call).
    Error
        The pool could not provide the memory.
    """
    ctx = _context(queue)
    return _pinned(ctx, _shape(shape), _dtype(dtype))


def pin_memory(queue: QueueOrContext, array: np.ndarray) -> np.ndarray:
    """A pinned copy of ``array`` (``torch.Tensor.pin_memory`` analogue).

    Parameters
    ----------
    queue : pyopencl.CommandQueue or pyopencl.Context
        Selects the pool.
    array : numpy.ndarray
        Any layout; the copy is C-contiguous.

    Returns
    -------
    numpy.ndarray
        An :func:`empty_pinned` array holding the same values.
    """
    ctx = _context(queue)
    src = _ndarray(array, "array")
    out = _pinned(ctx, src.shape, src.dtype)
    np.copyto(out, src)
    return out


# ------------------------------------------------------- registered memory

_registered: dict[int, tuple[np.ndarray, int]] = {}  # host address -> (array, context)


def _need_register() -> None:
    if not has_host_register():
        raise NotImplementedError(
            f"the loaded libclpin ({library_path}, {version()}) has no clpin_host_register")


def host_register(queue: QueueOrContext, array: np.ndarray) -> None:
    """Pin an existing array in place (``cudaHostRegister`` analogue).

    While registered, transfers from or to any range inside ``array`` go
    straight to DMA with no host copy. clpin keeps ``array`` alive until
    :func:`host_unregister`.

    Parameters
    ----------
    queue : pyopencl.CommandQueue or pyopencl.Context
        Selects the pool (context).
    array : numpy.ndarray
        C-contiguous and not empty.

    Raises
    ------
    TypeError, ValueError
        Not an ndarray, unsupported dtype, not contiguous, empty.
    Error
        clpin refused (e.g. the range overlaps one already registered).
    """
    ctx = _context(queue)
    arr = _ndarray(array, "array")
    if not arr.flags.c_contiguous:
        raise ValueError("only a C-contiguous array can be registered")
    if arr.nbytes == 0:
        raise ValueError("an empty array cannot be registered")
    _need_register()
    ptr = arr.__array_interface__["data"][0]
    _check(lib.clpin_host_register(_pool(ctx), ffi.cast("void *", ptr), arr.nbytes),
           "clpin_host_register")
    with _lock:
        _registered[ptr] = (arr, ctx.int_ptr)


def host_unregister(array: np.ndarray) -> None:
    """Undo :func:`host_register`; waits for transfers still using the memory.

    Parameters
    ----------
    array : numpy.ndarray
        The array given to :func:`host_register` (or one starting at the
        same address).

    Raises
    ------
    TypeError
        Not an ndarray.
    ValueError
        The array was not registered through clpin.
    Error
        clpin refused.
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"array must be a numpy.ndarray, not {type(array).__name__}")
    ptr = array.__array_interface__["data"][0]
    with _lock:
        known = ptr in _registered
    if not known:
        raise ValueError("this array was not registered with clpin.host_register")
    _need_register()
    _check(lib.clpin_host_unregister(ffi.cast("void *", ptr)), "clpin_host_unregister")
    with _lock:
        _registered.pop(ptr, None)
