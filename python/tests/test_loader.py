# SPDX-License-Identifier: Apache-2.0
"""clpin.Loader and clpin.prefetch (the loader, clpin_loader_*) on POCL."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pyopencl as cl
import pytest
from conftest import epoch
from workerfns import batch_bytes

import clpin


def pattern_fill(nbytes: int, delay=None):
    def fill(out, index):
        if delay is not None:
            time.sleep(delay(index))
        out.view(np.uint8).reshape(-1)[:] = batch_bytes(index, nbytes)
    return fill


def test_loader_codes_are_the_librarys():
    """The codes the loader compares with come from the library, and the
    package's own fill-failure code lies in clpin's reserved range without
    being any code of clpin's (the library gives it no name)."""
    from clpin import _loader

    assert _loader.END == clpin.CODES["END"] == clpin.END
    assert _loader.ERR_CANCELLED == clpin.CODES["ERR_CANCELLED"]
    own = _loader.ERR_PYTHON_EXCEPTION
    assert -20099 < own <= -20000
    assert own not in clpin.CODES.values()
    assert not clpin.strerror(own).startswith("CLPIN_"), clpin.strerror(own)


# ------------------------------------------------------------------ batches


@pytest.mark.parametrize("shape,dtype,workers,depth", [
    ((64,), np.uint8, 1, 1),
    ((3, 257), np.float32, 2, 2),
    ((16, 64, 64), np.int16, 4, 3),
    ((1,), np.float64, 3, 2),
])
def test_batches_byte_exact_in_order(queue, shape, dtype, workers, depth):
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    # Uneven fill times: later indices often finish first.
    delay = lambda i: 0.004 * ((7 * i) % 3)  # noqa: E731
    with clpin.Loader(queue, pattern_fill(nbytes, delay), shape, dtype, batches=12,
                      depth=depth, workers=workers) as loader:
        arrays_ok = []
        for arr in loader:
            assert arr.shape == tuple(shape) and arr.dtype == np.dtype(dtype)
            assert arr.queue is queue
            assert len(arr.events) == 1 and isinstance(arr.events[0], cl.Event)
            got = arr.get().view(np.uint8).reshape(-1)
            arrays_ok.append((loader.last_index, np.array_equal(got, batch_bytes(loader.last_index, nbytes))))
        assert [i for i, _ in arrays_ok] == list(range(12))
        assert all(ok for _, ok in arrays_ok)
        s = loader.stats()
        assert s["batches"] == 12 and s["bytes"] == 12 * nbytes and s["failed"] == 0
        assert s["buffers_created"] == depth + 1
        assert s["workers"] == workers


def test_unordered_delivers_every_batch_once(queue):
    nbytes = 4096
    # Batch 0 is slow: in order it would hold up every other.
    delay = lambda i: 0.3 if i == 0 else 0.0  # noqa: E731
    with clpin.Loader(queue, pattern_fill(nbytes, delay), nbytes, np.uint8, batches=10,
                      workers=3, depth=2, ordered=False) as loader:
        seen = epoch(loader, check_bytes=nbytes)
    assert sorted(seen) == list(range(10))
    assert seen[0] != 0  # the slow one did not come first


def test_end_of_epoch_by_fill_returning_false(queue):
    nbytes = 1024

    def fill(out, index):
        if index >= 7:
            return False
        out.view(np.uint8)[:] = batch_bytes(index, nbytes)
        return True

    with clpin.Loader(queue, fill, (nbytes,), np.uint8, workers=2) as loader:
        assert epoch(loader, check_bytes=nbytes) == list(range(7))
        assert epoch(loader, check_bytes=nbytes) == list(range(7))  # and again


def test_two_epochs_and_a_break(queue):
    nbytes = 2048
    with clpin.Loader(queue, pattern_fill(nbytes), nbytes, np.uint8, batches=6) as loader:
        assert epoch(loader, check_bytes=nbytes) == list(range(6))
        before = loader.stats()
        assert epoch(loader, check_bytes=nbytes) == list(range(6))
        # A for left early: the next one starts a new epoch at 0.
        for n, _ in enumerate(loader):
            if n == 2:
                break
        assert loader.last_index == 2
        assert epoch(loader, check_bytes=nbytes) == list(range(6))
        after = loader.stats()
        # Epochs reuse the memory: nothing created since the first.
        assert after["pinned_allocations"] == before["pinned_allocations"]
        assert after["buffers_created"] == before["buffers_created"]


