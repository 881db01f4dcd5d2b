# SPDX-License-Identifier: Apache-2.0
"""Zero copy on host-unified devices (docs/ZERO_COPY.md): from_host with
zero_copy=True uses the array in place where the device's rule allows (POCL
here), copies otherwise; host_buffer hands kernels a pinned array in place.
The stats prove which path ran."""

from __future__ import annotations

import gc

import numpy as np
import pyopencl as cl
import pytest

import clpin
from conftest import delta, pattern

KERNEL = """
__kernel void axpb(__global float *x, uint off) {
  size_t i = get_global_id(0) + off;
  x[i] = x[i] * 2.0f + 1.0f;
}
"""


@pytest.fixture
def axpb(ctx):
    return cl.Program(ctx, KERNEL).build().axpb


@pytest.fixture(autouse=True)
def host_unified(device):
    # These tests are about host-unified devices: CI runs them on POCL.
    assert device.host_unified_memory, "zero-copy tests need a host-unified device (POCL in CI)"


def aligned(nbytes: int, dtype=np.float32, misalign: int = 0) -> np.ndarray:
    raw = np.zeros(nbytes + 8192, np.uint8)
    start = (-raw.ctypes.data) % 4096 + misalign
    return raw[start:start + nbytes].view(dtype)


def test_from_host_zero_copy_uses_the_array_in_place(queue, axpb):
    n = 1 << 18
    a = aligned(n * 4)
    a[:] = np.arange(n, dtype=np.float32) * 0.5
    want = a * 2 + 1
    s0 = clpin.stats(queue)
    x = clpin.from_host(queue, a, zero_copy=True)
    d = delta(s0, clpin.stats(queue))
    assert d["bytes_zero_copy"] == a.nbytes
    assert d["bytes_unpinned"] == d["bytes_staged"] == d["bytes_pipelined"] == 0
    assert d["bytes_pinned_direct"] == 0
    axpb(queue, (n,), None, x.data, np.uint32(0))
    assert np.array_equal(x.get(), want)
    # The buffer is the array's memory: a map of it is the array itself.
    mapped, _ = cl.enqueue_map_buffer(queue, x.data, cl.map_flags.READ, 0, (n,), np.float32)
    assert mapped.ctypes.data == a.ctypes.data
    assert np.array_equal(mapped, want)
    del mapped
    queue.finish()


def test_zero_copy_result_keeps_the_array_alive(queue, axpb):
    n = 4096

    def make():
        a = aligned(n * 4)
        a[:] = 3.0
        return clpin.from_host(queue, a, zero_copy=True)

    x = make()
    gc.collect()
    axpb(queue, (n,), None, x.data, np.uint32(0))
    assert np.array_equal(x.get(), np.full(n, 7.0, np.float32))
    view = x[10:20]
    del x
    gc.collect()
    assert np.array_equal(view.get(), np.full(10, 7.0, np.float32))


@pytest.mark.parametrize("misalign", [1, 4])
def test_misaligned_array_is_copied(queue, axpb, misalign):
    n = 1 << 14
    a = aligned(n * 4, np.uint8, misalign).view(np.uint8)
    a[:] = pattern(n * 4, 3)
    s0 = clpin.stats(queue)
    x = clpin.from_host(queue, a, zero_copy=True)
    assert delta(s0, clpin.stats(queue))["bytes_zero_copy"] == 0
    a[:] = 0  # a copy: the result does not see the caller's later writes
    assert np.array_equal(x.get(), pattern(n * 4, 3))


def test_zero_copy_false_and_empty_arrays_copy(queue):
    a = aligned(4096 * 4)
    a[:] = 1.5
    s0 = clpin.stats(queue)
    x = clpin.from_host(queue, a)
    e = clpin.from_host(queue, np.zeros(0, np.float32), zero_copy=True)
    assert delta(s0, clpin.stats(queue))["bytes_zero_copy"] == 0
    a[:] = 0
    assert np.array_equal(x.get(), np.full(4096, 1.5, np.float32))
    assert e.shape == (0,)
    with pytest.raises(TypeError):
        clpin.from_host(queue, a, zero_copy="yes")


def test_host_buffer_runs_kernels_on_a_pinned_array_in_place(queue, axpb):
    n = 100000
    p = clpin.empty_pinned(queue, n, np.float32)
    p[:] = np.arange(n, dtype=np.float32)
    part = p[1000:]
    buf, off = clpin.host_buffer(queue, part)
    assert off % 4 == 0 and off >= 4000
    ev = clpin.host_lend(queue, part)
    k = axpb(queue, (n - 1000,), None, buf, np.uint32(off // 4), wait_for=[ev])
    assert clpin.host_reclaim(queue, part, wait_for=[k]) is None
    want = np.arange(n, dtype=np.float32)
    want[1000:] = want[1000:] * 2 + 1
    assert np.array_equal(p, want)
    del buf, part, p


def test_host_lend_several_ranges_and_refusals(queue, axpb):
    n = 8192
    p = clpin.empty_pinned(queue, n, np.float32)
    p[:] = 1.0
    a, b = p[:1024], p[4096:5120]
    buf, off = clpin.host_buffer(queue, p)
    clpin.host_lend(queue, a)
    clpin.host_lend(queue, b)
    axpb(queue, (1024,), None, buf, np.uint32(off // 4))
    axpb(queue, (1024,), None, buf, np.uint32(off // 4 + 4096))
    with pytest.raises(clpin.Error) as err:
        clpin.write(queue, buf, p[2000:2010], pin_memory=False)
    assert err.value.code == -20016  # CLPIN_ERR_ON_DEVICE: the block is the device's
    clpin.host_reclaim(queue, a)
    ev = clpin.host_reclaim(queue, b, non_blocking=True)
    ev.wait()
    want = np.ones(n, np.float32)
    want[:1024] = 3.0
    want[4096:5120] = 3.0
    assert np.array_equal(p, want)
    with pytest.raises(clpin.Error) as err:
        clpin.host_reclaim(queue, a)
    assert err.value.code == -20017  # CLPIN_ERR_NOT_ON_DEVICE
    with pytest.raises(clpin.Error) as err:
        clpin.host_lend(queue, np.zeros(64, np.uint8))
    assert err.value.code == -20005  # CLPIN_ERR_FOREIGN_POINTER
    with pytest.raises(ValueError):
        clpin.host_lend(queue, np.zeros(0, np.uint8))
    del buf, a, b, p


def test_host_buffer_bad_input(queue):
    with pytest.raises(clpin.Error) as err:
        clpin.host_buffer(queue, np.zeros(64, np.uint8))
    assert err.value.code == -20005  # CLPIN_ERR_FOREIGN_POINTER
    with pytest.raises(ValueError):
        clpin.host_buffer(queue, np.zeros(0, np.uint8))
