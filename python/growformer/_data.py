"""Data given in memory (lists, tuples, numpy arrays, pandas DataFrames) as the files a dataset
plugin reads: texts and token ids as the JSON lines files of text_tsv, one object per line,
{TEXT_KEY: text or token ids, LABEL_KEY: label}; images (uint8 arrays) as the IDX files of
idx_images.

Experiment(config, data=...) writes them to a staging folder to build the experiment, and
train() copies them into RUN_DIR/data/ before the run starts, so the run's configuration names
files inside the run directory: `growformer resume`, `eval` and `gf.load` read them as they read
any data file. Every problem is one ConfigError naming the split and the row.
"""
import json
import math
import numbers
import os
import struct
import warnings

import numpy as np

SPLITS = ("train", "val", "test")

# the files of one split of images, as idx_images names its options
IDX_FILES = {"images": "{split}-images-idx3-ubyte", "labels": "{split}-labels-idx1-ubyte"}


class Images:
    """Images given in memory: PIXELS, an integer array of grey levels 0..255 (uint8), shaped
    (N, H, W), or (N, H*W) with SHAPE=(H, W). Read by the idx_images dataset (written as IDX
    files), in Experiment's data, evaluate(data=(Images(...), labels)) and predict(Images(...)).
    A 3-D integer array is taken as images without this wrapper."""

    def __init__(self, pixels, shape=None):
        self._pixels = pixel_array(pixels, shape, "Images")

    @property
    def pixels(self):
        """The images as a uint8 numpy array (N, height, width)."""
        return self._pixels

    def __len__(self):
        return int(self.pixels.shape[0])

    def __repr__(self):
        n, h, w = self.pixels.shape
        return f"growformer.Images({n} images of {h}x{w})"


def pixel_array(pixels, shape, where):
    """PIXELS as a C-contiguous uint8 array (N, H, W); ConfigError naming WHERE and the first bad
    image."""
    arr = np.asarray(pixels)
    if shape is not None:
        try:
            h, w = (int(v) for v in shape)
        except (TypeError, ValueError):
            raise _error(f"{where}: shape is (height, width), not {shape!r}") from None
        if arr.ndim != 2 or h < 1 or w < 1 or arr.shape[1] != h * w:
            raise _error(f"{where}: shape {(h, w)} needs pixels of shape (N, {h * w}), not {arr.shape}")
        arr = arr.reshape(arr.shape[0], h, w)
    if arr.ndim != 3:
        raise _error(f"{where}: images are an array (N, height, width), or (N, height*width) with "
                     f"shape=(height, width); not of shape {arr.shape}")
    if 0 in arr.shape:
        raise _error(f"{where}: no images (an array of shape {arr.shape})")
    if arr.dtype.kind not in "iu":
        raise _error(f"{where}: pixels are integers 0..255 (uint8), not {arr.dtype} (scale and "
                     "convert them: (x * 255).round().astype(numpy.uint8))")
    if arr.dtype != np.uint8:
        bad = np.nonzero((arr < 0) | (arr > 255))
        if bad[0].size:
            i = tuple(int(b[0]) for b in bad)
            raise _error(f"{where}[{i[0]}]: pixel {i[1:]} is {int(arr[i])}, not a grey level 0..255")
    return np.ascontiguousarray(arr, dtype=np.uint8)


def as_images(x):
    """X as a uint8 image array (N, H, W) when it is images (an Images, or a 3-D integer numpy
    array); else None."""
    if isinstance(x, Images):
        return x.pixels
    if isinstance(x, np.ndarray) and x.ndim == 3 and x.dtype.kind in "iu":
        return pixel_array(x, None, "images")
    return None


def write_idx(path, array):
    """ARRAY (uint8, 1-D labels or 3-D images) as an IDX file: magic 0x0803 or 0x0801, the
    dimensions as big-endian uint32, then the bytes."""
    arr = np.ascontiguousarray(array, dtype=np.uint8)
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, arr.ndim]))
        f.write(struct.pack(">" + "I" * arr.ndim, *arr.shape))
        f.write(arr.tobytes())


