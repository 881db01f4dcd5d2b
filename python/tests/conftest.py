# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the clpin Python tests: one POCL (or CLPIN_TEST_PLATFORM)
context and queue per test, and the environment the path assertions need.

The options are read once, when the library is first used, so they are set
here, before clpin is imported: CLPIN_PINNED_H2D=1 stages even on POCL's
host-unified CPU device (the default there may be not to), and a 64 KiB
CLPIN_CHUNK makes transfers above 64 KiB take the pipeline.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Callable, Iterator

os.environ["CLPIN_PINNED_H2D"] = "1"
os.environ["CLPIN_CHUNK"] = "65536"
os.environ["CLPIN_STAGE_MIN"] = "0"  # stage every size: the paths under test
os.environ["CLPIN_STAGE_MIN_H2D"] = "0"

import numpy as np  # noqa: E402
import pyopencl as cl  # noqa: E402
import pytest  # noqa: E402

import clpin  # noqa: E402
from workerfns import batch_bytes  # noqa: E402

CHUNK = 65536


def _platform() -> cl.Platform:
    want = os.environ.get("CLPIN_TEST_PLATFORM", "")
    for p in cl.get_platforms():
        if not want or want in p.name:
            return p
    pytest.fail(f"no OpenCL platform matches CLPIN_TEST_PLATFORM={want}")


@pytest.fixture(scope="session")
def device() -> cl.Device:
    return _platform().get_devices()[0]


@pytest.fixture
def ctx(device: cl.Device) -> Iterator[cl.Context]:
    """A fresh context; its pool is released at the end (which also proves
    the test left no pinned array alive: release_context refuses then)."""
    context = cl.Context([device])
    yield context
    gc.collect()
    clpin.release_context(context)


@pytest.fixture
def queue(ctx: cl.Context, device: cl.Device) -> cl.CommandQueue:
    return cl.CommandQueue(ctx, device)


@pytest.fixture
def make_buffer(ctx: cl.Context) -> Callable[[int], cl.Buffer]:
    def make(nbytes: int) -> cl.Buffer:
        return cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    return make


def pattern(nbytes: int, seed: int = 1) -> np.ndarray:
    """nbytes of reproducible pseudo-random bytes."""
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def device_bytes(queue: cl.CommandQueue, buf: cl.Buffer) -> np.ndarray:
    """The buffer's contents read by pyopencl itself (not through clpin)."""
    out = np.empty(buf.size, np.uint8)
    cl.enqueue_copy(queue, out, buf, is_blocking=True)
    return out


def fill_device(queue: cl.CommandQueue, buf: cl.Buffer, data: np.ndarray) -> None:
    cl.enqueue_copy(queue, buf, np.ascontiguousarray(data), is_blocking=True)


def delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in before}


def wait_until(cond: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Poll cond (with gc) until true; completion callbacks trail events."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        gc.collect()
        if cond():
            return True
        time.sleep(0.005)
    return cond()


def epoch(loader, check_bytes=None) -> list:
    """Iterate one epoch of a clpin.Loader; return the indices seen, checking
    every batch's bytes (read back with .get()) against batch_bytes
    (workerfns.py) when check_bytes is the batch size."""
    seen = []
    for arr in loader:
        seen.append(loader.last_index)
        if check_bytes is not None:
            got = arr.get().view(np.uint8).reshape(-1)
            assert np.array_equal(got, batch_bytes(loader.last_index, check_bytes)), \
                f"batch {loader.last_index} differs"
    return seen
