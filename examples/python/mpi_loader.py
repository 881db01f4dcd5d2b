#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The loader across MPI ranks, in Python (examples/mpi_loader.c's loop):

    mpirun -np N python3 mpi_loader.py [--batches B] [--kib K] [--epochs E] [--seed S]

One rank per device (rank % devices). Every epoch is one shuffled order of
B samples, the same on every rank (numpy's generator seeded with seed +
epoch); ``clpin.Loader(..., shard=(rank, N))`` gives rank r the batches i
with i % N == r, so each sample is read once per epoch by one rank. Each
step turns the batch into a "gradient" on the device and sums it over the
ranks with ``clpin.mpi.allreduce``; a rank whose shard ran out adds zeros,
so the collective calls stay in step. Checks the union of the shards, every
batch's bytes and every summed gradient; exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array
from mpi4py import MPI

import clpin
import clpin.mpi


def sample(s: int, n: int) -> np.ndarray:
    """Sample s: small integers as float32, so sums are exact."""
    return ((s * 31 + np.arange(n) * 7) % 257).astype(np.float32)


def pick_device(rank: int) -> cl.Device:
    want = os.environ.get("CLPIN_MPI_PLATFORM", "")
    plats = [p for p in cl.get_platforms() if want in p.name]
    gpus = [d for p in plats for d in p.get_devices() if d.type & cl.device_type.GPU]
    devs = gpus or [d for p in plats for d in p.get_devices()]
    return devs[rank % len(devs)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--kib", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    dev = pick_device(rank)
    print(f"rank {rank} of {size}: device {dev.name}", flush=True)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, dev)
    n = args.kib * 256  # float32 per batch
    perm = np.random.default_rng(args.seed).permutation(args.batches)

    def fill(out: np.ndarray, index: int) -> None:
        out[:] = sample(int(perm[index]), n)

    steps = -(-args.batches // size)
    bad = 0
    loaded, load_s = 0, 0.0
    # Threads: fill reads perm, which changes between epochs (a worker process keeps its copy).
    with clpin.Loader(queue, fill, (n,), np.float32, batches=args.batches,
                      shard=(rank, size), worker_method="thread") as loader:
        for epoch in range(args.epochs):
            if epoch:  # the loader is idle between epochs: the next order first
                perm = np.random.default_rng(args.seed + epoch).permutation(args.batches)
            seen = np.zeros(args.batches, np.int32)
            it = iter(loader)
            for step in range(steps):
                t0 = time.perf_counter()
                batch = next(it, None)
                if batch is not None:
                    index = rank + step * size  # ordered: this rank's step-th batch
                    grad = batch.copy()  # the "gradient", on the device
                    cl.wait_for_events(batch.events)
                    load_s += time.perf_counter() - t0
                    loaded += 1
                    seen[index] += 1
                    if not np.array_equal(grad[:2].get(), sample(int(perm[index]), 2)):
                        print(f"rank {rank}: batch {index} does not hold its sample", file=sys.stderr)
                        bad += 1
                else:
                    grad = cl_array.zeros(queue, n, np.float32)
                clpin.mpi.allreduce(grad, op="sum")
                want = sum(sample(int(perm[k]), n)
                           for k in range(step * size, min((step + 1) * size, args.batches)))
                if not np.array_equal(grad.get(), want):
                    print(f"rank {rank}: epoch {epoch} step {step}: wrong gradient", file=sys.stderr)
                    bad += 1
            if next(it, None) is not None:
                print(f"rank {rank}: a batch past this rank's shard", file=sys.stderr)
                bad += 1
            every = np.zeros_like(seen)
            comm.Allreduce(seen, every, op=MPI.SUM)
            if not (every == 1).all():
                bad += 1
                if rank == 0:
                    print(f"epoch {epoch}: batches not read exactly once: {every}", file=sys.stderr)
    rate = loaded * n * 4 / load_s / 1e9 if load_s else 0.0
    total = comm.reduce(rate, op=MPI.SUM, root=0)
    anybad = comm.allreduce(bad, op=MPI.SUM)
    print(f"rank {rank}: {loaded} batches of {args.kib} KiB, loader {rate:.2f} GB/s", flush=True)
    comm.Barrier()
    if rank == 0:
        print(f"mpi_loader.py: {size} ranks, {args.batches} batches x {args.epochs} epochs, each once "
              f"per epoch, shuffled alike; gradients summed by clpin.mpi.allreduce; all ranks "
              f"{total:.2f} GB/s; {'FAILED' if anybad else 'all checks OK'}", flush=True)
    clpin.mpi.release()
    return 1 if anybad else 0


if __name__ == "__main__":
    sys.exit(main())
