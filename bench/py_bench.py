#!/usr/bin/env python3
"""Python bindings on the GPU machine (issue 11), side by side in one run.

1. ``voisin.knn`` on a 1M x 128 base, 10k queries, k = 10: wall time of the Python call
   (input checks, conversion, engine, result arrays) against the engine's own time for the
   same call (``Index.last_call_seconds``, measured around ``Engine::knn`` in Rust).
2. A fitted 1M x 128 base (the native index a fitted ``voisin.NearestNeighbors`` holds) answering batches of 100 and 1,000
   queries (k = 10), against PyTorch ``addmm`` + ``topk`` (fp32, TF32 off) on the same base
   resident on the GPU. Both sides take host queries and return host results; torch's time
   with queries already on the GPU is shown too.

Random normal float32 data, fixed seed; medians. Needs NumPy (and torch for the peer) only. Install the wheel built on the development
machine with ``pip install --no-index --target DIR voisin-*.whl`` and run with
``PYTHONPATH=DIR python3 bench/py_bench.py``. Prints a Markdown table for bench/RESULTS.md.
"""

import argparse
import statistics
import time

import numpy as np

import voisin
from voisin import _voisin


def timed(f, reps):
    times = []
    out = None
    for _ in range(reps):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch-reps", type=int, default=20)
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()

    rng = np.random.default_rng(2024)
    base = rng.standard_normal((a.n, a.d), dtype=np.float32)
    queries = rng.standard_normal((a.queries, a.d), dtype=np.float32)
    rows = []

    # 1. voisin.knn against the engine's time for the same call
    voisin.knn(base[:1000], queries[:10], a.k, device=a.device)  # start the device
    wall, (_, ind) = timed(lambda: voisin.knn(base, queries, a.k, device=a.device,
                                              precision=a.precision), a.reps)
    # The same call taken apart: the engine opened for a one-shot call (check=False, as
    # voisin.knn does), the request, and the drop that frees the device memory.
    parts = {"open": [], "call": [], "drop": [], "engine": []}
    for _ in range(a.reps):
        t0 = time.perf_counter()
        idx = _voisin.Index(base, "euclidean", a.device, a.precision, None, None, False)
        t1 = time.perf_counter()
        _, ind2 = idx.knn(queries, a.k)
        t2 = time.perf_counter()
        parts["engine"].append(idx.last_call_seconds)
        del idx
        t3 = time.perf_counter()
        for key, t in (("open", t1 - t0), ("call", t2 - t1), ("drop", t3 - t2)):
            parts[key].append(t)
    engine = statistics.median(parts["engine"])
    assert (ind == ind2).all()
    rows.append((f"knn {a.n}x{a.d}, {a.queries} queries, k={a.k}", "voisin.knn (Python)", wall,
                 f"{wall / engine:.3f}x engine"))
    rows.append(("", "engine (Rust, same call)", engine, ""))
    for key, what in (("open", "of which: engine opened"), ("call", "request (engine inside)"),
                      ("drop", "engine dropped")):
        rows.append(("", what, statistics.median(parts[key]), ""))

    # 2. fitted base, small batches
    # what a fitted voisin.NearestNeighbors holds and calls (used directly, so that the
    # device needs only NumPy besides torch)
    fitted = _voisin.Index(base, "euclidean", a.device, a.precision)

    class nn:  # noqa: N801 - stands in for the fitted estimator
        @staticmethod
        def kneighbors(q):
            return fitted.knn(q, a.k)

        @staticmethod
        def _native():
            return fitted
    peer = None
    if not a.no_torch:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        tb = torch.from_numpy(base).cuda()
        tnorm = (tb * tb).sum(1)

        def peer(q, resident=False):
            tq = q if resident else torch.from_numpy(q).cuda()
            d = torch.addmm(tnorm.unsqueeze(0), tq, tb.T, alpha=-2.0)
            vals, ids = torch.topk(d, a.k, dim=1, largest=False)
            if resident:
                torch.cuda.synchronize()
                return ids
            return vals.cpu().numpy(), ids.cpu().numpy()

    for b in (100, 1000):
        q = queries[:b]
        nn.kneighbors(q)  # warm
        inside = []

        def call():
            out = nn.kneighbors(q)
            inside.append(fitted.last_call_seconds)
            return out
        t_v, (_, vi) = timed(call, a.batch_reps)
        line = f"fitted base {a.n}x{a.d}, batch {b}, k={a.k}"
        rows.append((line, "of which: engine (prepared base, Rust)", statistics.median(inside), ""))
        if peer is None:
            rows.append((line, "voisin kneighbors", t_v, ""))
            continue
        peer(q)
        t_t, (_, ti) = timed(lambda: peer(q), a.batch_reps)
        tq = torch.from_numpy(q).cuda()
        peer(tq, resident=True)
        t_r, _ = timed(lambda: peer(tq, resident=True), a.batch_reps)
        agree = float((np.sort(vi, 1) == np.sort(ti, 1)).mean())
        rows.append((line, "voisin kneighbors", t_v, f"{t_t / t_v:.2f}x torch"))
        rows.append(("", "torch addmm+topk (host q)", t_t, f"ids agree {agree:.4f}"))
        rows.append(("", "torch addmm+topk (resident q)", t_r, ""))

    dev = nn._native().device
    print(f"\ndevice: {dev}; voisin {voisin.__version__}; precision {a.precision}")
    print("| workload | what | seconds | ratio |")
    print("|---|---|---|---|")
    for w, what, t, r in rows:
        print(f"| {w} | {what} | {t:.4f} | {r} |")


if __name__ == "__main__":
    main()
