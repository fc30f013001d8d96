"""The `python` policy plugin runs in the interpreter this build was made for, whatever python3
is first on PATH (a pyenv one, say), and `growformer plugins describe python` names it."""
import os
import sys

from conftest import cli


def test_program_embeds_the_build_python_whatever_python3_is_first_on_path(tiny, tmp_path,
                                                                           monkeypatch):
    # another python3 first on PATH, beside a standard library that is not the build's
    fake = tmp_path / "other-python"
    (fake / "bin").mkdir(parents=True)
    exe = fake / "bin" / "python3"
    exe.write_text("#!/bin/sh\nexit 1\n")
    exe.chmod(0o755)
    lib = fake / "lib" / ("python%d.%d" % sys.version_info[:2])
    lib.mkdir(parents=True)
    (lib / "os.py").write_text("raise ImportError('the standard library of another python3')\n")
    monkeypatch.setenv("PATH", "%s:%s" % (fake / "bin", os.environ.get("PATH", "")))
    (tmp_path / "where.py").write_text(
        "import os, sys\n"
        "class Where:\n"
        "    def __init__(self, out):\n"
        "        open(out, 'w').write(os.__file__ + '\\n' + sys.version)\n"
        "    def check(self, view):\n"
        "        return []\n")
    out = tmp_path / "where.txt"
    growth = "growth={plugin: python, class: where.Where, path: [%s], options: {out: %s}}" % (
        tmp_path, out)
    code, text = cli("train", tiny, "--run-dir", str(tmp_path / "run"), "--quiet",
                     "--set", "train.steps=10", "--set", growth)
    assert code == 0, text
    stdlib, version = out.read_text().split("\n", 1)
    assert stdlib.startswith(sys.base_prefix), stdlib
    assert version == sys.version
    code, text = cli("plugins", "describe", "python")
    assert code == 0 and "interpreter: " in text and sys.version.split()[0] in text, text
