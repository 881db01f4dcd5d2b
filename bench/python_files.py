# SPDX-License-Identifier: Apache-2.0
"""Python file loads on one device (docs/FILES.md): a .npy file and a
safetensors file of many tensors, the plain way against clpin's, hot (page
cache), medians of --runs runs.

  npy            np.load + pyopencl.array.to_device   vs  clpin.load_npy
  safetensors    per-tensor reads (np.fromfile at each tensor's offset, as a
                 reader of the format does) + to_device   vs  clpin.load_safetensors

--impl torch (under a Python with torch and CUDA; no pyopencl, no clpin) times
instead, for reference, torch's own route for the same tensors: torch.save of
--tensors float32 tensors of --size in all, then torch.load(map_location="cuda").

  python3 bench/python_files.py [--platform NAME] [--size 1G] [--tensors 300]
                                [--runs 5] [--dir /var/tmp] [--impl clpin|torch]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import time

import numpy as np

import pybench


def _write_safetensors(path: str, nbytes: int, count: int) -> dict:
    """count float32 tensors of about nbytes in all, laid out as the format says."""
    per = max(4, nbytes // count // 4 * 4)
    header, at = {}, 0
    for i in range(count):
        header[f"t{i:04d}"] = {"dtype": "F32", "shape": [per // 4], "data_offsets": [at, at + per]}
        at += per
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    rng = np.random.default_rng(1)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        left = at
        while left:
            n = min(left, 64 << 20)
            f.write(rng.integers(0, 255, n, dtype=np.uint8).tobytes())
            left -= n
    return header


def _per_tensor(queue, path: str, to_device) -> dict:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        x = np.fromfile(path, dtype=np.float32, count=(e - b) // 4, offset=8 + n + b)
        out[name] = to_device(queue, x)
    queue.finish()
    return out


def _time(fn, runs: int) -> list[float]:
    fn()  # warm: the file in the page cache, the pool and kernels ready
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = fn()
        out.append(time.perf_counter() - t0)
        del r
    return out


def _torch(a, nbytes: int) -> None:
    import torch

    per = max(1, nbytes // a.tensors // 4)
    path = os.path.join(a.dir, f"clpin-bench-{os.getpid()}.pt")
    print(f"python_files: torch {torch.__version__}, device {torch.cuda.get_device_name(0)}, "
          f"{a.size} file of {a.tensors} tensors, {a.runs} runs (hot)")
    try:
        g = torch.Generator().manual_seed(3)
        torch.save({f"t{i:04d}": torch.rand(per, generator=g) for i in range(a.tensors)}, path)

        def load():
            out = torch.load(path, map_location="cuda")
            torch.cuda.synchronize()
            return out

        print(pybench.rate_line("torch.load(map_location=cuda)",
                                [nbytes / s / 1e9 for s in _time(load, a.runs)]))
    finally:
        if os.path.exists(path):
            os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--platform", default="NVIDIA")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--tensors", type=int, default=300)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--impl", choices=("clpin", "torch"), default="clpin")
    a = ap.parse_args()
    nbytes = pybench.parse_size(a.size)
    if a.impl == "torch":  # under a Python that has no pyopencl
        _torch(a, nbytes)
        return
    import pyopencl as cl
    import pyopencl.array as cl_array

    import clpin

    dev = pybench.cl_device(a.platform)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx)
    print(f"python_files: platform {dev.platform.name}, device {dev.name}, clpin {clpin.version()}, "
          f"{a.size} files, {a.runs} runs (hot)")
    npy = os.path.join(a.dir, f"clpin-bench-{os.getpid()}.npy")
    st = os.path.join(a.dir, f"clpin-bench-{os.getpid()}.safetensors")
    try:
        np.save(npy, np.random.default_rng(2).integers(0, 255, nbytes, dtype=np.uint8))
        _write_safetensors(st, nbytes, a.tensors)
        rows = [
            ("npy plain (np.load + to_device)",
             lambda: (cl_array.to_device(queue, np.load(npy)), queue.finish())),
            ("npy clpin.load_npy", lambda: clpin.load_npy(queue, npy)),
            (f"safetensors plain ({a.tensors} reads + to_device)", 
             lambda: _per_tensor(queue, st, cl_array.to_device)),
            ("safetensors clpin.load_safetensors", lambda: clpin.load_safetensors(queue, st)),
        ]
        med = {}
        for name, fn in rows:
            rates = [nbytes / s / 1e9 for s in _time(fn, a.runs)]
            med[name] = statistics.median(rates)
            print(pybench.rate_line(name, rates))
        names = [r[0] for r in rows]
        print(f"  npy: clpin / plain {med[names[1]] / med[names[0]]:.2f}x")
        print(f"  safetensors: clpin / plain {med[names[3]] / med[names[2]]:.2f}x (target >= 3x on a GPU, >= 2x on a CPU device)")
    finally:
        for p in (npy, st):
            if os.path.exists(p):
                os.unlink(p)
        clpin.release_context(ctx)


if __name__ == "__main__":
    main()
