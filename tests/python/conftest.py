# Fixtures of the Python module's tests: the tiny config of tests/test_train.cpp (kTiny), the
# growformer program of this build, and the policies of policies.py importable by name.
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("GF_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
GROWFORMER_BIN = os.environ.get("GROWFORMER_BIN", "")
MPIRUN = os.environ.get("GF_MPIRUN", "")
EXAMPLES = os.path.join(SOURCE, "examples", "python")

TINY = """name: tiny
seed: 7
threads: 2
data:
  plugin: listops
  train_size: 256
  val_size: 64
  test_size: 64
  min_length: 4
  max_length: 24
  max_depth: 3
  max_args: 4
model:
  d_model: 16
  layers: 1
  max_len: 32
  dropout: 0.1
  attention:
    plugin: mha
    heads: 2
    d_k: 8
optimizer: {plugin: adamw, lr: 0.003}
train:
  steps: 40
  batch_size: 16
  warmup: 5
  eval_every: 10
  log_every: 5
  check_every: 10
"""


def python_growth(cls, role="growth", **options):
    """A --set / override giving ROLE the Python class CLS of policies.py (or a module.Class)."""
    if "." not in cls:
        cls = "policies." + cls
    opts = ", ".join(f"{k}: {v}" for k, v in options.items())
    return (f"{role}={{plugin: python, class: {cls}, path: [{HERE}, {EXAMPLES}], "
            f"options: {{{opts}}}}}")


@pytest.fixture
def tiny(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY)
    return str(p)


def cli(*args, procs=0, timeout=120):
    """growformer ARGS (under mpirun -np PROCS when PROCS > 0): (exit status, output)."""
    if not GROWFORMER_BIN:
        pytest.skip("GROWFORMER_BIN is not set (run through ctest)")
    cmd = [GROWFORMER_BIN, *args]
    if procs:
        cmd = [MPIRUN, "--oversubscribe", "--allow-run-as-root", "--mca",
               "btl_vader_single_copy_mechanism", "none", "-np", str(procs), *cmd]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return r.returncode, r.stdout


sys.path.insert(0, HERE)
