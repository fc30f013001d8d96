"""The products' precision from Python: gf.load(precision=...) overrides the model's own, the
experiment says which one runs, and each experiment evaluates and predicts in its own precision
whatever another experiment of the process was built with (the setting is process-wide in the
kernels, so every entry point sets its experiment's own)."""
import numpy as np
import pytest

import growformer as gf
from test_standalone import text_run

INPUTS = ["good fun", "dull awful", "great good fun", "bad"]


@pytest.fixture
def trained(tmp_path):
    run = tmp_path / "run"
    assert gf.Experiment(text_run(tmp_path)).train(run)["finished"]
    return run


def bf16_model(run):
    model = gf.load(run, precision="bf16_if_available")
    if model.precision != "bf16":
        pytest.skip("this CPU has no AVX512_BF16 (bf16_if_available fell back to float32)")
    return model


def test_load_precision_overrides_the_models_own(trained):
    f32 = gf.load(trained)
    assert f32.precision == "float32"
    want = f32.predict(INPUTS, logits=True)
    bf16 = bf16_model(trained)
    got = bf16.predict(INPUTS, logits=True)
    # bf16 inputs (8 significant bits) move the logits, by no more than a few of their rounding
    # steps on a model this small
    assert not np.array_equal(got, want)
    np.testing.assert_allclose(got, want, rtol=0.05, atol=0.05)
    assert gf.load(trained, precision="float32").precision == "float32"


def test_each_experiment_runs_in_its_own_precision(trained):
    bf16 = bf16_model(trained)
    logits = bf16.predict(INPUTS, logits=True)
    loss = bf16.evaluate("val")["loss"]
    f32 = gf.load(trained)  # built after: the kernels' setting is float32 now
    f32_logits = f32.predict(INPUTS, logits=True)
    assert not np.array_equal(f32_logits, logits)
    # the bf16 experiment still predicts and evaluates in bf16, bit for bit as before
    assert np.array_equal(bf16.predict(INPUTS, logits=True), logits)
    assert bf16.evaluate("val")["loss"] == loss
    # and the float32 one in float32 after the bf16 one ran
    assert np.array_equal(f32.predict(INPUTS, logits=True), f32_logits)
    assert f32.evaluate("val")["loss"] != loss


def test_bad_precision_is_refused_by_name(trained):
    with pytest.raises(gf.ConfigError, match="precision"):
        gf.load(trained, precision="fp16")
    with pytest.raises(TypeError, match="precision must be None"):
        gf.load(trained, precision=16)
