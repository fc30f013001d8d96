"""The out-of-tree dataset plugin examples/number_sequences, built against the build tree with its
own CMakeLists, used by every front end without a line of it outside its folder: the program
trains on its CSV files, stops and resumes, evaluates a new labelled file (`eval --data FILE`)
and predicts on records (`predict`); the Python module trains on a DataFrame, and a loaded run
evaluates a file and data in memory and predicts, each agreeing with the program.

usage: example_number_sequences.py SOURCE_DIR BUILD_DIR WORK_DIR
(PYTHONPATH holds the module of BUILD_DIR: ctest sets it)"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

SOURCE, BUILD, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
GF = os.path.join(BUILD, "bin", "growformer")
LEVELS = {"low": 0.15, "mid": 0.5, "high": 0.85}  # a class is the level its numbers lie around


def run(*cmd, ok=(0,)):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode in ok, f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}"
    return r.stdout


def rows(n, seed):
    """N rows of 16 numbers around the level of their class, noisy, and their labels."""
    rng = np.random.default_rng(seed)
    names = sorted(LEVELS)
    labels = [names[i % 3] for i in range(n)]
    x = np.array([LEVELS[y] + rng.normal(0, 0.08, 16) for y in labels])
    return x, labels


def write_csv(path, x, labels=None):
    with open(path, "w") as f:
        for i, r in enumerate(x):
            f.write(((labels[i] + ",") if labels else "") + ",".join(f"{v:.6f}" for v in r) + "\n")


def build_plugin():
    """The example with its own CMakeLists, against the build tree (find_package(growformer))."""
    out = os.path.join(WORK, "plugin")
    run("cmake", "-S", os.path.join(SOURCE, "examples", "number_sequences"), "-B", out, "-G",
        "Ninja", f"-DCMAKE_PREFIX_PATH={BUILD}")
    run("cmake", "--build", out)
    assert os.path.exists(os.path.join(out, "libgf_number_sequences.so")), os.listdir(out)
    return out


def config(data):
    return {"name": "numbers", "seed": 3, "threads": 1, "data": data,
            "model": {"d_model": 16, "layers": 1, "max_len": 16,
                      "attention": {"plugin": "mha", "heads": 2}},
            "optimizer": {"plugin": "adamw", "lr": 0.01},
            "train": {"steps": 120, "batch_size": 16, "warmup": 5, "eval_every": 40,
                      "log_every": 20}}


def program_round(plugins):
    """Train (stopped at step 60), resume, `eval --data FILE`, `predict`: the program alone."""
    x, y = rows(240, 1)
    write_csv(os.path.join(WORK, "train.csv"), x, y)
    hx, hy = rows(30, 2)
    write_csv(os.path.join(WORK, "held.csv"), hx, hy)
    write_csv(os.path.join(WORK, "records.csv"), hx)
    cfg = os.path.join(WORK, "numbers.yaml")
    with open(cfg, "w") as f:  # JSON is YAML
        json.dump(config({"plugin": "number_sequences", "train": "train.csv", "bins": 12}), f)
    run_dir = os.path.join(WORK, "run")
    run(GF, "train", cfg, "--run-dir", run_dir, "--plugin-path", plugins, "--quiet",
        "--stop-after", "60")
    assert not any(json.loads(l)["split"] == "test" for l in open(os.path.join(run_dir, "metrics.jsonl")))
    run(GF, "resume", run_dir, "--quiet")  # the plugin found again through plugins.lock
    test = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if '"test"' in l]
    assert len(test) == 1 and test[0]["accuracy"] > 0.8, test
    # a checkpoint's plugin folders are searched on the user's word: --plugin-path
    gone = run(GF, "eval", run_dir, "--data", os.path.join(WORK, "held.csv"), ok=(2,))
    assert "dataset `number_sequences`" in gone and "--plugin-path" in gone, gone
    held = json.loads(run(GF, "eval", run_dir, "--data", os.path.join(WORK, "held.csv"),
                          "--json", "--plugin-path", plugins).splitlines()[-1])
    assert held["examples"] == 30 and held["accuracy"] > 0.8, held
    assert [c["name"] for c in held["classes"]] == ["high", "low", "mid"], held["classes"]
    assert sum(map(sum, held["confusion"])) == 30
    pred = [json.loads(l) for l in run(GF, "predict", run_dir, os.path.join(WORK, "records.csv"),
                                       "--format", "jsonl", "--quiet", "--plugin-path",
                                       plugins).splitlines()]
    assert [p["id"] for p in pred] == [str(i) for i in range(1, 31)]
    agree = np.mean([p["predicted"] == t for p, t in zip(pred, hy)])
    assert agree == held["accuracy"], (agree, held["accuracy"])
    return run_dir, held, pred, (hx, hy)


def module_round(plugins, run_dir, held, pred, held_rows):
    """The module: a loaded run evaluates and predicts as the program; a DataFrame trains."""
    import pandas as pd

    import growformer as gf

    hx, hy = held_rows
    model = gf.load(run_dir, plugin_paths=[plugins])
    for data in (os.path.join(WORK, "held.csv"), (hx.tolist(), hy),
                 pd.DataFrame({**{f"x{i}": hx[:, i] for i in range(16)}, "label": hy})):
        mine = model.evaluate(data)
        assert mine["examples"] == 30 and mine["accuracy"] == held["accuracy"], mine
        assert mine["confusion"] == held["confusion"] and mine["macro_f1"] == held["macro_f1"]
    try:  # a label the model does not know, named by its row
        model.evaluate((hx[:3].tolist(), ["low", "high", "medium"]))
        raise AssertionError("an unknown label was evaluated")
    except gf.ConfigError as e:
        assert "data row 2: label `medium` is not one of the classes" in str(e), e
    p = model.predict(hx)  # a 2-D array of numbers: read as the dataset's records
    assert p.shape == (30, 3)
    assert [model.classes[i] for i in p.argmax(axis=1)] == [q["predicted"] for q in pred]
    assert np.array_equal(model.predict(list(hx)), p)
    try:
        model.predict(np.array([[0.1, float("nan")]]))
        raise AssertionError("a NaN was predicted on")
    except ValueError as e:
        assert "number 1 is nan" in str(e), e

    x, y = rows(240, 5)
    frame = pd.DataFrame({**{f"x{i}": x[:, i] for i in range(16)}, "label": y})
    tx, ty = rows(30, 6)
    test = pd.DataFrame({**{f"x{i}": tx[:, i] for i in range(16)}, "label": ty})
    ex = gf.Experiment(config({"plugin": "number_sequences", "bins": 12}), data={"train": frame, "test": test},
                       plugin_paths=[plugins])
    assert ex.data_sizes == {"train": 216, "val": 24, "test": 30}, ex.data_sizes
    run2 = os.path.join(WORK, "run-frame")
    r = ex.train(run2)
    assert r["finished"] and r["test"]["examples"] == 30 and r["test"]["accuracy"] > 0.8, r
    assert sorted(os.listdir(os.path.join(run2, "data"))) == ["test.csv", "train.csv"]
    loaded = gf.load(run2, plugin_paths=[plugins])
    assert loaded.evaluate("test")["accuracy"] == r["test"]["accuracy"]
    assert loaded.evaluate(test)["accuracy"] == r["test"]["accuracy"]
    again = json.loads(run(GF, "eval", run2, "--json", "--plugin-path", plugins).splitlines()[-1])
    assert again["accuracy"] == r["test"]["accuracy"], again
    assert np.array_equal(loaded.predict(test.drop(columns=["label"])), loaded.predict(tx))


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    plugins = build_plugin()
    run_dir, held, pred, held_rows = program_round(plugins)
    module_round(plugins, run_dir, held, pred, held_rows)
    print("number_sequences: built out of tree; trained, resumed, evaluated and predicted from the "
          "program and the module")


if __name__ == "__main__":
    main()
