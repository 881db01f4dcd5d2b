# SPDX-License-Identifier: Apache-2.0
"""Pointers in the comments of src/ and layer/ (their subfolders too) name a place that holds what
they say (STYLE.md, point 10). Checked in every comment:

- a citation `docs/X.md, "Section"` (or `docs/X.md "Section"`): the file
  exists and has a heading that is, or starts with, Section, or whose title
  after a date does (a heading "Round 3 (2026-11-23): engine, registration"
  answers "engine");
- a repository path (src/x.c, docs/X.md, bench/..., tests/..., ...) exists;
- a bare file name (see foo.c, in foo.c, (foo.h)) names a file beside the
  comment's file, or of src/, layer/ or include/;
- `name in foo.c` and `name (foo.c)`, where name is a C identifier with an
  underscore (count_move, clpin__pool_enter), name a file that holds name.

Also: no user page (README.md, docs/*.md but the reports BENCHMARKS.md and
benchmarks/HISTORY.md) and no comment of src/, layer/, include/ or
examples/, nor python/clpin, speaks of the project's internal rounds of
measurement ("round 9", "round16", "this round", "the round"): a reader
knows dates and section titles, not rounds. "round trip", "round robin",
"rounded", "around" are other words.

And the anchors of the docs' links ([..](X.md#anchor), [..](#anchor) in
README.md, CONTRIBUTING.md, docs/ and docs/benchmarks/) name a heading of
that page, as GitHub makes anchors of headings.

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
ROUND = re.compile(r"\b(?:round ?[0-9]|this round\b|the round\b(?![ -](?:trip|robin)))", re.I)
# The reports, where archive names and the history's rounds belong.
REPORTS = {"docs/BENCHMARKS.md"}
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
        title = re.sub(r"^.*?\([0-9]{4}-[0-9]{2}-[0-9]{2}[^)]*\):\s*", "", h)
        for t in (h, title):
            if t == section or (t.startswith(section) and not t[len(section)].isalnum()):
                return True
    return False


def find(name, here):
    for d in (here,) + LOOKIN:
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    return None


def rounds(root):
    """Internal-round talk in user pages and comments: a list of "where: text"."""
    bad = []
    pages = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs")))
    for page in pages:
        path = os.path.join(root, page)
        if not page.endswith(".md") or page in REPORTS or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                for m in ROUND.finditer(line):
                    bad.append('%s:%d speaks of rounds ("%s"): give a date, a section or a link' % (page, i, m.group(0)))
    for d in ("src", "layer", "include", "examples", "python/clpin"):
        top = os.path.join(root, d)
        for r, _, fs in os.walk(top):
            for name in sorted(fs):
                src = os.path.join(r, name)
                rel = os.path.relpath(src, root)
                if name.endswith((".c", ".h")):
                    with open(src, encoding="utf-8") as f:
                        texts = comments(f.read())
                elif name.endswith(".py"):
                    with open(src, encoding="utf-8") as f:
                        texts = list(enumerate(f.read().splitlines(), 1))
                else:
                    continue
                for line, c in texts:
                    for m in ROUND.finditer(c):
                        bad.append('%s:%d speaks of rounds ("%s"): give a date, a section or a link' % (rel, line, m.group(0)))
    return bad


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    h = re.sub(r"[`*]", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", h).replace(" ", "-")


def anchors(path):
    out, fenced = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fenced = not fenced
            elif not fenced and re.match(r"#+\s", line):
                out.add(slug(re.sub(r"^#+\s+", "", line)))
    return out


def links(root):
    """Links to a heading that is not there: a list of "where: text"."""
    bad, n = [], 0
    pages = ["README.md", "CONTRIBUTING.md"]
    for d in ("docs", "docs/benchmarks"):
        if os.path.isdir(os.path.join(root, d)):
            pages += sorted(os.path.join(d, f) for f in os.listdir(os.path.join(root, d)) if f.endswith(".md"))
    for page in pages:
        path = os.path.join(root, page)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in re.finditer(r"\]\(([^)\s#]*)#([^)\s]+)\)", text):
            target = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1))) if m.group(1) else path
            if not target.endswith(".md") or not os.path.isfile(target):
                continue  # 60-docs checks that the file exists
            n += 1
            if m.group(2) not in anchors(target):
                line = text.count("\n", 0, m.start()) + 1
                bad.append("%s:%d links to %s#%s: no such heading there" % (page, line, m.group(1) or page, m.group(2)))
    return bad, n


def check(root):
    os.chdir(root)
    bad, nlinks = links(root)
    bad += rounds(root)
    n = {"citations": 0, "paths": 0, "names": 0, "holds": 0, "anchors": nlinks}
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
        shutil.copy(os.path.join(root, "README.md"), tmp)
        planted = {
            "docs/DESIGN.md, \"No Such Section\"": "no such heading",
            "docs/NOPE.md, \"Intro\"": "no such file",
            "bench/no-such-program.c": "no such file",
            "see nowhere.c": "not a file of",
            "count_move in registry.c": "it is not",
            "as measured in round 9": "speaks of rounds",
            "the figures of this round": "speaks of rounds",
        }
        with open(os.path.join(tmp, "src", "planted.c"), "w") as f:
            for text in planted:
                f.write("/* %s */\n" % text)
        # A user page: internal rounds caught, other words with "round" not;
        # the report page keeps its archive names.
        page = {
            "Measured in round 16.": True,
            "See `bench/results/h200-round15.tar.xz`.": True,
            "Second run of the round (call 3).": True,
            "[Figures](MPI.md#no-such-heading)": True,
            "A round trip, round robin, rounded up, around 5 us.": False,
            "Rounds of traffic, the round-trip time.": False,
        }
        with open(os.path.join(tmp, "docs", "PLANTED.md"), "w") as f:
            f.write("".join(t + "\n" for t in page))
        with open(os.path.join(tmp, "docs", "BENCHMARKS.md"), "a") as f:
            f.write("`bench/results/h200-round16.tar.xz`, this round\n")
        bad, _ = check(tmp)
        missed = [t for t, why in planted.items() if not any("planted.c" in b and why in b for b in bad)]
        for i, (t, caught) in enumerate(page.items(), 1):
            if caught != any(b.startswith("docs/PLANTED.md:%d " % i) for b in bad):
                missed.append("%s (%s)" % (t, "not caught" if caught else "caught, yet not wrong"))
        missed += ["docs/BENCHMARKS.md's archive name (a report, yet caught)"] if any(
            b.startswith("docs/BENCHMARKS.md:") and "rounds" in b for b in bad) else []
        if missed:
            print("doc-pointers: self-test: wrong: %s" % "; ".join(missed))
            return 1
        print("doc-pointers: self-test: all %d planted wrong pointers and %d round mentions or wrong anchors caught, "
              "%d other uses of the word and the report's archive names left alone"
              % (len(planted), sum(page.values()), len(page) - sum(page.values())))
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
          "pointers in the comments of src/ and layer/ hold; %d links to headings find them; "
          "no user page or comment speaks of rounds" % (n["citations"], n["paths"], n["names"], n["holds"], n["anchors"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
