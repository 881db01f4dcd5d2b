# SPDX-License-Identifier: Apache-2.0
"""Argument checks shared by every call: queues, contexts, pools, flags,
dtypes, arrays, offsets, device buffers and wait lists.
"""

from __future__ import annotations

import operator
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array

from ._native import ffi, lib
from ._errors import _check

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
