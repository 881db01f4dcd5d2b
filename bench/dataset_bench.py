#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""clpin's Python loaders against torch.utils.data.DataLoader with the same
fills: batches per second and CPU seconds per batch, in two modes.

The fills (one sample's code serves both modes: in --mode fills a batch
fill runs it for each row of the batch, numpy's once over the batch):

- python: per-sample Python: 512 token ids (int64) from dict lookups
  (lower-casing, stripping, a vocabulary dict, a hashed fallback), batch 64;
- jpeg:   PIL decode of a 256 x 256 JPEG (made in memory at start) + random
  crop to 224 + random flip + normalise: 3 x 224 x 224 float32, batch 64;
- numpy:  vectorised numpy, two passes (the GIL released): 512 KiB of
  float32 a sample, batch 64 (32 MiB); --mode fills: 32 MiB a batch.

--mode datasets (the default): each sample is (data, int64 label) from a
map-style Dataset class (module level, the SAME object on both sides);
columns, each with W worker processes:

- clpin:    clpin.DatasetLoader(queue, ds, 64, workers=W) (processes,
            fork): the workers write every sample into its rows of a
            pinned slot, clpin uploads it;
- baseline: DataLoader(ds, 64, num_workers=W, persistent_workers=True,
            pin_memory=<True on CUDA, else False>) and then the upload its
            user writes today: with CUDA, ``t.to("cuda", non_blocking=True)``
            of each collated tensor; without, pyopencl
            ``cl_array.to_device(queue, t.numpy())`` of each;
- dataloader (--split): the baseline's DataLoader alone, no upload: what
            the upload adds to the baseline;
- fields:   case fields: clpin.Loader(fields={"image": ..., "label": ...})
            against clpin.Loader(shape, dtype) over the same bytes (uint8),
            both filled by one vectorised numpy fill.

--mode fills (clpin.Loader's worker processes against its threads; before
commit "bench: workers_bench.py folds into dataset_bench.py --mode fills"
this was bench/workers_bench.py): a fill writes a whole batch, and the
columns are

- clpin-thread, clpin-process: clpin.Loader(fill, worker_method=...,
            workers=W) (--methods);
- baseline: DataLoader over a Dataset whose item is a whole batch
            (batch_size=None, num_workers=W, persistent_workers=True,
            pin_memory on CUDA) + the upload as above;
- bare:     W processes each running the fill on its share of the
            epoch's indices into an array of its own (once to warm, then
            timed from a common start to the last one's end), results
            discarded: the fill's own bound on this host (no loader, no
            transfer).

Each case and W: the columns' loaders made and --warm-epochs epochs of each
run to warm (workers started, their data touched), then --runs timed epochs
of N batches each (datasets: the case's count x --scale; fills: --per-worker
x W, one column at a time), alternating which goes first; an epoch is timed
from its first step to its last batch with the device finished. CPU: this
process (every thread, and by thread name: THREADS lines) plus the column's
worker processes (/proc/PID/stat; their kernel share apart), over the epoch.

The script re-runs itself in --procs separate processes (--child) and
prints every RESULT line, then the summary: per case, W and column the
medians (min-max) of batches/s and CPU ms a batch over every run of every
process, each process's median, and per ratio of two columns the median
of its runs (a run against the same run of the same process), its range,
the ratio of the columns' medians and in how many runs the target held.

    python3 bench/dataset_bench.py [--procs 2] [--runs 5] [--workers 2]
        [--cases python,jpeg,numpy,fields] [--scale 1] [--quick]
        [--impl clpin,baseline] [--platform NAME] [--split] [--tag PREFIX]
    python3 bench/dataset_bench.py --mode fills [--impl clpin,baseline,bare]
        [--cases python,jpeg,numpy] [--workers 1,4,8,16] [--runs 3]
        [--methods thread,process] [--per-worker 16] [--warm-epochs 1] ...
    python3 bench/dataset_bench.py --summary LOG...     (logs of other runs)
