#!/usr/bin/env python3
"""Checks the links between the project's Markdown pages: every [text](target) whose target is a
file in the tree names a file that exists, and an anchor (#...) names a heading of that page
(GitHub's slugs: lower case, punctuation dropped, spaces as hyphens, -1, -2 ... for repeats).

    tools/doc_links.py [FILE.md ...]   (default: README.md and every .md under docs/)

Links to other sites (scheme:) are not followed. Exits 1 when any link does not resolve.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def slug(heading):
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def anchors(path):
    seen, out, fence = {}, set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            out.add(s if n == 0 else f"{s}-{n}")
            seen[s] = n + 1
    return out


def broken(path, cache):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # code blocks are not links
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        link = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", link):
            continue
        target, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
        if not os.path.exists(target):
            yield link, f"no file {os.path.relpath(target, ROOT)}"
        elif anchor and target.endswith(".md"):
            if target not in cache:
                cache[target] = anchors(target)
            if anchor not in cache[target]:
                yield link, f"no heading with the anchor #{anchor}"


def main(argv):
    files = [os.path.abspath(f) for f in argv]
    if not files:
        files = [os.path.join(ROOT, "README.md")]
        for sub, _, names in os.walk(os.path.join(ROOT, "docs")):
            files += [os.path.join(sub, f) for f in sorted(names) if f.endswith(".md")]
    cache, bad = {}, 0
    for f in files:
        for link, why in broken(f, cache):
            print(f"{os.path.relpath(f, ROOT)}: ({link}): {why}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
