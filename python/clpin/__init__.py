# SPDX-License-Identifier: Apache-2.0
"""clpin for Python: pinned host memory pools and fast staging transfers for
pyopencl programs and numpy arrays.

(Over 700 lines: the package's public surface, pools, transfers, tensors,
registration and handoff, is one module as users import it; the loader is
``_loader.py``, the cffi declarations ``_native.py``.)

The package is a thin layer over ``libclpin.so`` (cffi, ABI mode: no compiled
extension). It finds the library through the dynamic loader's normal search,
or at the path in the ``CLPIN_LIBRARY`` environment variable.

Every foreign call releases the GIL, so several Python threads can transfer
at once. See docs/PYTHON.md for the guide and a PyTorch-to-clpin table.
"""

from __future__ import annotations

import atexit
import gc
import itertools
import operator
import threading
import warnings
import weakref
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array

from ._native import (
    CL_COMPLETE,
    CLPIN_NON_BLOCKING,
    CLPIN_PIN_MEMORY,
    CLPIN_U8,
    CLPIN_ZERO_COPY,
    ffi,
    has_host_register,
    lib,
    library_path,
    ocl,
    ocl_ffi,
)

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
    "strerror",
    "pending",
    "version",
    "library_path",
    "has_host_register",
    "Loader",
    "LoaderError",
    "prefetch",
]

#: Queue-like argument: a command queue, or a context where no queue is needed.
QueueOrContext = Union[cl.CommandQueue, cl.Context]
#: A device buffer: a pyopencl Buffer or a contiguous pyopencl.array.Array.
DeviceBuffer = Union[cl.Buffer, cl_array.Array]

#: The element types numpy and clpin share (clpin_dtype CLPIN_U8 ... CLPIN_F64).
DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(t)
    for t in (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64,
              np.int64, np.float16, np.float32, np.float64)
)
_DTYPES = frozenset(DTYPES)

# clpin's own error codes (include/clpin.h, CLPIN_ERROR_TABLE).
ERR_INVALID_ARGUMENT = -20000
ERR_INVALID_SIZE = -20001
ERR_OVERFLOW = -20002
ERR_INVALID_BLOCK = -20003
ERR_DOUBLE_RELEASE = -20004
ERR_FOREIGN_POINTER = -20005
ERR_POOL_RELEASED = -20006
ERR_OUT_OF_RANGE = -20007
ERR_INVALID_DTYPE = -20008
ERR_INVALID_SHAPE = -20009
ERR_NO_DEVICE = -20010
ERR_THREAD = -20011
ERR_INVALID_OPTION = -20012
# libclpin-mpi's (clpin.mpi): an MPI call failed, ranks disagree, another rank refused.
ERR_MPI = -20022
ERR_MISMATCH = -20023
ERR_PEER = -20024


def strerror(code: int) -> str:
    """Name and describe a clpin or OpenCL status code.

    Parameters
    ----------
    code : int
        Any ``CL_*`` or ``CLPIN_ERR_*`` code, or 0.

    Returns
    -------
    str
        ``"NAME: description"`` (``clpin_strerror``); never empty.
    """
    return ffi.string(lib.clpin_strerror(int(code))).decode()


def version() -> str:
    """The loaded library's version, ``"MAJOR.MINOR.PATCH"``."""
    return ffi.string(lib.clpin_version_string()).decode()


class Error(RuntimeError):
    """A clpin or OpenCL call failed.

    ``str(error)`` shows the call, the code's name and number, and the
    detail (or, without one, the code's description), e.g.
    ``clpin_host_lend: CLPIN_ERR_FOREIGN_POINTER (-20005): ...: no live pool
    block ... holds the whole range (CLPIN_ERR_FOREIGN_POINTER: ...)``.

    Attributes
    ----------
    code : int
        The negative status code (``CL_*`` or ``CLPIN_ERR_*``).
    name : str
        The code's name, ``"CLPIN_ERR_INVALID_ARGUMENT"``, ``"CL_INVALID_VALUE"``
        ...; ``""`` for a code clpin does not know.
    text : str
        ``clpin_strerror(code)``: ``"NAME: description"``.
    detail : str
        What C callers get from ``clpin_last_error_detail()`` right after
        the failing call: which argument is wrong and why, e.g.
        ``"clpin_tensor_host_data: access is 0: pass CLPIN_READ and/or
        CLPIN_WRITE (CLPIN_ERR_INVALID_ARGUMENT: ...)"``. ``""`` when the
        failure came from the driver (no argument check of clpin failed).
    call : str
        The C function that failed.
    """

    def __init__(self, code: int, call: str = "", detail: str = "") -> None:
        self.code = int(code)
        self.text = strerror(code)
        self.name = self.text.split(":", 1)[0] if ":" in self.text else ""
        self.detail = detail
        self.call = call
        what = f"{self.name} ({self.code})" if self.name else f"code {self.code}"
        why = detail or (self.text.split(": ", 1)[1] if self.name else self.text)
        super().__init__(f"{call}: {what}: {why}" if call else f"{what}: {why}")


