"""A checkpoint stands alone: gf.load, `growformer eval` and `predict` take a run directory; a
checkpoint loads and predicts without its training files (a split is read when evaluated, and a
file that is gone is one error saying what to do); plugins found outside the built-in folders
are found again through the folders the checkpoint records; images in memory (numpy arrays) train,
evaluate and predict through the idx_images dataset; and docs/PYTHON.md documents every field of
the view a Python policy receives."""
import json
import os
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

import growformer as gf
from conftest import SOURCE, cli

WORDS = ["good", "great", "fun", "bad", "dull", "awful"]


def text_rows(n, start=0):
    return [f"{WORDS[i % 3 + 3 * (i % 2)]} {WORDS[(i + 1) % 3 + 3 * (i % 2)]}\t{i % 2}"
            for i in range(start, start + n)]


def text_run(tmp_path, **attention_options):
    """The config of a tiny text_tsv run on TMP_PATH/train.tsv (written here)."""
    (tmp_path / "train.tsv").write_text("\n".join(["sentence\tlabel"] + text_rows(80)) + "\n")
    attention = {"plugin": "mha", "heads": 1, **attention_options}
    cfg = {"name": "t", "seed": 3, "threads": 1,
           "data": {"plugin": "text_tsv", "train": str(tmp_path / "train.tsv")},
           "model": {"d_model": 8, "layers": 1, "max_len": 8, "attention": attention},
           "train": {"steps": 6, "batch_size": 8, "eval_every": 3, "log_every": 3}}
    return cfg


def test_load_eval_and_predict_take_a_run_directory(tmp_path):
    cfg = text_run(tmp_path)
    run = tmp_path / "run"
    assert gf.Experiment(cfg).train(run)["finished"]
    best = run / "checkpoints" / "best.safetensors"
    last = run / "checkpoints" / "last.safetensors"
    inputs = ["good fun", "dull awful"]
    want = gf.load(best).predict(inputs)
    assert np.array_equal(gf.load(run).predict(inputs), want)
    assert np.array_equal(gf.load(str(run)).predict(inputs), want)
    rc, out = cli("eval", str(run), "--json")
    assert rc == 0, out
    assert json.loads(out.strip().splitlines()[-1])["checkpoint"] == str(best)
    (tmp_path / "in.txt").write_text("good fun\ndull awful\n")
    rc, out = cli("predict", str(run), str(tmp_path / "in.txt"), "--quiet")
    assert rc == 0 and out.splitlines()[0].startswith("id\tpredicted"), out
    # best first: a damaged best checkpoint is the one read, not passed over
    shutil.copy(best, tmp_path / "best.keep")
    best.write_bytes(b"not a checkpoint")
    with pytest.raises(gf.RunError, match="best.safetensors"):
        gf.load(run)
    # without best, the last
    best.unlink()
    assert np.array_equal(gf.load(run).predict(inputs), gf.load(last).predict(inputs))
    rc, out = cli("eval", str(run), "--json")
    assert rc == 0 and json.loads(out.strip().splitlines()[-1])["checkpoint"] == str(last), out
    # neither: the message names what it looked for
    last.unlink()
    with pytest.raises(gf.RunError) as e:
        gf.load(run)
    assert "best.safetensors" in str(e.value) and "last.safetensors" in str(e.value)
    rc, out = cli("eval", str(run))
    assert rc == 1 and "best.safetensors" in out and "last.safetensors" in out, out


