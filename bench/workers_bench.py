# SPDX-License-Identifier: Apache-2.0
"""clpin.Loader's worker processes against its threads, PyTorch's DataLoader
and the fill's own bound: batches per second of one Python loop.

Fills (the issue's table; the same code in every column: each sample is
bench/dataset_bench.py's, a batch fill loops over its rows):

- python: per-sample Python, 64 x 512 token ids (int64) from dict lookups
  (lower-casing, stripping, a vocabulary dict, a hashed fallback);
- jpeg:   PIL JPEG decode + random crop + random flip + normalise,
  64 x 3 x 224 x 224 float32, from 256 x 256 JPEGs made with PIL at start;
- numpy:  vectorised numpy over 32 MiB of float32 (two passes, the GIL
  released).

Columns (each for W in --workers):

- clpin-thread:  clpin.Loader(worker_method="thread", workers=W);
- clpin-process: clpin.Loader(worker_method="process", workers=W);
- torch:         DataLoader(num_workers=W, pin_memory=True,
                 persistent_workers=True) + .to("cuda", non_blocking=True);
- bare:          W processes each running the fill on its share of the
                 epoch's indices into an array of its own (once to warm,
                 then timed from a common start to the last one's end),
                 results discarded: the fill's own bound on this host (no
                 loader, no transfer).

Each (column, fill, W): one loader (or process set), --warm-epochs whole
epochs to warm (every worker started, its data touched), then --runs timed epochs of N batches (N = --per-worker x W); the figure
is N over the epoch's time, the GPU synchronised at its end. Prints one
RESULT line per run and the device each ran on; --summary FILE... prints
the medians over every run of every process and the ratios of the issue's
targets.

    python3 bench/workers_bench.py --impl clpin [--fills python,jpeg,numpy]
        [--workers 1,4,8,16] [--runs 3] [--quick]
    python3 bench/workers_bench.py --impl torch ...     (PyTorch's python)
    python3 bench/workers_bench.py --impl bare ...
    python3 bench/workers_bench.py --summary out/*.log
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import statistics
import sys
import time

import pybench

try:
    import numpy as np
except ImportError as exc:  # the torch side on a python without numpy
    print(f"SKIP: numpy not importable under {sys.executable} ({exc})")
    sys.exit(0)

from dataset_bench import Clpin, Jpegs, Tokens, Vectors, epoch  # noqa: E402 (needs numpy)

FULL = {"python": (64, 512), "jpeg": (64, 3, 224, 224), "numpy": (32 << 20) // 4}
QUICK = {"python": (8, 64), "jpeg": (4, 3, 56, 56), "numpy": (1 << 20) // 4}
DTYPES = {"python": np.int64, "jpeg": np.float32, "numpy": np.float32}


# ------------------------------------------------------------------ the fills


class Fills:
    """The three batch fills and their data, made once (before any fork)."""

    def __init__(self, quick: bool) -> None:
        self.shapes = QUICK if quick else FULL
        self.tokens = Tokens(0, self.shapes["python"][1], sentences=4096)
        self.pil_error = None
        try:
            self.jpegs = Jpegs(0, 72 if quick else 256, self.shapes["jpeg"][2], count=64)
        except ImportError as exc:
            self.pil_error = str(exc)
        self.vectors = Vectors(0, self.shapes["numpy"])

    def python(self, out: np.ndarray, index: int) -> None:
        for r in range(out.shape[0]):
            out[r] = self.tokens.ids(index * out.shape[0] + r)

    def jpeg(self, out: np.ndarray, index: int) -> None:
        for r in range(out.shape[0]):
            out[r] = self.jpegs.image(index * 7 + r)

    def numpy(self, out: np.ndarray, index: int) -> None:
        self.vectors.scaled(index, out)


FILLS: Fills = None  # set in main, before any worker is forked


def fill_python(out, index):
    FILLS.python(out, index)


def fill_jpeg(out, index):
    FILLS.jpeg(out, index)


def fill_numpy(out, index):
    FILLS.numpy(out, index)


FILL_FNS = {"python": fill_python, "jpeg": fill_jpeg, "numpy": fill_numpy}


# ------------------------------------------------------------------ measuring


def _threads() -> dict:
    """CPU ticks of this process's threads by thread id: (name, ticks);
    "main" for the main thread (clpin names its own: clpin-loader,
    clpin-copy, clpin-events)."""
    me = os.getpid()
    out: dict = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = "main" if int(tid) == me else f.read().strip()
        except OSError:
            continue
        out[tid] = (name, pybench.ticks(path=f"/proc/self/task/{tid}/stat"))
    return out


class Meter:
    """One timed epoch's CPU: the parent (every thread, and by thread name)
    and the worker processes pids (and their kernel share)."""

    def __init__(self, pids: list) -> None:
        self.pids = pids

    def _now(self) -> tuple:
        t = os.times()
        return (t.user + t.system, sum(pybench.ticks(p) for p in self.pids),
                sum(pybench.ticks(p, sys_only=True) for p in self.pids), _threads())

    def start(self) -> None:
        self.then = self._now()

    def stop(self, impl: str, fill: str, w: int, run: int, n: int, secs: float) -> None:
        """RESULT, CPU (seconds per batch) and THREADS (CPU ms a batch by
        thread name: the sum (threads of that name; the busiest one's
        share)) lines of the epoch since start()."""
        (c0, k0, s0, th0), (c1, k1, s1, th1) = self.then, self._now()
        result(impl, fill, w, run, n, secs)
        cpu(impl, fill, w, run, n, c1 - c0, (k1 - k0) / pybench.HZ, (s1 - s0) / pybench.HZ)
        by: dict = {}
        for tid, (name, ticks) in th1.items():
            d = ticks - th0.get(tid, (name, 0))[1]
            tot, cnt, top = by.get(name, (0, 0, 0))
            by[name] = (tot + d, cnt + 1, max(top, d))
        ms = 1e3 / pybench.HZ / n
        parts = [f"{k}={tot * ms:.3f}(x{cnt},max {top * ms:.3f})"
                 for k, (tot, cnt, top) in sorted(by.items())]
        print(f"THREADS impl={impl} fill={fill} W={w} run={run} ms_per_batch " + " ".join(parts),
              flush=True)


def cpu(impl: str, fill: str, w: int, run: int, n: int, parent_s: float, workers_s: float,
        workers_sys_s: float) -> None:
    """CPU seconds per batch of the parent (every thread) and of the
    workers (and their kernel share), over one timed epoch."""
    pybench.emit("CPU", impl=impl, fill=fill, W=w, run=run, parent_ms=f"{1e3 * parent_s / n:.3f}",
                 workers_ms=f"{1e3 * workers_s / n:.3f}",
                 workers_sys_ms=f"{1e3 * workers_sys_s / n:.3f}")


def result(impl: str, fill: str, w: int, run: int, n: int, secs: float) -> None:
    pybench.emit("RESULT", impl=impl, fill=fill, W=w, run=run, batches=n, secs=f"{secs:.4f}",
                 bps=f"{n / secs:.2f}")


def skip_jpeg(column: str, fill: str) -> bool:
    if fill == "jpeg" and FILLS.pil_error:
        print(f"SKIP {column} fill=jpeg: PIL not importable under {sys.executable} "
              f"({FILLS.pil_error})")
    return fill == "jpeg" and FILLS.pil_error is not None


# ------------------------------------------------------------------ columns


def drive(impl: str, fill: str, w: int, n: int, loader, run, pids, args) -> None:
    """--warm-epochs epochs of loader, then --runs timed ones (run: one
    epoch, the device finished at its end); pids() gives the worker
    processes once they are started."""
    for _ in range(args.warm_epochs):
        for _ in loader:
            pass
    meter = Meter([p for p in pids() if p])
    for r in range(args.runs):
        meter.start()
        t0 = time.perf_counter()
        run()
        meter.stop(impl, fill, w, r, n, time.perf_counter() - t0)


def run_clpin(args, fills: list, workers: list) -> None:
    side = Clpin(os.environ.get("DEVICE", ""))
    print(f"DEVICE clpin: {side.name}, clpin {side.clpin.version()}, {pybench.PYTHON}, "
          f"{os.cpu_count()} cores", flush=True)
    for fill in [f for f in fills if not skip_jpeg("clpin", f)]:
        for method in args.methods.split(","):
            for w in workers:
                n = args.per_worker * w
                with side.clpin.Loader(side.queue, FILL_FNS[fill], FILLS.shapes[fill], DTYPES[fill],
                                       batches=n, workers=w, worker_method=method) as loader:
                    drive(f"clpin-{method}", fill, w, n, loader,
                          epoch(loader, n, side.queue.finish), lambda: loader.worker_pids, args)
                    s = loader.stats()
                    assert s["buffers_created"] == 3 and s["failed"] == 0, s


def run_torch(args, fills: list, workers: list) -> None:
    try:
        import torch
        from torch.utils.data import DataLoader, Dataset
    except ImportError as exc:
        print(f"SKIP torch: PyTorch not importable under {sys.executable} ({exc})")
        return
    if not torch.cuda.is_available():
        print(f"SKIP torch: torch {torch.__version__} sees no CUDA device")
        return
    print(f"DEVICE torch: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"{pybench.PYTHON}", flush=True)

    class Batches(Dataset):
        def __init__(self, fill: str, n: int) -> None:
            self.fill, self.n = fill, n

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, index: int):
            out = np.empty(FILLS.shapes[self.fill], DTYPES[self.fill])  # a new batch, as a Dataset
            FILL_FNS[self.fill](out, index)
            return torch.from_numpy(out)

    for fill in [f for f in fills if not skip_jpeg("torch", f)]:
        for w in workers:
            n = args.per_worker * w
            dl = DataLoader(Batches(fill, n), batch_size=None, shuffle=False, num_workers=w,
                            pin_memory=True, persistent_workers=True)
            drive("torch", fill, w, n, dl,
                  epoch(dl, n, torch.cuda.synchronize, lambda b: b.to("cuda", non_blocking=True)),
                  lambda d=dl: [p.pid for p in getattr(d._iterator, "_workers", [])], args)
            del dl


def _bare_worker(fill: str, start, ends, cpus, k: int, w: int, per: int) -> None:
    out = np.empty(FILLS.shapes[fill], DTYPES[fill])
    # The indices a loader would give this worker of the epoch, once to warm
    # (copy-on-write of the data the fill touches, as a loader's warm epoch),
    # then timed.
    indices = [k + w * j for j in range(per)]
    for i in indices:
        FILL_FNS[fill](out, i)
    start.wait()
    c0 = os.times()
    for i in indices:
        FILL_FNS[fill](out, i)
    ends[k] = time.perf_counter()  # CLOCK_MONOTONIC: one clock for every process
    c1 = os.times()
    cpus[2 * k], cpus[2 * k + 1] = c1.user + c1.system - c0.user - c0.system, c1.system - c0.system


def run_bare(args, fills: list, workers: list) -> None:
    ctx = mp.get_context("fork")
    print(f"DEVICE bare: no device (the fill alone, {os.cpu_count()} cores)", flush=True)
    for fill in [f for f in fills if not skip_jpeg("bare", f)]:
        for w in workers:
            per = max(2, args.per_worker)
            for run in range(args.runs):
                start = ctx.Barrier(w + 1)
                ends, cpus = ctx.Array("d", w), ctx.Array("d", 2 * w)
                procs = [ctx.Process(target=_bare_worker, args=(fill, start, ends, cpus, k, w, per))
                         for k in range(w)]
                for p in procs:
                    p.start()
                start.wait()
                t0 = time.perf_counter()
                for p in procs:
                    p.join()
                assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
                result("bare", fill, w, run, w * per, max(ends) - t0)
                cpu("bare", fill, w, run, w * per, 0.0, sum(cpus[0::2]), sum(cpus[1::2]))


# ------------------------------------------------------------------ summary


def summary(paths: list) -> None:
    data: dict = {}
    cpus: dict = {}
    runs: dict = {}
    for path in paths:
        pm = re.search(r"-(\d+)\.log$", path)
        run_of = (os.path.dirname(os.path.abspath(path)), int(pm[1]) if pm else 0)
        with open(path) as f:
            lines = f.readlines()
        for r in pybench.records(lines):
            key = (r["impl"], r["fill"], int(r["W"]))
            data.setdefault(key, []).append(float(r["bps"]))
            # The same run of the same pass of the same call: the pairs a
            # "held" count compares (one process of each column, one after
            # the other on the same machine).
            runs.setdefault(key, {})[(run_of, int(r["run"]))] = float(r["bps"])
        for r in pybench.records(lines, "CPU"):
            cpus.setdefault((r["impl"], r["fill"], int(r["W"])), []).append(
                (float(r["parent_ms"]), float(r["workers_ms"]), float(r["workers_sys_ms"])))
    if not data:
        print("no RESULT lines")
        return
    med = {k: statistics.median(v) for k, v in data.items()}
    cnt = {k: len(v) for k, v in data.items()}
    impls = ["clpin-thread", "clpin-process", "torch", "bare"]
    fills = sorted({k[1] for k in data}, key=["python", "jpeg", "numpy"].index)
    ws = sorted({k[2] for k in data})

    def g(i, f, w):
        return med.get((i, f, w))

    def fmt(x):
        return "-" if x is None else f"{x:.1f}"

    def ratio(a, b):
        return "-" if a is None or not b else f"{a / b:.2f}"

    print("batches/s, medians (runs counted)")
    print("| fill | W | clpin threads | clpin processes | DataLoader | bare processes "
          "| processes / DataLoader | processes / bare | best / max(DataLoader, threads) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for f in fills:
        for w in ws:
            t, p, d, b = (g(i, f, w) for i in impls)
            best = max(x for x in (t, p) if x is not None) if (t or p) else None
            ref = max([x for x in (d, t) if x is not None], default=None)
            n = min([cnt.get((i, f, w), 0) for i in impls if (i, f, w) in cnt], default=0)
            print(f"| {f} | {w} | {fmt(t)} | {fmt(p)} | {fmt(d)} | {fmt(b)} | {ratio(p, d)} "
                  f"| {ratio(p, b)} | {ratio(best, ref)} | ({n} runs)")
    print()
    if cpus:
        print("CPU ms a batch, medians: parent (every thread) / workers (all of them) "
              "(of which kernel); bare: the fill alone")
        print("| fill | W | " + " | ".join(impls) + " |")
        print("|---|---|" + "---|" * len(impls))
        for f in fills:
            for w in ws:
                cells = []
                for i in impls:
                    v = cpus.get((i, f, w))
                    cells.append("-" if not v else
                                 f"{statistics.median(a for a, _, _ in v):.2f} / "
                                 f"{statistics.median(b for _, b, _ in v):.2f} "
                                 f"({statistics.median(c for _, _, c in v):.2f})")
                print(f"| {f} | {w} | " + " | ".join(cells) + " |")
        print()
    wmax = max(ws)
    checks = []  # (name, a, b, target): the ratio of medians a / b, and per run

    def best_of(f, w, names):
        have = [(g(i, f, w), i) for i in names if g(i, f, w) is not None]
        return max(have)[1] if have else None

    for f in ("python", "jpeg"):
        if g("clpin-process", f, wmax) is not None and g("torch", f, wmax):
            checks.append((f"{f} W={wmax} processes >= 1.0x DataLoader",
                           ("clpin-process", f, wmax), ("torch", f, wmax), 1.0))
        if g("clpin-process", f, wmax) is not None and g("bare", f, wmax):
            checks.append((f"{f} W={wmax} processes >= 0.85x bare",
                           ("clpin-process", f, wmax), ("bare", f, wmax), 0.85))
    best = best_of("numpy", wmax, ("clpin-thread", "clpin-process"))
    if best and g("torch", "numpy", wmax):
        checks.append((f"numpy W={wmax} best method >= 3x DataLoader", (best, "numpy", wmax),
                       ("torch", "numpy", wmax), 3.0))
    for f in fills:
        for w in ws:
            best = best_of(f, w, ("clpin-thread", "clpin-process"))
            ref = best_of(f, w, ("clpin-thread", "torch"))
            if best and ref and g("torch", f, w) is not None:
                checks.append((f"{f} W={w} best >= max(DataLoader, threads)", (best, f, w),
                               (ref, f, w), 1.0))
    for name, a, b, target in checks:
        r = med[a] / med[b]
        pairs = sorted(runs[a][k] / runs[b][k] for k in runs[a].keys() & runs[b].keys())
        spread = (f", runs {pairs[0]:.2f}-{pairs[-1]:.2f}, held in "
                  f"{pybench.held(pairs, target)} of {len(pairs)}") if pairs else ""
        print(f"TARGET {'met ' if r >= target else 'MISSED'} {name}: {r:.2f}{spread}")


# ------------------------------------------------------------------ main


def main() -> None:
    global FILLS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impl", choices=["clpin", "torch", "bare"])
    ap.add_argument("--fills", default="python,jpeg,numpy")
    ap.add_argument("--workers", default="1,4,8,16")
    ap.add_argument("--methods", default="thread,process")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warm-epochs", type=int, default=1, help="whole epochs before the timed ones")
    ap.add_argument("--per-worker", type=int, default=16,
                    help="batches an epoch per worker (N = this x W)")
    ap.add_argument("--quick", action="store_true", help="tiny batches (a CPU check)")
    ap.add_argument("--summary", nargs="+", metavar="LOG")
    args = ap.parse_args()
    if args.summary:
        summary(args.summary)
        return
    if not args.impl:
        ap.error("--impl or --summary")
    fills = args.fills.split(",")
    for f in fills:
        if f not in FULL:
            ap.error(f"unknown fill {f!r}")
    FILLS = Fills(args.quick)
    {"clpin": run_clpin, "torch": run_torch, "bare": run_bare}[args.impl](
        args, fills, [int(w) for w in args.workers.split(",")])


if __name__ == "__main__":
    main()