def _last_detail(code: int) -> str:
    """This thread's clpin_last_error_detail(), if it is code's: the C text
    ends with "(" + clpin_strerror(code) + ")". A failure that came from the
    driver leaves an older failure's text there, which this rejects."""
    d = ffi.string(lib.clpin_last_error_detail()).decode(errors="replace")
    return d if d.endswith(f"({strerror(code)})") else ""


def _check(err: int, call: str) -> None:
    if err != 0:
        # Read right away, on this thread: the detail is thread-local and the
        # next failing clpin call (any thread's own) replaces it.
        raise Error(err, call, _last_detail(err))


# ---------------------------------------------------------------- arguments


def _addr(cdata: Any) -> int:
    return int(ffi.cast("uintptr_t", cdata))


def _queue(queue: Any) -> int:
    if not isinstance(queue, cl.CommandQueue):
        raise TypeError(f"queue must be a pyopencl.CommandQueue, not {type(queue).__name__}")
    return queue.int_ptr


def _context(queue_or_context: Any) -> cl.Context:
    if isinstance(queue_or_context, cl.Context):
        return queue_or_context
    if isinstance(queue_or_context, cl.CommandQueue):
        return queue_or_context.context
    raise TypeError(
        "expected a pyopencl.CommandQueue or pyopencl.Context, not "
        f"{type(queue_or_context).__name__}"
    )


def _pool(ctx: cl.Context) -> Any:
    out = ffi.new("clpin_pool **")
    _check(lib.clpin_pool_get_for_context(ffi.cast("cl_context", ctx.int_ptr), out),
           "clpin_pool_get_for_context")
    return out[0]


def _flag(value: Any, name: str) -> bool:
    if value is True or value is False:
        return value
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be a bool, not {type(value).__name__}")


def _dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"not a numpy dtype: {dtype!r}") from exc
    if dt not in _DTYPES:
        raise TypeError(f"dtype {dt} is not one clpin supports (u8..i64, f16, f32, f64, native byte order)")
    return dt


def _ndarray(array: Any, name: str) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, not {type(array).__name__}")
    if array.dtype not in _DTYPES:
        raise TypeError(f"{name}: dtype {array.dtype} is not one clpin supports "
                        "(u8..i64, f16, f32, f64, native byte order)")
    return array


def _offset(offset: Any) -> int:
    if isinstance(offset, (bool, np.bool_)):
        raise TypeError("offset must be an int, not a bool")
    try:
        off = operator.index(offset)
    except TypeError as exc:
        raise TypeError(f"offset must be an int, not {type(offset).__name__}") from exc
    if off < 0:
        raise ValueError(f"offset must be >= 0, not {off}")
    return off


def _device(buffer: Any) -> tuple[int, int, int, list]:
    """(cl_mem, byte offset of the data, bytes available, events to wait for)."""
    if isinstance(buffer, cl.Buffer):
        return buffer.int_ptr, 0, buffer.size, []
    if isinstance(buffer, cl_array.Array):
        if not buffer.flags.forc:
            raise ValueError("a non-contiguous pyopencl.array.Array cannot be transferred")
        if buffer.base_data is None:  # an empty Array has no buffer
            return 0, 0, 0, list(buffer.events)
        return buffer.base_data.int_ptr, buffer.offset, buffer.nbytes, list(buffer.events)
    raise TypeError(f"buffer must be a pyopencl.Buffer or pyopencl.array.Array, not {type(buffer).__name__}")


def _events(wait_for: Optional[Iterable[cl.Event]], extra: list) -> tuple[int, Any]:
    if wait_for is None:
        events = extra
    else:
        if isinstance(wait_for, cl.Event):
            raise TypeError("wait_for must be a sequence of pyopencl.Event, not one Event")
        events = list(wait_for) + extra
    if not events:
        return 0, ffi.NULL
    for e in events:
        if not isinstance(e, cl.Event):
            raise TypeError(f"wait_for must hold pyopencl.Event objects, not {type(e).__name__}")
    return len(events), ffi.new("cl_event[]", [ffi.cast("cl_event", e.int_ptr) for e in events])


# ----------------------------------------------- keeping arrays alive (events)

_lock = threading.Lock()
_pending: dict[int, tuple[int, Any]] = {}  # key -> (cl_event we retained, objects)
_graveyard: list[int] = []  # completed events still to release (outside callbacks)
_keys = itertools.count(1)


