#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""CUDA pinned host-to-device copies on N GPUs at once: the hardware bound
of a transfer-bound loader on N ranks of one host (the host's memory and
PCIe root serve every GPU at once), the baseline gpu-mpi.sh sets the
loader's N-rank rate against.

    python3 bench/torch_h2d.py [--np 1,4] [--mib 64] [--seconds 2] [--runs 3]

Per N: N processes (one per GPU, cuda:rank), each a pinned tensor of --mib
MiB copied to its GPU back to back (non_blocking, synchronised at the end)
for --seconds, all started by one barrier; the rate is every process's
bytes over the slowest one's time. Prints, per N, the median of --runs:
    "  cuda pinned h2d, N GPU(s) at once   X GB/s  [MIN .. MAX]"
"""

from __future__ import annotations

import argparse
import statistics
import time


def _worker(rank, mib, seconds, barrier, out) -> None:
    import torch

    torch.cuda.set_device(rank)
    src = torch.empty(mib << 20, dtype=torch.uint8).pin_memory()
    dst = torch.empty(mib << 20, dtype=torch.uint8, device=f"cuda:{rank}")
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    barrier.wait()
    t0 = time.perf_counter()
    n = 0
    while True:
        for _ in range(8):
            dst.copy_(src, non_blocking=True)
        n += 8
        torch.cuda.synchronize()
        if time.perf_counter() - t0 >= seconds:
            break
    out.put((n * (mib << 20), time.perf_counter() - t0, torch.cuda.get_device_name(rank)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", default="1,4")
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    for n in [int(x) for x in args.np.split(",")]:
        rates = []
        names = set()
        for _ in range(args.runs):
            barrier, out = ctx.Barrier(n), ctx.Queue()
            ps = [ctx.Process(target=_worker, args=(r, args.mib, args.seconds, barrier, out))
                  for r in range(n)]
            for p in ps:
                p.start()
            res = [out.get(timeout=120) for _ in ps]
            for p in ps:
                p.join()
            names |= {r[2] for r in res}
            rates.append(sum(r[0] for r in res) / max(r[1] for r in res) / 1e9)
        print(f"  cuda pinned h2d, {n} GPU(s) at once ({', '.join(sorted(names))})   "
              f"{statistics.median(rates):.2f} GB/s  [{min(rates):.2f} .. {max(rates):.2f}]",
              flush=True)


if __name__ == "__main__":
    main()
