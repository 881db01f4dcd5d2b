# SPDX-License-Identifier: Apache-2.0
"""Non-blocking transfers: events, wait lists, and array lifetime while a
transfer is in flight (gc.collect() must not free what the device uses)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pyopencl as cl
import pytest

import clpin
from conftest import CHUNK, device_bytes, fill_device, pattern, wait_until

COMPLETE = cl.command_execution_status.COMPLETE


@pytest.mark.parametrize("nbytes", [4096, 4 * CHUNK])
@pytest.mark.parametrize("pin", [True, False])
def test_non_blocking_returns_an_event(queue, make_buffer, nbytes, pin):
    a = pattern(nbytes, 11)
    buf = make_buffer(nbytes)
    ev = clpin.write(queue, buf, a, pin_memory=pin, non_blocking=True)
    assert isinstance(ev, cl.Event)
    ev.wait()
    assert ev.command_execution_status == COMPLETE
    assert np.array_equal(device_bytes(queue, buf), a)
    out = np.zeros(nbytes, np.uint8)
    ev = clpin.read(queue, buf, out, pin_memory=pin, non_blocking=True)
    assert isinstance(ev, cl.Event)
    ev.wait()
    assert np.array_equal(out, a)


def test_wait_for_orders_the_transfer(ctx, queue, make_buffer):
    gate = cl.UserEvent(ctx)
    buf = make_buffer(4096)
    fill_device(queue, buf, np.zeros(4096, np.uint8))
    a = pattern(4096, 12)
    ev = clpin.write(queue, buf, a, non_blocking=True, wait_for=[gate])
    assert ev.command_execution_status != COMPLETE  # held back by the gate
    gate.set_status(COMPLETE)
    ev.wait()
    out = np.empty(4096, np.uint8)
    # a read that waits for the write's event (and a tuple as the wait list)
    clpin.read(queue, buf, out, wait_for=(ev,))
    assert np.array_equal(out, a)


def test_event_chain_of_many_transfers(queue, make_buffer):
    buf = make_buffer(64 * 1024)
    events = []
    for i in range(16):
        chunk = np.full(4096, i, np.uint8)
        events.append(clpin.write(queue, buf, chunk, offset=i * 4096, non_blocking=True,
                                  wait_for=events[-1:]))
    cl.wait_for_events(events)
    got = device_bytes(queue, buf).reshape(16, 4096)
    assert all((got[i] == i).all() for i in range(16))


def test_failed_wait_list_raises_error(ctx, queue, make_buffer):
    bad = cl.UserEvent(ctx)
    bad.set_status(-1)
    buf = make_buffer(4096)
    with pytest.raises(clpin.Error) as info:
        clpin.write(queue, buf, pattern(4096), wait_for=[bad])
    assert info.value.code == -14  # CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST
    assert "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST" in str(info.value)
    with pytest.raises(clpin.Error):
        clpin.read(queue, buf, np.empty(4096, np.uint8), wait_for=[bad], non_blocking=True)


@pytest.mark.parametrize("nbytes", [4096, 4 * CHUNK])
@pytest.mark.parametrize("pin", [True, False])
def test_write_source_lives_until_completion(ctx, queue, make_buffer, nbytes, pin):
    gate = cl.UserEvent(ctx)
    buf = make_buffer(nbytes)
    a = pattern(nbytes, 13)
    want = a.copy()
    alive = weakref.ref(a)
    ev = clpin.write(queue, buf, a, pin_memory=pin, non_blocking=True, wait_for=[gate])
    del a
    gc.collect()
    assert alive() is not None, "clpin dropped the source of a transfer in flight"
    assert clpin.pending() >= 1
    gate.set_status(COMPLETE)
    ev.wait()
    assert np.array_equal(device_bytes(queue, buf), want)
    assert wait_until(lambda: alive() is None), "the source outlived its transfer"


def test_read_destination_lives_until_completion(ctx, queue, make_buffer):
    gate = cl.UserEvent(ctx)
    nbytes = 4 * CHUNK
    buf = make_buffer(nbytes)
    fill_device(queue, buf, pattern(nbytes, 14))
    out = np.zeros(nbytes, np.uint8)
    alive = weakref.ref(out)
    ev = clpin.read(queue, buf, out, non_blocking=True, wait_for=[gate])
    del out
    gc.collect()
    assert alive() is not None
    gate.set_status(COMPLETE)
    ev.wait()
    assert wait_until(lambda: alive() is None)


def test_non_contiguous_copy_lives_until_completion(ctx, queue, make_buffer):
    gate = cl.UserEvent(ctx)
    base = np.arange(2 * CHUNK, dtype=np.int32).reshape(-1, 2)
    view = base[:, 1]
    buf = make_buffer(view.nbytes)
    s0 = clpin.stats(queue)
    ev = clpin.write(queue, buf, view, non_blocking=True, wait_for=[gate])
    del view, base
    gc.collect()
    assert clpin.stats(queue)["blocks_in_use"] == s0["blocks_in_use"] + 1  # the copy's block
    gate.set_status(COMPLETE)
    ev.wait()
    assert np.array_equal(device_bytes(queue, buf).view(np.int32),
                          np.arange(2 * CHUNK, dtype=np.int32)[1::2])
    assert wait_until(lambda: clpin.stats(queue)["blocks_in_use"] == s0["blocks_in_use"])


def test_pinned_block_not_reused_while_in_flight(ctx, queue, make_buffer):
    gate = cl.UserEvent(ctx)
    buf = make_buffer(4 * CHUNK)
    p = clpin.empty_pinned(queue, 4 * CHUNK, np.uint8)
    p[:] = pattern(4 * CHUNK, 15)
    addr = p.__array_interface__["data"][0]
    ev = clpin.write(queue, buf, p, non_blocking=True, wait_for=[gate])
    in_use = clpin.stats(queue)["blocks_in_use"]
    del p
    gc.collect()
    assert clpin.stats(queue)["blocks_in_use"] == in_use
    q = clpin.empty_pinned(queue, 4 * CHUNK, np.uint8)  # must not get the same block
    assert q.__array_interface__["data"][0] != addr
    q[:] = 0
    gate.set_status(COMPLETE)
    ev.wait()
    assert np.array_equal(device_bytes(queue, buf), pattern(4 * CHUNK, 15))
    del q
    assert wait_until(lambda: clpin.stats(queue)["blocks_in_use"] == in_use - 1)


def test_many_non_blocking_with_gc_in_between(queue, make_buffer):
    buf = make_buffer(64 * 4096)
    events = []
    for i in range(64):
        events.append(clpin.write(queue, buf, np.full(4096, i, np.uint8), offset=i * 4096,
                                  non_blocking=True))
        if i % 8 == 0:
            gc.collect()
    cl.wait_for_events(events)
    got = device_bytes(queue, buf).reshape(64, 4096)
    assert all((got[i] == i).all() for i in range(64))
    assert wait_until(lambda: clpin.pending() == 0)
