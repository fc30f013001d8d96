"""`python3 -m growformer COMMAND ...`: the growformer program (`growformer train CONFIG`,
`growformer plugins list`, ...) that came with this package, with the same arguments, output
and exit status. An installed package also has it as the `growformer` script."""
import os
import site
import sys


def program():
    """The path of the growformer program of this package (its build tree's, or the one
    installed with it)."""
    from . import _program

    here = os.path.dirname(os.path.abspath(__file__))
    path = _program.PROGRAM
    if _program.RELATIVE:
        path = os.path.normpath(os.path.join(here, path))
    return path


def _environment():
    # A Python policy runs in the program's own interpreter, which starts as the Python it was
    # built for: in a venv, it gets the venv's site-packages too, as this one has them.
    env = dict(os.environ)
    if sys.prefix == getattr(sys, "base_prefix", sys.prefix):
        return env
    venv = [d for d in site.getsitepackages()
            if os.path.isdir(d) and os.path.abspath(d).startswith(os.path.abspath(sys.prefix) + os.sep)]
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts + [d for d in venv if d not in parts])
    return env


def main(argv=None):
    """Runs the growformer program with ARGV (default: this process's arguments); does not
    return (the program replaces this process), except with 2 when the program is missing."""
    args = sys.argv[1:] if argv is None else list(argv)
    path = program()
    if not os.access(path, os.X_OK):
        sys.stderr.write(f"growformer: the program {path} of this package is missing or not "
                         "executable; build it (cmake --build build) or reinstall the package "
                         "(pip install --no-build-isolation .)\n")
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(path, [path, *args], _environment())


if __name__ == "__main__":
    sys.exit(main())
