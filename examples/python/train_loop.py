#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A pyopencl training loop fed by clpin.DatasetLoader: linear regression by SGD.

The data is a map-style dataset, written as for ``torch.utils.data``:
``__len__`` and ``__getitem__(i)`` returning a sample ``(x, y)``, x a row of
F float32 features and y its float32 target. ``clpin.DatasetLoader`` batches
it (shuffled, a new order each epoch): its worker processes write every
sample's x and y into their rows of a pinned slot, and each batch arrives as
a tuple of two device arrays, ``x`` (B x F) and ``y`` (B). The device runs one
training step per batch:

  residual  r_i = x_i . w - y_i                       (one work item per sample)
  update    w_j -= lr * sum_i r_i x_ij / B             (one work item per feature)
  record    loss[step] = sum_i r_i^2 / B

The kernels wait for the batch's upload through ``wait_for=x.events``. Each
batch is also copied back (non-blocking) for the check; when the loop steps
to the next batch, clpin uploads into its buffers only after everything
enqueued on them so far is done.

Checks (exit 1 on a mismatch): every epoch holds every sample exactly once,
each x with its own y, in an order that changes per epoch; the weights match
the same SGD run on the host in float64 over the batches the device saw;
the loss falls.

Usage: train_loop.py [--platform NAME] [--device N] [--features F]
                     [--batch-size B] [--batches N] [--epochs E]
                     [--workers W] [--depth D] [--lr LR] [--seed S]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pyopencl as cl

import clpin

SOURCE = """
__kernel void residual(__global const float *x, __global const float *y,
                       __global const float *w, __global float *r, int f) {
  int i = get_global_id(0);
  float s = 0.0f;
  for (int j = 0; j < f; j++)
    s += x[(size_t)i * f + j] * w[j];
  r[i] = s - y[i];
}
__kernel void update(__global const float *x, __global const float *r, __global float *w,
                     int b, int f, float lr) {
  int j = get_global_id(0);
  float g = 0.0f;
  for (int i = 0; i < b; i++)
    g += r[i] * x[(size_t)i * f + j];
  w[j] -= lr * g / (float)b;
}
__kernel void record(__global const float *r, int b, __global float *loss, int step) {
  float l = 0.0f;
  for (int i = 0; i < b; i++)
    l += r[i] * r[i];
  loss[step] = l / (float)b;
}
"""


class Regression:
    """n samples (x, y): y = x . w_true + noise. A map-style dataset, as a
    torch user writes one (the workers get it by fork)."""

    def __init__(self, n: int, features: int, seed: int = 7) -> None:
        rng = np.random.default_rng(seed)
        self.w_true = rng.standard_normal(features).astype(np.float32)
        self.x = rng.standard_normal((n, features), dtype=np.float32)
        noise = np.float32(0.01) * rng.standard_normal(n, dtype=np.float32)
        self.y = self.x @ self.w_true + noise

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--platform", default="")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=16, help="batches per epoch")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
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
    data = Regression(n * b, f)

    mf = cl.mem_flags
    w = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(f, np.float32))
    r = cl.Buffer(ctx, mf.READ_WRITE, 4 * b)
    loss = cl.Buffer(ctx, mf.READ_WRITE, 4 * steps)
    seen_x = np.empty((steps, b, f), np.float32)  # what the device saw, for the check
    seen_y = np.empty((steps, b), np.float32)

    print(f"{dev.name.strip()}: {a.epochs} epochs of {n} batches, x {b} x {f} float32 "
          f"+ y {b} float32 ({b * (f + 1) * 4 / 2**20:.2f} MiB) each")
    t0 = time.perf_counter()
    step = 0
    with clpin.DatasetLoader(q, data, b, shuffle=True, seed=a.seed, depth=a.depth,
                             workers=a.workers) as loader:
        for epoch in range(a.epochs):
            e0 = time.perf_counter()
            for x, y in loader:  # pyopencl.array.Arrays: x (B, F), y (B,)
                prg.residual(q, (b,), None, x.data, y.data, w, r, np.int32(f),
                             wait_for=x.events)  # one upload: y.events holds the same
                prg.update(q, (f,), None, x.data, r, w, np.int32(b), np.int32(f),
                           np.float32(a.lr))
                prg.record(q, (1,), None, r, np.int32(b), loss, np.int32(step))
                cl.enqueue_copy(q, seen_x[step], x.data, is_blocking=False)
                cl.enqueue_copy(q, seen_y[step], y.data, is_blocking=False)
                step += 1
            q.finish()
            print(f"epoch {epoch}: {(time.perf_counter() - e0) * 1e3 / n:.2f} ms/step")
        stats = loader.stats()
    total = time.perf_counter() - t0

    w_dev = np.empty(f, np.float32)
    losses = np.empty(steps, np.float32)
    cl.enqueue_copy(q, w_dev, w)
    cl.enqueue_copy(q, losses, loss, is_blocking=True)

    # Every epoch: each sample once, x with its own y, a new order each epoch.
    ok = step == steps
    want = np.sort(np.column_stack([data.x, data.y]).view(f"V{4 * (f + 1)}").ravel())
    orders = []
    bad = 0
    for epoch in range(a.epochs):
        xs = seen_x[epoch * n:(epoch + 1) * n].reshape(-1, f)
        ys = seen_y[epoch * n:(epoch + 1) * n].reshape(-1)
        rows = np.column_stack([xs, ys]).view(f"V{4 * (f + 1)}").ravel()
        if not np.array_equal(np.sort(rows), want):
            bad += 1
        orders.append(ys.tobytes())
    if a.epochs > 1 and len(set(orders)) < a.epochs:
        print("the order did not change between epochs")
        ok = False
    # The same SGD on the host, in float64, over the batches the device saw.
    w_ref = np.zeros(f)
    for s in range(steps):
        x64, y64 = seen_x[s].astype(np.float64), seen_y[s].astype(np.float64)
        w_ref -= a.lr * ((x64 @ w_ref - y64) @ x64) / b
    ms = total * 1e3 / steps
    print(f"loop: {ms:.2f} ms/step; loader: fill {stats['fill_ns'] / 1e6 / steps:.2f} ms/batch "
          f"on {stats['workers']} workers, the loop waited {stats['wait_ns'] / 1e6 / steps:.2f} "
          f"ms/batch; {stats['slots']} pinned slots of {stats['slot_bytes'] // stats['slots']} "
          f"bytes, {stats['buffers_created']} device buffers in all")
    first = losses[:n].mean()
    last = losses[-n:].mean()
    print(f"loss: {first:.4f} in the first epoch, {last:.6f} in the last")
    diff = float(np.max(np.abs(w_dev - w_ref)))
    if bad:
        print(f"data check: {bad} of {a.epochs} epochs do not hold every sample once")
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