def test_shard_takes_every_world_th_batch(queue):
    nbytes = 256
    with clpin.Loader(queue, pattern_fill(nbytes), nbytes, np.uint8, batches=10,
                      shard=(1, 3)) as loader:
        assert epoch(loader, check_bytes=nbytes) == [1, 4, 7]


def test_several_queues_round_robin(ctx, device):
    queues = [cl.CommandQueue(ctx, device) for _ in range(2)]
    nbytes = 512
    with clpin.Loader(queues, pattern_fill(nbytes), nbytes, np.uint8, batches=6) as loader:
        for n, arr in enumerate(loader):
            assert loader.last_index == n
            assert arr.queue is queues[n % 2]
            assert np.array_equal(arr.get(), batch_bytes(n, nbytes))


# -------------------------------------------------------- array lifetimes


def test_batch_is_not_overwritten_while_callers_kernel_may_run(ctx, queue):
    """Batch 0's kernel is held back by a user event until batch 2 (which
    reuses batch 0's device buffer: depth 1, two buffers) has been handed
    out; it must still read batch 0's bytes."""
    n = 1 << 14
    prg = cl.Program(ctx, """
        __kernel void copy(__global const uint *src, __global uint *dst) {
          dst[get_global_id(0)] = src[get_global_id(0)];
        }""").build()
    out = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * n)
    gate = cl.UserEvent(ctx)
    with clpin.Loader(queue, pattern_fill(4 * n), n, np.uint32, batches=4, depth=1,
                      workers=1) as loader:
        it = iter(loader)
        first = next(it)
        assert loader.last_index == 0
        prg.copy(queue, (n,), None, first.data, out, wait_for=[gate] + list(first.events))
        second = next(it)  # batch 0 goes back: its buffer waits for the kernel
        third = next(it)   # batch 1 back; batch 2 is in batch 0's buffer
        assert loader.last_index == 2
        time.sleep(0.2)  # an upload that ignored the kernel would have run by now
        gate.set_status(cl.command_execution_status.COMPLETE)
        got = np.empty(n, np.uint32)
        cl.enqueue_copy(queue, got, out, is_blocking=True)
        assert np.array_equal(got.view(np.uint8), batch_bytes(0, 4 * n))
        assert np.array_equal(third.get().view(np.uint8), batch_bytes(2, 4 * n))
        del second


def test_copy_keeps_a_batch_past_the_next_step(queue):
    nbytes = 4096
    with clpin.Loader(queue, pattern_fill(nbytes), nbytes, np.uint8, batches=8, depth=1) as loader:
        kept = []
        for arr in loader:
            kept.append((loader.last_index, arr.copy()))
        for index, copy in kept:
            assert np.array_equal(copy.get(), batch_bytes(index, nbytes))


# ----------------------------------------------------------- exceptions


@pytest.mark.parametrize("bad", [0, 5, 9])
def test_fill_exception_reraised_at_its_batch(queue, bad):
    nbytes = 1024

    def fill(out, index):
        if index == bad:
            raise ValueError(f"no data for {index}")
        out.view(np.uint8)[:] = batch_bytes(index, nbytes)

    with clpin.Loader(queue, fill, nbytes, np.uint8, batches=10, workers=3) as loader:
        it = iter(loader)
        seen = []
        with pytest.raises(clpin.LoaderError) as info:
            for arr in it:
                assert np.array_equal(arr.get(), batch_bytes(loader.last_index, nbytes))
                seen.append(loader.last_index)
        assert seen == list(range(bad))  # every batch before it, in order
        err = info.value
        assert err.index == bad and loader.last_index == bad
        assert f"batch {bad}" in str(err) and f"no data for {bad}" in str(err)
        assert isinstance(err.__cause__, ValueError)
        # Nothing else is lost: the same iteration goes on after it.
        rest = []
        for arr in it:
            assert np.array_equal(arr.get(), batch_bytes(loader.last_index, nbytes))
            rest.append(loader.last_index)
        assert rest == list(range(bad + 1, 10))
        assert loader.stats()["failed"] == 1
        # The next epoch calls fill again: the same batch fails the same way.
        with pytest.raises(clpin.LoaderError, match=f"batch {bad}"):
            epoch(loader)


def test_fill_returning_something_else_is_an_error(queue):
    with clpin.Loader(queue, lambda out, i: 1, 16, np.uint8, batches=3) as loader:
        with pytest.raises(clpin.LoaderError, match="batch 0") as info:
            epoch(loader)
        assert isinstance(info.value.__cause__, TypeError)


