#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch's allreduce of CUDA tensors, the baselines of the
allreduce target: torch.distributed with the gloo backend (host-staged,
what a user without NCCL gets) and NCCL (device to device over NVLink,
which OpenCL on NVIDIA cannot do: printed as the ceiling).

    python3 bench/torch_allreduce.py [--np N] [--mib 64,256] [--runs 5] [--backends gloo,nccl]

Spawns N processes itself (torch.multiprocessing, a TCP store on
127.0.0.1: no MPI, no torchrun needed), one GPU each (cuda:rank), a float32
tensor of each size summed in place. Each figure: bytes / the slowest
rank's time, after two warm-ups, --runs times; lines as mpi-bench prints
them (benchstat.h):
    "  torch gloo allreduce 256 MiB, 4 ranks   M GB/s  [MIN .. MAX]"
    "RAW<tab>torch gloo allreduce 256 MiB<tab>0<tab>V1,V2,..."
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import pybench


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, args, port: int, backend: str, out) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.np)
    dev = torch.device("cuda", rank)
    if rank == 0:
        out.put(("devices", [torch.cuda.get_device_name(i) for i in range(args.np)]))
    for mib in args.mib:
        n = (mib << 20) // 4
        x = torch.ones(n, dtype=torch.float32, device=dev)
        rates = []
        for r in range(args.runs + 2):
            x.fill_(1.0)
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            torch.cuda.synchronize()
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64,
                             device=dev if backend == "nccl" else "cpu")
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if r >= 2:
                rates.append((mib << 20) / float(t.item()) / 1e9)
        if not bool((x == float(args.np)).all()):
            raise SystemExit(f"rank {rank}: {backend} allreduce gave a wrong sum")
        if rank == 0:
            out.put((backend, mib, rates))
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=0, help="ranks (default: every GPU)")
    ap.add_argument("--mib", default="64,256")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--backends", default="gloo,nccl")
    args = ap.parse_args()
    args.mib = [int(m) for m in args.mib.split(",")]
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as exc:
        print(f"torch_allreduce: no torch ({exc})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torch_allreduce: no CUDA device", file=sys.stderr)
        return 2
    args.np = args.np or torch.cuda.device_count()
    ctx = mp.get_context("spawn")
    for backend in args.backends.split(","):
        if backend == "nccl" and not torch.distributed.is_nccl_available():
            print("torch_allreduce: NCCL not available in this torch")
            continue
        out = ctx.SimpleQueue()
        port = _free_port()
        procs = [ctx.Process(target=_worker, args=(r, args, port, backend, out))
                 for r in range(args.np)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode for p in procs):
            print(f"torch_allreduce: a {backend} process failed", file=sys.stderr)
            return 1
        while not out.empty():
            item = out.get()
            if item[0] == "devices":
                if backend == args.backends.split(",")[0]:
                    for i, name in enumerate(item[1]):
                        print(f"  torch rank {i}: cuda:{i} {name}")
                continue
            _, mib, rates = item
            what = f"torch {backend} allreduce {mib} MiB, {args.np} ranks"
            print(pybench.rate_line(what, rates, 60))
            print(f"RAW\ttorch {backend} allreduce {mib} MiB\t0\t" + ",".join(f"{v:.4f}" for v in rates))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    sys.exit(main())
