#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus (tests/fuzz/corpus/) for fuzz_api: short programs
that reach every operation of the harness. Op codes and argument bytes as
read by LLVMFuzzerTestOneInput in fuzz_api.c. Rerun after changing them."""
import os, random

ACQ, ACQ_BAD, REL, REL2, REL_PEND, COMPLETE, REL_BAD, HFREE_BAD, FIND, TRIM, LIMIT, STATS_BAD, \
    XFER, XFER_BAD, RELCTX, STALE, TENSOR = 0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18

def acq(kind, a, b=0, host=0, seed=7):
    # valid_size: kind, then 1 or 2 bytes
    size = [a] if kind in (0, 2, 3) else [a & 255, a >> 8]
    return [ACQ, kind] + size + [host, seed]

seeds = {
    "basic": acq(0, 100) + acq(1, 5000) + acq(2, 12) + [REL, 0, 0] + [REL_PEND, 0] +
             [COMPLETE, 0, 1] + acq(0, 50) + [TRIM] + [REL, 0, 1],
    "host_alloc": acq(1, 3000, host=1) + acq(0, 10, host=1) + [REL, 0, 1] + [HFREE_BAD, 0, 0] +
                  [HFREE_BAD, 1, 0, 5, 0] + [HFREE_BAD, 2] + [HFREE_BAD, 3] + [HFREE_BAD, 4, 3],
    "limit": [LIMIT, 2] + acq(2, 14) + acq(2, 15) + acq(2, 16) + [REL, 0, 0, REL, 0, 0] +
             [REL_PEND, 0, COMPLETE, 0, 1] + [LIMIT, 0] + acq(2, 13) + [LIMIT, 5],
    "over_cap": [LIMIT, 1] + acq(2, 12) + acq(2, 12) + [REL_PEND, 0, REL_PEND, 0] +
                [COMPLETE, 0, 1, COMPLETE, 0, 1] + acq(2, 12) + [REL, 0, 0],
    "bad": [ACQ_BAD, 0, 0, ACQ_BAD, 1, 3, ACQ_BAD, 2, 0, 0, 2, ACQ_BAD, 3, 3, ACQ_BAD, 4, 0, 1] +
           [REL_BAD, 1, 9, REL_BAD, 2, REL_BAD, 3] + [STATS_BAD, 0, STATS_BAD, 1, 3, STATS_BAD, 2],
    "double_release": acq(0, 1) + [REL, 0, 0] + [REL_BAD, 0, 0, 0] + acq(0, 1) +
                      [REL_PEND, 0] + [REL_BAD, 0, 0, 1] + [COMPLETE, 0, 0],
    "find": acq(1, 9000) + [FIND, 1, 0, 5, 0, 1, 7, 0] + [FIND, 1, 0, 0, 1, 0, 3] +
            [FIND, 0, 0, FIND, 0, 1, FIND, 0, 2, FIND, 0, 3],
    "release_context": acq(0, 10) + acq(0, 20, host=1) + [REL_PEND, 0] + [RELCTX, 0, 1] +
                       [STALE, 0, 0, 5, STALE, 1, 0, STALE, 2, 0, 9, STALE, 3, 0, STALE, 4, 0,
                        STALE, 5, 0] + acq(0, 10),
    "shutdown": acq(0, 10) + [RELCTX, 0, 0] + [STALE, 4, 0] + acq(0, 10),
    # RELCTX: a first byte % 4 == 0 releases; the second picks shutdown (% 4 == 0)
    "transfer": acq(1, 2000) + [XFER, 0, 0, 0, 16, 0, 7, 0, 0, 0] +
                [XFER, 0, 1, 0, 4, 2, 9, 1, 2, 1, 0] + [XFER, 5, 0, 0, 2, 3, 1, 0, 0, 0] +
                [XFER_BAD, 0, 0, 3, 2, 1, XFER_BAD, 1, 1, 2, 3, 0, XFER_BAD, 2, 2, 1, 0, 0] +
                [XFER_BAD, 3, 3, 4, 1, XFER_BAD, 0, 4, 2, 0, XFER_BAD, 1, 5, 1,
                 XFER_BAD, 0, 6, 0, 1, XFER_BAD, 0, 6, 1, 0, XFER_BAD, 0, 6, 2, 1],
    # TENSOR: dtype, ndim, extents, create (% 4 == 0), flags, seed, steps, then
    # per step: what (0 to_host, 1 host_data, 2 device_data), access - 1,
    # from (2 bytes), len (2 bytes), seed, [to_host flags]
    "tensor": [TENSOR, 9, 2, 3, 5, 1, 2, 7, 5,
               1, 0, 0, 0, 9, 0, 5,
               1, 2, 4, 0, 10, 0, 6,
               2, 0, 0, 0, 0, 0, 1,
               0, 0, 0, 0, 0, 0, 0, 2,
               2, 1, 0, 0, 0, 0, 3] +
              [TENSOR, 6, 1, 16, 0, 0, 1, 4,
               0, 0, 0, 0, 0, 0, 0, 0,
               1, 2, 1, 0, 7, 0, 9,
               2, 0, 0, 0, 0, 0, 2,
               1, 1, 0, 0, 0, 0, 4] +
              [TENSOR, 2, 3, 4, 0, 5, 1, 0, 3, 2, 1, 0, 0, 0, 0, 0, 1, 2, 2, 0, 0, 0, 0, 0],
}
rnd = random.Random(5)
for i in range(6):
    seeds["random%d" % i] = [rnd.randrange(256) for _ in range(rnd.randrange(40, 400))]

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
os.makedirs(out, exist_ok=True)
# The first byte: chunk 4096 << (b % 5), CLPIN_PINNED_H2D = (b >> 3) & 1.
configs = [0x08, 0x0c, 0x00, 0x0a, 0x04]
for k, (name, data) in enumerate(seeds.items()):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([configs[k % len(configs)]] + [b & 255 for b in data]))
print("wrote %d seeds to %s" % (len(seeds), out))
