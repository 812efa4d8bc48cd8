#!/usr/bin/env python3
"""voisin.dask.knn over a base larger than the cluster's memory, on CPU workers with limits.

    python3 bench/dask_scale.py                      # 4 workers x 500 MiB, a 3.9 GiB base
    python3 bench/dask_scale.py --rows 2000000       # a quick run

The base is a dask array made on the workers (uniform float32, one seed per chunk), so neither
the client nor the scheduler ever holds it; with the defaults it is 8x one worker's memory limit
and twice the whole cluster's. Each worker is a separate process with Dask's ``memory_limit``
(its nanny restarts a worker past 95 % of it; past 60 % the worker spills its stored blocks to
disk). The run records each worker's peak resident memory (``getrusage``), whether any worker
was restarted, and checks ``--sample`` queries' rows byte for byte against ``voisin.knn`` in this
process on the same rows (the base is then computed here, once, outside the cluster). Prints a
table and one JSON line (for bench/RESULTS.md). Chunks of 200,000 rows (38 MiB) leave a worker
room for a chunk, its search and Dask's own ~200 MiB; at 500,000 rows (95 MiB) workers passed
the limit and were restarted (bench/NOTES.md, 2026-12-04).
"""

import argparse
import json
import resource
import tempfile
import time

import numpy as np


def peak_mib():
    """This process's peak resident memory in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=21_000_000)
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("-k", type=int, default=15)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--limit", default="500MiB", help="each worker's Dask memory_limit")
    ap.add_argument("--chunk-rows", type=int, default=200_000)
    ap.add_argument("--sample", type=int, default=100)
    args = ap.parse_args()

    import dask
    import dask.array as da
    from dask.utils import parse_bytes
    from distributed import Client, LocalCluster

    import voisin
    import voisin.dask as vd

    limit = parse_bytes(args.limit)
    base_bytes = args.rows * args.dim * 4
    # The workers' spilled blocks go to a folder removed at the end (gigabytes, with the defaults).
    spill = tempfile.TemporaryDirectory(prefix="voisin-dask-scale-")
    dask.config.set({"temporary-directory": spill.name})
    cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, memory_limit=limit,
                           processes=True, dashboard_address=None)
    client = Client(cluster)
    before = set(client.scheduler_info()["workers"])
    base = da.random.default_rng(7).random((args.rows, args.dim), dtype=np.float32,
                                            chunks=(args.chunk_rows, args.dim))
    queries = np.random.default_rng(8).random((args.queries, args.dim), dtype=np.float32)
    print(f"base {args.rows} x {args.dim} float32 ({base_bytes / 2**30:.2f} GiB, "
          f"{base_bytes / limit:.1f}x one worker's {args.limit}), {args.workers} workers, "
          f"{args.queries} queries, k = {args.k}", flush=True)
    t = time.perf_counter()
    dist, ids = vd.knn(base, queries, args.k, device="cpu", client=client,
                       block_rows=args.chunk_rows)
    took = time.perf_counter() - t
    after = set(client.scheduler_info()["workers"])
    peaks = client.run(peak_mib)
    # A worker the nanny restarts comes back at a new address: how many of the first are gone
    # (the workers' log counts each restart).
    restarted = len(before - after)
    print(f"voisin.dask.knn: {took:.1f} s; of the first {len(before)} workers, {restarted} were "
          f"restarted")
    for w, p in sorted(peaks.items()):
        print(f"  {w}: peak resident {p:.0f} MiB of {limit / 2**20:.0f} MiB")
    client.close()
    cluster.close()
    spill.cleanup()

    # The same rows in this process, for the check (this process may hold the whole base).
    rows = np.random.default_rng(9).choice(args.queries, size=min(args.sample, args.queries),
                                           replace=False)
    whole = base.compute()
    t = time.perf_counter()
    want_d, want_i = voisin.knn(whole, queries[rows], args.k, device="cpu")
    single = time.perf_counter() - t
    same = np.array_equal(want_i, ids[rows]) and np.array_equal(want_d, dist[rows])
    print(f"voisin.knn of {len(rows)} sampled queries in one process: {single:.1f} s; "
          f"rows identical: {same}")
    print(json.dumps({
        "rows": args.rows, "dim": args.dim, "queries": args.queries, "k": args.k,
        "workers": args.workers, "limit_mib": round(limit / 2**20), "base_gib": base_bytes / 2**30,
        "seconds": round(took, 2), "restarted": restarted,
        "peak_mib": sorted(round(p) for p in peaks.values()), "identical": bool(same),
    }))


if __name__ == "__main__":
    main()