def test_a_checkpoint_loads_and_predicts_without_its_training_files(tmp_path):
    cfg = text_run(tmp_path)
    run = tmp_path / "run"
    assert gf.Experiment(cfg).train(run)["finished"]
    ck = run / "checkpoints" / "best.safetensors"
    (tmp_path / "other.tsv").write_text("\n".join(["sentence\tlabel"] + text_rows(20, 3)) + "\n")
    inputs = ["good fun", "Awful dull", "zebra"]
    eager = gf.load(ck, data="all")
    want, vocab = eager.predict(inputs), eager.vocab
    # the default reads a split only when asked for: the same figures as reading all at load
    lazy = gf.load(ck)
    assert lazy.data_sizes == {"train": 0, "val": 0, "test": 0}
    assert lazy.evaluate("test") == eager.evaluate("test")
    assert lazy.split_tokens("val") == eager.split_tokens("val")
    assert lazy.data_sizes == {"train": 0, "val": eager.data_sizes["val"], "test": eager.data_sizes["test"]}

    os.rename(tmp_path / "train.tsv", tmp_path / "moved.tsv")
    model = gf.load(ck)  # default arguments: the checkpoint alone
    assert np.array_equal(model.predict(inputs), want)
    assert model.classes == eager.classes and model.vocab == vocab and model.vocab_size == eager.vocab_size
    with pytest.raises(gf.ConfigError) as e:
        model.evaluate("test")
    msg = str(e.value)
    assert str(tmp_path / "train.tsv") in msg, msg
    assert "evaluate(data=PATH)" in msg and "DataFrame" in msg and "data='none'" in msg, msg
    with pytest.raises(gf.ConfigError, match=re.escape(str(tmp_path / "train.tsv"))):
        model.split_tokens("train")
    other = model.evaluate(tmp_path / "other.tsv")
    assert other["examples"] == 20
    assert model.evaluate((["good fun"] * 2 + ["dull awful"], ["0", "0", "1"]))["examples"] == 3
    # the program, too: another file, a data config naming only the test file, and the split
    # whose file is gone with what to do instead
    for args in (["--data", str(tmp_path / "other.tsv")],
                 ["--set", "data.test=" + str(tmp_path / "other.tsv")]):
        rc, out = cli("eval", str(ck), "--json", *args)
        assert rc == 0, out
        theirs = json.loads(out.strip().splitlines()[-1])
        assert theirs["accuracy"] == other["accuracy"] and theirs["examples"] == 20
        assert theirs["loss"] == pytest.approx(other["loss"], rel=1e-12)
    (tmp_path / "data.yaml").write_text(f"data: {{plugin: text_tsv, test: {tmp_path / 'other.tsv'}}}\n")
    rc, out = cli("eval", str(ck), "--json", "--data", str(tmp_path / "data.yaml"))
    assert rc == 0 and json.loads(out.strip().splitlines()[-1])["examples"] == 20, out
    rc, out = cli("eval", str(ck), "--split", "val")
    assert rc == 2 and str(tmp_path / "train.tsv") in out and "--data FILE" in out, out
    rc, out = cli("predict", str(ck), str(tmp_path / "other.tsv"), "--quiet")
    assert rc == 0 and len(out.splitlines()) == 21, out
    # data='none' reads nothing, ever
    with pytest.raises(gf.ConfigError, match="data='none'"):
        gf.load(ck, data="none").evaluate("val")
    with pytest.raises(ValueError, match="data must be None"):
        gf.load(ck, data="some")


def build_template_plugin(tmp_path):
    """examples/plugin_template (the temperature_dot head) built out of tree against this build;
    the folder holding its library."""
    build_dir = os.environ.get("GF_BUILD_DIR")
    if not build_dir or not shutil.which("cmake"):
        pytest.skip("GF_BUILD_DIR is not set or cmake is missing (run through ctest)")
    b = tmp_path / "plugin-build"
    env = dict(os.environ)
    for cmd in (["cmake", "-S", os.path.join(SOURCE, "examples", "plugin_template"), "-B", str(b),
                 "-DCMAKE_PREFIX_PATH=" + build_dir, "-DCMAKE_BUILD_TYPE=Release"],
                ["cmake", "--build", str(b)]):
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                           timeout=600)
        assert r.returncode == 0, r.stdout
    folder = tmp_path / "plugins"
    folder.mkdir()
    shutil.copy(b / "libgf_temperature_dot.so", folder)
    return folder


def test_plugin_folders_recorded_in_the_checkpoint(tmp_path):
    folder = build_template_plugin(tmp_path)
    cfg = text_run(tmp_path, head={"plugin": "temperature_dot"})
    run = tmp_path / "run"
    assert gf.Experiment(cfg, plugin_paths=[folder]).train(run)["finished"]
    ck = run / "checkpoints" / "best.safetensors"
    want = gf.load(ck, plugin_paths=[folder]).predict(["good fun"])
    # the checkpoint's recorded folder is searched only when the user trusts it
    with pytest.raises(gf.ConfigError, match=r"(?s)temperature_dot.*trust_plugins=True"):
        gf.load(ck)
    assert np.array_equal(gf.load(ck, trust_plugins=True).predict(["good fun"]), want)
    rc, out = cli("eval", str(ck), "--json")
    assert rc == 2 and "--trust-checkpoint-plugins" in out, out
    rc, out = cli("eval", str(ck), "--json", "--trust-checkpoint-plugins")
    assert rc == 0, out
    (tmp_path / "in.txt").write_text("good fun\n")
    rc, out = cli("predict", str(ck), str(tmp_path / "in.txt"), "--quiet",
                  "--trust-checkpoint-plugins")
    assert rc == 0, out
    # the folder gone: the error names the plugin, where it was and how to give it
    moved = tmp_path / "elsewhere"
    os.rename(folder, moved)
    with pytest.raises(gf.ConfigError) as e:
        gf.load(ck, trust_plugins=True)
    msg = str(e.value)
    assert "temperature_dot" in msg and str(folder) in msg and "plugin_paths=[DIR]" in msg, msg
    rc, out = cli("eval", str(ck), "--trust-checkpoint-plugins")
    assert rc == 2 and "temperature_dot" in out and str(folder) in out and "--plugin-path DIR" in out, out
    rc, out = cli("predict", str(ck), str(tmp_path / "in.txt"), "--trust-checkpoint-plugins")
    assert rc == 2 and "--plugin-path DIR" in out, out
    assert np.array_equal(gf.load(ck, plugin_paths=[moved]).predict(["good fun"]), want)
    rc, out = cli("eval", str(ck), "--json", "--plugin-path", str(moved))
    assert rc == 0, out


