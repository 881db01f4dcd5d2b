#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""clpin.DatasetLoader against torch.utils.data.DataLoader on the SAME
map-style Dataset class, and Loader(fields=) against the one-array Loader:
batches per second and CPU seconds per batch.

Datasets (module-level classes; each sample is (data, int64 label)):

- python: per-sample Python: 512 token ids (int64) from dict lookups
  (lower-casing, stripping, a vocabulary dict, a hashed fallback), batch 64;
- jpeg:   PIL decode of a 256 x 256 JPEG (made in memory at start) + random
  crop to 224 + random flip + normalise: 3 x 224 x 224 float32, batch 64;
- numpy:  vectorised numpy, 512 KiB of float32 a sample, batch 64 (32 MiB).

Columns, each with W worker processes:

- clpin:    clpin.DatasetLoader(queue, ds, 64, workers=W) (processes,
            fork): the workers write every sample into its rows of a
            pinned slot, clpin uploads it;
- baseline: DataLoader(ds, 64, num_workers=W, persistent_workers=True,
            pin_memory=<True on CUDA, else False>) and then the upload its
            user writes today: with CUDA, ``t.to("cuda", non_blocking=True)``
            of each collated tensor; without, pyopencl
            ``cl_array.to_device(queue, t.numpy())`` of each.
- dataloader (--split): the baseline's DataLoader alone, no upload: what
            the upload adds to the baseline;
- fields:   clpin.Loader(fields={"image": ..., "label": ...}) against
            clpin.Loader(shape, dtype) over the same bytes (uint8), both
            filled by one vectorised numpy fill, W processes.

Each case: both loaders made and one epoch of each run to warm (workers
started, their data touched), then --runs timed epochs of N batches each,
alternating which goes first; an epoch is timed from its first step to its
last batch with the device finished. CPU: this process (every thread) plus
the column's worker processes (/proc/PID/stat), over the epoch.

The script re-runs itself in --procs separate processes (--child) and
prints every RESULT line, then the summary: per case the medians (min-max)
of batches/s and CPU ms a batch over every run of every process, each
process's median, the ratio clpin / baseline per run and in how many runs
the target held.

    python3 bench/dataset_bench.py [--procs 2] [--runs 5] [--workers 2]
        [--cases python,jpeg,numpy,fields] [--scale 1] [--quick]
        [--impl both|clpin|baseline] [--platform NAME] [--split]
    python3 bench/dataset_bench.py --summary LOG...     (logs of other runs)
