# SPDX-License-Identifier: Apache-2.0
"""empty_pinned and pin_memory: real numpy arrays on pool blocks, returned
to the pool when the array and all its views are gone."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import clpin
from conftest import wait_until


@pytest.mark.parametrize("dtype", clpin.DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), 0, 5, (3, 4), [2, 3, 4], (1, 0, 3)], ids=str)
def test_empty_pinned_shapes_and_dtypes(queue, dtype, shape):
    a = clpin.empty_pinned(queue, shape, dtype)
    want = (shape,) if isinstance(shape, int) else tuple(shape)
    assert type(a) is np.ndarray
    assert a.shape == want and a.dtype == dtype
    assert a.flags.c_contiguous and a.flags.writeable
    a[...] = 1
    assert (a == 1).all()


def test_default_dtype_is_float32(queue):
    assert clpin.empty_pinned(queue, 3).dtype == np.float32


def test_empty_pinned_accepts_a_context(ctx):
    a = clpin.empty_pinned(ctx, (8, 8), np.int64)
    assert clpin.stats(ctx)["blocks_in_use"] == 1
    del a


def test_memory_is_a_pool_block(queue):
    s0 = clpin.stats(queue)
    a = clpin.empty_pinned(queue, 1000, np.float64)
    s1 = clpin.stats(queue)
    assert s1["blocks_in_use"] == s0["blocks_in_use"] + 1
    assert s1["bytes_requested"] - s0["bytes_requested"] == 8000
    assert s1["bytes_in_use"] - s0["bytes_in_use"] == 8192  # power-of-two bucket
    del a


def test_block_returns_when_last_view_dies(queue):
    base = clpin.stats(queue)["blocks_in_use"]
    a = clpin.empty_pinned(queue, (100, 100), np.float32)
    views = [a[3], a.T, a[::2, 1:], a.reshape(-1), a.view(np.uint8)]
    del a
    gc.collect()
    assert clpin.stats(queue)["blocks_in_use"] == base + 1
    views.pop()[:] = 7
    gc.collect()
    assert clpin.stats(queue)["blocks_in_use"] == base + 1
    del views
    gc.collect()
    assert clpin.stats(queue)["blocks_in_use"] == base
    assert clpin.stats(queue)["blocks_cached"] >= 1


def test_reference_cycle_is_collected(queue):
    base = clpin.stats(queue)["blocks_in_use"]

    class Holder:
        pass

    h = Holder()
    h.me = h
    h.arr = clpin.empty_pinned(queue, 4096, np.uint8)
    del h
    assert wait_until(lambda: clpin.stats(queue)["blocks_in_use"] == base)


def test_pool_hit_reuses_the_block(queue):
    a = clpin.empty_pinned(queue, 50000, np.uint8)
    addr = a.__array_interface__["data"][0]
    del a
    gc.collect()
    s0 = clpin.stats(queue)
    b = clpin.empty_pinned(queue, 40000, np.uint8)  # same 64 KiB bucket
    s1 = clpin.stats(queue)
    assert s1["hits"] == s0["hits"] + 1 and s1["misses"] == s0["misses"]
    assert b.__array_interface__["data"][0] == addr
    del b


@pytest.mark.parametrize("dtype", clpin.DTYPES, ids=str)
def test_pin_memory_copies(queue, dtype):
    src = (np.arange(60) % 50).astype(dtype).reshape(3, 4, 5)
    for a in (src, src.transpose(2, 0, 1), src[:, ::2]):
        p = clpin.pin_memory(queue, a)
        assert p.shape == a.shape and p.dtype == a.dtype and p.flags.c_contiguous
        assert np.array_equal(p, a)
        assert p.__array_interface__["data"][0] != a.__array_interface__["data"][0]
        p[...] = 0
        assert not np.array_equal(a, p)  # a copy, not a view


def test_pin_memory_of_a_pinned_array_is_a_new_block(queue):
    a = clpin.empty_pinned(queue, 10, np.int32)
    a[:] = np.arange(10)
    b = clpin.pin_memory(queue, a)
    assert np.array_equal(a, b)
    assert clpin.stats(queue)["blocks_in_use"] == 2
    del a, b


def test_too_large_is_a_clpin_error(queue):
    with pytest.raises(clpin.Error) as info:
        clpin.empty_pinned(queue, 1 << 50, np.uint8)
    assert info.value.code == clpin.ERR_INVALID_SIZE
    assert clpin.stats(queue)["blocks_in_use"] == 0
