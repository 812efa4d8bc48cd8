#!/usr/bin/env python3
"""voisin.dask.knn_graph on a Dask cluster against voisin.knn_graph in one process, same data.

    python3 bench/dask_bench.py --gpu                      # the device run: 10M x 50, k = 15,
                                                           # one-GPU LocalCUDACluster
    python3 bench/dask_bench.py --n 200000 --workers 2     # CPU workers

Data: n x dim clustered float32 rows (30 Gaussian clusters: a single-cell atlas after PCA),
made once on the client. Both runs get the same array; the one-process run goes first (its
time is the engine's graph through Python, device auto), then the cluster is started (not
timed), warmed on a small graph (not timed), and the cluster's graph is timed from the call
to the gathered result. Then ``--sample`` rows drawn at random are compared byte for byte
(indices and distances). Prints one table and a JSON line (for bench/RESULTS.md).

On the device (no network there): dask-cuda and its dependencies go as wheels; see
docs/dask.md ("Wheels for an offline GPU machine") for the list.
"""

import argparse
import json
import os
import sys
import time

import numpy as np


def clustered(n, dim, seed=0, centers=30):
    rng = np.random.default_rng(seed)
    middle = rng.normal(scale=6.0, size=(centers, dim)).astype(np.float32)
    X = np.empty((n, dim), dtype=np.float32)
    step = 1 << 20
    for s in range(0, n, step):
        e = min(n, s + step)
        labels = rng.integers(0, centers, size=e - s)
        X[s:e] = middle[labels] + rng.standard_normal((e - s, dim), dtype=np.float32)
    return X


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("-k", type=int, default=15)
    ap.add_argument("--gpu", action="store_true", help="one-GPU LocalCUDACluster (dask-cuda)")
    ap.add_argument("--workers", type=int, default=1, help="CPU worker processes without --gpu")
    ap.add_argument("--block-rows", type=int, default=None,
                    help="rows per block (default: 2^21 on a GPU, voisin.dask's on CPUs)")
    ap.add_argument("--sample", type=int, default=1000)
    ap.add_argument("--skip-single", action="store_true", help="no one-process run (no check)")
    args = ap.parse_args()

    import voisin
    import voisin.dask as vd
    from distributed import Client

    device = "auto" if args.gpu else "cpu"
    t = time.perf_counter()
    X = clustered(args.n, args.dim)
    print(f"data {args.n} x {args.dim} float32 made in {time.perf_counter() - t:.1f} s",
          file=sys.stderr)
    single = None
    if not args.skip_single:
        t = time.perf_counter()
        single = voisin.knn_graph(X, args.k, device=device)
        single_s = time.perf_counter() - t
        print(f"one process: {single_s:.2f} s", file=sys.stderr)

    if args.gpu:
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(n_workers=1, threads_per_worker=1)
        block_rows = args.block_rows or 1 << 21
    else:
        from distributed import LocalCluster

        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1)
        block_rows = args.block_rows
    with Client(cluster) as client:
        workers = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES", "-"))
        small = X[:20_000]
        vd.knn_graph(small, args.k, device=device, client=client, block_rows=8192)  # warm-up
        engines = client.run(lambda: [e.device for e in vd._ENGINES.values()])
        t = time.perf_counter()
        dist, ind = vd.knn_graph(X, args.k, device=device, client=client,
                                 block_rows=block_rows)
        dask_s = time.perf_counter() - t
    cluster.close()
    print(f"voisin.dask: {dask_s:.2f} s", file=sys.stderr)

    row = {"n": args.n, "dim": args.dim, "k": args.k, "device": device,
           "workers": len(workers), "block_rows": block_rows, "dask_s": round(dask_s, 2),
           "engines": sorted({d for v in engines.values() for d in v})}
    if single is not None:
        rows = np.random.default_rng(1).choice(args.n, size=min(args.sample, args.n),
                                               replace=False)
        same_ind = np.array_equal(ind[rows], single[1][rows])
        same_dist = dist[rows].tobytes() == single[0][rows].tobytes()
        row.update(single_s=round(single_s, 2), ratio=round(dask_s / single_s, 3),
                   rows_checked=len(rows), identical=bool(same_ind and same_dist))
    print(f"| n | dim | k | workers | block rows | one process (s) | voisin.dask (s) | ratio | "
          f"rows checked | identical |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {args.n} | {args.dim} | {args.k} | {row['workers']} ({device}) | {block_rows} | "
          f"{row.get('single_s', '-')} | {row['dask_s']} | {row.get('ratio', '-')} | "
          f"{row.get('rows_checked', '-')} | {row.get('identical', '-')} |")
    print(json.dumps(row))
    if single is not None and not row["identical"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
