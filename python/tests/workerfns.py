# SPDX-License-Identifier: Apache-2.0
"""Fills and worker_init functions for test_workers.py that a worker process
started by "spawn" or "forkserver" can import by name: module level, and this
module imports nothing of clpin or of the tests (a spawned worker loads it
on its own). batch_bytes is also what test_loader.py's fills write and
conftest.epoch checks."""

from __future__ import annotations

import os
import random

import numpy as np

NBYTES = 4096


def batch_bytes(index: int, nbytes: int = NBYTES) -> np.ndarray:
    """The bytes of batch `index` (each batch different, reproducible)."""
    return np.random.default_rng(1000 + index).integers(0, 256, nbytes, dtype=np.uint8)


def pattern_fill(out: np.ndarray, index: int) -> None:
    out.view(np.uint8).reshape(-1)[:] = batch_bytes(index, out.nbytes)


def info_fill(out: np.ndarray, index: int) -> None:
    """out (int64): [pid, worker id, num_workers, seed, index, ...]."""
    import clpin  # already imported in the worker: the package is its home

    info = clpin.worker_info()
    out[:] = -1
    out[0] = os.getpid()
    if info is not None:
        out[1], out[2], out[3] = info.id, info.num_workers, info.seed
    out[4] = index


def info_sleep_fill(out: np.ndarray, index: int) -> None:
    """info_fill, taking 20 ms: fills of equal time."""
    import time

    time.sleep(0.02)
    info_fill(out, index)


def init_record(worker_id: int) -> None:
    """worker_init: a file per call under $CLPIN_TEST_INIT_DIR holding the
    worker's pid and its first random draws (random, numpy)."""
    d = os.environ["CLPIN_TEST_INIT_DIR"]
    name = os.path.join(d, f"init-{worker_id}-{os.getpid()}")
    with open(name, "w") as f:
        f.write(f"{worker_id} {os.getpid()} {random.getrandbits(48)} {np.random.randint(1 << 30)}")


def busy_fill(out, index: int) -> None:
    """Batch 0 at once, every later one takes 30 s: workers busy."""
    import time

    if index > 0:
        time.sleep(30)
    out[:] = 0


def gil_busy_fill(out, index) -> None:
    """Every batch takes 2 minutes inside one C call that holds the GIL
    (libc's sleep called through ctypes.PyDLL): no thread of the worker runs."""
    import ctypes

    ctypes.PyDLL(None).sleep(120)
    out[:] = 0
