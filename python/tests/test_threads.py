# SPDX-License-Identifier: Apache-2.0
"""Several Python threads transferring at once. The binding releases the GIL
for every foreign call: a thread blocked inside clpin_write must not stop
the others."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pyopencl as cl
import pytest

import clpin
from conftest import CHUNK, device_bytes, pattern


def test_gil_is_released_during_a_blocking_write(ctx, queue, make_buffer):
    gate = cl.UserEvent(ctx)
    buf = make_buffer(4096)
    a = pattern(4096, 21)
    done = threading.Event()
    errors = []

    def blocked() -> None:
        try:
            clpin.write(queue, buf, a, wait_for=[gate])  # blocking: returns after the gate
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        done.set()

    t = threading.Thread(target=blocked)
    t.start()
    # This thread runs Python while the other sits in clpin_write: with the
    # GIL held there it would hang here instead.
    spins = sum(1 for _ in range(200000))
    assert spins == 200000
    assert not done.wait(0.3), "the write returned before its wait list completed"
    gate.set_status(cl.command_execution_status.COMPLETE)
    t.join(30)
    assert done.is_set() and not errors
    assert np.array_equal(device_bytes(queue, buf), a)


@pytest.mark.parametrize("pin", [True, False])
def test_threads_transfer_at_once(ctx, device, pin):
    sizes = [1000, 4096, 3 * CHUNK + 5]
    failures = []
    start = threading.Barrier(4)

    def worker(n: int) -> None:
        try:
            q = cl.CommandQueue(ctx, device)
            for i in range(12):
                size = sizes[(n + i) % len(sizes)]
                buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size)
                a = pattern(size, 100 * n + i)
                if i == 0:
                    start.wait()
                if i % 3 == 0:
                    p = clpin.pin_memory(q, a)
                    clpin.write(q, buf, p, pin_memory=pin)
                    del p
                elif i % 3 == 1:
                    clpin.write(q, buf, a, pin_memory=pin, non_blocking=True).wait()
                else:
                    clpin.write(q, buf, a[::1], pin_memory=pin)
                out = np.empty(size, np.uint8)
                clpin.read(q, buf, out, pin_memory=pin)
                if not np.array_equal(out, a):
                    failures.append(f"thread {n} round {i}: data differs")
                if i % 4 == 0:
                    gc.collect()
        except Exception as exc:
            failures.append(f"thread {n}: {exc!r}")

    s0 = clpin.stats(ctx)
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    s1 = clpin.stats(ctx)
    moved = sum(s1[k] - s0[k] for k in
                ("bytes_staged", "bytes_pipelined", "bytes_pinned_direct", "bytes_unpinned"))
    # every byte written and read once, each counted by exactly one path
    assert moved == 2 * sum(sizes[(n + i) % 3] for n in range(4) for i in range(12))
    if pin:
        assert s1["bytes_pipelined"] > s0["bytes_pipelined"]
        assert s1["bytes_pinned_direct"] > s0["bytes_pinned_direct"]
    else:
        assert s1["bytes_staged"] == s0["bytes_staged"]
    gc.collect()
    assert s1["bytes_cached"] + s1["bytes_in_use"] + s1["bytes_in_flight"] == s1["bytes_reserved"]