"""

from __future__ import annotations

import argparse
import io
import multiprocessing as mp
import os
import re
import statistics
import sys
import time
from types import SimpleNamespace as Column

import numpy as np

import pybench

# case: (batch size, batches an epoch at --scale 1, target of clpin / baseline)
CASES = {"python": (64, 96, 1.1), "jpeg": (64, 8, 1.0), "numpy": (64, 8, 1.5),
         "fields": (64, 64, 0.95)}
QUICK = {"python": (8, 8, 1.1), "jpeg": (8, 4, 1.0), "numpy": (8, 6, 1.5), "fields": (8, 6, 0.95)}
# --mode fills: a batch's shape (full, --quick) and dtype
SHAPES = {"python": ((64, 512), (8, 64)), "jpeg": ((64, 3, 224, 224), (4, 3, 56, 56)),
          "numpy": (((32 << 20) // 4,), ((1 << 20) // 4,))}
DTYPES = {"python": np.int64, "jpeg": np.float32, "numpy": np.float32}
MODES = {"datasets": dict(runs=5, workers="2", cases="python,jpeg,numpy,fields",
                          impl="clpin,baseline"),
         "fills": dict(runs=3, workers="1,4,8,16", cases="python,jpeg,numpy",
                       impl="clpin,baseline,bare")}
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


class Fills:
    """--mode fills: the three batch fills and their data, made once (before
    any fork); a batch is its rows' samples."""

    def __init__(self, quick: bool) -> None:
        self.shapes = {k: v[1 if quick else 0] for k, v in SHAPES.items()}
        self.tokens = Tokens(0, self.shapes["python"][1], sentences=4096)
        self.pil_error = None
        try:
            self.jpegs = Jpegs(0, 72 if quick else 256, self.shapes["jpeg"][2], count=64)
        except ImportError as exc:
            self.pil_error = str(exc)
        self.vectors = Vectors(0, self.shapes["numpy"][0])

    def python(self, out: np.ndarray, index: int) -> None:
        for r in range(out.shape[0]):
            out[r] = self.tokens.ids(index * out.shape[0] + r)

    def jpeg(self, out: np.ndarray, index: int) -> None:
        for r in range(out.shape[0]):
            out[r] = self.jpegs.image(index * 7 + r)

    def numpy(self, out: np.ndarray, index: int) -> None:
        self.vectors.scaled(index, out)


FILLS: Fills = None  # set before any worker is forked (fork: nothing is pickled)


class Batches:
    """--mode fills, the baseline's Dataset: item i is batch i, new each
    time (as a Dataset makes it)."""

    def __init__(self, fill: str, n: int, to_tensor) -> None:
        self.shape, self.dtype, self.fill = FILLS.shapes[fill], DTYPES[fill], getattr(FILLS, fill)
        self.n, self.to_tensor = n, to_tensor

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        out = np.empty(self.shape, self.dtype)
        self.fill(out, index)
        return self.to_tensor(out)


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


def result(proc, impl, case, w, run, n, secs, parent_s, workers_s, workers_sys_s) -> None:
    ms = 1e3 / n
    pybench.emit("RESULT", proc=proc, impl=impl, case=case, W=w, run=run, batches=n,
                 secs=f"{secs:.4f}", bps=f"{n / secs:.3f}",
                 cpu_ms=f"{ms * (parent_s + workers_s):.2f}", parent_ms=f"{ms * parent_s:.3f}",
                 workers_ms=f"{ms * workers_s:.3f}", workers_sys_ms=f"{ms * workers_sys_s:.3f}")


