#!/usr/bin/env python3
"""Generated task families for growth beyond heads (issue 62): where MLP width and depth matter.

    tools/structure_families.py [--out runs/structure_data]

writes OUT/pair/{train,val,test}.tsv and OUT/compose/{train,val,test}.tsv (text_tsv files of
token ids, `sentence<TAB>label`), the data of configs/experiments/structure/*.yaml, and the
held-out families OUT/pair_h and OUT/compose_h, built after the two above had been measured:
the same kinds with other sizes and tables (pair_h: 64 x 64 pairs, 6 classes, 30,000 rows;
compose_h: 20 symbols, T1 of 6 values, 6 classes, 24,000 rows).

- pair (MLP width): a row is `a b f1 .. f6`: a and b from 48 symbols each (ids 0..47 and
  48..95), six filler tokens (96..111) at random; the label is T[a][b], a fixed random table of
  8 classes over the 2,304 pairs. 20,000 training rows (each pair about 9 times), 2,000
  validation and 2,000 test rows drawn the same way (the pairs seen in training, other fillers).
  Nothing but memory answers it: the classes of 2,304 pairs are stored in the weights, and a
  block's MLP is where a transformer stores associations, so accuracy follows the MLP's width.
- compose (depth): `a b c f1 .. f5` with a, b, c from 24 symbols each (0..23, 24..47,
  48..71), fillers 72..87; the label is T2[T1[a][b]][c] with T1 a random table of 8 values over
  the 576 pairs (a, b) and T2 a random 8 x 24 table of 8 classes. The 13,824 triples are too
  many to store from 30,000 rows; a model that computes T1 first and T2 from its result
  answers triples it has not seen, and that is two lookups in a row.
"""
import argparse
import os
import random


def write(path, rows):
    with open(path, "w") as f:
        f.write("sentence\tlabel\n")
        for text, label in rows:
            f.write(f"{text}\t{label}\n")


def pair_rows(n, r, table, v=48, fill=16, length=8):
    out = []
    for _ in range(n):
        a, b = r.randrange(v), r.randrange(v)
        fl = [2 * v + r.randrange(fill) for _ in range(length - 2)]
        out.append((" ".join(map(str, [a, v + b] + fl)), table[a][b]))
    return out


def compose_rows(n, r, t1, t2, v=24, fill=16, length=8):
    out = []
    for _ in range(n):
        a, b, c = r.randrange(v), r.randrange(v), r.randrange(v)
        fl = [3 * v + r.randrange(fill) for _ in range(length - 3)]
        out.append((" ".join(map(str, [a, v + b, 2 * v + c] + fl)), t2[t1[a][b]][c]))
    return out


def write_family(out, name, train_rows, rows_of, seed_offset=0):
    """OUT/NAME/{train,val,test}.tsv: TRAIN_ROWS training rows, 2,000 each for val and test;
    ROWS_OF(n, rng) draws the rows, each split from its own seed (1, 2, 3 + SEED_OFFSET)."""
    os.makedirs(os.path.join(out, name), exist_ok=True)
    for split, seed in [("train", 1), ("val", 2), ("test", 3)]:
        n = train_rows if split == "train" else 2000
        write(os.path.join(out, name, split + ".tsv"), rows_of(n, random.Random(seed + seed_offset)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/structure_data")
    out = ap.parse_args().out
    rng = random.Random(20261206)
    table = [[rng.randrange(8) for _ in range(48)] for _ in range(48)]
    write_family(out, "pair", 20000, lambda n, r: pair_rows(n, r, table))
    rng = random.Random(20261207)
    t1 = [[rng.randrange(8) for _ in range(24)] for _ in range(24)]
    t2 = [[rng.randrange(8) for _ in range(24)] for _ in range(8)]
    write_family(out, "compose", 30000, lambda n, r: compose_rows(n, r, t1, t2))
    # the held-out families (other sizes, other tables)
    rng = random.Random(20261208)
    table_h = [[rng.randrange(6) for _ in range(64)] for _ in range(64)]
    write_family(out, "pair_h", 30000, lambda n, r: pair_rows(n, r, table_h, v=64), 10)
    rng = random.Random(20261209)
    t1_h = [[rng.randrange(6) for _ in range(20)] for _ in range(20)]
    t2_h = [[rng.randrange(6) for _ in range(20)] for _ in range(6)]
    write_family(out, "compose_h", 24000, lambda n, r: compose_rows(n, r, t1_h, t2_h, v=20), 10)
    print(f"wrote {out}/pair, compose, pair_h and compose_h")


if __name__ == "__main__":
    main()
