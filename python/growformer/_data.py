"""Data given in memory (lists, tuples, numpy arrays, pandas DataFrames) as the JSON lines files
the text_tsv dataset reads: one object per line, {TEXT_KEY: text or token ids, LABEL_KEY: label}.

Experiment(config, data=...) writes them to a staging folder to build the experiment, and
train() copies them into RUN_DIR/data/ before the run starts, so the run's configuration names
files inside the run directory: `growformer resume`, `eval` and `gf.load` read them as they read
any data file. Every problem is one ConfigError naming the split and the row.
"""
import json
import math
import numbers
import os

import numpy as np

SPLITS = ("train", "val", "test")


def _error(message):
    from ._core import ConfigError

    return ConfigError(message)


def _is_frame(x):
    return hasattr(x, "columns") and hasattr(x, "iloc") and hasattr(x, "to_dict")


def _is_series(x):
    return hasattr(x, "iloc") and hasattr(x, "to_numpy") and not hasattr(x, "columns")


def _column(frame, wanted, fallbacks, where, what, option):
    """The column of FRAME named WANTED (a str: a config option the user set), else the first of
    WANTED (a tuple of candidates) or of FALLBACKS that it has."""
    if isinstance(wanted, str):
        names = [wanted]
    else:
        names = list(dict.fromkeys(list(wanted or ()) + list(fallbacks)))
    for n in names:
        if n in frame.columns:
            return n
    cols = ", ".join(str(c) for c in frame.columns)
    hint = (f"data.{option} names it" if isinstance(wanted, str) else
            f"looked for {' or '.join(repr(n) for n in names)}; set data.{option} in the config to name it")
    raise _error(f"{where}: the DataFrame has no {what} column ({hint}); its columns: {cols}")


