"""The module's API as a Python user meets it: paths and numpy integers where paths and ints go,
one result dict for train(), a stopped run and resume(), counts as ints, a policy's exception
as the __cause__ of the error, and a policy class given as the class object."""
import os
import pathlib
import subprocess
import sys
import traceback

import numpy as np
import pytest

import growformer as gf
import policies
from conftest import HERE, cli, python_growth

RESULT_KEYS = {"status", "run_dir", "finished", "stopped_at", "best_val", "test",
               "growth_summary", "pruning_summary"}
TEST_KEYS = {"loss", "accuracy", "examples", "majority_class_accuracy", "model", "evaluated_on",
             "heads"}


def test_paths_and_numpy_ints_are_accepted(tiny, tmp_path):
    run = tmp_path / "run"
    ex = gf.Experiment(pathlib.Path(tiny), plugin_paths=[tmp_path])
    steps = []
    r = ex.train(run, callback=lambda m: steps.append(m["step"]), every=np.int64(10),
                 stop_after=np.int64(20))
    assert steps == [10, 20] and r["stopped_at"] == 20 and r["run_dir"] == str(run)
    assert gf.resume(run, plugin_paths=[tmp_path])["finished"]
    ck = run / "checkpoints" / "best.safetensors"
    model = gf.load(ck)
    assert gf.load(str(ck)).evaluate("test") == model.evaluate("test")
    assert model.evaluate("test", max_batches=np.int64(1))["examples"] == 16
    tokens, _ = model.split_tokens("test")
    rows = [np.array(t, dtype=np.int64) for t in tokens[:5]]
    assert np.array_equal(model.predict(rows, batch_size=np.int64(2)), model.predict(tokens[:5]))
    assert gf.read_metrics(run) == gf.read_metrics(str(run))
    assert gf.read_events(run) == gf.read_events(str(run))
    assert gf.Config.load(pathlib.Path(tiny)).to_dict()["train"]["steps"] == 40
    # anything else: one TypeError naming the argument
    with pytest.raises(TypeError, match=r"load: checkpoint is a path \(a str or an os.PathLike"):
        gf.load(3)
    with pytest.raises(TypeError, match=r"load: plugin_paths is a list of paths, not '/x' \(wrap"):
        gf.load(ck, plugin_paths="/x")
    with pytest.raises(TypeError, match=r"train: run_dir is a path .* not 7"):
        gf.Experiment(tiny).train(7)


def test_numpy_numbers_in_a_config_and_in_a_policy_answers(tiny, tmp_path):
    cfg = gf.Config.load(tiny).to_dict()
    cfg["train"]["steps"] = np.int64(40)
    cfg["optimizer"]["lr"] = np.float32(0.003)
    cfg["growth"] = {"plugin": "python", "class": "policies.NumpyEdits", "path": [HERE],
                     "options": {"at": np.int64(20), "remove_at": 30}}
    ex = gf.Experiment(cfg)
    r = ex.train(tmp_path / "run")
    assert r["finished"] and ex.heads_per_block == [2]
    evs = gf.read_events(tmp_path / "run")
    edits = [(e["step"], e["type"], e["head"]) for e in evs if e["type"] in ("grow", "prune")]
    assert edits == [(20, "grow", 2), (30, "prune", 0)]
    grow = [e for e in evs if e["type"] == "grow"][0]
    assert grow["reason"] == "numpy" and grow["checks"] == 2 and type(grow["checks"]) is int
    checks = [e for e in evs if e["type"] == "numpy_check"]
    assert [e["checks"] for e in checks] == [1, 2, 3, 4]
    assert checks[-1]["share"] == 0.5 and checks[-1]["sizes"] == [2, 1.5]
    assert r["growth_summary"] == {"checks": 4, "share": 0.25}
    assert type(r["growth_summary"]["checks"]) is int


