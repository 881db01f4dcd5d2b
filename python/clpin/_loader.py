# SPDX-License-Identifier: Apache-2.0
"""The loader (``clpin_loader_*``) for Python: :class:`Loader` and :func:`prefetch`.

Worker threads of the C library call the caller's ``fill`` (a cffi callback:
cffi takes the GIL for it) to write each batch straight into a pinned slot;
clpin uploads the slot into a device buffer on a queue of its own, and the
iteration hands the buffer out as a ``pyopencl.array.Array`` whose
``events`` hold the upload.

With ``worker_method="process"`` the same C loader runs on slot memory of
the package's own (a memfd every worker maps, registered as pinned) and the
callback hands each batch to a worker process (``_workers.py``), which
writes it into the slot.

Lifetimes. Everything the C loader needs lives in a :class:`_State` that
does not refer to the :class:`Loader` (so dropping the last reference to a
Loader closes it in the dropping thread), and live states are kept in
``_live`` until closed, so that an atexit hook closes every loader while the
interpreter can still run the fill callbacks: a worker thread calling into
Python during finalization would hang the exit.
"""

from __future__ import annotations

import atexit
import mmap
import operator
import os
import threading
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array

from ._args import _DTYPES, _pool
from ._errors import CODES, Error, _check
from ._fill import (
    END,
    LoaderError,
    WorkerError,
    _close_all,
    _FillFailed,
    _fill_result,
    _huge_pages,
    _live,
    _live_lock,
    _open_loaders,
    _printed,
    _slot_stride,
    _tls,
)
from ._layout import Field, Layout, base_align
from ._native import CLPIN_LOADER_UNORDERED, CLPIN_LOADER_WAIT_UPLOADS, ffi, lib

# clpin's loader codes, as the loaded library names them (_errors.CODES);
# END is _fill's.
ERR_CANCELLED = CODES["ERR_CANCELLED"]
#: What the fill callback returns when the Python fill raised: a code of the
#: package's own, inside clpin's reserved range (-20000 ... -20099) but none
#: of clpin's codes (test_loader.py checks that the library gives it no
#: name), and outside OpenCL's (> -1100).
#: clpin_loader_next() delivers it for that batch; the iteration then raises
#: the stored exception as a :class:`LoaderError`.
ERR_PYTHON_EXCEPTION = -20098

STATS_FIELDS: tuple = tuple(
    name for name, _ in ffi.typeof("struct clpin_loader_stats").fields if name != "struct_size")



def _loader_error(index: int, exc: Optional[BaseException]) -> LoaderError:
    """The LoaderError for an exception a fill raised in this process."""
    if isinstance(exc, _FillFailed):
        cause = exc.__cause__
        err = LoaderError(index, cause, detail=str(exc))
    else:
        cause = exc
        err = LoaderError(index, exc)
    err.__cause__ = cause
    return err


# ------------------------------------------------------------------- fills


class _Feed:
    """The callable behind the cffi callback; refers to no Loader."""

    def __init__(self) -> None:
        self.errors: dict = {}  # index -> exception fill raised
        self.shapes: dict = {}  # index -> shape of that batch (prefetch)

    def __call__(self, user: Any, index: int, host: Any, capacity: int, used: Any) -> int:
        index = int(index)
        _tls.in_fill = True
        try:
            return self.run(index, host, int(capacity), used)
        except BaseException as exc:  # noqa: B902 - every exception goes to the iteration
            self.errors[index] = exc
            return ERR_PYTHON_EXCEPTION
        finally:
            _tls.in_fill = False

    def run(self, index: int, host: Any, capacity: int, used: Any) -> int:
        raise NotImplementedError

    def shutdown(self) -> None:
        """close(): before the C loader is destroyed (wakes its fills)."""

    def release(self) -> None:
        """close(): after the C loader is destroyed."""


class _ArrayFeed(_Feed):
    """Loader: fill(out, index) on numpy views of the slot (an array, or a
    dict of them with ``fields``); with a sample source (DatasetLoader),
    fill(out, index, samples)."""

    def __init__(self, fill: Callable, layout: Layout, source: Any = None) -> None:
        super().__init__()
        self.fill, self.layout, self.source = fill, layout, source

    def run(self, index: int, host: Any, capacity: int, used: Any) -> int:
        args: tuple = ()
        if self.source is not None:
            samples = self.source.samples(index)
            if samples is None:
                return END
            args = (samples,)
        out = self.layout.views(ffi.buffer(host, capacity))
        return _fill_result(self.fill(out, index, *args))


class _ProcessFeed(_Feed):
    """Loader with worker_method="process": the batch goes to a worker
    process, which writes it into the same slot through shared memory. With
    a sample source, the batch's sample indices go first into the slot's
    record of the index memory (``_SlotMemory.index``), which the worker
    reads."""

    def __init__(self, workers: Any, memory: "_SlotMemory", batch_bytes: int,
                 source: Any = None) -> None:
        super().__init__()
        self.workers, self.memory, self.batch_bytes = workers, memory, batch_bytes
        self.source = source
        self.stride = _slot_stride(batch_bytes)

    def run(self, index: int, host: Any, capacity: int, used: Any) -> int:
        slot = (int(ffi.cast("uintptr_t", host)) - self.memory.base) // self.stride
        if self.source is not None:
            samples = self.source.samples(index)
            if samples is None:
                return END
            self.memory.set_samples(slot, samples)
        return 0 if self.workers.fill(slot, index) else END

    def shutdown(self) -> None:
        self.workers.close()

    def release(self) -> None:
        self.workers.close()  # workers a clpin thread started while closing
        self.memory.close()


