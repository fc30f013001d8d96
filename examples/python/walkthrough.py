"""A walkthrough of growformer from Python, in cells (`# %%`: run them one by one in VS Code,
Jupyter's "open as notebook", Spyder; or the whole file at once):

    PYTHONPATH=build/python python3 examples/python/walkthrough.py [--out DIR] [--steps N]

It trains on a pandas DataFrame (no file written by hand), grows heads with a policy written
here in Python, plots the head count and the loss (when matplotlib is installed), evaluates on
new data as `growformer eval` reports it, and exports the model to PyTorch and ONNX (when torch
and onnx are installed). A few seconds at its default size; ctest runs it (python_walkthrough).
"""
# %% Set-up: the data, a DataFrame of short reviews labelled by their sentiment words
import argparse
import os
import tempfile

import numpy as np
import pandas as pd

import growformer as gf

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--out", default=None, help="folder for the run and the figures (default: a new temporary one)")
ap.add_argument("--steps", type=int, default=240)
args, _ = ap.parse_known_args()  # parse_known_args: a notebook kernel passes its own arguments
out = args.out or tempfile.mkdtemp(prefix="growformer-walkthrough-")
os.makedirs(out, exist_ok=True)

rng = np.random.default_rng(0)
things = ["film", "plot", "story", "cast", "score", "ending", "script", "pace"]
good, bad = ["good", "great", "fun", "moving"], ["bad", "dull", "weak", "slow"]


def reviews(n, noise=0.1):
    """N reviews: two or three sentiment words among other words, the label the majority's
    (`not` before a word turns it), a share NOISE of the labels flipped."""
    rows = []
    for _ in range(n):
        polarity = rng.integers(2, size=rng.choice([1, 3]))
        words = list(rng.choice(things, size=rng.integers(2, 6)))
        for p in polarity:
            negated = rng.random() < 0.3
            words.append(("not " if negated else "") + rng.choice(good if p != negated else bad))
        rng.shuffle(words)
        label = 2 * polarity.sum() > len(polarity)
        if rng.random() < noise:
            label = not label
        rows.append((" ".join(words), "pos" if label else "neg"))
    return pd.DataFrame(rows, columns=["text", "label"])


train_df, new_df = reviews(800), reviews(200, noise=0.0)
print(train_df.head(3))

# %% A growth policy in Python: add a head to each block when the validation loss stalls
class GrowWhenStalled:
    """Adds a head to every block (up to max_heads) once the latest validation loss has not
    improved on the best by min_delta for `patience` checks."""

    def __init__(self, patience=2, min_delta=0.01, max_heads=4):
        self.patience, self.min_delta, self.max_heads = patience, min_delta, max_heads
        self.best, self.waited, self.grown = None, 0, 0

    def check(self, view):
        loss = view.metrics.val_loss
        if loss is None:  # no validation yet
            return []
        if self.best is None or loss < self.best - self.min_delta:
            self.best, self.waited = loss, 0
            return []
        self.waited += 1
        if self.waited < self.patience:
            return []
        self.waited = 0
        edits = [gf.add_head(b.index, reason=f"val loss {loss:.4f} stalled")
                 for b in view.blocks if b.can_edit and b.num_heads < self.max_heads]
        self.grown += len(edits)
        return edits

    def summary(self):
        return {"grown": self.grown}


config = {
    "name": "walkthrough", "seed": 1, "threads": 0,
    "data": {"tokenizer": "word", "max_len": 16, "val_ratio": 0.15, "test_ratio": 0.15},
    "model": {"d_model": 32, "layers": 2, "max_len": 16,
              "attention": {"plugin": "mha", "heads": 1, "d_k": 8, "max_heads": 4}},
    "optimizer": {"plugin": "adamw", "lr": 0.003},
    # test_on: last tests (and, below, exports) the model as it ends, with the heads it grew
    "train": {"steps": args.steps, "batch_size": 32, "warmup": 10, "eval_every": 20,
              "check_every": 20, "log_every": 10, "test_on": "last"},
    "growth": {"plugin": "python", "class": GrowWhenStalled,
               "options": {"patience": 1, "min_delta": 0.02}},
}

