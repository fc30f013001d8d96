"""A model whose depth a policy changed: gf.load rebuilds its blocks from the checkpoint and
predicts what the training process computed, and (where PyTorch is installed) to_torch gives its
logits and to_onnx exports it."""
import numpy as np
import pytest

import growformer as gf
from conftest import TINY


class DeepenThenTrim:
    """Inserts a block at index 1 at step 10 and at 0 at step 15, removes block 2 at step 20."""

    def check(self, view):
        if view.step == 10:
            return [{"op": "insert_block", "block": 1}]
        if view.step == 15:
            return [{"op": "insert_block", "block": 0}]
        if view.step == 20:
            return [{"op": "remove_block", "block": 2}]
        return []


def deepened(tmp_path):
    cfg = gf.Config.from_yaml(TINY).to_dict()
    cfg["model"]["layers"] = 2
    cfg["train"]["steps"] = 30
    cfg["train"]["test_on"] = "last"
    cfg["train"]["check_every"] = 5
    cfg["growth"] = {"plugin": "python", "class": DeepenThenTrim}
    ex = gf.Experiment(cfg)
    assert ex.train(tmp_path / "run")["finished"]
    return ex, tmp_path / "run" / "checkpoints" / "last.safetensors"


def test_load_rebuilds_the_blocks(tmp_path):
    ex, last = deepened(tmp_path)
    params = ex.parameters()
    assert len(ex.heads_per_block) == 3
    assert "layers.2.mlp.fc1.w" in params and "layers.3.mlp.fc1.w" not in params
    model = gf.load(last)
    assert len(model.heads_per_block) == 3
    loaded = model.parameters()
    assert sorted(loaded) == sorted(params)
    for name in params:
        assert np.array_equal(loaded[name], params[name]), name
    tokens, _ = model.split_tokens("test")
    assert np.array_equal(model.predict(tokens, logits=True), ex.predict(tokens, logits=True))


def test_a_deepened_model_exports(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    _, last = deepened(tmp_path)
    model = gf.load(last)
    tokens, _ = model.split_tokens("test")
    module = gf.to_torch(model)
    assert len(module.layers) == 3
    ids, valid = module.encode(tokens)
    with torch.no_grad():
        mine = module(ids, valid).numpy().astype(np.float64)
    assert np.allclose(mine, model.predict(tokens, logits=True), atol=1e-5)
    onnx = pytest.importorskip("onnx", reason="onnx is not installed")
    onnx.checker.check_model(onnx.load(gf.to_onnx(model, tmp_path / "m.onnx")))
