#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""clpin.Loader with a numpy fill against its ideal (docs/PYTHON.md, "Loader":
on POCL, <= 1.2x its ideal).

One regime per run: batches of --mib MiB float32, a numpy fill that computes
each batch (np.sin of a ramp, --rounds times: the GIL released inside numpy),
and a kernel that reads every --stride-th word of the batch (the device
work; by default one word a page: the prepare-bound regime). Measured
in the same process, each as a median over --reps:

  prepare  the fill alone, one thread, into a plain numpy array
  h2d      pyopencl.enqueue_copy of a pinned (clpin.empty_pinned) batch
  compute  the kernel alone, on a buffer already on the device
  loop     for x in clpin.Loader(..., workers=W, depth=2): kernel(x); per
           batch, from the delivery of batch --warm to the end of the epoch

ideal = max(prepare / W, h2d, compute); the ratio is loop / ideal. On a CPU
device (POCL) the workers, the uploads and the kernel share the same cores,
so the ideal there is a lower bound the loop cannot reach once the workers
take every core: on 2 cores, measure with 1 worker (the default). The last batch is read back and checked.

    python3 bench/python_loader.py [--platform NAME] [--mib 8] [--rounds 2]
        [--workers 1] [--stride 1024] [--batches 40] [--warm 4] [--runs 3] [--reps 5]

Prints one line per run and "RESULT python-loader ..." with the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import pyopencl as cl

import clpin
import pybench

KERNEL = """
__kernel void consume(__global const float *x, uint n, uint stride, __global float *out) {
  size_t i = get_global_id(0), g = get_global_size(0);
  float s = 0.0f;
  for (size_t k = i * stride; k < n; k += g * stride)
    s += x[k];
  out[i] = s;
}
"""


def make_fill(rounds: int, n: int):
    ramp = np.arange(n, dtype=np.float32) * np.float32(1e-6)

    def fill(out: np.ndarray, index: int) -> None:
        np.add(ramp, np.float32(index), out=out)
        for _ in range(rounds):
            np.sin(out, out=out)
    return fill


def median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--platform", default="")
    ap.add_argument("--mib", type=float, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--stride", type=int, default=1024,
                    help="the kernel reads every stride-th word (1: all; 1024: one a page)")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--warm", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()

    dev = pybench.cl_device(a.platform)
    ctx = cl.Context([dev])
    q = cl.CommandQueue(ctx, dev)
    consume = cl.Program(ctx, KERNEL).build().consume
    n = int(a.mib * (1 << 20)) // 4
    lanes = max(1, dev.max_compute_units) * 64
    out = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * lanes)
    dbuf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * n)
    fill = make_fill(a.rounds, n)
    host = np.empty(n, np.float32)
    pinned = clpin.empty_pinned(q, n, np.float32)
    pinned[:] = 1

    def run_kernel(buf, wait=None):
        return consume(q, (lanes,), None, buf, np.uint32(n), np.uint32(a.stride), out,
                       wait_for=wait)

    run_kernel(dbuf).wait()  # build and warm
    print(f"{pybench.describe(dev)}: {a.mib:g} MiB batches, fill {a.rounds} np.sin "
          f"rounds, {a.workers} workers, {a.batches} batches ({a.warm} warm-up)")
    rows = []
    for run in range(a.runs):
        prep = median_ms(lambda: fill(host, 1), a.reps)
        h2d = median_ms(lambda: cl.enqueue_copy(q, dbuf, pinned, is_blocking=True), a.reps)
        comp = median_ms(lambda: run_kernel(dbuf).wait(), a.reps)
        ideal = max(prep / a.workers, h2d, comp)
        with clpin.Loader(q, fill, n, np.float32, batches=a.batches, workers=a.workers,
                          depth=2) as loader:
            t0 = None
            last = None
            for x in loader:
                if loader.last_index == a.warm:
                    q.finish()
                    t0 = time.perf_counter()
                run_kernel(x.data, x.events)
                if loader.last_index == a.batches - 1:
                    last = x.get()
            q.finish()
            loop = (time.perf_counter() - t0) * 1e3 / (a.batches - a.warm)
            stats = loader.stats()
        expect = np.empty(n, np.float32)
        fill(expect, a.batches - 1)
        if not np.array_equal(last, expect):
            print("data check: the last batch differs", file=sys.stderr)
            return 1
        ratio = loop / ideal
        rows.append((prep, h2d, comp, ideal, loop, ratio))
        print(f"run {run}: prepare {prep:.2f} ms (/{a.workers} = {prep / a.workers:.2f}), h2d "
              f"{h2d:.2f}, compute {comp:.2f} -> ideal {ideal:.2f} ms; loop {loop:.2f} ms/batch "
              f"= {ratio:.2f}x ideal (loop waited {stats['wait_ns'] / 1e6 / a.batches:.2f} "
              f"ms/batch, {stats['pinned_allocations']} slots, {stats['buffers_created']} "
              "buffers)")
    med = [statistics.median(c) for c in zip(*rows)]
    print(f"RESULT python-loader mib={a.mib:g} workers={a.workers} prepare_ms={med[0]:.3f} "
          f"h2d_ms={med[1]:.3f} compute_ms={med[2]:.3f} ideal_ms={med[3]:.3f} "
          f"loop_ms={med[4]:.3f} ratio={med[5]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