# ------------------------------------------------------ cancel and close


def _slow_loader(queue, seconds=0.05, **kw):
    def fill(out, index):
        time.sleep(seconds)
        out[:] = index % 251
    return clpin.Loader(queue, fill, 4096, np.uint8, **kw)


@pytest.mark.parametrize("how", ["close", "cancel"])
def test_close_or_cancel_while_another_thread_iterates(queue, how):
    loader = _slow_loader(queue, workers=2)
    seen, errors = [], []
    started = threading.Event()

    def run():
        try:
            for arr in loader:
                v = arr.get()
                assert (v == loader.last_index % 251).all()
                seen.append(loader.last_index)
                started.set()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(10)
    time.sleep(0.1)
    t0 = time.monotonic()
    getattr(loader, how)()
    t.join(10)
    assert not t.is_alive(), f"the iteration did not end after {how}()"
    assert time.monotonic() - t0 < 5
    assert not errors, errors
    assert seen == list(range(len(seen))) and seen
    if how == "cancel":
        # The next for starts a new epoch.
        for n, _ in enumerate(loader):
            if n == 3:
                break
        assert loader.last_index == 3
    loader.close()
    loader.close()  # idempotent
    assert loader.closed
    assert loader.stats()["batches"] >= len(seen)  # the last values
    with pytest.raises(ValueError, match="closed"):
        iter(loader)


def test_release_context_refuses_while_a_loader_is_open(queue):
    loader = _slow_loader(queue, seconds=0.0)
    with pytest.raises(RuntimeError, match="Loader"):
        clpin.release_context(queue)
    loader.close()
    clpin.release_context(queue)  # and the fixture's release again: nothing left


def test_dropping_a_loader_closes_it(queue):
    loader = _slow_loader(queue, seconds=0.01)
    it = iter(loader)
    next(it)
    state = loader._state
    del loader, it
    assert state.ptr is None


# ------------------------------------------------------------- prefetch


def test_prefetch_list_of_arrays(queue):
    rng = np.random.default_rng(3)
    items = [rng.standard_normal((64, 32)).astype(np.float32),
             rng.standard_normal((10, 32)).astype(np.float32),
             rng.standard_normal(2048).astype(np.float32)[::2],  # not contiguous
             np.zeros((0,), np.float32)]
    got = []
    for arr in clpin.prefetch(queue, items):
        assert arr.queue is queue
        got.append(arr.get())
    assert len(got) == len(items)
    for a, b in zip(got, items):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.array_equal(a, b)


def test_prefetch_generator(queue):
    def gen():
        for i in range(20):
            yield np.full((100, i + 1), i, np.int64)

    # The first item sets the capacity: a generator whose items grow fails at item 1.
    it = clpin.prefetch(queue, gen(), depth=3)
    first = next(it)
    assert np.array_equal(first.get(), np.zeros((100, 1), np.int64))
    with pytest.raises(clpin.LoaderError, match="item 1 has 1600 bytes, more than the first") as info:
        next(it)
    assert info.value.index == 1 and isinstance(info.value.__cause__, ValueError)
    it.close()

    def shrinking():
        for i in range(20, 0, -1):
            yield np.full((i, 7), i, np.int64)

    seen = [arr.get() for arr in clpin.prefetch(queue, shrinking())]
    assert [a.shape for a in seen] == [(i, 7) for i in range(20, 0, -1)]
    assert all((a == a.shape[0]).all() for a in seen)


def test_prefetch_errors_at_their_item(queue):
    def gen():
        yield np.zeros(8, np.float32)
        yield np.ones(8, np.float32)
        yield np.zeros(8, np.float64)

    it = clpin.prefetch(queue, gen())
    assert next(it).get()[0] == 0 and next(it).get()[0] == 1
    with pytest.raises(clpin.LoaderError, match="item 2 has dtype float64") as info:
        next(it)
    assert isinstance(info.value.__cause__, TypeError)
    it.close()

    def failing():
        yield np.zeros(4, np.uint8)
        raise KeyError("the source broke")

    it = clpin.prefetch(queue, failing())
    next(it)
    with pytest.raises(clpin.LoaderError, match="batch 1.*the source broke") as info:
        next(it)
    assert isinstance(info.value.__cause__, KeyError)
    it.close()
    assert list(clpin.prefetch(queue, [])) == []


# --------------------------------------------------------- bad arguments


