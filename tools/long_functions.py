#!/usr/bin/env python3
"""Lists C++ and Python functions longer than a limit (default 80 lines: C++ from the header
line to the closing brace, Python from the `def` line to its last line).

    tools/long_functions.py [--limit N] [PATH ...]   (default: core data plugins apps python tools)

A PATH is a folder (every .cpp, .hpp, .h, .cc and .py under it) or one file, relative to the
repository's root or absolute. A C++ function is a brace block opened on a line that looks like a
function header (a name, an argument list, no control keyword); lambdas inside a function count
towards it. Comments and strings are blanked first, so braces in them do not count. A Python
function is a `def` (a method too) read by Python's own parser; a function nested in another
counts towards it and is measured on its own as well. Exits 1 when any function is over, 2 when a PATH does
not exist (a default folder that was moved must be renamed here, not silently skipped).
"""
import argparse
import ast
import os
import re
import sys

CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|return|namespace|struct|class|enum|union)\b")


def blank(text):
    """Comments and string/char literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = ")" + (m.group(1) if m else "") + '"'
            j = text.find(end, i)
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    text = blank(open(path, encoding="utf-8", errors="replace").read())
    depth, stack = 0, []  # (depth at the function's brace, first line, name)
    pending, pending_line, line = "", None, 1  # text since the last ; { } and where it began
    for ch in text:
        if ch == "\n":
            line += 1
        if ch == "{":
            head = " ".join(pending.split())
            if not stack and "(" in head and not CONTROL.search(head) and not head.startswith("#") \
                    and "=" not in head.split("(")[0] and re.search(r"\)[\w\s:&*<>,()\[\]{}.\-]*$", head):
                m = re.search(r"([\w:~]+)\s*\(", head)
                stack.append((depth, pending_line or line, m.group(1) if m else "?"))
            depth += 1
            pending, pending_line = "", None
        elif ch == "}":
            depth -= 1
            if stack and depth == stack[-1][0]:
                d, start, name = stack.pop()
                yield name, start, line, line - start + 1
            pending, pending_line = "", None
        elif ch == ";":
            pending, pending_line = "", None
        else:
            if pending_line is None and not ch.isspace():
                pending_line = line
            if ch == "\n" and pending.strip().startswith("#"):
                pending, pending_line = "", None  # a preprocessor line
            else:
                pending += ch


def python_functions(path):
    """(name, first line, last line, lines) of every def in the Python file PATH."""
    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno, node.end_lineno - node.lineno + 1


def sources(root, paths):
    """The C++ and Python files under each path (a folder or a file); exits 2 on a path that does not exist."""
    out = []
    for d in paths:
        full = os.path.join(root, d)
        if os.path.isfile(full):
            out.append(full)
            continue
        if not os.path.isdir(full):
            print(f"long_functions: no such file or folder: {d}", file=sys.stderr)
            sys.exit(2)
        for sub, subdirs, files in os.walk(full):
            subdirs[:] = sorted(s for s in subdirs if not s.startswith(("build", ".")))
            out += [os.path.join(sub, f) for f in sorted(files) if f.endswith((".cpp", ".hpp", ".h", ".cc", ".py"))]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("paths", nargs="*", default=["core", "data", "plugins", "apps", "python", "tools"])
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    over = []
    for p in sources(root, a.paths):
        for name, s, e, n in (python_functions(p) if p.endswith(".py") else functions(p)):
            if n > a.limit:
                over.append((n, os.path.relpath(p, root), s, name))
    for n, p, s, name in sorted(over, reverse=True):
        print(f"{n:5d}  {p}:{s}  {name}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
