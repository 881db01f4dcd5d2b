# SPDX-License-Identifier: Apache-2.0
""":class:`DatasetLoader`: a map-style dataset (``len(dataset)``,
``dataset[i]``), as ``torch.utils.data`` users write them, batched by
clpin's loader.

Sample 0, read once here, fixes the batch's structure (an array, a tuple or
a dict of arrays) and each leaf's shape and dtype: a leaf becomes a field
of the loader's slot with a leading batch axis (``_layout.Layout``). The
epoch's order (shuffled from (seed, epoch), a sampler's, this shard's part)
is made here, in the parent; each batch's sample indices reach the fill
(a thread here, or a worker process through ``_SlotMemory.index``), which
writes every sample's leaves into their rows of the pinned slot: no
collate copy, no pickled batch, no pin thread.
"""

from __future__ import annotations

import operator
import os
import pickle
import threading
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import numpy as np
import pyopencl as cl

from ._args import _DTYPES
from ._layout import Layout, base_align, rows as _rows
from ._loader import Loader, _contexts, _Epoch, _FillFailed, _queues, _shard

_ARRAY, _TUPLE, _DICT = "array", "tuple", "dict"


def _leaf(value: Any) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype not in _DTYPES:
        raise TypeError(f"dtype {a.dtype} is not one clpin supports (u8..i64, f16, f32, f64, "
                        "native byte order)")
    return a


def _structure(sample: Any) -> tuple:
    """(kind, names, leaves) of a sample."""
    if isinstance(sample, dict):
        return _DICT, tuple(sample), [sample[k] for k in sample]
    if isinstance(sample, tuple):  # namedtuples too: batches are plain tuples
        return _TUPLE, tuple(range(len(sample))), list(sample)
    return _ARRAY, (None,), [sample]


def _name(kind: str, name: Any) -> str:
    if kind == _DICT:
        return f"field {name!r}"
    if kind == _TUPLE:
        return f"element {name}"
    return "the sample"


class _DatasetFill:
    """The fill of a DatasetLoader: writes the samples of a batch into their
    rows of the slot's fields. Picklable (the dataset travels with it under
    spawn and forkserver)."""

    def __init__(self, dataset: Any, kind: str, names: tuple, shapes: tuple,
                 dtypes: tuple) -> None:
        self.dataset, self.kind, self.names = dataset, kind, names
        self.shapes, self.dtypes = shapes, dtypes

    def __call__(self, out: Any, index: int, samples: np.ndarray) -> None:
        fields = out if isinstance(out, dict) else {None: out}
        dst = [fields[n] for n in self.names]
        for row, i in enumerate(samples.tolist()):
            try:
                sample = self.dataset[i]
            except BaseException as exc:  # noqa: B902 - the dataset's, named with its sample
                raise _FillFailed(f"sample {i}: dataset[{i}] raised {type(exc).__name__}: "
                                    f"{_text(exc)}") from exc
            for k, leaf in enumerate(self.leaves(sample, i)):
                self.put(dst[k], row, leaf, i, k)

    def leaves(self, sample: Any, i: int) -> list:
        kind, names, leaves = _structure(sample)
        if kind != self.kind or names != self.names:
            what = {_DICT: f"a dict with keys {list(names)}", _TUPLE: f"a tuple of {len(names)}",
                    _ARRAY: f"a {type(sample).__name__}"}[kind]
            want = {_DICT: f"a dict with keys {list(self.names)}",
                    _TUPLE: f"a tuple of {len(self.names)}", _ARRAY: "an array"}[self.kind]
            msg = f"sample {i} is {what}, where sample 0 is {want}"
            raise _FillFailed(msg) from TypeError(msg)
        return leaves

    def put(self, dst: np.ndarray, row: int, leaf: Any, i: int, k: int) -> None:
        try:
            a = np.asarray(leaf)
        except Exception as exc:  # noqa: BLE001 - whatever numpy refused
            msg = f"sample {i}, {_name(self.kind, self.names[k])}: not an array ({exc})"
            raise _FillFailed(msg) from exc
        if a.shape != self.shapes[k] or a.dtype != self.dtypes[k]:
            what = _name(self.kind, self.names[k])
            msg = (f"sample {i}, {what}: shape {a.shape} and dtype {a.dtype}, where sample 0 "
                   f"has shape {self.shapes[k]} and dtype {self.dtypes[k]}")
            raise _FillFailed(msg) from (ValueError(msg) if a.shape != self.shapes[k]
                                           else TypeError(msg))
        dst[row] = a


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - an exception that cannot print itself
        return "(its text could not be printed)"


