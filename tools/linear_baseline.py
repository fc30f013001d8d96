#!/usr/bin/env python3
"""A linear classifier on Fashion-MNIST pixels, read as the idx_images plugin reads them.

The H4 comparison asks that the attention models reach at least what a linear model reaches on the
same input. This tool pools f x f blocks and quantises to LEVELS grey levels exactly as
plugins/data_idx_images does (token = 1 + round(mean) * levels / 256), takes a seeded random subset
of MAX_TRAIN training images (numpy's generator: the same size as the plugin's subset, not the same
images), holds out VAL_RATIO of it for validation, and fits multinomial logistic regression on the
pixel values (scaled to [0, 1]) by full-batch gradient descent with Nesterov momentum. The L2
weight is chosen on the validation split; the test split (MAX_TEST images, or all) is read once, at
the end, per seed.

    /usr/bin/python3 tools/linear_baseline.py --downsample 2 --levels 16 --max-train 10000 --max-test 2000
"""
import argparse
import gzip
import struct

import numpy as np

DIR = "/usr/share/datasets/fashion-mnist/"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def tokens(images, f, levels):
    n, r, c = images.shape
    r2, c2 = r // f, c // f
    x = images[:, :r2 * f, :c2 * f].reshape(n, r2, f, c2, f).astype(np.int64).sum(axis=(2, 4))
    v = (x + (f * f) // 2) // (f * f)
    return (v * levels // 256).reshape(n, -1).astype(np.float64) / (levels - 1)


def fit(x, y, l2, epochs=400, lr=0.5):
    n, d = x.shape
    k = int(y.max()) + 1
    w = np.zeros((d + 1, k))
    v = np.zeros_like(w)
    xb = np.hstack([x, np.ones((n, 1))])
    onehot = np.eye(k)[y]
    for _ in range(epochs):
        look = w + 0.9 * v
        z = xb @ look
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        g = xb.T @ (p - onehot) / n
        g[:-1] += l2 * look[:-1]
        v = 0.9 * v - lr * g
        w = w + v
    return w


def accuracy(w, x, y):
    xb = np.hstack([x, np.ones((len(x), 1))])
    return float(np.mean(np.argmax(xb @ w, axis=1) == y))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--downsample", type=int, default=2)
    ap.add_argument("--levels", type=int, default=16)
    ap.add_argument("--max-train", type=int, default=10000)
    ap.add_argument("--max-test", type=int, default=2000)
    ap.add_argument("--val-ratio", type=float, default=0.1)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--l2", type=float, nargs="+", default=[0.0, 1e-4, 1e-3, 1e-2])
    a = ap.parse_args()
    tr_x = tokens(read_idx(DIR + "train-images-idx3-ubyte.gz"), a.downsample, a.levels)
    tr_y = read_idx(DIR + "train-labels-idx1-ubyte.gz").astype(np.int64)
    te_x = tokens(read_idx(DIR + "t10k-images-idx3-ubyte.gz"), a.downsample, a.levels)
    te_y = read_idx(DIR + "t10k-labels-idx1-ubyte.gz").astype(np.int64)
    tests = []
    for seed in a.seeds:
        rng = np.random.default_rng(seed)
        idx = rng.permutation(len(tr_x))[: a.max_train or len(tr_x)]
        nval = int(round(a.val_ratio * len(idx)))
        val, train = idx[:nval], idx[nval:]
        best = None
        for l2 in a.l2:
            w = fit(tr_x[train], tr_y[train], l2)
            acc = accuracy(w, tr_x[val], tr_y[val])
            print(f"seed {seed} l2 {l2:g}: val {acc:.4f}")
            if best is None or acc > best[0]:
                best = (acc, l2, w)
        tidx = rng.permutation(len(te_x))[: a.max_test or len(te_x)]
        t = accuracy(best[2], te_x[tidx], te_y[tidx])
        tests.append(t)
        print(f"seed {seed}: chosen l2 {best[1]:g} (val {best[0]:.4f}), test {t:.4f} on {len(tidx)} images")
    m, s = np.mean(tests), np.std(tests, ddof=1) if len(tests) > 1 else 0.0
    print(f"linear classifier, {a.downsample}x{a.downsample} pooling, {a.levels} levels, "
          f"{a.max_train} training images: test {m:.4f} +- {s:.4f} ({len(tests)} seeds)")


if __name__ == "__main__":
    main()
