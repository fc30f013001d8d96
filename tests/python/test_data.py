"""Data given in memory (lists, numpy arrays, DataFrames), evaluation as `growformer eval`
reports it, predict's inputs read once, and the module from several Python threads."""
import json
import os
import threading

import numpy as np
import pytest

import growformer as gf
from conftest import cli

pd = pytest.importorskip("pandas", reason="python3-pandas is not installed")

WORDS = ["film", "plot", "story", "fun", "dull", "actor", "scene"]


def texts_and_labels(n, offset=0):
    """A learnable toy task: the label is whether `good` (pos) or `bad` (neg) occurs."""
    texts, labels = [], []
    for i in range(offset, offset + n):
        pos = i % 2 == 0
        texts.append(f"{WORDS[i % 7]} {'good' if pos else 'bad'} {WORDS[(i // 7) % 7]}")
        labels.append("pos" if pos else "neg")
    return texts, labels


def config(**train):
    t = {"steps": 30, "batch_size": 16, "warmup": 2, "eval_every": 15, "log_every": 5}
    t.update(train)
    return {"name": "mem", "seed": 1, "threads": 1,
            "model": {"d_model": 16, "layers": 1, "max_len": 16,
                      "attention": {"plugin": "mha", "heads": 2}},
            "optimizer": {"plugin": "adamw", "lr": 0.01}, "train": t}


def test_a_dataframe_trains_and_its_run_directory_holds_the_data(tmp_path):
    texts, labels = texts_and_labels(160)
    df = pd.DataFrame({"text": texts, "label": labels})
    ex = gf.Experiment(config(), data=df)
    # the file readers' splits: val and test carved by the ratios, the vocabulary from train
    assert ex.data_sizes == {"train": 128, "val": 16, "test": 16}
    assert ex.classes == ["neg", "pos"]
    assert ex.vocab[:2] == ["<pad>", "<unk>"] and "good" in ex.vocab
    run = tmp_path / "run"
    r = ex.train(run)
    assert r["finished"] and r["test"]["examples"] == 16
    # the rows as JSON lines in RUN/data, named by the run's config
    lines = (run / "data" / "train.jsonl").read_text().splitlines()
    assert [json.loads(l) for l in lines[:2]] == [{"text": texts[0], "label": "pos"},
                                                  {"text": texts[1], "label": "neg"}]
    resolved = (run / "config.resolved.yaml").read_text()
    assert str(run / "data" / "train.jsonl") in resolved and "format: jsonl" in resolved
    # so the program evaluates and resumes the run without being told where the data is
    best = str(run / "checkpoints" / "best.safetensors")
    rc, out = cli("eval", best, "--split", "test", "--json")
    assert rc == 0, out
    assert json.loads(out.splitlines()[-1])["accuracy"] == r["test"]["accuracy"]
    model = gf.load(best)
    assert model.evaluate("test")["accuracy"] == r["test"]["accuracy"]


def test_the_same_rows_in_memory_and_in_a_file_give_the_same_run(tmp_path):
    texts, labels = texts_and_labels(96)
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in zip(texts, labels)))
    from_file = config()
    from_file["data"] = {"plugin": "text_tsv", "train": str(path)}
    a = gf.Experiment(from_file)
    a.train(tmp_path / "a")
    b = gf.Experiment(config(), data=(texts, labels))
    b.train(tmp_path / "b")
    assert a.vocab == b.vocab and a.split_tokens("test") == b.split_tokens("test")
    keep = ("step", "split", "loss", "accuracy", "lr", "heads", "examples")
    strip = lambda ls: [{k: l.get(k) for k in keep} for l in ls]  # noqa: E731 (no timings)
    assert strip(gf.read_metrics(tmp_path / "a")) == strip(gf.read_metrics(tmp_path / "b"))


def test_splits_token_ids_and_resume_from_the_program(tmp_path):
    rng = np.random.default_rng(0)
    # token ids: class 1 holds id 7 somewhere, class 0 never; ids 0..9
    x = rng.integers(0, 7, size=(120, 6))
    y = np.arange(120) % 2
    x[y == 1, 2] = 7
    data = {"train": (x[:80], y[:80]), "val": (x[80:100], y[80:100]),
            "test": ([list(r) for r in x[100:]], list(y[100:]))}
    ex = gf.Experiment(config(steps=40), data=data)
    assert ex.data_sizes == {"train": 80, "val": 20, "test": 20}
    assert ex.vocab_size == 9 and ex.pad_id == 8  # ids 0..7 and the padding
    assert ex.classes == ["0", "1"]
    run = tmp_path / "run"
    r = ex.train(run, stop_after=20)
    assert r["stopped_at"] == 20
    assert sorted(os.listdir(run / "data")) == ["test.jsonl", "train.jsonl", "val.jsonl"]
    rc, out = cli("resume", str(run), "--quiet")
    assert rc == 0, out
    model = gf.load(run / "checkpoints" / "last.safetensors")
    # predict takes the ids as they were given (a 2-D array, lists, a generator of rows)
    p = model.predict(x[100:])
    assert np.array_equal(p, model.predict(list(x[100:])))
    assert np.array_equal(p, model.predict(r for r in x[100:]))
    assert np.mean(p.argmax(axis=1) == y[100:]) == model.evaluate("test")["accuracy"]
    with pytest.raises(ValueError, match="not a token id"):
        model.predict([[1, 9]])


