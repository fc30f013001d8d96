"""A config given as Python objects, as the JSON text (which is YAML) the C++ config reads.

Beyond JSON's own values it takes: a policy class as the class object (`class: MyPolicy`),
recorded as `module.Class` with the folder of its module added to the mapping's `path` (so the
`growformer` program and a resume in another process find it too); numpy numbers and arrays;
paths (os.PathLike); tuples as lists. Anything else is one ConfigError naming its key.
"""
import importlib
import json
import math
import numbers
import os
import sys

import numpy as np


def _error(message):
    from ._core import ConfigError

    return ConfigError(message)


def class_path(cls, where):
    """`module.Class` of the policy class CLS and the folder to put on sys.path for it (None
    when the module needs none: __main__, or a module without a file); ConfigError naming WHERE
    when the class cannot be found again by that name."""
    module, qualname = getattr(cls, "__module__", None), getattr(cls, "__qualname__", "")
    if not module or "<locals>" in qualname or "." in qualname:
        raise _error(f"{where}: the class {cls!r} is defined inside a function or another class; "
                     "a policy class is found again by module.Class (for checkpoints and resumes), "
                     "so define it at the top level of a module")
    try:
        mod = sys.modules.get(module) or importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - reported with the class
        raise _error(f"{where}: the module `{module}` of {cls!r} cannot be imported: {e}") from e
    if getattr(mod, qualname, None) is not cls:
        raise _error(f"{where}: {cls!r} is not `{module}.{qualname}` (the module's name is bound "
                     "to another object); give the class as the string module.Class")
    folder = None
    file = getattr(mod, "__file__", None)
    if module != "__main__" and file:
        folder = os.path.dirname(os.path.abspath(file))
        up = module.count(".") + (1 if os.path.basename(file).startswith("__init__.") else 0)
        for _ in range(up):
            folder = os.path.dirname(folder)
    return f"{module}.{qualname}", folder


def plain(value, where):
    """VALUE as JSON-ready Python (dicts, lists, str, int, float, bool, None)."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):  # int, numpy integers
        return int(value)
    if isinstance(value, numbers.Real):  # float, numpy floats
        v = float(value)
        if math.isnan(v) or math.isinf(v):
            raise _error(f"{where}: {value!r} is not a number a config can hold")
        return v
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, os.PathLike):
        return os.fsdecode(os.fspath(value))
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _error(f"{where}: the key {k!r} is not a str")
            key = f"{where}.{k}" if where else k
            out[k] = class_path(v, key)[0] if k == "class" and isinstance(v, type) else plain(v, key)
        cls = value.get("class")
        if isinstance(cls, type):
            folder = class_path(cls, f"{where}.class" if where else "class")[1]
            paths = out.get("path", [])
            if isinstance(paths, str):
                paths = [paths]
            if folder and folder not in paths:
                out["path"] = list(paths) + [folder]
        return out
    if isinstance(value, np.ndarray):
        return [plain(v, f"{where}[{i}]") for i, v in enumerate(value.tolist())]
    if isinstance(value, (list, tuple)):
        return [plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, type):
        raise _error(f"{where}: a class object is a config value only as a policy's `class`")
    raise _error(f"{where or 'config'}: {value!r} ({type(value).__name__}) is not a config value "
                 "(str, number, bool, None, list, dict, path, or a policy class as `class`)")


def config_json(config):
    """CONFIG (a dict) as JSON text for the C++ config reader."""
    return json.dumps(plain(config, ""))
