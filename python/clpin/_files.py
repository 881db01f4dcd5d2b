# SPDX-License-Identifier: Apache-2.0
"""Files straight into device arrays and back (``clpin_file_to_buffer``,
``clpin_buffer_to_file``), and the two array file formats built on them:
numpy's ``.npy`` and the safetensors format.

The file's bytes are read on clpin's threads into pinned memory and uploaded
chunk by chunk (docs/FILES.md); a safetensors file's whole data region is
read with one call into one buffer, each tensor an Array over its range.
"""

from __future__ import annotations

import ast
import json
import math
import os
import struct
from typing import Any, Iterable, Mapping, Optional, Union

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array

from ._native import ffi, lib
from ._errors import _check
from ._args import _device, _offset, _queue

#: What ``file`` may be: a path, a file object with ``fileno()``, or a descriptor.
FileLike = Union[str, os.PathLike, int, Any]

_FILE_DIRECT = 1 << 24  # CLPIN_FILE_DIRECT


class _Opened:
    """A descriptor for ``file``: opened here for a path (and closed on exit),
    else the caller's (a file object is flushed first, so that what Python
    buffered is in the file before clpin reads or writes it at an offset)."""

    def __init__(self, file: FileLike, write: bool) -> None:
        self.close = False
        if isinstance(file, bool):
            raise TypeError("file must be a path, a file object or a descriptor, not a bool")
        if isinstance(file, int):
            if file < 0:
                raise ValueError(f"file descriptor must be >= 0, not {file}")
            self.fd = file
        elif isinstance(file, (str, bytes, os.PathLike)):
            flags = (os.O_WRONLY | os.O_CREAT) if write else os.O_RDONLY
            self.fd = os.open(file, flags | getattr(os, "O_CLOEXEC", 0), 0o666)
            self.close = True
        elif hasattr(file, "fileno"):
            if hasattr(file, "flush"):
                file.flush()
            self.fd = file.fileno()
        else:
            raise TypeError("file must be a path, a file object or a descriptor, not "
                            f"{type(file).__name__}")

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: Any) -> None:
        if self.close:
            os.close(self.fd)


def _array(array: Any, name: str = "array") -> cl_array.Array:
    if not isinstance(array, cl_array.Array):
        raise TypeError(f"{name} must be a pyopencl.array.Array, not {type(array).__name__}")
    if not array.flags.forc:
        raise ValueError(f"{name} is not contiguous: a file holds contiguous bytes")
    return array


def _move(call: str, queue: cl.CommandQueue, array: cl_array.Array, fd: int, offset: int,
          direct: bool) -> None:
    mem, start, nbytes, events = _device(array)
    if nbytes == 0:
        return
    flags = _FILE_DIRECT if direct else 0
    wl = ffi.new("cl_event[]", [ffi.cast("cl_event", e.int_ptr) for e in events]) \
        if events else ffi.NULL
    fn = getattr(lib, call)
    err = fn(ffi.cast("cl_command_queue", _queue(queue)), ffi.cast("cl_mem", mem), start, nbytes,
             fd, offset, flags, len(events), wl, ffi.NULL)
    _check(err, call)


def file_to_array(queue: cl.CommandQueue, file: FileLike, array: cl_array.Array,
                  offset: int = 0, direct: bool = False) -> None:
    """Fill a device array with the file's bytes from ``offset`` on
    (``clpin_file_to_buffer``): ``array.nbytes`` bytes, read on clpin's threads
    into pinned memory and uploaded as they arrive. Returns once they are in
    place.

    Parameters
    ----------
    queue : pyopencl.CommandQueue
        The queue the upload runs on (the array's pending events are waited for).
    file : str, os.PathLike, file object or int
        A path (opened and closed here), a file object (flushed first) or a
        descriptor open for reading. Its position is neither used nor moved.
    array : pyopencl.array.Array
        The destination, contiguous (C or Fortran order: its bytes as they lie).
    offset : int, optional
        Where in the file the bytes start.
    direct : bool, optional
        Bypass the page cache (``CLPIN_FILE_DIRECT``) where the file system allows.

    Raises
    ------
    TypeError, ValueError
        Bad arguments.
    Error
        ``CL_INVALID_VALUE`` for a range past the end of the file (nothing is
        read), ``ERR_INVALID_ARGUMENT`` for a descriptor that cannot be read
        at an offset (a pipe), ``ERR_IO`` for a failed read (``.detail`` has
        the system's text).
    """
    array = _array(array)
    off = _offset(offset)
    with _Opened(file, write=False) as fd:
        _move("clpin_file_to_buffer", queue, array, fd, off, bool(direct))