def stopped_and_resumed(tiny, tmp_path, sets):
    """(whole run, the same stopped at 15, resumed, resumed again once finished) results."""
    whole = gf.Experiment(tiny, overrides=sets).train(tmp_path / "whole")
    stopped = gf.Experiment(tiny, overrides=sets).train(tmp_path / "parts",
                                                       callback=lambda m: m["step"] < 15, every=5)
    resumed = gf.resume(tmp_path / "parts")
    again = gf.resume(tmp_path / "parts")
    return whole, stopped, resumed, again


def test_one_result_shape_for_train_a_stopped_run_and_resume(tiny, tmp_path):
    sets = [python_growth("AddAt", at=20)]
    whole, stopped, resumed, again = stopped_and_resumed(tiny, tmp_path, sets)
    for r in (whole, stopped, resumed, again):
        assert set(r) == RESULT_KEYS, r
    val = {l["step"]: l["accuracy"] for l in gf.read_metrics(tmp_path / "parts") if l["split"] == "val"}
    # stopped: where, and the best validation so far; no test and no summaries yet
    assert stopped["finished"] is False and stopped["stopped_at"] == 15
    assert stopped["best_val"] == pytest.approx(val[10])
    assert stopped["test"] is None and stopped["growth_summary"] is None
    assert stopped["pruning_summary"] is None
    # resumed to the end: the result of the run that went through in one piece
    assert resumed["finished"] and resumed["stopped_at"] is None
    assert set(resumed["test"]) == TEST_KEYS
    assert {k: v for k, v in resumed.items() if k != "run_dir"} == \
        {k: v for k, v in whole.items() if k != "run_dir"}
    assert resumed["growth_summary"] == {"checks": 4, "edits_seen": 1}
    assert all(type(v) is int for v in resumed["growth_summary"].values())
    assert resumed["pruning_summary"] == {}
    assert resumed["best_val"] == max(val.values())
    t = resumed["test"]
    assert t["examples"] == 64 and t["heads"] == [3] and 0 <= t["majority_class_accuracy"] <= 1
    # a finished run resumed is tested again, as `growformer resume` does
    assert again["finished"] and again["test"] == resumed["test"]
    test_lines = [l for l in gf.read_metrics(tmp_path / "parts") if l["split"] == "test"]
    assert len(test_lines) == 1 and test_lines[0]["accuracy"] == again["test"]["accuracy"]
    rc, out = cli("resume", str(tmp_path / "parts"))
    assert rc == 0 and f"accuracy {again['test']['accuracy']:g}" in out, out


def test_counts_are_ints_in_the_logs(tiny, tmp_path):
    gf.Experiment(tiny, overrides=[python_growth("AddAt", at=20)]).train(tmp_path / "run")
    lines = gf.read_metrics(tmp_path / "run")
    for l in lines:
        assert all(type(h) is int for h in l["heads"]), l
        assert type(l["loss"]) is float
        if l["split"] != "train":
            assert type(l["examples"]) is int
    assert [l["heads"] for l in lines if l["split"] == "val"] == [[2], [3], [3], [3]]
    evs = gf.read_events(tmp_path / "run")
    grow = [e for e in evs if e["type"] == "grow"][0]
    assert type(grow["checks"]) is int and type(grow["step"]) is int and type(grow["head"]) is int
    checks = [e for e in evs if e["type"] == "python_check"]
    assert [e["checks"] for e in checks] == [1, 2, 3, 4] and type(checks[0]["loss"]) is float
    summary = [e for e in evs if e["type"] == "summary"][-1]
    assert summary["growth.checks"] == 4 and type(summary["growth.checks"]) is int


