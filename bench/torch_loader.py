#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch's loader on loader-bench's regimes (docs/LOADER.md): the baseline clpin's
loader is compared with.

    DataLoader(dataset, batch_size=None, num_workers=W, pin_memory=True)
    + batch.to('cuda', non_blocking=True) + the device work

against its own ideal max(prepare / W, H2D, compute), each measured in the
same run on the same GPU, as bench/loader-bench.c does for clpin:

- fill: the same counter-based xorshift64 as loader-bench (word i of batch b
  = xorshift^r((b * 0x9E3779B97F4A7C15 + i) * 0xD1B54A32D192ED03 | 1),
  r in 16ths of a round: word i gets one more round when i % 16 < r % 16;
  byte for byte the same as the C fill with the same r),
  in numpy over 512 KiB chunks, with r calibrated so that one thread fills
  --prep-ms-per-mib ms per MiB (bench/gpu-loader.sh passes the C fill's
  measured figure). __getitem__ returns a new array each time, as a Dataset
  does: "prepare alone" is __getitem__ timed in the main process.
- device work: torch.cuda._sleep (a GPU spin) calibrated to the regime's ms,
  plus a strided read of the batch.
- the loop keeps at most depth + 1 = 3 batches' work in flight on the GPU
  (as clpin's loader with depth 2 has 3 device buffers), and is timed from
  the delivery of batch `warm` to the delivery of batch `warm + N`.
- the last batch is copied back and checked word for word.

Prints one line per run, a table, and "RESULT torch ..." lines for
bench/gpu-loader.sh.

    python3 bench/torch_loader.py [--regime prep4,prep8|all] [--runs 5]
        [--prep-ms-per-mib 0.375] [--workers W] [--batches N] [--quick]
"""
import argparse
import collections
import statistics
import sys
import time

import numpy as np

MIB = 1 << 20
# name: (bytes, work ms, workers, timed batches, target ratio to ideal)
REGIMES = {
    "compute": (160 * MIB, 80.0, 1, 12, 1.05),
    "prep4": (160 * MIB, 2.0, 4, 20, 1.15),
    "prep8": (160 * MIB, 2.0, 8, 20, 1.15),
    "small32": (32 * MIB, 1.0, 4, 40, 1.2),
    "small4": (4 * MIB, 0.2, 4, 100, 1.2),
}
QUICK = {
    "compute": (2 * MIB, 4.0, 1, 4, 1.05),
    "prep4": (2 * MIB, 0.5, 4, 6, 1.15),
    "prep8": (2 * MIB, 0.5, 8, 6, 1.15),
    "small32": (1 * MIB, 0.2, 4, 6, 1.2),
    "small4": (MIB // 4, 0.1, 4, 6, 1.2),
}

G = np.uint64(0x9E3779B97F4A7C15)
M = np.uint64(0xD1B54A32D192ED03)
ONE = np.uint64(1)
S13, S7, S17 = np.uint64(13), np.uint64(7), np.uint64(17)
CHUNK = 1 << 16  # words: 512 KiB
IDX = np.arange(CHUNK, dtype=np.uint64)
MASK = (1 << 64) - 1


def _round(x, t):
    np.left_shift(x, S13, out=t)
    np.bitwise_xor(x, t, out=x)
    np.right_shift(x, S7, out=t)
    np.bitwise_xor(x, t, out=x)
    np.left_shift(x, S17, out=t)
    np.bitwise_xor(x, t, out=x)


def fill(out, index, r16):
    """Write batch `index` into out (uint64 array), loader-bench's algorithm."""
    whole, frac = divmod(r16, 16)
    t = np.empty(CHUNK, dtype=np.uint64)
    tf = np.empty((CHUNK // 16, frac), dtype=np.uint64) if frac else None
    base = (index * 0x9E3779B97F4A7C15) & MASK
    n = out.shape[0]
    with np.errstate(over="ignore"):
        for s in range(0, n, CHUNK):
            m = min(CHUNK, n - s)
            x = out[s:s + m]
            np.add(IDX[:m], np.uint64((base + s) & MASK), out=x)
            np.multiply(x, M, out=x)
            np.bitwise_or(x, ONE, out=x)
            for _ in range(whole):
                _round(x, t[:m])
            if frac and m % 16 == 0:
                v = x.reshape(-1, 16)[:, :frac]
                tv = tf[:m // 16]
                np.left_shift(v, S13, out=tv)
                np.bitwise_xor(v, tv, out=v)
                np.right_shift(v, S7, out=tv)
                np.bitwise_xor(v, tv, out=v)
                np.left_shift(v, S17, out=tv)
                np.bitwise_xor(v, tv, out=v)


def fill_ms_per_mib(buf, r16):
    best = 1e30
    for k in range(3):
        t0 = time.perf_counter()
        fill(buf, k, r16)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3 / (buf.nbytes / MIB)


def calibrate_fill(target):
    """Bisect r16 so that one thread fills `target` ms per MiB."""
    buf = np.empty(8 * MIB // 8, dtype=np.uint64)
    buf[:] = 1
    lo, hi = 0, 16
    tlo, thi = fill_ms_per_mib(buf, lo), fill_ms_per_mib(buf, hi)
    while thi < target and hi < 16 * 4096:
        lo, tlo = hi, thi
        hi *= 2
        thi = fill_ms_per_mib(buf, hi)
    if tlo >= target:
        return lo, tlo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        t = fill_ms_per_mib(buf, mid)
        if t < target:
            lo, tlo = mid, t
        else:
            hi, thi = mid, t
    r16 = hi if thi - target < target - tlo else lo
    return r16, fill_ms_per_mib(buf, r16)


class FillDataset:
    """A map-style dataset: item i is batch i as a uint8 tensor."""

    def __init__(self, nbytes, length, r16):
        self.nbytes, self.length, self.r16 = nbytes, length, r16

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        import torch
        if i >= self.length:
            raise IndexError(i)
        out = np.empty(self.nbytes // 8, dtype=np.uint64)
        fill(out, i, self.r16)
        return torch.from_numpy(out.view(np.uint8))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--regime", default="prep4,prep8,small32,small4")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prep-ms-per-mib", type=float, default=0.375)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--batches", type=int, default=0)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()

    import torch
    from torch.utils.data import DataLoader
    if not torch.cuda.is_available():
        print("torch_loader: no CUDA device: nothing measured")
        return 0
    dev = torch.device("cuda")
    table = QUICK if args.quick else REGIMES
    names = list(table) if args.regime == "all" else args.regime.split(",")
    for n in names:
        if n not in table:
            sys.exit(f"torch_loader: no regime {n} (have {', '.join(table)})")

    r16, got = calibrate_fill(args.prep_ms_per_mib)
    print(f"torch_loader on {torch.cuda.get_device_name(0)}: torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}, numpy {np.__version__}")
    print(f"fill: numpy xorshift64 over every 8-byte word, {r16 / 16:.4g} rounds per word: "
          f"{got:.4f} ms per MiB on one thread (target {args.prep_ms_per_mib:.4f}; "
          f"{got * 160:.1f} ms per 160 MiB)", flush=True)
    if got > 1.1 * args.prep_ms_per_mib:
        print(f"torch_loader: WARNING: numpy's cheapest fill takes {got:.4f} ms per MiB, more "
              f"than the target {args.prep_ms_per_mib:.4f}: the preparation is heavier here",
              flush=True)

    # The device work: torch.cuda._sleep cycles per ms, calibrated.
    def sleep_ms_of(cycles):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles)
        a.record()
        torch.cuda._sleep(cycles)
        b.record()
        b.synchronize()
        return a.elapsed_time(b)

    sleep_ms_of(1000)
    per_ms = 1e6 / max(sleep_ms_of(1000000), 1e-3)  # cycles per ms, roughly
    per_ms = per_ms * 20 / max(sleep_ms_of(int(per_ms * 20)), 1e-3)  # then on a 20 ms spin
    acc = torch.zeros((), dtype=torch.int64, device=dev)

    def work(xg, cycles):
        acc.add_(xg.view(torch.int32)[::1024].sum())
        torch.cuda._sleep(cycles)

    results = []
    for name in names:
        nbytes, work_ms, workers, nbatch, target = table[name]
        workers = args.workers or workers
        nbatch = args.batches or nbatch
        cycles = int(per_ms * work_ms)
        warm = args.depth + workers + 2
        print(f"# {name}: {nbytes // MIB if nbytes >= MIB else nbytes / MIB:g} MiB batches, "
              f"{work_ms} ms device work ({cycles} cycles), {workers} workers, "
              f"{nbatch} batches timed after {warm}", flush=True)
        ds = FillDataset(nbytes, warm + nbatch + 1, r16)
        rows = []
        for run in range(args.runs):
            # prepare alone: __getitem__ in this process (allocation included).
            nprep = 3 if nbytes >= 64 * MIB else 8
            ds[0]
            t0 = time.perf_counter()
            for i in range(nprep):
                ds[i + 1]
            prep = (time.perf_counter() - t0) * 1e3 / nprep
            # H2D alone: a pinned tensor, non_blocking, back to back.
            nb = min(nbatch, 10)
            host = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
            dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            dst.copy_(host, non_blocking=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(nb):
                dst.copy_(host, non_blocking=True)
            torch.cuda.synchronize()
            h2d = (time.perf_counter() - t0) * 1e3 / nb
            # compute alone.
            work(dst, cycles)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(nb):
                work(dst, cycles)
            torch.cuda.synchronize()
            comp = (time.perf_counter() - t0) * 1e3 / nb
            del host, dst
            ideal = max(prep / workers, h2d, comp)

            # The loader.
            dl = DataLoader(ds, batch_size=None, num_workers=workers, pin_memory=True)
            inflight = collections.deque()
            t0 = t1 = None
            bad = False
            for i, b in enumerate(dl):
                if i == warm:
                    t0 = time.perf_counter()
                if i == warm + nbatch:
                    t1 = time.perf_counter()
                    got_b = b.to(dev, non_blocking=True).cpu().numpy().view(np.uint64)
                    want = np.empty(nbytes // 8, dtype=np.uint64)
                    fill(want, i, r16)
                    bad = not np.array_equal(got_b, want)
                    continue
                xg = b.to(dev, non_blocking=True)
                work(xg, cycles)
                ev = torch.cuda.Event()
                ev.record()
                inflight.append(ev)
                if len(inflight) > args.depth:
                    inflight.popleft().synchronize()
            torch.cuda.synchronize()
            del dl
            if bad:
                print(f"torch_loader: {name}: the last batch differs on the device", flush=True)
                return 1
            ms = (t1 - t0) * 1e3 / nbatch
            ratio = ms / (comp if name == "compute" else ideal)
            rows.append((ms, ideal, prep, h2d, comp, ratio))
            print(f"  run {run + 1}/{args.runs}: DataLoader {ms:.3f} ms/batch; prepare {prep:.3f} "
                  f"(/{workers} = {prep / workers:.3f}), H2D {h2d:.3f}, compute {comp:.3f} "
                  f"-> {ratio:.3f}x", flush=True)
        med = [statistics.median(r[k] for r in rows) for k in range(6)]
        held = sum(r[5] <= target for r in rows)
        results.append((name, nbytes, work_ms, workers, med, min(r[5] for r in rows),
                        max(r[5] for r in rows), target, held, len(rows)))

    print(f"\n{'regime':8} {'batch MiB':>9} {'work':>6} {'W':>3} {'torch ms/b':>11} "
          f"{'ideal ms/b':>11} {'ratio (min-max)':>24} {'target':>8} {'held':>6}")
    for name, nbytes, work_ms, workers, med, lo, hi, target, held, n in results:
        print(f"{name:8} {nbytes / MIB:9.2f} {work_ms:6.1f} {workers:3d} {med[0]:11.3f} "
              f"{med[1]:11.3f} {f'{med[5]:.3f}x ({lo:.3f}-{hi:.3f})':>24} {f'<={target:.2f}x':>8} "
              f"{held:3d}/{n}")
    for name, nbytes, work_ms, workers, med, lo, hi, target, held, n in results:
        print(f"RESULT torch regime={name} bytes={nbytes} work_ms={work_ms:.2f} workers={workers} "
              f"loader_ms={med[0]:.4f} ideal_ms={med[1]:.4f} prep_ms={med[2]:.4f} "
              f"h2d_ms={med[3]:.4f} compute_ms={med[4]:.4f} ratio={med[5]:.4f} "
              f"target={target:.2f} held={held} runs={n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
