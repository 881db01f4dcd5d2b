#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The threaded data-loader experiment of examples/loader_pipeline.c, in
Python: what pinned memory buys a training loop that prepares batches on the
host while the device computes.

Three ways to feed NB batches to a device that spends a fixed time on each
(a kernel that reads every word of the batch, then a calibrated spin kernel):

  serial pageable   prepare into a numpy array, pyopencl.enqueue_copy,
                    compute, wait; next batch.
  serial pinned     the same, preparing into one clpin.empty_pinned array, so
                    clpin.write goes straight to DMA.
  pipelined pinned  a producer thread prepares batch b+1 into a fresh
                    empty_pinned array while the device works on batch b;
                    clpin.write(non_blocking=True) keeps the array alive until
                    its upload completes, then the block goes back to the
                    pool for a later batch.

It also times the device work alone and the host preparation alone. Every
batch is checked: the device sums it in 16384 lanes and the host compares
with the sums it made while preparing; a mismatch exits 1. numpy releases
the GIL in its array operations and clpin in its calls, so the producer
really runs beside the main thread.

Usage: loader.py [--platform NAME] [--device N] [--batch-mib N | --batch-kib N]
                 [--batches N] [--work-ms N] [--repeat N]
"""

from __future__ import annotations

import argparse
import queue as queue_mod
import sys
import threading
import time

import numpy as np
import pyopencl as cl

import clpin

LANES = 16384  # checksum lanes: lane i sums the i-th of LANES equal slices
QUEUE_DEPTH = 2  # prepared batches waiting for the device

SOURCE = """
__kernel void lanes(__global const uint *batch, uint rounds, __global uint *out, uint base) {
  uint lane = get_global_id(0), s = 0;
  __global const uint *p = batch + (size_t)lane * rounds;
  for (uint k = 0; k < rounds; k++)
    s += p[k];
  out[base + lane] = s;
}
__kernel void spin(uint iters, __global uint *sink) {
  uint x = get_global_id(0);
  for (uint k = 0; k < iters; k++)
    x = x * 1664525u + 1013904223u;
  sink[get_global_id(0)] = x;
}
"""


def now_ms() -> float:
    return time.perf_counter() * 1e3


class Loader:
    def __init__(self, dev: cl.Device, nbytes: int, batches: int) -> None:
        self.ctx = cl.Context([dev])
        self.q = cl.CommandQueue(self.ctx, dev)
        prg = cl.Program(self.ctx, SOURCE).build()
        self.lanes, self.spin = prg.lanes, prg.spin
        self.bytes, self.batches = nbytes, batches
        self.words = nbytes // 4
        self.rounds = self.words // LANES
        self.spin_items = dev.max_compute_units * 256
        mf = cl.mem_flags
        self.dbuf = cl.Buffer(self.ctx, mf.READ_ONLY, nbytes)
        self.out = cl.Buffer(self.ctx, mf.READ_WRITE, batches * LANES * 4)
        self.sink = cl.Buffer(self.ctx, mf.WRITE_ONLY, self.spin_items * 4)
        self.expect = np.zeros((batches, LANES), np.uint32)
        self.index = np.arange(self.words, dtype=np.uint32)
        self.iters = 0

    def prepare(self, b: int, w: np.ndarray) -> None:
        """Batch b into w (the "decode and augment"): a pseudo-random word
        stream, the same as the C example's, summed per lane."""
        seed = np.uint32((b * 0x9E3779B1 + 12345) & 0xFFFFFFFF)
        with np.errstate(over="ignore"):
            np.multiply(self.index, np.uint32(0x85EBCA6B), out=w)
            w += seed
            w ^= w >> np.uint32(15)
            w *= np.uint32(0xC2B2AE35)
            w ^= w >> np.uint32(13)
        self.expect[b] = w.reshape(LANES, self.rounds).sum(axis=1, dtype=np.uint32)

    def compute(self, b: int) -> cl.Event:
        self.lanes(self.q, (LANES,), None, self.dbuf, np.uint32(self.rounds), self.out,
                   np.uint32(b * LANES))
        return self.spin(self.q, (self.spin_items,), None, np.uint32(self.iters), self.sink)

    def reset_out(self) -> None:
        cl.enqueue_fill_buffer(self.q, self.out, np.uint32(0), 0, self.batches * LANES * 4)
        self.q.finish()

    def verify(self, mode: str) -> int:
        got = np.empty((self.batches, LANES), np.uint32)
        cl.enqueue_copy(self.q, got, self.out, is_blocking=True)
        bad = 0
        for b in range(self.batches):
            if not np.array_equal(got[b], self.expect[b]):
                bad += 1
                print(f"{mode}: batch {b}: device saw different data than the host prepared",
                      file=sys.stderr)
        return bad

    # ---- the strategies

    def serial_pageable(self) -> float:
        w = np.zeros(self.words, np.uint32)
        t0 = now_ms()
        for b in range(self.batches):
            self.prepare(b, w)
            cl.enqueue_copy(self.q, self.dbuf, w, is_blocking=True)
            self.compute(b)
            self.q.finish()
        return now_ms() - t0

    def serial_pinned(self) -> float:
        w = clpin.empty_pinned(self.ctx, self.words, np.uint32)
        t0 = now_ms()
        for b in range(self.batches):
            self.prepare(b, w)
            clpin.write(self.q, self.dbuf, w)
            self.compute(b)
            self.q.finish()
        return now_ms() - t0

    def pipelined(self) -> float:
        ready: queue_mod.Queue = queue_mod.Queue(maxsize=QUEUE_DEPTH)
        failure: list[BaseException] = []

        def producer() -> None:
            try:
                for b in range(self.batches):
                    w = clpin.empty_pinned(self.ctx, self.words, np.uint32)  # a pool hit once warm
                    self.prepare(b, w)
                    ready.put(w)
                    del w
            except BaseException as exc:  # reported by the consumer
                failure.append(exc)
                ready.put(None)

        done: list[cl.Event] = []
        t0 = now_ms()
        thread = threading.Thread(target=producer)
        thread.start()
        for b in range(self.batches):
            w = ready.get()
            if w is None:
                raise RuntimeError(f"producer failed: {failure[0]!r}")
            if b >= 2:  # at most two batches queued on the device
                done[b - 2].wait()
            # clpin holds w until its upload completes; then its block returns
            clpin.write(self.q, self.dbuf, w, non_blocking=True)
            del w
            done.append(self.compute(b))
        self.q.finish()
        t = now_ms() - t0
        thread.join()
        return t

    def device_alone(self) -> float:
        t0 = now_ms()
        for b in range(self.batches):
            self.compute(b)
        self.q.finish()
        return now_ms() - t0

    def prep_alone(self) -> float:
        w = clpin.empty_pinned(self.ctx, self.words, np.uint32)
        self.prepare(0, w)  # untimed: first-run effects
        t0 = now_ms()
        for b in range(self.batches):
            self.prepare(b, w)
        return now_ms() - t0

    def time_spin(self, iters: int) -> float:
        self.iters = iters
        t0 = now_ms()
        self.spin(self.q, (self.spin_items,), None, np.uint32(iters), self.sink)
        self.q.finish()
        return now_ms() - t0

    def calibrate(self, work_ms: float) -> None:
        if work_ms <= 0:
            self.iters = 0
            return
        self.time_spin(1)
        iters, t = 64.0, self.time_spin(64)
        while t < 2.0 and iters < 1e9:
            iters *= 8
            t = self.time_spin(int(iters))
        for _ in range(2):
            iters = min(max(iters * work_ms / max(t, 0.01), 1), 4e9)
            t = self.time_spin(int(iters))
        self.iters = int(iters)


