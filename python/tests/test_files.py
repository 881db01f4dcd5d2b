# SPDX-License-Identifier: Apache-2.0
"""Files to device arrays (clpin.file_to_array, array_to_file) and the array
file formats on them: .npy against numpy's own np.save / np.load, and
safetensors against byte layouts built here from the format's specification
(an 8-byte little-endian header length, a JSON header of dtype, shape and
data_offsets with optional __metadata__, padded with spaces to 8 bytes, then
the data)."""

from __future__ import annotations

import io
import json
import os
import struct

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array
import pytest

import clpin
from conftest import pattern


def _file(tmp_path, data: bytes, name: str = "f.bin") -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


# ---- file_to_array / array_to_file -----------------------------------------------

@pytest.mark.parametrize("n,offset", [(1, 0), (4097, 3), (65536 * 5 + 7, 4099), (300000, 0)])
def test_file_to_array_exact(queue, tmp_path, n, offset):
    data = pattern(n + offset + 11, 3).tobytes()
    path = _file(tmp_path, data)
    a = cl_array.zeros(queue, n, np.uint8)
    s0 = clpin.stats(queue)
    clpin.file_to_array(queue, path, a, offset=offset)
    assert a.get().tobytes() == data[offset:offset + n]
    assert clpin.stats(queue)["bytes_file_read"] - s0["bytes_file_read"] == n


def test_file_object_and_descriptor_positions_unmoved(queue, tmp_path):
    data = pattern(200000, 4).tobytes()
    path = _file(tmp_path, data)
    a = cl_array.zeros(queue, 1000, np.uint8)
    with open(path, "rb") as f:
        f.seek(17)
        clpin.file_to_array(queue, f, a, offset=5)
        assert f.tell() == 17
        assert a.get().tobytes() == data[5:1005]
        clpin.file_to_array(queue, f.fileno(), a, offset=100000)
        assert a.get().tobytes() == data[100000:101000]
        assert os.lseek(f.fileno(), 0, os.SEEK_CUR) == 17


def test_array_to_file_and_back(queue, tmp_path):
    src = pattern(1 << 20, 5)
    a = cl_array.to_device(queue, src)
    path = str(tmp_path / "out.bin")
    clpin.array_to_file(a, path, offset=9)
    raw = open(path, "rb").read()
    assert len(raw) == 9 + src.size and raw[9:] == src.tobytes()
    # A file object opened by Python, with bytes it buffered: flushed first.
    with open(path, "r+b") as f:
        f.write(b"abc")
        clpin.array_to_file(a[:100], f, offset=3)
    assert open(path, "rb").read()[:103] == b"abc" + src[:100].tobytes()
    b = cl_array.zeros(queue, src.size, np.uint8)
    clpin.file_to_array(queue, path, b, offset=9, direct=True)
    assert np.array_equal(b.get()[100:], src[100:])


def test_direct_on_disk(queue):
    src = pattern(3 * 65536 + 123, 6)
    a = cl_array.to_device(queue, src)
    path = f"/var/tmp/clpin-test-files-{os.getpid()}"
    try:
        clpin.array_to_file(a, path, offset=4099, direct=True)
        b = cl_array.zeros(queue, src.size, np.uint8)
        clpin.file_to_array(queue, path, b, offset=4099, direct=True)
        assert np.array_equal(b.get(), src)
    finally:
        os.unlink(path)


def test_refusals_leave_the_array(queue, tmp_path):
    path = _file(tmp_path, bytes(100))
    a = cl_array.to_device(queue, np.full(200, 7, np.uint8))
    with pytest.raises(clpin.Error) as e:
        clpin.file_to_array(queue, path, a)
    assert e.value.code == cl.status_code.INVALID_VALUE and "past the end of the file" in str(e.value)
    r, w = os.pipe()
    try:
        os.write(w, bytes(300))
        with pytest.raises(clpin.Error) as e:
            clpin.file_to_array(queue, r, a)
        assert e.value.code == clpin.ERR_INVALID_ARGUMENT and "pipe" in str(e.value)
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(TypeError):
        clpin.file_to_array(queue, 1.5, a)
    with pytest.raises(ValueError):
        clpin.file_to_array(queue, -1, a)
    with pytest.raises(ValueError):
        clpin.file_to_array(queue, path, a, offset=-1)
    with pytest.raises(TypeError):
        clpin.file_to_array(queue, path, np.zeros(10))
    assert np.all(a.get() == 7)
    assert clpin.ERR_IO == -20025


# ---- .npy -------------------------------------------------------------------------

NPY_DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
              np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128]


def _sample(dtype, shape, seed=1):
    raw = pattern(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, seed)
    if np.dtype(dtype) == np.bool_:
        return (raw % 2).astype(np.bool_).reshape(shape)
    out = raw.view(dtype).reshape(shape).copy()
    if np.dtype(dtype).kind in "fc":
        out[~np.isfinite(out)] = 0
    return out