@ocl_ffi.callback("void(cl_event, cl_int, void *)")
def _on_complete(event: Any, status: int, user_data: Any) -> None:
    # Runs on an OpenCL thread (or inline when the event is already complete).
    # Our reference to the event is not released here: releasing a user event
    # inside its own callback aborts POCL, so it waits in the graveyard.
    key = int(ocl_ffi.cast("uintptr_t", user_data))
    with _lock:
        entry = _pending.pop(key, None)
        if entry is not None:
            _graveyard.append(entry[0])
    del entry  # the arrays go here, outside the lock


def _bury() -> None:
    if not _graveyard:
        return
    with _lock:
        dead = _graveyard[:]
        _graveyard.clear()
    for e in dead:
        ocl.clReleaseEvent(ocl_ffi.cast("cl_event", e))


def _keep_alive(event: int, objects: tuple) -> None:
    """Hold objects until event completes (an OpenCL completion callback)."""
    _bury()
    raw = ocl_ffi.cast("cl_event", event)
    ocl.clRetainEvent(raw)
    key = next(_keys)
    with _lock:
        _pending[key] = (event, objects)
    # Not under _lock: POCL runs the callback inline on a completed event.
    if ocl.clSetEventCallback(raw, CL_COMPLETE, _on_complete, ocl_ffi.cast("void *", key)) != 0:
        ocl.clWaitForEvents(1, ocl_ffi.new("cl_event[1]", [raw]))
        with _lock:
            _pending.pop(key, None)
        ocl.clReleaseEvent(raw)


def pending() -> int:
    """Number of non-blocking transfers whose arrays clpin still holds."""
    with _lock:
        return len(_pending)


def _wait_pending() -> None:
    with _lock:
        events = [e for e, _ in _pending.values()]
    if events:
        ocl.clWaitForEvents(len(events), ocl_ffi.new("cl_event[]", [ocl_ffi.cast("cl_event", e) for e in events]))
    # Completion callbacks may trail the status change by a moment.
    for _ in range(2000):
        if not _pending:
            break
        threading.Event().wait(0.001)
    _bury()


atexit.register(_wait_pending)


def _finish(err: int, call: str, out: Any, objects: tuple) -> Optional[cl.Event]:
    _check(err, call)
    if out is ffi.NULL:
        return None
    event = _addr(out[0])
    _keep_alive(event, objects)
    return cl.Event.from_int_ptr(event, retain=False)


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


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (bool, np.bool_)):
        raise TypeError("shape must be an int or a sequence of ints")
    try:
        dims = (operator.index(shape),)
    except TypeError:
        if not isinstance(shape, Sequence) and not isinstance(shape, np.ndarray):
            raise TypeError(f"shape must be an int or a sequence of ints, not {type(shape).__name__}") from None
        dims = tuple(shape)
        for d in dims:
            if isinstance(d, (bool, np.bool_)):
                raise TypeError("shape entries must be ints, not bools")
        try:
            dims = tuple(operator.index(d) for d in dims)
        except TypeError:
            raise TypeError(f"shape entries must be ints: {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimension in shape {dims}")
    return dims


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
    q = _queue(queue)
    mem, base, size, extra = _device(buffer)
    src = _ndarray(array, "array")
    off = _offset(offset)
    pin = _flag(pin_memory, "pin_memory")
    nb = _flag(non_blocking, "non_blocking")
    nbytes = src.nbytes
    if off + nbytes > size:
        raise ValueError(f"offset {off} + {nbytes} bytes lies past the end of the buffer ({size} bytes)")
    num, wait = _events(wait_for, extra)
    host = _host_source(queue, src, pin)
    if nbytes == 0 and mem == 0:
        return _empty_event(queue, nb)
    out = ffi.new("cl_event *") if nb else ffi.NULL
    flags = (CLPIN_PIN_MEMORY if pin else 0) | (CLPIN_NON_BLOCKING if nb else 0)
    err = lib.clpin_write(ffi.cast("cl_command_queue", q), ffi.cast("cl_mem", mem), base + off,
                          ffi.from_buffer(host), nbytes, flags, num, wait, out)
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
    q = _queue(queue)
    mem, base, size, extra = _device(buffer)
    dst = _ndarray(array, "array")
    if not dst.flags.c_contiguous:
        raise ValueError("the destination array must be C-contiguous")
    if not dst.flags.writeable:
        raise ValueError("the destination array is read-only")
    off = _offset(offset)
    pin = _flag(pin_memory, "pin_memory")
    nb = _flag(non_blocking, "non_blocking")
    nbytes = dst.nbytes
    if off + nbytes > size:
        raise ValueError(f"offset {off} + {nbytes} bytes lies past the end of the buffer ({size} bytes)")
    num, wait = _events(wait_for, extra)
    if nbytes == 0 and mem == 0:
        return _empty_event(queue, nb)
    out = ffi.new("cl_event *") if nb else ffi.NULL
    flags = (CLPIN_PIN_MEMORY if pin else 0) | (CLPIN_NON_BLOCKING if nb else 0)
    err = lib.clpin_read(ffi.cast("cl_command_queue", q), ffi.cast("cl_mem", mem), base + off,
                         ffi.from_buffer(dst, require_writable=True), nbytes, flags, num, wait, out)
    return _finish(err, "clpin_read", out, (dst,))


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


