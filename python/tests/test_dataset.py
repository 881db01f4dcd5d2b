# SPDX-License-Identifier: Apache-2.0
"""clpin.DatasetLoader and Loader(fields=...): several arrays per batch, a
map-style dataset, epochs, shuffle, samplers and shards."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyopencl as cl
import pytest

import clpin
from datasets import ArraySet, BadSet, DictSet, DyingSet, Sampler, TupleSet, Unpicklable

METHODS = ["thread", "process"]


def rows_of(n: int, bs: int, drop_last: bool) -> list:
    """The row counts of the batches of an epoch of n samples."""
    full, rest = divmod(n, bs)
    return [bs] * full + ([rest] if rest and not drop_last else [])


def labels(loader) -> list:
    """One epoch of a TupleSet loader: each batch's labels, values checked."""
    out = []
    for image, label in loader:
        x, y = image.get(), label.get()
        assert image.shape == (len(y), 2, 3) and image.dtype == np.float32
        assert label.dtype == np.int64
        assert np.array_equal(x, np.broadcast_to(y[:, None, None], x.shape).astype(np.float32))
        out.append(y.tolist())
    return out


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("n,bs,drop_last", [(24, 8, False), (25, 8, False), (25, 8, True),
                                            (7, 8, False), (7, 8, True)])
def test_tuple_samples_every_row_exact(queue, method, n, bs, drop_last):
    with clpin.DatasetLoader(queue, TupleSet(n), bs, drop_last=drop_last, workers=2,
                             worker_method=method) as loader:
        want = rows_of(n, bs, drop_last)
        assert len(loader) == len(want)
        for _ in range(2):  # two epochs, the same order (no shuffle)
            got = labels(loader)
            assert [len(b) for b in got] == want
            assert sum(got, []) == list(range(sum(want)))


@pytest.mark.parametrize("method", METHODS)
def test_dict_samples(queue, method):
    with clpin.DatasetLoader(queue, DictSet(10), 4, workers=2, worker_method=method) as loader:
        seen = []
        for batch in loader:
            assert list(batch) == ["x", "y", "z"]
            x, y, z = (batch[k].get() for k in ("x", "y", "z"))
            i = -y.astype(np.int64)
            assert x.dtype == np.uint16 and y.dtype == np.float64 and z.dtype == np.int8
            assert np.array_equal(x, i[:, None] + np.arange(5))
            assert np.array_equal(z, np.broadcast_to((i % 100)[:, None, None], (len(i), 2, 2)))
            # Each field is a plain buffer of its own, with the upload's event.
            for a in batch.values():
                assert isinstance(a.data, cl.Buffer) and a.events
            seen += i.tolist()
        assert seen == list(range(10))


@pytest.mark.parametrize("method", METHODS)
def test_array_samples(queue, method):
    with clpin.DatasetLoader(queue, ArraySet(9), 4, workers=2, worker_method=method) as loader:
        got = [b.get() for b in loader]
    assert [g.shape for g in got] == [(4, 4), (4, 4), (1, 4)]
    allrows = np.concatenate(got)
    assert np.array_equal(allrows, np.arange(9)[:, None] * np.arange(1, 5))


def test_shuffle_is_a_permutation_that_changes_per_epoch(queue):
    with clpin.DatasetLoader(queue, TupleSet(50), 8, shuffle=True, seed=7, workers=2) as loader:
        orders = [sum(labels(loader), []) for _ in range(3)]
        for o in orders:
            assert sorted(o) == list(range(50))
        assert orders[0] != orders[1] != orders[2]
        loader.set_epoch(1)  # epoch 1 again: the same order
        assert sum(labels(loader), []) == orders[1]
    # Another loader, same seed: the same orders (epoch e depends on seed and e).
    with clpin.DatasetLoader(queue, TupleSet(50), 8, shuffle=True, seed=7, workers=1,
                             worker_method="thread") as other:
        other.set_epoch(2)
        assert sum(labels(other), []) == orders[2]


