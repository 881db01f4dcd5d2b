#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A pyopencl training loop fed by clpin.Loader: linear regression by SGD.

Each batch is B samples of F features plus a target, prepared on the host by
``fill`` (numpy, on clpin's worker threads, straight into pinned memory) and
uploaded by clpin ahead of use. The device runs one training step per batch:

  residual  r_i = x_i . w - y_i                       (one work item per sample)
  update    w_j -= lr * sum_i r_i x_ij / B             (one work item per feature)
  record    loss[step] = sum_i r_i^2 / B, ysum[step] = sum_i y_i

The kernels wait for the batch's upload through ``wait_for=x.events``; the
loop never waits for the device. When the loop steps to the next batch,
clpin takes the previous one back and uploads into its buffer only after the
kernels enqueued on it (a marker) are done.

Checks (exit 1 on a mismatch): every batch's target sum matches the host's
(a wrong, stale or repeated batch fails it), the weights match the same SGD
run on the host in float64, and the loss falls.

Usage: train_loop.py [--platform NAME] [--device N] [--features F]
                     [--batch-size B] [--batches N] [--epochs E]
                     [--workers W] [--depth D] [--lr LR]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pyopencl as cl

import clpin

SOURCE = """
__kernel void residual(__global const float *x, __global const float *w,
                       __global float *r, int f) {
  int i = get_global_id(0);
  __global const float *row = x + (size_t)i * (f + 1);
  float s = 0.0f;
  for (int j = 0; j < f; j++)
    s += row[j] * w[j];
  r[i] = s - row[f];
}
__kernel void update(__global const float *x, __global const float *r, __global float *w,
                     int b, int f, float lr) {
  int j = get_global_id(0);
  float g = 0.0f;
  for (int i = 0; i < b; i++)
    g += r[i] * x[(size_t)i * (f + 1) + j];
  w[j] -= lr * g / (float)b;
}
__kernel void record(__global const float *x, __global const float *r, int b, int f,
                     __global float *loss, __global float *ysum, int step) {
  float l = 0.0f, y = 0.0f;
  for (int i = 0; i < b; i++) {
    l += r[i] * r[i];
    y += x[(size_t)i * (f + 1) + f];
  }
  loss[step] = l / (float)b;
  ysum[step] = y;
}
"""


def make_batch(out: np.ndarray, index: int, w_true: np.ndarray) -> None:
    """Batch `index`: features from a seeded generator, targets from w_true."""
    rng = np.random.default_rng(1000 + index)
    f = w_true.size
    x = rng.standard_normal((out.shape[0], f), dtype=np.float32)
    out[:, :f] = x
    out[:, f] = x @ w_true + np.float32(0.01) * rng.standard_normal(out.shape[0], dtype=np.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--platform", default="")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--batches", type=int, default=32, help="batches per epoch")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.1)
    a = ap.parse_args()

    plats = [p for p in cl.get_platforms() if a.platform in p.name]
    if not plats:
        print(f"no OpenCL platform matches {a.platform!r}", file=sys.stderr)
        return 2
    dev = plats[0].get_devices()[a.device]
    ctx = cl.Context([dev])
    q = cl.CommandQueue(ctx, dev)
    prg = cl.Program(ctx, SOURCE).build()
    f, b, n = a.features, a.batch_size, a.batches
    steps = a.epochs * n
    w_true = np.random.default_rng(7).standard_normal(f).astype(np.float32)

    mf = cl.mem_flags
    w = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(f, np.float32))
    r = cl.Buffer(ctx, mf.READ_WRITE, 4 * b)
    loss = cl.Buffer(ctx, mf.READ_WRITE, 4 * steps)
    ysum = cl.Buffer(ctx, mf.READ_WRITE, 4 * steps)
    residual, update, record = prg.residual, prg.update, prg.record

    def fill(out: np.ndarray, index: int) -> None:
        make_batch(out, index, w_true)

    print(f"{dev.name.strip()}: {a.epochs} epochs of {n} batches, {b} x {f + 1} float32 "
          f"({b * (f + 1) * 4 / 2**20:.2f} MiB) each")
    t0 = time.perf_counter()
    # A vectorised numpy fill: threads (it releases the GIL; the slots are
    # pinned pool blocks). A per-sample Python fill wants the default,
    # worker processes (docs/PYTHON.md, "Which worker_method").
    with clpin.Loader(q, fill, (b, f + 1), np.float32, batches=n, depth=a.depth,
                      workers=a.workers, worker_method="thread") as loader:
        for epoch in range(a.epochs):
            e0 = time.perf_counter()
            for x in loader:  # x: a pyopencl.array.Array over the uploaded batch
                step = epoch * n + loader.last_index
                residual(q, (b,), None, x.data, w, r, np.int32(f), wait_for=x.events)
                update(q, (f,), None, x.data, r, w, np.int32(b), np.int32(f), np.float32(a.lr))
                record(q, (1,), None, x.data, r, np.int32(b), np.int32(f), loss, ysum,
                       np.int32(step))
            q.finish()
            print(f"epoch {epoch}: {(time.perf_counter() - e0) * 1e3 / n:.2f} ms/step")
        stats = loader.stats()
    total = time.perf_counter() - t0

    w_dev = np.empty(f, np.float32)
    losses = np.empty(steps, np.float32)
    ysums = np.empty(steps, np.float32)
    cl.enqueue_copy(q, w_dev, w)
    cl.enqueue_copy(q, losses, loss)
    cl.enqueue_copy(q, ysums, ysum, is_blocking=True)

    # The same SGD on the host, in float64, over the same batches.
    batch = np.empty((b, f + 1), np.float32)
    w_ref = np.zeros(f)
    bad = []
    for epoch in range(a.epochs):
        for i in range(n):
            make_batch(batch, i, w_true)
            x, y = batch[:, :f].astype(np.float64), batch[:, f].astype(np.float64)
            step = epoch * n + i
            if not np.isclose(ysums[step], y.sum(), rtol=1e-4, atol=1e-2 * np.sqrt(b)):
                bad.append(step)
            res = x @ w_ref - y
            w_ref -= a.lr * (res @ x) / b
    ms = total * 1e3 / steps
    print(f"loop: {ms:.2f} ms/step; loader: fill {stats['fill_ns'] / 1e6 / steps:.2f} ms/batch "
          f"on {stats['workers']} workers, the loop waited {stats['wait_ns'] / 1e6 / steps:.2f} "
          f"ms/batch, {stats['pinned_allocations']} pinned slots and "
          f"{stats['buffers_created']} device buffers in all")
    first = losses[:n].mean()
    last = losses[-n:].mean()
    print(f"loss: {first:.4f} in the first epoch, {last:.6f} in the last")
    diff = float(np.max(np.abs(w_dev - w_ref)))
    ok = True
    if bad:
        print(f"data check: {len(bad)} of {steps} batches differ (steps {bad[:8]})")
        ok = False
    else:
        print(f"data check: all {steps} batches ok")
    if diff > 1e-3 * max(1.0, float(np.max(np.abs(w_ref)))):
        print(f"weights differ from the host's SGD: max |diff| {diff:.3g}")
        ok = False
    else:
        print(f"weights match the host's SGD (max |diff| {diff:.2g})")
    if a.epochs > 1 and not last < first:
        print("the loss did not fall")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