# ---- images in memory ----------------------------------------------------------------------
def images(n, seed):
    """N 6x6 uint8 images of 2 classes (bright top half or bright bottom half, noisy)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    x = rng.integers(0, 90, (n, 6, 6))
    for i, y in enumerate(labels):
        x[i, :3] += 150 * (y == 1)
        x[i, 3:] += 150 * (y == 0)
    return x.astype(np.uint8), labels


def idx_bytes(array):
    """An IDX file of uint8 ARRAY, written here independently of the module."""
    head = bytes([0, 0, 8, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    return head + array.astype(np.uint8).tobytes()


IMAGE_CONFIG = {"name": "img", "seed": 5, "threads": 1,
                "data": {"plugin": "idx_images", "levels": 8, "val_ratio": 0.25},
                "model": {"d_model": 8, "layers": 1, "max_len": 36, "attention": {"plugin": "mha", "heads": 1}},
                "train": {"steps": 6, "batch_size": 8, "eval_every": 3, "log_every": 3}}


def test_images_in_memory_train_evaluate_and_predict(tmp_path):
    (x, y), (tx, ty) = images(48, 1), images(16, 2)
    ex = gf.Experiment(IMAGE_CONFIG, data={"train": (x, y), "test": (tx, ty)})
    assert ex.data_sizes == {"train": 36, "val": 12, "test": 16}
    # the file route: the same images as IDX files named in the config give the same tokens
    files = {}
    for name, arr in (("train_images", x), ("train_labels", y), ("test_images", tx), ("test_labels", ty)):
        files[name] = str(tmp_path / name)
        (tmp_path / name).write_bytes(idx_bytes(np.asarray(arr)))
    by_file = gf.Experiment({**IMAGE_CONFIG, "data": {**IMAGE_CONFIG["data"], **files}})
    for split in ("train", "val", "test"):
        assert ex.split_tokens(split) == by_file.split_tokens(split), split
    # flat images with a shape, and without the plugin named (arrays of images choose it)
    flat = {"train": (gf.Images(x.reshape(48, 36), shape=(6, 6)), list(y)), "test": (tx, ty)}
    cfg = {**IMAGE_CONFIG, "data": {"levels": 8, "val_ratio": 0.25}}
    run = tmp_path / "run"
    r = gf.Experiment(cfg, data=flat).train(run)
    assert r["finished"] and r["test"]["examples"] == 16
    assert sorted(os.listdir(run / "data")) == ["test-images-idx3-ubyte", "test-labels-idx1-ubyte",
                                                "train-images-idx3-ubyte", "train-labels-idx1-ubyte"]
    assert (run / "data" / "test-images-idx3-ubyte").read_bytes() == idx_bytes(tx)
    model = gf.load(run)
    tokens, labels = model.split_tokens("test")
    assert tokens == by_file.split_tokens("test")[0] and labels == list(ty)
    p = model.predict(tx)
    assert p.shape == (16, 2) and np.array_equal(p, model.predict(tokens))
    assert np.array_equal(model.predict(gf.Images(tx.reshape(16, 36), shape=(6, 6))), p)
    mine = model.evaluate((tx, ty))
    split = model.evaluate("test")
    assert mine["split"] == "data" and {**mine, "split": "test"} == split
    rc, out = cli("eval", str(run), "--json")
    assert rc == 0 and json.loads(out.strip().splitlines()[-1])["accuracy"] == split["accuracy"], out
    # the run's data moved away: predict still works, a split is an error saying what to do
    os.rename(run / "data", tmp_path / "data-moved")
    alone = gf.load(run)
    assert np.array_equal(alone.predict(tx), p)
    with pytest.raises(gf.ConfigError, match=r"evaluate\(data=\(images, labels\)\)"):
        alone.evaluate("test")
    assert alone.evaluate((tx, ty)) == mine


def test_images_are_checked_with_what_and_where(tmp_path):
    (x, y), (tx, ty) = images(8, 1), images(4, 2)
    bad = [
        ({"train": (x.astype(np.float32), y), "test": (tx, ty)}, "pixels are integers 0..255"),
        ({"train": (x.astype(np.int32) + 200, y), "test": (tx, ty)}, r"data\['train'\]\[0\]\[\d+\]: pixel"),
        ({"train": (x, [300] + list(y[1:])), "test": (tx, ty)}, r"data\['train'\]\[1\]\[0\]: the label of an image"),
        ({"train": (x, [str(v) for v in y]), "test": (tx, ty)}, "the label of an image is an int"),
        ({"train": (x, y), "val": (tx, ty), "test": (tx, ty)}, "carves the validation images"),
        ({"train": (x, y)}, "idx_images reads a test split"),
        ({"train": (x, y), "test": (tx[:, :5, :], ty)}, "differ in size"),
        ({"train": (x, y), "test": (["a text"] * 4, ty)}, "different kinds"),
    ]
    for data, match in bad:
        with pytest.raises(gf.ConfigError, match=match):
            gf.Experiment(IMAGE_CONFIG, data=data)
    with pytest.raises(gf.ConfigError, match="shape"):
        gf.Images(x.reshape(8, 36), shape=(5, 6))
    text_cfg = {**IMAGE_CONFIG, "data": {"plugin": "text_tsv"}}
    with pytest.raises(gf.ConfigError, match="read by the idx_images dataset"):
        gf.Experiment(text_cfg, data={"train": (x, y), "test": (tx, ty)})
    with pytest.raises(gf.ConfigError, match="names data files"):
        gf.Experiment({**IMAGE_CONFIG, "data": {**IMAGE_CONFIG["data"], "train_images": "x"}},
                      data={"train": (x, y), "test": (tx, ty)})
    ex = gf.Experiment(IMAGE_CONFIG, data={"train": (x, y), "test": (tx, ty)})
    with pytest.raises(gf.ConfigError, match="label 7 is not one of the model's 2 classes"):
        ex.evaluate((tx, [7] * 4))
    cfg = text_run(tmp_path)
    with pytest.raises(gf.ConfigError, match="images are read for models of idx_images data"):
        gf.Experiment(cfg).predict(tx)


# ---- the policy view: every field documented ------------------------------------------------
class ViewRecorder:
    """Records the public names of the view, its blocks, metrics and ablations in every call."""

    seen = {}

    def __init__(self):
        self.asked = False

    needs_probe = True

    def _note(self, kind, obj):
        if obj is not None:
            ViewRecorder.seen.setdefault(kind, set()).update(n for n in dir(obj) if not n.startswith("_"))

    def _view(self, view):
        self._note("view", view)
        for b in view.blocks:
            self._note("view.blocks[i]", b)
        if view.metrics is not None:
            self._note("view.metrics", view.metrics)
            for a in view.metrics.ablations:
                self._note("view.metrics.ablations[k]", a)

    def on_start(self, view):
        self._view(view)

    def validation_probe(self, step):
        return 8

    def probe_ablations(self, view):
        self._view(view)
        return [[(0, view.blocks[0].heads[0])]]

    def check(self, view):
        self._view(view)
        if not self.asked:
            self.asked = True
            return [gf.add_head(0, reason="record the edited view")]
        return []

    def edited(self, edit, view):
        self._view(view)


def documented_fields():
    """{object: set of field names} of the tables of docs/PYTHON.md's policy view section."""
    with open(os.path.join(SOURCE, "docs", "PYTHON.md")) as f:
        text = f.read()
    section = text.split("\n## The policy view\n", 1)[1].split("\n## ", 1)[0]
    out = {}
    for m in re.finditer(r"^\| `(view(?:\.metrics\.ablations\[k\]|\.metrics|\.blocks\[i\])?)\.(\w+)` \|",
                         section, re.M):
        out.setdefault(m.group(1), set()).add(m.group(2))
    return out


def test_the_policy_view_page_documents_every_field(tmp_path):
    ViewRecorder.seen = {}
    cfg = text_run(tmp_path)
    cfg["model"]["attention"]["max_heads"] = 3
    cfg["train"].update(steps=8, check_every=4, eval_every=2)
    cfg["growth"] = {"plugin": "python", "class": ViewRecorder}
    assert gf.Experiment(cfg).train(tmp_path / "run")["finished"]
    seen, documented = ViewRecorder.seen, documented_fields()
    assert set(seen) == {"view", "view.blocks[i]", "view.metrics", "view.metrics.ablations[k]"}, seen
    for kind in seen:
        assert seen[kind] == documented.get(kind, set()), (
            kind, "not documented:", seen[kind] - documented.get(kind, set()),
            "documented, not in the view:", documented.get(kind, set()) - seen[kind])
    assert set(documented) == set(seen)