class Meter:
    """One timed epoch's CPU: the parent (every thread, and by thread name)
    and the worker processes pids (and their kernel share)."""

    def __init__(self, pids: list) -> None:
        self.pids = [p for p in pids if p]

    def _now(self) -> tuple:
        t = os.times()
        return (t.user + t.system, sum(pybench.ticks(p) for p in self.pids),
                sum(pybench.ticks(p, sys_only=True) for p in self.pids), _threads())

    def start(self) -> None:
        self.then = self._now()

    def stop(self, proc: str, impl: str, case: str, w: int, run: int, n: int, secs: float) -> None:
        """The RESULT line and the THREADS line (CPU ms a batch by thread
        name: the sum (threads of that name; the busiest one's share)) of
        the epoch since start()."""
        (c0, k0, s0, th0), (c1, k1, s1, th1) = self.then, self._now()
        result(proc, impl, case, w, run, n, secs, c1 - c0, (k1 - k0) / pybench.HZ,
               (s1 - s0) / pybench.HZ)
        by: dict = {}
        for tid, (name, ticks) in th1.items():
            d = ticks - th0.get(tid, (name, 0))[1]
            tot, cnt, top = by.get(name, (0, 0, 0))
            by[name] = (tot + d, cnt + 1, max(top, d))
        ms = 1e3 / pybench.HZ / n
        print(f"THREADS proc={proc} impl={impl} case={case} W={w} run={run} ms_per_batch "
              + " ".join(f"{k}={tot * ms:.3f}(x{cnt},max {top * ms:.3f})"
                         for k, (tot, cnt, top) in sorted(by.items())), flush=True)


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
    """clpin's side: the OpenCL queue and its columns."""

    def __init__(self, platform: str) -> None:
        import pyopencl as cl

        import clpin

        self.clpin = clpin
        dev = pybench.cl_device(platform)
        self.queue = cl.CommandQueue(cl.Context([dev]))
        self.name = pybench.describe(dev)

    def column(self, impl: str, ld, n: int, check: bool = False) -> Column:
        def close():
            if check:  # the fills mode's Loader: its three buffers, no failure
                s = ld.stats()
                assert s["buffers_created"] == 3 and s["failed"] == 0, s
            ld.close()
        return Column(impl=impl, loader=ld, run=epoch(ld, n, self.queue.finish),
                      pids=lambda: ld.worker_pids, close=close)


class Baseline:
    """DataLoader and the upload its user writes: CUDA where torch has it,
    else pyopencl's to_device (on `queue`)."""

    def __init__(self, queue) -> None:
        import torch
        from torch.utils.data import DataLoader

        self.torch, self.DataLoader = torch, DataLoader
        self.cuda = torch.cuda.is_available()
        if self.cuda:
            send = lambda t: t.to("cuda", non_blocking=True)  # noqa: E731
            self.finish = torch.cuda.synchronize
            self.upload_name = (f'pin_memory=True + .to("cuda", non_blocking=True) on '
                                f"{torch.cuda.get_device_name(0)}")
        elif queue is not None:
            import pyopencl.array as cl_array

            send = lambda t: cl_array.to_device(queue, t.numpy())  # noqa: E731
            self.finish = queue.finish
            self.upload_name = (f"pin_memory=False + pyopencl.array.to_device(queue, t.numpy()) "
                                f"on {pybench.describe(queue.device)}")
        else:
            raise RuntimeError("torch has no CUDA and pyopencl is not importable: no upload "
                               "to compare with")
        # each collated tensor (datasets) or the one tensor of a batch (fills)
        self.upload = lambda b: [send(t) for t in (b if isinstance(b, (list, tuple)) else (b,))]

    def column(self, impl: str, ds, n: int, w: int, bs, upload: bool = True, dl=None) -> Column:
        dl = dl or self.DataLoader(ds, batch_size=bs, num_workers=w, pin_memory=self.cuda,
                                   persistent_workers=True)
        run = epoch(dl, n, self.finish, self.upload) if upload else epoch(dl, n, lambda: None)
        return Column(impl=impl, loader=dl, run=run,
                      pids=lambda: [p.pid for p in getattr(dl._iterator, "_workers", [])],
                      close=lambda: None)


def dataset_groups(args, side, base, workers: list):
    """--mode datasets: (case, W, N, columns) in the order they run."""
    table = QUICK if args.quick else CASES
    for case in args.cases.split(","):
        bs, n, _ = table[case]
        n = max(2, int(n * args.scale))
        if case == "jpeg":
            try:
                import PIL  # noqa: F401
            except ImportError as exc:
                print(f"NOTE jpeg: PIL not importable ({exc}): skipped", flush=True)
                continue
        if case == "fields":
            if side is None:
                continue
            image = (bs, 3, 56, 56) if args.quick else (bs, 3, 224, 224)
            nbytes = int(np.prod(image)) * 4 + bs * 8
            for w in workers:
                fl = side.clpin.Loader(side.queue, FieldsFill(image), batches=n, workers=w,
                                       fields={"image": (image, np.float32), "label": ((bs,), np.int64)})
                one = side.clpin.Loader(side.queue, FlatFill(image), (nbytes,), np.uint8,
                                        batches=n, workers=w)
                yield case, w, n, [side.column("fields", fl, n), side.column("one-array", one, n)]
            continue
        ds = dataset(case, n * bs, bs, args.quick)
        for w in workers:
            cols = []
            if side is not None:
                ld = side.clpin.DatasetLoader(side.queue, ds, bs, workers=w)
                cols.append(side.column("clpin", ld, n))
            if base is not None:
                cols.append(base.column("baseline", ds, n, w, bs))
                if args.split:  # the DataLoader alone: what the upload adds
                    cols.append(base.column("dataloader", ds, n, w, bs, False, cols[-1].loader))
            yield case, w, n, cols


