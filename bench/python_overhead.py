#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What the Python package costs over the C library, and how clpin.write
compares with pyopencl's own transfer.

1. Call overhead: a blocking 4 KiB clpin.write from a numpy array, against
   the same clpin_write called through cffi with every argument prepared in
   advance (the C call as cheaply as Python can make it). The difference is
   the package's own work (argument checks, pointer extraction). Target:
   <= 5 us. The cffi transition itself is shown too (clpin_version(), a C
   function that does nothing).
2. 256 MiB: clpin.write(pin_memory=True) vs pyopencl.enqueue_copy of the
   same numpy array, blocking.

Every figure is the median of --repeat runs with its spread: median (min-max).
By default the script runs itself three times: with CLPIN_PINNED_H2D=1, with
CLPIN_PINNED_H2D=0 (what `auto` does on a host-unified device), and with
the variable unset (the library's default), since options are read once per
process.

Usage: python_overhead.py [--platform NAME] [--repeat N] [--mib N] [--calls N] [--single]
Needs clpin importable (PYTHONPATH=python) and libclpin.so findable
(CLPIN_LIBRARY=build/.../libclpin.so or LD_LIBRARY_PATH).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import pyopencl as cl

import pybench


def spread(values: list[float], unit: str, scale: float = 1.0) -> str:
    return f"{pybench.spread(x * scale for x in values)} {unit}"


def route(s1: dict, s0: dict | None = None) -> str:
    """The route that carried the most bytes (since s0): clpin.stats()."""
    return max(("bytes_staged", "bytes_pipelined", "bytes_pinned_direct", "bytes_unpinned"),
               key=lambda k: s1[k] - (s0[k] if s0 else 0))


def per_call(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def run(args: argparse.Namespace) -> None:
    import clpin
    import clpin._transfer as transfer
    from clpin._native import ffi, lib

    dev = pybench.cl_device(args.platform)
    ctx = cl.Context([dev])
    q = cl.CommandQueue(ctx, dev)
    mode = os.environ.get("CLPIN_PINNED_H2D", "default")
    print(f"== {pybench.describe(dev)}, CLPIN_PINNED_H2D={mode}, "
          f"clpin {clpin.version()}, median of {args.repeat}")

    # ---- 1. call overhead, 4 KiB
    small = np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8)
    sbuf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, small.nbytes)
    cq = ffi.cast("cl_command_queue", q.int_ptr)
    cm = ffi.cast("cl_mem", sbuf.int_ptr)
    cp = ffi.from_buffer(small)
    n = small.nbytes

    def raw() -> None:
        lib.clpin_write(cq, cm, 0, cp, n, 1, 0, ffi.NULL, ffi.NULL)

    def wrapped() -> None:
        clpin.write(q, sbuf, small)

    def noop() -> None:
        lib.clpin_version()

    # The package's own work, isolated: clpin.write with its library handle
    # swapped for a stub whose clpin_write returns at once, minus the cost of
    # calling that stub directly. (The transfer itself, 30-150 us on a busy
    # POCL, would drown a few microseconds in its noise.)
    class Stub:
        def __getattr__(self, name):
            return getattr(lib, name)

        @staticmethod
        def clpin_write(*a):
            return 0

    stub = Stub()

    def stub_direct() -> None:
        stub.clpin_write(cq, cm, 0, cp, n, 1, 0, ffi.NULL, ffi.NULL)

    def isolated(calls: int) -> float:
        transfer.lib = stub  # the module whose lib clpin.write calls
        try:
            return per_call(wrapped, calls) - per_call(stub_direct, calls)
        finally:
            transfer.lib = lib

    for f in (raw, wrapped, noop):  # warm: pool block, caches
        per_call(f, 200)
    isolated(200)
    t_raw, t_py, t_noop, t_diff = [], [], [], []
    for _ in range(args.repeat):
        t_raw.append(per_call(raw, args.calls))
        t_py.append(per_call(wrapped, args.calls))
        t_diff.append(isolated(args.calls * 10))
        t_noop.append(per_call(noop, args.calls))
    print(f"4 KiB write, C call through cffi:   {spread(t_raw, 'us', 1e6)}")
    print(f"4 KiB write, clpin.write:           {spread(t_py, 'us', 1e6)}")
    print(f"  Python overhead over the C call:  {spread(t_diff, 'us', 1e6)}  (target <= 5 us;"
          " measured with the C call stubbed out)")
    print(f"  cffi transition alone:            {spread(t_noop, 'us', 1e6)}")
    print(f"  path taken: {route(clpin.stats(q))}")

    # ---- 2. 256 MiB
    nbytes = args.mib << 20
    big = np.random.default_rng(2).integers(0, 256, nbytes, dtype=np.uint8)
    bbuf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    clpin.write(q, bbuf, big)  # warm: pool blocks, first-touch of the buffer
    cl.enqueue_copy(q, bbuf, big, is_blocking=True)
    t_clpin, t_ocl = [], []
    s0 = clpin.stats(q)
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        clpin.write(q, bbuf, big, pin_memory=True)
        t_clpin.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        cl.enqueue_copy(q, bbuf, big, is_blocking=True)
        t_ocl.append(time.perf_counter() - t0)
    path = route(clpin.stats(q), s0)
    gbs = lambda ts: [nbytes / t / 1e9 for t in ts]  # noqa: E731
    print(f"{args.mib} MiB clpin.write(pin_memory=True): {spread(gbs(t_clpin), 'GB/s')}  "
          f"[{path}]")
    print(f"{args.mib} MiB pyopencl.enqueue_copy:        {spread(gbs(t_ocl), 'GB/s')}")
    ratio = statistics.median(t_ocl) / statistics.median(t_clpin)
    print(f"  clpin / pyopencl speed: {ratio:.2f}x")
    out = np.empty_like(big)
    cl.enqueue_copy(q, out, bbuf, is_blocking=True)
    assert np.array_equal(out, big), "data check failed"
    del big, out
    clpin.release_context(ctx)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--platform", default=os.environ.get("CLPIN_TEST_PLATFORM", ""))
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--single", action="store_true",
                    help="one run in this process's environment (no re-invocation)")
    args = ap.parse_args()
    if args.single:
        run(args)
        return 0
    status = 0
    for value in ("1", "0", None):
        env = dict(os.environ)
        env.pop("CLPIN_PINNED_H2D", None)
        if value is not None:
            env["CLPIN_PINNED_H2D"] = value
        argv = ["--single"] + pybench.argv_of(args, ("platform", "repeat", "mib", "calls"))
        status |= pybench.rerun(__file__, argv, env)[0]
    return status


if __name__ == "__main__":
    sys.exit(main())