def _check_text(text, where):
    """TEXT (a str) as it will be written; a lone surrogate or a NUL is refused, naming WHERE."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise _error(f"{where}: the text holds {text[e.start:e.end]!r} at character {e.start}, a lone "
                     "surrogate that is no character (decode the source with errors='replace', or "
                     "mend it)") from None
    if "\0" in text:
        raise _error(f"{where}: the text holds a NUL character at {text.index(chr(0))}")
    return text


def _ids(seq, where):
    """A token id sequence as a list of ints >= 0."""
    arr = np.asarray(seq)
    if arr.ndim != 1:
        raise _error(f"{where}: token ids are a flat sequence of ints, not an array of shape {arr.shape}")
    if arr.size == 0:
        raise _error(f"{where}: no token ids (an example needs at least one)")
    if arr.dtype.kind == "f":
        bad = np.nonzero(arr != np.floor(arr))[0]
        if bad.size:
            raise _error(f"{where}: token {int(bad[0])} = {arr[bad[0]]!r} is not an integer")
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iub":
        raise _error(f"{where}: token ids are ints, not {arr.dtype} ({seq!r:.60})")
    neg = np.nonzero(arr < 0)[0]
    if neg.size:
        raise _error(f"{where}: token {int(neg[0])} = {int(arr[neg[0]])} is not a token id (>= 0)")
    return [int(t) for t in arr.tolist()]


def _label(y, where):
    if isinstance(y, (bool, np.bool_)):
        raise _error(f"{where}: the label {y!r} is a bool; labels are str or int")
    if isinstance(y, numbers.Integral):
        return int(y)
    if isinstance(y, numbers.Real):
        v = float(y)
        if math.isnan(v):
            raise _error(f"{where}: the label is missing (NaN)")
        if v == math.floor(v) and abs(v) < 2 ** 53:
            return int(v)
        raise _error(f"{where}: the label {y!r} is not a class (labels are str or int)")
    if isinstance(y, str):
        if not y:
            raise _error(f"{where}: the label is empty")
        return _check_text(y, where + " (label)")
    if y is None:
        raise _error(f"{where}: the label is missing (None)")
    raise _error(f"{where}: the label {y!r:.60} ({type(y).__name__}) is not a str or an int")


def _inputs(x, where):
    """Texts (str) or token id sequences of one split, in order; KIND 'text' or 'ids'."""
    if isinstance(x, str):
        raise _error(f"{where}: the inputs are one str; give a list of texts")
    if _is_series(x):
        x = x.tolist()
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "iuf" and x.ndim == 2:
            return "ids", [_ids(r, f"{where}[{i}]") for i, r in enumerate(x)]
        if x.ndim != 1:
            raise _error(f"{where}: an array of inputs is 2-D token ids (examples x positions) or "
                         f"1-D texts, not of shape {x.shape}")
        x = x.tolist()
    try:
        rows = list(x)
    except TypeError:
        raise _error(f"{where}: the inputs are a list of texts or of token id sequences, not "
                     f"{type(x).__name__}") from None
    if not rows:
        return "text", []
    if all(isinstance(r, str) for r in rows):
        return "text", [_check_text(r, f"{where}[{i}]") for i, r in enumerate(rows)]
    for i, r in enumerate(rows):
        if isinstance(r, str):
            raise _error(f"{where}[{i}]: a text among token id sequences; give texts or token ids, "
                         "not both")
    return "ids", [_ids(r, f"{where}[{i}]") for i, r in enumerate(rows)]


def split_rows(value, where, text_column, label_column):
    """One split: (kind, inputs, labels) from (X, y), a DataFrame or a dict of columns."""
    if _is_frame(value):
        tc = _column(value, text_column, ("text", "sentence"), where, "text", "text_column")
        lc = _column(value, label_column, ("label",), where, "label", "label_column")
        x, y = value[tc], value[lc]
        kind, xs = _inputs(x, f"{where}[{tc!r}]")
        ys = [_label(v, f"{where}[{lc!r}][{i}]") for i, v in enumerate(y.tolist())]
    elif isinstance(value, (tuple, list)) and len(value) == 2 and not isinstance(value[0], str):
        kind, xs = _inputs(value[0], f"{where}[0]")
        y = value[1]
        if _is_series(y) or isinstance(y, np.ndarray):
            y = y.tolist()
        try:
            y = list(y)
        except TypeError:
            raise _error(f"{where}[1]: the labels are a sequence, not {type(y).__name__}") from None
        ys = [_label(v, f"{where}[1][{i}]") for i, v in enumerate(y)]
        if len(ys) != len(xs):
            raise _error(f"{where}: {len(xs)} inputs but {len(ys)} labels")
    else:
        raise _error(f"{where}: a split is (inputs, labels) or a pandas DataFrame with text and "
                     f"label columns, not {type(value).__name__}")
    if not xs:
        raise _error(f"{where}: the split is empty")
    return kind, xs, ys


def normalize(data, text_column=None, label_column=None, need_train=True):
    """{split: (kind, inputs, labels)} of DATA: a dict of splits, or one split (then 'train', or
    with NEED_TRAIN false the data to evaluate, named 'test')."""
    if isinstance(data, dict):
        unknown = [k for k in data if k not in SPLITS]
        if unknown:
            raise _error(f"data: the keys of a dict of splits are {', '.join(SPLITS)}, not "
                         f"{', '.join(repr(k) for k in unknown)} (columns go in a pandas DataFrame "
                         "or an (inputs, labels) tuple)")
        splits = {k: data[k] for k in SPLITS if k in data and data[k] is not None}
        if need_train and "train" not in splits:
            raise _error("data: a dict of splits needs 'train' (val and test are carved from it "
                         "by data.val_ratio and data.test_ratio when absent)")
    else:
        splits = {"train" if need_train else "test": data}
    out = {k: split_rows(v, f"data[{k!r}]", text_column, label_column) for k, v in splits.items()}
    kinds = {v[0] for v in out.values()}
    if len(kinds) > 1:
        raise _error("data: some splits are texts and others token ids; give one kind")
    first = None  # labels: all str or all int
    for name, (_, _, ys) in out.items():
        for i, y in enumerate(ys):
            if first is None:
                first = (type(y), name, i)
            elif type(y) is not first[0]:
                raise _error(f"data[{name!r}] label {i}: {y!r} is a {type(y).__name__}, but label "
                             f"{first[2]} of data[{first[1]!r}] is a {first[0].__name__}; labels are "
                             "all str or all int")
    return out


def write_jsonl(path, inputs, labels, text_key, label_key):
    """The rows as JSON lines (UTF-8)."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for x, y in zip(inputs, labels):
            f.write(json.dumps({text_key: x, label_key: y}, ensure_ascii=False) + "\n")


