"""growformer.to_torch and to_onnx: a trained model (grown and pruned, several blocks; mha and
hkt blocks, dot_product and hybrid_conv heads; mean or CLS pooling; sum or mean of heads; causal)
rebuilt in PyTorch gives growformer's logits to 1e-5 on held-out inputs, and its ONNX export
passes onnx.checker."""
import numpy as np
import pytest

import growformer as gf
from conftest import TINY

torch = pytest.importorskip("torch", reason="PyTorch is not installed (apt-get install python3-torch)")


class GrowAndPrune:
    """Adds a head to the last block at step 10, removes the first head of block 0 at step 20."""

    def check(self, view):
        if view.step == 10:
            return [gf.add_head(len(view.blocks) - 1, reason="test")]
        if view.step == 20:
            return [gf.remove_head(0, view.blocks[0].heads[0], reason="test")]
        return []


def listops_config(**attention):
    cfg = gf.Config.from_yaml(TINY).to_dict()
    cfg["model"]["layers"] = 2
    cfg["model"]["dropout"] = 0.0
    cfg["model"]["attention"].update(attention)
    cfg["train"]["steps"] = 30
    cfg["train"]["test_on"] = "last"  # the experiment ends holding the grown and pruned model
    cfg["growth"] = {"plugin": "python", "class": GrowAndPrune}
    return cfg


def logits_both(model, tokens):
    module = gf.to_torch(model)
    ids, valid = module.encode(tokens)
    with torch.no_grad():
        mine = module(ids, valid).numpy().astype(np.float64)
    return mine, model.predict(tokens, logits=True), module


@pytest.mark.parametrize("attention,pool", [
    ({}, "mean"), ({"combine": "mean"}, "cls"), ({"causal": True, "d_k": 4, "d_v": 6}, "mean"),
    ({"head": {"plugin": "hybrid_conv"}}, "mean"),
    ({"plugin": "hkt", "levels": 3}, "mean"),
    ({"plugin": "hkt", "levels": 3, "fusion": "input", "head": {"plugin": "hybrid_conv"}}, "cls"),
    ({"plugin": "hkt", "levels": 2, "stride": 3, "causal": True, "share_qk": True,
      "head": {"plugin": "hybrid_conv", "kernel": 4}}, "mean")])
def test_a_grown_and_pruned_model_gives_growformers_logits(tmp_path, attention, pool):
    cfg = listops_config(**attention)
    cfg["model"]["pool"] = pool
    ex = gf.Experiment(cfg)
    r = ex.train(tmp_path / "run")
    assert r["finished"] and ex.heads_per_block == [1, 3]
    model = gf.load(tmp_path / "run" / "checkpoints" / "last.safetensors")
    tokens, labels = model.split_tokens("test")  # held out from training
    mine, theirs, module = logits_both(model, tokens)
    assert module.heads_per_block == [1, 3]
    diff = np.abs(mine - theirs).max()
    print(f"to_torch max |logit difference| ({attention}, {pool}): {diff:.3g}")
    assert diff < 1e-5, diff
    assert (mine.argmax(axis=1) == theirs.argmax(axis=1)).all()
    # the mask is what matters, not the pad id: other padding gives the same logits
    ids, valid = module.encode(tokens[:8])
    with torch.no_grad():
        a = module(ids, valid)
        b = module(ids.masked_fill(~valid, 3), valid)
        c = module(ids)  # valid from the pad id
    assert torch.equal(a, b) and torch.equal(a, c)
    # the trained experiment itself exports the same
    with torch.no_grad():
        assert torch.equal(gf.to_torch(ex)(ids, valid), a)
    # and the ONNX export of each kind of block passes the checker
    try:
        import onnx
    except ImportError:
        return
    onnx.checker.check_model(onnx.load(gf.to_onnx(model, tmp_path / "m.onnx")))


def test_text_data_exports_and_onnx_checks(tmp_path):
    onnx = pytest.importorskip("onnx", reason="python3-onnx is not installed")
    words = ["film", "plot", "story", "fun", "dull", "actor", "scene"]
    texts = [f"{words[i % 7]} {'good' if i % 2 == 0 else 'bad'} {words[(i // 7) % 7]}" for i in range(120)]
    labels = ["pos" if i % 2 == 0 else "neg" for i in range(120)]
    cfg = {"name": "t", "seed": 2, "threads": 1,
           "model": {"d_model": 24, "layers": 2, "max_len": 12, "attention": {"plugin": "mha", "heads": 3}},
           "optimizer": {"plugin": "adamw", "lr": 0.01},
           "train": {"steps": 30, "batch_size": 16, "warmup": 2, "eval_every": 10, "log_every": 10}}
    ex = gf.Experiment(cfg, data=(texts, labels))
    ex.train(tmp_path / "run")
    new = ["good fun zebra", "bad dull", "a very long text that runs past the twelve positions of "
           "this model and is cut as growformer cuts it", "scene"]
    tokens = ex.tokenize(new)
    assert len(tokens[2]) > 12
    mine, theirs, module = logits_both(ex, tokens)
    assert np.abs(mine - theirs).max() < 1e-5
    path = gf.to_onnx(ex, tmp_path / "model.onnx")
    m = onnx.load(path)
    onnx.checker.check_model(m)
    assert [i.name for i in m.graph.input] == ["ids", "valid"]
    assert [o.name for o in m.graph.output] == ["logits"]
    # the heads of each block are in the graph's weights: (heads, d_model, d_k) query maps
    shapes = {tuple(t.dims) for t in m.graph.initializer}
    assert (3, 24, 8) in shapes


def test_what_is_not_rebuilt_says_so(tmp_path):
    cfg = gf.Config.from_yaml(TINY).to_dict()
    cfg["model"]["attention"] = {"plugin": "mha", "heads": 2, "head": {"plugin": "incrt_gate"}}
    ex = gf.Experiment(cfg)
    with pytest.raises(gf.ConfigError, match="to_torch: attention `mha` with heads `incrt_gate` is not "
                                             "rebuilt in PyTorch"):
        gf.to_torch(ex)
