#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An image training-style loop fed by clpin.Loader's worker processes.

Each batch is B images decoded from JPEG with PIL, randomly cropped and
flipped, normalised and laid out as B x 3 x S x S float32: Python code per
sample, which threads would run one at a time under the GIL. With
``worker_method="process"`` the fill runs in W worker processes that write
each batch straight into the loader's pinned slot (shared memory); clpin
uploads it and the loop gets a device array.

The device runs one step per batch of a logistic regression on the images'
channel means (a stand-in for a model's forward and backward pass):

  features  f_i = mean of each channel of image i       (one item per image)
  update    w  -= lr * sum_i (sigmoid(f_i . w + b) - y_i) f_i / B

The label y_i of an image is whether its source is bright (known from its
index). The augmentation draws from a generator keyed by (seed, index), not
from the worker's own random stream: batch i is the same whichever worker
fills it, so the host can check every batch's features.

Checks (exit 1 on a mismatch): every batch's features, read back, match the
host's decode of the same batch; the weights match the same steps on the
host; the loss falls. Exit 2 when PIL is not installed.

Usage: image_loop.py [--platform NAME] [--device N] [--batch-size B]
                     [--size S] [--batches N] [--epochs E] [--workers W]
                     [--worker-method process|thread] [--start-method M]
"""

from __future__ import annotations

import argparse
import io
import sys
import time

import numpy as np
import pyopencl as cl

import clpin

try:
    from PIL import Image
except ImportError:
    print("image_loop.py needs PIL (Debian: python3-pil; pip: pillow)")
    sys.exit(2)

SOURCE = """
__kernel void features(__global const float *x, __global float *f, int pixels) {
  int i = get_global_id(0), c = get_global_id(1);          /* image, channel */
  __global const float *p = x + ((size_t)i * 3 + c) * pixels;
  float s = 0.0f;
  for (int k = 0; k < pixels; k++) s += p[k];
  f[i * 4 + c] = s / pixels;
  if (c == 0) f[i * 4 + 3] = 1.0f;                          /* the bias input */
}
__kernel void sgd_step(__global const float *f, __global const float *y,
                   __global float *w, __global float *loss, int b, float lr, int t) {
  /* One work item: B is small, and the step is the example's, not the point. */
  float g[4] = {0, 0, 0, 0}, l = 0.0f;
  for (int i = 0; i < b; i++) {
    float z = 0.0f;
    for (int j = 0; j < 4; j++) z += f[i * 4 + j] * w[j];
    float p = 1.0f / (1.0f + exp(-z));
    for (int j = 0; j < 4; j++) g[j] += (p - y[i]) * f[i * 4 + j];
    l -= y[i] * log(p + 1e-7f) + (1.0f - y[i]) * log(1.0f - p + 1e-7f);
  }
  for (int j = 0; j < 4; j++) w[j] -= lr * g[j] / b;
  loss[t] = l / b;
}
"""

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)
SEED = 39


def make_jpegs(n: int, side: int) -> list:
    """n JPEGs: even ones bright, odd ones dark, each with its own texture."""
    rng = np.random.default_rng(1)
    out = []
    for k in range(n):
        level = 170 if k % 2 == 0 else 70
        img = np.clip(rng.normal(level, 40, (side, side, 3)), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


class Fill:
    """The fill: decode, crop, flip, normalise B images into the pinned slot.
    A class instance (not a closure) so that start_method="spawn" can send
    it to the workers."""

    def __init__(self, jpegs: list, batch: int, size: int) -> None:
        self.jpegs, self.batch, self.size = jpegs, batch, size

    def source(self, index: int, r: int) -> int:
        return (index * self.batch + r) % len(self.jpegs)

    def __call__(self, out: np.ndarray, index: int) -> None:
        rng = np.random.default_rng((SEED, index))  # the same batch from any worker
        s = self.size
        for r in range(self.batch):
            img = Image.open(io.BytesIO(self.jpegs[self.source(index, r)])).convert("RGB")
            x, y = rng.integers(0, img.size[0] - s + 1), rng.integers(0, img.size[1] - s + 1)
            img = img.crop((int(x), int(y), int(x) + s, int(y) + s))
            if rng.random() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
            a = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / np.float32(255)
            out[r] = (a - MEAN) / STD

    def labels(self, index: int) -> np.ndarray:
        return np.array([1.0 if self.source(index, r) % 2 == 0 else 0.0
                         for r in range(self.batch)], np.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--platform", default="")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, default=96, help="crop side (images are size + 32)")
    ap.add_argument("--batches", type=int, default=24)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--worker-method", default="process", choices=["process", "thread"])
    ap.add_argument("--start-method", default=None, choices=["fork", "forkserver", "spawn"])
    ap.add_argument("--lr", type=float, default=0.5)
    a = ap.parse_args()

    plats = [p for p in cl.get_platforms() if a.platform in p.name]
    if not plats:
        print(f"no OpenCL platform matches {a.platform!r}")
        return 1
    dev = plats[0].get_devices()[a.device]
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, dev)
    prog = cl.Program(ctx, SOURCE).build()
    B, S = a.batch_size, a.size
    fill = Fill(make_jpegs(64, S + 32), B, S)
    mf = cl.mem_flags
    feats = cl.Buffer(ctx, mf.READ_WRITE, B * 4 * 4)
    labels = cl.Buffer(ctx, mf.READ_WRITE, B * 4)
    w = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(4, np.float32))
    steps = a.batches * a.epochs
    loss = cl.Buffer(ctx, mf.READ_WRITE, steps * 4)
    print(f"device: {dev.name}; {a.workers} {a.worker_method} workers; batch "
          f"{B} x 3 x {S} x {S} float32 ({B * 3 * S * S * 4 / 2**20:.1f} MiB)")

    f_host = np.empty((B, 4), np.float32)
    w_host = np.zeros(4, np.float64)
    bad = t = 0
    t0 = time.perf_counter()
    with clpin.Loader(queue, fill, (B, 3, S, S), np.float32, batches=a.batches, workers=a.workers,
                      worker_method=a.worker_method, start_method=a.start_method) as loader:
        for epoch in range(a.epochs):
            for x in loader:
                i = loader.last_index
                y = fill.labels(i)
                cl.enqueue_copy(queue, labels, y, is_blocking=False)
                prog.features(queue, (B, 3), None, x.data, feats, np.int32(S * S),
                              wait_for=x.events)
                prog.sgd_step(queue, (1,), None, feats, labels, w, loss, np.int32(B),
                          np.float32(a.lr), np.int32(t))
                # The check: this batch's features against the host's decode.
                cl.enqueue_copy(queue, f_host, feats, is_blocking=True)
                ref = np.empty((B, 3, S, S), np.float32)
                fill(ref, i)
                want = ref.reshape(B, 3, -1).mean(axis=2)
                if not np.allclose(f_host[:, :3], want, atol=1e-4):
                    bad += 1
                    print(f"batch {i} (epoch {epoch}): features differ")
                fw = np.concatenate([want, np.ones((B, 1), np.float32)], 1).astype(np.float64)
                p = 1 / (1 + np.exp(-(fw @ w_host)))
                w_host -= a.lr * ((p - y) @ fw) / B
                t += 1
        stats = loader.stats()
    queue.finish()
    secs = time.perf_counter() - t0
    w_dev = np.empty(4, np.float32)
    l_dev = np.empty(steps, np.float32)
    cl.enqueue_copy(queue, w_dev, w)
    cl.enqueue_copy(queue, l_dev, loss, is_blocking=True)
    print(f"loop: {t} batches in {secs:.2f} s ({t / secs:.1f} batches/s), "
          f"{stats['worker_processes']} worker processes, slot memory "
          f"{stats['slot_bytes'] / 2**20:.1f} MiB in {stats['slots']} slots, "
          f"{stats['buffers_created']} device buffers")
    ok = bad == 0
    print(f"data check: {'all %d batches ok' % t if ok else '%d batches differ' % bad}")
    if np.allclose(w_dev, w_host, rtol=1e-3, atol=1e-4):
        print(f"weights match the host's steps: {np.round(w_dev, 4).tolist()}")
    else:
        ok = False
        print(f"weights differ: device {w_dev.tolist()}, host {w_host.tolist()}")
    k = max(1, steps // 4)
    first, last = float(l_dev[:k].mean()), float(l_dev[-k:].mean())
    print(f"loss: {first:.4f} (first steps) -> {last:.4f} (last steps)")
    if not last < first:
        ok = False
        print("the loss did not fall")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
