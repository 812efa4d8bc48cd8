#!/usr/bin/env python3
"""A fitted base's latency on the CPU per batch size, against faiss-cpu in the same run.

Usage:  python3 bench/cpu_latency.py [--n 399000] [--d 50] [--reps 25] [--quick] [--engine]
Needs:  the voisin package (built into the environment: maturin develop --release),
        numpy, scikit-learn, faiss-cpu (pip install faiss-cpu; not a test dependency);
        with --engine, cargo build --release --example bench_engine -p voisin

A fitted ``voisin.NearestNeighbors(metric="cosine", device="cpu")`` answers batches of 1, 10,
100, 1,000 and 10,000 queries (k = 10) through ``kneighbors``, the estimator's whole path
(input checks, the native call, the result arrays); faiss-cpu answers the same batches with an
``IndexFlatIP`` over the L2-normalised base, its time including the normalisation of the
queries (cosine's own work). Both use every core. The data stand in for word vectors (the
issue's held-out 399k x 50 set): float32 rows drawn around 2,000 cluster centres of Zipf-like
sizes, anisotropic (a random rotation of axes whose scales fall as 1/sqrt(i + 1)), off the
origin by a common mean, with log-normal norms; the queries are drawn the same way, apart from
the base. Each repetition takes a fresh slice of the queries, runs the two tools one after the
other in alternating order, and keeps the ratio of the pair; the table shows medians, the
median of the paired ratios (faiss time / voisin time: above 1 means voisin is faster), and the
spread of each tool's times (interquartile range over median) as the noise of the run. It also
shows the engine's own time (``last_call_seconds``) and how often the two tools' neighbour lists
agree (faiss ranks by f32 dot products, voisin exactly, so near ties may differ).

With --engine it instead times the engine call alone (examples/bench_engine.rs ``fitted``: the
base prepared once, then one ``Prepared::knn`` per run on a fresh batch) on the same data,
written to .fbin files in a temporary folder, and prints the median and quartiles per batch.

faiss-cpu's wheel bundles an OpenBLAS that picks its kernels by CPU model; as bench/cpu_bench.py
does, the script re-runs itself with OPENBLAS_CORETYPE set to the best family the CPU supports.
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np

from cpu_bench import ENGINE, use_best_openblas

BATCHES = (1, 10, 100, 1000, 10_000)
K = 10


def word_like(rng, n, d, centres, axes, scales, mean):
    """n rows around the given centres: clustered, anisotropic, off the origin, varied norms."""
    sizes = 1.0 / np.arange(1, len(centres) + 1) ** 0.7
    which = rng.choice(len(centres), size=n, p=sizes / sizes.sum())
    local = rng.standard_normal((n, d)).astype(np.float32) * (0.6 * scales)
    rows = centres[which] + local @ axes + mean
    rows *= rng.lognormal(0.0, 0.3, size=(n, 1)).astype(np.float32)
    return np.ascontiguousarray(rows, dtype=np.float32)


def make_data(n, d, n_queries, seed):
    rng = np.random.default_rng(seed)
    axes, _ = np.linalg.qr(rng.standard_normal((d, d)))
    axes = axes.astype(np.float32)
    scales = (1.0 / np.sqrt(np.arange(d) + 1.0)).astype(np.float32)
    centres = (rng.standard_normal((2000, d)).astype(np.float32) * scales) @ axes
    mean = (0.3 * rng.standard_normal(d)).astype(np.float32)
    base = word_like(rng, n, d, centres, axes, scales, mean)
    queries = word_like(rng, n_queries, d, centres, axes, scales, mean)
    return base, queries


def iqr_share(times):
    if len(times) < 4:
        return float("nan")
    q = statistics.quantiles(times, n=4)
    return (q[2] - q[0]) / statistics.median(times)


def write_fbin(path, rows):
    with open(path, "wb") as f:
        np.array(rows.shape, dtype=np.uint32).tofile(f)
        rows.tofile(f)


def engine_alone(base, queries, reps):
    """The engine call's time per batch size, from examples/bench_engine.rs's fitted job."""
    if not os.path.exists(ENGINE):
        raise SystemExit(f"{ENGINE} is missing: cargo build --release --example bench_engine -p voisin")
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, "base.fbin"), os.path.join(tmp, "queries.fbin")]
        write_fbin(paths[0], base)
        write_fbin(paths[1], queries)
        print("| queries | runs | engine median | quartiles |")
        print("|---|---|---|---|")
        for b in BATCHES:
            runs = reps if b <= 100 else max(5, reps // (3 if b <= 1000 else 5))
            out = subprocess.run([ENGINE, "fitted", *paths, str(K), str(b), str(runs)],
                                 env=dict(os.environ, METRIC="cosine"), check=True,
                                 capture_output=True, text=True).stdout
            times = [float(line.split()[0]) for line in out.splitlines()]
            q = statistics.quantiles(times, n=4)
            print(f"| {b} | {runs} | {statistics.median(times) * 1e3:.2f} ms "
                  f"| {q[0] * 1e3:.2f}–{q[2] * 1e3:.2f} ms |", flush=True)


def main():
    use_best_openblas()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=399_000)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--reps", type=int, default=25, help="repetitions for batches up to 100")
    ap.add_argument("--quick", action="store_true", help="a small base and few repetitions")
    ap.add_argument("--engine", action="store_true", help="time the engine call alone")
    a = ap.parse_args()
    if a.quick:
        a.n, a.reps = 40_000, 5
    base, queries = make_data(a.n, a.d, 2 * BATCHES[-1], seed=43)
    if a.engine:
        return engine_alone(base, queries, a.reps)

    import faiss
    import voisin

    threads = os.cpu_count()
    faiss.omp_set_num_threads(threads)

    t = time.perf_counter()
    nn = voisin.NearestNeighbors(n_neighbors=K, metric="cosine", device="cpu").fit(base)
    nn.kneighbors(queries[:1])  # the first search prepares the fitted base
    fit_v = time.perf_counter() - t
    t = time.perf_counter()
    index = faiss.IndexFlatIP(a.d)
    normed = base.copy()
    faiss.normalize_L2(normed)
    index.add(normed)
    fit_f = time.perf_counter() - t

    def run_voisin(q):
        return nn.kneighbors(q)[1]

    def run_faiss(q):
        q = q.copy()
        faiss.normalize_L2(q)
        return index.search(q, K)[1]

    tools = (("voisin", run_voisin), ("faiss", run_faiss))
    load = os.getloadavg()
    print(f"base {a.n} x {a.d} float32 (clustered, anisotropic), cosine, k={K}, {threads} threads; "
          f"fit + first search: voisin {fit_v:.3f} s, faiss {fit_f:.3f} s; "
          f"load average {load[0]:.2f}", flush=True)
    rows = []
    for b in BATCHES:
        reps = a.reps if b <= 100 else max(3, a.reps // (5 if b <= 1000 else 10))
        times = {name: [] for name, _ in tools}
        engine, ratios, agree = [], [], []
        for r in range(reps):
            start = (r * b) % (len(queries) - b + 1)
            q = queries[start:start + b]
            order = tools if r % 2 == 0 else tools[::-1]
            got = {}
            for name, run in order:
                t = time.perf_counter()
                got[name] = run(q)
                times[name].append(time.perf_counter() - t)
            engine.append(nn._native().last_call_seconds)
            ratios.append(times["faiss"][-1] / times["voisin"][-1])
            agree.append(np.mean(np.sort(got["voisin"], 1) == np.sort(got["faiss"], 1)))
        med = {name: statistics.median(v) for name, v in times.items()}
        rows.append((b, reps, med, statistics.median(engine), statistics.median(ratios),
                     {name: iqr_share(v) for name, v in times.items()}, float(np.mean(agree))))
        print(b, {n: [round(x * 1e3, 2) for x in v] for n, v in times.items()}, flush=True)
    load_end = os.getloadavg()

    print(f"\nload average {load[0]:.2f} at the start, {load_end[0]:.2f} at the end")
    print("| queries | runs | voisin | of which engine | faiss-cpu | ratio (paired median) "
          "| spread voisin / faiss | same neighbours |")
    print("|---|---|---|---|---|---|---|---|")
    for b, reps, med, eng, ratio, spread, agree in rows:
        print(f"| {b} | {reps} | {med['voisin'] * 1e3:.2f} ms | {eng * 1e3:.2f} ms "
              f"| {med['faiss'] * 1e3:.2f} ms | **{ratio:.2f}** "
              f"| {spread['voisin']:.0%} / {spread['faiss']:.0%} | {agree:.1%} |")


if __name__ == "__main__":
    main()