def stage(data, folder, text_key, label_key, frame_text=None, frame_label=None, need_train=True):
    """Writes DATA's splits as FOLDER/SPLIT.jsonl with keys TEXT_KEY and LABEL_KEY (the columns
    of a DataFrame: FRAME_TEXT and FRAME_LABEL, or looked for); (kind, [split, ...]) with kind
    'text' or 'ids'."""
    splits = normalize(data, frame_text, frame_label, need_train)
    os.makedirs(folder, exist_ok=True)
    for name, (_, xs, ys) in splits.items():
        write_jsonl(os.path.join(folder, name + ".jsonl"), xs, ys, text_key, label_key)
    return next(iter(splits.values()))[0], list(splits)


def prepare(section, data, folder):
    """Stages DATA (given to Experiment or train) in FOLDER for the config's data SECTION (a
    dict, {} when the config has none); the plan that overrides() turns into the config's data
    options."""
    section = section or {}
    plugin = section.get("plugin", "text_tsv")
    if plugin != "text_tsv":
        raise _error(f"data: data given in memory is read by the text_tsv dataset (texts or token "
                     f"ids with labels), but the config's data.plugin is `{plugin}`; set it to "
                     "text_tsv (its options: tokenizer, max_len, val_ratio, ...) or drop it")
    given = [k for k in SPLITS if section.get(k) is not None]
    if given:
        raise _error(f"data: the config names data files ({', '.join('data.' + k for k in given)}) "
                     "and data is given in memory too; drop one")
    text_key = section.get("text_column") or "text"
    label_key = section.get("label_column") or "label"
    kind, splits = stage(data, folder, text_key, label_key, section.get("text_column"),
                         section.get("label_column"))
    tokenizer = section.get("tokenizer")
    if kind == "ids" and tokenizer not in (None, "ids"):
        raise _error(f"data: token ids are given, but the config's data.tokenizer is `{tokenizer}`; "
                     "drop it (ids are read with tokenizer: ids)")
    return {"kind": kind, "splits": splits, "text": text_key, "label": label_key,
            "set_text": "text_column" not in section, "set_label": "label_column" not in section,
            "set_tokenizer": kind == "ids" and tokenizer is None, "set_plugin": "plugin" not in section}


def overrides(plan, folder):
    """The config's data options ('data.KEY=VALUE') that read the staged files in FOLDER."""
    out = ["data.format=jsonl"]
    if plan["set_plugin"]:
        out.insert(0, "data.plugin=text_tsv")
    if plan["set_text"]:
        out.append("data.text_column=" + json.dumps(plan["text"]))
    if plan["set_label"]:
        out.append("data.label_column=" + json.dumps(plan["label"]))
    if plan["set_tokenizer"]:
        out.append("data.tokenizer=ids")
    for name in plan["splits"]:
        out.append(f"data.{name}=" + json.dumps(os.path.join(os.path.abspath(folder), name + ".jsonl")))
    return out


def stage_for_eval(data, folder, text_key, label_key):
    """Labelled DATA to evaluate on (one split: a tuple, a DataFrame, or a dict with one split)
    as FOLDER/test.jsonl with the model's keys; its path."""
    splits = normalize(data, (text_key,), (label_key,), need_train=False)
    if len(splits) != 1:
        raise _error(f"evaluate: one labelled set at a time, not the splits {', '.join(splits)}")
    (_, xs, ys), = splits.values()
    path = os.path.join(folder, "test.jsonl")
    write_jsonl(path, xs, ys, text_key, label_key)
    return path


def predict_texts(inputs, text_column):
    """Inputs to predict on, read once: a list of str (a DataFrame: its text column; a Series or
    numpy array: its values) or of token id lists; ValueError naming the index of a bad one."""
    if _is_frame(inputs):
        col = _column(inputs, (text_column,), ("text", "sentence"), "predict", "text", "text_column")
        inputs = inputs[col]
    if _is_series(inputs):
        inputs = inputs.tolist()
    if isinstance(inputs, np.ndarray) and inputs.dtype.kind in "US":
        inputs = inputs.tolist()
    rows = list(inputs)
    for i, r in enumerate(rows):
        if isinstance(r, str):
            try:
                r.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"predict: input {i} holds {r[e.start:e.end]!r} at character "
                                 f"{e.start}, a lone surrogate that is no character") from None
    return rows