def test_evaluate_reports_as_the_program_does_on_files_and_memory(tmp_path):
    texts, labels = texts_and_labels(120)
    ex = gf.Experiment(config(), data=(texts, labels))
    ex.train(tmp_path / "run")
    best = str(tmp_path / "run" / "checkpoints" / "best.safetensors")
    new_texts, new_labels = texts_and_labels(9, offset=500)
    new_texts[0] = "zebra, good"  # an unseen word, a comma in a quoted CSV field
    new_labels[1] = "pos"         # a wrong guess for the confusion matrix
    csv = tmp_path / "new.csv"
    csv.write_text("text,label\n" + "".join(f'"{t}",{l}\n' for t, l in zip(new_texts, new_labels)))
    rc, out = cli("eval", best, "--set", f"data.test={csv}", "--set", "data.text_column=text",
                  "--set", "data.format=auto", "--json")
    assert rc == 0, out
    theirs = json.loads(out.splitlines()[-1])
    model = gf.load(best)
    for data in (csv, str(csv), (new_texts, new_labels),
                 pd.DataFrame({"text": new_texts, "label": new_labels})):
        mine = model.evaluate(data)
        assert mine["split"] == "data"
        assert mine["examples"] == theirs["examples"] == 9
        assert mine["accuracy"] == theirs["accuracy"] and mine["macro_f1"] == theirs["macro_f1"]
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=1e-12)
        assert mine["confusion"] == theirs["confusion"]
        assert mine["classes"] == theirs["classes"]
    assert sum(map(sum, theirs["confusion"])) == 9 and [c["name"] for c in theirs["classes"]] == ["neg", "pos"]
    # the trained experiment evaluates the same (its weights are the tested best: test_on best)
    assert ex.evaluate((new_texts, new_labels)) == model.evaluate((new_texts, new_labels))
    # a split's report has the same keys
    assert set(model.evaluate("test")) == set(theirs) - {"checkpoint", "heads"} | {"split"}
    with pytest.raises(gf.ConfigError, match=r"evaluate: `tset` is neither a split \('train', 'val' "
                                             r"or 'test'\) nor a data file"):
        model.evaluate("tset")
    with pytest.raises(gf.ConfigError, match=r"evaluate: data row 2: label `maybe` is not one of "
                                             r"the checkpoint's classes \(neg, pos\)"):
        model.evaluate((["good", "bad", "so so"], ["pos", "neg", "maybe"]))


def test_bad_data_is_one_message_naming_the_split_and_row(tmp_path):
    texts, labels = texts_and_labels(40)
    bad = list(texts)
    bad[3] = "ok \udc80 then"
    with pytest.raises(gf.ConfigError, match=r"data\['train'\]\[0\]\[3\]: the text holds '\\udc80' at "
                                             r"character 3, a lone surrogate"):
        gf.Experiment(config(), data=(bad, labels))
    with pytest.raises(gf.ConfigError, match=r"data\['train'\]: 40 inputs but 39 labels"):
        gf.Experiment(config(), data=(texts, labels[1:]))
    with pytest.raises(gf.ConfigError, match=r"data\['train'\] label 5: 1 is a int, but label 0 of "
                                             r"data\['train'\] is a str"):
        gf.Experiment(config(), data=(texts, labels[:5] + [1] + labels[6:]))
    with pytest.raises(gf.ConfigError, match=r"data\['train'\]\[1\]\[4\]: the label is missing \(NaN\)"):
        gf.Experiment(config(), data=(texts, [0.0] * 4 + [float("nan")] + [1.0] * 35))
    # float labels are read as the int classes they equal, and it is said
    with pytest.warns(UserWarning, match=r"data\['train'\]: the labels are floats \(0\.0, \.\.\.\)"):
        gf.Experiment(config(), data=(texts, [float(i % 2) for i in range(40)]))
    # a missing text names its row and the cause (not "a text among token id sequences")
    gap = pd.DataFrame({"text": texts[:6] + [float("nan")] + texts[7:], "label": labels})
    with pytest.raises(gf.ConfigError, match=r"data\['train'\]\['text'\]\[6\]: the text is "
                                             r"missing \(NaN\)"):
        gf.Experiment(config(), data=gap)
    with pytest.raises(gf.ConfigError, match=r"data\['train'\]\[0\]\[2\]: the text is missing "
                                             r"\(None\)"):
        gf.Experiment(config(), data=(texts[:2] + [None] + texts[3:], labels))
    with pytest.raises(gf.ConfigError, match=r"data\['train'\]\[0\]\[0\]: bytes, not a text"):
        gf.Experiment(config(), data=([t.encode() for t in texts], labels))
    df = pd.DataFrame({"review": texts, "label": labels})
    with pytest.raises(gf.ConfigError, match=r"the DataFrame has no text column \(looked for 'text' or "
                                             r"'sentence'; set data.text_column .*columns: review, label"):
        gf.Experiment(config(), data=df)
    cfg = config()
    cfg["data"] = {"text_column": "review"}
    assert gf.Experiment(cfg, data=df).data_sizes["train"] == 32
    # the reader's own checks, named by split and row: a validation label unseen in training
    with pytest.raises(gf.ConfigError, match=r"data\['val'\] row 1: label `meh` does not occur in "
                                             r"the training split"):
        gf.Experiment(config(), data={"train": (texts, labels), "val": (["a", "b"], ["pos", "meh"])})
    # the same through train(data=...): nothing reaches the run directory, the experiment keeps
    # the data it had and trains on it
    ex = gf.Experiment(config(steps=10), data=(texts, labels))
    with pytest.raises(gf.ConfigError, match=r"data\['val'\] row 1: label `meh`"):
        ex.train(tmp_path / "r2", data={"train": (texts, labels), "val": (["a", "b"], ["pos", "meh"])})
    assert not (tmp_path / "r2").exists()
    assert ex.train(tmp_path / "r2")["finished"] and ex.data_sizes["train"] == 32
    with pytest.raises(gf.ConfigError, match=r"the keys of a dict of splits are train, val, test, not 'text'"):
        gf.Experiment(config(), data={"text": texts, "label": labels})
    # a config that names files, or another dataset, with data in memory
    cfg["data"] = {"plugin": "text_tsv", "train": "x.tsv"}
    with pytest.raises(gf.ConfigError, match=r"config names data files \(data.train\)"):
        gf.Experiment(cfg, data=(texts, labels))
    cfg["data"] = {"plugin": "listops"}
    with pytest.raises(gf.ConfigError, match="data.plugin is `listops`"):
        gf.Experiment(cfg, data=(texts, labels))
    # a run directory that holds another run
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "metrics.jsonl").write_text("")
    with pytest.raises(gf.ConfigError, match="the run directory exists and is not empty"):
        gf.Experiment(config(), data=(texts, labels)).train(tmp_path / "full")
    assert not (tmp_path / "full" / "data").exists()


