#!/usr/bin/env python3
"""Checks that the C++ sources are formatted as .clang-format says (clang-format 14, Debian 12's).

    tools/format_check.py [--clang-format PATH] [--fix] [DIR ...]
        (default: apps core data examples fuzz plugins python tests tools)

Lists every file clang-format would change and exits 1 when there is one; --fix rewrites them
in place. Another clang-format major version formats some constructs differently, so the check
skips under one (exit 77, ctest's skip code here) rather than report differences that are the
tool's, not the code's; a clang-format that fails exits 2.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ["apps", "core", "data", "examples", "fuzz", "plugins", "python", "tests", "tools"]
SUFFIXES = (".cpp", ".hpp", ".h", ".cc")
MAJOR = 14


def sources(dirs):
    out = []
    for d in dirs:
        for base, subdirs, files in os.walk(os.path.join(ROOT, d)):
            subdirs[:] = sorted(s for s in subdirs if not s.startswith(("build", ".")))
            out += [os.path.join(base, f) for f in sorted(files) if f.endswith(SUFFIXES)]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clang-format", default="clang-format")
    ap.add_argument("--fix", action="store_true")
    ap.add_argument("dirs", nargs="*", default=DIRS)
    a = ap.parse_args()
    version = subprocess.run([a.clang_format, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"version (\d+)\.", version)
    if not m or int(m.group(1)) != MAJOR:
        print(f"format_check: skipped: needs clang-format {MAJOR} (apt-get install clang-format-{MAJOR}); "
              f"{a.clang_format} is {version.strip() or 'not runnable'}")
        return 77
    files = sources(a.dirs)
    # one clang-format for all files: --dry-run names each change as FILE:LINE:COL: warning
    r = subprocess.run([a.clang_format, "--dry-run"] + files, capture_output=True, text=True,
                       cwd=ROOT)
    flagged = {line.split(":", 1)[0] for line in r.stderr.splitlines() if ": warning:" in line}
    bad = [os.path.relpath(f, ROOT) for f in files if f in flagged]
    if r.returncode != 0 and not flagged:
        print("format_check: clang-format failed:\n" + r.stderr)
        return 2
    if bad and a.fix:
        subprocess.run([a.clang_format, "-i"] + [os.path.join(ROOT, f) for f in bad], check=True)
    if bad and not a.fix:
        print("format_check: clang-format would change these files (tools/format_check.py --fix):")
        for f in bad:
            print("  " + f)
        return 1
    verb = "reformatted" if a.fix else "formatted as .clang-format says"
    print(f"format_check: {len(files)} files, {len(bad) if a.fix else len(files)} {verb}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
