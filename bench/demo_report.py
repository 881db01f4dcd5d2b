#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The verdicts of ci/demo.sh, from one clpin-bench run (--json) and, on a
host-unified device, the rows of its `unified` case (stdout, when the bench
has that case).

Each figure is judged only against a baseline that means something on this
device: the GPU targets of docs/BENCHMARKS.md on a discrete GPU; on a device
that shares memory with the host (POCL, integrated GPUs) the path clpin
chose and the zero-copy rows against plain OpenCL. A row is "met" only when
its figure reaches the target; one short of it by no more than the noise of
a shared machine reads "not met, within the noise" (not a miss: runs differ
that much), one further short "MISSED"; where no target makes sense here
the row says so.

Usage: demo_report.py MAIN.json [UNIFIED.log]   (exit 1 when a row missed)
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys

MIB = 1 << 20
# Ratios on a loaded machine move by this much from run to run (medians of
# 5-7 runs on the 2-core CI container, docs/BENCHMARKS.md): a row is judged
# against its target widened by it.
NOISE = 0.25

rows: list[tuple[str, str, str, str, str, str, str]] = []
missed = 0
near = 0


def fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def row(what: str, unit: str, clpin: float | None, base: float | None, base_name: str,
        ratio: str, target: str, verdict: str) -> None:
    global missed, near
    missed += verdict.startswith("MISSED")
    near += verdict.startswith("not met")
    rows.append((what, unit, "-" if clpin is None else fmt(clpin),
                 "-" if base is None else f"{fmt(base)} {base_name}", ratio, target, verdict))


def judge(value: float, op: str, want: float, margin: float = 0.0) -> str:
    """"met" only when value meets want itself; short of it by no more than
    margin (a fraction: the run-to-run noise), "not met, within noise";
    further, "MISSED"."""
    if (value >= want) if op == ">=" else (value <= want):
        return "met"
    if (value >= want * (1 - margin)) if op == ">=" else (value <= want * (1 + margin)):
        return f"not met, within the {margin:.0%} noise"
    return "MISSED"


def target_text(op: str, want: float, margin: float) -> str:
    t = f"{op} {want:g}x"
    return t + (f" (+-{margin:.0%} noise)" if margin else "")