class _Order:
    """A DatasetLoader's order of samples for the current epoch, on this
    shard, cut into batches: what the fill of batch ``index`` reads.
    Replaced as a whole between epochs (the C loader's reset drops every
    batch filled from the old one)."""

    def __init__(self, n: int, batch_size: int, shuffle: bool, seed: Optional[int],
                 sampler: Optional[Iterable], drop_last: bool, shard: tuple,
                 kind: str) -> None:
        self.n, self.batch_size, self.shuffle, self.seed = n, batch_size, shuffle, seed
        self.sampler, self.drop_last, self.shard, self.kind = sampler, drop_last, shard, kind
        self.epoch: Optional[int] = None
        self.cut = (np.zeros(0, np.int64), 0)  # (this shard's order, batches)

    def make(self, epoch: int) -> None:
        """The order of epoch `epoch` (a pure function of seed and epoch,
        but for a sampler's own)."""
        if self.sampler is not None:
            order = self._sampled()
        elif self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.n)
        else:
            order = np.arange(self.n, dtype=np.int64)
        rank, world = self.shard
        if world > 1 and len(order):
            # As DistributedSampler: pad to a multiple of the shards by
            # repeating the order's first samples, then every world-th.
            total = -(-len(order) // world) * world
            order = np.resize(order, total)[rank::world]
        order = np.ascontiguousarray(order, dtype=np.int64)
        bs = self.batch_size
        batches = len(order) // bs if self.drop_last else -(-len(order) // bs)
        self.cut = (order, batches)
        self.epoch = epoch

    def _sampled(self) -> np.ndarray:
        try:
            order = np.fromiter((operator.index(i) for i in iter(self.sampler)), np.int64)
        except TypeError as exc:
            raise TypeError(f"sampler must yield sample indices (ints): {exc}") from None
        bad = (order < 0) | (order >= self.n)
        if bad.any():
            raise ValueError(f"sampler yielded index {int(order[bad][0])}, outside the "
                             f"dataset's 0..{self.n - 1}")
        return order

    def samples(self, index: int) -> Optional[np.ndarray]:
        order, batches = self.cut
        if index >= batches:
            return None
        return order[index * self.batch_size:(index + 1) * self.batch_size]

    def rows(self, index: int) -> int:
        order, _ = self.cut
        return max(0, min(self.batch_size, len(order) - index * self.batch_size))

    def pack(self, arrays: dict) -> Any:
        if self.kind == _ARRAY:
            return arrays[None]
        if self.kind == _TUPLE:
            return tuple(arrays[k] for k in range(len(arrays)))
        return arrays

    def __len__(self) -> int:
        return self.cut[1]


class DatasetLoader:
    """Batches of a map-style dataset, written by workers straight into
    pinned memory and uploaded ahead of use (docs/PYTHON.md, "From
    torch.utils.data").

    Each ``for`` over it is one epoch, yielding batches of the structure of
    ``dataset[0]``: an array, a tuple or a dict of
    ``pyopencl.array.Array``, each with a leading batch axis, each a plain
    buffer of its own (``array.data`` works), its upload in
    ``array.events``. A batch's arrays stay valid until the next step, as
    with :class:`Loader`.

    Parameters
    ----------
    queue : pyopencl.CommandQueue or list of them
        Where the batches go (several: round robin, as :class:`Loader`).
    dataset :
        ``len(dataset)`` and ``dataset[i]`` for ``i`` in ``0 .. len - 1``;
        a sample is an array (or a number), a tuple of them or a dict of
        them, each of a dtype in :data:`clpin.DTYPES`. Sample 0 (read once
        here) fixes the structure, shapes and dtypes of every sample.
    batch_size : int
        Samples a batch.
    shuffle : bool, optional
        Epoch ``e``'s order is a permutation depending on (``seed``, ``e``)
        alone: the same in every process.
    seed : int, optional
        The shuffle's seed (required with ``shuffle`` and several shards;
        None: drawn once here), and the workers' base seed as
        :class:`Loader`'s ``seed``.
    sampler : iterable of int, optional
        The sample indices of an epoch, iterated again each epoch (not
        with ``shuffle``).
    drop_last : bool, optional
        Drop the last batch of the shard if it is short; otherwise its
        arrays have its real number of rows.
    shard : (int, int), optional
        ``(rank, world_size)``: the epoch's order split into ``world_size``
        disjoint parts of equal length (padded by repeating the order's
        first samples, as ``DistributedSampler``); this loader takes part
        ``rank``.
    workers, worker_method, start_method, worker_init, timeout, depth :
        As :class:`Loader`. Under "spawn" and "forkserver" the dataset must
        be picklable (a TypeError at creation says so).

    Raises
    ------
    LoaderError
        From the iteration step that reaches a batch whose sample failed
        (``dataset[i]`` raised, or the sample's structure, shape or dtype
        differs from sample 0's): the message names the sample index and
        the field, ``__cause__`` is the dataset's exception (or a
        ValueError / TypeError). The batches after it keep coming.
    """

    def __init__(self, queue: Union[cl.CommandQueue, Sequence[cl.CommandQueue]], dataset: Any,
                 batch_size: int, *, shuffle: bool = False, seed: Optional[int] = None,
                 sampler: Optional[Iterable] = None, drop_last: bool = False,
                 shard: tuple = (0, 1), workers: Optional[int] = None,
                 worker_method: str = "process", start_method: Optional[str] = None,
                 worker_init: Optional[Callable[[int], Any]] = None,
                 timeout: Optional[float] = None, depth: int = 2) -> None:
        self._loader: Optional[Loader] = None
        self._lock = threading.Lock()
        queues = _queues(queue)
        bs = _rows(batch_size, "batch_size")
        for name, value in (("shuffle", shuffle), ("drop_last", drop_last)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
        rank, world = _shard(shard)
        if rank >= world:
            raise ValueError(f"shard {shard!r}: rank {rank} must be below world_size {world}")
        if sampler is not None and shuffle:
            raise ValueError("pass shuffle=True or a sampler, not both (a sampler sets the "
                             "order itself)")
        if sampler is not None and not hasattr(sampler, "__iter__"):
            raise TypeError(f"sampler must be an iterable of sample indices, not "
                            f"{type(sampler).__name__}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                                 or seed < 0):
            raise TypeError(f"seed must be an int >= 0 or None, not {seed!r}")
        if shuffle and world > 1 and seed is None:
            raise ValueError("shuffle with several shards needs a seed: every process must "
                             "shuffle alike, or the shards overlap")
        n = _length(dataset)
        first = dataset[0]
        kind, names, leaves = _structure(first)
        arrays = []
        for k, leaf in enumerate(leaves):
            try:
                arrays.append(_leaf(leaf))
            except TypeError as exc:
                raise TypeError(f"dataset[0], {_name(kind, names[k])}: {exc}") from None
        fields = {name: ((bs,) + a.shape, a.dtype) for name, a in zip(names, arrays)}
        layout = Layout.of_fields(fields, base_align(_contexts(queues)))
        fill = _DatasetFill(dataset, kind, names, tuple(a.shape for a in arrays),
                            tuple(a.dtype for a in arrays))
        if worker_method == "process" and start_method not in (None, "fork"):
            try:
                pickle.dumps(dataset)
            except Exception as exc:  # noqa: BLE001 - any pickling failure says the same
                raise TypeError(f"the dataset must be picklable for start_method="
                                f"{start_method!r} (each worker process rebuilds it from a "
                                f"pickle), or use start_method='fork': {exc}") from exc
        if shuffle and seed is None:
            seed = int.from_bytes(os.urandom(4), "little")
        self._order = _Order(n, bs, bool(shuffle), None if seed is None else int(seed), sampler,
                             bool(drop_last), (rank, world), kind)
        self._order.make(0)  # the first epoch's: the loader fills it from creation on
        self._next_epoch = 0
        self.dataset, self.batch_size = dataset, bs
        loader = Loader.__new__(Loader)
        loader._state = None
        loader._build(queues, fill, layout, batches=None, depth=depth, workers=workers,
                      ordered=True, shard=(0, 1), worker_method=worker_method,
                      start_method=start_method, worker_init=worker_init, timeout=timeout,
                      seed=seed if worker_method == "process" else None, source=self._order)
        self._loader = loader

    def __len__(self) -> int:
        """Batches of an epoch on this shard."""
        return len(self._order)

    def set_epoch(self, epoch: int) -> None:
        """The next ``for`` runs epoch ``epoch`` (each ``for`` otherwise
        runs the one after the last)."""
        e = operator.index(epoch)
        if e < 0:
            raise ValueError(f"epoch must be >= 0, not {e}")
        with self._lock:
            self._next_epoch = e

    @property
    def epoch(self) -> int:
        """The epoch the next ``for`` runs."""
        return self._next_epoch

    def __iter__(self) -> _Epoch:
        loader = self._live()
        with self._lock:
            e = self._next_epoch
            self._next_epoch = e + 1

        def renew() -> bool:
            if self._order.epoch == e and loader._state.epoch == 0:
                return False  # the first epoch, filled since creation
            self._order.make(e)
            return True

        return _Epoch(loader, loader._state.begin(renew))

    def _live(self) -> Loader:
        if self._loader is None or self._loader.closed:
            raise ValueError("the DatasetLoader is closed")
        return self._loader

    @property
    def last_index(self) -> Optional[int]:
        """The index of the batch the iteration gave last (or failed at)."""
        return self._loader.last_index if self._loader is not None else None

    @property
    def worker_pids(self) -> list:
        return self._loader.worker_pids if self._loader is not None else []

    @property
    def closed(self) -> bool:
        return self._loader is None or self._loader.closed

    def stats(self) -> dict:
        """As :meth:`Loader.stats`."""
        return self._live().stats()

    def cancel(self) -> None:
        """As :meth:`Loader.cancel`."""
        self._live().cancel()

    def close(self) -> None:
        """As :meth:`Loader.close`."""
        if self._loader is not None:
            self._loader.close()

    def __enter__(self) -> "DatasetLoader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _length(dataset: Any) -> int:
    try:
        n = operator.index(len(dataset))
    except TypeError:
        raise TypeError(f"dataset must have a len() and dataset[i] (a map-style dataset), not "
                        f"a {type(dataset).__name__}") from None
    if n < 1:
        raise ValueError("the dataset is empty: sample 0 fixes the batch's structure")
    if not hasattr(dataset, "__getitem__"):
        raise TypeError(f"dataset must support dataset[i], and a {type(dataset).__name__} "
                        "does not")
    return n