# %% Train on the DataFrame, watching the loss and the heads through a callback
ex = gf.Experiment(config, data=train_df)
print("examples per split:", ex.data_sizes, "classes:", ex.classes)
seen = []
run_dir = os.path.join(out, "run")
for n in range(2, 1000):  # a new run directory each time this runs in the same folder
    if not os.path.exists(run_dir):
        break
    run_dir = os.path.join(out, f"run-{n}")
result = ex.train(run_dir, callback=lambda m: seen.append((m["step"], m["loss"], m["heads"])), every=10)
print("finished:", result["finished"], "test:", result["test"]["accuracy"], "heads:", ex.heads_per_block)
print("the data the run trained on:", sorted(os.listdir(os.path.join(run_dir, "data"))))
grows = [e for e in gf.read_events(run_dir) if e["type"] == "grow"]
print(f"{len(grows)} heads grown:", [(e["step"], e["block"], e["reason"]) for e in grows])

# %% Plot the head count and the loss against the step (matplotlib, when installed)
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None
    print("matplotlib is not installed: no plot (apt-get install python3-matplotlib)")
if plt is not None:
    steps = [s for s, _, _ in seen]
    fig, (a, b) = plt.subplots(2, 1, sharex=True, figsize=(6, 5))
    a.plot(steps, [l for _, l, _ in seen], label="training")
    a.set_ylabel("loss")
    val = [(l["step"], l["loss"]) for l in gf.read_metrics(run_dir) if l["split"] == "val"]
    a.plot(*zip(*val), "o-", label="validation")
    a.legend()
    for block in range(len(seen[0][2])):
        b.step(steps, [h[block] for _, _, h in seen], where="post", label=f"block {block}")
    b.set_ylabel("heads")
    b.set_xlabel("step")
    b.legend()
    figure = os.path.join(out, "heads_and_loss.png")
    fig.savefig(figure, dpi=80)
    print("figure:", figure)

# %% Evaluate on new data, as `growformer eval` reports it: F1 per class, the confusion matrix
model = gf.load(os.path.join(run_dir, "checkpoints", "last.safetensors"))
report = model.evaluate(new_df)
print(f"new data: accuracy {report['accuracy']:.3f}, macro-F1 {report['macro_f1']:.3f}")
for c in report["classes"]:
    print(f"  {c['name']}: precision {c['precision']:.3f} recall {c['recall']:.3f} f1 {c['f1']:.3f}")
print("  confusion (rows true, columns predicted):", report["confusion"])
probs = model.predict(["great story", "slow pace and a weak ending"])
print("predictions:", [model.classes[i] for i in probs.argmax(axis=1)])

# %% Export: a torch.nn.Module with the grown heads, and an ONNX file
try:
    import torch
except ImportError:
    torch = None
    print("PyTorch is not installed: no export (apt-get install python3-torch)")
if torch is not None:
    module = gf.to_torch(model)
    tokens = model.tokenize(new_df["text"])
    ids, valid = module.encode(tokens)
    with torch.no_grad():
        logits = module(ids, valid).numpy()
    diff = np.abs(logits - model.predict(new_df, logits=True)).max()
    print(f"PyTorch module: heads per block {module.heads_per_block}, max |logit difference| {diff:.2e}")
    assert diff < 1e-5, diff
    path = gf.to_onnx(model, os.path.join(out, "model.onnx"))
    try:
        import onnx

        onnx.checker.check_model(onnx.load(path))
        print("ONNX:", path, "(checked)")
    except ImportError:
        print("ONNX:", path, "(python3-onnx not installed: not checked)")

# %% The run as the program sees it
print(f"growformer report {run_dir}     # figures and tables of the run")
print(f"growformer eval {os.path.join(run_dir, 'checkpoints', 'last.safetensors')} --split test")