@pytest.mark.parametrize("dtype", NPY_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5, 2)])
def test_load_npy_every_dtype(queue, tmp_path, dtype, shape):
    x = _sample(dtype, shape)
    path = str(tmp_path / "x.npy")
    np.save(path, x)
    a = clpin.load_npy(queue, path)
    assert a.dtype == x.dtype and a.shape == x.shape
    assert np.array_equal(a.get(), x)


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_load_npy_versions(queue, tmp_path, version):
    x = _sample(np.float32, (33, 4))
    path = tmp_path / "v.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, x, version=version)
    assert open(path, "rb").read()[6:8] == bytes(version)
    assert np.array_equal(clpin.load_npy(queue, path).get(), x)


def test_npy_fortran_order(queue, tmp_path):
    x = np.asfortranarray(_sample(np.int32, (6, 5)))
    path = str(tmp_path / "f.npy")
    np.save(path, x)
    a = clpin.load_npy(queue, path)
    assert a.flags.f_contiguous and not a.flags.c_contiguous
    assert np.array_equal(a.get(), x)
    out = str(tmp_path / "g.npy")
    clpin.save_npy(out, a)
    y = np.load(out)
    assert np.isfortran(y) and np.array_equal(y, x)


@pytest.mark.parametrize("dtype", NPY_DTYPES)
def test_save_npy_numpy_reads(queue, tmp_path, dtype):
    x = _sample(dtype, (4, 9), 2)
    path = str(tmp_path / "s.npy")
    clpin.save_npy(path, cl_array.to_device(queue, x))
    y = np.load(path)
    assert y.dtype == x.dtype and np.array_equal(y, x)
    # numpy's own bytes for the same array, header and all.
    buf = io.BytesIO()
    np.save(buf, x)
    assert open(path, "rb").read() == buf.getvalue()


def test_npy_refusals(queue, tmp_path):
    p = tmp_path / "o.npy"
    np.save(p, np.array([1, "a"], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="objects"):
        clpin.load_npy(queue, p)
    np.save(p, np.arange(10, dtype=">i4" if np.little_endian else "<i4"))
    with pytest.raises(ValueError, match="byte order"):
        clpin.load_npy(queue, p)
    np.save(p, np.arange(1000, dtype=np.float64))
    raw = p.read_bytes()
    p.write_bytes(raw[:-8])
    with pytest.raises(ValueError, match="truncated"):
        clpin.load_npy(queue, p)
    p.write_bytes(b"NOTNPY" + raw[6:])
    with pytest.raises(ValueError, match="magic"):
        clpin.load_npy(queue, p)
    p.write_bytes(raw[:8] + struct.pack("<H", 60000) + raw[10:200])
    with pytest.raises(ValueError, match="past the file's end"):
        clpin.load_npy(queue, p)
    p.write_bytes(raw[:6] + bytes((9, 0)) + raw[8:])
    with pytest.raises(ValueError, match="version 9.0"):
        clpin.load_npy(queue, p)
    hdr = b"{'descr': '<f8', 'fortran_order': False, 'shape': (10,), __import__('os')}"
    p.write_bytes(raw[:8] + struct.pack("<H", len(hdr)) + hdr)
    with pytest.raises(ValueError, match="literal"):
        clpin.load_npy(queue, p)


# ---- safetensors ------------------------------------------------------------------

ST = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.float16): "F16",
      np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.int16): "I16",
      np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL",
      np.dtype(np.uint16): "U16", np.dtype(np.uint32): "U32", np.dtype(np.uint64): "U64"}


def _reference_safetensors(tensors: dict, metadata=None, pad=True) -> bytes:
    """A safetensors file laid out by hand from the specification, tensors
    in the order given."""
    header = {} if metadata is None else {"__metadata__": metadata}
    data, at = b"", 0
    for name, x in tensors.items():
        b = np.ascontiguousarray(x).tobytes()
        header[name] = {"dtype": ST[x.dtype], "shape": list(x.shape),
                        "data_offsets": [at, at + len(b)]}
        data += b
        at += len(b)
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def _tensors():
    return {"w": _sample(np.float32, (64, 33), 1), "b": _sample(np.float16, (33,), 2),
            "idx": _sample(np.int64, (5, 1), 3), "mask": _sample(np.bool_, (9,), 4),
            "scalar": np.array(3.5, np.float64), "empty": np.zeros((0, 4), np.int32),
            "u8": _sample(np.uint8, (1001,), 5)}


def test_load_safetensors_reference_layout(queue, tmp_path):
    t = _tensors()
    path = _file(tmp_path, _reference_safetensors(t, {"format": "pt"}), "m.safetensors")
    s0 = clpin.stats(queue)
    out = clpin.load_safetensors(queue, path)
    assert list(out) == list(t)
    for name, x in t.items():
        assert out[name].dtype == x.dtype and out[name].shape == x.shape, name
        assert np.array_equal(out[name].get(), x), name
    data = sum(x.nbytes for x in t.values())
    assert clpin.stats(queue)["bytes_file_read"] - s0["bytes_file_read"] == data


