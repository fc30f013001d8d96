#!/usr/bin/env python3
"""Reads a growformer checkpoint (e.g. runs/NAME/checkpoints/last.safetensors) with numpy alone.

The file is safetensors: an 8-byte little-endian header length, a JSON header mapping each tensor
name to its dtype, shape and byte range (and "__metadata__" to strings), then the raw data.
growformer stores float32 tensors: "model.<parameter>" (the weights, e.g.
"model.layers.0.attn.heads.3.w_q") and "optim.<state>" (optimizer moments). The metadata holds the
embedded config (YAML), the architecture (one structure record per block), the heads per block,
the trainer state and the data record (classes, vocabulary size, tokenizer) as JSON text.

    python3 read_checkpoint.py CHECKPOINT            # tensors and architecture as text
    python3 read_checkpoint.py CHECKPOINT --json     # the same as JSON (with each tensor's sum)

In your own code:

    from read_checkpoint import load
    tensors, meta = load("runs/quickstart/checkpoints/last.safetensors")
    w = tensors["model.layers.0.attn.heads.0.w_q"]   # numpy.ndarray, float32
"""
import json
import re
import struct
import sys
import zlib

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
          "I32": np.int32, "U8": np.uint8}


# growformer's checksum entry in "__metadata__": CRC-32 (zlib) of the header as written without this
# entry, then of the data section
CHECKSUM = re.compile(rb'"checksum":"crc32:([0-9a-f]{8})"')


def verify(path, raw, n):
    """Raises ValueError unless the header's CRC-32 matches the file's content."""
    text = raw[8:8 + n].rstrip(b" ")  # the header is padded with spaces to 8 bytes
    found = list(CHECKSUM.finditer(text))
    if len(found) != 1:
        raise ValueError(f"{path}: no growformer checksum in the header")
    m = found[0]
    begin, end = m.span()
    # the entry leaves with its separating comma (before it, or after it when it comes first)
    if text[begin - 1:begin] == b",":
        begin -= 1
    elif text[end:end + 1] == b",":
        end += 1
    crc = zlib.crc32(text[:begin] + text[end:])
    crc = zlib.crc32(raw[8 + n:], crc)
    if crc != int(m.group(1), 16):
        raise ValueError(f"{path}: checksum mismatch (stored crc32:{m.group(1).decode()}, content "
                         f"crc32:{crc:08x}): the file was damaged or edited after it was written")


def load(path, check=True):
    """Returns ({name: numpy array}, {metadata key: str}) of a safetensors file; with CHECK, a
    growformer checkpoint whose CRC-32 does not match its content raises ValueError."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    if check:
        verify(path, raw, n)
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    data = memoryview(raw)[8 + n:]
    tensors = {}
    for name, info in header.items():
        dtype = DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * np.dtype(dtype).itemsize or end > len(data):
            raise ValueError(f"{path}: tensor {name}: byte range {begin}..{end} does not fit shape {shape}")
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
    return tensors, meta


def parsed(meta, key, default=None):
    try:
        return json.loads(meta[key])
    except (KeyError, ValueError):
        return default


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    path = argv[1]
    try:
        tensors, meta = load(path)
    except (OSError, ValueError) as e:
        print(f"read_checkpoint: {e}", file=sys.stderr)
        return 1
    model = {k: v for k, v in tensors.items() if k.startswith("model.")}
    data = parsed(meta, "data", {}) or {}
    summary = {
        "checkpoint": path,
        "format": meta.get("format"),
        "growformer_version": meta.get("growformer_version"),
        "step": (parsed(meta, "trainer", {}) or {}).get("step"),
        "parameters": int(sum(v.size for v in model.values())),
        "heads_per_block": parsed(meta, "heads", []),
        "architecture": parsed(meta, "architecture", []),
        "classes": data.get("class_names"),
        "vocab_size": data.get("vocab_size"),
        "tensors": {k: {"dtype": str(v.dtype), "shape": list(v.shape),
                        "sum": float(v.astype(np.float64).sum())} for k, v in sorted(tensors.items())},
    }
    if "--json" in argv[2:]:
        print(json.dumps(summary, indent=1))
        return 0
    print(f"{path}: growformer {summary['growformer_version']}, step {summary['step']}, "
          f"{summary['parameters']} parameters, heads per block {summary['heads_per_block']}")
    if summary["classes"]:
        print(f"classes: {', '.join(summary['classes'])}; vocabulary {summary['vocab_size']} tokens")
    print("architecture:")
    for i, block in enumerate(summary["architecture"]):
        print(f"  layers.{i}.attn: {block}")
    print("tensors:")
    for k, v in sorted(tensors.items()):
        print(f"  {k:60s} {str(v.dtype):8s} {list(v.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