def test_shuffle_order_equal_across_processes(queue, tmp_path):
    script = tmp_path / "order.py"
    script.write_text(textwrap.dedent("""
        import json, sys
        import pyopencl as cl
        import clpin
        from datasets import TupleSet
        p = [p for p in cl.get_platforms() if p.name == sys.argv[1]][0]
        q = cl.CommandQueue(cl.Context([p.get_devices()[0]]))
        with clpin.DatasetLoader(q, TupleSet(40), 16, shuffle=True, seed=11, workers=1,
                                 worker_method="thread") as loader:
            loader.set_epoch(3)
            print(json.dumps([b[1].get().tolist() for b in loader]))
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, str(script), queue.device.platform.name],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    theirs = json.loads(r.stdout)
    with clpin.DatasetLoader(queue, TupleSet(40), 16, shuffle=True, seed=11, workers=2) as loader:
        loader.set_epoch(3)
        mine = [b[1].get().tolist() for b in loader]
    assert mine == theirs


@pytest.mark.parametrize("world", [2, 3])
def test_shards_disjoint_equal_and_covering(queue, world):
    n, bs = 25, 4
    parts = []
    for rank in range(world):
        with clpin.DatasetLoader(queue, TupleSet(n), bs, shuffle=True, seed=5,
                                 shard=(rank, world), workers=2) as loader:
            loader.set_epoch(1)
            parts.append(sum(labels(loader), []))
            assert len(loader) == -(-(-(-n // world)) // bs)
    per = -(-n // world)
    assert all(len(p) == per for p in parts)
    together = sum(parts, [])
    assert set(together) == set(range(n))
    # Disjoint up to the padding: exactly per * world - n samples repeat.
    assert len(together) - len(set(together)) == per * world - n


def test_sampler_order_kept_and_iterated_each_epoch(queue):
    order = [5, 3, 3, 9, 0, 1, 8]
    s = Sampler(order)
    with clpin.DatasetLoader(queue, TupleSet(10), 3, sampler=s, workers=2) as loader:
        assert sum(labels(loader), []) == order
        assert sum(labels(loader), []) == order
        assert s.iterations == 2


@pytest.mark.parametrize("method", METHODS)
def test_bad_samples_fail_their_batch_only(queue, method):
    ds = BadSet(20, bad=5, raises=13, dtype=17)
    with clpin.DatasetLoader(queue, ds, 4, workers=2, worker_method=method) as loader:
        it = iter(loader)
        got, errors = [], {}
        for b in range(5):
            try:
                image, label = next(it)
                got.append(label.get().tolist())
            except clpin.LoaderError as exc:
                errors[b] = exc
        with pytest.raises(StopIteration):
            next(it)
    assert got == [[0, 1, 2, 3], [8, 9, 10, 11]]
    assert set(errors) == {1, 3, 4}
    assert "sample 5" in str(errors[1]) and "element 0" in str(errors[1])
    assert "(2, 4)" in str(errors[1]) and "(2, 3)" in str(errors[1])
    assert isinstance(errors[1].__cause__, ValueError)
    assert "sample 13" in str(errors[3]) and "KeyError" in str(errors[3])
    assert isinstance(errors[3].__cause__, KeyError)
    assert "sample 17" in str(errors[4]) and "float64" in str(errors[4])
    assert isinstance(errors[4].__cause__, TypeError)
    assert all(e.index == b for b, e in errors.items())


@pytest.mark.parametrize("at", [1, 10, 19])  # the first, a middle and the last batch (the
# parent reads sample 0 itself, for the layout)
@pytest.mark.parametrize("how", ["sigkill", "sigsegv", "exit"])
def test_worker_dying_in_getitem_fails_its_batch_only(queue, how, at):
    """A worker process killed while it reads a sample: that batch is a
    WorkerError naming the batch and the worker, every other batch comes
    exact, and the next epoch runs on a replacement worker."""
    import signal
    with clpin.DatasetLoader(queue, DyingSet(20, at, how), 4, workers=2,
                             worker_method="process") as loader:
        for _ in range(2):  # the second epoch dies at `at` again, on a new worker
            it = iter(loader)
            got, errors = {}, {}
            for b in range(5):
                try:
                    image, label = next(it)
                    got[b] = label.get().tolist()
                    assert np.array_equal(image.get()[:, 0, 0], np.array(got[b], np.float32))
                except clpin.WorkerError as exc:
                    errors[b] = exc
            with pytest.raises(StopIteration):
                next(it)
            assert list(errors) == [at // 4]
            e = errors[at // 4]
            assert e.index == at // 4 and e.pid not in loader.worker_pids
            if how == "exit":
                assert e.exitcode == 7 and e.signal is None
            else:
                sig = signal.SIGKILL if how == "sigkill" else signal.SIGSEGV
                assert e.signal == sig and sig.name in str(e)
            assert got == {b: list(range(4 * b, 4 * b + 4)) for b in range(5) if b != at // 4}
        assert loader.stats()["worker_restarts"] >= 1  # the second death may not be replaced yet


def test_bad_arguments(queue):
    with pytest.raises(ValueError, match="seed"):
        clpin.DatasetLoader(queue, TupleSet(4), 2, shuffle=True, shard=(0, 2))
    with pytest.raises(ValueError, match="sampler"):
        clpin.DatasetLoader(queue, TupleSet(4), 2, shuffle=True, sampler=[0, 1])
    with pytest.raises(ValueError, match="empty"):
        clpin.DatasetLoader(queue, TupleSet(0), 2)
    with pytest.raises(ValueError, match="batch_size"):
        clpin.DatasetLoader(queue, TupleSet(4), 0)
    with pytest.raises(TypeError, match="len"):
        clpin.DatasetLoader(queue, object(), 2)
    with pytest.raises(ValueError, match="rank"):
        clpin.DatasetLoader(queue, TupleSet(4), 2, shard=(2, 2))
    with pytest.raises(TypeError, match="picklable"):
        clpin.DatasetLoader(queue, Unpicklable(4), 2, start_method="spawn")
    with pytest.raises(TypeError, match="dtype"):
        clpin.DatasetLoader(queue, [np.zeros(3, np.complex64)], 2)
    s = Sampler([0, 99])
    with pytest.raises(ValueError, match="99"):
        clpin.DatasetLoader(queue, TupleSet(4), 2, sampler=s)


def test_spawn_and_forkserver_datasets(queue):
    for method in ("spawn", "forkserver"):
        with clpin.DatasetLoader(queue, DictSet(6), 4, workers=1, start_method=method) as loader:
            assert [-b["y"].get() for b in loader][1].tolist() == [4, 5]


@pytest.mark.parametrize("method", METHODS)
def test_steady_state_allocates_nothing(queue, method):
    with clpin.DatasetLoader(queue, TupleSet(64), 8, shuffle=True, seed=1, workers=2,
                             worker_method=method) as loader:
        labels(loader)
        before = loader.stats()
        for _ in range(3):
            labels(loader)
        after = loader.stats()
    assert after["pinned_allocations"] == before["pinned_allocations"]
    assert after["buffers_created"] == before["buffers_created"]
    # Slot memory is slots x the batch, nothing per epoch: a batch of 8
    # samples of (2, 3) float32 + an int64 label is 256 bytes or so, which
    # worker processes round up to one page (a guard page follows each slot).
    assert after["slot_bytes"] == before["slot_bytes"]
    assert bool(after["worker_processes"]) == (method == "process")
    if method == "process":
        assert after["slot_bytes"] == after["slots"] * mmap.PAGESIZE
    else:
        assert 8 * (24 + 8) <= after["slot_bytes"] // after["slots"] < mmap.PAGESIZE


INHERITED = """
import gc, sys
import numpy as np
import pyopencl as cl
import clpin


def collecting_fill(out, index):
    gc.collect()  # collects the parent's old loader, inherited by this worker
    out[:] = index


def old_loader(queue):
    # A process loader left in a reference cycle, not closed, one batch
    # held: what a notebook's traceback keeps.
    old = clpin.Loader(queue, lambda out, i: None, (16,), np.uint8, batches=2, workers=2)
    it = iter(old)
    next(it)
    cycle = [old, it]
    cycle.append(cycle)


if __name__ == "__main__":
    platform, method, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    p = [p for p in cl.get_platforms() if p.name == platform][0]
    q = cl.CommandQueue(cl.Context([p.get_devices()[0]]))
    bad = 0
    for r in range(rounds):
        gc.disable()
        old_loader(q)
        with clpin.Loader(q, collecting_fill, (16,), np.uint8, batches=6, workers=2,
                          start_method=method) as loader:
            for _ in range(2):
                got = [b.get()[0] for b in loader]
                bad += got != list(range(6))
            bad += loader.stats()["worker_restarts"]
        gc.enable()
        gc.collect()
    print("bad", bad)
"""


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_worker_collecting_an_inherited_loader(queue, tmp_path, method):
    """A worker whose fill collects garbage (an old loader of the parent's,
    in a cycle) must not act on it: every batch right, no worker lost."""
    script = tmp_path / "inherited.py"
    script.write_text(INHERITED)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, str(script), queue.device.platform.name, method, "3"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["bad", "0"], r.stdout + r.stderr[-3000:]


def test_fields_loader(queue):
    def fill(out, index):
        out["image"][:] = index
        out["label"][:] = np.arange(8) + 10 * index
        return index < 4

    fields = {"image": ((8, 3, 5), np.float32), "label": ((8,), np.int64)}
    for method in METHODS:
        with clpin.Loader(queue, fill, fields=fields, workers=2, worker_method=method) as loader:
            for _ in range(2):
                n = 0
                for b in loader:
                    i = loader.last_index
                    assert set(b) == {"image", "label"}
                    assert b["image"].shape == (8, 3, 5) and b["label"].dtype == np.int64
                    assert (b["image"].get() == i).all()
                    assert np.array_equal(b["label"].get(), np.arange(8) + 10 * i)
                    assert b["image"].data.size >= 8 * 3 * 5 * 4
                    n += 1
                assert n == 4
            st = loader.stats()
            if method == "process":  # each slot the batch, rounded up to whole pages
                align = max(64, queue.device.mem_base_addr_align // 8)
                batch = -(-8 * 3 * 5 * 4 // align) * align + 8 * 8
                page = mmap.PAGESIZE
                assert st["slot_bytes"] == st["slots"] * (-(-batch // page) * page)


def test_fields_bad_arguments(queue):
    f = lambda out, i: None  # noqa: E731
    with pytest.raises(TypeError, match="not both"):
        clpin.Loader(queue, f, (4,), np.uint8, fields={"a": ((4,), np.uint8)})
    with pytest.raises(TypeError, match="shape and dtype"):
        clpin.Loader(queue, f)
    with pytest.raises(ValueError, match="empty"):
        clpin.Loader(queue, f, fields={})
    with pytest.raises(TypeError, match="fields\\['a'\\]"):
        clpin.Loader(queue, f, fields={"a": (4,)})
    with pytest.raises(TypeError, match="fields\\['b'\\]"):
        clpin.Loader(queue, f, fields={"a": ((4,), np.uint8), "b": ((4,), np.complex64)})


@pytest.mark.parametrize("timeout", [float("inf"), 1e7, float("nan")])
def test_timeout_out_of_range(queue, timeout):
    with pytest.raises(ValueError, match="timeout"):
        clpin.Loader(queue, lambda out, i: None, (4,), np.uint8, timeout=timeout)


def test_slots_larger_than_the_machine(queue):
    with pytest.raises(ValueError, match="slots"):
        clpin.Loader(queue, lambda out, i: None, (1 << 61,), np.uint8)
    with pytest.raises(ValueError, match="too large"):
        clpin.Loader(queue, lambda out, i: None, (1 << 62,), np.uint8)
