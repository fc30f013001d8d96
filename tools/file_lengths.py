#!/usr/bin/env python3
"""No source or header file over 750 lines: one concept per file.

    tools/file_lengths.py [--limit N] [PATH ...]   (default: core data plugins apps python tools)

Reads the C and C++ sources and headers (.cpp .cc .c .hpp .h, and .in templates of them) and
the Python files (.py .pyi) under each PATH (a folder, or one file), relative to the
repository's root or absolute. Tests are aside (folders named tests or test are not read; the
tests/ folder is not among the defaults), and so are generated files (none is kept in the
tree: the build writes them under build*/, which is skipped, as are hidden folders).

A file over the limit fails, unless ALLOWED below lists it: then it fails only when it has grown
past the ceiling written there. A listed file that is at or under the limit, or gone, fails too,
with the line to delete, so the list only shrinks. Exits 1 on any failure, 2 when a PATH does
not exist (a default folder that was moved must be renamed here, not silently skipped).
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUFFIXES = (".cpp", ".cc", ".c", ".hpp", ".h", ".hpp.in", ".h.in", ".py", ".pyi")
DEFAULT = ["core", "data", "plugins", "apps", "python", "tools"]

# Files over 750 lines being split, each with its line count as a ceiling that may fall and not
# rise; when one is at or under the limit its line must go (the check fails until it does). Empty
# since the last five (incrt_geometric.cpp, onednn_step.cpp, python/src/module.cpp,
# row_kernels_impl.hpp, trainer_loop.cpp) were split. Never add a file here: split it.
ALLOWED: dict = {}


def lines(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return sum(1 for _ in f)


def sources(paths):
    """The files to read under each path (a folder or a file); exits 2 on a path that does not exist."""
    out = []
    for d in paths:
        full = os.path.join(ROOT, d)
        if os.path.isfile(full):
            out.append(full)
            continue
        if not os.path.isdir(full):
            print(f"file_lengths: no such file or folder: {d}", file=sys.stderr)
            sys.exit(2)
        for sub, subdirs, files in os.walk(full):
            subdirs[:] = sorted(s for s in subdirs
                                if not s.startswith(("build", ".")) and s not in ("tests", "test"))
            out += [os.path.join(sub, f) for f in sorted(files) if f.endswith(SUFFIXES)]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=750)
    ap.add_argument("paths", nargs="*", default=DEFAULT)
    a = ap.parse_args()
    failures, seen = [], set()
    for p in sources(a.paths):
        rel = os.path.relpath(p, ROOT)
        n = lines(p)
        ceiling = ALLOWED.get(rel)
        if ceiling is not None:
            seen.add(rel)
            if n > ceiling:
                failures.append(f"{rel}: {n} lines, grown past its ceiling of {ceiling} in "
                                f"tools/file_lengths.py: split it, do not raise the ceiling")
            elif n <= a.limit:
                failures.append(f"{rel}: {n} lines, at or under {a.limit} now: delete its line "
                                f"from ALLOWED in tools/file_lengths.py")
        elif n > a.limit:
            failures.append(f"{rel}: {n} lines, over {a.limit}: split it into files of one concept")
    if a.paths == DEFAULT:  # a listed file that is gone (moved or split under other names)
        for rel in sorted(set(ALLOWED) - seen):
            failures.append(f"{rel}: listed in ALLOWED but not found: delete its line")
    for f in failures:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
