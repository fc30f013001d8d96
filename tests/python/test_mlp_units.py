"""A model whose MLPs a policy grew and shrank: gf.load rebuilds each block's width from the
checkpoint and predicts what the training process computed, and (where PyTorch is installed)
to_torch gives its logits and to_onnx exports it."""
import numpy as np
import pytest

import growformer as gf
from conftest import TINY


class GrowShrinkMlp:
    """Adds 6 units to block 1's MLP at step 10, removes units 0, 3 of block 0's at step 20."""

    def check(self, view):
        if view.step == 10:
            return [{"op": "add_mlp_units", "block": 1, "units": 6}]
        if view.step == 20:
            return [{"op": "remove_mlp_units", "block": 0, "units": [0, 3]}]
        return []


def grown(tmp_path):
    cfg = gf.Config.from_yaml(TINY).to_dict()
    cfg["model"]["layers"] = 2
    cfg["model"]["mlp_ratio"] = 2
    cfg["train"]["steps"] = 30
    cfg["train"]["test_on"] = "last"
    cfg["growth"] = {"plugin": "python", "class": GrowShrinkMlp}
    ex = gf.Experiment(cfg)
    assert ex.train(tmp_path / "run")["finished"]
    return ex, tmp_path / "run" / "checkpoints" / "last.safetensors"


def test_load_rebuilds_the_grown_widths(tmp_path):
    ex, last = grown(tmp_path)
    params = ex.parameters()
    assert params["layers.0.mlp.fc1.w"].shape == (16, 30)
    assert params["layers.1.mlp.fc2.w"].shape == (38, 16)
    model = gf.load(last)
    loaded = model.parameters()
    for name in ("layers.0.mlp.fc1.w", "layers.0.mlp.fc2.w", "layers.1.mlp.fc1.b"):
        assert np.array_equal(loaded[name], params[name]), name
    tokens, _ = model.split_tokens("test")
    assert np.array_equal(model.predict(tokens, logits=True), ex.predict(tokens, logits=True))


def test_a_grown_mlp_exports(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    _, last = grown(tmp_path)
    model = gf.load(last)
    tokens, _ = model.split_tokens("test")
    module = gf.to_torch(model)
    ids, valid = module.encode(tokens)
    with torch.no_grad():
        mine = module(ids, valid).numpy().astype(np.float64)
    assert np.allclose(mine, model.predict(tokens, logits=True), atol=1e-5)
    onnx = pytest.importorskip("onnx", reason="onnx is not installed")
    onnx.checker.check_model(onnx.load(gf.to_onnx(model, tmp_path / "m.onnx")))
