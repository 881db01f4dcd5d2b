#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An image training-style loop fed by clpin.DatasetLoader's worker processes.

The data is a map-style dataset, written as for ``torch.utils.data``:
``__getitem__(i)`` decodes JPEG i with PIL, randomly crops and flips it,
normalises it and returns ``(image, label)``: a 3 x S x S float32 array and
an int64 class (1: a bright source image, 0: a dark one). Python code per
sample, which threads would run one at a time under the GIL: the W worker
processes of ``clpin.DatasetLoader`` write each sample's image and label
straight into their rows of a pinned slot (shared memory), and each batch
arrives as a tuple of two device arrays, images (B x 3 x S x S) and labels
(B), shuffled anew every epoch.

The device runs one step per batch of a logistic regression on the images'
channel means (a stand-in for a model's forward and backward pass):

  features  f_i = mean of each channel of image i       (one item per image)
  update    w  -= lr * sum_i (sigmoid(f_i . w + b) - y_i) f_i / B

The augmentation draws from a generator keyed by (seed, index), not from
the worker's own random stream: sample i is the same whichever worker
decodes it, so the host can check what the device saw.

Checks (exit 1 on a mismatch): in every epoch, the features and labels the
device computed are those of the host's decode of every sample, each once;
the order changes per epoch; the weights match the same steps on the host;
the loss falls. Exit 2 when PIL is not installed.

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
__kernel void sgd_step(__global const float *f, __global const long *y,
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


class Images:
    """A map-style dataset of n samples (image, label), as a torch user
    writes one: sample i decodes JPEG i % len(jpegs), crops an S x S square
    at random, flips it at random and normalises it. A class at module level
    (not a closure), so that start_method="spawn" can send it to the
    workers."""

    def __init__(self, jpegs: list, n: int, size: int) -> None:
        self.jpegs, self.n, self.size = jpegs, n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        rng = np.random.default_rng((SEED, i))  # the same sample from any worker
        src = i % len(self.jpegs)
        img = Image.open(io.BytesIO(self.jpegs[src])).convert("RGB")
        s = self.size
        x, y = rng.integers(0, img.size[0] - s + 1), rng.integers(0, img.size[1] - s + 1)
        img = img.crop((int(x), int(y), int(x) + s, int(y) + s))
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        a = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / np.float32(255)
        return (a - MEAN) / STD, 1 if src % 2 == 0 else 0  # the label: an int64


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--platform", default="")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, default=96, help="crop side (images are size + 32)")
    ap.add_argument("--batches", type=int, default=24, help="batches per epoch")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--worker-method", default="process", choices=["process", "thread"])
    ap.add_argument("--start-method", default=None, choices=["fork", "forkserver", "spawn"])
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=3, help="the shuffle's seed")
    a = ap.parse_args()

    plats = [p for p in cl.get_platforms() if a.platform in p.name]
    if not plats:
        print(f"no OpenCL platform matches {a.platform!r}")
        return 1
    dev = plats[0].get_devices()[a.device]
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, dev)
    prog = cl.Program(ctx, SOURCE).build()
    B, S, n = a.batch_size, a.size, a.batches
    data = Images(make_jpegs(64, S + 32), n * B, S)
    mf = cl.mem_flags
    feats = cl.Buffer(ctx, mf.READ_WRITE, B * 4 * 4)
    w = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(4, np.float32))
    steps = n * a.epochs
    loss = cl.Buffer(ctx, mf.READ_WRITE, steps * 4)
    print(f"device: {dev.name}; {a.workers} {a.worker_method} workers; batch "
          f"{B} x 3 x {S} x {S} float32 ({B * 3 * S * S * 4 / 2**20:.1f} MiB) + {B} int64 labels")

    f_dev = np.empty((steps, B, 4), np.float32)  # what the device computed, for the check
    y_dev = np.empty((steps, B), np.int64)
    t = 0
    t0 = time.perf_counter()
    with clpin.DatasetLoader(queue, data, B, shuffle=True, seed=a.seed, workers=a.workers,
                             worker_method=a.worker_method,
                             start_method=a.start_method) as loader:
        for epoch in range(a.epochs):
            for images, labels in loader:
                prog.features(queue, (B, 3), None, images.data, feats, np.int32(S * S),
                              wait_for=images.events)
                prog.sgd_step(queue, (1,), None, feats, labels.data, w, loss, np.int32(B),
                              np.float32(a.lr), np.int32(t))
                cl.enqueue_copy(queue, y_dev[t], labels.data, is_blocking=False)
                cl.enqueue_copy(queue, f_dev[t], feats, is_blocking=True)
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

    # The host's decode of every sample: its channel means and label.
    want_f = np.empty((n * B, 3), np.float32)
    want_y = np.empty(n * B, np.int64)
    for i in range(n * B):
        image, want_y[i] = data[i]
        want_f[i] = image.reshape(3, -1).mean(axis=1)
    ok, bad, orders = t == steps, 0, set()
    for epoch in range(a.epochs):
        f = f_dev[epoch * n:(epoch + 1) * n, :, :3].reshape(-1, 3)
        y = y_dev[epoch * n:(epoch + 1) * n].reshape(-1)
        # Each row the device saw is a sample of the host's, with its label,
        # and every sample is met once (samples cropped alike have equal
        # means: any unused one of them will do).
        d = np.abs(f[:, None, :] - want_f[None, :, :]).max(axis=2)
        used = np.zeros(n * B, bool)
        for r in range(n * B):
            match = np.flatnonzero((d[r] <= 1e-4) & (want_y == y[r]) & ~used)
            if not len(match):
                bad += 1
                print(f"epoch {epoch}: row {r} of the epoch is no sample of the host's, "
                      "or one met twice")
                break
            used[match[0]] = True
        orders.add(f.tobytes())
    if a.epochs > 1 and len(orders) < a.epochs:
        ok = False
        print("the order did not change between epochs")
    ok = ok and bad == 0
    print(f"data check: {'all %d batches ok' % t if not bad else '%d epochs differ' % bad}")
    # The same steps on the host, over the batches the device saw.
    w_host = np.zeros(4, np.float64)
    for k in range(steps):
        fw = f_dev[k].astype(np.float64)
        fw[:, 3] = 1.0
        p = 1 / (1 + np.exp(-(fw @ w_host)))
        w_host -= a.lr * ((p - y_dev[k]) @ fw) / B
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