def test_a_policy_exception_is_the_cause(tiny, tmp_path):
    with pytest.raises(gf.RunError, match=r"\(policies.RaisesOwnError\)\.check at step 10 raised") as e:
        gf.Experiment(tiny, overrides=[python_growth("RaisesOwnError", at=10)]).train(tmp_path / "a")
    cause = e.value.__cause__
    assert isinstance(cause, policies.RaisesOwnError.Failure) and cause.step == 10
    # its traceback reaches into the policy: a post-mortem debugger lands in `fail`
    frames = [f.name for f in traceback.extract_tb(cause.__traceback__)]
    assert frames[-2:] == ["check", "fail"], frames
    # a class whose construction raises: the TypeError is the ConfigError's cause
    with pytest.raises(gf.ConfigError, match="unexpected keyword argument 'att'") as e:
        gf.Experiment(tiny, overrides=[python_growth("AddAt", att=3)])
    assert isinstance(e.value.__cause__, TypeError)
    # an error that is no policy's has no cause (nothing kept from the last one)
    with pytest.raises(gf.ConfigError, match="did you mean `steps`") as e:
        gf.Experiment(tiny, overrides=["train.stpes=3"])
    assert e.value.__cause__ is None
    with pytest.raises(gf.RunError, match="check at step 10 returned None") as e:
        gf.Experiment(tiny, overrides=[python_growth("ReturnsNone")]).train(tmp_path / "b")
    assert e.value.__cause__ is None


class LocalAddAt(policies.AddAt):
    """AddAt defined in this test module (found again as test_api.LocalAddAt)."""


def test_a_policy_class_given_as_the_class_object(tiny, tmp_path):
    cfg = gf.Config.load(tiny).to_dict()
    cfg["growth"] = {"plugin": "python", "class": policies.AddAt,
                     "options": {"at": 20, "reason": "by-object"}}
    ex = gf.Experiment(cfg)
    # recorded by name, with its module's folder on the policy's path
    growth = gf.Config.from_dict(cfg).to_dict()["growth"]
    assert growth["class"] == "policies.AddAt" and growth["path"] == [HERE]
    r = ex.train(tmp_path / "run", stop_after=25)
    assert r["stopped_at"] == 25
    grow = [e for e in gf.read_events(tmp_path / "run") if e["type"] == "grow"]
    assert [(g["step"], g["class"], g["reason"]) for g in grow] == [(20, "policies.AddAt", "by-object")]
    # so the program resumes it without being told where the class lives
    rc, out = cli("resume", str(tmp_path / "run"), "--quiet")
    assert rc == 0, out
    # a class of the test module itself, next to a `path` given as a str
    cfg["growth"] = {"plugin": "python", "class": LocalAddAt, "path": str(tmp_path),
                     "options": {"at": 20}}
    growth = gf.Config.from_dict(cfg).to_dict()["growth"]
    assert growth["class"] == "test_api.LocalAddAt" and growth["path"] == [str(tmp_path), HERE]
    assert gf.Experiment(cfg).train(tmp_path / "local")["growth_summary"]["edits_seen"] == 1

    class Inner(policies.AddAt):
        pass

    cfg["growth"]["class"] = Inner
    with pytest.raises(gf.ConfigError, match=r"growth\.class: the class .*Inner.* is defined inside a function"):
        gf.Experiment(cfg)
    cfg["growth"] = {"plugin": "python", "class": "policies.AddAt", "path": [HERE],
                     "options": {"at": lambda: 20}}
    with pytest.raises(gf.ConfigError, match=r"growth\.options\.at: <function .*> \(function\) is not a config value"):
        gf.Experiment(cfg)


def test_a_policy_class_of_the_script_names_the_way_to_resume(tiny, tmp_path):
    # a class defined in the script that trains (its __main__): the program, which runs no
    # script, says so and how to go on, instead of "cannot import module `__main__`"
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        "import growformer as gf\n"
        "class EveryN:\n"
        "    def check(self, view):\n"
        "        return []\n"
        "cfg = gf.Config.load(sys.argv[1]).to_dict()\n"
        "cfg['growth'] = {'plugin': 'python', 'class': EveryN}\n"
        "assert gf.Experiment(cfg).train(sys.argv[2], stop_after=10)['stopped_at'] == 10\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, str(script), tiny, str(tmp_path / "run")], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode == 0, r.stdout
    rc, out = cli("resume", str(tmp_path / "run"), "--quiet")
    assert rc == 2, out
    assert "`__main__.EveryN` was defined in the script that started the run" in out, out
    assert "growformer.resume(run_dir)" in out, out
