"""Data given in memory (lists, tuples, numpy arrays, pandas DataFrames) read into one kind of
inputs and its labels, checked, and handed to the dataset that stages them into its own files
(growformer/dataset.hpp's DataFormats: text_tsv writes texts and token ids as JSON lines,
idx_images images as IDX files, a dataset written out of tree what it reads).

The kinds: 'texts' (str), 'ids' (token id sequences), 'numbers' (sequences of real numbers, for a
dataset that takes them) and 'images' (uint8 arrays (N, H, W)). The dataset says which kinds it
takes and where a DataFrame holds its inputs and labels (a `columns` dict: input and label
candidates, the options that name them, whether the config names them); this module knows no
dataset by name. Every problem is one ConfigError naming the split and the row.
"""
import math
import numbers

import numpy as np
import warnings

SPLITS = ("train", "val", "test")

# what the kinds are called in messages
KIND_WORDS = {"texts": "texts", "ids": "token ids", "numbers": "number sequences", "images": "images"}


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


def _error(message):
    from ._core import ConfigError

    return ConfigError(message)


def _is_frame(x):
    return hasattr(x, "columns") and hasattr(x, "iloc") and hasattr(x, "to_dict")


def _is_series(x):
    return hasattr(x, "iloc") and hasattr(x, "to_numpy") and not hasattr(x, "columns")


def _column(frame, names, is_set, option, where, what, skip=None):
    """The column of FRAME that holds its WHAT: the first of NAMES it has ('*': every column but
    SKIP, as one row of numbers each). IS_SET: the config names the column (option OPTION)."""
    if not names:
        raise _error(f"{where}: this dataset reads no table; give (inputs, labels)")
    for n in names:
        if n == "*":
            return "*"
        if n in frame.columns:
            return n
    cols = ", ".join(str(c) for c in frame.columns)
    hint = (f"data.{option} names it" if is_set else
            f"looked for {' or '.join(repr(n) for n in names)}; set data.{option} in the config to name it")
    raise _error(f"{where}: the DataFrame has no {what} column ({hint}); its columns: {cols}")


def _frame_inputs(frame, column, skip, where):
    """The inputs of FRAME: its column COLUMN, or ('*') every column but SKIP as rows of numbers."""
    if column != "*":
        return frame[column], f"{where}[{column!r}]"
    rest = [c for c in frame.columns if c != skip]
    try:
        return frame[rest].to_numpy(dtype=np.float64), f"{where}[{rest[0]!r}:]"
    except (TypeError, ValueError):
        bad = [c for c in rest if frame[c].dtype.kind not in "iufb"]
        raise _error(f"{where}: the columns but the label are the numbers of each row; column "
                     f"{bad[0] if bad else rest[0]!r} is not a number column") from None


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


def _numbers(seq, where):
    """A sequence of real numbers as a list of floats (finite)."""
    arr = np.asarray(seq)
    if arr.ndim != 1:
        raise _error(f"{where}: a sequence of numbers is flat, not an array of shape {arr.shape}")
    if arr.size == 0:
        raise _error(f"{where}: no numbers (an example needs at least one)")
    if arr.dtype.kind not in "iufb":
        raise _error(f"{where}: numbers are ints or floats, not {arr.dtype} ({seq!r:.60})")
    arr = arr.astype(np.float64)
    bad = np.nonzero(~np.isfinite(arr))[0]
    if bad.size:
        raise _error(f"{where}: number {int(bad[0])} is {arr[bad[0]]!r}, not a finite number")
    return arr.tolist()


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


def _inputs(x, where, numbers_too=False):
    """(kind, inputs) of one split, in order: 'texts' (str), 'ids' (token id sequences), with
    NUMBERS_TOO (the dataset takes number sequences) 'numbers' instead of 'ids', or 'images'."""
    seqs = "numbers" if numbers_too else "ids"
    as_seq = _numbers if numbers_too else _ids
    if isinstance(x, str):
        raise _error(f"{where}: the inputs are one str; give a list of texts")
    if isinstance(x, Images) or (isinstance(x, np.ndarray) and x.ndim == 3):
        return "images", x.pixels if isinstance(x, Images) else pixel_array(x, None, where)
    if _is_series(x):
        x = x.tolist()
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "iuf" and x.ndim == 2:
            return seqs, [as_seq(r, f"{where}[{i}]") for i, r in enumerate(x)]
        if x.ndim != 1:
            raise _error(f"{where}: an array of inputs is 2-D token ids or numbers (examples x "
                         f"positions), 1-D texts or 3-D images (N, height, width), not of shape "
                         f"{x.shape}")
        x = x.tolist()
    try:
        rows = list(x)
    except TypeError:
        raise _error(f"{where}: the inputs are a list of texts or of token id sequences, not "
                     f"{type(x).__name__}") from None
    if not rows:
        return "texts", []
    for i, r in enumerate(rows):  # a gap in a column of texts (pandas reads one as NaN)
        if r is None or (isinstance(r, float) and math.isnan(r)):
            raise _error(f"{where}[{i}]: the text is missing ({'None' if r is None else 'NaN'}); "
                         "drop the row or give its text")
        if isinstance(r, (bytes, bytearray)):
            raise _error(f"{where}[{i}]: bytes, not a text; decode it first (bytes.decode)")
    if all(isinstance(r, str) for r in rows):
        return "texts", [_check_text(r, f"{where}[{i}]") for i, r in enumerate(rows)]
    for i, r in enumerate(rows):
        if isinstance(r, str):
            raise _error(f"{where}[{i}]: a text among token id sequences; give texts or token ids, "
                         "not both")
    return seqs, [as_seq(r, f"{where}[{i}]") for i, r in enumerate(rows)]


