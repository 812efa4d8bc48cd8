"""The command line's result shapes from Python: distances="f64" (exact float64 values),
pairs=True (each unordered pair of a self-join once) and include_self, against float64
references and against the `voisin` binary itself."""

import os
import subprocess

import numpy as np
import pytest

import voisin
from reference import METRICS, distances

NAMES = [m for m, _ in METRICS]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))


def direct(base, queries, metric):
    """float64 distances from the differences themselves, summed in index order."""
    b, q = np.asarray(base, np.float64), np.asarray(queries, np.float64)
    if metric in ("euclidean", "cityblock", "chebyshev", "sqeuclidean", "minkowski:3"):
        diff = np.abs(q[:, None, :] - b[None])
        return {"euclidean": lambda: np.sqrt((diff**2).sum(-1)),
                "sqeuclidean": lambda: (diff**2).sum(-1),
                "cityblock": lambda: diff.sum(-1), "chebyshev": lambda: diff.max(-1),
                "minkowski:3": lambda: ((diff**3).sum(-1)) ** (1 / 3)}[metric]()
    return distances(base, queries, metric)[0]


@pytest.mark.parametrize("metric", NAMES)
def test_f64_distances_are_the_exact_values(rng, metric):
    base = rng.normal(size=(300, 9)).astype(np.float32)
    queries = rng.normal(size=(25, 9)).astype(np.float32)
    d32, i32 = voisin.knn(base, queries, 7, metric=metric, device="cpu")
    d64, i64 = voisin.knn(base, queries, 7, metric=metric, device="cpu", distances="f64")
    assert d32.dtype == np.float32 and d64.dtype == np.float64
    np.testing.assert_array_equal(i32, i64)
    D = direct(base, queries, metric)
    ref = np.take_along_axis(D, i64, axis=1)
    # float64 values to float64 accuracy: 1e-12, where float32 roundings are 6e-8 apart
    np.testing.assert_allclose(d64, ref, rtol=1e-12, atol=1e-12)
    assert (d64 != d64.astype(np.float32)).any()
    # the float32 distances are those values rounded
    np.testing.assert_array_equal(d32, d64.astype(np.float32))
    for f in (lambda **kw: voisin.knn_graph(base, 6, metric=metric, device="cpu", **kw),
              lambda **kw: voisin.knn_graph(base, 6, metric=metric, device="cpu",
                                            include_self=True, output="csr", **kw)):
        a, b = f(), f(distances="f64")
        if isinstance(a, tuple):
            np.testing.assert_array_equal(a[1], b[1])
            ref = np.take_along_axis(direct(base, base, metric), b[1], axis=1)
            np.testing.assert_allclose(b[0], ref, rtol=1e-12, atol=1e-12)
        else:
            assert a.dtype == np.float32 and b.dtype == np.float64
            np.testing.assert_array_equal(a.indices, b.indices)
            rows = np.repeat(np.arange(300), 6)
            ref = direct(base, base, metric)[rows, b.indices]
            # the item itself at its own distance: 0 by definition, but under inner_product
            # its dot product with itself (docs/design/exact-scaling.md, "The item itself")
            if metric != "inner_product":
                ref[b.indices == rows] = 0.0
            np.testing.assert_allclose(b.data, ref, rtol=1e-12, atol=1e-12)


def test_f64_distances_of_f64_data_and_range(rng):
    # values f32 cannot hold, far from the origin: the f32 roundings lose the distances
    base = 1e4 + rng.normal(size=(200, 4))
    g64 = voisin.range_search(base, base[:20], 1.5, device="cpu", distances="f64")
    g32 = voisin.range_search(base, base[:20], 1.5, device="cpu")
    assert g64.dtype == np.float64 and g32.dtype == np.float32
    np.testing.assert_array_equal(g64.indices, g32.indices)
    rows = np.repeat(np.arange(20), np.diff(g64.indptr))
    ref = direct(base, base[:20], "euclidean")[rows, g64.indices]
    np.testing.assert_allclose(g64.data, ref, rtol=1e-12, atol=1e-12)
    nn = voisin.NearestNeighbors(n_neighbors=3, device="cpu").fit(base)
    d, i = nn.kneighbors(base[:20])
    assert d.dtype == np.float64
    np.testing.assert_allclose(d, np.take_along_axis(direct(base, base[:20], "euclidean"), i,
                                                     axis=1), rtol=1e-12, atol=1e-12)
    d, _ = voisin.NearestNeighbors(n_neighbors=3, device="cpu", distances="f32").fit(
        base).kneighbors(base[:20])
    assert d.dtype == np.float32


