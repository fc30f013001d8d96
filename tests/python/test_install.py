"""The package as a user installs and starts it: `pip install --no-build-isolation .` into a venv
(this build tree, packaged as setup.py packages any: GROWFORMER_CMAKE_BUILD_DIR), imported and
trained from outside the repository, `python3 -m growformer` and the `growformer` script running
the program, and the numpy check at import."""
import json
import os
import subprocess
import sys

import pytest

import growformer as gf
from conftest import SOURCE, TINY, cli, python_growth

BUILD_DIR = os.environ.get("GF_BUILD_DIR", "")


def run(cmd, cwd=None, env=None, timeout=300):
    """CMD: (exit status, stdout and stderr together)."""
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return r.returncode, r.stdout


def test_import_without_numpy_names_numpy_and_how_to_install_it():
    # numpy made unimportable (a None in sys.modules fails `import numpy` as a missing module)
    code = "import sys; sys.modules['numpy'] = None; import growformer"
    rc, out = run([sys.executable, "-c", code])
    assert rc != 0
    last = out.strip().splitlines()[-1]
    assert last.startswith("ImportError: growformer needs numpy"), out
    assert "apt-get install python3-numpy" in last and "pip install numpy" in last
    assert sys.executable in last
    # at import of the package, before the extension: nothing half-imported is left behind
    rc, out = run([sys.executable, "-c",
                   "import sys; sys.modules['numpy'] = None\ntry:\n    import growformer\n"
                   "except ImportError as e:\n    print(e.name, 'growformer._core' in sys.modules)"])
    assert rc == 0 and out.split() == ["numpy", "False"], out


def test_python_m_growformer_runs_the_program(tiny):
    rc, out = run([sys.executable, "-m", "growformer", "plugins", "list"])
    rc_cli, out_cli = cli("plugins", "list")
    assert rc == rc_cli == 0, out
    assert out == out_cli and "python " in out
    # arguments, messages and the exit status pass through (2: a configuration error)
    rc, out = run([sys.executable, "-m", "growformer", "config", "check", tiny, "--set", "train.stpes=3"])
    assert rc == 2 and "did you mean `steps`" in out, out


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv (with the system's numpy) with this build tree pip-installed in it."""
    if not BUILD_DIR:
        pytest.skip("GF_BUILD_DIR is not set (run through ctest)")
    rc, out = run([sys.executable, "-c", "import ensurepip, setuptools, wheel"])
    if rc != 0:
        pytest.skip("a venv with pip install needs ensurepip, setuptools and wheel for "
                    f"{sys.executable} (apt-get install python3-venv python3-wheel): {out.strip()}")
    root = tmp_path_factory.mktemp("install")
    rc, out = run([sys.executable, "-m", "venv", "--system-site-packages", root / "venv"])
    assert rc == 0, out
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(GROWFORMER_CMAKE_BUILD_DIR=BUILD_DIR, GROWFORMER_CMAKE_NO_BUILD="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    rc, out = run([root / "venv" / "bin" / "python", "-m", "pip", "install", "--no-build-isolation",
                   "--no-index", SOURCE], cwd=root, env=env)
    assert rc == 0, out
    return root / "venv"


def outside(venv, tmp_path):
    """Environment and folder of a user outside the repository: nothing of the build on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GROWFORMER_PLUGIN_PATH")}
    env["PATH"] = str(venv / "bin") + os.pathsep + env.get("PATH", "")
    work = tmp_path / "user"
    work.mkdir()
    return env, work


def test_pip_installed_package_trains_outside_the_repository(venv, tmp_path):
    env, work = outside(venv, tmp_path)
    (work / "tiny.yaml").write_text(TINY)
    site = str(venv / "lib")
    grow = python_growth("ImportsGrowformer", at=20)
    code = ("import json, growformer as gf\n"
            f"r = gf.Experiment('tiny.yaml', overrides=[{grow!r}]).train('module')\n"
            "print(json.dumps({'file': gf.__file__, 'finished': r['finished'], "
            "'heads': r['test']['heads']}))\n")
    rc, out = run([venv / "bin" / "python", "-c", code], cwd=work, env=env)
    assert rc == 0, out
    got = json.loads(out.strip().splitlines()[-1])
    assert got["file"].startswith(site) and got["finished"] and got["heads"] == [3], got

    # the program of the package, three ways: python -m growformer, the script, the binary
    # itself (whose `python` plugin finds the package beside it for `import growformer`)
    program = os.path.join(os.path.dirname(got["file"]), "bin", "growformer")
    for name, cmd in (("m", [venv / "bin" / "python", "-m", "growformer"]),
                      ("script", [venv / "bin" / "growformer"]),
                      ("binary", [program])):
        rc, out = run([*cmd, "train", "tiny.yaml", "--run-dir", name, "--quiet", "--set", grow],
                      cwd=work, env=env)
        assert rc == 0, (name, out)
        events = gf.read_events(str(work / name))
        assert events == gf.read_events(str(work / "module")), name
        imported = [e for e in events if e["type"] == "imported"]
        assert imported and imported[0]["file"].startswith(site), (name, imported)

    # every plugin comes from the package, none from the build tree
    rc, out = run([venv / "bin" / "growformer", "plugins", "list", "--json"], cwd=work, env=env)
    assert rc == 0, out
    libraries = {c["library"] for c in json.loads(out)["components"]}
    assert libraries and all(lib.startswith(site) for lib in libraries), libraries
    assert any(lib.endswith("libgf_growth_python.so") for lib in libraries)