def fill_groups(args, side, base, workers: list):
    """--mode fills: (fill, W, N, [one column]) in the order they run."""
    for fill in args.cases.split(","):
        if fill == "jpeg" and FILLS.pil_error:
            print(f"SKIP fill=jpeg: PIL not importable under {sys.executable} ({FILLS.pil_error})")
            continue
        for method in (args.methods.split(",") if side is not None else []):
            for w in workers:
                n = args.per_worker * w
                ld = side.clpin.Loader(side.queue, getattr(FILLS, fill), FILLS.shapes[fill], DTYPES[fill],
                                       batches=n, workers=w, worker_method=method)
                yield fill, w, n, [side.column(f"clpin-{method}", ld, n, check=True)]
        for w in (workers if base is not None else []):
            n = args.per_worker * w
            ds = Batches(fill, n, base.torch.from_numpy)
            yield fill, w, n, [base.column("baseline", ds, n, w, None)]


def _bare_worker(fill: str, start, ends, cpus, k: int, w: int, per: int) -> None:
    out, fill = np.empty(FILLS.shapes[fill], DTYPES[fill]), getattr(FILLS, fill)
    # The indices a loader would give this worker of the epoch, once to warm
    # (copy-on-write of the data the fill touches, as a loader's warm epoch),
    # then timed.
    indices = [k + w * j for j in range(per)]
    for i in indices:
        fill(out, i)
    start.wait()
    c0 = os.times()
    for i in indices:
        fill(out, i)
    ends[k] = time.perf_counter()  # CLOCK_MONOTONIC: one clock for every process
    c1 = os.times()
    cpus[2 * k], cpus[2 * k + 1] = c1.user + c1.system - c0.user - c0.system, c1.system - c0.system


def run_bare(args, workers: list) -> None:
    ctx = mp.get_context("fork")
    print(f"DEVICE bare: no device (the fill alone, {os.cpu_count()} cores)", flush=True)
    for fill in [f for f in args.cases.split(",") if f != "jpeg" or not FILLS.pil_error]:
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
                result(args.child, "bare", fill, w, run, w * per, max(ends) - t0, 0.0,
                       sum(cpus[0::2]), sum(cpus[1::2]))


def child(args) -> None:
    """One process: every case and W, --runs timed epochs of each column."""
    global FILLS
    FILLS = Fills(args.quick) if args.mode == "fills" else None
    impls, workers = args.impl.split(","), [int(w) for w in args.workers.split(",")]
    side = base = None
    if "clpin" in impls:
        try:
            side = Clpin(args.platform)
            print(f"DEVICE clpin: {side.name}, clpin {side.clpin.version()}, {pybench.PYTHON}, "
                  f"{os.cpu_count()} cores", flush=True)
        except ImportError as exc:
            print(f"NOTE clpin: not importable under {sys.executable} ({exc}): its columns and "
                  "the fields case do not run here", flush=True)
    if "baseline" in impls:
        try:
            queue = side.queue if side else Clpin(args.platform).queue
        except ImportError:
            queue = None
        try:
            base = Baseline(queue)
            print(f"BASELINE: torch {base.torch.__version__} DataLoader(persistent_workers=True, "
                  f"{base.upload_name}), {pybench.PYTHON}", flush=True)
        except (ImportError, RuntimeError) as exc:
            print(f"NOTE baseline: does not run under {sys.executable} ({exc})", flush=True)
    groups = fill_groups if args.mode == "fills" else dataset_groups
    for case, w, n, cols in groups(args, side, base, workers):
        for c in cols:  # warm: workers started, their data touched (fills: nothing uploaded)
            for _ in range(args.warm_epochs):
                if args.mode == "fills":
                    for _ in c.loader:
                        pass
                else:
                    c.run()
        meters = [Meter(c.pids()) for c in cols]
        for r in range(args.runs):
            for c, meter in (zip(cols, meters) if r % 2 == 0 else zip(cols[::-1], meters[::-1])):
                meter.start()
                t0 = time.perf_counter()
                c.run()
                meter.stop(args.child, c.impl, case, w, r, n, time.perf_counter() - t0)
        for c in cols:
            c.close()
        cols = c = None  # a DataLoader's workers end with its last reference
    if args.mode == "fills" and "bare" in impls:
        run_bare(args, workers)


