# SPDX-License-Identifier: Apache-2.0
"""Map-style datasets for test_dataset.py that a worker process started by
"spawn" or "forkserver" can rebuild from a pickle: classes at module level,
and this module imports nothing of clpin or of the tests."""

from __future__ import annotations

import numpy as np


class TupleSet:
    """(image, label): image (2, 3) float32 filled with i, label i (int64)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return np.full((2, 3), i, np.float32), i


class DictSet(TupleSet):
    """{"x": (5,) uint16 i.., "y": float64 -i, "z": (2, 2) int8 i % 100}."""

    def __getitem__(self, i: int):
        return {"x": np.arange(i, i + 5, dtype=np.uint16), "y": -float(i),
                "z": np.full((2, 2), i % 100, np.int8)}


class ArraySet(TupleSet):
    """One array a sample: (4,) int32 [i, 2i, 3i, 4i]."""

    def __getitem__(self, i: int):
        return np.arange(1, 5, dtype=np.int32) * i


class BadSet(TupleSet):
    """TupleSet, but sample `bad` has a wrong shape, `raises` raises KeyError
    and `dtype` has a float64 image."""

    def __init__(self, n: int, bad: int = -1, raises: int = -1, dtype: int = -1) -> None:
        super().__init__(n)
        self.bad, self.raises, self.dtype = bad, raises, dtype

    def __getitem__(self, i: int):
        if i == self.raises:
            raise KeyError(f"no sample {i}")
        if i == self.bad:
            return np.full((2, 4), i, np.float32), i
        if i == self.dtype:
            return np.full((2, 3), i, np.float64), i
        return np.full((2, 3), i, np.float32), i


class Unpicklable(TupleSet):
    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.fn = lambda: None  # a lambda does not pickle


class Sampler:
    """An iterable of indices, counted: iterated again each epoch."""

    def __init__(self, order: list) -> None:
        self.order, self.iterations = list(order), 0

    def __iter__(self):
        self.iterations += 1
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


class DyingSet(TupleSet):
    """TupleSet whose worker process dies reading sample `at`: SIGKILL,
    SIGSEGV or exit code 7 (`how`)."""

    def __init__(self, n: int, at: int, how: str) -> None:
        super().__init__(n)
        self.at, self.how = at, how

    def __getitem__(self, i: int):
        if i == self.at:
            import os
            import signal
            if self.how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif self.how == "sigsegv":
                signal.signal(signal.SIGSEGV, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGSEGV)
            os._exit(7)
        return super().__getitem__(i)
