#!/usr/bin/env python3
"""The scanpy route against the plain function, side by side in one process (issue 44).

``voisin.KNeighborsTransformer(n_neighbors=k).fit_transform(X)`` (what scanpy and scikit-learn
pipelines call) against ``voisin.knn_graph(X, k + 1, include_self=True, output="csr")``, the
same graph (k + 1 entries per row, the item itself first) from the function, on the CPU, each
with its default distances (the transformer's exact float64 values, the function's float32
roundings of them).

Data (100k x 50 by default):

- ``words``: the shipped word list (data/words.txt, 94,577 words, padded to n with their
  plurals), each word's character 3-grams hashed into 4096 counts and projected to 50
  dimensions by a fixed Gaussian matrix: real strings, so real neighbourhood structure (word
  families, shared stems), in float32;
- ``clustered``: 200 Gaussian clusters in a random 10-dimensional subspace of 50, plus small
  full-dimensional noise (low intrinsic dimension, as embeddings have).

The two calls alternate (the machine is shared and noisy); the table shows medians of
``--runs`` and the ratio transformer / function. Usage: ``python3 bench/py_transformer.py
[--runs 3] [--n 100000] [-k 15]``; needs the package installed (``maturin develop --release``).
"""

import argparse
import os
import statistics
import time
import zlib

import numpy as np

import voisin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def words(n, d, seed=44):
    with open(os.path.join(ROOT, "data", "words.txt"), encoding="utf-8") as f:
        ws = [w.strip() for w in f if w.strip()]
    ws = (ws + [w + "s" for w in ws])[:n]
    buckets = 4096
    counts = np.zeros((len(ws), buckets), np.float32)
    for r, w in enumerate(ws):
        s = f"^{w.lower()}$"
        for i in range(len(s) - 2):
            counts[r, zlib.crc32(s[i:i + 3].encode()) % buckets] += 1.0
    proj = np.random.default_rng(seed).normal(size=(buckets, d)).astype(np.float32)
    return np.ascontiguousarray(counts @ proj / np.sqrt(d), dtype=np.float32)


def clustered(n, d, seed=44):
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(d, 10)))[0].T  # 10 x d, orthonormal rows
    centers = rng.normal(scale=6.0, size=(200, 10))
    labels = rng.integers(0, 200, size=n)
    X = (centers[labels] + rng.normal(size=(n, 10))) @ basis + 0.05 * rng.normal(size=(n, d))
    return X.astype(np.float32)


def timed(f):
    t = time.perf_counter()
    out = f()
    return time.perf_counter() - t, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("-k", type=int, default=15)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--data", default="words,clustered")
    a = ap.parse_args()
    print(f"| data | n x d | k | fit_transform s | knn_graph s | ratio |")
    print("|---|---|---|---|---|---|")
    for kind in a.data.split(","):
        X = {"words": words, "clustered": clustered}[kind](a.n, a.d)
        transformer = lambda: voisin.KNeighborsTransformer(  # noqa: E731
            n_neighbors=a.k, device="cpu").fit_transform(X)
        function = lambda: voisin.knn_graph(  # noqa: E731
            X, a.k + 1, include_self=True, output="csr", device="cpu")
        ts, fs, ratios = [], [], []
        for _ in range(a.runs):
            t, G = timed(transformer)
            f, H = timed(function)
            ts.append(t)
            fs.append(f)
            ratios.append(t / f)
        # the same graph, entry for entry (a check, outside the timings): the transformer's
        # distances are the exact float64 values (its default), the function's their float32
        # roundings (its default)
        assert G.shape == H.shape and (G.indptr == H.indptr).all(), "the two graphs differ"
        assert (G.indices == H.indices).all(), "the two graphs differ"
        assert np.allclose(G.data, H.data, rtol=1e-6, atol=1e-6), "the distances differ"
        assert (H.data == G.data.astype(np.float32)).all(), "f32 is not the rounding of f64"
        print(f"| {kind} | {len(X)} x {a.d} | {a.k} | {statistics.median(ts):.2f} | "
              f"{statistics.median(fs):.2f} | {statistics.median(ratios):.3f} "
              f"({', '.join(f'{r:.3f}' for r in ratios)}) |")


if __name__ == "__main__":
    main()