class _SlotMemory:
    """The slots of a process loader: one anonymous shared memory file
    (memfd: no name in /dev/shm, gone with its last user), mapped here and
    in every worker, registered as pinned in each context's pool.

    With a sample source (DatasetLoader), a second, small one holds each
    slot's sample indices (``index``: per slot, the count then up to
    ``rows`` indices, int64), written here before the slot's task goes to a
    worker and read there."""

    def __init__(self, total: int, contexts: list, nslots: int = 0, rows: int = 0) -> None:
        self.fd = self.index_fd = -1
        self.map: Any = None
        self.cdata: Any = None
        self.index: Optional[np.ndarray] = None
        self._index_map: Any = None
        self.registered = 0
        self.total = total
        try:
            self.fd = os.memfd_create("clpin-loader-slots", os.MFD_CLOEXEC)
            os.ftruncate(self.fd, total)
            self.map = mmap.mmap(self.fd, total, flags=mmap.MAP_SHARED,
                                 prot=mmap.PROT_READ | mmap.PROT_WRITE)
            _huge_pages(self.map)
            self.cdata = ffi.from_buffer(self.map)
            self.ptr = ffi.cast("void *", self.cdata)
            self.base = int(ffi.cast("uintptr_t", self.cdata))
            if rows:
                self.index_fd = os.memfd_create("clpin-loader-samples", os.MFD_CLOEXEC)
                size = index_bytes(nslots, rows)
                os.ftruncate(self.index_fd, size)
                self._index_map = mmap.mmap(self.index_fd, size, flags=mmap.MAP_SHARED,
                                            prot=mmap.PROT_READ | mmap.PROT_WRITE)
                self.index = np.ndarray((nslots, rows + 1), np.int64, buffer=self._index_map)
            for ctx in contexts:
                _check(lib.clpin_host_register(_pool(ctx), self.ptr, total),
                       "clpin_host_register (the loader's slot memory)")
                self.registered += 1
        except BaseException:
            self.close()
            raise

    def set_samples(self, slot: int, samples: np.ndarray) -> None:
        rec = self.index[slot]
        rec[0] = len(samples)
        rec[1:1 + len(samples)] = samples

    def close(self) -> None:
        while self.registered:
            self.registered -= 1
            lib.clpin_host_unregister(self.ptr)
        if self.cdata is not None:
            ffi.release(self.cdata)
            self.cdata = None
        if self.map is not None:
            self.map.close()
            self.map = None
        self.index = None
        if self._index_map is not None:
            self._index_map.close()
            self._index_map = None
        for name in ("fd", "index_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


def index_bytes(nslots: int, rows: int) -> int:
    """Bytes of the sample-index memory: per slot a count and `rows` indices."""
    return max(nslots * (rows + 1) * 8, 8)


class _PrefetchFeed(_Feed):
    """prefetch: the next item of an iterator, copied into the slot."""

    def __init__(self, first: np.ndarray, it: Iterator) -> None:
        super().__init__()
        self.first: Optional[np.ndarray] = first
        self.it = it
        self.dtype = first.dtype
        self.capacity = max(first.nbytes, 1)

    def run(self, index: int, host: Any, capacity: int, used: Any) -> int:
        if self.first is not None:  # workers=1: index 0 comes first
            item, self.first = self.first, None
        else:
            try:
                item = next(self.it)
            except StopIteration:
                return END
            item = _item(item, index, self.dtype, self.capacity)
        if item.nbytes:
            dst = np.frombuffer(ffi.buffer(host, item.nbytes), dtype=self.dtype).reshape(item.shape)
            np.copyto(dst, item)
        used[0] = max(item.nbytes, 1)
        self.shapes[index] = item.shape
        return 0


def _item(item: Any, index: int, dtype: Optional[np.dtype] = None, capacity: int = 0) -> np.ndarray:
    if not isinstance(item, np.ndarray):
        raise TypeError(f"prefetch: item {index} is a {type(item).__name__}, not a numpy.ndarray")
    if item.dtype not in _DTYPES:
        raise TypeError(f"prefetch: item {index} has dtype {item.dtype}, not one clpin supports "
                        "(u8..i64, f16, f32, f64, native byte order)")
    if dtype is not None and item.dtype != dtype:
        raise TypeError(f"prefetch: item {index} has dtype {item.dtype}, the first item {dtype}: "
                        "every item must have the first item's dtype")
    if dtype is not None and item.nbytes > capacity:
        raise ValueError(f"prefetch: item {index} has {item.nbytes} bytes, more than the first "
                         f"item's {capacity} (the batch capacity): no item may be larger than "
                         "the first")
    return item


# ------------------------------------------------------------------ states

#: One wait of the iteration for its next batch: Python runs its signal
#: handlers (Ctrl-C: KeyboardInterrupt) between two.
_WAIT_SLICE_NS = 100_000_000


def _wait_next(ptr: Any, out: Any) -> int:
    """clpin_loader_next (the GIL released while it waits), in waits of
    _WAIT_SLICE_NS: a C wait cannot be interrupted, so a signal would
    otherwise wait for the fills. A wait that runs out takes nothing: after
    a KeyboardInterrupt the loader is as it was, and the iteration may go on."""
    try:
        while True:
            err = lib.clpin_loader_next_timed(ptr, out, _WAIT_SLICE_NS)
            if err != 0 or out[0] != ffi.NULL:
                return err
    except BaseException:
        # The signal came just as a batch did: it is dropped (given back),
        # never held for ever.
        if out[0] != ffi.NULL:
            lib.clpin_batch_release(out[0], 0, ffi.NULL)
            out[0] = ffi.NULL
        raise


class _State:
    """A C loader and what it needs; closed at most once (close())."""

    def __init__(self, queues: list, feed: _Feed, layout: Layout,
                 batches: int, depth: int, workers: int, ordered: bool,
                 shard: tuple, slot_memory: Optional[_SlotMemory] = None,
                 source: Any = None) -> None:
        # A worker process forked from this one inherits this object: it
        # must never act on it (no close, no OpenCL call, no thread join):
        # clpin's threads and the workers are this process's alone.
        self.pid = os.getpid()
        self.mu = threading.Lock()  # ptr and closing
        self.step = threading.Lock()  # one iteration step (or reset, close) at a time
        self.ptr: Any = None
        self.closing = False
        self.queues = {q.int_ptr: q for q in queues}
        self.contexts = {q.context.int_ptr for q in queues}
        self.feed = feed
        self.layout = layout
        self.source = source  # DatasetLoader: rows(index) and pack(fields)
        self.subs: dict = {}  # device buffer (int_ptr) -> its fields' sub-buffers
        self.held: Optional[tuple] = None  # (batch, queue, arrays) the caller has
        self.epoch = 0  # epochs started by iteration (0: none yet)
        self.over = False  # the current epoch ended (END or cancel)
        self.last_index: Optional[int] = None
        self.final_stats: Optional[dict] = None
        # One callback per loader: it refers to the feed only.
        self.callback = ffi.callback("clpin_fill_fn", feed, error=ERR_PYTHON_EXCEPTION)
        desc = ffi.new("clpin_loader_desc *")
        desc.struct_size = ffi.sizeof("clpin_loader_desc")
        desc.batch_bytes = layout.total
        desc.batches = batches
        desc.depth = depth
        desc.workers = workers
        desc.flags = 0 if ordered else CLPIN_LOADER_UNORDERED
        if slot_memory is not None:
            # Worker processes fill the slots, and the done events (upload
            # events, flushed markers) end by themselves: clpin's threads
            # wait for their uploads, no driver callbacks (clpin.h).
            desc.flags |= CLPIN_LOADER_WAIT_UPLOADS
        desc.shard, desc.nshards = shard
        desc.fill = self.callback
        desc.user = ffi.NULL
        if slot_memory is not None:
            desc.slot_memory = slot_memory.ptr
            desc.slot_memory_bytes = slot_memory.total
            desc.slot_stride = _slot_stride(layout.total)
        qs = ffi.new("cl_command_queue[]", [ffi.cast("cl_command_queue", q.int_ptr) for q in queues])
        out = ffi.new("clpin_loader **")
        _check(lib.clpin_loader_create(len(queues), qs, desc, out), "clpin_loader_create")
        self.ptr = out[0]
        with _live_lock:
            _live.add(self)

    # -- iteration

    def begin(self, renew: Optional[Callable[[], bool]] = None) -> int:
        """Start an epoch: the running one the first time, then a reset.
        ``renew`` (DatasetLoader): sets the new epoch's order before the
        reset, and says whether the first epoch needs one too (its order
        changed since the loader began filling)."""
        with self.step:
            self.usable()
            again = renew() if renew is not None else False
            if self.epoch or again:
                self.release_held()
                self.feed.errors.clear()
                self.feed.shapes.clear()
                _check(lib.clpin_loader_reset(self.ptr), "clpin_loader_reset")
            self.epoch += 1
            self.over = False
            return self.epoch

    def next(self, epoch: int) -> cl_array.Array:
        with self.step:
            if self.inherited():
                self.usable()
            if self.ptr is None or self.closing or epoch != self.epoch or self.over:
                raise StopIteration
            self.release_held()
            out = ffi.new("clpin_batch **")
            err = _wait_next(self.ptr, out)
            b = out[0]
            if err in (END, ERR_CANCELLED):
                self.over = True
                raise StopIteration
            if b == ffi.NULL:
                _check(err, "clpin_loader_next")
            index = int(lib.clpin_batch_index(b))
            self.last_index = index
            if err != 0:
                lib.clpin_batch_release(b, 0, ffi.NULL)
                shape = self.feed.shapes.pop(index, None)
                if err == ERR_PYTHON_EXCEPTION:
                    exc = self.feed.errors.pop(index, None)
                    if isinstance(exc, LoaderError):  # built by a worker process's feed
                        raise exc
                    raise _loader_error(index, exc)
                raise Error(err, f"clpin.Loader batch {index}")
            try:
                queue = self.queues[int(ffi.cast("intptr_t", lib.clpin_batch_queue(b)))]
                mem = int(ffi.cast("intptr_t", lib.clpin_batch_buffer(b)))
                ev = cl.Event.from_int_ptr(int(ffi.cast("intptr_t", lib.clpin_batch_event(b))),
                                           retain=True)
                out, arrays = self.batch(queue, mem, ev, index)
            except BaseException:
                lib.clpin_batch_release(b, 0, ffi.NULL)
                raise
            self.held = (b, queue, arrays)
            return out

    def batch(self, queue: cl.CommandQueue, mem: int, ev: cl.Event, index: int) -> tuple:
        """(what the iteration yields, its arrays) for device buffer `mem`."""
        if self.layout.single:
            f = self.layout.fields[0]
            shape = self.feed.shapes.pop(index, f.shape)
            a = cl_array.Array(queue, shape, f.dtype, data=cl.Buffer.from_int_ptr(mem, retain=True),
                               events=[ev])
            return a, [a]
        rows = self.source.rows(index) if self.source is not None else None
        arrays = {}
        for f, buf in zip(self.layout.fields, self.sub_buffers(mem)):
            shape = f.shape if rows is None else (rows,) + f.shape[1:]
            arrays[f.name] = cl_array.Array(queue, shape, f.dtype, data=buf, events=[ev])
        out = self.source.pack(arrays) if self.source is not None else arrays
        return out, list(arrays.values())

    def sub_buffers(self, mem: int) -> list:
        """One buffer per field of device buffer `mem`: sub-buffers, made
        once per device buffer (the loader reuses its buffers)."""
        subs = self.subs.get(mem)
        if subs is None:
            whole = cl.Buffer.from_int_ptr(mem, retain=True)
            fields = self.layout.fields
            if len(fields) == 1 and fields[0].nbytes == self.layout.total:
                subs = [whole]
            else:
                # A field of 0 bytes still gets a buffer of one byte.
                subs = [whole.get_sub_region(f.offset, max(f.nbytes, 1)) for f in fields]
            self.subs[mem] = subs
        return subs

    def release_held(self) -> None:
        """Give the held batch back; its buffer is uploaded into again only
        after a barrier enqueued now on its queue (all the caller's work on
        that queue so far: _after_all) and the array's events. Under
        self.step."""
        if self.held is None:
            return
        b, queue, arrays = self.held
        self.held = None
        seen: dict = {}
        for array in arrays:  # the caller may have added events to any of them
            for e in array.events:
                if isinstance(e, cl.Event):
                    seen.setdefault(e.int_ptr, e)
        events = list(seen.values())
        try:
            events.append(_after_all(queue))
            # The upload that waits for the marker runs on another queue:
            # the marker must be submitted (POCL, for one, holds unflushed
            # commands back, and the loader would wait for it forever).
            queue.flush()
        except cl.Error:  # a broken queue: wait for it on the host instead
            try:
                queue.finish()
            except cl.Error:
                pass
        done = ffi.new("cl_event[]", [ffi.cast("cl_event", e.int_ptr) for e in events])
        _check(lib.clpin_batch_release(b, len(events), done), "clpin_batch_release")

    # -- control

    def cancel(self) -> None:
        if self.inherited():
            return
        with self.mu:
            if self.ptr is not None:
                lib.clpin_loader_cancel(self.ptr)

    def stats(self) -> dict:
        with self.mu:
            if self.ptr is None:
                if self.final_stats is None:
                    raise ValueError("the Loader is closed")
                return dict(self.final_stats)
            return self._stats_of(self.ptr, self.feed)

    def usable(self) -> None:
        """Raise unless this process may iterate the loader now."""
        if self.inherited():
            raise RuntimeError(f"this Loader belongs to process {self.pid}: a process forked "
                               "from it (a worker) cannot iterate or close it")
        if self.ptr is None or self.closing:
            raise ValueError("the Loader is closed")

    def inherited(self) -> bool:
        """This process is a fork of the one that made the loader."""
        return os.getpid() != self.pid

    def close(self) -> None:
        if self.inherited():
            return  # the parent's loader: its threads, workers and memory are the parent's
        if getattr(_tls, "in_fill", False):
            raise RuntimeError("a Loader cannot be closed from a fill callback")
        with self.mu:
            if self.ptr is None or self.closing:
                already = True
            else:
                already = False
                self.closing = True
                lib.clpin_loader_cancel(self.ptr)  # wakes a next() of another thread
        if already:
            # Another thread is closing it: wait until it is done.
            with self.step:
                return
        # Worker processes end first: a clpin thread waiting for one returns.
        self.feed.shutdown()
        with self.step:  # the iteration in another thread has left next()
            try:
                self.release_held()
            finally:
                with self.mu:
                    ptr, self.ptr = self.ptr, None
                    try:
                        self.final_stats = self._stats_of(ptr, self.feed)
                    except Error:
                        self.final_stats = None
                # Joins the workers; cffi releases the GIL, so a fill in
                # progress can finish.
                lib.clpin_loader_destroy(ptr)
                self.subs.clear()
                self.feed.release()
                self.feed.errors.clear()
                with _live_lock:
                    _live.discard(self)

    @staticmethod
    def _stats_of(ptr: Any, feed: _Feed) -> dict:
        s = ffi.new("struct clpin_loader_stats *")
        s.struct_size = ffi.sizeof("struct clpin_loader_stats")
        _check(lib.clpin_loader_stats(ptr, s), "clpin_loader_stats")
        out = {name: int(getattr(s, name)) for name in STATS_FIELDS}
        workers = getattr(feed, "workers", None)
        out["worker_processes"] = workers.n if workers is not None else 0
        if workers is not None:  # the processes, not the clpin threads feeding them
            out["workers"] = workers.n
        out["worker_restarts"] = workers.restarts if workers is not None else 0
        return out


def _after_all(queue: cl.CommandQueue) -> cl.Event:
    """An event that completes once everything enqueued on `queue` so far
    has. On an in-order queue a barrier: NVIDIA's driver makes a marker
    with an empty wait list wait for every queue of the context, so the
    next upload (on the loader's own queue) would wait for the caller's
    kernels on all of them. On an out-of-order queue a marker (a barrier
    there would hold back the caller's later commands)."""
    ooo = cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE
    if queue.properties & ooo:
        return cl.enqueue_marker(queue)
    return cl.enqueue_barrier(queue)


# ------------------------------------------------------------------ public


class _Epoch:
    """The iterator of one epoch (one ``for`` over a Loader)."""

    def __init__(self, loader: "Loader", epoch: int) -> None:
        self._loader = loader  # keeps the Loader alive while iterating
        self._epoch = epoch

    def __iter__(self) -> "_Epoch":
        return self

    def __next__(self) -> cl_array.Array:
        return self._loader._state.next(self._epoch)


def _queues(queue: Any) -> list:
    if isinstance(queue, cl.CommandQueue):
        return [queue]
    if isinstance(queue, (list, tuple)):
        qs = list(queue)
        if not qs:
            raise ValueError("queue: an empty list of queues")
        for q in qs:
            if not isinstance(q, cl.CommandQueue):
                raise TypeError(f"queue: the list holds a {type(q).__name__}, not a "
                                "pyopencl.CommandQueue")
        return qs
    raise TypeError(f"queue must be a pyopencl.CommandQueue or a list of them, not "
                    f"{type(queue).__name__}")


def _count(value: Any, name: str, allow_none: bool) -> int:
    if value is None and allow_none:
        return 0
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, not a bool")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int{' or None' if allow_none else ''}, not "
                        f"{type(value).__name__}") from None
    if n < 1:
        raise ValueError(f"{name} must be >= 1, not {n}")
    if n >= 1 << 32 and name != "batches":
        raise ValueError(f"{name} is too large: {n}")
    return n


