"""configs/grow_depth_width.yaml and its policy (examples/python/grow_structure.py): one policy
grows heads, MLP width and depth through the structure editor, in turn; each edit is recorded
with its kind, the trained model holds what was grown, and a run stopped between edits and
resumed makes the same ones and ends with the same model."""
import os

import growformer as gf
from conftest import SOURCE

CONFIG = os.path.join(SOURCE, "configs", "grow_depth_width.yaml")
# every check after `patience` is a plateau (min_delta larger than any fall of the loss), so the
# edits come in turn, two checks apart: heads, MLP, depth, heads, MLP
FAST = ["data.train_size=256", "data.val_size=32", "data.test_size=32", "train.steps=320",
        "train.check_every=20", "train.eval_every=160", "threads=1",
        "growth.options.min_delta=100.0"]


def grown(run):
    """(step, what) of every structural edit of the run, in order."""
    return [(e["step"], e["what"]) for e in gf.read_events(run)
            if e["type"] in ("grow", "prune") and "what" in e]


def test_the_policy_grows_heads_mlp_and_depth_in_turn(tmp_path):
    run = tmp_path / "run"
    assert gf.Experiment(CONFIG, overrides=FAST).train(run)["finished"]
    kinds = [what for _, what in grown(run)]
    # one block: a head, 32 MLP units, a second block; then a head and 32 units in each block
    assert kinds == ["head", "mlp_units", "block", "head", "head", "mlp_units", "mlp_units"], grown(run)
    model = gf.load(run / "checkpoints" / "last.safetensors")
    assert model.heads_per_block == [3, 2]


def test_a_resumed_run_grows_as_an_uninterrupted_one(tmp_path):
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert gf.Experiment(CONFIG, overrides=FAST).train(whole)["finished"]
    assert not gf.Experiment(CONFIG, overrides=FAST).train(part, stop_after=70)["finished"]
    assert gf.resume(part)["finished"]
    assert grown(part) == grown(whole)
    a = gf.load(whole / "checkpoints" / "last.safetensors").evaluate("test")
    b = gf.load(part / "checkpoints" / "last.safetensors").evaluate("test")
    assert a["loss"] == b["loss"]
