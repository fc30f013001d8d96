"""The growformer Python module: training with a callback, evaluation, prediction, parameters,
logs, sweeps, and growth/pruning policies written in Python (in the module, the growformer
program and under mpirun)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import growformer as gf
from conftest import EXAMPLES, MPIRUN, TINY, cli, python_growth


def train(tiny, run_dir, sets=(), **kw):
    ex = gf.Experiment(tiny, overrides=list(sets))
    return ex, ex.train(str(run_dir), **kw)


def events_without_timing(run_dir):
    return gf.read_events(str(run_dir))


def test_import_and_api():
    for name in ("Config", "Experiment", "load", "resume", "read_events", "read_metrics",
                 "read_sweep", "ConfigError", "RunError"):
        assert hasattr(gf, name), name
    assert issubclass(gf.ConfigError, ValueError)
    assert issubclass(gf.RunError, RuntimeError)


def test_callback_sees_metrics_and_stops_the_run(tiny, tmp_path):
    seen = []

    def cb(m):
        seen.append(m)
        return m["step"] < 15  # False at 15: stop there

    ex, r = train(tiny, tmp_path / "run", callback=cb, every=5)
    assert [m["step"] for m in seen] == [5, 10, 15]
    assert r["stopped_at"] == 15 and not r["finished"] and r["status"] == 0
    m = seen[1]
    assert m["total_steps"] == 40 and m["steps"] == 5 and m["heads"] == [2]
    assert 0 < m["loss"] < 10 and 0 <= m["accuracy"] <= 1 and m["lr"] > 0
    assert m["val_step"] == 10 and m["val_accuracy"] is not None
    assert seen[0]["val_step"] is None
    # the callback's loss is the mean of the 5 training steps the log's line at step 10 covers
    lines = gf.read_metrics(str(tmp_path / "run"))
    train10 = [l for l in lines if l["split"] == "train" and l["step"] == 10][0]
    assert m["loss"] == pytest.approx(train10["loss"], rel=1e-6)
    # nothing after step 15 was trained or logged; the checkpoint is at 15, and resume finishes
    assert max(l["step"] for l in lines) == 15
    r2 = gf.resume(str(tmp_path / "run"))
    assert r2["finished"] and r2["test"]["examples"] == 64
    assert max(l["step"] for l in gf.read_metrics(str(tmp_path / "run"))) == 40


def test_callback_errors_stop_with_a_checkpoint(tiny, tmp_path):
    def boom(m):
        if m["step"] == 10:
            raise KeyError("from the callback")
        return True

    with pytest.raises(KeyError, match="from the callback"):
        train(tiny, tmp_path / "a", callback=boom, every=5)
    assert os.path.exists(tmp_path / "a" / "checkpoints" / "last.safetensors")
    assert max(l["step"] for l in gf.read_metrics(str(tmp_path / "a"))) == 10
    with pytest.raises(TypeError, match="return True or None to go on"):
        train(tiny, tmp_path / "b", callback=lambda m: "yes", every=5)


def test_evaluate_equals_the_program_and_predict_matches(tiny, tmp_path):
    _, r = train(tiny, tmp_path / "run")
    assert r["finished"] and r["test"]["examples"] == 64
    ck = str(tmp_path / "run" / "checkpoints" / "best.safetensors")
    model = gf.load(ck)
    mine = model.evaluate("test")
    rc, out = cli("eval", ck, "--split", "test", "--json")
    assert rc == 0, out
    theirs = json.loads(out.strip().splitlines()[-1])
    assert mine["examples"] == theirs["examples"] == 64
    assert mine["accuracy"] == theirs["accuracy"]
    assert mine["loss"] == pytest.approx(theirs["loss"], rel=1e-12)
    # the final test of the run tested this model on this split
    assert mine["accuracy"] == r["test"]["accuracy"]

    tokens, labels = model.split_tokens("test")
    p = model.predict(tokens)
    assert p.shape == (64, len(model.classes)) and p.dtype == np.float64
    assert np.allclose(p.sum(axis=1), 1.0, atol=1e-9)
    assert np.mean(p.argmax(axis=1) == np.array(labels)) == mine["accuracy"]
    # strings: the listops expressions of the same tokens give the same probabilities
    # (a batch pads to its longest row, so another batch gives the same values to float rounding)
    texts = [" ".join(model.vocab[t] for t in row) for row in tokens[:5]]
    first5 = model.predict(tokens[:5])
    assert np.allclose(first5, p[:5], rtol=1e-5, atol=1e-7)
    assert np.array_equal(model.predict(texts), first5)
    # from the checkpoint alone (no data read) as well
    alone = gf.load(ck, data="none")
    assert np.array_equal(alone.predict(tokens[:5]), first5)
    with pytest.raises(gf.ConfigError, match="data='none'"):
        alone.evaluate("test")
    with pytest.raises(ValueError, match="not a token id"):
        model.predict([[model.pad_id, 3]])
    with pytest.raises(ValueError, match=r"predict: input 1: listops: token 3 \(`x`"):
        model.predict(["[MAX 3 4 ]", "[MAX 3 x ]"])
    with pytest.raises(ValueError, match="predict: input 0 holds a line break"):
        model.predict(["[MAX 3\n4 ]"])
    with pytest.raises(TypeError, match="wrap one string"):
        model.predict("[MAX 3 4 ]")


def test_predict_strings_of_a_text_dataset(tmp_path):
    words = ["good", "great", "fun", "bad", "dull", "awful"]
    rows = ["sentence\tlabel"] + [f"{words[i % 3 + 3 * (i % 2)]} {words[(i + 1) % 3 + 3 * (i % 2)]}\t{i % 2}"
                                   for i in range(80)]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    cfg = {"name": "t", "seed": 3, "threads": 2,
           "data": {"plugin": "text_tsv", "train": str(tmp_path / "train.tsv")},
           "model": {"d_model": 8, "layers": 1, "max_len": 8, "attention": {"plugin": "mha", "heads": 1}},
           "train": {"steps": 6, "batch_size": 8, "eval_every": 3, "log_every": 3}}
    assert gf.Experiment(cfg).train(str(tmp_path / "run"))["finished"]
    ck = str(tmp_path / "run" / "checkpoints" / "last.safetensors")
    model, alone = gf.load(ck), gf.load(ck, data="none")
    assert np.array_equal(alone.predict(["good fun", "dull"]), model.predict(["good fun", "dull"]))
    ids = [[model.vocab.index("good"), model.vocab.index("fun")], [model.vocab.index("awful")]]
    # the word tokenizer lower-cases; an unseen word is the unknown token
    assert np.array_equal(model.predict(["Good FUN", "awful"]), model.predict(ids))
    unk = model.vocab.index("<unk>")
    assert np.array_equal(model.predict(["zebra"]), model.predict([[unk]]))
    # any text: a tab or a line break is white space between words, as in a CSV's quoted field
    assert np.array_equal(model.predict(["good\tfun", "good\nfun"]), model.predict(["good fun"] * 2))
    with pytest.raises(ValueError, match="predict: input 1 is empty"):
        model.predict(["good", " \t"])
    # one str is not a list of one-character texts; bytes are not texts
    for call in (model.predict, model.tokenize):
        with pytest.raises(TypeError, match=r"one str; give a list of texts|wrap one string"):
            call("good fun")
        with pytest.raises(ValueError, match=r"input 1 is bytes, not a text"):
            call(["good", b"fun"])


def test_parameters_and_heads_are_copies_by_name(tiny, tmp_path):
    ex, _ = train(tiny, tmp_path / "run", stop_after=5)
    params = ex.parameters()
    assert sum(a.size for a in params.values()) == ex.num_parameters
    heads = ex.heads()
    assert [h["id"] for h in heads[0]] == [0, 1]
    t = heads[0][1]["tensors"]
    assert "layers.0.attn.heads.1.w_q" in t and "layers.0.attn.heads.1.w_o" in t
    for name, a in t.items():
        assert a.dtype == np.float32 and np.array_equal(a, params[name]), name
    params["embed"][:] = 0  # a copy: the model keeps its weights
    assert np.any(ex.parameters()["embed"] != 0)


def test_config_from_dict_and_errors(tmp_path):
    base = {"name": "d", "seed": 7, "threads": 2,
            "data": {"plugin": "listops", "train_size": 64, "val_size": 16, "test_size": 16,
                     "min_length": 4, "max_length": 16, "max_depth": 2, "max_args": 3},
            "model": {"d_model": 8, "layers": 1, "max_len": 20,
                      "attention": {"plugin": "mha", "heads": 1}},
            "train": {"steps": 4, "batch_size": 8, "eval_every": 2, "log_every": 2}}
    cfg = gf.Config.from_dict(base, overrides=["train.steps=6"])
    assert cfg.to_dict()["train"]["steps"] == 6
    r = gf.Experiment(cfg).train(str(tmp_path / "run"))
    assert r["finished"]
    bad = dict(base, train={"stpes": 4})
    with pytest.raises(gf.ConfigError, match="did you mean `steps`"):
        gf.Experiment(bad)
    with pytest.raises(gf.ConfigError):
        gf.Config.load(str(tmp_path / "missing.yaml"))


# ---- Python policies --------------------------------------------------------------------

def test_python_policy_grows_at_its_step_and_is_told(tiny, tmp_path):
    ex, r = train(tiny, tmp_path / "run", [python_growth("AddAt", at=20, reason="at-twenty")])
    assert r["finished"] and ex.heads_per_block == [3]
    evs = gf.read_events(str(tmp_path / "run"))
    grows = [e for e in evs if e["type"] == "grow"]
    assert len(grows) == 1
    g = grows[0]
    assert g["step"] == 20 and g["block"] == 0 and g["head"] == 2
    assert g["reason"] == "at-twenty" and g["class"] == "policies.AddAt" and g["checks"] == 2
    checks = [e for e in evs if e["type"] == "python_check"]
    assert [e["step"] for e in checks] == [10, 20, 30, 40] and checks[-1]["checks"] == 4
    assert r["growth_summary"] == {"checks": 4.0, "edits_seen": 1.0}


def test_python_pruning_removes_a_head(tiny, tmp_path):
    ex, r = train(tiny, tmp_path / "run", [python_growth("RemoveFirst", role="pruning", at=30)])
    assert ex.heads_per_block == [1]
    prunes = [e for e in gf.read_events(str(tmp_path / "run")) if e["type"] == "prune"]
    assert [(e["step"], e["head"], e["policy"]) for e in prunes] == [(30, 0, "pruning")]


def test_python_policy_sees_probes_and_draws_from_its_stream(tiny, tmp_path):
    train(tiny, tmp_path / "run", [python_growth("Probing")])
    saw = [e for e in gf.read_events(str(tmp_path / "run")) if e["type"] == "saw"]
    assert [e["step"] for e in saw] == [10, 20, 30, 40]
    for e in saw:
        assert e["probe_shape"][0] == 16 and e["probe_shape"][2] == 16  # batch, d_model
        assert e["valid_shape"] == e["probe_shape"][:2] and 0 < e["valid_sum"] <= 16 * e["probe_shape"][1]
        assert e["probe_examples"] == 16 and e["probe_loss"] > 0
        assert 0 <= e["draw"] < 1 and 0 <= e["pick"] < 1000
    assert len({e["draw"] for e in saw}) == 4


@pytest.mark.parametrize("policy", [
    ("Probing", {}),                                # the policy's random stream across a resume
    ("AddAt", {"at": 20}),                                                  # its own save_state
    ("grow_on_plateau.GrowOnPlateau", {"patience": 1, "min_delta": 0.5}),  # attributes as JSON
])
def test_stop_and_resume_write_identical_events(tiny, tmp_path, policy):
    cls, opts = policy
    sets = [python_growth(cls, **opts)]
    train(tiny, tmp_path / "whole", sets)
    _, r = train(tiny, tmp_path / "parts", sets, callback=lambda m: m["step"] < 15, every=5)
    assert r["stopped_at"] == 15
    gf.resume(str(tmp_path / "parts"))
    whole = gf.read_events(str(tmp_path / "whole"))
    assert any(e["type"] in ("grow", "saw") for e in whole)
    assert gf.read_events(str(tmp_path / "parts")) == whole

    def metrics(d):
        return [{k: v for k, v in l.items() if k not in ("elapsed_s", "tokens_per_s", "steps_per_s")}
                for l in gf.read_metrics(str(d))]
    assert metrics(tmp_path / "parts") == metrics(tmp_path / "whole")


def test_ctrl_c_stops_after_the_step_even_inside_a_policy(tiny, tmp_path, monkeypatch):
    sets = [python_growth("SelfInterrupt", at=20)]
    with pytest.raises(KeyboardInterrupt):
        train(tiny, tmp_path / "run", sets)
    # the check at 20 ran to its end and its edit applied; the run stopped after step 20
    evs = gf.read_events(str(tmp_path / "run"))
    assert [(e["step"], e["type"]) for e in evs][-2:] == [(20, "after_kill"), (20, "grow")]
    assert max(l["step"] for l in gf.read_metrics(str(tmp_path / "run"))) == 20
    monkeypatch.setenv("GF_TEST_NO_KILL", "1")
    assert gf.resume(str(tmp_path / "run"))["finished"]
    train(tiny, tmp_path / "whole", sets)
    assert gf.read_events(str(tmp_path / "run")) == gf.read_events(str(tmp_path / "whole"))


def test_the_program_runs_python_policies_as_the_module(tiny, tmp_path):
    sets = [python_growth("grow_on_plateau.GrowOnPlateau", patience=1, min_delta=0.5)]
    train(tiny, tmp_path / "module", sets)
    rc, out = cli("train", tiny, "--run-dir", str(tmp_path / "cli"), "--quiet", "--set", sets[0])
    assert rc == 0, out
    assert gf.read_events(str(tmp_path / "cli")) == gf.read_events(str(tmp_path / "module"))
    # and resumes one: stop at 25 (stop_after through the module), resume with the program
    _, r = train(tiny, tmp_path / "mixed", sets, stop_after=25)
    assert r["stopped_at"] is None or r["stopped_at"] == 25
    rc, out = cli("resume", str(tmp_path / "mixed"), "--quiet")
    assert rc == 0, out
    assert gf.read_events(str(tmp_path / "mixed")) == gf.read_events(str(tmp_path / "module"))


@pytest.mark.parametrize("sets, kind, message", [
    (python_growth("NoSuchClass"), gf.ConfigError, "module `policies` .* has no `NoSuchClass`"),
    (python_growth("no_such_module.X"), gf.ConfigError, "cannot import module `no_such_module`"),
    (python_growth("NotAPolicy"), gf.ConfigError, "has no check\\(self, view\\) method"),
    (python_growth("AddAt", att=3), gf.ConfigError, "unexpected keyword argument 'att'"),
    (python_growth("Raises", at=10), gf.RunError,
     "growth `python` \\(policies.Raises\\).check at step 10 raised .*ZeroDivisionError"),
    (python_growth("ReturnsNone"), gf.RunError, "check at step 10 returned None; expected a list"),
    (python_growth("BadEdit", edit="\"{'op': 'add_head', 'block': 3}\""), gf.RunError,
     "`block` must be a block index in \\[0, 1\\)"),
    (python_growth("BadEdit", edit="\"{'op': 'grow', 'block': 0}\""), gf.RunError,
     "`op` must be \"add_head\" or \"remove_head\""),
    (python_growth("BadEdit", edit="\"{'op': 'remove_head', 'block': 0, 'head': 7}\""), gf.RunError,
     "block 0 has no head 7"),
    (python_growth("BadEdit", edit="\"{'op': 'add_head', 'block': 0, 'colour': 1}\""), gf.RunError,
     "unknown key 'colour'"),
    (python_growth("TupleState"), gf.RunError, "state cannot be saved for resuming"),
    (python_growth("BadEdit", edit="\"{'op': 'add_head', 'block': 1000000000000000000000000000000}\""), gf.RunError,
     "`block` must be a block index in \\[0, 1\\)"),
    (python_growth("BadEdit", edit="\"{'op': 'add_head', 'block': 0, 'init': {'mode': 'directed'}}\""),
     gf.RunError, "init `mode` must be \"random\""),
])
def test_bad_policies_fail_with_one_clear_message(tiny, tmp_path, sets, kind, message):
    with pytest.raises(kind, match=message):
        train(tiny, tmp_path / "run", [sets])
    # the program: the same message, exit 2 for configuration errors, 1 for run failures
    rc, out = cli("train", tiny, "--run-dir", str(tmp_path / "cli"), "--quiet", "--set", sets)
    assert rc == (2 if kind is gf.ConfigError else 1), out
    assert "policies" in out or "no_such_module" in out


@pytest.mark.skipif(not MPIRUN, reason="no MPI in this build")
def test_mpi_ranks_decide_alike_and_divergence_is_caught(tiny, tmp_path):
    sets = [python_growth("grow_on_plateau.GrowOnPlateau", patience=1, min_delta=0.5)]
    train(tiny, tmp_path / "one", sets)
    rc, out = cli("train", tiny, "--run-dir", str(tmp_path / "two"), "--quiet", "--set", "threads=1",
                  "--set", sets[0], procs=2)
    assert rc == 0, out
    # the same decisions; the loss the check events carry agrees to float rounding only
    def decisions(run):
        events = gf.read_events(str(tmp_path / run))
        for e in events:
            loss = e.pop("train_loss", None)
            if loss is not None:
                e["train_loss"] = round(loss, 4)
        return events
    assert decisions("two") == decisions("one")
    rc, out = cli("train", tiny, "--run-dir", str(tmp_path / "div"), "--quiet", "--set", "threads=1",
                  "--set", python_growth("RankDivergent"), procs=2)
    assert rc != 0
    assert "hold different models after the structure check (step 10)" in out


@pytest.mark.skipif(not MPIRUN, reason="no MPI in this build")
def test_mpi_ranks_keep_one_twin(tiny, tmp_path):
    # two processes train and probe the twin as one does, and adopt it at the same check
    sets = [python_growth("TwinRound", grow=10, until=30), "model.dropout=0", "threads=1"]
    train(tiny, tmp_path / "one", sets)
    args = ["train", tiny, "--run-dir", str(tmp_path / "two"), "--quiet"]
    for s in sets:
        args += ["--set", s]
    rc, out = cli(*args, procs=2)
    assert rc == 0, out

    def of(run, kind):
        return [e for e in gf.read_events(str(tmp_path / run)) if e["type"] == kind]
    assert of("two", "twin") == of("one", "twin") and len(of("one", "twin")) == 2
    for a, b in zip(of("two", "read"), of("one", "read")):
        assert a["twin_loss"] == pytest.approx(b["twin_loss"], rel=1e-5)
        assert a["twin_diff_sd"] == pytest.approx(b["twin_diff_sd"], rel=1e-4)


def test_the_module_refuses_to_train_as_one_of_several_processes(tiny, tmp_path):
    code = ("import growformer as gf\n"
            f"gf.Experiment({tiny!r}).train({str(tmp_path / 'run')!r})\n")
    env = dict(os.environ, OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_RANK="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    assert r.returncode != 0
    assert "one of 2 processes a launcher started (OMPI_COMM_WORLD_SIZE=2)" in r.stdout
    assert not os.path.exists(tmp_path / "run")


def test_read_sweep_rows(tiny, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: s\nbase: {tiny}\nseeds: [1]\nset: [train.steps=10]\n"
                     "axes:\n  model.attention.heads: [1, 2]\n")
    rc, out = cli("sweep", str(sweep), "--out", str(tmp_path / "out"))
    assert rc == 0, out
    rows = gf.read_sweep(str(tmp_path / "out"))
    assert len(rows) == 2
    assert {r["model.attention.heads"] for r in rows} == {1, 2}
    for r in rows:
        assert r["exit"] == 0 and 0 <= r["test_accuracy"] <= 1
        assert isinstance(r["test_loss"], float) and "train.steps=10" in r["overrides"]
    with pytest.raises(gf.ConfigError):
        gf.read_sweep(str(tmp_path / "nothing"))


def test_python_policy_mutes_heads_in_training(tiny, tmp_path):
    # the same run with a policy that never mutes, and with head 0 left out of every even step
    train(tiny, tmp_path / "plain", [python_growth("AddAt", at=1000)])
    _, r = train(tiny, tmp_path / "muted", [python_growth("MuteEven", head=0)])
    plain = [l for l in gf.read_metrics(str(tmp_path / "plain")) if l.get("split") == "train"]
    muted = [l for l in gf.read_metrics(str(tmp_path / "muted")) if l.get("split") == "train"]
    assert len(plain) == len(muted) > 0
    assert plain[0]["loss"] != muted[0]["loss"]  # steps 2 and 4 ran without head 0
    # asked before every training step
    assert r["growth_summary"]["asked"] == 40
    with pytest.raises(gf.RunError, match=r"\(policies\.MuteEven\)\.muted_in_training at step 1: the head set 'head 0' is not a list of \(block, head\) pairs"):
        train(tiny, tmp_path / "bad", [python_growth("MuteEven", bad="true")])


def test_python_policy_mutes_heads_on_part_of_each_batch(tiny, tmp_path):
    # share 0 trains exactly as no policy; half of every batch without head 0 does not
    train(tiny, tmp_path / "plain", [python_growth("AddAt", at=1000)])
    _, none = train(tiny, tmp_path / "none", [python_growth("MuteHalf", head=0, share=0.0)])
    _, r = train(tiny, tmp_path / "half", [python_growth("MuteHalf", head=0, share=0.5)])

    def losses(run):
        return [l["loss"] for l in gf.read_metrics(str(tmp_path / run)) if l.get("split") == "train"]

    assert losses("none") == losses("plain")
    assert len(losses("half")) == len(losses("plain")) > 0
    assert losses("half")[0] != losses("plain")[0]
    assert r["growth_summary"]["asked"] == 40 and none["growth_summary"]["asked"] == 40
    with pytest.raises(gf.RunError, match=r"\(policies\.MuteHalf\)\.muted_on_examples at step 1 returned \[\(0, 0\)\]; expected \(\[\(block, head\), \.\.\.\], share\) or None"):
        train(tiny, tmp_path / "bad", [python_growth("MuteHalf", bad="true")])
    with pytest.raises(gf.RunError, match=r"asked heads to sit out a share 1\.5"):
        train(tiny, tmp_path / "big", [python_growth("MuteHalf", share=1.5)])


def test_the_twin_is_the_model_that_never_grew_and_a_take_back_continues_from_it(tiny, tmp_path):
    # a policy grows a head at step 10 and keeps a twin without it to step 30; the plain run
    # reads the same probe and never grows (no dropout: the twin's stream is the model's)
    plain = [python_growth("TwinRound", grow=1000, until=1000), "model.dropout=0"]
    train(tiny, tmp_path / "plain", plain)
    back = [python_growth("TwinRound", grow=10, until=30), "model.dropout=0"]
    made = train(tiny, tmp_path / "plain_again", plain)[1]["growth_summary"]["made"]
    assert train(tiny, tmp_path / "back", back)[1]["growth_summary"]["made"] == made + 1
    train(tiny, tmp_path / "kept", [python_growth("TwinRound", grow=10, until=30, take_back="false"),
                                     "model.dropout=0"])

    def reads(run):
        return {e["step"]: e for e in gf.read_events(str(tmp_path / run)) if e["type"] == "read"}

    def twin_events(run):
        return [(e["step"], e["what"], e["heads"]) for e in gf.read_events(str(tmp_path / run))
                if e["type"] == "twin"]

    def train_losses(run):
        return {l["step"]: l["loss"] for l in gf.read_metrics(str(tmp_path / run))
                if l.get("split") == "train"}

    p, b, k = reads("plain"), reads("back"), reads("kept")
    # the twin's probe at 20 and 30 is the probe of the model that never grew; the grown
    # model's own probe differs from it
    for step in (20, 30):
        assert b[step]["twin_since"] == 10
        assert b[step]["twin_loss"] == pytest.approx(p[step]["probe_loss"], rel=1e-5)
        assert b[step]["probe_loss"] != pytest.approx(p[step]["probe_loss"], rel=1e-5)
        assert b[step]["twin_diff_sd"] > 0
    assert b[10]["twin_loss"] == -1.0 and b[40]["twin_loss"] == -1.0  # no twin before or after
    head = b[20]["twin_since"] and twin_events("back")[0][2]
    assert twin_events("back") == [(10, "fork", head), (30, "adopted", head)]
    assert twin_events("kept") == [(10, "fork", head), (30, "dropped", head)]
    # taken back at 30, the run continues from the twin: as if it had never grown
    pl, bl, kl = train_losses("plain"), train_losses("back"), train_losses("kept")
    for step in (35, 40):
        assert bl[step] == pytest.approx(pl[step], rel=1e-5)
        assert kl[step] != pytest.approx(pl[step], rel=1e-5)
    # the twin is in the checkpoints: a run stopped at 20 and resumed ends as the whole run
    train(tiny, tmp_path / "resumed", back, stop_after=20)
    assert gf.resume(str(tmp_path / "resumed"))["finished"]
    assert train_losses("resumed") == bl
    assert twin_events("resumed") == twin_events("back")
    # a whole block cannot be named
    with pytest.raises(gf.RunError, match=r"\(policies\.TwinRound\)\.twin_without at step 10: the head set \[\(0, -1\)\] is not a list of \(block, head\) pairs"):
        train(tiny, tmp_path / "whole", [python_growth("TwinRound", whole="true")])


def test_python_policy_leaves_a_whole_block_out_of_its_probe(tiny, tmp_path):
    # a two-block model; the policy asks for block 1 left out (attention and MLP) at every check
    _, r = train(tiny, tmp_path / "whole", [python_growth("LeaveOut", block=1),
                                            "model.layers=2", "model.dropout=0"])
    seen = r["growth_summary"]
    assert seen["sets"] == 1 and seen["block"] == 1 and seen["head"] == gf.WHOLE_BLOCK == -1
    # a trained block left out changes the probe's loss
    assert seen["left_out_loss"] != pytest.approx(seen["probe_loss"], rel=1e-9)
    # head -2 is no head and no whole block; a whole block muted in training is refused too
    with pytest.raises(gf.RunError, match=r"\(policies\.LeaveOut\)\.probe_ablations at step 10: the head set \[\(1, -2\)\] is not a list of \(block, head\) pairs of this model's 2 block\(s\)"):
        train(tiny, tmp_path / "bad", [python_growth("LeaveOut", block=1, head=-2), "model.layers=2"])
    with pytest.raises(gf.RunError, match=r"\(policies\.MuteEven\)\.muted_in_training at step 2: the head set \[\(0, -1\)\] is not a list of \(block, head\) pairs"):
        train(tiny, tmp_path / "bad_mute", [python_growth("MuteEven", head=-1)])


def test_no_best_checkpoint_or_early_stop_while_the_structure_is_on_trial(tiny, tmp_path):
    def test_line(run):
        return [l for l in gf.read_metrics(str(run)) if l.get("split") == "test"][-1]

    def vals(run):
        return {l["step"]: l["accuracy"] for l in gf.read_metrics(str(run)) if l.get("split") == "val"}

    # on trial after step 10: the only candidate for the best model is the validation at 10,
    # and stop_patience 1 (which would stop the run at step 20) waits for the trial to end
    _, r = train(tiny, tmp_path / "after10", [python_growth("TrialAfter", after=10),
                                              "train.stop_patience=1"])
    assert r["finished"]
    assert test_line(tmp_path / "after10")["model"] == "best (step 10)"
    assert r["best_val"] == pytest.approx(vals(tmp_path / "after10")[10])
    assert not [e for e in gf.read_events(str(tmp_path / "after10")) if e["type"] == "early_stop"]
    # on trial throughout: no best checkpoint, the last model is tested
    train(tiny, tmp_path / "always", [python_growth("TrialAfter", after=0)])
    assert test_line(tmp_path / "always")["model"].startswith("last")
    with pytest.raises(gf.RunError, match=r"\(policies\.TrialAfter\)\.on_trial at step 10 returned 'yes'; expected True or False"):
        train(tiny, tmp_path / "bad", [python_growth("TrialAfter", bad="true")])
