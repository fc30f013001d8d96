"""growformer from Python: configs, training with a callback, evaluation, prediction,
checkpoints, a run's logs, sweep tables, and growth/pruning policies written in Python.

    import growformer as gf
    ex = gf.Experiment("configs/quickstart.yaml", overrides=["train.steps=200"])
    result = ex.train("runs/py-quickstart", callback=lambda m: print(m["step"], m["loss"]), every=50)
    model = gf.load("runs/py-quickstart")          # its best checkpoint (else its last)
    probs = model.predict(["[MAX 2 9 [MIN 4 7 ] 0 ]"])        # numpy (1, classes)

A policy in Python is a class named in the config:
    growth: {plugin: python, class: grow_on_plateau.GrowOnPlateau, path: [examples/python],
             options: {patience: 3}}
see examples/python/grow_on_plateau.py (or give the class object: `"class": MyPolicy` in a dict).

Data in memory (texts or token ids with labels, numpy arrays, pandas DataFrames; images as uint8
arrays for the idx_images dataset) trains without a file: `gf.Experiment(config, data=df)` or
`data={"train": (texts, labels), "test": ...}`; the run keeps it in RUN_DIR/data. A checkpoint
stands alone: `gf.load` needs no data files to predict, and reads a split only when evaluated. `model.evaluate(data)` reports as `growformer eval` (F1 per class and
the confusion matrix); `gf.to_torch(model)` and `gf.to_onnx(model, path)` take a trained model to
PyTorch and ONNX. The module runs one growformer operation at a time: other Python threads wait
(see docs/PYTHON.md).

Installed with `pip install --no-build-isolation .` (README, "Python"), the package also runs the
growformer program: `python3 -m growformer train CONFIG`. Type stubs: growformer/__init__.pyi.
"""

import csv as _csv
import json as _json
import os as _os
import sys as _sys

try:  # predict, parameters and the policy view give numpy arrays
    import numpy as _numpy  # noqa: F401
except ImportError as _e:
    raise ImportError(
        "growformer needs numpy, which this Python (" + _sys.executable + ") cannot import: "
        "install Debian's python3-numpy (apt-get install python3-numpy; in a venv made with "
        "`python3 -m venv --system-site-packages`), or `pip install numpy` in this environment",
        name="numpy") from _e

from ._core import (  # noqa: F401,E402
    Config,
    ConfigError,
    Experiment,
    RunError,
    load,
    read_events,
    read_metrics,
    resume,
)

from ._data import Images  # noqa: E402
from ._torch import to_onnx, to_torch  # noqa: E402 (torch itself is imported when called)

__all__ = ["Config", "ConfigError", "Experiment", "RunError", "Images", "load", "resume",
           "read_events", "read_metrics", "read_sweep", "add_head", "remove_head", "to_torch",
           "to_onnx", "WHOLE_BLOCK"]


# The head id that names a whole block in a policy's probe_ablations: (block, WHOLE_BLOCK) leaves
# the block's attention and MLP out of the probe (the residual stream passes it unchanged).
WHOLE_BLOCK = -1


def add_head(block, reason="", preserve_function=True, value_variance=None, **info):
    """The edit a policy's check() returns to add a head to BLOCK (info: extra event fields)."""
    edit = {"op": "add_head", "block": block,
            "init": {"preserve_function": preserve_function, "value_variance": value_variance}}
    if reason:
        edit["reason"] = reason
    if info:
        edit["info"] = info
    return edit


def remove_head(block, head, reason="", **info):
    """The edit a policy's check() returns to remove head id HEAD of BLOCK."""
    edit = {"op": "remove_head", "block": block, "head": head}
    if reason:
        edit["reason"] = reason
    if info:
        edit["info"] = info
    return edit


def _cell(text):
    if text == "":
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def read_sweep(sweep_dir):
    """The jobs of a sweep directory as rows (dicts), one per job.

    Each row holds summary.csv's columns (job, the axis labels, seed, the results, exit), with
    the job's own record (JOB/sweep_job.json: its overrides and its result at full precision)
    merged in. A sweep still running has no summary.csv yet: the rows are then the jobs that
    finished, from their records, in job-name order.
    """
    summary = _os.path.join(sweep_dir, "summary.csv")
    rows = []
    if _os.path.exists(summary):
        with open(summary, newline="") as f:
            for r in _csv.DictReader(f):
                rows.append({k: _cell(v) for k, v in r.items()})
    else:
        if not _os.path.isdir(sweep_dir):
            raise ConfigError(f"{sweep_dir}: no such sweep directory")
        for name in sorted(_os.listdir(sweep_dir)):
            if _os.path.exists(_os.path.join(sweep_dir, name, "sweep_job.json")):
                rows.append({"job": name})
    for row in rows:
        rec_path = _os.path.join(sweep_dir, str(row.get("job", "")), "sweep_job.json")
        if not _os.path.exists(rec_path):
            continue
        try:
            with open(rec_path) as f:
                rec = _json.load(f)
        except (OSError, ValueError) as e:
            raise RunError(f"{rec_path}: unreadable job record: {e}") from None
        if not isinstance(rec, dict):
            raise RunError(f"{rec_path}: a job record is a JSON object")
        row.update(rec.get("result", {}))
        row["overrides"] = rec.get("overrides", [])
    return rows
