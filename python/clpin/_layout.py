# SPDX-License-Identifier: Apache-2.0
"""Where each array of a batch lies in a loader's slot (``fields=``).

A batch of several arrays travels as one block of bytes: one pinned slot,
one upload, one device buffer. Each field starts at an offset aligned for a
sub-buffer of the device buffer (``CL_DEVICE_MEM_BASE_ADDR_ALIGN`` of every
device, at least a cache line), so the caller gets one plain buffer per
field (``array.data`` works) without a second copy on the device.

A loader of one array (``shape``, ``dtype``) is a layout of one field
named ``None`` at offset 0.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ._args import _dtype, _shape

#: Fields start on this many bytes at least: workers writing neighbouring
#: fields of one slot never share a cache line.
_MIN_ALIGN = 64


class Field:
    """One array of a batch: its name, shape, dtype and place in the slot."""

    __slots__ = ("name", "shape", "dtype", "offset", "nbytes")

    def __init__(self, name: Any, shape: tuple, dtype: np.dtype, offset: int) -> None:
        self.name, self.shape, self.dtype, self.offset = name, shape, dtype, offset
        n = dtype.itemsize
        for d in shape:
            n *= d
        self.nbytes = n

    def spec(self) -> tuple:
        """What a worker process needs to rebuild it (picklable)."""
        return (self.name, self.shape, self.dtype.str, self.offset)


class Layout:
    """The fields of a batch in slot order; ``total`` is the slot's size."""

    def __init__(self, fields: list, total: int, single: bool) -> None:
        self.fields = fields
        self.total = total
        self.single = single  # one array (shape, dtype), not a dict
        self._spec = (tuple(f.spec() for f in fields), total, single)

    @classmethod
    def of_array(cls, shape: Any, dtype: Any) -> "Layout":
        dims, dt = _shape(shape), _dtype(dtype)
        f = Field(None, dims, dt, 0)
        _too_large(f.nbytes, f"shape {dims} of {dt}")
        return cls([f], f.nbytes, True)

    @classmethod
    def of_fields(cls, fields: Any, align: int) -> "Layout":
        """fields: {name: (shape, dtype)}, in the order given."""
        if not isinstance(fields, dict):
            raise TypeError(f"fields must be a dict {{name: (shape, dtype)}}, not "
                            f"{type(fields).__name__}")
        if not fields:
            raise ValueError("fields: an empty dict (a batch needs at least one array)")
        align = max(_MIN_ALIGN, align)
        out, at = [], 0
        for name, spec in fields.items():
            try:
                shape, dtype = spec
            except (TypeError, ValueError):
                raise TypeError(f"fields[{name!r}] must be a pair (shape, dtype), not "
                                f"{spec!r}") from None
            try:
                dims, dt = _shape(shape), _dtype(dtype)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"fields[{name!r}]: {exc}") from None
            at = -(-at // align) * align
            f = Field(name, dims, dt, at)
            at += f.nbytes
            _too_large(at, f"fields {list(fields)} (field {name!r} ends at byte {at})")
            out.append(f)
        return cls(out, at, False)

    def spec(self) -> tuple:
        """What a worker process needs to rebuild the views (picklable)."""
        return self._spec

    def views(self, buf: Any, offset: int = 0) -> Any:
        """The numpy views of the fields over ``buf`` (a writable buffer
        holding the slot at ``offset``): an array, or a dict of them."""
        return views(self._spec, buf, offset)


def views(spec: tuple, buf: Any, offset: int = 0) -> Any:
    """Layout.views from its spec (what a worker process has)."""
    fields, _total, single = spec
    out = {name: np.ndarray(shape, np.dtype(dt), buffer=buf, offset=offset + at)
           for name, shape, dt, at in fields}
    return out[None] if single else out


def _too_large(nbytes: int, what: str) -> None:
    if nbytes >= 1 << 62:
        raise ValueError(f"{what} is too large: {nbytes} bytes a batch")


def base_align(contexts: list) -> int:
    """The sub-buffer alignment in bytes every device of the contexts
    accepts (CL_DEVICE_MEM_BASE_ADDR_ALIGN is in bits)."""
    bits = 8
    for ctx in contexts:
        for dev in ctx.devices:
            bits = max(bits, int(dev.mem_base_addr_align))
    return bits // 8


def rows(value: Any, name: str) -> int:
    """A batch size: an int >= 1."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, not a bool")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None
    if n < 1:
        raise ValueError(f"{name} must be >= 1, not {n}")
    return n

