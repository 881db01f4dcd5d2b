# SPDX-License-Identifier: Apache-2.0
"""Every bad argument raises TypeError or ValueError before any OpenCL call
(the buffer and the pool's counters are untouched), and clpin's own failures
raise clpin.Error with the code and clpin_strerror's text."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array
import pytest

import clpin
from conftest import device_bytes, fill_device

GOOD = np.arange(16, dtype=np.uint8)
BAD_DTYPES = [np.bool_, np.complex64, np.complex128, object, ">f4" if np.little_endian else "<f4",
              "U3", np.longdouble]


@pytest.fixture
def buf(queue, make_buffer):
    b = make_buffer(64)
    fill_device(queue, b, np.full(64, 0x5A, np.uint8))
    return b


def untouched(queue, buf, before):
    assert np.array_equal(device_bytes(queue, buf), np.full(64, 0x5A, np.uint8))
    after = clpin.stats(queue)
    assert after["bytes_staged"] == before["bytes_staged"]
    assert after["bytes_unpinned"] == before["bytes_unpinned"]
    assert after["bytes_pinned_direct"] == before["bytes_pinned_direct"]


def transfer_cases(ctx, queue, buf):
    """(exception, function, args, kwargs) for write and read."""
    ro = np.zeros(16, np.uint8)
    ro.flags.writeable = False
    strided = np.zeros(32, np.uint8)[::2]
    not_contig_dev = cl_array.zeros(queue, 32, np.uint8)[::2]
    cases = []
    for fn, out in ((clpin.write, GOOD), (clpin.read, np.zeros(16, np.uint8))):
        cases += [
            (TypeError, fn, (ctx, buf, out), {}),
            (TypeError, fn, (None, buf, out), {}),
            (TypeError, fn, (queue, out, out), {}),
            (TypeError, fn, (queue, buf.int_ptr, out), {}),
            (TypeError, fn, (queue, buf, list(out)), {}),
            (TypeError, fn, (queue, buf, b"0123456789abcdef"), {}),
            (TypeError, fn, (queue, buf, out), {"offset": 1.5}),
            (TypeError, fn, (queue, buf, out), {"offset": "0"}),
            (TypeError, fn, (queue, buf, out), {"offset": True}),
            (ValueError, fn, (queue, buf, out), {"offset": -1}),
            (ValueError, fn, (queue, buf, out), {"offset": 49}),
            (ValueError, fn, (queue, buf, out), {"offset": 1 << 70}),
            (ValueError, fn, (queue, buf, np.zeros(65, np.uint8)), {}),
            (TypeError, fn, (queue, buf, out), {"pin_memory": "yes"}),
            (TypeError, fn, (queue, buf, out), {"pin_memory": None}),
            (TypeError, fn, (queue, buf, out), {"non_blocking": 1}),
            (TypeError, fn, (queue, buf, out), {"wait_for": [1]}),
            (TypeError, fn, (queue, buf, out), {"wait_for": [None]}),
            (TypeError, fn, (queue, buf, out), {"wait_for": 5}),
            (TypeError, fn, (queue, buf, out), {"wait_for": cl.UserEvent(ctx)}),
            (ValueError, fn, (queue, not_contig_dev, out), {}),
        ]
        cases += [(TypeError, fn, (queue, buf, np.zeros(2, dt)), {}) for dt in BAD_DTYPES]
    cases += [
        (ValueError, clpin.read, (queue, buf, strided), {}),
        (ValueError, clpin.read, (queue, buf, np.zeros((4, 4), np.uint8).T), {}),
        (ValueError, clpin.read, (queue, buf, ro), {}),
    ]
    return cases


def test_transfers_reject_bad_arguments(ctx, queue, buf):
    before = clpin.stats(queue)
    for i, (exc, fn, args, kwargs) in enumerate(transfer_cases(ctx, queue, buf)):
        with pytest.raises(exc):
            fn(*args, **kwargs)
    untouched(queue, buf, before)
    assert clpin.pending() == 0


@pytest.mark.parametrize("shape,exc", [
    (-1, ValueError), ((3, -2), ValueError), ("3", TypeError), (2.5, TypeError),
    ((2, 2.0), TypeError), (None, TypeError), (True, TypeError), ((1, False), TypeError),
    ((1 << 40, 1 << 40), ValueError)])
def test_empty_pinned_bad_shape(queue, shape, exc):
    with pytest.raises(exc):
        clpin.empty_pinned(queue, shape, np.uint8)
    assert clpin.stats(queue)["blocks_in_use"] == 0


@pytest.mark.parametrize("dtype", BAD_DTYPES + ["nonsense", 3.5], ids=str)
def test_empty_pinned_bad_dtype(queue, dtype):
    with pytest.raises(TypeError):
        clpin.empty_pinned(queue, 4, dtype)


@pytest.mark.parametrize("who", [None, 0, "queue", GOOD])
def test_queue_or_context_arguments(who):
    for call in (lambda: clpin.empty_pinned(who, 4),
                 lambda: clpin.pin_memory(who, GOOD),
                 lambda: clpin.stats(who),
                 lambda: clpin.release_context(who),
                 lambda: clpin.host_register(who, np.zeros(4096, np.uint8)),
                 lambda: clpin.from_host(who, GOOD)):
        with pytest.raises(TypeError):
            call()


def test_from_host_bad(ctx, queue):
    with pytest.raises(TypeError):
        clpin.from_host(ctx, GOOD)  # needs a queue
    with pytest.raises(TypeError):
        clpin.from_host(queue, [1, 2, 3])
    with pytest.raises(TypeError):
        clpin.from_host(queue, np.zeros(3, np.complex64))
    with pytest.raises(TypeError):
        clpin.from_host(queue, GOOD, pin_memory=1)
    with pytest.raises(TypeError):
        clpin.from_host(queue, GOOD, non_blocking="no")


def test_pin_memory_bad(queue):
    with pytest.raises(TypeError):
        clpin.pin_memory(queue, [1, 2])
    with pytest.raises(TypeError):
        clpin.pin_memory(queue, np.zeros(2, np.bool_))
    assert clpin.stats(queue)["blocks_in_use"] == 0


def test_to_host_bad(ctx, queue):
    x = clpin.from_host(queue, np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(TypeError):
        clpin.to_host(np.zeros(3))
    with pytest.raises(TypeError):
        clpin.to_host(x, out=np.zeros((3, 4), np.float64))
    with pytest.raises(TypeError):
        clpin.to_host(x, out=[0] * 12)
    with pytest.raises(ValueError):
        clpin.to_host(x, out=np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError):
        clpin.to_host(x, out=np.zeros((4, 3), np.float32).T)
    ro = np.zeros((3, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        clpin.to_host(x, out=ro)
    with pytest.raises(ValueError):
        clpin.to_host(x[:, ::2])
    with pytest.raises(TypeError):
        clpin.to_host(x, pin_memory="yes")
    x_noq = cl_array.Array(ctx, (4,), np.float32)
    with pytest.raises(ValueError):
        clpin.to_host(x_noq)


def test_register_bad(queue):
    with pytest.raises(TypeError):
        clpin.host_register(queue, [1, 2, 3])
    with pytest.raises(TypeError):
        clpin.host_register(queue, np.zeros(8, np.complex128))
    with pytest.raises(ValueError):
        clpin.host_register(queue, np.zeros(64, np.uint8)[::2])
    with pytest.raises(ValueError):
        clpin.host_register(queue, np.zeros(0, np.uint8))
    with pytest.raises(TypeError):
        clpin.host_unregister([1, 2])
    with pytest.raises(ValueError):  # never registered
        clpin.host_unregister(np.zeros(16, np.uint8))
    assert clpin.stats(queue)["bytes_registered"] == 0


def test_error_carries_code_and_text():
    e = clpin.Error(clpin.ERR_OUT_OF_RANGE, "clpin_write")
    assert isinstance(e, RuntimeError)
    assert e.code == -20007
    assert e.name == "CLPIN_ERR_OUT_OF_RANGE"
    assert e.text == clpin.strerror(-20007)
    assert e.text.startswith("CLPIN_ERR_OUT_OF_RANGE")
    assert e.detail == ""
    assert str(e) == "clpin_write: CLPIN_ERR_OUT_OF_RANGE (-20007): " + e.text.split(": ", 1)[1]
    unknown = clpin.Error(-12345)
    assert unknown.name == "" and str(unknown) == "code -12345: unknown error code"


def test_error_carries_the_detail(queue):
    """clpin.Error holds what clpin_last_error_detail() says in C: which
    argument and why, read on the failing thread right after the call."""
    with pytest.raises(clpin.Error) as err:
        clpin.host_lend(queue, np.zeros(64, np.uint8))  # memory clpin does not hold
    e = err.value
    assert e.code == -20005 and e.name == "CLPIN_ERR_FOREIGN_POINTER"
    assert e.call == "clpin_host_lend"
    assert e.detail.startswith("clpin_host_lend: ")  # the public call, not an internal one
    assert "holds the whole range" in e.detail
    assert e.detail.endswith("(" + e.name + ")")
    assert str(e).startswith("clpin_host_lend: CLPIN_ERR_FOREIGN_POINTER (-20005): ")
    assert e.detail in str(e)
    # A second failure on another thread has its own detail, this one's stays.
    import threading
    seen = []

    def other():
        with pytest.raises(clpin.Error) as e2:
            p = clpin.empty_pinned(queue, 64, np.uint8)
            clpin.host_reclaim(queue, p)  # not lent
        seen.append(e2.value)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen[0].name == "CLPIN_ERR_NOT_ON_DEVICE"
    assert "holds the whole range" not in seen[0].detail


def test_strerror():
    assert clpin.strerror(0).startswith("CL_SUCCESS")
    assert clpin.strerror(-5).startswith("CL_OUT_OF_RESOURCES")
    assert clpin.strerror(-20000).startswith("CLPIN_ERR_INVALID_ARGUMENT")
    assert clpin.strerror(123456) == "unknown error code"


def test_version():
    major, minor, patch = (int(p) for p in clpin.version().split("."))
    assert (major, minor) >= (0, 1)
