#!/usr/bin/env python3
"""CPU benchmark: voisin's CPU engine against faiss-cpu and scikit-learn, same data, one run.

Usage:  python3 bench/cpu_bench.py [--runs 5] [--quick]
Needs:  pip install numpy faiss-cpu scikit-learn   and   cargo build --release --example bench_engine -p voisin

Workloads (random normal f32, seed 42), from the foundation issue:
  knn   100k x 128 base, 1k queries, k=10     (voisin.knn vs faiss IndexFlatL2 vs sklearn brute)
  graph 50k x 128, k=10                        (voisin.graph vs faiss search of the set against
                                               itself with k+1 vs sklearn kneighbors())
Each tool gets the same number of threads (all cores). faiss-cpu's wheel bundles an OpenBLAS
that picks its kernels by CPU model and falls back to old SSE kernels ("Barcelona") on CPUs it
does not know; the script re-runs itself with OPENBLAS_CORETYPE set to the best kernel family the
CPU supports (SkylakeX with AVX-512, else Haswell with AVX2) so the peer runs at its best, and
prints the kernel each library loaded (threadpoolctl). Timings are compute only, data already in
memory: faiss add+search, sklearn fit+kneighbors, voisin's engine call (examples/bench_engine.rs,
which reads the same .fbin files). Runs alternate between tools so machine noise hits all alike;
the table shows medians and voisin's speed ratio (peer time / voisin time).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "bench", "data")
ENGINE = os.path.join(ROOT, "target", "release", "examples", "bench_engine")


def write_fbin(path, a):
    a = np.ascontiguousarray(a, dtype=np.float32)
    with open(path, "wb") as f:
        np.array(a.shape, dtype=np.uint32).tofile(f)
        a.tofile(f)


def read_fbin(path):
    n, d = np.fromfile(path, dtype=np.uint32, count=2)
    return np.fromfile(path, dtype=np.float32, offset=8).reshape(int(n), int(d))


def dataset(name, n, d, seed):
    path = os.path.join(DATA, f"{name}_{n}x{d}_s{seed}.fbin")
    if not os.path.exists(path):
        os.makedirs(DATA, exist_ok=True)
        rng = np.random.default_rng(seed)
        write_fbin(path, rng.standard_normal((n, d), dtype=np.float32))
    return path


def time_voisin(args):
    out = subprocess.run([ENGINE, *args, "1"], check=True, capture_output=True, text=True).stdout
    return float(out.split()[0])


def time_call(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def best_coretype():
    flags = open("/proc/cpuinfo").read()
    return "SkylakeX" if "avx512f" in flags else "Haswell"


def use_best_openblas():
    """Re-runs this script with OPENBLAS_CORETYPE set to the CPU's best kernel family."""
    want = best_coretype()
    if os.environ.get("OPENBLAS_CORETYPE") != want:
        env = dict(os.environ, OPENBLAS_CORETYPE=want)
        env.pop("OPENBLAS_L2_SIZE", None)
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def main():
    use_best_openblas()
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    ap.add_argument("--no-sklearn", action="store_true")
    a = ap.parse_args()
    if not os.path.exists(ENGINE):
        sys.exit(f"{ENGINE} is missing: cargo build --release --example bench_engine -p voisin")

    import faiss
    from sklearn.neighbors import NearestNeighbors

    from threadpoolctl import threadpool_info

    threads = os.cpu_count()
    faiss.omp_set_num_threads(threads)
    for info in threadpool_info():
        print(f"{info.get('internal_api')}: {info.get('architecture')} x{info.get('num_threads')} {os.path.basename(info.get('filepath', ''))}")
    scale = 10 if a.quick else 1
    nb, nq, ng, d, k = 100_000 // scale, 1000, 50_000 // scale, 128, 10
    base_p, query_p, graph_p = dataset("base", nb, d, 42), dataset("query", nq, d, 43), dataset("graph", ng, d, 44)
    base, query, graph = read_fbin(base_p), read_fbin(query_p), read_fbin(graph_p)

    def faiss_knn():
        index = faiss.IndexFlatL2(d)
        index.add(base)
        index.search(query, k)

    def faiss_graph():
        index = faiss.IndexFlatL2(d)
        index.add(graph)
        index.search(graph, k + 1)

    def sk_knn():
        NearestNeighbors(n_neighbors=k, algorithm="brute", n_jobs=threads).fit(base).kneighbors(query)

    def sk_graph():
        NearestNeighbors(n_neighbors=k, algorithm="brute", n_jobs=threads).fit(graph).kneighbors()

    workloads = [
        (f"knn {nb}x{d}, {nq} queries, k={k}", ["knn", base_p, query_p, str(k)], faiss_knn, sk_knn),
        (f"graph {ng}x{d}, k={k}", ["graph", graph_p, str(k)], faiss_graph, sk_graph),
    ]
    rows = []
    for name, vargs, fknn, sknn in workloads:
        times = {"voisin": [], "faiss-cpu": [], "scikit-learn": []}
        for _ in range(a.runs):
            times["voisin"].append(time_voisin(vargs))
            times["faiss-cpu"].append(time_call(fknn))
            if not a.no_sklearn:
                times["scikit-learn"].append(time_call(sknn))
        med = {t: statistics.median(v) for t, v in times.items() if v}
        rows.append((name, med))
        print(name, {t: [round(x, 3) for x in v] for t, v in times.items()}, flush=True)

    print(f"\nCPU: {threads} threads, {a.runs} runs each, medians (s); ratio = peer time / voisin time")
    print(f"{'workload':38} {'voisin':>8} {'faiss':>8} {'ratio':>6} {'sklearn':>8} {'ratio':>6}")
    for name, med in rows:
        v, f = med["voisin"], med["faiss-cpu"]
        s = med.get("scikit-learn")
        sk = f"{s:8.3f} {s / v:6.2f}" if s else f"{'-':>8} {'-':>6}"
        print(f"{name:38} {v:8.3f} {f:8.3f} {f / v:6.2f} {sk}")


if __name__ == "__main__":
    main()
