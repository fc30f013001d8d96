#!/usr/bin/env python3
"""docs/OPTIONS.md against the built plugins.

The option tables in docs/OPTIONS.md are the output of `growformer plugins describe --markdown`.
This checks that every component the build has is in the file exactly as the program describes
it (a component the build lacks, such as `python` in a build without the Python module, may
stay in the file), and with --write makes the file again from the program.

    tools/options_doc.py BUILD/bin/growformer [--write]
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "OPTIONS.md"
INTRO = """# Options of every component

The run's own settings (the config's top level, `train:`, `train.switch:`, `model:`), then each
component a plugin registers, with its options as YAML takes them (`model.attention:`,
`model.attention.head:`, `growth:`, `pruning:`, `data:`, `optimizer:`). Made by
`growformer plugins describe --markdown` (`tools/options_doc.py build/bin/growformer --write`);
the `options_doc` test fails when a table here differs from what the build declares.

"""


def sections(text):
    """The `## ` sections of TEXT by heading, each with its body (without trailing blank lines)."""
    out, name, body = {}, None, []
    for line in text.splitlines():
        if line.startswith("## "):
            if name is not None:
                out[name] = "\n".join(body).rstrip()
            name, body = line, []
        elif name is not None:
            body.append(line)
    if name is not None:
        out[name] = "\n".join(body).rstrip()
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    program = sys.argv[1]
    made = subprocess.run([program, "plugins", "describe", "--markdown"], check=True,
                          capture_output=True, text=True).stdout
    if "--write" in sys.argv[2:]:
        DOC.write_text(INTRO + made)
        print(f"{DOC}: {len(sections(made))} components")
        return 0
    if not DOC.exists():
        print(f"{DOC} is missing; make it with: tools/options_doc.py {program} --write")
        return 1
    have, want = sections(DOC.read_text()), sections(made)
    bad = []
    for name, body in want.items():
        if name not in have:
            bad.append(f"{name}: not in {DOC.name}")
        elif have[name] != body:
            a, b = have[name].splitlines(), body.splitlines()
            first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            bad.append(f"{name}: differs at its line {first + 1}:\n  file:    "
                       f"{a[first] if first < len(a) else '(end)'}\n  program: "
                       f"{b[first] if first < len(b) else '(end)'}")
    if bad:
        print("\n".join(bad))
        print(f"{len(bad)} of {len(want)} components differ; make the file again with: "
              f"tools/options_doc.py {program} --write")
        return 1
    print(f"{DOC.name}: the {len(want)} components of this build, as the program describes them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
