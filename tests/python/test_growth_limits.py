"""A growth check that asks for more heads than fit is refused as one event, before any head
is added (not one head at a time, each refused or added, for minutes)."""
import json
import subprocess

from conftest import GROWFORMER_BIN, python_growth

import pytest


def test_a_check_asking_for_65534_more_heads_is_refused_at_once(tiny, tmp_path):
    if not GROWFORMER_BIN:
        pytest.skip("GROWFORMER_BIN is not set (run through ctest)")
    run = tmp_path / "run"
    args = [GROWFORMER_BIN, "train", tiny, "--run-dir", str(run),
            "--set", "train.steps=20", "--set", "model.attention.max_heads=65536",
            "--set", python_growth("AddMany", n=65534, at=10)]
    # a 4 GB address space, as a shared machine's limit would be
    cmd = "ulimit -v 4000000; exec " + " ".join("'%s'" % a for a in args)
    r = subprocess.run(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout
    events = [json.loads(line) for line in open(run / "events.jsonl")]
    refused = [e for e in events if e["type"] == "growth_refused"]
    assert len(refused) == 1, refused[:3]
    assert refused[0]["requested"] == 65534 and refused[0]["heads"] == 2
    assert isinstance(refused[0]["heads"], int)  # a count, written as an integer
    assert not [e for e in events if e["type"] == "grow"]
    assert "65534 heads are refused" in r.stdout
