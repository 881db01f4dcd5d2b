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
    """examples/python/train_loop.py: an SGD loop fed by clpin.DatasetLoader
    (x and y two arrays a batch, shuffled per epoch), its batches and
    weights checked against the host's."""
    out = subprocess.run([sys.executable, str(TRAIN), "--batch-size", "512", "--batches", "8",
                          "--epochs", "2", "--features", "32", "--workers", "2",
                          "--platform", os.environ.get("CLPIN_TEST_PLATFORM", "")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "data check: all 16 batches ok" in lines, out.stdout
    assert any(line.startswith("weights match the host's SGD") for line in lines), out.stdout
    # Slots of one batch, x (512 x 32 float32) and y (512 float32), 67584 bytes
    # rounded up to whole pages (the workers map a guard page after each slot).
    assert any(line.startswith("loop: ") and " pinned slots of 69632 bytes, 3 device buffers"
               in line for line in lines), out.stdout


IMAGES = EXAMPLE.parent / "image_loop.py"


def test_image_loop_example_small():
    """examples/python/image_loop.py: a JPEG dataset (image, label) decoded
    by clpin.DatasetLoader's worker processes feeding a training-style loop;
    every epoch's features and labels and the weights checked against the
    host's."""
    out = subprocess.run([sys.executable, str(IMAGES), "--batch-size", "8", "--size", "32",
                          "--batches", "6", "--epochs", "2", "--workers", "2",
                          "--platform", os.environ.get("CLPIN_TEST_PLATFORM", "")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr  # 2: PIL missing (ci/deps.sh has it)
    lines = out.stdout.splitlines()
    assert "data check: all 12 batches ok" in lines, out.stdout
    assert any(line.startswith("weights match the host's steps") for line in lines), out.stdout
    assert any(line.startswith("loop: ") and "2 worker processes" in line for line in lines)