"""

from __future__ import annotations

import argparse
import io
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

# case: (batch size, batches an epoch at --scale 1, target of clpin / baseline)
CASES = {"python": (64, 96, 1.1), "jpeg": (64, 8, 1.0), "numpy": (64, 8, 1.5),
         "fields": (64, 64, 0.95)}
QUICK = {"python": (8, 8, 1.1), "jpeg": (8, 4, 1.0), "numpy": (8, 6, 1.5), "fields": (8, 6, 0.95)}
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)


# ------------------------------------------------------------------ datasets


class Tokens:
    """Per-sample Python: sample i is (512 token ids, its label)."""

    def __init__(self, n: int, words: int = 512) -> None:
        rng = np.random.default_rng(39)
        vocab = [f"Word{i}" for i in range(30000)]
        self.vocab = {w.lower(): i for i, w in enumerate(vocab)}
        picks = rng.integers(0, len(vocab) + 2000, (1024, words))
        self.corpus = [[vocab[k] + "," if k < len(vocab) else f"oov{k}" for k in row]
                       for row in picks.tolist()]
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        vocab, unk = self.vocab, len(self.vocab)
        ids = [vocab.get(w.lower().strip(".,"), unk + hash(w) % 1000)
               for w in self.corpus[i % len(self.corpus)]]
        return np.array(ids, np.int64), i % 10


class Jpegs:
    """JPEG decode + augment: sample i is (3 x crop x crop float32, label)."""

    def __init__(self, n: int, side: int = 256, crop: int = 224) -> None:
        from PIL import Image

        rng = np.random.default_rng(7)
        yy, xx = np.mgrid[0:side, 0:side]
        self.jpegs = []
        for k in range(32):
            img = np.stack([(xx * (k + 1) + yy) % 256, (yy * 3 + k * 7) % 256,
                            rng.integers(0, 256, (side, side))], -1).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="JPEG", quality=90)
            self.jpegs.append(buf.getvalue())
        self.n, self.crop = n, crop

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        from PIL import Image

        img = Image.open(io.BytesIO(self.jpegs[i % len(self.jpegs)])).convert("RGB")
        c = self.crop
        x, y = np.random.randint(0, img.size[0] - c + 1), np.random.randint(0, img.size[1] - c + 1)
        img = img.crop((x, y, x + c, y + c))
        if np.random.rand() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        a = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / np.float32(255)
        return (a - MEAN) / STD, i % 1000


class Vectors:
    """Vectorised numpy: sample i is (`floats` float32, label)."""

    def __init__(self, n: int, floats: int) -> None:
        self.base = np.random.default_rng(3).random(floats, dtype=np.float32)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        x = self.base * np.float32(1.0001)
        x += np.float32(i)
        return x, i


class FieldsFill:
    """Loader(fields=) fill: an image field and a label field."""

    def __init__(self, image: tuple) -> None:
        self.base = np.random.default_rng(5).random(image, dtype=np.float32)

    def __call__(self, out: dict, index: int) -> None:
        np.add(self.base, np.float32(index), out=out["image"])
        out["label"][:] = np.arange(index, index + len(out["label"]))


class FlatFill(FieldsFill):
    """The same bytes through one uint8 array (the 0.3 loader)."""

    def __call__(self, out: np.ndarray, index: int) -> None:
        nbytes = self.base.nbytes
        image = out[:nbytes].view(np.float32).reshape(self.base.shape)
        label = out[nbytes:].view(np.int64)
        np.add(self.base, np.float32(index), out=image)
        label[:] = np.arange(index, index + len(label))


def dataset(case: str, n: int, bs: int, quick: bool):
    if case == "python":
        return Tokens(n, 64 if quick else 512)
    if case == "jpeg":
        return Jpegs(n, 72, 56) if quick else Jpegs(n)
    return Vectors(n, ((1 << 20) if quick else (32 << 20)) // 4 // bs)


# ------------------------------------------------------------------ measuring

_HZ = os.sysconf("SC_CLK_TCK")


def ticks(pid: int) -> int:
    """utime + stime of process pid in clock ticks (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def cpu_now(pids: list) -> float:
    """CPU seconds so far of this process (every thread) and of pids."""
    t = os.times()
    return t.user + t.system + sum(ticks(p) for p in pids) / _HZ


def timed(run_epoch, pids: list) -> tuple:
    """(seconds, CPU seconds) of one epoch."""
    c0, t0 = cpu_now(pids), time.perf_counter()
    run_epoch()
    secs = time.perf_counter() - t0
    return secs, cpu_now(pids) - c0


def result(proc: str, impl: str, case: str, w: int, run: int, n: int, secs: float,
           cpu: float) -> None:
    print(f"RESULT proc={proc} impl={impl} case={case} W={w} run={run} batches={n} "
          f"secs={secs:.4f} bps={n / secs:.3f} cpu_ms={1e3 * cpu / n:.2f}", flush=True)


# ------------------------------------------------------------------ columns


class Clpin:
    """clpin's side: the OpenCL queue and the loaders."""

    def __init__(self, platform: str) -> None:
        import pyopencl as cl

        import clpin

        self.cl, self.clpin = cl, clpin
        plats = [p for p in cl.get_platforms() if not platform or platform in p.name
                 or any(platform in d.name for d in p.get_devices())]
        if not plats:
            raise SystemExit(f"no OpenCL platform matches {platform!r}; have "
                             f"{[p.name for p in cl.get_platforms()]}")
        gpus = [d for p in plats for d in p.get_devices() if d.type & cl.device_type.GPU]
        dev = (gpus or plats[0].get_devices())[0]
        self.queue = cl.CommandQueue(cl.Context([dev]))
        self.name = f"{dev.name.strip()} ({dev.platform.name.strip()})"

    def dataset_loader(self, ds, bs: int, w: int, depth: int = 2):
        return self.clpin.DatasetLoader(self.queue, ds, bs, workers=w, depth=depth)

    def epoch(self, loader, n: int):
        def run():
            got = 0
            for _ in loader:
                got += 1
            self.queue.finish()
            assert got == n, (got, n)
        return run


class Baseline:
    """DataLoader and the upload its user writes: CUDA where torch has it,
    else pyopencl's to_device (on `queue`)."""

    def __init__(self, queue) -> None:
        import torch
        from torch.utils.data import DataLoader

        self.torch, self.DataLoader = torch, DataLoader
        self.cuda = torch.cuda.is_available()
        self.queue = queue
        if self.cuda:
            self.upload_name = (f'pin_memory=True + .to("cuda", non_blocking=True) on '
                                f"{torch.cuda.get_device_name(0)}")
        elif queue is not None:
            import pyopencl.array as cl_array

            self.to_device = cl_array.to_device
            self.upload_name = (f"pin_memory=False + pyopencl.array.to_device(queue, t.numpy()) "
                                f"on {queue.device.name.strip()} "
                                f"({queue.device.platform.name.strip()})")
        else:
            raise RuntimeError("torch has no CUDA and pyopencl is not importable: no upload "
                               "to compare with")

    def loader(self, ds, bs: int, w: int):
        dl = self.DataLoader(ds, batch_size=bs, num_workers=w, pin_memory=self.cuda,
                             persistent_workers=True)
        return dl

    def epoch(self, dl, n: int, upload: bool = True):
        torch = self.torch

        def run():
            got = 0
            if not upload:
                for _ in dl:
                    got += 1
            elif self.cuda:
                for batch in dl:
                    _ = [t.to("cuda", non_blocking=True) for t in batch]
                    got += 1
                torch.cuda.synchronize()
            else:
                for batch in dl:
                    _ = [self.to_device(self.queue, t.numpy()) for t in batch]
                    got += 1
                self.queue.finish()
            assert got == n, (got, n)
        return run

    @staticmethod
    def pids(dl) -> list:
        return [p.pid for p in getattr(dl._iterator, "_workers", [])]


def child(args) -> None:
    """One process: every case, --runs timed epochs of each column."""
    proc = args.child
    table = QUICK if args.quick else CASES
    cases = args.cases.split(",")
    w = args.workers
    have_cl = True
    try:
        import pyopencl  # noqa: F401
    except ImportError as exc:
        have_cl = False
        print(f"NOTE clpin: pyopencl not importable under {sys.executable} ({exc}): "
              "the clpin side and the fields case do not run here", flush=True)
    if args.queue:  # an experiment: tasks queued per worker process (clpin's default 2)
        import clpin._workers

        clpin._workers.QUEUE = args.queue
    side = None
    if have_cl and args.impl in ("both", "clpin"):
        side = Clpin(args.platform)
        import clpin

        print(f"DEVICE clpin: {side.name}, clpin {clpin.version()}, python "
              f"{sys.version.split()[0]}, {os.cpu_count()} cores", flush=True)
    base = None
    if args.impl in ("both", "baseline"):
        try:
            queue = side.queue if side else (Clpin(args.platform).queue if have_cl else None)
            base = Baseline(queue)
            print(f"BASELINE: torch {base.torch.__version__} DataLoader(num_workers={w}, "
                  f"persistent_workers=True, {base.upload_name}), python "
                  f"{sys.version.split()[0]}", flush=True)
        except (ImportError, RuntimeError) as exc:
            print(f"NOTE baseline: does not run under {sys.executable} ({exc})", flush=True)
    for case in cases:
        bs, n, _ = table[case]
        n = max(2, int(n * args.scale))
        cols = []  # (impl, loader, epoch, pids)
        if case == "fields":
            if side is None:
                continue
            image = (bs, 3, 56, 56) if args.quick else (bs, 3, 224, 224)
            nbytes = int(np.prod(image)) * 4 + bs * 8
            fl = side.clpin.Loader(side.queue, FieldsFill(image), batches=n, workers=w,
                                   fields={"image": (image, np.float32), "label": ((bs,), np.int64)})
            one = side.clpin.Loader(side.queue, FlatFill(image), (nbytes,), np.uint8, batches=n,
                                    workers=w)
            cols = [("fields", fl, side.epoch(fl, n)), ("one-array", one, side.epoch(one, n))]
        else:
            if case == "jpeg":
                try:
                    import PIL  # noqa: F401
                except ImportError as exc:
                    print(f"NOTE jpeg: PIL not importable ({exc}): skipped", flush=True)
                    continue
            ds = dataset(case, n * bs, bs, args.quick)
            if side is not None:
                ld = side.dataset_loader(ds, bs, w, args.depth)
                cols.append(("clpin", ld, side.epoch(ld, n)))
            if base is not None:
                dl = base.loader(ds, bs, w)
                cols.append(("baseline", dl, base.epoch(dl, n)))
                if args.split:  # the DataLoader alone: what the upload adds
                    cols.append(("dataloader", dl, base.epoch(dl, n, upload=False)))
        for _, _, run in cols:  # warm: workers started, their data touched
            run()
        pids = {impl: (Baseline.pids(ld) if impl in ("baseline", "dataloader") else ld.worker_pids)
                for impl, ld, _ in cols}
        for r in range(args.runs):
            order = cols if r % 2 == 0 else cols[::-1]
            for impl, _, run in order:
                secs, cpu = timed(run, [p for p in pids[impl] if p])
                result(proc, impl, case, w, r, n, secs, cpu)
        for impl, ld, _ in cols:
            if impl not in ("baseline", "dataloader"):
                ld.close()
        del cols


# ------------------------------------------------------------------ summary

LINE = re.compile(r"RESULT proc=(\S+) impl=(\S+) case=(\S+) W=(\d+) run=(\d+) batches=\d+ "
                  r"secs=\S+ bps=(\S+) cpu_ms=(\S+)")


def summary(lines: list, quick: bool = False) -> None:
    data: dict = {}  # (case, impl) -> {(proc, run): (bps, cpu_ms)}
    ws: dict = {}
    for line in lines:
        m = LINE.search(line)
        if m:
            data.setdefault((m[3], m[2]), {})[(m[1], int(m[5]))] = (float(m[6]), float(m[7]))
            ws[m[3]] = int(m[4])
    if not data:
        print("no RESULT lines")
        return
    table = QUICK if quick else CASES

    def spread(v: list, f: str = ".2f") -> str:
        return f"{statistics.median(v):{f}} ({min(v):{f}}-{max(v):{f}})"

    print("\nmedian (min-max) over every run of every process; per process: its median")
    print("| case | W | column | runs | batches/s | per process | CPU ms a batch |")
    print("|---|---|---|---|---|---|---|")
    for case in [c for c in table if any(k[0] == c for k in data)]:
        for impl in ("clpin", "baseline", "dataloader", "fields", "one-array"):
            d = data.get((case, impl))
            if not d:
                continue
            procs = sorted({p for p, _ in d})
            per = ", ".join(f"{statistics.median(v[0] for (p, _), v in d.items() if p == q):.2f}"
                            for q in procs)
            print(f"| {case} | {ws[case]} | {impl} | {len(d)} | "
                  f"{spread([v[0] for v in d.values()])} | {per} | "
                  f"{spread([v[1] for v in d.values()], '.1f')} |")
    print()
    for case, (_, _, target) in table.items():
        a, b = ("fields", "one-array") if case == "fields" else ("clpin", "baseline")
        da, db = data.get((case, a)), data.get((case, b))
        if not da or not db:
            continue
        keys = sorted(da.keys() & db.keys())
        ratios = [da[k][0] / db[k][0] for k in keys]
        cpu = [da[k][1] / db[k][1] for k in keys if db[k][1] > 0]
        if not ratios:
            continue
        held = sum(1 for r in ratios if r >= target)
        med = statistics.median(ratios)
        cpu_text = f"; CPU a batch {a} / {b}: median {statistics.median(cpu):.2f}" if cpu else ""
        print(f"TARGET {'met   ' if med >= target else 'MISSED'} {case} W={ws[case]} {a} / {b} "
              f">= {target}x: median {med:.2f}, runs {min(ratios):.2f}-{max(ratios):.2f}, "
              f"held in {held} of {len(ratios)}{cpu_text}")
        print("  per run: " + " ".join(f"{p}.{r}={x:.2f}" for (p, r), x in zip(keys, ratios)))


# ------------------------------------------------------------------ main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=2, help="separate processes, one after another")
    ap.add_argument("--runs", type=int, default=5, help="timed epochs a column, a process")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cases", default="python,jpeg,numpy,fields")
    ap.add_argument("--scale", type=float, default=1.0, help="batches an epoch x this")
    ap.add_argument("--impl", default="both", choices=["both", "clpin", "baseline"])
    ap.add_argument("--platform", default=os.environ.get("DEVICE", ""),
                    help="OpenCL platform or device name (default: $DEVICE, else the first; "
                         "a GPU first)")
    ap.add_argument("--quick", action="store_true", help="tiny batches: the path, not the speed")
    ap.add_argument("--depth", type=int, default=2, help="DatasetLoader's depth (an experiment)")
    ap.add_argument("--queue", type=int, default=0,
                    help="tasks queued per worker process (an experiment; 0: clpin's own)")
    ap.add_argument("--split", action="store_true",
                    help="a third column: the baseline's DataLoader alone, without the upload")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--tag", default="", help="a prefix of the process names (several logs)")
    ap.add_argument("--summary", nargs="+", metavar="LOG")
    args = ap.parse_args()
    for c in args.cases.split(","):
        if c not in CASES:
            ap.error(f"unknown case {c!r} (have {', '.join(CASES)})")
    if args.summary:
        lines = []
        for path in args.summary:
            with open(path) as f:
                lines += f.readlines()
        summary(lines, args.quick)
        return 0
    if args.child:
        child(args)
        return 0
    t0 = time.perf_counter()
    print(f"dataset_bench: {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, W={args.workers}, {args.runs} runs "
          f"x {args.procs} processes, python {sys.version.split()[0]} ({sys.executable})",
          flush=True)
    lines = []
    status = 0
    for p in range(1, args.procs + 1):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", f"{args.tag}{p}"]
        for k in ("runs", "workers", "cases", "scale", "impl", "platform", "depth", "queue"):
            cmd += [f"--{k}", str(getattr(args, k))]
        for k in ("quick", "split"):
            if getattr(args, k):
                cmd.append(f"--{k}")
        print(f"=== process {p}: {' '.join(cmd[1:])}", flush=True)
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
            for line in proc.stdout:
                print(line, end="", flush=True)
                lines.append(line)
        if proc.returncode:
            print(f"=== process {p} exited {proc.returncode}", flush=True)
            status = 1
    summary(lines, args.quick)
    print(f"\ndataset_bench: {time.perf_counter() - t0:.0f} s, load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return status


if __name__ == "__main__":
    sys.exit(main())
