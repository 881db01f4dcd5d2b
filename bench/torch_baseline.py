#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""CUDA copies through PyTorch, as a PyTorch user writes them: a cross-check
of clpin-bench's own CUDA baseline (cudaMemcpy loaded in the bench process).

    python3 bench/torch_baseline.py [--sizes 16M,64M,256M,1G] [--reps 11] [--warmup 2]

Prints CSV with clpin-bench's columns: section torch, paths torch-pinned
(tensor.pin_memory(), copy_ with non_blocking=True) and torch-pageable
(plain CPU tensor), each H2D and D2H, GB/s = 1e9 bytes/s, every copy timed to
completion (torch.cuda.synchronize), median of --reps after --warmup.

    python3 bench/torch_baseline.py --at-once 1,4 [--mib 64] [--seconds 2] [--reps 3]

Pinned host-to-device copies on N GPUs at once instead: the hardware bound
of a transfer-bound loader on N ranks of one host (the host's memory and
PCIe root serve every GPU at once), the baseline bench/gpu-mpi.sh sets the
loader's N-rank rate against. Per N: N processes (one per GPU, cuda:rank),
each a pinned tensor of --mib MiB copied to its GPU back to back for
--seconds, all started by one barrier; the rate is every process's bytes
over the slowest one's time. Prints, per N, the median of --reps:
    "  cuda pinned h2d, N GPU(s) at once   X GB/s  [MIN .. MAX]"
"""
import argparse
import math
import statistics
import sys
import time

import torch

from pybench import parse_size


def pct(sorted_v, p):
    """Nearest rank, as clpin-bench computes it."""
    rank = max(1, math.ceil(p / 100 * len(sorted_v)))
    return sorted_v[min(rank, len(sorted_v)) - 1]


def _at_once_worker(rank, mib, seconds, barrier, out):
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


def at_once(args):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    for n in [int(x) for x in args.at_once.split(",")]:
        rates, names = [], set()
        for _ in range(args.reps):
            barrier, out = ctx.Barrier(n), ctx.Queue()
            ps = [ctx.Process(target=_at_once_worker, args=(r, args.mib, args.seconds, barrier, out))
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
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16M,64M,256M,1G")
    ap.add_argument("--reps", type=int, default=None, help="11; with --at-once 3")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--at-once", metavar="N,N", help="pinned H2D on N GPUs at once instead")
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    if args.at_once:
        args.reps = args.reps or 3
        return at_once(args)
    args.reps = args.reps or 11
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
