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
        [--impl both|clpin|baseline] [--platform NAME] [--split] [--tag PREFIX]
    python3 bench/dataset_bench.py --summary LOG...     (logs of other runs)
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time

import numpy as np

import pybench

# case: (batch size, batches an epoch at --scale 1, target of clpin / baseline)
CASES = {"python": (64, 96, 1.1), "jpeg": (64, 8, 1.0), "numpy": (64, 8, 1.5),
         "fields": (64, 64, 0.95)}
QUICK = {"python": (8, 8, 1.1), "jpeg": (8, 4, 1.0), "numpy": (8, 6, 1.5), "fields": (8, 6, 0.95)}
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)


# ------------------------------------------------------------------ datasets


class Tokens:
    """Per-sample Python: sample i is (`words` token ids, its label)."""

    def __init__(self, n: int, words: int = 512, sentences: int = 1024) -> None:
        rng = np.random.default_rng(39)
        vocab = [f"Word{i}" for i in range(30000)]
        self.vocab = {w.lower(): i for i, w in enumerate(vocab)}
        picks = rng.integers(0, len(vocab) + 2000, (sentences, words))
        self.corpus = [[vocab[k] + "," if k < len(vocab) else f"oov{k}" for k in row]
                       for row in picks.tolist()]
        self.n = n

    def __len__(self) -> int:
        return self.n

    def ids(self, i: int) -> list:
        """The token ids of sentence i: dict lookups, a hashed fallback."""
        vocab, unk = self.vocab, len(self.vocab)
        return [vocab.get(w.lower().strip(".,"), unk + hash(w) % 1000)
                for w in self.corpus[i % len(self.corpus)]]

    def __getitem__(self, i: int):
        return np.array(self.ids(i), np.int64), i % 10


class Jpegs:
    """JPEG decode + augment: sample i is (3 x crop x crop float32, label)."""

    def __init__(self, n: int, side: int = 256, crop: int = 224, count: int = 32) -> None:
        from PIL import Image

        rng = np.random.default_rng(7)
        yy, xx = np.mgrid[0:side, 0:side]
        self.jpegs = []
        for k in range(count):
            img = np.stack([(xx * (k + 1) + yy) % 256, (yy * 3 + k * 7) % 256,
                            rng.integers(0, 256, (side, side))], -1).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="JPEG", quality=90)
            self.jpegs.append(buf.getvalue())
        self.n, self.crop = n, crop

    def __len__(self) -> int:
        return self.n

    def image(self, k: int) -> np.ndarray:
        """JPEG k decoded, randomly cropped and flipped, normalised."""
        from PIL import Image

        img = Image.open(io.BytesIO(self.jpegs[k % len(self.jpegs)])).convert("RGB")
        c = self.crop
        x, y = np.random.randint(0, img.size[0] - c + 1), np.random.randint(0, img.size[1] - c + 1)
        img = img.crop((x, y, x + c, y + c))
        if np.random.rand() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        a = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / np.float32(255)
        return (a - MEAN) / STD

    def __getitem__(self, i: int):
        return self.image(i), i % 1000


class Vectors:
    """Vectorised numpy: sample i is (`floats` float32, label)."""

    def __init__(self, n: int, floats: int) -> None:
        self.base = np.random.default_rng(3).random(floats, dtype=np.float32)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def scaled(self, i: int, out: np.ndarray | None = None) -> np.ndarray:
        """Two passes over the floats (the GIL released), into out or a new
        array."""
        out = np.multiply(self.base, np.float32(1.0001), out=out)
        np.add(out, np.float32(i), out=out)
        return out

    def __getitem__(self, i: int):
        return self.scaled(i), i


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


# ------------------------------------------------------------------ columns


def epoch(loader, n: int, finish, upload=None):
    """One epoch of loader, each batch uploaded (when upload is given), then
    finish() (the device done), as a function to time."""
    def run():
        got = 0
        for batch in loader:
            if upload is not None:
                _ = upload(batch)
            got += 1
        finish()
        assert got == n, (got, n)
    return run


class Clpin:
    """clpin's side: the OpenCL queue and the loaders."""

    def __init__(self, platform: str) -> None:
        import pyopencl as cl

        import clpin

        self.clpin = clpin
        dev = pybench.cl_device(platform)
        self.queue = cl.CommandQueue(cl.Context([dev]))
        self.name = pybench.describe(dev)