# ------------------------------------------------------------------ summary


def summary(logs: list) -> None:
    """logs: (file name, its lines) pairs."""
    data: dict = {}  # (case, W, impl) -> {(proc, run): RESULT fields}
    for path, lines in logs:
        # workers_bench.py's logs (before its fold): fill=, impl=torch, no proc= (the
        # log's folder and pass instead), the CPU on CPU lines of their own
        pm = re.search(r"-(\d+)\.log$", path)
        here = f"{os.path.basename(os.path.dirname(os.path.abspath(path)))}:{pm[1] if pm else 0}"
        for r in pybench.records(lines) + pybench.records(lines, "CPU"):
            key = (r.get("case") or r["fill"], int(r["W"]), "baseline" if r["impl"] == "torch" else r["impl"])
            run = data.setdefault(key, {}).setdefault((r.get("proc") or here, int(r["run"])), {})
            run.update(r)
            if "cpu_ms" not in r and "workers_ms" in r:
                run["cpu_ms"] = float(r["parent_ms"]) + float(r["workers_ms"])
    if not data:
        print("no RESULT lines")
        return

    def col(key, field):
        return [float(r[field]) for r in data.get(key, {}).values() if field in r]

    def med(key):
        return statistics.median(col(key, "bps")) if key in data else None

    impls = ["clpin", "clpin-thread", "clpin-process", "baseline", "dataloader", "bare", "fields",
             "one-array"]
    keys = sorted(data, key=lambda k: (list(CASES).index(k[0]), k[1], impls.index(k[2])))
    print("\nmedian (min-max) over every run of every process; per process: its median; CPU "
          "ms a batch: all, then parent (every thread) / workers (of which kernel)")
    print("| case | W | column | runs | batches/s | per process | CPU ms a batch | parent / workers |")
    print("|---|---|---|---|---|---|---|---|")
    for k in keys:
        d = data[k]
        per = ", ".join(f"{statistics.median(float(r['bps']) for (p, _), r in d.items() if p == q):.2f}"
                        for q in sorted({p for p, _ in d}))
        cpu = pybench.spread(col(k, "cpu_ms"), ".1f") if col(k, "cpu_ms") else "-"
        split = (f"{statistics.median(col(k, 'parent_ms')):.2f} / "
                 f"{statistics.median(col(k, 'workers_ms')):.2f} "
                 f"({statistics.median(col(k, 'workers_sys_ms')):.2f})") if col(k, "parent_ms") else "-"
        print(f"| {k[0]} | {k[1]} | {k[2]} | {len(d)} | {pybench.spread(col(k, 'bps'))} | {per} "
              f"| {cpu} | {split} |")
    print()

    def ratio(a: tuple, b: tuple, target: float | None = None, what: str = "") -> None:
        """Column a against column b, run by run (the same run of the same
        process), and the ratio of their medians."""
        da, db = data.get(a), data.get(b)
        pairs = sorted(da.keys() & db.keys()) if da and db else []
        if not pairs:
            return
        ratios = [float(da[k]["bps"]) / float(db[k]["bps"]) for k in pairs]
        cpu = [float(da[k]["cpu_ms"]) / float(db[k]["cpu_ms"]) for k in pairs
               if "cpu_ms" in da[k] and float(db[k].get("cpu_ms", 0)) > 0]
        m = statistics.median(ratios)
        name, held = f"{a[0]} W={a[1]} {what or f'{a[2]} / {b[2]}'}", ""
        if target is None:
            head = "RATIO"
        else:
            head = "TARGET met   " if m >= target else "TARGET MISSED"
            name += f" >= {target}x"
            held = f", held in {pybench.held(ratios, target)} of {len(ratios)}"
        cpu_text = f"; CPU a batch {a[2]} / {b[2]}: median {statistics.median(cpu):.2f}" if cpu else ""
        print(f"{head} {name}: median {m:.2f}, runs {min(ratios):.2f}-{max(ratios):.2f}{held}, "
              f"ratio of medians {med(a) / med(b):.2f}{cpu_text}")
        print("  per run: " + " ".join(f"{p}.{r}={x:.2f}" for (p, r), x in zip(pairs, ratios)))

    def best(case, w, names):
        have = [(med((case, w, i)), i) for i in names if (case, w, i) in data]
        return (case, w, max(have)[1]) if have else None

    cases = list(dict.fromkeys(k[0] for k in keys))
    ws = sorted({k[1] for k in keys})
    for case in cases:
        for w in ws:
            ratio((case, w, "clpin"), (case, w, "baseline"), CASES[case][2])
            ratio((case, w, "fields"), (case, w, "one-array"), CASES[case][2])
            top = w == max(ws) and case != "numpy"  # the fills mode's targets: at the largest W
            ratio((case, w, "clpin-process"), (case, w, "baseline"), 1.0 if top else None)
            ratio((case, w, "clpin-process"), (case, w, "bare"), 0.85 if top else None)
            threads_or_dl = best(case, w, ("clpin-thread", "baseline"))
            if (case, w, "baseline") in data and threads_or_dl:
                ratio(best(case, w, ("clpin-thread", "clpin-process")), threads_or_dl, 1.0,
                      "best method / max(baseline, clpin-thread)")
            if case == "numpy" and w == max(ws) and best(case, w, ("clpin-thread", "clpin-process")):
                ratio(best(case, w, ("clpin-thread", "clpin-process")), (case, w, "baseline"), 3.0,
                      "best method / baseline")


