#!/usr/bin/env python3
"""A large exact k-NN graph on a local Dask cluster, handed to scanpy and UMAP.

    python3 scripts/dask_graph.py                       # 10M x 50 clustered rows, CPU workers
    python3 scripts/dask_graph.py --gpu                 # one worker per GPU (dask-cuda)
    python3 scripts/dask_graph.py --n 20000 --embed umap

The rows (a single-cell atlas after PCA, say: clustered float32) are made on the workers as a
dask array, so the client never holds the input while the graph is built; the graph comes back
as the n x n CSR matrix of scikit-learn's KNeighborsTransformer (each row: the item itself,
then its k nearest others), which scanpy's ``pp.neighbors`` and UMAP's ``precomputed_knn``
take as they are. Needs ``pip install voisin[dask]`` (and scanpy, umap-learn for --embed).
"""

import argparse
import time
import warnings

import numpy as np


def clustered(n, dim, rows, seed=0, centers=30):
    """n x dim float32 rows around ``centers`` centres, made block by block on the workers."""
    import dask.array as da

    middle = np.random.default_rng(seed).normal(scale=6.0, size=(centers, dim))

    def block(block_info=None):
        (start, end), _ = block_info[None]["array-location"]
        rng = np.random.default_rng([seed, start])
        labels = rng.integers(0, centers, size=end - start)
        return (middle[labels] + rng.normal(size=(end - start, dim))).astype(np.float32)

    chunks = (tuple(min(rows, n - s) for s in range(0, n, rows)), (dim,))
    return da.map_blocks(block, chunks=chunks, dtype=np.float32)


class Precomputed:
    """A transformer that hands scanpy a graph already built (scikit-learn's interface)."""

    def __init__(self, graph, n_neighbors):
        self.graph, self.n_neighbors = graph, n_neighbors

    def get_params(self, deep=True):
        return {"n_neighbors": self.n_neighbors}

    def fit(self, X, y=None):
        return self

    def transform(self, X):
        return self.graph

    def fit_transform(self, X, y=None):
        return self.graph


def main(argv=None, client=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("--k", type=int, default=15, help="neighbours per row, the item itself not counted")
    ap.add_argument("--workers", type=int, default=None, help="CPU worker processes (default: cores / 2)")
    ap.add_argument("--gpu", action="store_true", help="dask-cuda's LocalCUDACluster, one worker per GPU")
    ap.add_argument("--block-rows", type=int, default=None)
    ap.add_argument("--embed", choices=["scanpy", "umap", "both", "none"], default="both")
    args = ap.parse_args(argv)

    import voisin.dask as vd

    own = None
    if client is None:
        from distributed import Client

        if args.gpu:
            from dask_cuda import LocalCUDACluster

            own = LocalCUDACluster()
        else:
            import os

            from distributed import LocalCluster

            workers = args.workers or max(1, (os.cpu_count() or 2) // 2)
            own = LocalCluster(n_workers=workers, threads_per_worker=1)
        client = Client(own)
    try:
        X = clustered(args.n, args.dim, args.block_rows or 1 << 16)
        t = time.perf_counter()
        G = vd.knn_graph(X, args.k + 1, include_self=True, output="csr", client=client,
                         block_rows=args.block_rows, progress=own is not None)
        print(f"graph of {args.n} x {args.dim}, k = {args.k}: {time.perf_counter() - t:.1f} s "
              f"on {len(client.nthreads())} workers")
        if args.embed == "none":
            return G, None
        data = X.compute()
        out = {}
        if args.embed in ("scanpy", "both"):
            import anndata
            import scanpy as sc

            ad = anndata.AnnData(data)
            sc.pp.neighbors(ad, n_neighbors=args.k, use_rep="X", transformer=Precomputed(G, args.k))
            sc.tl.umap(ad, maxiter=20)
            out["scanpy"] = ad.obsm["X_umap"]
        if args.embed in ("umap", "both"):
            import umap

            w = args.k + 1
            ind = G.indices.reshape(args.n, w)[:, : args.k]
            dist = G.data.reshape(args.n, w)[:, : args.k]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out["umap"] = umap.UMAP(n_neighbors=args.k, precomputed_knn=(ind, dist, None),
                                        n_epochs=20, random_state=0).fit_transform(data)
        return G, out
    finally:
        if own is not None:
            client.close()
            own.close()


if __name__ == "__main__":
    main()
