"""`pip install .`: the Python package growformer with its C++ core, the growformer program and
its plugins, built by CMake (offline, with Debian's setuptools; see README, "Python"):

    python3 -m venv --system-site-packages ~/gf-venv   # numpy, pybind11 and setuptools from apt
    ~/gf-venv/bin/pip install --no-build-isolation .

The build is a CMake build tree (build-wheel/ here, configured for the Python that runs pip,
without the test suites; GROWFORMER_CMAKE_BUILD_DIR=DIR uses another, an existing one such as
build/ as it is configured). Its `cmake --install` goes into a staging folder, and the wheel's
package folder is that install: the package's own files (growformer/_core*.so, *.py) at its top,
the rest of the prefix under it (growformer/lib: the libraries and lib/growformer/plugins;
growformer/bin/growformer: the program that `python3 -m growformer` and the `growformer`
script run). Headers and the CMake package stay out (build plugins against a `cmake --install`).

Environment: GROWFORMER_CMAKE_BUILD_DIR (the build tree), GROWFORMER_CMAKE_ARGS (more configure
arguments for a new tree), CMAKE_BUILD_PARALLEL_LEVEL (compile jobs), GROWFORMER_CMAKE_NO_BUILD=1
(package the tree as it is built, without `cmake --build`: what the tests do with theirs).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get("GROWFORMER_CMAKE_BUILD_DIR") or os.path.join(ROOT, "build-wheel"))
# setuptools' own folders (its default build/ is the CMake build of the README)
SETUPTOOLS_DIR = os.path.join(BUILD, "setuptools")


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(growformer\s+VERSION\s+([0-9.]+)", f.read())
    if not m:
        raise SystemExit(f"{ROOT}/CMakeLists.txt: no `project(growformer VERSION x.y.z)`")
    return m.group(1)


def cmake_cache(build):
    """The CMake cache of BUILD as {name: value}."""
    out = {}
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(r"([A-Za-z_][A-Za-z0-9_.+-]*):[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                out[m.group(1)] = m.group(2)
    return out


def run(cmd, **kw):
    print("growformer setup.py:", " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def copy_install(stage, cache, package):
    """The install at STAGE into the package folder PACKAGE: STAGE/<python dir>/growformer's files
    at its top, the rest of STAGE under it; headers and CMake files left out; a versioned shared
    library (libX.so -> libX.so.0 -> libX.so.0.1.0) once, under the name the loader asks for."""
    python_dir = cache["GROWFORMER_PYTHON_INSTALL_DIR"]
    pkg_src = os.path.join(stage, python_dir, "growformer")
    if not os.path.isdir(pkg_src):
        raise SystemExit(f"growformer setup.py: the install has no {python_dir}/growformer")
    libdir = cache.get("CMAKE_INSTALL_LIBDIR", "lib")
    skip = {os.path.normpath(os.path.join(stage, p)) for p in
            (python_dir, cache.get("CMAKE_INSTALL_INCLUDEDIR", "include"), libdir + "/cmake")}
    for dirpath, dirnames, filenames in os.walk(stage):
        dirnames[:] = [d for d in dirnames if os.path.normpath(os.path.join(dirpath, d)) not in skip]
        rel = os.path.relpath(dirpath, stage)
        for name in filenames:
            src = os.path.join(dirpath, name)
            if re.search(r"\.so\.\d+\.\d+", name) and not os.path.islink(src):
                continue  # the real file of libX.so.0: copied under that name below
            if os.path.islink(src) and not re.search(r"\.so\.\d+$", name):
                continue  # the development link libX.so
            dst = os.path.join(package, rel, name)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.realpath(src), dst)
    for name in os.listdir(pkg_src):
        src = os.path.join(pkg_src, name)
        if os.path.isfile(src):
            shutil.copy2(src, os.path.join(package, name))


class CMakeBuild(build_ext):
    """Builds the extension growformer._core, and everything it installs with it, with CMake."""

    def build_extension(self, ext):
        cmake = shutil.which("cmake")
        if not cmake:
            raise SystemExit("growformer setup.py: building needs cmake and the C++ dependencies "
                             "(README, the apt-get line of the set-up)")
        env = dict(os.environ)
        env.setdefault("CCACHE_BASEDIR", ROOT)  # ccache hits across build folders
        fresh = not os.path.exists(os.path.join(BUILD, "CMakeCache.txt"))
        if fresh:
            args = [cmake, "-S", ROOT, "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release",
                    "-DGROWFORMER_TESTS=OFF", "-DGROWFORMER_PYTHON=ON",
                    f"-DPython_EXECUTABLE={sys.executable}"]
            if shutil.which("ninja"):
                args += ["-G", "Ninja"]
            run(args + shlex.split(env.get("GROWFORMER_CMAKE_ARGS", "")), env=env)
        cache = cmake_cache(BUILD)
        # a tree configured for another Python builds an extension this one cannot import
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        python_dir = cache.get("GROWFORMER_PYTHON_INSTALL_DIR", "")
        if not python_dir or cache.get("GROWFORMER_PYTHON", "ON").upper() in ("OFF", "0", "FALSE", "NO"):
            raise SystemExit(f"growformer setup.py: {BUILD} builds no Python module "
                             "(GROWFORMER_PYTHON is off, or pybind11 was not found: apt-get "
                             "install python3-dev python3-pybind11 pybind11-dev)")
        want = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        if want not in python_dir:
            raise SystemExit(f"growformer setup.py: {BUILD} is configured for another Python "
                             f"({python_dir}); this is {sys.executable} ({want}): use another "
                             "GROWFORMER_CMAKE_BUILD_DIR")
        if env.get("GROWFORMER_CMAKE_NO_BUILD", "") in ("", "0"):
            run([cmake, "--build", BUILD], env=env)
        elif fresh:
            raise SystemExit(f"growformer setup.py: GROWFORMER_CMAKE_NO_BUILD=1 packages a tree "
                             f"that is built already; {BUILD} has not been built")
        stage = os.path.join(BUILD, "wheel-stage")
        shutil.rmtree(stage, ignore_errors=True)
        run([cmake, "--install", BUILD, "--prefix", stage], env=env)
        package = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(package, exist_ok=True)
        copy_install(stage, cache, package)
        core = [n for n in os.listdir(package) if n.startswith("_core.") and n.endswith(".so")]
        if core != ["_core" + suffix]:
            raise SystemExit(f"growformer setup.py: the install gave {core}, not _core{suffix} "
                             f"for {sys.executable}")
        bindir = cache.get("CMAKE_INSTALL_BINDIR", "bin")
        if not os.path.isfile(os.path.join(package, bindir, "growformer")):
            raise SystemExit(f"growformer setup.py: the install has no {bindir}/growformer")
        with open(os.path.join(package, "_program.py"), "w") as f:
            f.write("# written by setup.py: the growformer program of this wheel, relative to "
                    "this folder\n"
                    f"PROGRAM = {bindir + '/growformer'!r}\nRELATIVE = True\n")


os.makedirs(SETUPTOOLS_DIR, exist_ok=True)
setup(
    version=version(),
    packages=["growformer"],
    package_dir={"": "python"},
    package_data={"growformer": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("growformer._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join(SETUPTOOLS_DIR, "build")},
             "egg_info": {"egg_base": SETUPTOOLS_DIR}},
    zip_safe=False,
)
