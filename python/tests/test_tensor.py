# SPDX-License-Identifier: Apache-2.0
"""from_host and to_host: numpy arrays to pyopencl.array.Array and back."""

from __future__ import annotations

import weakref

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array
import pytest

import clpin
from conftest import CHUNK, delta, wait_until


@pytest.mark.parametrize("dtype", clpin.DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (9,), (4, 6), (2, 3, 5)], ids=str)
def test_from_host_to_host(queue, dtype, shape):
    a = (np.arange(int(np.prod(shape))) % 100).astype(dtype).reshape(shape)
    x = clpin.from_host(queue, a)
    assert isinstance(x, cl_array.Array)
    assert x.shape == a.shape and x.dtype == a.dtype and x.queue is queue
    assert np.array_equal(x.get(), a)  # pyopencl's own read agrees
    y = clpin.to_host(x)
    assert type(y) is np.ndarray and y.shape == a.shape and y.dtype == a.dtype
    assert np.array_equal(y, a)


def test_from_host_non_contiguous(queue):
    a = np.arange(200, dtype=np.float32).reshape(10, 20)[:, ::3].T
    x = clpin.from_host(queue, a)
    assert x.flags.c_contiguous and x.shape == a.shape
    assert np.array_equal(x.get(), a)


@pytest.mark.parametrize("pin", [True, False])
def test_paths(queue, pin):
    a = np.ones(4 * CHUNK, np.uint8)
    s0 = clpin.stats(queue)
    x = clpin.from_host(queue, a, pin_memory=pin)
    y = clpin.to_host(x, pin_memory=pin)
    d = delta(s0, clpin.stats(queue))
    if pin:
        assert d["bytes_pipelined"] == 2 * a.nbytes and d["bytes_unpinned"] == 0
    else:
        assert d["bytes_unpinned"] == 2 * a.nbytes and d["bytes_pipelined"] == 0
    assert np.array_equal(y, a)


def test_to_host_into_out(queue):
    a = np.arange(1000, dtype=np.int16)
    x = clpin.from_host(queue, a)
    out = clpin.empty_pinned(queue, 1000, np.int16)
    s0 = clpin.stats(queue)
    y = clpin.to_host(x, out=out)
    assert y is out and np.array_equal(out, a)
    assert delta(s0, clpin.stats(queue))["bytes_pinned_direct"] == a.nbytes
    del out, y


def test_to_host_of_a_slice(queue):
    x = clpin.from_host(queue, np.arange(100, dtype=np.float64))
    assert np.array_equal(clpin.to_host(x[40:50]), np.arange(40, 50, dtype=np.float64))


def test_non_blocking_from_host(ctx, queue):
    a = np.arange(4 * CHUNK, dtype=np.uint8)
    want = a.copy()
    alive = weakref.ref(a)
    x = clpin.from_host(queue, a, non_blocking=True)
    assert len(x.events) == 1 and isinstance(x.events[0], cl.Event)
    del a
    x.finish()
    assert np.array_equal(x.get(), want)
    assert wait_until(lambda: alive() is None)


def test_non_blocking_to_host_waits_for_kernels_events(ctx, queue):
    x = clpin.from_host(queue, np.arange(64, dtype=np.int32))
    gate = cl.UserEvent(ctx)
    x.add_event(gate)  # as a kernel still writing x would be
    out = np.zeros(64, np.int32)
    y = clpin.to_host(x, out=out, non_blocking=True)
    assert y is out
    assert x.events[-1].command_execution_status != cl.command_execution_status.COMPLETE
    gate.set_status(cl.command_execution_status.COMPLETE)
    x.finish()
    assert np.array_equal(out, np.arange(64))
