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
    """Each X(CLPIN_..., value, ...) of clpin.h's error and status tables, and
    of libclpin-mpi's (clpin_mpi_errors.h, which clpin.h includes), is a
    constant of the package with the header's value (clpin.ERR_..., clpin.END)."""
    import re

    import clpin

    # clpin.h's tables and the add-ons' it includes (clpin_mpi_errors.h).
    header = "".join((ROOT / "include" / h).read_text() for h in ("clpin.h", "clpin_mpi_errors.h"))
    table = dict(re.findall(r"X\((CLPIN_[A-Z_0-9]+), (-\d+),", header))
    assert len(table) >= 24 and "CLPIN_END" in table and "CLPIN_ERR_PEER" in table, table
    for name, value in table.items():
        short = name[len("CLPIN_"):]
        assert getattr(clpin, short, None) == int(value), name
        assert clpin.CODES[short] == int(value)
        assert clpin.strerror(int(value)).startswith(name + ":")


def test_removed_names_are_gone_and_their_successors_exported() -> None:
    """The names CHANGELOG says were removed (0.2's ``host_to_device`` /
    ``host_to_host``, deprecated since 0.2) are neither attributes of the
    package nor in ``__all__``; the names that replace them are both, and
    callable."""
    import clpin

    for old, new in (("host_to_device", "host_lend"), ("host_to_host", "host_reclaim")):
        assert not hasattr(clpin, old), old
        assert old not in clpin.__all__, old
        assert callable(getattr(clpin, new)), new
        assert new in clpin.__all__, new
    for name in clpin.__all__:
        assert hasattr(clpin, name), f"__all__ names {name}, which the package lacks"


def _struct_body(text: str, open_brace: str, close: str) -> str:
    start = text.index("struct clpin_mpi_stats " + open_brace) + len("struct clpin_mpi_stats ")
    return text[start + len(open_brace):text.index(close, start)]


def test_mpi_stats_declaration_matches_clpin_mpi_h(tmp_path: Path) -> None:
    """clpin/mpi.py declares struct clpin_mpi_stats again, by hand; it must
    have clpin_mpi.h's fields, in order, with the same types and places. The
    test reads both texts (clpin.mpi needs mpi4py and libclpin-mpi to import,
    clpin_mpi.h needs mpi.h to compile; neither is needed here), and a C
    program built from the header's struct checks cffi's places."""
    import re

    import cffi

    header = (ROOT / "include" / "clpin_mpi.h").read_text()
    c_body = re.sub(r"/\*.*?\*/", "", _struct_body(header, "{", "};"), flags=re.S)
    py_body = _struct_body((ROOT / "python" / "clpin" / "mpi.py").read_text(), "{{", "}};")
    layouts = []
    for body in (c_body, py_body):
        f = cffi.FFI()
        f.cdef("struct clpin_mpi_stats {" + body + "};")
        t = f.typeof("struct clpin_mpi_stats")
        layouts.append((f.sizeof(t), [(n, ft.type.cname, ft.offset) for n, ft in t.fields]))
    (size, fields), py_layout = layouts
    assert len(fields) >= 11 and fields[0][0] == "struct_size", fields
    assert py_layout == (size, fields)

    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (cc or gcc) to compile clpin_mpi.h's struct with")
    lines = ["#include <stddef.h>", "#include <stdint.h>", "#include <stdio.h>",
             "struct clpin_mpi_stats {" + c_body + "};", "int main(void) {",
             '  printf("size %zu\\n", sizeof(struct clpin_mpi_stats));']
    lines += [f'  printf("{n} %zu\\n", offsetof(struct clpin_mpi_stats, {n}));' for n, _, _ in fields]
    lines += ["  return 0;", "}"]
    src = tmp_path / "mpi_layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "mpi_layout"
    subprocess.run([cc, str(src), "-o", str(exe)], check=True)
    got = dict(line.rsplit(" ", 1) for line in subprocess.run(
        [str(exe)], check=True, capture_output=True, text=True).stdout.splitlines())
    assert got == {"size": str(size), **{n: str(off) for n, _, off in fields}}