def test_train_takes_the_data_and_predict_reads_inputs_once(tmp_path):
    texts, labels = texts_and_labels(80)
    cfg = config()
    cfg["data"] = {"tokenizer": "word", "max_len": 4}
    ex = gf.Experiment(cfg, data=(texts[:40], labels[:40]))
    r = ex.train(tmp_path / "run", data=pd.DataFrame({"sentence": texts, "label": labels}))
    assert r["finished"] and ex.data_sizes["train"] == 64
    model = gf.load(tmp_path / "run" / "checkpoints" / "best.safetensors", data="none")
    want = model.predict(texts[:5])
    assert np.array_equal(model.predict(t for t in texts[:5]), want)           # a generator
    assert np.array_equal(model.predict(pd.Series(texts[:5])), want)          # a Series
    assert np.array_equal(model.predict(pd.DataFrame({"sentence": texts[:5]})), want)
    assert np.array_equal(model.predict(np.array(texts[:5])), want)
    with pytest.raises(ValueError, match=r"predict: input 1 holds '\\ud800' at character 2, a lone surrogate"):
        model.predict(["ok", "no\ud800"])
    logits = model.predict(texts[:5], logits=True)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    assert np.allclose(e / e.sum(axis=1, keepdims=True), want, rtol=1e-6, atol=1e-9)


def test_two_experiments_from_two_threads_both_finish(tmp_path):
    # without the module's lock two runs at once shared the thread pool: a hang or a crash in
    # about half of such rounds
    texts, labels = texts_and_labels(80)
    cfg = config(steps=150)
    cfg["threads"] = 2  # each run sets the process's thread pool
    for round in range(3):
        results, errors = {}, []

        def work(name):
            try:
                ex = gf.Experiment(cfg, data=(texts, labels))
                results[name] = ex.train(tmp_path / f"{name}{round}")["finished"]
                results[name + "-eval"] = ex.evaluate((texts[:8], labels[:8]))["examples"]
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(n,), daemon=True) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not any(t.is_alive() for t in threads), "a thread hung"
        assert not errors, errors
        assert results == {"a": True, "b": True, "a-eval": 8, "b-eval": 8}
        # the two runs are the same run: the lock serialised them, nothing was shared
        assert gf.read_metrics(tmp_path / f"a{round}")[-1]["accuracy"] == \
            gf.read_metrics(tmp_path / f"b{round}")[-1]["accuracy"]


def test_logs_that_are_binary_give_a_message(tmp_path):
    junk = tmp_path / "metrics.jsonl"
    junk.write_bytes(bytes(range(128, 256)) * 4 + bytes(range(256)))
    for read in (gf.read_metrics, gf.read_events):
        with pytest.raises(gf.RunError) as e:
            read(junk)
        assert str(e.value).startswith(f"{junk}:1: corrupt line (not a JSON object)"), str(e.value)
        assert "\\x80" in str(e.value)