def reference_pairs(D, radius=None, graph_k=None):
    """{(i, j): distance} for i < j: within the radius, or an edge of the k-NN graph."""
    n = len(D)
    out = {}
    for i in range(n):
        if graph_k is None:
            js = [j for j in range(n) if j != i and D[i, j] <= radius]
        else:
            row = D[i].copy()
            row[i] = np.inf
            js = np.argsort(row, kind="stable")[:graph_k]
        for j in js:
            out[(min(i, j), max(i, j))] = D[i, j]
    return out


def as_pairs(offsets, ind, dist):
    got = {}
    for i in range(len(offsets) - 1):
        row = slice(offsets[i], offsets[i + 1])
        # sorted by distance, then index; each partner after the row
        keys = list(zip(dist[row].tolist(), ind[row].tolist()))
        assert keys == sorted(keys)
        for j, d in zip(ind[row].tolist(), dist[row].tolist()):
            assert j > i and (i, j) not in got
            got[(i, j)] = d
    return got


@pytest.mark.parametrize("metric", ["euclidean", "cityblock", "cosine"])
def test_pairs_hold_each_unordered_pair_once(rng, metric):
    X = rng.normal(size=(120, 3)).astype(np.float32)
    X[60:70] = X[:10]  # exact duplicates: pairs at distance 0
    D = direct(X, X, metric)
    radius = float(np.quantile(D, 0.03))
    got = as_pairs(*voisin.range_search(X, X, radius, metric=metric, pairs=True,
                                        output="arrays", device="cpu"))
    want = reference_pairs(D, radius=radius)
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[p] for p in want], list(want.values()), rtol=1e-5,
                               atol=1e-6)
    g = voisin.range_search(X, X, radius, metric=metric, pairs=True, device="cpu")
    assert g.shape == (120, 120) and g.nnz == len(want) and (g.tocoo().row < g.tocoo().col).all()
    got = as_pairs(*voisin.knn_graph(X, 4, metric=metric, pairs=True, device="cpu"))
    want = reference_pairs(D, graph_k=4)
    assert got.keys() == want.keys()


def test_near_duplicate_strings_are_pairs():
    words = ["colour", "color", "flavour", "flavor", "neighbour"]
    pairs = voisin.range_search(words, words, 1, metric="levenshtein", pairs=True)
    assert sorted(zip(*pairs.nonzero())) == [(0, 1), (2, 3)] and pairs.nnz == 2


def cli():
    path = os.environ.get("VOISIN_CLI") or os.path.join(ROOT, "target", "debug", "voisin")
    if not os.path.exists(path):
        if os.environ.get("VOISIN_CLI"):
            pytest.fail(f"VOISIN_CLI={path} does not exist")
        pytest.skip("no voisin binary (cargo build -p voisin-cli, or set VOISIN_CLI)")
    return path


@pytest.mark.parametrize("distances", ["f32", "f64"])
def test_pairs_and_f64_equal_the_command_line(rng, tmp_path, distances):
    binary = cli()
    X = rng.normal(size=(150, 5)).astype(np.float32)
    X[100:110] = X[:10]
    np.save(tmp_path / "x.npy", X)
    runs = [
        (["range", "--base", "x.npy", "--query", "x.npy", "--radius", "1.2", "--pairs"],
         lambda: voisin.range_search(X, X, 1.2, pairs=True, output="arrays", device="cpu",
                                     distances=distances)),
        (["graph", "--input", "x.npy", "-k", "5", "--pairs"],
         lambda: voisin.knn_graph(X, 5, pairs=True, device="cpu", distances=distances)),
        (["graph", "--input", "x.npy", "-k", "5", "--include-self"],
         lambda: voisin.knn_graph(X, 5, include_self=True, device="cpu", distances=distances)),
        (["knn", "--base", "x.npy", "--query", "x.npy", "-k", "4", "--metric", "cosine"],
         lambda: voisin.knn(X, X, 4, metric="cosine", device="cpu", distances=distances)),
    ]
    for args, ours in runs:
        out = tmp_path / "r.npz"
        subprocess.run([binary, *args, "--distances", distances, "--device", "cpu", "--out",
                        str(out)], cwd=tmp_path, check=True, capture_output=True)
        theirs = np.load(out)
        got = ours()
        if "offsets" in theirs:
            offsets, ind, dist = got
            np.testing.assert_array_equal(offsets, theirs["offsets"])
        else:
            dist, ind = got
        np.testing.assert_array_equal(ind, theirs["indices"])
        assert dist.dtype == theirs["distances"].dtype
        if "--include-self" in args and distances == "f64":
            # the item itself is at distance 0 in Python; the command line writes its
            # recomputed self-distance, 0 as well for euclidean
            assert (theirs["distances"][:, 0] == 0).all()
        np.testing.assert_array_equal(dist, theirs["distances"])
