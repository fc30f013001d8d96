"""Train the quickstart config from one head per block, growing with grow_on_plateau (a
policy written in Python), then evaluate, predict and look at the run, all from Python.

    cmake -S . -B build -G Ninja && cmake --build build
    PYTHONPATH=build/python python3 examples/python/train_grow_on_plateau.py [--steps 600] [--run-dir DIR]

Stop it with Ctrl-C: it stops after the current step with a checkpoint; run it again with
--resume to continue.
"""
import argparse
import os

import numpy as np

import growformer as gf

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--steps", type=int, default=2000, help="training steps (the quickstart's 2000)")
ap.add_argument("--run-dir", default=os.path.join("runs", "py-grow-on-plateau"))
ap.add_argument("--resume", action="store_true", help="continue the run in --run-dir")
args = ap.parse_args()

# the quickstart, from one head per block; the policy's options reach its __init__
config = gf.Config.load(os.path.join(ROOT, "configs", "quickstart.yaml"), overrides=[
    f"train.steps={args.steps}",
    "train.check_every=50",
    "model.attention.heads=1",
    "growth={plugin: python, class: grow_on_plateau.GrowOnPlateau, path: [%s], "
    "options: {patience: 3, min_delta: 0.02, max_heads: 8}}" % HERE,
])


def progress(m):
    val = "" if m["val_step"] is None else f", val acc {m['val_accuracy']:.3f} (step {m['val_step']})"
    print(f"step {m['step']:5d}/{m['total_steps']}: loss {m['loss']:.4f}, acc {m['accuracy']:.3f}, "
          f"lr {m['lr']:.2e}, heads {m['heads']}{val}", flush=True)
    return True  # False would stop the run here (with a checkpoint)


if args.resume:
    result = gf.resume(args.run_dir, callback=progress, every=100)
else:
    result = gf.Experiment(config).train(args.run_dir, callback=progress, every=100)
if not result["finished"]:
    raise SystemExit(f"stopped at step {result['stopped_at']}; continue with --resume")
print("test:", result["test"])

# every growth the policy decided, with its reason
for e in gf.read_events(args.run_dir):
    if e["type"] == "grow":
        print(f"  step {e['step']}: block {e['block']} grew head {e['head']} ({e['reason']})")

# the best checkpoint: evaluation, and probabilities of new expressions
model = gf.load(os.path.join(args.run_dir, "checkpoints", "best.safetensors"))
print("validation:", model.evaluate("val"))
exprs = ["[MAX 2 9 [MIN 4 7 ] 0 ]", "[SM 3 5 [MED 1 2 8 ] ]"]
probs = model.predict(exprs)
for expr, p in zip(exprs, probs):
    print(f"  {expr}: predicted {model.classes[int(np.argmax(p))]} (p = {p.max():.2f})")
# per-head weights as numpy arrays (copies)
for b, heads in enumerate(model.heads()):
    print(f"  block {b}: heads {[h['id'] for h in heads]}, born at steps {[h['born'] for h in heads]}")