def image_labels(ys, where):
    """Labels of images as a uint8 array: ints 0..255 (an IDX label is one byte)."""
    for i, y in enumerate(ys):
        if not isinstance(y, int) or not 0 <= y <= 255:
            raise _error(f"{where}[1][{i}]: the label of an image is an int 0..255 (IDX labels), not "
                         f"{y!r:.40}; name the classes with data.class_names")
    return np.asarray(ys, dtype=np.uint8)


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
    if isinstance(x, Images) or (isinstance(x, np.ndarray) and x.ndim == 3):
        return "images", x.pixels if isinstance(x, Images) else pixel_array(x, None, where)
    if _is_series(x):
        x = x.tolist()
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "iuf" and x.ndim == 2:
            return "ids", [_ids(r, f"{where}[{i}]") for i, r in enumerate(x)]
        if x.ndim != 1:
            raise _error(f"{where}: an array of inputs is 2-D token ids (examples x positions), "
                         f"1-D texts or 3-D images (N, height, width), not of shape {x.shape}")
        x = x.tolist()
    try:
        rows = list(x)
    except TypeError:
        raise _error(f"{where}: the inputs are a list of texts or of token id sequences, not "
                     f"{type(x).__name__}") from None
    if not rows:
        return "text", []
    for i, r in enumerate(rows):  # a gap in a column of texts (pandas reads one as NaN)
        if r is None or (isinstance(r, float) and math.isnan(r)):
            raise _error(f"{where}[{i}]: the text is missing ({'None' if r is None else 'NaN'}); "
                         "drop the row or give its text")
        if isinstance(r, (bytes, bytearray)):
            raise _error(f"{where}[{i}]: bytes, not a text; decode it first (bytes.decode)")
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
        if kind == "images":
            image_labels(ys, where)
        if len(ys) != len(xs):
            raise _error(f"{where}: {len(xs)} inputs but {len(ys)} labels")
    else:
        raise _error(f"{where}: a split is (inputs, labels) or a pandas DataFrame with text and "
                     f"label columns, not {type(value).__name__}")
    if len(xs) == 0:
        raise _error(f"{where}: the split is empty")
    floats = [v for v in (y.tolist() if _is_series(y) else y)
              if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral)]
    if floats:  # 1.0 read as the class 1: said, not silent
        warnings.warn(f"{where}: the labels are floats ({floats[0]!r}, ...); each is read as the "
                      "int class it equals (1.0 as 1); give ints or strs to say so",
                      stacklevel=4)
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
        raise _error("data: the splits are of different kinds (" + ", ".join(
            f"{k}: {v[0]}" for k, v in out.items()) + "); give one kind")
    sizes = {k: v[1].shape[1:] for k, v in out.items() if v[0] == "images"}
    if len(set(sizes.values())) > 1:
        raise _error("data: the images of the splits differ in size (" + ", ".join(
            f"{k}: {h}x{w}" for k, (h, w) in sizes.items()) + "); give one size")
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
    """Writes DATA's splits into FOLDER: texts and token ids as SPLIT.jsonl with keys TEXT_KEY and
    LABEL_KEY (the columns of a DataFrame: FRAME_TEXT and FRAME_LABEL, or looked for), images as
    SPLIT-images-idx3-ubyte and SPLIT-labels-idx1-ubyte; (kind, [split, ...], [file, ...]) with
    kind 'text', 'ids' or 'images'."""
    splits = normalize(data, frame_text, frame_label, need_train)
    kind = next(iter(splits.values()))[0]
    if kind == "images":
        return "images", list(splits), write_image_splits(splits, folder)
    os.makedirs(folder, exist_ok=True)
    for name, (_, xs, ys) in splits.items():
        write_jsonl(os.path.join(folder, name + ".jsonl"), xs, ys, text_key, label_key)
    return kind, list(splits), [name + ".jsonl" for name in splits]


def write_image_splits(splits, folder):
    """The images and labels of each split as IDX files in FOLDER; their names."""
    if "val" in splits:
        raise _error("data['val']: idx_images carves the validation images from the training "
                     "images (data.val_ratio); give 'train' and 'test'")
    if "test" not in splits:
        raise _error("data: idx_images reads a test split of images: give {'train': (images, "
                     "labels), 'test': (images, labels)} (val is carved from train by "
                     "data.val_ratio)")
    os.makedirs(folder, exist_ok=True)
    files = []
    for name, (_, pixels, ys) in splits.items():
        for what, array in (("images", pixels), ("labels", image_labels(ys, f"data[{name!r}]"))):
            files.append(IDX_FILES[what].format(split=name))
            write_idx(os.path.join(folder, files[-1]), array)
    return files


def _data_plugin(section, kind):
    """The config's data plugin for data of KIND, checked; whether the config names it."""
    wanted = "idx_images" if kind == "images" else "text_tsv"
    plugin = section.get("plugin", wanted)
    if plugin != wanted:
        what = "images" if kind == "images" else "texts or token ids with labels"
        raise _error(f"data: data given in memory as {what} is read by the {wanted} dataset, but "
                     f"the config's data.plugin is `{plugin}`; set it to {wanted} or drop it")
    return plugin