# ------------------------------------------------------------------ main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", default="datasets", choices=list(MODES))
    ap.add_argument("--procs", type=int, default=2, help="separate processes, one after another")
    ap.add_argument("--runs", type=int, help="timed epochs a column, a process (5; fills: 3)")
    ap.add_argument("--workers", help="W, one or several (2; fills: 1,4,8,16)")
    ap.add_argument("--cases", help="python,jpeg,numpy,fields (fills: python,jpeg,numpy)")
    ap.add_argument("--impl", help="columns: clpin, baseline, bare (fills) (default: every one)")
    ap.add_argument("--scale", type=float, default=1.0, help="batches an epoch x this (datasets)")
    ap.add_argument("--methods", default="thread,process", help="clpin's worker_method (fills)")
    ap.add_argument("--per-worker", type=int, default=16,
                    help="batches an epoch per worker (fills: N = this x W)")
    ap.add_argument("--warm-epochs", type=int, default=1, help="whole epochs before the timed ones")
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
    for k, v in MODES[args.mode].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    for c in args.cases.split(","):
        if c not in (SHAPES if args.mode == "fills" else CASES):
            ap.error(f"unknown case {c!r} for --mode {args.mode}")
    if args.summary:
        logs = []
        for path in args.summary:
            with open(path) as f:
                logs.append((path, f.readlines()))
        summary(logs)
        return 0
    if args.child:
        child(args)
        return 0
    t0 = time.perf_counter()
    load = lambda: " ".join(f"{x:.2f}" for x in os.getloadavg())  # noqa: E731
    print(f"dataset_bench: {os.cpu_count()} cores, load average {load()}, mode {args.mode}, "
          f"W={args.workers}, {args.runs} runs x {args.procs} processes, {pybench.PYTHON} "
          f"({sys.executable})", flush=True)
    lines = []
    status = 0
    for p in range(1, args.procs + 1):
        argv = ["--child", f"{args.tag}{p}"] + pybench.argv_of(args, (
            "mode", "runs", "workers", "cases", "impl", "scale", "methods", "per_worker",
            "warm_epochs", "platform", "quick", "split"))
        print(f"=== process {p}: {os.path.abspath(__file__)} {' '.join(argv)}", flush=True)
        rc, out = pybench.rerun(__file__, argv)
        lines += out
        if rc:
            print(f"=== process {p} exited {rc}", flush=True)
            status = 1
    summary([("", lines)])
    print(f"\ndataset_bench: {time.perf_counter() - t0:.0f} s, load average now {load()}")
    return status


if __name__ == "__main__":
    sys.exit(main())