class Baseline:
    """DataLoader and the upload its user writes: CUDA where torch has it,
    else pyopencl's to_device (on `queue`)."""

    def __init__(self, queue) -> None:
        import torch
        from torch.utils.data import DataLoader

        self.torch, self.DataLoader = torch, DataLoader
        self.cuda = torch.cuda.is_available()
        if self.cuda:
            self.upload = lambda batch: [t.to("cuda", non_blocking=True) for t in batch]
            self.finish = torch.cuda.synchronize
            self.upload_name = (f'pin_memory=True + .to("cuda", non_blocking=True) on '
                                f"{torch.cuda.get_device_name(0)}")
        elif queue is not None:
            import pyopencl.array as cl_array

            self.upload = lambda batch: [cl_array.to_device(queue, t.numpy()) for t in batch]
            self.finish = queue.finish
            self.upload_name = (f"pin_memory=False + pyopencl.array.to_device(queue, t.numpy()) "
                                f"on {pybench.describe(queue.device)}")
        else:
            raise RuntimeError("torch has no CUDA and pyopencl is not importable: no upload "
                               "to compare with")

    def loader(self, ds, bs: int, w: int):
        return self.DataLoader(ds, batch_size=bs, num_workers=w, pin_memory=self.cuda,
                               persistent_workers=True)


def child(args) -> None:
    """One process: every case, --runs timed epochs of each column."""
    table = QUICK if args.quick else CASES
    w = args.workers
    have_cl = True
    try:
        import pyopencl  # noqa: F401
    except ImportError as exc:
        have_cl = False
        print(f"NOTE clpin: pyopencl not importable under {sys.executable} ({exc}): "
              "the clpin side and the fields case do not run here", flush=True)
    side = None
    if have_cl and args.impl in ("both", "clpin"):
        side = Clpin(args.platform)
        print(f"DEVICE clpin: {side.name}, clpin {side.clpin.version()}, {pybench.PYTHON}, "
              f"{os.cpu_count()} cores", flush=True)
    base = None
    if args.impl in ("both", "baseline"):
        try:
            queue = side.queue if side else (Clpin(args.platform).queue if have_cl else None)
            base = Baseline(queue)
            print(f"BASELINE: torch {base.torch.__version__} DataLoader(num_workers={w}, "
                  f"persistent_workers=True, {base.upload_name}), {pybench.PYTHON}", flush=True)
        except (ImportError, RuntimeError) as exc:
            print(f"NOTE baseline: does not run under {sys.executable} ({exc})", flush=True)
    for case in args.cases.split(","):
        bs, n, _ = table[case]
        n = max(2, int(n * args.scale))
        cols = []  # (impl, loader, epoch, worker pids)
        if case == "fields":
            if side is None:
                continue
            image = (bs, 3, 56, 56) if args.quick else (bs, 3, 224, 224)
            nbytes = int(np.prod(image)) * 4 + bs * 8
            fl = side.clpin.Loader(side.queue, FieldsFill(image), batches=n, workers=w,
                                   fields={"image": (image, np.float32), "label": ((bs,), np.int64)})
            one = side.clpin.Loader(side.queue, FlatFill(image), (nbytes,), np.uint8, batches=n,
                                    workers=w)
            cols = [(impl, ld, epoch(ld, n, side.queue.finish))
                    for impl, ld in (("fields", fl), ("one-array", one))]
        else:
            if case == "jpeg":
                try:
                    import PIL  # noqa: F401
                except ImportError as exc:
                    print(f"NOTE jpeg: PIL not importable ({exc}): skipped", flush=True)
                    continue
            ds = dataset(case, n * bs, bs, args.quick)
            if side is not None:
                ld = side.clpin.DatasetLoader(side.queue, ds, bs, workers=w)
                cols.append(("clpin", ld, epoch(ld, n, side.queue.finish)))
            if base is not None:
                dl = base.loader(ds, bs, w)
                cols.append(("baseline", dl, epoch(dl, n, base.finish, base.upload)))
                if args.split:  # the DataLoader alone: what the upload adds
                    cols.append(("dataloader", dl, epoch(dl, n, lambda: None)))
        for _, _, run in cols:  # warm: workers started, their data touched
            run()
        pids = {impl: ([p.pid for p in getattr(ld._iterator, "_workers", [])]
                       if impl in ("baseline", "dataloader") else [p for p in ld.worker_pids if p])
                for impl, ld, _ in cols}
        for r in range(args.runs):
            for impl, _, run in (cols if r % 2 == 0 else cols[::-1]):
                c0, t0 = pybench.cpu_now(pids[impl]), time.perf_counter()
                run()
                secs, cpu = time.perf_counter() - t0, pybench.cpu_now(pids[impl]) - c0
                pybench.emit("RESULT", proc=args.child, impl=impl, case=case, W=w, run=r,
                             batches=n, secs=f"{secs:.4f}", bps=f"{n / secs:.3f}",
                             cpu_ms=f"{1e3 * cpu / n:.2f}")
        for impl, ld, _ in cols:
            if impl not in ("baseline", "dataloader"):
                ld.close()
        del cols


