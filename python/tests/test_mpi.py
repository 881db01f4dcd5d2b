# SPDX-License-Identifier: Apache-2.0
"""clpin.mpi under mpirun: ci/stages/47-mpi.sh runs this file on 2 and 3
ranks (every rank runs every test, in the same order).

A plain pytest run (one process, no mpirun) skips the module, saying so;
with CLPIN_REQUIRE_MPI=1 (the MPI stage sets it) that is a failure instead,
so the stage can never pass by skipping.
"""

from __future__ import annotations

import faulthandler
import os

import numpy as np
import pytest

_UNDER_MPIRUN = any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))
if not _UNDER_MPIRUN:
    if os.environ.get("CLPIN_REQUIRE_MPI") == "1":
        raise RuntimeError("CLPIN_REQUIRE_MPI=1 but not under mpirun")
    pytest.skip("runs under mpirun only (ci/stages/47-mpi.sh: mpirun -np 2 and 3)",
                allow_module_level=True)

os.environ.setdefault("CLPIN_MPI_CHUNK", "64K")

import pyopencl.array as cl_array  # noqa: E402
from mpi4py import MPI  # noqa: E402

import clpin  # noqa: E402
import clpin.mpi  # noqa: E402

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
CHUNK = 64 << 10

if SIZE < 2:
    pytest.fail("test_mpi.py needs at least 2 ranks", pytrace=False)


@pytest.fixture(autouse=True)
def _bounded():
    """Every test here ends within 120 s: a hang prints every thread's stack
    and ends the rank, and mpirun then the job."""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(params=[True, False], ids=["shm", "p2p"])
def shm(request):
    os.environ["CLPIN_MPI_SHM"] = "1" if request.param else "0"
    yield request.param
    os.environ["CLPIN_MPI_SHM"] = "1"
    COMM.Barrier()


def _pattern(n: int, salt: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.uint64) * 131 + salt * 7) % 251).astype(np.uint8)


@pytest.mark.parametrize("n", [0, 1, 7, CHUNK - 1, CHUNK + 1, 5 * CHUNK + 3])
def test_send_recv_exact_bytes(queue, shm, n):
    before = clpin.mpi.stats()
    for src, dst in ((0, 1), (1, 0)):
        salt = n % 97 + src
        if RANK == src:
            x = cl_array.to_device(queue, _pattern(n, salt))
            clpin.mpi.send(x, dest=dst, tag=5)
        elif RANK == dst:
            y = cl_array.to_device(queue, np.full(n, 0xEE, np.uint8))
            ev = clpin.mpi.recv(y, source=src, tag=5)
            assert ev is not None and ev in y.events
            np.testing.assert_array_equal(y.get(), _pattern(n, salt))
    after = clpin.mpi.stats()
    if RANK <= 1 and n > CHUNK:
        moved = after["bytes_sent_shm"] - before["bytes_sent_shm"]
        assert moved == (n if shm else 0)
        if not shm:
            assert after["bytes_sent_p2p"] - before["bytes_sent_p2p"] == n


@pytest.mark.parametrize("n", [0, 7, CHUNK + 1, 5 * CHUNK + 3])
def test_exchange_both_ways_at_once(queue, shm, n):
    """Ranks 0 and 1 post a receive and a send each (one tag each way) and
    then wait: both directions run at once, on shared memory when allowed."""
    if RANK > 1:
        return
    peer = 1 - RANK
    before = clpin.mpi.stats()
    x = cl_array.to_device(queue, _pattern(n, 30 + RANK))
    y = cl_array.to_device(queue, np.full(n, 0xEE, np.uint8))
    r = clpin.mpi.irecv(y, source=peer, tag=40 + peer)
    s = clpin.mpi.isend(x, dest=peer, tag=40 + RANK)
    assert s.wait() is None
    ev = r.wait()
    assert ev is not None and ev in y.events and r.done and r.wait() is ev
    np.testing.assert_array_equal(y.get(), _pattern(n, 30 + peer))
    after = clpin.mpi.stats()
    if n > CHUNK:
        assert after["bytes_sent_shm"] - before["bytes_sent_shm"] == (n if shm else 0)
        assert after["bytes_received_shm"] - before["bytes_received_shm"] == (n if shm else 0)