def test_bad_arguments(queue):
    fill = pattern_fill(16)
    with pytest.raises(TypeError, match="CommandQueue"):
        clpin.Loader("q", fill, 16, np.uint8)
    with pytest.raises(ValueError, match="empty list"):
        clpin.Loader([], fill, 16, np.uint8)
    with pytest.raises(TypeError, match="callable"):
        clpin.Loader(queue, None, 16, np.uint8)
    with pytest.raises(TypeError, match="dtype"):
        clpin.Loader(queue, fill, 16, object)
    with pytest.raises(ValueError, match="depth must be >= 1"):
        clpin.Loader(queue, fill, 16, np.uint8, depth=0)
    with pytest.raises(TypeError, match="batches must be an int"):
        clpin.Loader(queue, fill, 16, np.uint8, batches=2.5)
    with pytest.raises(TypeError, match="shard"):
        clpin.Loader(queue, fill, 16, np.uint8, shard=3)
    # What clpin itself refuses: a clpin.Error naming the call, the code and,
    # in the library's detail, the argument.
    cases = [
        (dict(shape=(0, 4)), clpin.ERR_INVALID_SIZE, "holds 0 bytes"),
        (dict(depth=65), clpin.ERR_INVALID_ARGUMENT, "depth above 64"),
        (dict(workers=1000), clpin.ERR_INVALID_ARGUMENT, "workers above 256"),
        (dict(shard=(3, 3)), clpin.ERR_INVALID_ARGUMENT, "shard is not below"),
        (dict(shard=(1, 1)), clpin.ERR_INVALID_ARGUMENT, "shard is set"),
    ]
    for kw, code, why in cases:
        args = dict(shape=16)
        args.update(kw)
        shape = args.pop("shape")
        with pytest.raises(clpin.Error) as info:
            clpin.Loader(queue, fill, shape, np.uint8, worker_method="thread", **args)
        assert info.value.code == code, kw
        assert info.value.call == "clpin_loader_create"
        assert why in info.value.detail and why in str(info.value), (kw, str(info.value))
    with pytest.raises(TypeError, match="one pyopencl.CommandQueue"):
        clpin.prefetch([queue, queue], [])
    with pytest.raises(ValueError, match="depth"):
        clpin.prefetch(queue, [], depth=0)
    with pytest.raises(clpin.LoaderError, match="not a numpy.ndarray"):
        list(clpin.prefetch(queue, [np.zeros(3), [1, 2]]))
    with pytest.raises(TypeError, match="numpy.ndarray"):
        list(clpin.prefetch(queue, [[1, 2]]))


# ------------------------------------------------------------------ exit

EXIT_SCRIPT = textwrap.dedent("""
    import os, sys, threading, time
    import numpy as np, pyopencl as cl, clpin
    want = os.environ.get("CLPIN_TEST_PLATFORM", "")
    plat = [p for p in cl.get_platforms() if want in p.name][0]
    ctx = cl.Context(plat.get_devices()[:1])
    q = cl.CommandQueue(ctx)
    mode = sys.argv[1]

    def fill(out, index):
        time.sleep(0.02 if mode != "slow" else 0.5)
        out[:] = index

    if mode == "thread":
        # A daemon thread waits in the iteration when the interpreter exits.
        loader = clpin.Loader(q, fill, 1 << 16, np.uint8, workers=2, worker_method="thread")
        def run():
            for arr in loader:
                time.sleep(0.01)
        threading.Thread(target=run, daemon=True).start()
        time.sleep(0.2)
    elif mode == "cycle":
        # fill refers to the loader: only the exit hook closes it.
        box = {}
        def fill2(out, index):
            if "loader" in box:
                box["loader"].last_index
            out[:] = 1
        box["loader"] = clpin.Loader(q, fill2, 1 << 16, np.uint8, workers=3,
                                     worker_method="thread")
        it = iter(box["loader"])
        next(it)
        del it
    else:
        loader = clpin.Loader(q, fill, 1 << 16, np.uint8, workers=4, depth=3)
        it = iter(loader)
        next(it); next(it)
        got = clpin.prefetch(q, (np.full(1000, i, np.uint8) for i in range(1000)))
        next(got)
    print("exiting", flush=True)
""")


@pytest.mark.parametrize("mode", ["plain", "slow", "thread", "cycle"])
def test_interpreter_exits_with_live_loaders(mode):
    env = dict(os.environ)
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, mode], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "exiting" in out.stdout
    assert "Traceback" not in out.stderr, out.stderr
    assert time.monotonic() - t0 < 30
