# SPDX-License-Identifier: Apache-2.0
"""stats() and release_context()."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyopencl as cl
import pytest

import clpin
from clpin import _native
from conftest import pattern

FIELDS = ["hits", "misses", "driver_allocs", "driver_frees", "blocks_cached", "bytes_cached",
          "blocks_in_use", "bytes_in_use", "blocks_in_flight", "bytes_in_flight",
          "bytes_requested", "bytes_reserved", "peak_bytes_reserved", "oom_retries", "fallbacks",
          "bytes_pinned_direct", "bytes_staged", "bytes_pipelined", "bytes_unpinned",
          "bytes_registered", "bytes_zero_copy", "bytes_file_read", "bytes_file_written"]


def test_fields_in_clpin_stats_order(queue):
    s = clpin.stats(queue)
    assert list(s) == FIELDS
    assert all(isinstance(v, int) and v >= 0 for v in s.values())


def test_struct_size_includes_bytes_file_written():
    fields = dict(_native.ffi.typeof("clpin_stats").fields)
    assert list(fields)[-1] == "bytes_file_written"
    assert _native.ffi.sizeof("clpin_stats") == fields["bytes_file_written"].offset + \
        _native.ffi.sizeof("uint64_t")


def test_fresh_pool_and_counters(ctx, queue):
    s0 = clpin.stats(ctx)
    assert s0["bytes_reserved"] == 0 and s0["hits"] == 0 and s0["misses"] == 0
    a = clpin.empty_pinned(queue, 10000, np.uint8)
    s1 = clpin.stats(queue)  # a queue and its context name the same pool
    assert s1["misses"] == 1 and s1["driver_allocs"] == 1
    assert s1["bytes_reserved"] == s1["peak_bytes_reserved"] == 16384
    del a
    gc.collect()
    s2 = clpin.stats(ctx)
    assert s2["blocks_cached"] == 1 and s2["bytes_in_use"] == 0
    assert s2["bytes_cached"] + s2["bytes_in_use"] + s2["bytes_in_flight"] == s2["bytes_reserved"]


def test_release_context_frees_and_starts_over(device):
    ctx = cl.Context([device])
    q = cl.CommandQueue(ctx, device)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4096)
    clpin.write(q, buf, pattern(4096))
    assert clpin.stats(ctx)["bytes_reserved"] > 0
    clpin.release_context(ctx)
    s = clpin.stats(ctx)  # a new, empty pool
    assert s["bytes_reserved"] == 0 and s["bytes_staged"] == 0
    clpin.write(q, buf, pattern(4096))  # and it works again
    assert clpin.stats(q)["bytes_staged"] == 4096
    clpin.release_context(q)  # a queue names its context


def test_release_context_refuses_while_pinned_arrays_live(device):
    ctx = cl.Context([device])
    a = clpin.empty_pinned(ctx, 100, np.int32)
    a[:] = 3
    with pytest.raises(RuntimeError, match="still alive"):
        clpin.release_context(ctx)
    assert (a == 3).all()  # still valid memory
    assert clpin.stats(ctx)["blocks_in_use"] == 1
    del a
    clpin.release_context(ctx)


def test_release_context_waits_for_transfers_in_flight(device):
    ctx = cl.Context([device])
    q = cl.CommandQueue(ctx, device)
    gate = cl.UserEvent(ctx)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 1 << 20)
    ev = clpin.write(q, buf, pattern(1 << 20), non_blocking=True, wait_for=[gate])
    gate.set_status(cl.command_execution_status.COMPLETE)
    clpin.release_context(ctx)
    assert ev.command_execution_status == cl.command_execution_status.COMPLETE
    assert clpin.pending() == 0


def test_pinned_h2d_0_takes_the_plain_path_on_a_unified_device(device):
    if not device.host_unified_memory:
        pytest.skip("the device has its own memory: CLPIN_PINNED_H2D=0 does not apply")
    code = textwrap.dedent("""
        import numpy as np, pyopencl as cl, clpin, os
        want = os.environ.get("CLPIN_TEST_PLATFORM", "")
        p = [p for p in cl.get_platforms() if want in p.name][0]
        ctx = cl.Context([p.get_devices()[0]]); q = cl.CommandQueue(ctx)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 1 << 20)
        clpin.write(q, buf, np.ones(1 << 20, np.uint8))
        s = clpin.stats(q)
        print(s["bytes_unpinned"], s["bytes_staged"] + s["bytes_pipelined"])
        clpin.release_context(ctx)
    """)
    env = dict(os.environ, CLPIN_PINNED_H2D="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(1 << 20), "0"]