def _shard(shard: Any) -> tuple:
    try:
        rank, world = shard
        rank, world = operator.index(rank), operator.index(world)
    except (TypeError, ValueError):
        raise TypeError(f"shard must be a pair of ints (rank, world_size), not {shard!r}") from None
    if rank < 0 or world < 1 or rank >= 1 << 32 or world >= 1 << 32:
        raise ValueError(f"shard {shard!r}: rank must be >= 0 and world_size >= 1")
    return rank, world


def _contexts(queues: list) -> list:
    """The distinct contexts of the queues."""
    return list({q.context.int_ptr: q.context for q in queues}.values())


def _what(layout: Layout) -> str:
    if layout.single:
        f = layout.fields[0]
        return f"shape {f.shape}"
    return "fields " + ", ".join(f"{f.name!r} {f.shape}" for f in layout.fields)


#: The longest timeout: a worker's answer is waited for with poll(), whose
#: bound in milliseconds is a C int.
_MAX_TIMEOUT_S = 1e6


def _timeout(timeout: Any) -> Optional[float]:
    """A worker's timeout: None, or seconds > 0 and finite."""
    if timeout is None:
        return None
    if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, (int, float, np.integer,
                                                                          np.floating)):
        raise TypeError(f"timeout must be a number of seconds or None, not "
                        f"{type(timeout).__name__}")
    t = float(timeout)
    if not t > 0:
        raise ValueError(f"timeout must be > 0 seconds, not {timeout}")
    if t > _MAX_TIMEOUT_S:
        raise ValueError(f"timeout must be at most {_MAX_TIMEOUT_S:g} seconds (about 11 days), "
                         f"not {timeout}: pass timeout=None for no bound")
    return t


