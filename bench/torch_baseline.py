#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""CUDA copies through PyTorch, as a PyTorch user writes them: a cross-check
of clpin-bench's own CUDA baseline (cudaMemcpy loaded in the bench process).

    python3 bench/torch_baseline.py [--sizes 16M,64M,256M,1G] [--reps 11] [--warmup 2]

Prints CSV with clpin-bench's columns: section torch, paths torch-pinned
(tensor.pin_memory(), copy_ with non_blocking=True) and torch-pageable
(plain CPU tensor), each H2D and D2H, GB/s = 1e9 bytes/s, every copy timed to
completion (torch.cuda.synchronize), median of --reps after --warmup."""
import argparse
import math
import statistics
import sys
import time

import torch


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def pct(sorted_v, p):
    """Nearest rank, as clpin-bench computes it."""
    rank = max(1, math.ceil(p / 100 * len(sorted_v)))
    return sorted_v[min(rank, len(sorted_v)) - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16M,64M,256M,1G")
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_baseline: no CUDA device", file=sys.stderr)
        return 1
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    dev = torch.device("cuda")
    print("section,path,dir,bytes,chunk,threads,unit,route,n,median,p10,p90,p99,min,max,mean")
    for n in sizes:
        gpu = torch.empty(n, dtype=torch.uint8, device=dev)
        for kind in ("pinned", "pageable"):
            host = torch.empty(n, dtype=torch.uint8, pin_memory=(kind == "pinned"))
            host.random_(0, 256)
            for direction in ("H2D", "D2H"):
                src, dst = (host, gpu) if direction == "H2D" else (gpu, host)
                if direction == "D2H":
                    gpu.random_(0, 256)
                rates = []
                for i in range(args.warmup + args.reps):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter_ns()
                    dst.copy_(src, non_blocking=True)
                    torch.cuda.synchronize()
                    dt = time.perf_counter_ns() - t0
                    if i >= args.warmup:
                        rates.append(n / dt)
                if not torch.equal(dst.cpu(), src.cpu()):
                    print(f"torch_baseline: data mismatch {kind} {direction} {n}", file=sys.stderr)
                    return 3
                s = sorted(rates)
                print(f"torch,torch-{kind},{direction},{n},0,1,GB/s,,{len(s)},"
                      f"{statistics.median(s):.6g},{pct(s, 10):.6g},{pct(s, 90):.6g},{pct(s, 99):.6g},"
                      f"{s[0]:.6g},{s[-1]:.6g},{statistics.fmean(s):.6g}", flush=True)
            del host
        del gpu
    return 0


if __name__ == "__main__":
    sys.exit(main())