def test_load_safetensors_subset(queue, tmp_path):
    t = _tensors()
    path = _file(tmp_path, _reference_safetensors(t), "m.safetensors")
    out = clpin.load_safetensors(queue, path, names=["u8", "w", "mask"])
    assert list(out) == ["u8", "w", "mask"]
    for name in out:
        assert np.array_equal(out[name].get(), t[name])
    with pytest.raises(KeyError, match="nope"):
        clpin.load_safetensors(queue, path, names=["nope"])


def test_save_safetensors_bytes_follow_the_format(queue, tmp_path):
    t = {k: v for k, v in _tensors().items()}
    dev = {k: cl_array.to_device(queue, v) for k, v in t.items()}
    path = str(tmp_path / "s.safetensors")
    clpin.save_safetensors(path, dev, metadata={"who": "clpin"})
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0
    text = raw[8:8 + n]
    body = text.rstrip(b" ")  # padded with spaces only, after the JSON object
    assert body.endswith(b"}") and len(text) - len(body) < 8
    header = json.loads(text)
    assert header.pop("__metadata__") == {"who": "clpin"}
    data = raw[8 + n:]
    spans = sorted(v["data_offsets"] for v in header.values())
    at = 0
    for b, e in spans:  # the data tiled: no overlap, no hole
        assert b == at
        at = e
    assert at == len(data)
    for name, x in t.items():
        h = header[name]
        assert h["dtype"] == ST[x.dtype] and h["shape"] == list(x.shape)
        b, e = h["data_offsets"]
        assert data[b:e] == x.tobytes(), name
    back = clpin.load_safetensors(queue, path)
    for name, x in t.items():
        assert np.array_equal(back[name].get(), x)


def test_load_safetensors_unpadded_header(queue, tmp_path):
    t = {"a": _sample(np.int32, (3,), 1)}
    raw = _reference_safetensors(t, pad=False)
    path = _file(tmp_path, raw, "u.safetensors")
    assert np.array_equal(clpin.load_safetensors(queue, path)["a"].get(), t["a"])


def _corrupt(tmp_path, header, data: bytes, n=None) -> str:
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return _file(tmp_path, struct.pack("<Q", len(h) if n is None else n) + h + data, "c.st")


@pytest.mark.parametrize("case,match", [
    ("huge", "header length"),
    ("past", "header length"),
    ("short", "too short"),
    ("json", "not JSON"),
    ("list", "JSON object"),
    ("dtype", "unknown dtype"),
    ("shape", "bad shape"),
    ("overlap", "overlap"),
    ("hole", "hole"),
    ("outside", "past the end of the data"),
    ("mismatch", "hold"),
    ("offsets", "bad data_offsets"),
    ("meta", "__metadata__"),
    ("truncated", "past the end of the data"),
    ("keys", "want dtype"),
])
def test_load_safetensors_corrupt(queue, tmp_path, case, match):
    good = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "U8", "shape": [8], "data_offsets": [8, 16]}}
    data = bytes(16)
    if case == "huge":
        path = _corrupt(tmp_path, good, data, n=1 << 62)
    elif case == "past":
        path = _corrupt(tmp_path, good, data, n=10_000)
    elif case == "short":
        path = _file(tmp_path, b"\x01\x02", "c.st")
    elif case == "json":
        path = _corrupt(tmp_path, b'{"a": [1, 2', data)
    elif case == "list":
        path = _corrupt(tmp_path, [1, 2], data)
    else:
        h = json.loads(json.dumps(good))
        if case == "dtype":
            h["a"]["dtype"] = "F128"
        elif case == "shape":
            h["a"]["shape"] = [-2]
        elif case == "overlap":
            h["b"]["data_offsets"] = [4, 12]
            h["b"]["shape"] = [8]
        elif case == "hole":
            h["b"]["data_offsets"] = [9, 17]
            data = bytes(17)
        elif case == "outside":
            h["b"]["data_offsets"] = [8, 24]
            h["b"]["shape"] = [16]
        elif case == "mismatch":
            h["a"]["shape"] = [3]
        elif case == "offsets":
            h["a"]["data_offsets"] = [8, 0]
        elif case == "meta":
            h["__metadata__"] = {"k": 1}
        elif case == "truncated":
            data = bytes(10)
        elif case == "keys":
            h["a"]["extra"] = 1
        path = _corrupt(tmp_path, h, data)
    with pytest.raises(ValueError, match=match):
        clpin.load_safetensors(queue, path)


def test_save_safetensors_refusals(queue, tmp_path):
    a = cl_array.to_device(queue, np.zeros(4, np.complex64))
    with pytest.raises(ValueError, match="no safetensors name"):
        clpin.save_safetensors(str(tmp_path / "x"), {"a": a})
    b = cl_array.to_device(queue, np.asfortranarray(np.zeros((3, 4), np.float32)))
    with pytest.raises(ValueError, match="C-contiguous"):
        clpin.save_safetensors(str(tmp_path / "x"), {"b": b})
    c = cl_array.to_device(queue, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="metadata"):
        clpin.save_safetensors(str(tmp_path / "x"), {"c": c}, metadata={"k": 1})
    with pytest.raises(ValueError, match="__metadata__"):
        clpin.save_safetensors(str(tmp_path / "x"), {"__metadata__": c})
