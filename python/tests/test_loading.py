# SPDX-License-Identifier: Apache-2.0
"""How the package finds libclpin.so: CLPIN_LIBRARY, else the loader."""

from __future__ import annotations

import os
import subprocess
import sys

import clpin

PRINT = "import clpin; print(clpin.library_path); print(clpin.version())"


def run(env_changes: dict) -> subprocess.CompletedProcess:
    env = dict(os.environ, **env_changes)
    return subprocess.run([sys.executable, "-c", PRINT], env=env, capture_output=True, text=True,
                          timeout=120)


def test_clpin_library_names_the_file():
    path = os.path.realpath(_loaded_file())
    out = run({"CLPIN_LIBRARY": path, "LD_LIBRARY_PATH": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [path, clpin.version()]


def test_a_wrong_clpin_library_is_an_error_not_a_fallback():
    out = run({"CLPIN_LIBRARY": "/nonexistent/libclpin.so"})
    assert out.returncode != 0
    assert "/nonexistent/libclpin.so" in out.stderr


def test_no_library_anywhere_says_what_to_set():
    env = {"LD_LIBRARY_PATH": "/nonexistent"}
    out = subprocess.run([sys.executable, "-c", PRINT],
                         env={k: v for k, v in dict(os.environ, **env).items()
                              if k != "CLPIN_LIBRARY"},
                         capture_output=True, text=True, timeout=120)
    if out.returncode == 0:  # installed system-wide: the loader found it there
        assert out.stdout.split()[1] == clpin.version()
    else:
        assert "ImportError" in out.stderr and "CLPIN_LIBRARY" in out.stderr


def _loaded_file() -> str:
    """The file the dynamic loader opened for this process."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "libclpin.so" in line:
                return line.split()[-1]
    raise AssertionError("libclpin.so is not mapped")