def split_rows(value, where, columns, numbers_too):
    """One split: (kind, inputs, labels) from (X, y), or a DataFrame read with COLUMNS."""
    if _is_frame(value):
        lc = _column(value, columns["label"], columns["label_set"], columns["label_option"],
                     where, "label")
        tc = _column(value, columns["input"], columns["input_set"], columns["input_option"],
                     where, "text")
        x, x_where = _frame_inputs(value, tc, lc, where)
        y = value[lc]
        kind, xs = _inputs(x, x_where, numbers_too)
        ys = [_label(v, f"{where}[{lc!r}][{i}]") for i, v in enumerate(y.tolist())]
    elif isinstance(value, (tuple, list)) and len(value) == 2 and not isinstance(value[0], str):
        kind, xs = _inputs(value[0], f"{where}[0]", numbers_too)
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
    if len(xs) == 0:
        raise _error(f"{where}: the split is empty")
    floats = [v for v in (y.tolist() if _is_series(y) else y)
              if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral)]
    if floats:  # 1.0 read as the class 1: said, not silent
        warnings.warn(f"{where}: the labels are floats ({floats[0]!r}, ...); each is read as the "
                      "int class it equals (1.0 as 1); give ints or strs to say so",
                      stacklevel=4)
    return kind, xs, ys


def normalize(data, columns, kinds, need_train=True, check=None):
    """{split: (kind, inputs, labels)} of DATA: a dict of splits, or one split (then 'train', or
    with NEED_TRAIN false the data to evaluate, named 'test'). COLUMNS and KINDS: the dataset's
    (a DataFrame's columns; number sequences as 'numbers' when it takes them). CHECK(split,
    name, where): the dataset's own check of each split, as soon as it is read."""
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
    out = {}
    for k, v in splits.items():
        out[k] = split_rows(v, f"data[{k!r}]", columns, "numbers" in kinds)
        if check is not None:
            check(out[k], k, f"data[{k!r}]")
    kinds_given = {v[0] for v in out.values()}
    if len(kinds_given) > 1:
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


def normalize_one(data, columns, kinds, plugin, what="evaluate"):
    """One labelled set to evaluate (a tuple, a DataFrame, or a dict with one split) as (kind,
    inputs, labels), of a kind the model's dataset PLUGIN takes (KINDS)."""
    splits = normalize(data, columns, kinds, need_train=False)
    if len(splits) != 1:
        raise _error(f"{what}: one labelled set at a time, not the splits {', '.join(splits)}")
    (kind, xs, ys), = splits.values()
    if kind not in kinds:
        raise _error(f"{what}: the data are {KIND_WORDS.get(kind, kind)}, but the model's dataset "
                     f"`{plugin}` takes {' or '.join(KIND_WORDS.get(k, k) for k in kinds)}")
    return kind, xs, ys


def predict_inputs(inputs, columns, kinds, plugin, takers):
    """Inputs to predict on, read once: ('staged', (kind, inputs, None)) for data the model's
    dataset PLUGIN stages (KINDS: images, number sequences), else ('rows', a list of str or of
    token id lists; a DataFrame: its input column, a Series or numpy array: its values).
    TAKERS: the datasets that take each kind, for messages. ValueError naming the index of a bad
    input."""
    if isinstance(inputs, (str, bytes)):  # not a sequence of one-character texts
        raise TypeError("the inputs are one str; give a list of texts ([text])")
    images = as_images(inputs)
    if images is not None:
        if "images" not in kinds:
            raise _error(f"predict: images are read for models of {' or '.join(takers.get('images', []))} "
                         f"data; this model's dataset is `{plugin}`")
        return "staged", ("images", images, None)
    if _is_frame(inputs):
        col = _column(inputs, columns["input"], False, columns["input_option"], "predict", "text")
        inputs, _ = _frame_inputs(inputs, col, None, "predict")
    if "numbers" in kinds and not (isinstance(inputs, np.ndarray) and inputs.dtype.kind in "US"):
        kind, xs = _inputs(inputs, "predict", numbers_too=True)
        if kind == "numbers":
            return "staged", ("numbers", xs, None)
        inputs = xs
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
    return "rows", rows