def test_requests_ring_and_errors(queue):
    n = 3 * CHUNK + 1
    right, left = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    x = cl_array.to_device(queue, _pattern(n, RANK))
    y = cl_array.empty(queue, n, np.uint8)
    with clpin.mpi.irecv(y, source=left, tag=50 + left) as r, \
            clpin.mpi.isend(x, dest=right, tag=50 + RANK):
        pass  # both waited for on leaving
    assert r.done
    np.testing.assert_array_equal(y.get(), _pattern(n, left))
    # Refused here, before anything is sent: no request to wait for.
    with pytest.raises(clpin.Error) as e:
        clpin.mpi.isend(x, dest=SIZE)
    assert e.value.name == "CLPIN_ERR_INVALID_ARGUMENT" and "dest" in e.value.detail
    with pytest.raises(clpin.Error) as e:
        clpin.mpi.irecv(y, source=MPI.ANY_SOURCE)
    assert e.value.name == "CLPIN_ERR_INVALID_ARGUMENT"
    # Sizes that disagree (multi-chunk): both waits raise CLPIN_ERR_MISMATCH.
    if RANK <= 1:
        z = cl_array.zeros(queue, (2 + RANK) * CHUNK, np.uint8)
        req = clpin.mpi.isend(z, dest=1, tag=61) if RANK == 0 else \
            clpin.mpi.irecv(z, source=0, tag=61)
        with pytest.raises(clpin.Error) as e:
            req.wait()
        assert e.value.name == "CLPIN_ERR_MISMATCH"
        assert req.wait() is None  # ended: a second wait returns at once
    # Dropped without a wait: waited for when collected, nothing left behind.
    req = clpin.mpi.isend(x, dest=right, tag=70 + RANK)
    got = clpin.mpi.irecv(y, source=left, tag=70 + left)
    del req
    got.wait()
    np.testing.assert_array_equal(y.get(), _pattern(n, left))
    COMM.Barrier()


def test_several_senders(queue, shm):
    n = 3 * CHUNK + 5
    if RANK:
        clpin.mpi.send(cl_array.to_device(queue, _pattern(n, RANK)), dest=0, tag=RANK)
    else:
        for src in range(SIZE - 1, 0, -1):
            y = cl_array.empty(queue, n, np.uint8)
            clpin.mpi.recv(y, source=src, tag=src)
            np.testing.assert_array_equal(y.get(), _pattern(n, src))


