# SPDX-License-Identifier: Apache-2.0
"""Transfers through clpin's fastest path (write, read, from_host, to_host)
and pool memory handed to the device and back (host_buffer, host_lend,
host_reclaim).
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array

from ._native import CLPIN_NON_BLOCKING, CLPIN_PIN_MEMORY, CLPIN_U8, CLPIN_ZERO_COPY, ffi, lib
from ._errors import _check
from ._args import DeviceBuffer, QueueOrContext, _addr, _context, _device, _events, _flag, _ndarray, _offset, _pool, _queue
from ._lifetime import _finish
from ._memory import _pinned

# ---------------------------------------------------------------- transfers


def _host_source(queue: cl.CommandQueue, array: np.ndarray, pin: bool) -> np.ndarray:
    """array itself when C-contiguous, else one contiguous copy (into pinned
    memory when pinning, so the transfer then needs no second copy)."""
    if array.flags.c_contiguous:
        return array
    if pin:
        out = _pinned(queue.context, array.shape, array.dtype)
        np.copyto(out, array)
        return out
    return np.ascontiguousarray(array)


class _Transfer(NamedTuple):
    """The checked arguments of :func:`write` and :func:`read`."""

    queue: int  # the cl_command_queue
    mem: int  # the cl_mem (0: an empty Array's, which has none)
    offset: int  # byte offset in mem: the Array's own plus the caller's
    array: np.ndarray  # the host side, as given
    nbytes: int
    pin: bool
    non_blocking: bool
    flags: int  # CLPIN_PIN_MEMORY and CLPIN_NON_BLOCKING as asked
    num_events: int
    events: Any  # the cl_event[] to wait for (the caller's, then the Array's)


def _transfer_args(queue: Any, buffer: Any, array: Any, offset: Any, pin_memory: Any,
                   non_blocking: Any, wait_for: Any, into: bool) -> _Transfer:
    """Every check of write's and read's arguments, in one order, before
    any OpenCL call; ``into``: the array is the destination (read), so it
    must be C-contiguous and writeable."""
    q = _queue(queue)
    mem, base, size, extra = _device(buffer)
    host = _ndarray(array, "array")
    if into and not host.flags.c_contiguous:
        raise ValueError("the destination array must be C-contiguous")
    if into and not host.flags.writeable:
        raise ValueError("the destination array is read-only")
    off = _offset(offset)
    pin = _flag(pin_memory, "pin_memory")
    nb = _flag(non_blocking, "non_blocking")
    nbytes = host.nbytes
    if off + nbytes > size:
        raise ValueError(f"offset {off} + {nbytes} bytes lies past the end of the buffer ({size} bytes)")
    num, wait = _events(wait_for, extra)
    flags = (CLPIN_PIN_MEMORY if pin else 0) | (CLPIN_NON_BLOCKING if nb else 0)
    return _Transfer(q, mem, base + off, host, nbytes, pin, nb, flags, num, wait)


def write(queue: cl.CommandQueue, buffer: DeviceBuffer, array: np.ndarray, offset: int = 0,
          pin_memory: bool = True, non_blocking: bool = False,
          wait_for: Optional[Sequence[cl.Event]] = None) -> Optional[cl.Event]:
    """Copy a numpy array into a device buffer through clpin (``clpin_write``).

    Parameters
    ----------
    queue : pyopencl.CommandQueue
        The queue the transfer runs on.
    buffer : pyopencl.Buffer or pyopencl.array.Array
        The destination; for an Array, ``offset`` counts from its first byte
        and the Array's pending events are waited for.
    array : numpy.ndarray
        The data, written in C order; a non-contiguous array is copied once
        (into pinned memory when ``pin_memory``).
    offset : int, optional
        Byte offset in ``buffer``.
    pin_memory : bool, optional
        Stage through pinned memory where that pays (``CLPIN_PIN_MEMORY``).
    non_blocking : bool, optional
        Return once enqueued; ``array`` is kept alive until the transfer
        completes (do not modify it before then).
    wait_for : sequence of pyopencl.Event, optional
        Events the transfer waits for.

    Returns
    -------
    pyopencl.Event or None
        With ``non_blocking``, the transfer's event; else None (the data is
        in place).

    Raises
    ------
    TypeError, ValueError
        Bad arguments, checked before any OpenCL call (``offset + nbytes``
        past the end of ``buffer`` is a ValueError).
    Error
        The transfer failed (``.code`` says why).
    """
    t = _transfer_args(queue, buffer, array, offset, pin_memory, non_blocking, wait_for, into=False)
    host = _host_source(queue, t.array, t.pin)
    if t.nbytes == 0 and t.mem == 0:
        return _empty_event(queue, t.non_blocking)
    out = ffi.new("cl_event *") if t.non_blocking else ffi.NULL
    err = lib.clpin_write(ffi.cast("cl_command_queue", t.queue), ffi.cast("cl_mem", t.mem), t.offset,
                          ffi.from_buffer(host), t.nbytes, t.flags, t.num_events, t.events, out)
    return _finish(err, "clpin_write", out, (array, host))


def read(queue: cl.CommandQueue, buffer: DeviceBuffer, array: np.ndarray, offset: int = 0,
         pin_memory: bool = True, non_blocking: bool = False,
         wait_for: Optional[Sequence[cl.Event]] = None) -> Optional[cl.Event]:
    """Copy from a device buffer into a numpy array through clpin (``clpin_read``).

    Parameters
    ----------
    queue : pyopencl.CommandQueue
        The queue the transfer runs on.
    buffer : pyopencl.Buffer or pyopencl.array.Array
        The source.
    array : numpy.ndarray
        The destination: C-contiguous and writeable (else ValueError);
        ``array.nbytes`` bytes are read.
    offset : int, optional
        Byte offset in ``buffer``.
    pin_memory : bool, optional
        Stage through pinned memory where that pays.
    non_blocking : bool, optional
        Return once enqueued; the data is in ``array`` when the returned
        event completes, and ``array`` is kept alive until then.
    wait_for : sequence of pyopencl.Event, optional
        Events the transfer waits for.

    Returns
    -------
    pyopencl.Event or None
        With ``non_blocking``, the transfer's event; else None.

    Raises
    ------
    TypeError, ValueError
        Bad arguments, before any OpenCL call.
    Error
        The transfer failed.
    """
    t = _transfer_args(queue, buffer, array, offset, pin_memory, non_blocking, wait_for, into=True)
    if t.nbytes == 0 and t.mem == 0:
        return _empty_event(queue, t.non_blocking)
    out = ffi.new("cl_event *") if t.non_blocking else ffi.NULL
    err = lib.clpin_read(ffi.cast("cl_command_queue", t.queue), ffi.cast("cl_mem", t.mem), t.offset,
                         ffi.from_buffer(t.array, require_writable=True), t.nbytes, t.flags,
                         t.num_events, t.events, out)
    return _finish(err, "clpin_read", out, (t.array,))


def _empty_event(queue: cl.CommandQueue, non_blocking: bool) -> Optional[cl.Event]:
    # An empty pyopencl Array has no buffer: nothing to move.
    if not non_blocking:
        return None
    ev = cl.UserEvent(queue.context)
    ev.set_status(cl.command_execution_status.COMPLETE)
    return ev


def _release_tensor(tensor: int, array: np.ndarray) -> None:
    # array is referenced here so that it outlives the buffer over it.
    del array
    lib.clpin_tensor_release(ffi.cast("clpin_tensor *", tensor))


def _zero_copy(queue: cl.CommandQueue, src: np.ndarray) -> cl_array.Array:
    """An Array over a clpin tensor made with CLPIN_ZERO_COPY from src."""
    out = ffi.new("clpin_tensor **")
    shape = ffi.new("size_t[1]", [src.nbytes])
    _check(lib.clpin_tensor_from_host(ffi.cast("cl_command_queue", _queue(queue)),
                                      ffi.cast("void *", src.ctypes.data), CLPIN_U8, 1, shape,
                                      CLPIN_ZERO_COPY, out),
           "clpin_tensor_from_host")
    tensor = _addr(out[0])
    buf = cl.Buffer.from_int_ptr(_addr(lib.clpin_tensor_buffer(out[0])), retain=True)
    # The tensor (and the caller's array under it) lives as long as the
    # Buffer object, which the Array and all its views share.
    weakref.finalize(buf, _release_tensor, tensor, src).atexit = False
    return cl_array.Array(queue, src.shape, src.dtype, data=buf)


def from_host(queue: cl.CommandQueue, array: np.ndarray, pin_memory: bool = True,
              non_blocking: bool = False, zero_copy: bool = False) -> cl_array.Array:
    """A new device array holding ``array`` (``torch.Tensor.to(device)`` analogue).

    Parameters
    ----------
    queue : pyopencl.CommandQueue
        The queue of the upload and of the new Array.
    array : numpy.ndarray
        The data; any layout (a non-contiguous array is copied once).
    pin_memory : bool, optional
        Stage through pinned memory where that pays.
    non_blocking : bool, optional
        Return once enqueued; the upload's event is in the result's
        ``events`` (``result.finish()`` waits for it), and ``array`` is kept
        alive until it completes.
    zero_copy : bool, optional
        On a host-unified device (CPU devices, integrated GPUs) whose rule
        allows it (docs/ZERO_COPY.md: e.g. a page-aligned array on POCL),
        the result's buffer *is* ``array``'s memory: nothing is copied
        (``stats()["bytes_zero_copy"]`` counts it), kernels work on the
        array in place, and the array is kept alive with the result. The
        ``torch.from_numpy`` contract: do not touch ``array`` while kernels
        may use it; read results through the result (``get()``,
        :func:`to_host`). Elsewhere, or for an array that is not
        C-contiguous or not aligned, a copy as without it.

    Returns
    -------
    pyopencl.array.Array
        C-contiguous, same shape and dtype.
    """
    _queue(queue)
    src = _ndarray(array, "array")
    pin = _flag(pin_memory, "pin_memory")
    nb = _flag(non_blocking, "non_blocking")
    if _flag(zero_copy, "zero_copy") and src.nbytes and src.flags.c_contiguous and \
            src.flags.writeable:
        return _zero_copy(queue, src)
    result = cl_array.empty(queue, src.shape, src.dtype)
    if src.nbytes:
        ev = write(queue, result, src, pin_memory=pin, non_blocking=nb)
        if ev is not None:
            result.add_event(ev)
    return result


def host_buffer(queue: QueueOrContext, array: np.ndarray) -> tuple[cl.Buffer, int]:
    """The buffer holding a pinned array, for kernels to use it in place.

    On a host-unified device (CPU devices, integrated GPUs;
    docs/ZERO_COPY.md), a kernel given the buffer and the offset works on
    ``array`` itself: no byte is copied. Around such kernels hand the array
    to the device with :func:`host_lend` and take it back with
    :func:`host_reclaim`; do not touch it in between.

    Parameters
    ----------
    queue : pyopencl.CommandQueue or pyopencl.Context
        Selects the pool.
    array : numpy.ndarray
        An :func:`empty_pinned` / :func:`pin_memory` array (or a slice of
        one), or an array registered with :func:`host_register`.

    Returns
    -------
    (pyopencl.Buffer, int)
        The buffer and the array's byte offset in it.

    Raises
    ------
    Error
        ``CLPIN_ERR_NOT_UNIFIED`` on a device without host-unified memory
        (a discrete GPU: use :func:`write` / :func:`read` there);
        ``CLPIN_ERR_FOREIGN_POINTER`` for memory clpin does not hold.
    """
    ctx = _context(queue)
    arr = _ndarray(array, "array")
    if arr.nbytes == 0:
        raise ValueError("array is empty")
    mem = ffi.new("cl_mem *")
    off = ffi.new("size_t *")
    _check(lib.clpin_host_buffer(_pool(ctx), ffi.cast("void *", arr.ctypes.data), arr.nbytes,
                                 mem, off), "clpin_host_buffer")
    return cl.Buffer.from_int_ptr(_addr(mem[0]), retain=False), int(off[0])


def _handoff_args(queue: Any, array: Any) -> tuple[int, np.ndarray]:
    q = _queue(queue)
    arr = _ndarray(array, "array")
    if arr.nbytes == 0:
        raise ValueError("array is empty")
    return q, arr


def host_lend(queue: cl.CommandQueue, array: np.ndarray,
              wait_for: Optional[Sequence[cl.Event]] = None) -> cl.Event:
    """Lend a pinned array to the device, for kernels to use it in place.

    ``clpin_host_lend``: enqueues the unmap of the host's mapping of the
    array's pool block or registration (the first range of it lent), so
    that kernels on :func:`host_buffer`'s buffer may use it. Do not touch
    ``array`` until :func:`host_reclaim` gives it back.

    Parameters
    ----------
    queue : pyopencl.CommandQueue
        The kernels' queue.
    array : numpy.ndarray
        An :func:`empty_pinned` / :func:`pin_memory` array (or a slice of
        one), or an array registered with :func:`host_register`.
    wait_for : sequence of pyopencl.Event, optional
        Events to wait for first.

    Returns
    -------
    pyopencl.Event
        Completes when the array is the device's.

    Raises
    ------
    Error
        ``CLPIN_ERR_NOT_UNIFIED`` on a device without host-unified memory;
        ``CLPIN_ERR_FOREIGN_POINTER`` for memory clpin does not hold.
    """
    q, arr = _handoff_args(queue, array)
    num, wait = _events(wait_for, [])
    out = ffi.new("cl_event *")
    err = lib.clpin_host_lend(ffi.cast("cl_command_queue", q),
                              ffi.cast("void *", arr.ctypes.data), arr.nbytes, num, wait, out)
    _check(err, "clpin_host_lend")
    return cl.Event.from_int_ptr(_addr(out[0]), retain=False)


def host_reclaim(queue: cl.CommandQueue, array: np.ndarray, non_blocking: bool = False,
                 wait_for: Optional[Sequence[cl.Event]] = None) -> Optional[cl.Event]:
    """Reclaim an array lent by :func:`host_lend`: give it back to the host.

    ``clpin_host_reclaim``: when it is the last range of its block or
    registration still with the device, enqueues the map that makes the
    memory the host's again (at the same address).

    Parameters
    ----------
    queue : pyopencl.CommandQueue
        A queue of the same context (the kernels').
    array : numpy.ndarray
        The array given to :func:`host_lend` (same start and size).
    non_blocking : bool, optional
        Return once enqueued; touch ``array`` only after the returned event.
    wait_for : sequence of pyopencl.Event, optional
        Events to wait for first (the kernels').

    Returns
    -------
    pyopencl.Event or None
        With ``non_blocking``, the event; else None (the array is the host's).

    Raises
    ------
    Error
        ``CLPIN_ERR_NOT_ON_DEVICE`` for an array not lent.
    """
    q, arr = _handoff_args(queue, array)
    nb = _flag(non_blocking, "non_blocking")
    num, wait = _events(wait_for, [])
    out = ffi.new("cl_event *") if nb else ffi.NULL
    err = lib.clpin_host_reclaim(ffi.cast("cl_command_queue", q),
                                 ffi.cast("void *", arr.ctypes.data), arr.nbytes,
                                 CLPIN_NON_BLOCKING if nb else 0, num, wait, out)
    _check(err, "clpin_host_reclaim")
    return cl.Event.from_int_ptr(_addr(out[0]), retain=False) if nb else None


def to_host(x: cl_array.Array, out: Optional[np.ndarray] = None, pin_memory: bool = True,
            non_blocking: bool = False) -> np.ndarray:
    """Copy a device array to host memory (``torch.Tensor.cpu()`` analogue).

    Parameters
    ----------
    x : pyopencl.array.Array
        A C-contiguous Array with a queue; its pending events are waited for.
    out : numpy.ndarray, optional
        Destination of the same shape and dtype, C-contiguous and writeable;
        by default a new array (an :func:`empty_pinned` one gives the direct
        DMA path).
    pin_memory : bool, optional
        Stage through pinned memory where that pays.
    non_blocking : bool, optional
        Return once enqueued; the read's event is added to ``x.events``
        (``x.finish()`` waits for it); ``out`` is kept alive until then.

    Returns
    -------
    numpy.ndarray
        ``out``, or the new array.
    """
    if not isinstance(x, cl_array.Array):
        raise TypeError(f"x must be a pyopencl.array.Array, not {type(x).__name__}")
    if x.queue is None:
        raise ValueError("x has no queue: use clpin.read with a queue")
    if not x.flags.c_contiguous:
        raise ValueError("x must be C-contiguous")
    if out is None:
        pin = _flag(pin_memory, "pin_memory")
        nb = _flag(non_blocking, "non_blocking")
        out = np.empty(x.shape, x.dtype)
    else:
        _ndarray(out, "out")
        if out.dtype != x.dtype:
            raise TypeError(f"out has dtype {out.dtype}, x has {x.dtype}")
        if out.shape != x.shape:
            raise ValueError(f"out has shape {out.shape}, x has {x.shape}")
        pin = _flag(pin_memory, "pin_memory")
        nb = _flag(non_blocking, "non_blocking")
    ev = read(x.queue, x, out, pin_memory=pin, non_blocking=nb)
    if ev is not None:
        x.add_event(ev)
    return out
