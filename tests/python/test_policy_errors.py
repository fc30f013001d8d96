"""Errors of Python policy classes: a constructor that raises is named as the class's, at the
config's `class` key, with the exception as __cause__; a constructor that does not take the
options is the options' error; edits whose values no head can take are refused."""
import re

import pytest

import growformer as gf
from conftest import EXAMPLES, HERE, TINY, cli, python_growth
from policies import RaisesInInit


def config_with_policy(tmp_path, role, kind):
    """TINY with ROLE's policy RaisesInInit in the file itself; the line of its `class` key."""
    text = TINY + (f"{role}:\n"
                   f"  plugin: python\n"
                   f"  path: [{HERE}, {EXAMPLES}]\n"
                   f"  class: policies.RaisesInInit\n"
                   f"  options: {{kind: {kind}, limit: 3}}\n")
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    line = text.splitlines().index("  class: policies.RaisesInInit") + 1
    return str(path), line


@pytest.mark.parametrize("role", ["growth", "pruning"])
@pytest.mark.parametrize("kind, error, cause, text", [
    ("value", gf.ConfigError, ValueError, "ValueError: limit 3 is below the 4 heads it needs"),
    ("own", gf.RunError, RaisesInInit.Unavailable,
     "Unavailable: the schedule service is not reachable"),
    ("type", gf.ConfigError, TypeError, "TypeError: object of type 'int' has no len()"),
])
def test_a_constructor_that_raises_is_named_at_the_class_key(tmp_path, role, kind, error, cause, text):
    config, line = config_with_policy(tmp_path, role, kind)
    with pytest.raises(error) as info:
        gf.Experiment(config).train(str(tmp_path / "run"))
    message = str(info.value)
    head = (f"policy.yaml:{line}:\\d+: `{role}.class`: policies.RaisesInInit raised in its "
            f"constructor \\(called with options \\{{'kind': '{kind}', 'limit': 3\\}}")
    assert re.search(head, message), message
    assert text in message, message
    assert "in __init__" in message, message  # the traceback of the constructor
    assert f"`{role}.options`:" not in message, message
    # the Python exception itself, chained
    assert isinstance(info.value.__cause__, cause), repr(info.value.__cause__)
    assert str(info.value.__cause__) in text
    # the program: the same message, exit 2 for a configuration error, 1 otherwise
    rc, out = cli("train", config, "--run-dir", str(tmp_path / "cli"), "--quiet")
    assert rc == (2 if error is gf.ConfigError else 1), out
    assert re.search(head, out), out
    assert text in out, out


def test_options_the_constructor_does_not_take_stay_an_options_error(tiny, tmp_path):
    with pytest.raises(gf.ConfigError) as info:
        gf.Experiment(tiny, overrides=[python_growth("RaisesInInit", colour=3)]).train(
            str(tmp_path / "run"))
    message = str(info.value)
    assert "`growth.options`: policies.RaisesInInit(**options) with options {'colour': 3} raised " \
           "TypeError" in message, message
    assert "unexpected keyword argument 'colour'" in message, message
    assert "raised in its constructor" not in message, message
    assert isinstance(info.value.__cause__, TypeError)


@pytest.mark.parametrize("edit, message", [
    # infinity (or NaN) as the new head's value variance would make its weights infinite
    ("{'op': 'add_head', 'block': 0, 'init': {'value_variance': 1e999}}",
     "init `value_variance` must be a finite number >= 0 or None, not inf"),
    ("{'op': 'add_head', 'block': 0, 'init': {'value_variance': -1e999}}",
     "init `value_variance` must be a finite number >= 0 or None, not -inf"),
    # an int no float holds, as an info field
    ("{'op': 'add_head', 'block': 0, 'info': {'big': 1%s}}" % ("0" * 400),
     "`info`: field `big`: 1000000000.* is beyond the range of a float"),
])
def test_edits_no_head_can_take_are_refused(tiny, tmp_path, edit, message):
    sets = python_growth("BadEdit", edit=f'"{edit}"')
    with pytest.raises(gf.RunError, match=message) as info:
        gf.Experiment(tiny, overrides=[sets]).train(str(tmp_path / "run"))
    assert "policies.BadEdit).check at step 10: edit 0 {" in str(info.value)
    # the prefix once: the error is the check's, not wrapped again
    assert str(info.value).count("check at step 10") == 1, str(info.value)


def test_a_reason_with_a_lone_surrogate_is_kept_escaped(tiny, tmp_path):
    sets = python_growth("BadEdit", edit="\"{'op': 'add_head', 'block': 0, 'reason': 'x\\\\udc80y'}\"")
    gf.Experiment(tiny, overrides=[sets]).train(str(tmp_path / "run"))
    grows = [e for e in gf.read_events(str(tmp_path / "run")) if e.get("reason", "").startswith("x")]
    assert grows and grows[0]["reason"] == "x\\udc80y", grows
