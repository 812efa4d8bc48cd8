#!/usr/bin/env python3
"""--engine auto against every fixed engine on the CPU, with scikit-learn's kd_tree, same run.

Usage:  python3 bench/auto_bench.py [--runs 3] [--cases roll,roll-knn,words-graph,...]
Needs:  numpy, scikit-learn   and   cargo build --release -p voisin-cli

Cases (issue 13's list; CPU, all cores):
  roll         graph k=10 of a 100k x 3 swiss roll (sklearn make_swiss_roll, noise 0.05, seed 0)
  roll-knn     the same roll as base, 10k fresh roll points as queries, k=10
  words-graph  graph k=3 of the first 20,000 words of data/words.txt (levenshtein)
  words-knn    k=10 of 2,000 words of the list, each changed by one edit, over the whole list
  wide         graph k=10 of 100k x 128 random normal vectors
What is timed: the whole `voisin` process (reading the input, choosing, building, searching,
writing the answer as .npz), median of --runs, tools alternating; scikit-learn's
NearestNeighbors(algorithm="kd_tree", n_jobs=-1): fit + kneighbors() in-process (its data
already in memory, which favours it). Every voisin engine's output is checked to be byte-identical
to brute force's; scikit-learn's neighbour distances to voisin's (ids may differ on ties).
"""
import argparse
import os
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOISIN = os.path.join(ROOT, "target", "release", "voisin")
WORDS = os.path.join(ROOT, "data", "words.txt")


def roll(n, seed):
    from sklearn.datasets import make_swiss_roll

    x, _ = make_swiss_roll(n, noise=0.05, random_state=seed)
    return np.ascontiguousarray(x, dtype=np.float32)


def edited(words, n, seed):
    rng = random.Random(seed)
    out = []
    for w in rng.sample(words, n):
        p = rng.randrange(len(w) + 1)
        c = rng.choice(string.ascii_lowercase)
        op = rng.randrange(3)
        out.append(w[:p] + c + w[p:] if op == 0 or not w else
                   w[:p] + w[p + 1:] if op == 1 else w[:p] + c + w[p + 1:])
    return out


def cases(tmp):
    words = open(WORDS, encoding="utf-8").read().split("\n")
    words = [w for w in words if w]
    made = {}

    def save(name, a):
        path = os.path.join(tmp, name)
        np.save(path, a)
        return path

    def text(name, lines):
        path = os.path.join(tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        return path

    r, rq = roll(100_000, 0), roll(10_000, 1)
    made["roll"] = (["graph", "--input", save("roll.npy", r), "-k", "10"], r, None, 10)
    made["roll-knn"] = (["knn", "--base", os.path.join(tmp, "roll.npy"), "--query",
                         save("rollq.npy", rq), "-k", "10"], r, rq, 10)
    made["words-graph"] = (["graph", "--input", text("w20k.txt", words[:20_000]), "-k", "3"],
                           None, None, 3)
    made["words-knn"] = (["knn", "--base", WORDS, "--query",
                          text("wq.txt", edited(words, 2000, 42)), "-k", "10"], None, None, 10)
    g = np.random.default_rng(2).standard_normal((100_000, 128), dtype=np.float32)
    made["wide"] = (["graph", "--input", save("wide.npy", g), "-k", "10"], None, None, 10)
    return made


def run_voisin(args, engine, out):
    cmd = [VOISIN, *args, "--device", "cpu", "--engine", engine, "--out", out]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    took = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cases", default="roll,roll-knn,words-graph,words-knn,wide")
    ap.add_argument("--engines", default="auto,brute,kd,cover,lc")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        made = cases(tmp)
        for name in a.cases.split(","):
            args, base, queries, k = made[name]
            # Left out: the k-d tree on strings (it takes vectors only); the cover tree on the
            # whole word list (its build with full separation took 608 s, bench/NOTES.md "Cover
            # tree with full separation"); metric indexes on
            # 128-d vectors (intrinsic dimension about 68: they would scan everything).
            engines = [e for e in a.engines.split(",")
                       if not (e == "kd" and name.startswith("words"))
                       and not (name == "words-knn" and e == "cover")
                       and not (name == "wide" and e in ("cover", "lc", "kd"))]
            times = {e: [] for e in engines}
            if base is not None:
                times["sklearn kd_tree"] = []
            outs = {}
            for _ in range(a.runs):
                for e in engines:
                    out = os.path.join(tmp, f"{name}.{e}.npz")
                    times[e].append(run_voisin(args, e, out))
                    outs[e] = out
                if base is not None:
                    from sklearn.neighbors import NearestNeighbors

                    t = time.perf_counter()
                    nn = NearestNeighbors(n_neighbors=k, algorithm="kd_tree", n_jobs=-1).fit(base)
                    d, _ = nn.kneighbors(queries)
                    times["sklearn kd_tree"].append(time.perf_counter() - t)
            ref = open(outs["brute"], "rb").read()
            for e in engines:
                same = open(outs[e], "rb").read() == ref
                if not same:
                    sys.exit(f"{name}: --engine {e} differs from brute force")
            if base is not None:
                got = np.load(outs["brute"])["distances"].astype(np.float64)
                if not np.allclose(np.sort(d, axis=1), got, rtol=1e-5, atol=1e-5):
                    sys.exit(f"{name}: scikit-learn's distances differ from voisin's")
            med = {e: statistics.median(t) for e, t in times.items()}
            fastest = min(v for e, v in med.items() if e not in ("auto", "sklearn kd_tree"))
            cells = "  ".join(f"{e} {v:.3f}s" for e, v in med.items())
            print(f"{name}: {cells}  | auto/fastest fixed {med['auto'] / fastest:.2f}"
                  + (f"  sklearn/auto {med['sklearn kd_tree'] / med['auto']:.2f}"
                     if base is not None else ""), flush=True)


if __name__ == "__main__":
    main()
