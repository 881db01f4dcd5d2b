# SPDX-License-Identifier: Apache-2.0
"""What the Python benches share: the OpenCL device they measure, sizes,
medians with their spread, how often a target held, RESULT lines written
and read back, CPU seconds from /proc, and a script re-run in child
processes. The standard library alone at import: torch's python (no
pyopencl, maybe no numpy) imports it too."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys

HZ = os.sysconf("SC_CLK_TCK")
PYTHON = f"python {sys.version.split()[0]}"


def cl_device(want: str = ""):
    """The first OpenCL device whose platform or device name contains want
    (any when empty), a GPU before any other kind."""
    import pyopencl as cl

    devs = []
    for p in cl.get_platforms():
        try:
            devs += [d for d in p.get_devices() if want in p.name or want in d.name]
        except cl.Error:  # a platform without devices
            continue
    if not devs:
        raise SystemExit(f"no OpenCL device matches {want!r}; platforms: "
                         f"{[p.name for p in cl.get_platforms()]}")
    return sorted(devs, key=lambda d: not d.type & cl.device_type.GPU)[0]


def describe(dev) -> str:
    return f"{dev.name.strip()} ({dev.platform.name.strip()})"


def parse_size(text: str) -> int:
    """Bytes of "512", "64K", "16M", "1G" (also "1GiB", "1GB")."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B").rstrip("I")
    return int(t[:-1]) * units[t[-1]] if t[-1] in units else int(t)


def spread(values, f: str = ".2f") -> str:
    """"median (min-max)"."""
    v = list(values)
    return f"{statistics.median(v):{f}} ({min(v):{f}}-{max(v):{f}})"


def rate_line(what: str, values, width: int = 50, unit: str = "GB/s") -> str:
    """A figure as benchstat.h prints it: "  what   median unit  [min .. max]"."""
    return (f"  {what:<{width}} {statistics.median(values):7.2f} {unit}  "
            f"[{min(values):.2f} .. {max(values):.2f}]")


def held(ratios, target: float, op: str = ">=") -> int:
    """In how many runs the target held."""
    return sum(1 for r in ratios if (r >= target if op == ">=" else r <= target))


def ticks(pid: int = 0, path: str = "", sys_only: bool = False) -> int:
    """utime + stime (or stime alone) of process pid, or of the thread at
    /proc path, in clock ticks (0 once it is gone)."""
    try:
        with open(path or f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[12]) + (0 if sys_only else int(fields[11]))
    except (OSError, IndexError, ValueError):
        return 0


def emit(tag: str, **fields) -> None:
    """One "TAG key=value ..." line (values formatted by the caller)."""
    print(tag + " " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)


def records(lines, tag: str = "RESULT") -> list:
    """The key=value fields of every "TAG key=value ..." line, as dicts of
    strings."""
    pat = re.compile(rf"(?<![\w-]){tag} ((?:\S+=\S+\s*)+)")
    out = []
    for line in lines:
        m = pat.search(line)
        if m:
            out.append(dict(kv.split("=", 1) for kv in m[1].split()))
    return out


def argv_of(args, names) -> list:
    """args' options of these names as a command line: "--name value", or
    "--name" alone for a flag that is on."""
    out = []
    for k in names:
        v, opt = getattr(args, k), "--" + k.replace("_", "-")
        if v is True:
            out.append(opt)
        elif v is not False and v is not None:
            out += [opt, str(v)]
    return out


def rerun(script: str, argv: list, env: dict | None = None) -> tuple:
    """script run again by this python with argv (and env): its stdout
    printed as it comes; (exit status, its lines)."""
    cmd = [sys.executable, os.path.abspath(script)] + argv
    lines = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) as proc:
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line)
    return proc.returncode, lines
