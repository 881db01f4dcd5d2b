#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A data-parallel loop across MPI ranks, in Python, on clpin.DatasetLoader:

    mpirun -np N python3 mpi_loader.py [--samples S] [--batch-size B] [--kib K]
                                       [--epochs E] [--seed SEED]

One rank per device (rank % devices). The dataset (S samples, each
``(data, index)``: K KiB of float32 and its int64 index) is the same on
every rank; ``clpin.DatasetLoader(..., shuffle=True, seed=SEED,
shard=(rank, N))`` gives each rank its part of the epoch's order, as
``DistributedSampler`` does: every rank shuffles alike (one seed), the
parts are disjoint and of equal length (padded by repeating the order's
first samples), so every rank makes the same number of steps and the
collective calls stay in step. ``loader.set_epoch(epoch)`` before each
epoch reshuffles. Each step sums its batch's rows into a "gradient" on the
device and sums that over the ranks with ``clpin.mpi.allreduce``.

Checks: every batch's data is its samples'; every summed gradient is the
sum of the samples of that step on every rank; each epoch covers every
sample, repeating only the padding; the order changes per epoch. Exit
status 1 on any mismatch.
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

SOURCE = """
__kernel void colsum(__global const float *x, __global float *g, int rows, int n) {
  int j = get_global_id(0);
  float s = 0.0f;
  for (int r = 0; r < rows; r++)
    s += x[(size_t)r * n + j];
  g[j] = s;
}
"""


def sample(s: int, n: int) -> np.ndarray:
    """Sample s's data: small integers as float32, so sums are exact."""
    return ((s * 31 + np.arange(n) * 7) % 257).astype(np.float32)


class Samples:
    """A map-style dataset: sample s is (its data, s)."""

    def __init__(self, count: int, n: int) -> None:
        self.count, self.n = count, n

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, s: int):
        return sample(s, self.n), s


def pick_device(rank: int) -> cl.Device:
    want = os.environ.get("CLPIN_MPI_PLATFORM", "")
    plats = [p for p in cl.get_platforms() if want in p.name]
    gpus = [d for p in plats for d in p.get_devices() if d.type & cl.device_type.GPU]
    devs = gpus or [d for p in plats for d in p.get_devices()]
    return devs[rank % len(devs)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--kib", type=int, default=256, help="KiB of float32 a sample")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    dev = pick_device(rank)
    print(f"rank {rank} of {size}: device {dev.name}", flush=True)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, dev)
    colsum = cl.Program(ctx, SOURCE).build().colsum
    n, count = args.kib * 256, args.samples
    per = -(-count // size)  # samples an epoch on every rank, the padding included
    grad = cl_array.empty(queue, n, np.float32)
    bad = 0
    loaded, load_s = 0, 0.0
    orders = set()
    # Threads: the samples are vectorised numpy (the GIL released), and an
    # MPI process need not fork.
    with clpin.DatasetLoader(queue, Samples(count, n), args.batch_size, shuffle=True,
                             seed=args.seed, shard=(rank, size), workers=2,
                             worker_method="thread") as loader:
        steps = len(loader)  # the same on every rank
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            mine = []
            it = iter(loader)
            for step in range(steps):
                t0 = time.perf_counter()
                data, index = next(it)  # (rows, n) float32, (rows,) int64
                rows = len(index)
                ev = colsum(queue, (n,), None, data.data, grad.data, np.int32(rows), np.int32(n),
                            wait_for=data.events)
                grad.add_event(ev)
                ids = index.get().tolist()
                load_s += time.perf_counter() - t0
                loaded += 1
                mine += ids
                if not np.array_equal(data.get()[:, :2], np.stack([sample(s, 2) for s in ids])):
                    print(f"rank {rank}: epoch {epoch} step {step}: a row does not hold its "
                          "sample", file=sys.stderr)
                    bad += 1
                clpin.mpi.allreduce(grad, op="sum")
                every = sum(comm.allgather(ids), [])
                want = sum(sample(s, n) for s in every)
                if not np.array_equal(grad.get(), want):
                    print(f"rank {rank}: epoch {epoch} step {step}: wrong gradient",
                          file=sys.stderr)
                    bad += 1
            if next(it, None) is not None:
                print(f"rank {rank}: a batch past this rank's shard", file=sys.stderr)
                bad += 1
            if len(mine) != per:
                print(f"rank {rank}: epoch {epoch}: {len(mine)} samples, not {per}",
                      file=sys.stderr)
                bad += 1
            seen = np.bincount(mine, minlength=count).astype(np.int32)
            total = np.zeros_like(seen)
            comm.Allreduce(seen, total, op=MPI.SUM)
            # Every sample read, and only the padding's read twice.
            if not ((total >= 1).all() and total.sum() == per * size):
                bad += 1
                if rank == 0:
                    print(f"epoch {epoch}: samples not read once each: {total}", file=sys.stderr)
            orders.add(tuple(mine))
    if args.epochs > 1 and len(orders) < args.epochs:
        print(f"rank {rank}: the order did not change between epochs", file=sys.stderr)
        bad += 1
    rate = loaded / load_s if load_s else 0.0
    anybad = comm.allreduce(bad, op=MPI.SUM)
    print(f"rank {rank}: {loaded} batches of {args.batch_size} x {args.kib} KiB, "
          f"{rate:.1f} steps/s to the gradient", flush=True)
    comm.Barrier()
    if rank == 0:
        print(f"mpi_loader.py: {size} ranks, {count} samples x {args.epochs} epochs in shards "
              f"of {per}, shuffled alike; gradients summed by clpin.mpi.allreduce; "
              f"{'FAILED' if anybad else 'all checks OK'}", flush=True)
    clpin.mpi.release()
    return 1 if anybad else 0


if __name__ == "__main__":
    sys.exit(main())