def main() -> int:
    ap = argparse.ArgumentParser(description="clpin's threaded data-loader experiment in Python")
    ap.add_argument("--platform", default="")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--batch-mib", type=int, default=160)
    ap.add_argument("--batch-kib", type=int)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--work-ms", type=float, default=20)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    nbytes = (a.batch_kib << 10) if a.batch_kib else (a.batch_mib << 20)
    if nbytes <= 0 or nbytes % (LANES * 4) or a.batches <= 0 or a.repeat <= 0:
        print(f"the batch must be a positive multiple of {LANES * 4 // 1024} KiB, "
              "batches and repeat > 0", file=sys.stderr)
        return 1
    devs = [d for p in cl.get_platforms() if a.platform in p.name for d in p.get_devices()]
    if a.device >= len(devs):
        print(f"no OpenCL device {a.device}", file=sys.stderr)
        return 1
    L = Loader(devs[a.device], nbytes, a.batches)
    L.calibrate(a.work_ms)

    # Warm the pool with the blocks the pipeline keeps busy (one preparing,
    # QUEUE_DEPTH waiting, two uploading), so no mode pays pinned allocation
    # inside its timing.
    warm = [clpin.empty_pinned(L.ctx, L.words, np.uint32) for _ in range(QUEUE_DEPTH + 3)]
    for w in warm:
        w.fill(0)
    del warm, w
    s0 = clpin.stats(L.ctx)

    names = ["device work alone", "host prep alone", "serial pageable", "serial pinned",
             "pipelined pinned"]
    best = [float("inf")] * 5
    bad = 0
    for _ in range(a.repeat):
        t = [0.0] * 5
        t[1] = L.prep_alone()
        L.reset_out()
        t[2] = L.serial_pageable()
        bad += L.verify(names[2])
        L.reset_out()
        t[3] = L.serial_pinned()
        bad += L.verify(names[3])
        L.reset_out()
        t[4] = L.pipelined()
        bad += L.verify(names[4])
        t[0] = L.device_alone()
        best = [min(x, y) for x, y in zip(best, t)]
    s1 = clpin.stats(L.ctx)

    dev = L.q.device.name.strip()
    print(f"loader.py on {dev}: {a.batches} batches of {nbytes / 1048576:.2f} MiB, "
          f"{a.work_ms:.0f} ms device work each (spin {L.iters} iterations), best of {a.repeat}")
    for name, ms in zip(names, best):
        print(f"  {name:<18} {ms:9.1f} ms  ({ms / a.batches:7.2f} ms/batch)")
    print(f"  pipelined vs serial pageable: {best[2] / best[4]:.2f}x, "
          f"vs serial pinned: {best[3] / best[4]:.2f}x")
    print(f"  pool during the runs: {s1['hits'] - s0['hits']} hits, "
          f"{s1['misses'] - s0['misses']} misses, "
          f"{s1['bytes_pinned_direct'] - s0['bytes_pinned_direct']} bytes straight to DMA")
    print(f"data check: {'MISMATCH' if bad else 'all batches ok'}")
    L.q.finish()
    import gc
    gc.collect()
    clpin.release_context(L.ctx)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