def _slot_total(slots: int, layout: Layout) -> int:
    """Bytes of every slot together, refused with a ValueError when the
    machine could never hold them."""
    total = slots * _slot_stride(layout.total)
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        ram = 1 << 62
    if total > min(ram, (1 << 63) - 1):
        raise ValueError(f"the loader's {slots} slots of {layout.total} bytes ({_what(layout)}, "
                         f"each rounded up to whole pages) "
                         f"would take {total} bytes of shared memory, more than this machine's "
                         f"{ram} bytes: make the batch smaller or depth lower")
    return total


class Loader:
    """Batches prepared on clpin's threads straight into pinned memory and
    uploaded ahead of use (``clpin_loader_*``; docs/PYTHON.md, "Loader").

    Each ``for`` over the loader is one epoch: the first uses the epoch the
    loader started filling at creation, each later one starts a new epoch
    (``clpin_loader_reset``: same threads, same memory). It yields
    ``pyopencl.array.Array``\\ s over the batch's device buffer whose
    ``events`` hold the upload's event: pass ``wait_for=array.events`` to the
    kernels that read it (pyopencl's array operations do so themselves).

    **A yielded array is valid until the iteration takes its next step** (the
    next batch, the end of the epoch, a new ``for``, :meth:`close`): then the
    batch goes back to the loader, and its buffer is uploaded into again
    once everything enqueued on its queue until then (a marker) and the
    array's ``events`` have completed. Work the caller enqueued on that
    queue, or recorded in ``array.events``, is therefore never overwritten;
    work on another queue must be in ``array.events``. To keep the data
    longer, copy it (``array.copy()``, a device copy enqueued before the
    marker; or ``array.get()``).

    Parameters
    ----------
    queue : pyopencl.CommandQueue or list of them
        Where the batches go; with several, batch ``i`` goes to
        ``queue[i % len(queue)]`` (one stream per queue, round robin). Each
        array's ``queue`` is its batch's.
    fill : callable ``fill(out, index)``
        Runs on a clpin worker thread (several at once, with the GIL), or
        in a worker process (``worker_method="process"``): write
        batch ``index`` into ``out``, a numpy array of ``shape`` and
        ``dtype`` over the pinned slot (do not keep ``out``). Return None or
        True to deliver it, False to end the epoch before it (with
        ``batches=None``). An exception it raises comes out of the
        iteration step that reaches that batch as a :class:`LoaderError`
        (``index``, ``__cause__``), after the batches before it.
    shape, dtype :
        Each batch: a shape (C order) and one of :data:`clpin.DTYPES`.
    batches : int, optional
        Batches per epoch (this process's share is those of its ``shard``);
        None: until ``fill`` returns False.
    depth : int, optional
        Batches uploaded ahead, per queue (2).
    workers : int, optional
        Fill threads, or worker processes; None: min(4, cores). numpy
        releases the GIL in its array operations, so a fill made of them
        runs on several cores on threads too.
    ordered : bool, optional
        True: batches come in index order; False: as they are ready (read
        :attr:`last_index` to know which).
    shard : (int, int), optional
        ``(rank, world_size)``: this process takes the batches ``i`` with
        ``i % world_size == rank``.
    worker_method : {"thread", "process"}, optional
        Where ``fill`` runs. ``"process"`` (the default): in ``workers``
        processes that live as long as the loader and write each batch
        straight into its pinned slot (shared memory); each has two batches
        at once. ``fill`` runs in another process: its side effects stay
        there (a fill that records into the caller's objects, or reads
        objects the caller changes after creation, wants ``"thread"``).
        ``"thread"`` (0.2's behaviour): on clpin's threads, under the GIL:
        up to 1.25x faster for fills of vectorised numpy, which releases the
        GIL, and ~10x slower for fills that run Python per sample
        (decoding, augmenting, building samples), which threads serialise
        on the GIL. Processes are the default because they are never that
        trap (docs/PYTHON.md, "Which worker_method").
    start_method : {"fork", "forkserver", "spawn"}, optional
        Processes: how they start (None: "fork"). Under "forkserver" and
        "spawn", ``fill`` and ``worker_init`` must be picklable (module-level
        functions): a TypeError says so at creation.
    worker_init : callable ``worker_init(worker_id)``, optional
        Processes: run once in each worker process, before its first batch
        (again in a replacement of a dead worker). An exception in it raises
        :class:`WorkerError` from the constructor.
    timeout : float, optional
        Processes: seconds a worker may take for one batch; past it the
        worker is stopped (SIGKILL, then replaced) and the iteration step
        that reaches that batch raises :class:`WorkerError`. None: no bound
        (a dead worker is still found at once).
    seed : int, optional
        Processes: worker ``k`` seeds :mod:`random` and ``numpy.random`` with
        ``seed + k`` (:func:`worker_info` says which). None: a base seed
        drawn at creation, so workers never share a random stream.

    Raises
    ------
    TypeError, ValueError
        A bad argument found in Python (types, counts below 1; an option of
        processes with ``worker_method="thread"``; an unpicklable ``fill``
        under "spawn" or "forkserver").
    WorkerError
        A worker process failed to start (``worker_init`` raised, ``fill``
        could not be loaded in it, it died).
    Error
        clpin refused the arguments (e.g. an empty shape, ``depth`` above
        64, ``rank >= world_size``) or OpenCL failed.
    """

    def __init__(self, queue: Union[cl.CommandQueue, Sequence[cl.CommandQueue]],
                 fill: Callable[[Any, int], Optional[bool]],
                 shape: Union[int, Sequence[int], None] = None, dtype: Any = None, *,
                 fields: Optional[dict] = None,
                 batches: Optional[int] = None, depth: int = 2, workers: Optional[int] = None,
                 ordered: bool = True, shard: tuple = (0, 1), worker_method: str = "process",
                 start_method: Optional[str] = None,
                 worker_init: Optional[Callable[[int], Any]] = None,
                 timeout: Optional[float] = None, seed: Optional[int] = None) -> None:
        self._state: Optional[_State] = None
        queues = _queues(queue)
        if not callable(fill):
            raise TypeError(f"fill must be callable, not {type(fill).__name__}")
        if fields is not None:
            if shape is not None or dtype is not None:
                raise TypeError("pass either shape and dtype (one array a batch) or fields "
                                "(several), not both")
            layout = Layout.of_fields(fields, base_align(_contexts(queues)))
        elif shape is None or dtype is None:
            raise TypeError("Loader needs shape and dtype (one array a batch), or fields="
                            "{name: (shape, dtype)} (several)")
        else:
            layout = Layout.of_array(shape, dtype)
        self._build(queues, fill, layout, batches=batches, depth=depth, workers=workers,
                    ordered=ordered, shard=shard, worker_method=worker_method,
                    start_method=start_method, worker_init=worker_init, timeout=timeout,
                    seed=seed)

    def _build(self, queues: list, fill: Callable, layout: Layout, *, batches: Optional[int],
               depth: int, workers: Optional[int], ordered: bool, shard: tuple,
               worker_method: str, start_method: Optional[str], worker_init: Optional[Callable],
               timeout: Optional[float], seed: Optional[int], source: Any = None) -> None:
        """Check the options and start: Loader's and DatasetLoader's one path.
        ``source``: a DatasetLoader's sample order (samples, rows, pack)."""
        if not isinstance(ordered, (bool, np.bool_)):
            raise TypeError(f"ordered must be a bool, not {type(ordered).__name__}")
        if layout.total == 0:  # clpin's code, before any memory or worker is made
            raise Error(CODES["ERR_INVALID_SIZE"], "clpin_loader_create",
                        f"a batch of {_what(layout)} holds 0 bytes: a batch needs at least one")
        args = (layout, _count(batches, "batches", True), _count(depth, "depth", False),
                _count(workers, "workers", True), bool(ordered), _shard(shard))
        if worker_method == "thread":
            for name, value in (("start_method", start_method), ("worker_init", worker_init),
                                ("timeout", timeout), ("seed", seed)):
                if value is not None:
                    raise ValueError(f"{name} is an option of worker processes: pass "
                                     "worker_method='process' (a thread cannot be stopped "
                                     "or seeded apart)")
            self._start(queues, _ArrayFeed(fill, layout, source), *args, source=source)
        elif worker_method == "process":
            self._start_processes(queues, fill, args, start_method, worker_init, timeout, seed,
                                  source)
        else:
            raise ValueError(f"worker_method must be 'thread' or 'process', not {worker_method!r}")

    def _start_processes(self, queues: list, fill: Callable, args: tuple,
                         start_method: Optional[str], worker_init: Optional[Callable],
                         timeout: Optional[float], seed: Optional[int], source: Any) -> None:
        from . import _workers

        layout, batches, depth, workers, ordered, shard = args
        method = "fork" if start_method is None else start_method
        if method not in _workers.START_METHODS:
            raise ValueError(f"start_method must be one of {_workers.START_METHODS} or None, "
                             f"not {start_method!r}")
        if worker_init is not None and not callable(worker_init):
            raise TypeError(f"worker_init must be callable, not {type(worker_init).__name__}")
        timeout = _timeout(timeout)
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "little")
        elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise TypeError(f"seed must be an int >= 0 or None, not {seed!r}")
        seed = int(seed)
        if not workers:
            workers = min(4, os.cpu_count() or 1)
        nbytes = layout.total
        # Exactly the slots the C loader will cut the memory into.
        desc = ffi.new("clpin_loader_desc *")
        desc.struct_size = ffi.sizeof("clpin_loader_desc")
        desc.batch_bytes = nbytes
        # clpin threads: QUEUE feed each worker (within clpin's 256: beyond
        # 128 workers some have one batch at once).
        threads = min(workers * _workers.QUEUE, max(workers, 256))
        desc.workers = threads
        nslots = ffi.new("size_t *")
        _check(lib.clpin_loader_slots(len(queues), desc, nslots), "clpin_loader_slots")
        slots = int(nslots[0])
        total = _slot_total(slots, layout)
        rows = source.batch_size if source is not None else 0
        memory = _SlotMemory(total, _contexts(queues), slots, rows)
        pool = None
        try:
            pool = _workers.Workers(workers, method, fill, worker_init, seed, timeout,
                                    memory.fd, total, nbytes, layout.spec(),
                                    1 if source is not None else shard[1],
                                    index_fd=memory.index_fd,
                                    index_size=index_bytes(slots, rows) if rows else 0,
                                    what="dataset" if source is not None else None)
            pool.start()
            feed = _ProcessFeed(pool, memory, nbytes, source)
            self._state = _State(queues, feed, layout, batches, depth, threads, ordered, shard,
                                 slot_memory=memory, source=source)
        except BaseException:
            if pool is not None:
                pool.close()
            memory.close()
            raise

    def _start(self, queues: list, feed: _Feed, layout: Layout, batches: int, depth: int,
               workers: int, ordered: bool, shard: tuple, source: Any = None) -> None:
        # clpin checks the shard (rank below world_size): an Error saying so.
        self._state = _State(queues, feed, layout, batches, depth, workers, ordered, shard,
                             source=source)

    def __iter__(self) -> _Epoch:
        return _Epoch(self, self._live().begin())

    def _live(self) -> _State:
        if self._state is None:
            raise ValueError("the Loader is closed")
        return self._state

    @property
    def last_index(self) -> Optional[int]:
        """The index of the batch the iteration gave last (or failed at)."""
        return self._state.last_index if self._state is not None else None

    @property
    def worker_pids(self) -> list:
        """The pids of the worker processes, by worker id (None: one to be
        restarted); [] with worker_method="thread"."""
        st = self._state
        workers = getattr(st.feed, "workers", None) if st is not None else None
        return workers.pids() if workers is not None else []

    @property
    def closed(self) -> bool:
        st = self._state
        return st is None or st.ptr is None

    def stats(self) -> dict:
        """The loader's counters (``clpin_loader_stats``): ``batches``,
        ``bytes`` (delivered), ``pinned_allocations``, ``buffers_created``,
        ``fill_ns``, ``upload_ns``, ``wait_ns`` (the iteration waiting for a
        batch), ``slot_wait_ns``, ``buffer_wait_ns``, ``failed``, ``slots``,
        ``buffers``, ``workers`` (fill threads, or worker processes: each
        has two clpin threads feeding it, and slots for them),
        ``slot_bytes`` (slots x batch bytes; with worker processes slots x
        the batch rounded up to whole pages, exactly the shared memory
        there is),
        ``worker_processes`` (0 with threads), ``worker_restarts`` (dead or
        timed-out workers replaced). After :meth:`close`: the last values."""
        return self._live().stats()

    def cancel(self) -> None:
        """From any thread: the iteration (in whichever thread) ends at its
        next step, without error; the next ``for`` starts a new epoch."""
        self._live().cancel()

    def close(self) -> None:
        """Stop the workers and free the loader's memory. Idempotent; safe
        from another thread while one iterates (that iteration ends). Arrays
        it gave become invalid."""
        if self._state is not None:
            self._state.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        st = getattr(self, "_state", None)
        if st is None or st.ptr is None or st.inherited():
            return
        if getattr(_tls, "in_fill", False):
            # Collected on a worker thread (a cycle through fill): destroy
            # would join this very thread, so another closes it.
            st.cancel()
            threading.Thread(target=st.close, name="clpin-loader-close", daemon=True).start()
            return
        try:
            st.close()
        except Exception:  # noqa: BLE001 - nothing to report to in __del__
            pass


