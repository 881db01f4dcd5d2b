# SPDX-License-Identifier: Apache-2.0
"""examples/python/loader.py runs and checks every batch it uploads."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "loader.py"


def test_loader_example_small():
    out = subprocess.run([sys.executable, str(EXAMPLE), "--batch-kib", "256", "--batches", "3",
                          "--work-ms", "2", "--platform", os.environ.get("CLPIN_TEST_PLATFORM", "")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    for mode in ("serial pageable", "serial pinned", "pipelined pinned"):
        assert any(line.strip().startswith(mode) and line.strip().endswith("ms/batch)")
                   for line in lines), mode
    assert "data check: all batches ok" in lines
    pool = [line for line in lines if "pool during the runs" in line][0]
    assert " 0 misses" in pool  # the warmed pool served every batch


TRAIN = EXAMPLE.parent / "train_loop.py"


def test_train_loop_example_small():
    """examples/python/train_loop.py: an SGD loop fed by clpin.Loader, its
    batches and weights checked against the host's."""
    out = subprocess.run([sys.executable, str(TRAIN), "--batch-size", "512", "--batches", "8",
                          "--epochs", "2", "--features", "32", "--workers", "2",
                          "--platform", os.environ.get("CLPIN_TEST_PLATFORM", "")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "data check: all 16 batches ok" in lines, out.stdout
    assert any(line.startswith("weights match the host's SGD") for line in lines), out.stdout
    assert any(line.startswith("loop: ") and "3 pinned slots and 3 device buffers" in line
               for line in lines), out.stdout
