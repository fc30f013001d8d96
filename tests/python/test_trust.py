"""growformer.load never runs code a checkpoint names: its growth and pruning policies are not
built (a Python class of the embedded config is not even imported), and the plugin libraries
it records are loaded only with trust_plugins=True. The checkpoint is edited as an attacker
would: its metadata changed and its CRC-32 checksum recomputed."""
import json
import os
import struct
import zlib

import pytest

import growformer as gf
from conftest import cli

BUILD = os.environ.get("GF_BUILD_DIR", "")
EVIL = os.path.join(BUILD, "tests", "evil_plugins", "libgf_evil.so")


def edit_checkpoint(path, edit):
    """Rewrites the metadata of the safetensors file PATH with EDIT(metadata), the checksum
    recomputed as growformer computes it (CRC-32 of the header without it, then the data)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header["__metadata__"]
    del meta["checksum"]
    edit(meta)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    crc = zlib.crc32(data, zlib.crc32(text.encode()))
    meta["checksum"] = "crc32:%08x" % crc
    out = json.dumps(header, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(out)) + out + data)


@pytest.fixture
def trained(tiny, tmp_path):
    run = tmp_path / "run"
    code, out = cli("train", tiny, "--run-dir", str(run), "--quiet", "--set", "train.steps=10")
    assert code == 0, out
    return run / "checkpoints" / "last.safetensors"


def test_load_builds_no_policy_of_the_checkpoint(trained, tmp_path):
    marker = tmp_path / "ran"
    popen = ("{plugin: python, class: subprocess.Popen, options: {args: [sh, -c, 'touch %s']}}"
             % marker)

    def evil_policies(meta):
        cfg = meta["config"]
        for role in ("growth", "pruning"):
            assert ("%s: {plugin: none}" % role) in cfg, cfg
            cfg = cfg.replace("%s: {plugin: none}" % role, "%s: %s" % (role, popen))
        meta["config"] = cfg

    edit_checkpoint(trained, evil_policies)
    model = gf.load(trained)
    assert model.evaluate("test")["examples"] == 64
    assert not marker.exists(), "the checkpoint's growth policy ran"
    code, out = cli("predict", str(trained), os.devnull)
    assert not marker.exists(), out
    with pytest.raises(gf.ConfigError, match=r"growformer\.resume"):
        gf.load(trained, data="all").train(str(tmp_path / "again"))


@pytest.mark.skipif(not os.path.exists(EVIL), reason="tests/evil_plugins not built")
def test_load_uses_recorded_plugin_libraries_only_when_trusted(trained, tmp_path, monkeypatch):
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("GF_EVIL_MARKER_DIR", str(marks))
    folder = os.path.dirname(EVIL)

    def record(meta):
        meta["plugin_libraries"] = json.dumps(
            [{"plugin": "evil", "version": "1.0.0", "path": EVIL, "folder": folder}])

    edit_checkpoint(trained, record)
    gf.load(trained).evaluate("test")
    assert not (marks / "constructor").exists()
    # a component not found: the recorded library and the opt-in named, nothing loaded
    edit_checkpoint(trained, lambda m: m.update(
        config=m["config"].replace("plugin: mha", "plugin: evil_attention")))
    with pytest.raises(gf.ConfigError, match=r"(?s)plugin `evil` 1\.0\.0 from .*trust_plugins=True"):
        gf.load(trained)
    assert not (marks / "constructor").exists()
    # trusted: the folder is searched (the library is loaded; the component is still unknown)
    with pytest.raises(gf.ConfigError, match="evil_attention"):
        gf.load(trained, trust_plugins=True)
    assert (marks / "constructor").exists()



def test_load_takes_a_checkpoints_folder_and_names_a_config(trained, tiny):
    assert gf.load(trained.parent).evaluate("test") == gf.load(trained).evaluate("test")
    with pytest.raises(RuntimeError, match=r"a text file \(a YAML config\?\), not a checkpoint"):
        gf.load(tiny)


def test_load_does_not_print_the_files_an_embedded_config_names(tmp_path):
    rows = ["%s %s\t%d" % (w, "good" if i % 2 else "bad", i % 2)
            for i, w in enumerate(["film", "plot", "story", "fun"] * 10)]
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    cfg = {"name": "t", "seed": 3, "threads": 1,
           "data": {"plugin": "text_tsv", "train": str(tmp_path / "train.tsv")},
           "model": {"d_model": 8, "layers": 1, "max_len": 8,
                     "attention": {"plugin": "mha", "heads": 1}},
           "train": {"steps": 4, "batch_size": 8, "eval_every": 2, "log_every": 2}}
    run = tmp_path / "run"
    assert gf.Experiment(cfg).train(run)["finished"]
    ck = run / "checkpoints" / "last.safetensors"
    secret = tmp_path / "secret"
    secret.write_text("root:*:SECRET-CONTENT:0:99999:7:::\n")
    edit_checkpoint(ck, lambda m: m.update(
        config=m["config"].replace(str(tmp_path / "train.tsv"), str(secret))))
    model = gf.load(ck)  # reads no data
    with pytest.raises(gf.ConfigError) as e:
        model.evaluate("val")
    assert "SECRET" not in str(e.value) and str(secret) in str(e.value), str(e.value)
    with pytest.raises(gf.ConfigError) as e:
        gf.load(ck, data="all")
    assert "SECRET" not in str(e.value) and "withheld" in str(e.value), str(e.value)