def _values(rank: int, n: int, dtype) -> np.ndarray:
    v = ((np.arange(n) * 7 + rank * 13) % 101 - 50).astype(np.int64)
    return (v * 1000000007 if np.dtype(dtype) == np.int64 else v).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("n", [1, 3000, 3 * CHUNK // 4 + 9])
def test_allreduce_against_numpy(queue, shm, dtype, op, n):
    x = cl_array.to_device(queue, _values(RANK, n, dtype))
    out = clpin.mpi.allreduce(x, op=op)
    assert out is x
    every = np.stack([_values(r, n, dtype) for r in range(SIZE)])
    want = {"sum": every.sum(axis=0, dtype=dtype), "max": every.max(axis=0),
            "min": every.min(axis=0)}[op]
    np.testing.assert_array_equal(x.get(), want)


def test_allreduce_paths(queue, shm):
    before = clpin.mpi.stats()
    x = cl_array.to_device(queue, np.ones(2 * CHUNK, np.float32))
    clpin.mpi.allreduce(x)
    np.testing.assert_array_equal(x.get(), np.full(2 * CHUNK, SIZE, np.float32))
    after = clpin.mpi.stats()
    key = "allreduce_shm" if shm else "allreduce_ring"
    assert after[key] - before[key] == 1


@pytest.mark.parametrize("n", [0, 1, CHUNK + 1, 4 * CHUNK + 3])
def test_bcast_from_every_root(queue, shm, n):
    for root in range(SIZE):
        data = _pattern(n, root + 1) if RANK == root else np.zeros(n, np.uint8)
        x = cl_array.to_device(queue, data)
        assert clpin.mpi.bcast(x, root=root) is x
        np.testing.assert_array_equal(x.get(), _pattern(n, root + 1))


def test_collective_requests_in_order(queue, shm):
    # Outstanding at once, each of another size (ranks that ran them in
    # different orders would fail with CLPIN_ERR_MISMATCH), a blocking one
    # between them, waited in reverse order.
    sizes = [3000, 3 * CHUNK // 4 + 9, 9 * CHUNK // 4 + 1]
    xs = [cl_array.to_device(queue, _values(RANK, n, np.float32)) for n in sizes]
    root = SIZE - 1
    b = cl_array.to_device(queue, _pattern(5 * CHUNK + 3, 9) if RANK == root
                           else np.zeros(5 * CHUNK + 3, np.uint8))
    reqs = [clpin.mpi.iallreduce(xs[0])]
    rb = clpin.mpi.ibcast(b, root=root)
    reqs += [clpin.mpi.iallreduce(x, op="max") for x in xs[1:]]
    d = cl_array.to_device(queue, _values(RANK, 1000, np.float64))
    clpin.mpi.allreduce(d, op="min")  # after the requests made before it
    assert all(r.done for r in reqs)
    for r in reversed(reqs):
        assert r.wait() is not None
    rb.wait()
    every = [np.stack([_values(r, n, np.float32) for r in range(SIZE)]) for n in sizes]
    np.testing.assert_array_equal(xs[0].get(), every[0].sum(axis=0, dtype=np.float32))
    for x, e in zip(xs[1:], every[1:]):
        np.testing.assert_array_equal(x.get(), e.max(axis=0))
    np.testing.assert_array_equal(b.get(), _pattern(5 * CHUNK + 3, 9))
    np.testing.assert_array_equal(
        d.get(), np.stack([_values(r, 1000, np.float64) for r in range(SIZE)]).min(axis=0))


def test_collective_request_errors(queue):
    # A refusal in C on rank 0 comes out of its wait, CLPIN_ERR_PEER on the
    # others; a Python refusal raises at once after telling the others.
    x = cl_array.to_device(queue, _values(RANK, 1000 + (RANK == 0), np.float32))
    req = clpin.mpi.iallreduce(x)
    with pytest.raises(clpin.Error) as e:
        req.wait()
    assert e.value.name == "CLPIN_ERR_MISMATCH"
    y = cl_array.to_device(queue, _values(RANK, 1000, np.float32))
    if RANK == 0:
        with pytest.raises(ValueError):
            clpin.mpi.iallreduce(y, op="mean")
    else:
        with pytest.raises(clpin.Error) as e:
            clpin.mpi.iallreduce(y).wait()
        assert e.value.name == "CLPIN_ERR_PEER"
    np.testing.assert_array_equal(y.get(), _values(RANK, 1000, np.float32))
    with clpin.mpi.iallreduce(y) as r:  # and then one that works
        pass
    assert r.done
    every = np.stack([_values(k, 1000, np.float32) for k in range(SIZE)])
    np.testing.assert_array_equal(y.get(), every.sum(axis=0, dtype=np.float32))


def test_bad_arguments_fail_on_every_rank(queue):
    x = cl_array.zeros(queue, 100 + (RANK if RANK else 0), np.float32)
    with pytest.raises(clpin.Error) as e:
        clpin.mpi.allreduce(x)  # counts differ
    assert e.value.name == "CLPIN_ERR_MISMATCH" and e.value.code == clpin.ERR_MISMATCH
    y = cl_array.zeros(queue, 64, np.float32)
    with pytest.raises(clpin.Error) as e:
        clpin.mpi.allreduce(y, op="max" if RANK else "min")
    assert e.value.name == "CLPIN_ERR_MISMATCH"
    with pytest.raises(clpin.Error) as e:
        clpin.mpi.bcast(y, root=SIZE)
    assert e.value.name == "CLPIN_ERR_INVALID_ARGUMENT" and "root" in e.value.detail
    with pytest.raises(clpin.Error) as e:
        clpin.mpi.send(y, dest=SIZE)
    assert e.value.name == "CLPIN_ERR_INVALID_ARGUMENT" and "dest" in e.value.detail
    with pytest.raises(ValueError):
        clpin.mpi.allreduce(y, op="prod")
    with pytest.raises(TypeError):
        clpin.mpi.allreduce(cl_array.zeros(queue, 8, np.uint8))
    # Refused in Python on one rank only: the others learn of it, none hangs.
    for bad in range(SIZE):
        z = cl_array.zeros(queue, 8, np.uint8 if RANK == bad else np.float32)
        with pytest.raises(TypeError if RANK == bad else clpin.Error) as e:
            clpin.mpi.allreduce(z)
        if RANK != bad:
            assert e.value.code == clpin.ERR_PEER
        with pytest.raises(TypeError if RANK == bad else clpin.Error) as e:
            clpin.mpi.bcast(z if RANK != bad else z.get(), root=0)
        if RANK != bad:
            assert e.value.code == clpin.ERR_PEER
    # Everyone is still in step: a good call works.
    clpin.mpi.allreduce(y)
    np.testing.assert_array_equal(y.get(), np.zeros(64, np.float32))


def test_comm_argument(queue):
    sub = COMM.Split(color=0, key=SIZE - RANK)  # reversed ranks
    x = cl_array.to_device(queue, np.full(10, sub.Get_rank(), np.int32))
    clpin.mpi.allreduce(x, op="max", comm=sub)
    np.testing.assert_array_equal(x.get(), np.full(10, SIZE - 1, np.int32))
    clpin.mpi.release(sub)
    sub.Free()


@pytest.mark.parametrize("call", ["allreduce", "iallreduce", "bcast", "ibcast"])
def test_chunk_that_differs_fails_every_rank(queue, shm, call):
    """Rank 0's CLPIN_MPI_CHUNK is twice the others': every rank raises
    CLPIN_ERR_MISMATCH naming it, every array untouched (a rank once wrote
    past a pinned block, died of SIGBUS or hung)."""
    n = 9 * CHUNK // 4 + 1  # float32: past allreduce's small path, many chunks
    x = cl_array.to_device(queue, np.full(n, RANK + 1, np.float32))
    os.environ["CLPIN_MPI_CHUNK"] = "128K" if RANK == 0 else "64K"
    try:
        with pytest.raises(clpin.Error) as e:
            r = getattr(clpin.mpi, call)(x)
            if call.startswith("i"):
                r.wait()
    finally:
        os.environ["CLPIN_MPI_CHUNK"] = "64K"
    assert e.value.name == "CLPIN_ERR_MISMATCH" and "CLPIN_MPI_CHUNK" in e.value.detail
    np.testing.assert_array_equal(x.get(), np.full(n, RANK + 1, np.float32))
    clpin.mpi.allreduce(x)  # in step again
    np.testing.assert_array_equal(x.get(), np.full(n, SIZE * (SIZE + 1) // 2, np.float32))


@pytest.mark.parametrize("bad_root", ["0", 1.5, None, 1 << 31, -(1 << 40)],
                         ids=["str", "float", "None", "2**31", "-2**40"])
@pytest.mark.parametrize("call", ["bcast", "ibcast"])
def test_bad_root_on_one_rank_fails_every_rank(queue, call, bad_root):
    """A root that is not an int, or does not fit a C int, on one rank:
    TypeError / ValueError there, CLPIN_ERR_PEER on the others (they once
    waited for ever), no array changed, the ranks still in step."""
    want = np.arange(16, dtype=np.float32) + RANK
    x = cl_array.to_device(queue, want)
    for bad in range(SIZE):
        if RANK == bad:
            with pytest.raises(ValueError if isinstance(bad_root, int) else TypeError,
                               match="root"):
                r = getattr(clpin.mpi, call)(x, root=bad_root)
                r.wait() if call == "ibcast" else None
        else:
            with pytest.raises(clpin.Error) as e:
                r = getattr(clpin.mpi, call)(x, root=0)
                r.wait() if call == "ibcast" else None
            assert e.value.code == clpin.ERR_PEER
        np.testing.assert_array_equal(x.get(), want)
    clpin.mpi.bcast(x, root=np.int64(0))  # an integer of numpy's is an int
    np.testing.assert_array_equal(x.get(), np.arange(16, dtype=np.float32))


@pytest.mark.parametrize("n", [0, 7, CHUNK + 1, 5 * CHUNK + 3])
def test_send_to_itself(queue, shm, n):
    """Every rank sends to itself (a halo exchange on one rank): requests in
    both orders, then blocking calls; once MPI_ERR_TRUNCATE or a wait that
    never returned for more than one chunk."""
    want = _pattern(n, RANK + 3)
    x = cl_array.to_device(queue, want)
    for order in range(2):
        y = cl_array.to_device(queue, np.full(n, 0xEE, np.uint8))
        if order == 0:
            r = clpin.mpi.irecv(y, source=RANK, tag=9)
            s = clpin.mpi.isend(x, dest=RANK, tag=9)
        else:
            s = clpin.mpi.isend(x, dest=RANK, tag=9)
            r = clpin.mpi.irecv(y, source=RANK, tag=9)
        s.wait()
        assert r.wait() is not None
        np.testing.assert_array_equal(y.get(), want)
    z = cl_array.to_device(queue, np.full(n, 0xEE, np.uint8))
    clpin.mpi.send(x, dest=RANK, tag=10)  # returns before its receive
    clpin.mpi.recv(z, source=RANK, tag=10)
    np.testing.assert_array_equal(z.get(), want)
    with pytest.raises(ValueError, match="dest"):
        clpin.mpi.send(x, dest=1 << 31)