def host_to_device(queue: cl.CommandQueue, array: np.ndarray,
                   wait_for: Optional[Sequence[cl.Event]] = None) -> cl.Event:
    """Deprecated since 0.2 (removed in 0.3): the old name of :func:`host_lend`."""
    warnings.warn("clpin.host_to_device is deprecated: use clpin.host_lend", DeprecationWarning,
                  stacklevel=2)
    return host_lend(queue, array, wait_for)


def host_to_host(queue: cl.CommandQueue, array: np.ndarray, non_blocking: bool = False,
                 wait_for: Optional[Sequence[cl.Event]] = None) -> Optional[cl.Event]:
    """Deprecated since 0.2 (removed in 0.3): the old name of :func:`host_reclaim`."""
    warnings.warn("clpin.host_to_host is deprecated: use clpin.host_reclaim", DeprecationWarning,
                  stacklevel=2)
    return host_reclaim(queue, array, non_blocking, wait_for)


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


# -------------------------------------------------------- stats and release

STATS_FIELDS: tuple[str, ...] = tuple(
    name for name, _ in ffi.typeof("clpin_stats").fields if name != "struct_size")


def stats(queue: QueueOrContext) -> dict[str, int]:
    """A consistent snapshot of the context's pool counters (``clpin_pool_stats``).

    Parameters
    ----------
    queue : pyopencl.CommandQueue or pyopencl.Context
        Selects the pool (created if the context has none yet).

    Returns
    -------
    dict of str to int
        Every ``clpin_stats`` field but ``struct_size``, e.g. ``hits``,
        ``bytes_staged``, ``bytes_pipelined``, ``bytes_pinned_direct``,
        ``bytes_unpinned``, ``bytes_registered``, ``bytes_zero_copy``. A library
        older than a
        field leaves it 0.
    """
    ctx = _context(queue)
    s = ffi.new("clpin_stats *")
    s.struct_size = ffi.sizeof("clpin_stats")
    _check(lib.clpin_pool_stats(_pool(ctx), s), "clpin_pool_stats")
    return {name: int(getattr(s, name)) for name in STATS_FIELDS}


def release_context(context: QueueOrContext) -> None:
    """Free the context's pool (``clpin_pool_release_context``).

    Waits for clpin's transfers still in flight, unregisters the context's
    registered arrays, frees every pinned buffer and forgets the context.
    Call it before the context goes; clpin may create a new pool later.

    Parameters
    ----------
    context : pyopencl.Context or pyopencl.CommandQueue
        The context (or a queue on it).

    Raises
    ------
    RuntimeError
        :func:`empty_pinned` / :func:`pin_memory` arrays of this context are
        still alive: their memory would be freed under them. Delete them
        first (nothing is released then). The same while a :class:`Loader`
        on the context is open: close it first.
    Error
        clpin failed.
    """
    ctx = _context(context)
    key = ctx.int_ptr
    _wait_pending()
    with _lock:
        live = len(_owners.get(key, ()))
    if live:
        gc.collect()
        with _lock:
            live = len(_owners.get(key, ()))
    if live:
        raise RuntimeError(f"{live} pinned array(s) of this context are still alive; "
                           "delete them before release_context")
    loaders = _open_loaders(key)
    if loaders:
        raise RuntimeError(f"{loaders} clpin.Loader(s) on this context are open (their pinned "
                           "slots are the pool's); close them before release_context")
    with _lock:
        mine = [p for p, (_, c) in _registered.items() if c == key]
    for p in mine:
        if has_host_register():
            lib.clpin_host_unregister(ffi.cast("void *", p))
        with _lock:
            _registered.pop(p, None)
    _check(lib.clpin_pool_release_context(ffi.cast("cl_context", key)),
           "clpin_pool_release_context")
    with _lock:
        _owners.pop(key, None)


# The loader (clpin_loader_*): last, as it uses the helpers above.
from ._loader import Loader, LoaderError, _open_loaders, prefetch  # noqa: E402
