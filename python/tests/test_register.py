# SPDX-License-Identifier: Apache-2.0
"""host_register / host_unregister (cudaHostRegister analogue).

These need clpin_host_register in the loaded library; against an older
libclpin they are skipped (the skip names the library), never faked.
Their bad-argument checks, which need no library support, are in
test_bad_input.py and always run."""

from __future__ import annotations

import gc
import os
import weakref

import numpy as np
import pyopencl as cl
import pytest

import clpin
from conftest import CHUNK, delta, device_bytes, fill_device, pattern, wait_until

if os.environ.get("CLPIN_REQUIRE_HOST_REGISTER") == "1" and not clpin.has_host_register():
    # ci/stages/45-python.sh sets it when include/clpin.h declares the call:
    # then a library without it is a build mismatch, not a reason to skip.
    raise AssertionError(f"{clpin.library_path} lacks clpin_host_register, which clpin.h declares")

pytestmark = pytest.mark.skipif(
    not clpin.has_host_register(),
    reason=f"{clpin.library_path} ({clpin.version()}) has no clpin_host_register")


def test_register_makes_transfers_direct(queue, make_buffer):
    a = pattern(4 * CHUNK, 31)
    buf = make_buffer(a.nbytes)
    clpin.host_register(queue, a)
    try:
        s = clpin.stats(queue)
        # clpin pins the whole pages the array touches (clpin.h).
        page = 4096
        start = a.ctypes.data // page * page
        end = -(-(a.ctypes.data + a.nbytes) // page) * page
        assert s["bytes_registered"] == end - start
        clpin.write(queue, buf, a)
        clpin.write(queue, buf, a[100:300], offset=7)  # any range inside it
        d = delta(s, clpin.stats(queue))
        assert d["bytes_pinned_direct"] == a.nbytes + 200
        assert d["bytes_staged"] == d["bytes_pipelined"] == d["bytes_unpinned"] == 0
        want = a.copy()
        want[7:207] = a[100:300]
        assert np.array_equal(device_bytes(queue, buf), want)
        a[:] = 0  # the host changes the data: transfers see the new bytes
        fill_device(queue, buf, pattern(a.nbytes, 32))
        s = clpin.stats(queue)
        clpin.read(queue, buf, a)
        assert np.array_equal(a, pattern(a.nbytes, 32))
        assert delta(s, clpin.stats(queue))["bytes_pinned_direct"] == a.nbytes
    finally:
        clpin.host_unregister(a)
    s = clpin.stats(queue)
    assert s["bytes_registered"] == 0
    clpin.write(queue, buf, a)
    assert delta(s, clpin.stats(queue))["bytes_pipelined"] == a.nbytes  # pageable again


@pytest.mark.parametrize("dtype", clpin.DTYPES, ids=str)
def test_register_every_dtype_with_a_context(ctx, queue, make_buffer, dtype):
    a = np.zeros((8, 16), dtype)
    clpin.host_register(ctx, a)
    try:
        buf = make_buffer(a.nbytes)
        fill_device(queue, buf, pattern(a.nbytes, 33))
        clpin.read(queue, buf, a)
        assert a.tobytes() == pattern(a.nbytes, 33).tobytes()
    finally:
        clpin.host_unregister(a)


def test_overlap_and_double_register_are_errors(queue):
    a = np.zeros(3 * 4096, np.uint8)
    clpin.host_register(queue, a[4096:8192])
    try:
        with pytest.raises(clpin.Error):
            clpin.host_register(queue, a[4096:8192])
        with pytest.raises(clpin.Error):
            clpin.host_register(queue, a[:5000])
        view = a[4096:8192]
        page = 4096
        start = view.ctypes.data // page * page
        end = -(-(view.ctypes.data + view.nbytes) // page) * page
        assert clpin.stats(queue)["bytes_registered"] == end - start
    finally:
        clpin.host_unregister(a[4096:8192])


def test_registered_array_is_kept_alive(queue):
    a = np.ones(8192, np.uint8)
    alive = weakref.ref(a)
    clpin.host_register(queue, a)
    view = a[:10]
    del a
    gc.collect()
    assert alive() is not None
    clpin.host_unregister(view)  # same start address
    del view
    assert wait_until(lambda: alive() is None)


def test_unregister_waits_for_transfers(ctx, queue, make_buffer):
    a = pattern(4 * CHUNK, 34)
    buf = make_buffer(a.nbytes)
    clpin.host_register(queue, a)
    gate = cl.UserEvent(ctx)
    ev = clpin.write(queue, buf, a, non_blocking=True, wait_for=[gate])
    gate.set_status(cl.command_execution_status.COMPLETE)
    clpin.host_unregister(a)
    assert ev.command_execution_status == cl.command_execution_status.COMPLETE
    assert np.array_equal(device_bytes(queue, buf), a)


def test_release_context_unregisters(device):
    ctx = cl.Context([device])
    a = np.zeros(8192, np.uint8)
    clpin.host_register(ctx, a)
    clpin.release_context(ctx)
    with pytest.raises(ValueError):  # clpin forgot it with the pool
        clpin.host_unregister(a)
    clpin.host_register(ctx, a)  # a new pool accepts it again
    clpin.host_unregister(a)
    clpin.release_context(ctx)