def prepare(section, data, folder):
    """Stages DATA (given to Experiment or train) in FOLDER for the config's data SECTION (a
    dict, {} when the config has none); the plan that overrides() turns into the config's data
    options."""
    section = section or {}
    plugin = section.get("plugin")
    if plugin not in (None, "text_tsv", "idx_images"):
        raise _error(f"data: data given in memory is read by the text_tsv dataset (texts or token "
                     f"ids with labels) or the idx_images dataset (images), but the config's "
                     f"data.plugin is `{plugin}`; set it to one of them or drop it")
    named = ("train_images", "train_labels", "test_images", "test_labels") + SPLITS
    given = [k for k in named if section.get(k) is not None]
    if given:
        raise _error(f"data: the config names data files ({', '.join('data.' + k for k in given)}) "
                     "and data is given in memory too; drop one")
    text_key = section.get("text_column") or "text"
    label_key = section.get("label_column") or "label"
    kind, splits, files = stage(data, folder, text_key, label_key, section.get("text_column"),
                                section.get("label_column"))
    _data_plugin(section, kind)
    tokenizer = section.get("tokenizer")
    if kind == "ids" and tokenizer not in (None, "ids"):
        raise _error(f"data: token ids are given, but the config's data.tokenizer is `{tokenizer}`; "
                     "drop it (ids are read with tokenizer: ids)")
    return {"kind": kind, "splits": splits, "files": files, "text": text_key, "label": label_key,
            "set_text": "text_column" not in section, "set_label": "label_column" not in section,
            "set_tokenizer": kind == "ids" and tokenizer is None, "set_plugin": "plugin" not in section}


def overrides(plan, folder):
    """The config's data options ('data.KEY=VALUE') that read the staged files in FOLDER."""
    def path(name):
        return json.dumps(os.path.join(os.path.abspath(folder), name))

    if plan["kind"] == "images":
        out = ["data.plugin=idx_images"] if plan["set_plugin"] else []
        for name in plan["splits"]:
            for what in ("images", "labels"):
                out.append(f"data.{name}_{what}=" + path(IDX_FILES[what].format(split=name)))
        return out
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
        out.append(f"data.{name}=" + path(name + ".jsonl"))
    return out


def stage_images_for_eval(pixels, labels, folder):
    """Images to evaluate or predict on (labels: ints, or None to predict) as IDX files in FOLDER,
    with a stand-in training split of two blank images (idx_images reads one and carves val from
    it); the options ('KEY=VALUE') of the model's data section that read them, in file order."""
    pixels = pixel_array(pixels, None, "images")
    n, h, w = pixels.shape
    ys = np.zeros(n, dtype=np.uint8) if labels is None else labels
    files = {"test_images": pixels, "test_labels": ys,
             "train_images": np.zeros((2, h, w), dtype=np.uint8),
             "train_labels": np.zeros(2, dtype=np.uint8)}
    out = ["val_ratio=0.5", "max_train=0", "max_test=0"]
    for key, array in files.items():
        path = os.path.join(folder, key.replace("_", "-") + ".idx")
        write_idx(path, array)
        out.append(f"{key}=" + json.dumps(path))
    return out


def stage_for_eval(data, folder, text_key, label_key, plugin="text_tsv"):
    """Labelled DATA to evaluate on (one split: a tuple, a DataFrame, or a dict with one split)
    for a model of dataset PLUGIN: as FOLDER/test.jsonl with the model's keys (its path), or,
    images, as IDX files (the data options that read them)."""
    splits = normalize(data, (text_key,), (label_key,), need_train=False)
    if len(splits) != 1:
        raise _error(f"evaluate: one labelled set at a time, not the splits {', '.join(splits)}")
    (kind, xs, ys), = splits.values()
    if (kind == "images") != (plugin == "idx_images"):
        raise _error(f"evaluate: the data are {'images' if kind == 'images' else 'texts or token ids'}, "
                     f"but the model's dataset is `{plugin}`")
    if kind == "images":
        return stage_images_for_eval(xs, image_labels(ys, "data"), folder)
    path = os.path.join(folder, "test.jsonl")
    write_jsonl(path, xs, ys, text_key, label_key)
    return path


def predict_texts(inputs, text_column):
    """Inputs to predict on, read once: a list of str (a DataFrame: its text column; a Series or
    numpy array: its values) or of token id lists; ValueError naming the index of a bad one."""
    if isinstance(inputs, (str, bytes)):  # not a sequence of one-character texts
        raise TypeError("the inputs are one str; give a list of texts ([text])")
    if _is_frame(inputs):
        col = _column(inputs, (text_column,), ("text", "sentence"), "predict", "text", "text_column")
        inputs = inputs[col]
    if _is_series(inputs):
        inputs = inputs.tolist()
    if isinstance(inputs, np.ndarray) and inputs.dtype.kind in "US":
        inputs = inputs.tolist()
    rows = list(inputs)
    for i, r in enumerate(rows):
        if isinstance(r, (bytes, bytearray)):
            raise ValueError(f"input {i} is bytes, not a text; decode it first (bytes.decode)")
        if isinstance(r, str):
            try:
                r.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"predict: input {i} holds {r[e.start:e.end]!r} at character "
                                 f"{e.start}, a lone surrogate that is no character") from None
    return rows