def prefetch(queue: cl.CommandQueue, iterable: Iterable[np.ndarray],
             depth: int = 2) -> Iterator[cl_array.Array]:
    """Each numpy array of ``iterable`` as a ``pyopencl.array.Array``, copied
    into pinned memory and uploaded on clpin's threads ahead of use.

    A :class:`Loader` with one worker that takes the next item and copies it
    into the pinned slot (the GIL released in the copy). The first item,
    taken when the iteration starts, sets the batch capacity and dtype: every
    later item must have that dtype and at most that many bytes (its own
    shape is kept), else the step that reaches it raises a
    :class:`LoaderError` saying why. An exception of ``iterable`` comes out
    the same way, at its item. Each array is valid until the next step, as
    with :class:`Loader`.

    Parameters
    ----------
    queue : pyopencl.CommandQueue
    iterable : iterable of numpy.ndarray
        Consumed on a clpin worker thread (from the second item on).
    depth : int, optional
        Items uploaded ahead (2).

    Returns
    -------
    iterator of pyopencl.array.Array
        A generator: ``close()`` it (or let it go) to stop early.
    """
    queues = _queues(queue)
    if len(queues) != 1:
        raise TypeError("prefetch takes one pyopencl.CommandQueue")
    d = _count(depth, "depth", False)
    it = iter(iterable)
    return _prefetch(queues, it, d)


def _prefetch(queues: list, it: Iterator, depth: int) -> Iterator[cl_array.Array]:
    try:
        first = next(it)
    except StopIteration:
        return
    first = _item(first, 0)
    feed = _PrefetchFeed(first, it)
    loader = Loader.__new__(Loader)
    loader._state = None
    layout = Layout([Field(None, first.shape, first.dtype, 0)], feed.capacity, True)
    loader._start(queues, feed, layout, 0, depth, 1, True, (0, 1))
    with loader:
        yield from loader
