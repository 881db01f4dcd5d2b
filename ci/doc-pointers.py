# SPDX-License-Identifier: Apache-2.0
"""Pointers in the comments of src/ and layer/ (their subfolders too) name a place that holds what
they say (STYLE.md, point 10). Checked in every comment:

- a citation `docs/X.md, "Section"` (or `docs/X.md "Section"`): the file
  exists and has a heading that is, or starts with, Section (a heading
  "Round 3 (2026-11-23): engine" answers "Round 3");
- a repository path (src/x.c, docs/X.md, bench/..., tests/..., ...) exists;
- a bare file name (see foo.c, in foo.c, (foo.h)) names a file beside the
  comment's file, or of src/, layer/ or include/;
- `name in foo.c` and `name (foo.c)`, where name is a C identifier with an
  underscore (count_move, clpin__pool_enter), name a file that holds name.

  python3 ci/doc-pointers.py              check, print a summary
  python3 ci/doc-pointers.py --self-test  plant wrong pointers in a copy and
                                          show that each is caught
"""
import os
import re
import shutil
import sys
import tempfile

DIRS = ("src", "layer")
LOOKIN = ("src", "layer", "include")
# Bare names of system headers a comment may mention.
SYSTEM = {"numaif.h", "stdatomic.h", "pthread.h", "immintrin.h"}
ROOTS = "docs|src|ci|tests|examples|bench|include|cmake|python|layer"

CITE = re.compile(r'(?<![\w/.])(docs/[\w./-]+\.md),?\s+"([^"]+)"')
PATH = re.compile(r"(?<![\w/.$~-])(?:%s)/[\w.+/-]*\w" % ROOTS)
BARE = re.compile(r"(?<![\w/.-])([A-Za-z][\w-]*\.[ch])(?![\w.])")
HOLDS = re.compile(r"\b([A-Za-z_]\w*_\w*)(?:\(\))?\s+(?:in|\()\s*([\w-]+\.[ch])\b")


def comments(text):
    """Each comment of a C source as (line, text with ` * ` and newlines
    folded into single spaces)."""
    out = []
    for m in re.finditer(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"", text, re.S):
        s = m.group(0)
        if s.startswith('"'):
            continue
        line = text.count("\n", 0, m.start()) + 1
        body = re.sub(r"\n\s*\*?(?!/)", " ", s)
        out.append((line, re.sub(r"\s+", " ", body)))
    return out


def headings(path):
    with open(path, encoding="utf-8") as f:
        return [re.sub(r"[`*]", "", h).strip() for h in re.findall(r"^#+\s+(.*)$", f.read(), re.M)]


def has_heading(path, section):
    section = re.sub(r"[`*]", "", section).strip()
    for h in headings(path):
        if h == section or (h.startswith(section) and not h[len(section)].isalnum()):
            return True
    return False


def find(name, here):
    for d in (here,) + LOOKIN:
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    return None


def check(root):
    os.chdir(root)
    bad = []
    n = {"citations": 0, "paths": 0, "names": 0, "holds": 0}
    for d in DIRS:
        for src in sorted(os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs):
            if not src.endswith((".c", ".h")):
                continue
            here = os.path.dirname(src)
            with open(src, encoding="utf-8") as f:
                text = f.read()
            for line, c in comments(text):
                where = "%s:%d" % (src, line)
                for m in CITE.finditer(c):
                    n["citations"] += 1
                    doc, sec = m.group(1), m.group(2)
                    if not os.path.exists(doc):
                        bad.append('%s cites %s, "%s": no such file' % (where, doc, sec))
                    elif not has_heading(doc, sec):
                        bad.append('%s cites %s, "%s": no such heading there' % (where, doc, sec))
                for m in PATH.finditer(c):
                    n["paths"] += 1
                    if not os.path.exists(m.group(0)):
                        bad.append("%s names %s: no such file" % (where, m.group(0)))
                for m in BARE.finditer(c):
                    name = m.group(1)
                    if name in SYSTEM:
                        continue
                    n["names"] += 1
                    if not find(name, here):
                        bad.append("%s names %s: not a file of %s" % (where, name, ", ".join(LOOKIN)))
                for m in HOLDS.finditer(c):
                    ident, name = m.group(1), m.group(2)
                    path = find(name, here)
                    if not path:
                        continue  # reported above
                    n["holds"] += 1
                    with open(path, encoding="utf-8") as f:
                        if not re.search(r"\b%s\b" % re.escape(ident), f.read()):
                            bad.append("%s says %s is in %s: it is not" % (where, ident, name))
    return bad, n


def self_test(root):
    tmp = tempfile.mkdtemp()
    try:
        for d in ("src", "layer", "include", "docs"):
            shutil.copytree(os.path.join(root, d), os.path.join(tmp, d))
        planted = {
            "docs/DESIGN.md, \"No Such Section\"": "no such heading",
            "docs/NOPE.md, \"Intro\"": "no such file",
            "bench/no-such-program.c": "no such file",
            "see nowhere.c": "not a file of",
            "count_move in registry.c": "it is not",
        }
        with open(os.path.join(tmp, "src", "planted.c"), "w") as f:
            for text in planted:
                f.write("/* %s */\n" % text)
        bad, _ = check(tmp)
        missed = [t for t, why in planted.items() if not any("planted.c" in b and why in b for b in bad)]
        if missed:
            print("doc-pointers: self-test: not caught: %s" % "; ".join(missed))
            return 1
        print("doc-pointers: self-test: all %d planted wrong pointers caught" % len(planted))
        return 0
    finally:
        shutil.rmtree(tmp)


def main():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    if sys.argv[1:] == ["--self-test"]:
        return self_test(root)
    bad, n = check(root)
    for b in bad:
        print("doc-pointers: " + b)
    if bad:
        return 1
    print("doc-pointers: %d citations of docs sections, %d paths, %d file names and %d \"name in file\" "
          "pointers in the comments of src/ and layer/ hold" % (n["citations"], n["paths"], n["names"], n["holds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
