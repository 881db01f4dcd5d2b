# SPDX-License-Identifier: Apache-2.0
"""clpin.write and clpin.read: dtypes, shapes, offsets, layouts, paths."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array
import pytest

import clpin
from conftest import CHUNK, delta, device_bytes, fill_device, pattern

SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 3, 4), (4, 1, 2, 3)]


def random_array(shape: tuple, dtype: np.dtype, seed: int = 3) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return pattern(n, seed).view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", clpin.DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_roundtrip_every_dtype_and_shape(queue, make_buffer, dtype, shape):
    a = random_array(shape, dtype)
    buf = make_buffer(max(a.nbytes, 1))
    assert clpin.write(queue, buf, a) is None
    assert device_bytes(queue, buf)[: a.nbytes].tobytes() == a.tobytes()
    b = np.zeros(shape, dtype)
    assert clpin.read(queue, buf, b) is None
    assert b.tobytes() == a.tobytes()  # bit-exact, NaN payloads included


@pytest.mark.parametrize("pin", [True, False])
@pytest.mark.parametrize("nbytes", [1, 4096, 3 * CHUNK + 17])
def test_write_read_sizes(queue, make_buffer, pin, nbytes):
    a = pattern(nbytes, 5)
    buf = make_buffer(nbytes)
    clpin.write(queue, buf, a, pin_memory=pin)
    assert np.array_equal(device_bytes(queue, buf), a)
    fill_device(queue, buf, pattern(nbytes, 6))
    out = np.empty(nbytes, np.uint8)
    clpin.read(queue, buf, out, pin_memory=pin)
    assert np.array_equal(out, pattern(nbytes, 6))


@pytest.mark.parametrize("offset", [0, 1, 4093, 8192])
def test_offsets_touch_only_their_range(queue, make_buffer, offset):
    size = 20000
    buf = make_buffer(size)
    base = pattern(size, 7)
    fill_device(queue, buf, base)
    a = np.arange(1000, dtype=np.int32)
    clpin.write(queue, buf, a, offset=offset)
    want = base.copy()
    want[offset: offset + a.nbytes] = a.view(np.uint8)
    assert np.array_equal(device_bytes(queue, buf), want)
    back = np.empty(1000, np.int32)
    clpin.read(queue, buf, back, offset=offset)
    assert np.array_equal(back, a)
    # the last byte of the buffer exactly
    end = np.array([0xAB], np.uint8)
    clpin.write(queue, buf, end, offset=size - 1)
    assert device_bytes(queue, buf)[-1] == 0xAB


def test_numpy_integer_offset(queue, make_buffer):
    buf = make_buffer(64)
    clpin.write(queue, buf, np.full(8, 9, np.uint8), offset=np.int64(16))
    assert np.array_equal(device_bytes(queue, buf)[16:24], np.full(8, 9, np.uint8))


@pytest.mark.parametrize("pin", [True, False])
def test_non_contiguous_input_is_written_in_c_order(queue, make_buffer, pin):
    base = np.arange(64 * 48, dtype=np.float64).reshape(64, 48)
    for view in (base[::2, ::3], base.T, base[:, 5], np.asfortranarray(base)):
        assert not view.flags.c_contiguous
        buf = make_buffer(view.nbytes)
        clpin.write(queue, buf, view, pin_memory=pin)
        assert np.array_equal(device_bytes(queue, buf).view(np.float64).reshape(view.shape), view)


def test_write_leaves_the_input_untouched(queue, make_buffer):
    a = np.arange(100, dtype=np.float32)[::2]
    keep = a.copy()
    clpin.write(queue, make_buffer(a.nbytes), a)
    assert np.array_equal(a, keep)


def test_read_only_input_is_fine(queue, make_buffer):
    a = np.arange(50, dtype=np.int16)
    a.flags.writeable = False
    buf = make_buffer(a.nbytes)
    clpin.write(queue, buf, a)
    assert np.array_equal(device_bytes(queue, buf).view(np.int16), a)


def test_pyopencl_array_as_buffer_with_its_offset(queue):
    x = cl_array.zeros(queue, 100, np.int32)
    part = x[10:20]
    assert part.offset == 40
    clpin.write(queue, part, np.arange(10, dtype=np.int32) + 1)
    want = np.zeros(100, np.int32)
    want[10:20] = np.arange(10) + 1
    assert np.array_equal(x.get(), want)
    back = np.empty(10, np.int32)
    clpin.read(queue, part, back)
    assert np.array_equal(back, np.arange(10) + 1)
    with pytest.raises(ValueError):  # the slice ends at its 10th element
        clpin.write(queue, part, np.arange(11, dtype=np.int32))


# ---- which path ran (CLPIN_PINNED_H2D=1, CLPIN_CHUNK=64K from conftest)

def test_paths_of_write(queue, make_buffer):
    small, large = pattern(CHUNK // 2, 1), pattern(4 * CHUNK, 2)
    buf = make_buffer(4 * CHUNK)
    s0 = clpin.stats(queue)
    clpin.write(queue, buf, small)
    s1 = clpin.stats(queue)
    assert delta(s0, s1)["bytes_staged"] == small.nbytes
    clpin.write(queue, buf, large)
    s2 = clpin.stats(queue)
    assert delta(s1, s2)["bytes_pipelined"] == large.nbytes
    clpin.write(queue, buf, large, pin_memory=False)
    s3 = clpin.stats(queue)
    d = delta(s2, s3)
    assert d["bytes_unpinned"] == large.nbytes
    assert d["bytes_staged"] == d["bytes_pipelined"] == 0
    pinned = clpin.pin_memory(queue, large)
    s4 = clpin.stats(queue)
    clpin.write(queue, buf, pinned)
    clpin.write(queue, buf, pinned[100:300], offset=5)  # a slice of a block: direct too
    s5 = clpin.stats(queue)
    d = delta(s4, s5)
    assert d["bytes_pinned_direct"] == large.nbytes + 200
    assert d["bytes_staged"] == d["bytes_pipelined"] == d["bytes_unpinned"] == 0
    assert np.array_equal(device_bytes(queue, buf)[5:205], large[100:300])
    del pinned


def test_paths_of_read(queue, make_buffer):
    buf = make_buffer(4 * CHUNK)
    fill_device(queue, buf, pattern(4 * CHUNK, 3))
    s0 = clpin.stats(queue)
    out = np.empty(4 * CHUNK, np.uint8)
    clpin.read(queue, buf, out[: CHUNK // 4])
    s1 = clpin.stats(queue)
    assert delta(s0, s1)["bytes_staged"] == CHUNK // 4
    clpin.read(queue, buf, out)
    s2 = clpin.stats(queue)
    assert delta(s1, s2)["bytes_pipelined"] == out.nbytes
    pinned = clpin.empty_pinned(queue, out.shape, out.dtype)
    clpin.read(queue, buf, pinned)
    s3 = clpin.stats(queue)
    assert delta(s2, s3)["bytes_pinned_direct"] == out.nbytes
    assert np.array_equal(pinned, pattern(4 * CHUNK, 3))
    clpin.read(queue, buf, out, pin_memory=False)
    assert delta(s3, clpin.stats(queue))["bytes_unpinned"] == out.nbytes
    del pinned


def test_non_contiguous_copy_lands_in_pinned_memory(queue, make_buffer):
    a = np.arange(4096, dtype=np.float32).reshape(64, 64).T
    buf = make_buffer(a.nbytes)
    s0 = clpin.stats(queue)
    clpin.write(queue, buf, a)
    d = delta(s0, clpin.stats(queue))
    assert d["bytes_pinned_direct"] == a.nbytes  # one copy, then straight to DMA
    assert d["bytes_staged"] == d["bytes_pipelined"] == 0
    s1 = clpin.stats(queue)
    clpin.write(queue, buf, a, pin_memory=False)
    assert delta(s1, clpin.stats(queue))["bytes_unpinned"] == a.nbytes


def test_two_contexts(device, queue, make_buffer):
    other = cl.Context([device])
    try:
        q2 = cl.CommandQueue(other, device)
        b2 = cl.Buffer(other, cl.mem_flags.READ_WRITE, 256)
        a = pattern(256, 9)
        clpin.write(q2, b2, a)
        assert np.array_equal(device_bytes(q2, b2), a)
        assert clpin.stats(other)["bytes_staged"] == 256
        with pytest.raises(clpin.Error):  # a buffer of another context
            clpin.write(queue, b2, a)
    finally:
        clpin.release_context(other)
