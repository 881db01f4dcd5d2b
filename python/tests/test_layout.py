# SPDX-License-Identifier: Apache-2.0
"""_native.py declares clpin.h's structs again, by hand, for cffi's ABI mode:
every struct and field it declares must sit where the C compiler puts it
when it compiles clpin.h. A C program built from the header prints each
field's offset and each struct's size; cffi's must agree, field by field.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from clpin._native import ffi

ROOT = Path(__file__).resolve().parents[2]


def _structs() -> dict[str, list[str]]:
    """Every struct _native.py declares with fields: C name -> field names."""
    out = {}
    for name in ffi.list_types()[1] + ffi.list_types()[0]:
        try:
            t = ffi.typeof(name if name.startswith("struct ") else f"struct {name}")
        except ffi.error:
            continue
        if t.kind == "struct" and t.fields:
            cname = t.cname if t.cname.startswith("struct ") else f"struct {t.cname}"
            out[cname] = [f for f, _ in t.fields]
    return out


def test_struct_layouts_match_the_compiled_header(tmp_path: Path) -> None:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (cc or gcc) to compile clpin.h with")
    structs = _structs()
    assert {"struct clpin_stats", "struct clpin_loader_desc", "struct clpin_loader_stats"} <= set(
        structs), structs.keys()
    lines = ["#define CL_TARGET_OPENCL_VERSION 120", "#include <stddef.h>", "#include <stdio.h>",
             '#include "clpin.h"', "int main(void) {"]
    for cname, fields in structs.items():
        lines.append(f'  printf("%s size %zu\\n", "{cname}", sizeof({cname}));')
        for f in fields:
            lines.append(f'  printf("%s.%s %zu\\n", "{cname}", "{f}", offsetof({cname}, {f}));')
    from clpin import _native

    flags = [n for n in dir(_native) if n.startswith("CLPIN_") and n != "CLPIN_U8"]
    for name in flags:  # the flags _native.py repeats, with the header's values
        lines.append(f'  printf("%s %u\\n", "{name}", (unsigned)({name}));')
    lines += ["  return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-I", str(ROOT / "include"), str(src), "-o", str(exe)], check=True)
    got = dict(line.rsplit(" ", 1) for line in subprocess.run(
        [str(exe)], check=True, capture_output=True, text=True).stdout.splitlines())
    want = {}
    for name in flags:
        want[name] = str(getattr(_native, name))
    for cname, fields in structs.items():
        t = ffi.typeof(cname)
        want[f"{cname} size"] = str(ffi.sizeof(t))
        for f in fields:
            want[f"{cname}.{f}"] = str(ffi.offsetof(t, f))
    assert got == want


def test_every_status_code_of_the_header_is_exposed() -> None:
    """Each X(CLPIN_..., value, ...) of clpin.h's error and status tables is a
    constant of the package with the header's value (clpin.ERR_..., clpin.END)."""
    import re

    import clpin

    header = (ROOT / "include" / "clpin.h").read_text()
    table = dict(re.findall(r"X\((CLPIN_[A-Z_0-9]+), (-\d+),", header))
    assert len(table) >= 24 and "CLPIN_END" in table and "CLPIN_ERR_PEER" in table, table
    for name, value in table.items():
        short = name[len("CLPIN_"):]
        assert getattr(clpin, short, None) == int(value), name
        assert clpin.CODES[short] == int(value)
        assert clpin.strerror(int(value)).startswith(name + ":")
