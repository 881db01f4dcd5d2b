#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Pool the small-transfer latency pairs of several bench/gpu-layer.sh runs.

Each run directory holds latency-plain-K.txt and latency-layer-K.txt (one
process without and one with libclpin-layer.so, run K). Per size and
direction this prints, over every pair of every directory: the median of the
pairs' ratios (with the layer / without) with min and max, in how many pairs
the 1.05 target held, and the median latencies. One process pair scatters by
about 20% either way on the H100 machine, so one run of 5 pairs decides
little; pooled, the medians do.

    python3 bench/latency_pool.py DIR [DIR ...]
"""
import glob
import os
import re
import statistics
import sys

SIZES = (4096, 16384, 65536)


def field(path, key):
    with open(path) as f:
        for line in f:
            if line.startswith("layer-sgemm: summary:"):
                m = re.search(r"\b" + key + r"=([0-9.]+)", line)
                return float(m.group(1)) if m else None
    return None


def main(dirs):
    if not dirs:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    pairs = []
    for d in dirs:
        for plain in sorted(glob.glob(os.path.join(d, "latency-plain-*.txt"))):
            pairs.append((plain, plain.replace("latency-plain-", "latency-layer-")))
    if not pairs:
        print("latency_pool: no latency-plain-*.txt in " + " ".join(dirs), file=sys.stderr)
        return 1
    status = 0
    for direction in ("write", "read"):
        for size in SIZES:
            key = "%s_%d_us_med" % (direction, size)
            ratios, without, with_layer = [], [], []
            for plain, layer in pairs:
                a, b = field(plain, key), (field(layer, key) if os.path.exists(layer) else None)
                if a and b:
                    ratios.append(b / a)
                    without.append(a)
                    with_layer.append(b)
            if not ratios:
                status = 1
                continue
            med = statistics.median(ratios)
            held = sum(r <= 1.05 for r in ratios)
            print("  %-5s %2d KiB: %2d pairs, with / without %.3f [%.3f .. %.3f], <= 1.05 in %d; "
                  "%.2f us without, %.2f us with  %s"
                  % (direction, size // 1024, len(ratios), med, min(ratios), max(ratios), held,
                     statistics.median(without), statistics.median(with_layer),
                     "met" if med <= 1.05 else "MISSED"))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