def array_to_file(array: cl_array.Array, file: FileLike, offset: int = 0,
                  direct: bool = False) -> None:
    """Write a device array's bytes into a file at ``offset``
    (``clpin_buffer_to_file``), on the array's queue; the file grows as needed.
    Returns once the bytes are written (not yet synced: ``os.fsync`` for that).

    Parameters
    ----------
    array : pyopencl.array.Array
        The source, contiguous; its queue runs the download.
    file : str, os.PathLike, file object or int
        A path (created if missing, not truncated), a file object (flushed
        first) or a descriptor open for writing, not in append mode.
    offset : int, optional
        Where in the file the bytes go.
    direct : bool, optional
        Bypass the page cache (``CLPIN_FILE_DIRECT``) where the file system allows.
    """
    array = _array(array)
    if array.queue is None:
        raise ValueError("array has no queue: give it one (array.with_queue(queue))")
    off = _offset(offset)
    with _Opened(file, write=True) as fd:
        _move("clpin_buffer_to_file", array.queue, array, fd, off, bool(direct))


# ---- .npy ----------------------------------------------------------------------

_NPY_MAGIC = b"\x93NUMPY"


def _npy_header(fd: int, size: int, path: Any) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """(dtype, shape, fortran_order, data offset) of the .npy file at fd."""
    head = os.pread(fd, 12, 0)
    if len(head) < 10 or head[:6] != _NPY_MAGIC:
        raise ValueError(f"{path}: not a .npy file (no \\x93NUMPY magic)")
    major, minor = head[6], head[7]
    if (major, minor) == (1, 0):
        hlen, start = struct.unpack("<H", head[8:10])[0], 10
    elif (major, minor) in ((2, 0), (3, 0)):
        if len(head) < 12:
            raise ValueError(f"{path}: truncated .npy header")
        hlen, start = struct.unpack("<I", head[8:12])[0], 12
    else:
        raise ValueError(f"{path}: .npy format version {major}.{minor} is not one numpy writes "
                         "(1.0, 2.0, 3.0)")
    if start + hlen > size:
        raise ValueError(f"{path}: the header says it is {hlen} bytes, past the file's end "
                         f"({size} bytes)")
    raw = os.pread(fd, hlen, start)
    try:
        text = raw.decode("utf-8" if major == 3 else "latin1")
        d = ast.literal_eval(text)
    except (UnicodeDecodeError, ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ValueError(f"{path}: the .npy header is not a Python literal: {exc}") from None
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise ValueError(f"{path}: the .npy header must be a dict of descr, fortran_order and "
                         f"shape, not {text.strip()!r}")
    try:
        dtype = np.lib.format.descr_to_dtype(d["descr"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: bad dtype {d['descr']!r} in the .npy header: {exc}") from None
    shape = d["shape"]
    if (not isinstance(shape, tuple)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise ValueError(f"{path}: bad shape {shape!r} in the .npy header")
    if not isinstance(d["fortran_order"], bool):
        raise ValueError(f"{path}: fortran_order must be True or False, not {d['fortran_order']!r}")
    if dtype.hasobject:
        raise ValueError(f"{path}: dtype {dtype} holds Python objects (pickles): only plain "
                         "data can go to a device")
    if dtype.byteorder not in ("=", "|") and dtype.byteorder != ("<" if np.little_endian else ">"):
        raise ValueError(f"{path}: dtype {dtype} is not in the host's byte order: np.load it "
                         "and convert (astype) instead")
    return dtype, shape, d["fortran_order"], start + hlen


def load_npy(queue: cl.CommandQueue, path: Union[str, os.PathLike]) -> cl_array.Array:
    """A ``.npy`` file (as ``np.save`` writes it: format 1.0, 2.0 or 3.0) as a
    device Array, its data read straight into the device buffer
    (``clpin_file_to_buffer``).

    A Fortran-ordered file gives a Fortran-ordered Array (the same bytes).
    Object arrays (pickles) and files in the other byte order are refused with
    a ValueError saying so, as is a corrupt header or a truncated file.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        dtype, shape, fortran, start = _npy_header(fd, size, path)
        nbytes = math.prod(shape) * dtype.itemsize
        if start + nbytes > size:
            raise ValueError(f"{path}: truncated: shape {shape} of {dtype} needs {nbytes} bytes "
                             f"after the header, the file has {size - start}")
        out = cl_array.empty(queue, shape, dtype, order="F" if fortran else "C")
        _move("clpin_file_to_buffer", queue, out, fd, start, False)
        return out
    finally:
        os.close(fd)


def save_npy(path: Union[str, os.PathLike], array: cl_array.Array) -> None:
    """Write a device Array as a ``.npy`` file that ``np.load`` reads (format
    1.0, or 2.0 when the header needs it), its data downloaded straight into
    the file (``clpin_buffer_to_file``). C- and Fortran-ordered arrays both
    work; others are refused."""
    array = _array(array)
    if array.queue is None:
        raise ValueError("array has no queue: give it one (array.with_queue(queue))")
    if array.dtype.hasobject:
        raise ValueError(f"dtype {array.dtype} holds objects")
    fortran = not array.flags.c_contiguous
    descr = np.lib.format.dtype_to_descr(array.dtype)
    shape = tuple(int(n) for n in array.shape)
    text = "{'descr': %r, 'fortran_order': %r, 'shape': %r, }" % (descr, fortran, shape)
    body = text.encode("latin1")
    # The data starts at a multiple of 64 bytes; the header ends with "\n".
    for major, lenfmt in ((1, "<H"), (2, "<I")):
        pre = len(_NPY_MAGIC) + 2 + struct.calcsize(lenfmt)
        hlen = -(-(pre + len(body) + 1) // 64) * 64 - pre
        if hlen < 1 << (8 * struct.calcsize(lenfmt)):
            break
    header = (_NPY_MAGIC + bytes((major, 0)) + struct.pack(lenfmt, hlen)
              + body + b" " * (hlen - len(body) - 1) + b"\n")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        os.pwrite(fd, header, 0)
        _move("clpin_buffer_to_file", array.queue, array, fd, len(header), False)
    finally:
        os.close(fd)


# ---- safetensors -----------------------------------------------------------------

# The format's dtypes and numpy's. BF16 and the 8-bit floats have no numpy
# type: they load as their bit patterns (uint16, uint8).
_ST_DTYPES = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
    "U32": np.uint32, "I32": np.int32, "U64": np.uint64, "I64": np.int64,
    "F16": np.float16, "F32": np.float32, "F64": np.float64,
    "BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8,
}
_ST_NAMES = {np.dtype(t): n for n, t in _ST_DTYPES.items()
             if n not in ("BF16", "F8_E4M3", "F8_E5M2")}
# The format's own limit on the header (the safetensors library refuses more).
_ST_HEADER_MAX = 100_000_000


def _st_header(fd: int, size: int, path: Any) -> tuple[dict, dict, int]:
    """(tensors {name: (dtype, shape, begin, end)}, metadata, data start)."""
    if size < 8:
        raise ValueError(f"{path}: {size} bytes: too short for a safetensors file (8-byte header "
                         "length first)")
    n = struct.unpack("<Q", os.pread(fd, 8, 0))[0]
    if n > _ST_HEADER_MAX or n > size - 8:
        raise ValueError(f"{path}: header length {n} is past the file's end ({size} bytes) or "
                         f"above the format's limit ({_ST_HEADER_MAX})")
    raw = os.pread(fd, n, 8)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: the header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header must be a JSON object, not {type(header).__name__}")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in meta.items()):
        raise ValueError(f"{path}: __metadata__ must map strings to strings")
    data_len = size - 8 - n
    tensors = {}
    for name, t in header.items():
        if not isinstance(t, dict) or set(t) != {"dtype", "shape", "data_offsets"}:
            raise ValueError(f"{path}: tensor {name!r}: want dtype, shape and data_offsets, "
                             f"got {t!r}")
        if t["dtype"] not in _ST_DTYPES:
            raise ValueError(f"{path}: tensor {name!r}: unknown dtype {t['dtype']!r}")
        dtype = np.dtype(_ST_DTYPES[t["dtype"]])
        shape, offs = t["shape"], t["data_offsets"]
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ValueError(f"{path}: tensor {name!r}: bad shape {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
                or not 0 <= offs[0] <= offs[1]):
            raise ValueError(f"{path}: tensor {name!r}: bad data_offsets {offs!r}")
        if offs[1] > data_len:
            raise ValueError(f"{path}: tensor {name!r}: data_offsets {offs} lie past the end of "
                             f"the data ({data_len} bytes)")
        if offs[1] - offs[0] != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"{path}: tensor {name!r}: shape {shape} of {t['dtype']} is "
                             f"{math.prod(shape) * dtype.itemsize} bytes, data_offsets "
                             f"{offs} hold {offs[1] - offs[0]}")
        tensors[name] = (dtype, tuple(shape), offs[0], offs[1])
    # As the format requires: the tensors tile the data, no overlap, no hole.
    at = 0
    for name, (_, _, b, e) in sorted(tensors.items(), key=lambda kv: (kv[1][2], kv[1][3])):
        if b != at:
            raise ValueError(f"{path}: tensor {name!r} starts at {b}, where "
                             f"{'a hole' if b > at else 'an overlap'} begins (the previous "
                             f"tensor ends at {at})")
        at = e
    if at != data_len:
        raise ValueError(f"{path}: the tensors end at {at}, the data at {data_len}")
    return tensors, meta, 8 + n


def load_safetensors(queue: cl.CommandQueue, path: Union[str, os.PathLike],
                     names: Optional[Iterable[str]] = None,
                     direct: bool = False) -> dict[str, cl_array.Array]:
    """A safetensors file's tensors as device Arrays, by name.

    The data region (of the tensors asked for: each run of them that lies
    back to back) is read with one ``clpin_file_to_buffer`` into one device
    buffer, each tensor an Array over its range: one big transfer instead of
    one per tensor. ``names``: the tensors to load (all by default; an
    unknown name is a KeyError). BF16 and the 8-bit float formats have no
    numpy type: they load as their bit patterns (uint16, uint8).

    The header is checked as the format requires before anything is read:
    the length within the file and at most 100 MB, JSON, known dtypes, shapes
    that match their byte ranges, ranges inside the data that tile it with no
    overlap and no hole; anything else is a ValueError saying what is wrong.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        tensors, _, start = _st_header(fd, size, path)
        if names is None:
            want = list(tensors)
        else:
            if isinstance(names, str):
                raise TypeError("names must be a list of tensor names, not one str")
            want = list(names)
            for name in want:
                if name not in tensors:
                    raise KeyError(f"{path}: no tensor {name!r} in the file")
        # Runs of wanted tensors lying back to back: one read each.
        order = sorted(set(want), key=lambda k: tensors[k][2])
        runs: list[list[str]] = []
        for name in order:
            if runs and tensors[runs[-1][-1]][3] == tensors[name][2]:
                runs[-1].append(name)
            else:
                runs.append([name])
        out = {}
        for run in runs:
            b, e = tensors[run[0]][2], tensors[run[-1]][3]
            buf = None
            if e > b:
                buf = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, e - b)
                flags = _FILE_DIRECT if direct else 0
                _check(lib.clpin_file_to_buffer(
                    ffi.cast("cl_command_queue", _queue(queue)), ffi.cast("cl_mem", buf.int_ptr),
                    0, e - b, fd, start + b, flags, 0, ffi.NULL, ffi.NULL),
                    "clpin_file_to_buffer")
            for name in run:
                dtype, shape, tb, te = tensors[name]
                if te == tb:
                    out[name] = cl_array.empty(queue, shape, dtype)
                else:
                    out[name] = cl_array.Array(queue, shape, dtype, data=buf, offset=tb - b)
        return {name: out[name] for name in want}
    finally:
        os.close(fd)


def save_safetensors(path: Union[str, os.PathLike], arrays: Mapping[str, cl_array.Array],
                     metadata: Optional[Mapping[str, str]] = None) -> None:
    """Write device Arrays as a safetensors file (what the safetensors library
    reads): an 8-byte little-endian header length, the JSON header (dtype,
    shape, data_offsets of each tensor; ``metadata`` as ``__metadata__``,
    strings to strings) padded with spaces to a multiple of 8 bytes, then the
    tensors' bytes, downloaded straight into the file
    (``clpin_buffer_to_file``), largest element size first so each is aligned.
    Arrays must be C-contiguous, of a dtype the format has (bool, ints, F16,
    F32, F64).
    """
    if not isinstance(arrays, Mapping):
        raise TypeError(f"arrays must be a mapping of names to Arrays, not {type(arrays).__name__}")
    items = []
    for name, a in arrays.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"tensor name {name!r}: a str other than '__metadata__'")
        a = _array(a, f"arrays[{name!r}]")
        if not a.flags.c_contiguous:
            raise ValueError(f"arrays[{name!r}] is not C-contiguous: safetensors stores C order")
        if a.dtype not in _ST_NAMES:
            raise ValueError(f"arrays[{name!r}]: dtype {a.dtype} has no safetensors name")
        if a.queue is None and a.nbytes:
            raise ValueError(f"arrays[{name!r}] has no queue: give it one (with_queue)")
        items.append((name, a))
    header: dict[str, Any] = {}
    if metadata is not None:
        if not isinstance(metadata, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ValueError("metadata must map strings to strings")
        header["__metadata__"] = dict(metadata)
    items.sort(key=lambda na: (-na[1].dtype.itemsize, na[0]))
    at = 0
    for name, a in items:
        header[name] = {"dtype": _ST_NAMES[a.dtype], "shape": [int(n) for n in a.shape],
                        "data_offsets": [at, at + a.nbytes]}
        at += a.nbytes
    body = json.dumps(header, separators=(",", ":")).encode("utf-8")
    body += b" " * (-len(body) % 8)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        os.pwrite(fd, struct.pack("<Q", len(body)) + body, 0)
        start = 8 + len(body)
        for name, a in items:
            _move("clpin_buffer_to_file", a.queue, a, fd, start + header[name]["data_offsets"][0],
                  False)
        os.ftruncate(fd, start + at)
    finally:
        os.close(fd)
