#!/usr/bin/env python3
"""Generated task families for growth beyond heads (issue 62): where MLP width and depth matter.

    tools/structure_families.py [--out runs/structure_data]

writes OUT/pair/{train,val,test}.tsv and OUT/compose/{train,val,test}.tsv (text_tsv files of
token ids, `sentence<TAB>label`), the data of configs/experiments/structure/*.yaml, and the
held-out families OUT/pair_h and OUT/compose_h, built after the two above had been measured:
the same kinds with other sizes and tables (pair_h: 64 x 64 pairs, 6 classes, 30,000 rows;
compose_h: 20 symbols, T1 of 6 values, 6 classes, 24,000 rows), and the rules' held-out
families OUT/{pair_r,compose_r,chain_r,lookup_r}, built after the rules (mlp_onset,
depth_plateau) and their defaults were frozen (commit ddb0643):
- pair_r (width): 40 x 40 pairs, 12 classes, 16,000 training rows.
- compose_r (depth): 28 symbols, T1 of 7 values, 7 classes, 36,000 training rows.
- chain_r (depth, three lookups in a row): `a b c d f1 .. f4`, 16 symbols each, the label
  T3[T2[T1[a][b]][c]][d] with tables of 6 values; 40,000 training rows of the 65,536 quadruples.
- lookup_r (neither): the pair kind over 12 x 12 pairs and 4 classes, 10,000 training rows: a
  small table that a narrow one-block model stores (a control for the rules' over-growth).
And the held-out families of the block pruning baseline (block_ablation) and of depth_plateau
without its stop beside it, built after both were frozen (the commit that added block_ablation):
- chain_s (depth): the chain kind over 14 symbols with tables of 7 values, 36,000 training rows.
- noise_s (neither, a loss that plateaus): the pair kind over 16 x 16 pairs and 5 classes, every
  split's label replaced by a random class in a quarter of the rows (the best accuracy about
  0.8); 12,000 training rows. One block stores the table; the loss stops falling at the noise.

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


def chain_rows(n, r, t1, t2, t3, v=16, fill=16, length=8):
    out = []
    for _ in range(n):
        a, b, c, d = (r.randrange(v) for _ in range(4))
        fl = [4 * v + r.randrange(fill) for _ in range(length - 4)]
        label = t3[t2[t1[a][b]][c]][d]
        out.append((" ".join(map(str, [a, v + b, 2 * v + c, 3 * v + d] + fl)), label))
    return out


def noisy(rows, r, classes, fraction):
    """ROWS with the label of about FRACTION of them replaced by a random one of CLASSES."""
    return [(t, r.randrange(classes) if r.random() < fraction else y) for t, y in rows]


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
    # the rules' held-out families (after the rules were frozen)
    rng = random.Random(20261210)
    table_r = [[rng.randrange(12) for _ in range(40)] for _ in range(40)]
    write_family(out, "pair_r", 16000, lambda n, r: pair_rows(n, r, table_r, v=40), 20)
    rng = random.Random(20261211)
    t1_r = [[rng.randrange(7) for _ in range(28)] for _ in range(28)]
    t2_r = [[rng.randrange(7) for _ in range(28)] for _ in range(7)]
    write_family(out, "compose_r", 36000, lambda n, r: compose_rows(n, r, t1_r, t2_r, v=28), 20)
    rng = random.Random(20261212)
    c1 = [[rng.randrange(6) for _ in range(16)] for _ in range(16)]
    c2 = [[rng.randrange(6) for _ in range(16)] for _ in range(6)]
    c3 = [[rng.randrange(6) for _ in range(16)] for _ in range(6)]
    write_family(out, "chain_r", 40000, lambda n, r: chain_rows(n, r, c1, c2, c3), 20)
    rng = random.Random(20261213)
    table_l = [[rng.randrange(4) for _ in range(12)] for _ in range(12)]
    write_family(out, "lookup_r", 10000, lambda n, r: pair_rows(n, r, table_l, v=12), 20)
    # block_ablation's held-out families (after it was frozen)
    rng = random.Random(20261214)
    s1 = [[rng.randrange(7) for _ in range(14)] for _ in range(14)]
    s2 = [[rng.randrange(7) for _ in range(14)] for _ in range(7)]
    s3 = [[rng.randrange(7) for _ in range(14)] for _ in range(7)]
    write_family(out, "chain_s", 36000, lambda n, r: chain_rows(n, r, s1, s2, s3, v=14), 30)
    rng = random.Random(20261215)
    table_n = [[rng.randrange(5) for _ in range(16)] for _ in range(16)]
    write_family(out, "noise_s", 12000,
                 lambda n, r: noisy(pair_rows(n, r, table_n, v=16), r, 5, 0.25), 30)
    print(f"wrote {out}/pair, compose, pair_h, compose_h, pair_r, compose_r, chain_r, lookup_r, "
          "chain_s, noise_s")


if __name__ == "__main__":
    main()