# ------------------------------------------------------------------ summary


def summary(lines: list, quick: bool = False) -> None:
    data: dict = {}  # (case, impl) -> {(proc, run): (bps, cpu_ms)}
    ws: dict = {}
    for r in pybench.records(lines):
        data.setdefault((r["case"], r["impl"]), {})[(r["proc"], int(r["run"]))] = (
            float(r["bps"]), float(r["cpu_ms"]))
        ws[r["case"]] = int(r["W"])
    if not data:
        print("no RESULT lines")
        return
    table = QUICK if quick else CASES
    print("\nmedian (min-max) over every run of every process; per process: its median")
    print("| case | W | column | runs | batches/s | per process | CPU ms a batch |")
    print("|---|---|---|---|---|---|---|")
    for case in [c for c in table if any(k[0] == c for k in data)]:
        for impl in ("clpin", "baseline", "dataloader", "fields", "one-array"):
            d = data.get((case, impl))
            if not d:
                continue
            per = ", ".join(f"{statistics.median(v[0] for (p, _), v in d.items() if p == q):.2f}"
                            for q in sorted({p for p, _ in d}))
            print(f"| {case} | {ws[case]} | {impl} | {len(d)} | "
                  f"{pybench.spread(v[0] for v in d.values())} | {per} | "
                  f"{pybench.spread((v[1] for v in d.values()), '.1f')} |")
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
        med = statistics.median(ratios)
        cpu_text = f"; CPU a batch {a} / {b}: median {statistics.median(cpu):.2f}" if cpu else ""
        print(f"TARGET {'met   ' if med >= target else 'MISSED'} {case} W={ws[case]} {a} / {b} "
              f">= {target}x: median {med:.2f}, runs {min(ratios):.2f}-{max(ratios):.2f}, "
              f"held in {pybench.held(ratios, target)} of {len(ratios)}{cpu_text}")
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
                    help="OpenCL platform or device name (default: $DEVICE, else any; "
                         "a GPU first)")
    ap.add_argument("--quick", action="store_true", help="tiny batches: the path, not the speed")
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
    load = lambda: " ".join(f"{x:.2f}" for x in os.getloadavg())  # noqa: E731
    print(f"dataset_bench: {os.cpu_count()} cores, load average {load()}, W={args.workers}, "
          f"{args.runs} runs x {args.procs} processes, {pybench.PYTHON} ({sys.executable})",
          flush=True)
    lines = []
    status = 0
    for p in range(1, args.procs + 1):
        argv = ["--child", f"{args.tag}{p}"] + pybench.argv_of(
            args, ("runs", "workers", "cases", "scale", "impl", "platform", "quick", "split"))
        print(f"=== process {p}: {os.path.abspath(__file__)} {' '.join(argv)}", flush=True)
        rc, out = pybench.rerun(__file__, argv)
        lines += out
        if rc:
            print(f"=== process {p} exited {rc}", flush=True)
            status = 1
    summary(lines, args.quick)
    print(f"\ndataset_bench: {time.perf_counter() - t0:.0f} s, load average now {load()}")
    return status


if __name__ == "__main__":
    sys.exit(main())