def main() -> int:
    with open(sys.argv[1]) as f:
        run = json.load(f)
    recs = run["records"]
    unified = bool(run.get("host_unified_memory"))
    cores = os.cpu_count() or 1

    def find(section: str, path: str, d: str = "", n: int | None = None, threads: int | None = None):
        for r in recs:
            if (r["section"] == section and r["path"] == path and r["dir"] == d
                    and (n is None or r["bytes"] == n)
                    and (threads is None or r["threads"] == threads)):
                return r
        return None

    print(f"device:  {run['device']} ({run['platform']}, {run['device_version']})")
    print(f"host:    {run['cpu']}, {cores} cores")
    if unified:
        print("memory:  this device SHARES MEMORY WITH THE HOST (CL_DEVICE_HOST_UNIFIED_MEMORY):")
        print("         there is no bus to speed up, so clpin sends transfers plain (CLPIN_PINNED_H2D=auto)")
        print("         and the gains are the copies it avoids (zero copy). GPU targets do not apply here.")
    else:
        print("memory:  a discrete device (separate memory behind a bus): pinned memory and staging pay here.")
        if not run.get("cuda_device"):
            print("CUDA:    no CUDA device here; the pinned baseline is OpenCL's own mapped buffer (cl-pinned).")
    print()
    print("Columns: clpin = clpin's figure; baseline = the plain OpenCL way, measured in the same run;")
    print("ratio = clpin against the baseline (higher is better for rates, lower for times);")
    print("target = what clpin promises here; verdict = met (the target reached), 'not met, within")
    print(f"the {NOISE:.0%} noise' (short of it by no more than runs of this machine differ), MISSED, or")
    print("'no target here'.")
    print()

    # --- transfers
    for d in ("H2D", "D2H"):
        for n in (16 * MIB, 64 * MIB, 256 * MIB):
            c, b = find("transfer", "clpin-pin", d, n), find("transfer", "pageable", d, n)
            if not c or not b:
                continue
            what = f"{d} {n // MIB} MiB from malloc memory"
            ratio = f"{c['median'] / b['median']:.2f}x"
            if unified:
                ok = c["route"] == "unpinned"
                row(what + " (PIN_MEMORY)", "GB/s", c["median"], b["median"], "plain", ratio,
                    "the plain path",
                    "met: sent plain (no bus here: pinning would only add a copy;"
                    " ratio of two plain sends, not judged)" if ok else f"MISSED (took {c['route']})")
            elif n == 64 * MIB:
                want = 3.0 if d == "H2D" else 2.5
                row(what + " (PIN_MEMORY)", "GB/s", c["median"], b["median"], "plain", ratio,
                    target_text(">=", want, 0), judge(c["median"] / b["median"], ">=", want))
        for n in (16 * MIB, 256 * MIB):
            c = find("transfer", "clpin-host", d, n)
            ref = find("transfer", "cuda-pinned", d, n) or find("transfer", "cl-pinned", d, n)
            if not c or not ref:
                continue
            what = f"{d} {n // MIB} MiB from pool memory"
            ratio = f"{c['median'] / ref['median']:.2f}x"
            if unified:
                row(what, "GB/s", c["median"], ref["median"], ref["path"], ratio, "-",
                    "no target here (no bus: every path is a memcpy)")
            else:
                row(what, "GB/s", c["median"], ref["median"], ref["path"], ratio,
                    target_text(">=", 0.95, 0), judge(c["median"] / ref["median"], ">=", 0.95))

    # --- the pool
    hit, kept = find("pool", "clpin-hit", "", MIB), find("pool", "cl-create-map-kept", "", MIB)
    if hit:
        want = 1000 if unified else 100
        row("pool hit, 1 MiB block", "ns", hit["median"], None, "", "-", f"<= {want} ns",
            "met" if hit["median"] <= want else "MISSED")
    if hit and kept:
        want = 20 if unified else 10000
        r = kept["median"] / hit["median"]
        row("pool hit vs a new pinned buffer", "ns", hit["median"], kept["median"], "create+map",
            f"{r:,.0f}x faster", f">= {want:,}x faster", judge(r, ">=", want))

    # --- threads, sized to this machine (the last run of more than one thread)
    one = find("threads", "clpin-mixed", threads=1)
    many = next((r for r in reversed(recs) if r["section"] == "threads"
                 and r["path"] == "clpin-mixed" and r["threads"] > 1), None)
    lat = next((r for r in reversed(recs) if r["section"] == "threads"
                and r["path"] == "clpin-mixed-latency" and r["threads"] > 1), None)
    few = f"no target here ({cores} cores)"
    if one and many:
        r = many["median"] / one["median"]
        row(f"pool ops, {many['threads']} threads vs 1", "Mops/s", many["median"], one["median"],
            "1 thread", f"{r:.2f}x", *((">= 2x", judge(r, ">=", 2)) if cores >= 4 else ("-", few)))
    if lat:
        p99 = lat["p99"] / 1000
        row(f"pool op latency, {lat['threads']} threads, p99", "us", p99, None, "", "-",
            *(("<= 5 us", "met" if p99 <= 5 else "MISSED") if cores >= 4 else ("-", few)))

    # --- zero copy (host-unified devices): clpin-bench --case unified
    unified_ran = False
    if unified and len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
        sweep: list[tuple[float, str, bool]] = []
        pat = re.compile(r"^\s+(.+?)\s+(\d+(?:\.\d+)? [KMG]iB|\d+ B)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x"
                         r"\s+\S+\s+\d+/\d+\s+(<=|>=)([\d.]+)\s+(\S+)\s+(met|MISSED)\s*$")
        with open(sys.argv[2]) as f:
            for line in f:
                m = pat.match(line)
                if not m:
                    continue
                unified_ran = True
                what, size, cms, bms, ratio, op, want, copied, _ = m.groups()
                cms, bms, ratio, want = float(cms), float(bms), float(ratio), float(want)
                if "PIN_MEMORY vs plain" in what:
                    ok = ratio <= want * (1 + NOISE) or cms - bms <= 0.010
                    sweep.append((ratio, size, ok))
                    continue
                # The in-place rows (targets "within" a zero-copy baseline)
                # must copy nothing; the round trip copies by design.
                copy_ok = op == ">=" or copied in ("-", "0")
                v = judge(ratio, op, want, NOISE)
                if not v.startswith("MISSED") and not copy_ok:
                    v = f"MISSED ({copied} bytes copied)"
                speed = op == ">="
                shown = f"{ratio:.2f}x" + (" faster" if speed else " the time")
                row(f"{what}, {size}", "ms", cms, bms, "plain OpenCL", shown,
                    target_text(op, want, NOISE), v)
        if sweep:
            # One size alone is a coin toss on a loaded machine (two identical
            # plain calls were seen 1.4x and 5x apart at single sizes): judged
            # over the sizes, by the median of their ratios; the worst size
            # is shown, and the transfer rows above check the path itself.
            worst, size, _ = max(sweep)
            mid = statistics.median(r[0] for r in sweep)
            row(f"PIN_MEMORY vs plain, {len(sweep)} size/direction pairs", "ms", None, None, "",
                f"median {mid:.2f}x the time (worst {worst:.2f}x, {size})",
                "never slower (median <= 1.1x, +-25% noise)", judge(mid, "<=", 1.1, NOISE))
    if unified and not unified_ran:
        row("zero copy vs plain OpenCL", "-", None, None, "", "-", "-",
            "no target here: this clpin-bench has no `unified` case (zero copy)")

    # --- the table
    head = ("row", "unit", "clpin", "baseline", "ratio", "target", "verdict")
    w = [max(len(r[i]) for r in rows + [head]) for i in range(7)]
    print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)).rstrip())
    for r in rows:
        print("  ".join(r[i].rjust(w[i]) if i in (2,) else r[i].ljust(w[i]) for i in range(7)).rstrip())
    print()
    judged = sum(1 for r in rows if not r[6].startswith("no target"))
    if missed:
        print(f"Next: {missed} of {judged} judged rows MISSED their target: the full output is in"
              " build/demo/run/; compare with docs/BENCHMARKS.md and report it with those logs.")
    elif near:
        print(f"Next: {near} of {judged} judged rows fell short of their target by no more than this"
              " machine's run-to-run noise: run ci/demo.sh again on an idle machine; if they stay"
              " short, report it with the output in build/demo/run/.")
    elif unified:
        zc = ("give your tensors CLPIN_ZERO_COPY to skip their copies (the zero-copy rows above)"
              if unified_ran else "keep the defaults: clpin sends transfers plain here, which is right")
        print(f"Next: on this device {zc}; to see pinned staging pay,"
              " run ci/demo.sh on a machine with a discrete GPU.")
    else:
        print("Next: every target met here: link clpin (README, \"Usage\"), or run your unmodified program"
              " under the layer: OPENCL_LAYERS=/usr/local/lib/libclpin-layer.so ./app (README).")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
