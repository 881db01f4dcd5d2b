#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Markdown tables from clpin-bench's CSV (and torch_baseline.py's), for
docs/BENCHMARKS.md:
    python3 bench/report.py bench.csv [torch.csv]"""
import csv
import sys

PATHS = ["pageable", "cl-pinned", "clpin-host", "clpin-pin", "clpin-plain", "clpin-reg", "cuda-pinned",
         "cuda-pageable"]


def size(n):
    n = int(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024


def load(name):
    with open(name, newline="") as f:
        return list(csv.DictReader(f))


def transfer_table(rows, section, extra=()):
    out = []
    paths = [p for p in PATHS if any(r["section"] == section and r["path"] == p for r in rows)]
    paths += [p for p in extra if any(r["path"] == p for r in rows)]
    for d in ("H2D", "D2H"):
        sizes = sorted({int(r["bytes"]) for r in rows if r["section"] == section and r["dir"] == d})
        out.append(f"\n**{d}**, GB/s (median; clpin's route from its stats)\n")
        out.append("| size | " + " | ".join(paths) + " |")
        out.append("|---:|" + "---:|" * len(paths))
        for n in sizes:
            cells = []
            for p in paths:
                r = next((r for r in rows if r["path"] == p and r["dir"] == d and int(r["bytes"]) == n
                          and r["section"] in (section, "torch")), None)
                cell = f"{float(r['median']):.1f}" if r else "–"
                if r and r["route"] and p.startswith("clpin"):
                    cell += f" ({r['route']})"
                cells.append(cell)
            out.append(f"| {size(n)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def grid(rows, section, label):
    out = []
    recs = [r for r in rows if r["section"] == section]
    threads = sorted({int(r["threads"]) for r in recs})
    for d in sorted({r["dir"] for r in recs}, key=lambda x: (x != "H2D", x)):
        for n in sorted({int(r["bytes"]) for r in recs if r["dir"] == d}):
            title = f"{d} {size(n)}" if d else size(n)
            out.append(f"\n**{title}**, GB/s by {label}\n")
            out.append("| chunk | " + " | ".join(f"{t} thr" for t in threads) + " |")
            out.append("|---:|" + "---:|" * len(threads))
            for c in sorted({int(r["chunk"]) for r in recs if r["dir"] == d and int(r["bytes"]) == n}):
                cells = []
                for t in threads:
                    r = next((r for r in recs if r["dir"] == d and int(r["bytes"]) == n
                              and int(r["chunk"]) == c and int(r["threads"]) == t), None)
                    cells.append(f"{float(r['median']):.1f}" if r else "–")
                out.append(f"| {size(c) if c else '–'} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def memcpy_table(rows):
    recs = [r for r in rows if r["section"] == "memcpy"]
    threads = sorted({int(r["threads"]) for r in recs})
    out = ["\nGB/s by copy threads\n", "| copy | size | " + " | ".join(f"{t} thr" for t in threads) + " |",
           "|---|---:|" + "---:|" * len(threads)]
    for n in sorted({int(r["bytes"]) for r in recs}):
        for p in dict.fromkeys(r["path"] for r in recs):
            cells = [next((f"{float(r['median']):.1f}" for r in recs if r["path"] == p
                           and int(r["bytes"]) == n and int(r["threads"]) == t), "–") for t in threads]
            out.append(f"| {p} | {size(n)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    rows = load(args[0])
    if len(args) > 1:
        rows += load(args[1])
    print("## transfer\n" + transfer_table(rows, "transfer", ("torch-pinned", "torch-pageable")))
    print("\n## pool\n\n| operation | size | median ns | p10 | p90 | mean |\n|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["section"] == "pool":
            print(f"| {r['path']} | {size(r['bytes'])} | {float(r['median']):.0f} | {float(r['p10']):.0f} | "
                  f"{float(r['p90']):.0f} | {float(r['mean']):.0f} |")
    print("\n## threads\n\n| threads | Mops/s | median ns | p99 ns | max ns |\n|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["section"] == "threads" and r["path"] == "clpin-mixed":
            lat = next(x for x in rows if x["section"] == "threads" and x["path"] == "clpin-mixed-latency"
                       and x["threads"] == r["threads"])
            print(f"| {r['threads']} | {float(r['median']):.2f} | {float(lat['median']):.0f} | "
                  f"{float(lat['p99']):.0f} | {float(lat['max']):.0f} |")
    if any(r["section"] == "memcpy" for r in rows):
        print("\n## memcpy\n" + memcpy_table(rows))
    if any(r["section"] == "tune" for r in rows):
        print("\n## tune\n" + grid(rows, "tune", "chunk and copy threads"))
    if any(r["section"] == "sweep" for r in rows):
        print("\n## sweep\n" + transfer_table(rows, "sweep"))


if __name__ == "__main__":
    main()
