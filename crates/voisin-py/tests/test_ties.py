"""``ties="all"``: every item at the k-th distance, against an exact brute force on tie-heavy data
(small integers, duplicate rows; words), through the functions and NearestNeighbors; on the GPU
equal to the CPU (marked gpu)."""

import numpy as np
import pytest

import voisin
from reference import edit_matrix

# Metrics whose values NumPy computes exactly on small integers: (name, keys, distances).
EXACT = {
    "euclidean": (lambda b, q: ((q[:, None] - b[None]) ** 2).sum(-1), np.sqrt),
    "sqeuclidean": (lambda b, q: ((q[:, None] - b[None]) ** 2).sum(-1), lambda k: k),
    "cityblock": (lambda b, q: np.abs(q[:, None] - b[None]).sum(-1), lambda k: k),
    "chebyshev": (lambda b, q: np.abs(q[:, None] - b[None]).max(-1), lambda k: k),
    "inner_product": (lambda b, q: -(q @ b.T), lambda k: -k),
}


def tied(rng, n, d):
    X = rng.integers(0, 3, size=(n, d)).astype(np.float32)
    X[n // 2:] = X[: n - n // 2]
    return X


def expected(keys, k, to_distance, skip_self=False):
    """Each row's (indices, distances): every item whose key is at most the k-th, by key then
    index."""
    keys = keys.astype(np.float64).copy()
    if skip_self:
        np.fill_diagonal(keys, np.inf)
    rows = []
    for q, row in enumerate(keys):
        order = np.lexsort((np.arange(len(row)), row))
        if skip_self:
            order = order[order != q]
        kth = row[order[min(k, len(order)) - 1]]
        keep = order[row[order] <= kth]
        rows.append((keep, to_distance(row[keep])))
    return rows


def assert_rows(dist, ind, rows, metric, dtype=np.float32):
    """Masked (dist, ind) hold exactly `rows`, padded to the longest, padding masked."""
    assert isinstance(dist, np.ma.MaskedArray) and isinstance(ind, np.ma.MaskedArray)
    assert ind.dtype == np.int64 and dist.dtype == dtype
    width = max((len(i) for i, _ in rows), default=0)
    assert ind.shape == dist.shape == (len(rows), width)
    pad = -np.inf if metric == "inner_product" else np.inf
    for q, (want_i, want_d) in enumerate(rows):
        n = len(want_i)
        assert ind[q].compressed().tolist() == want_i.tolist(), q
        np.testing.assert_allclose(dist[q].compressed(), want_d, rtol=1e-6, atol=1e-6)
        assert ind.mask[q].tolist() == [False] * n + [True] * (width - n)
        assert (ind.data[q, n:] == -1).all() and (dist.data[q, n:] == pad).all()


def assert_csr(g, rows, n_cols):
    assert g.shape == (len(rows), n_cols)
    for q, (want_i, want_d) in enumerate(rows):
        row = slice(g.indptr[q], g.indptr[q + 1])
        assert g.indices[row].tolist() == want_i.tolist(), q
        np.testing.assert_allclose(g.data[row], want_d, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("metric", list(EXACT))
@pytest.mark.parametrize("k", [1, 6])
def test_knn_and_graph_return_every_tie(rng, metric, k):
    base, queries = tied(rng, 120, 4), tied(rng, 25, 4)
    keys, to_distance = EXACT[metric]
    want = expected(keys(base, queries), k, to_distance)
    assert sum(len(i) for i, _ in want) > 25 * k  # the data do tie
    dist, ind = voisin.knn(base, queries, k, metric=metric, ties="all", device="cpu")
    assert_rows(dist, ind, want, metric)
    dist, ind = voisin.knn(base, queries, k, metric=metric, ties="all", distances="f64",
                           device="cpu")
    assert_rows(dist, ind, want, metric, np.float64)
    np.testing.assert_array_equal(dist.compressed(), np.concatenate([d for _, d in want]))
    assert_csr(voisin.knn(base, queries, k, metric=metric, ties="all", output="csr",
                          device="cpu"), want, 120)
    want = expected(keys(base, base), k, to_distance, skip_self=True)
    dist, ind = voisin.knn_graph(base, k, metric=metric, ties="all", device="cpu")
    assert_rows(dist, ind, want, metric)
    assert_csr(voisin.knn_graph(base, k, metric=metric, ties="all", output="csr",
                                device="cpu"), want, 120)


def test_pairs_of_the_tied_graph(rng):
    X = tied(rng, 70, 3)
    keys, to_distance = EXACT["chebyshev"]
    edges = set()
    for q, (ids, ds) in enumerate(expected(keys(X, X), 2, to_distance, skip_self=True)):
        edges |= {(min(q, j), max(q, j), float(d)) for j, d in zip(ids, ds)}
    offsets, ind, dist = voisin.knn_graph(X, 2, metric="chebyshev", pairs=True, ties="all",
                                          device="cpu")
    rows = np.repeat(np.arange(70), np.diff(offsets))
    assert set(zip(rows.tolist(), ind.tolist(), dist.tolist())) == edges
    assert len(ind) == len(edges)


def test_include_self_puts_the_item_before_its_tied_others(rng):
    X = tied(rng, 80, 3)
    keys, to_distance = EXACT["cityblock"]
    others = expected(keys(X, X), 3, to_distance, skip_self=True)
    want = [(np.r_[q, i], np.r_[0.0, d]) for q, (i, d) in enumerate(others)]
    dist, ind = voisin.knn_graph(X, 4, metric="cityblock", include_self=True, ties="all",
                                 device="cpu")
    assert_rows(dist, ind, want, "cityblock")
    g = voisin.knn_graph(X, 4, metric="cityblock", include_self=True, ties="all",
                         output="csr", device="cpu")
    assert_csr(g, want, 80)
    # k = 1 with include_self: the item alone.
    d1, i1 = voisin.knn_graph(X, 1, include_self=True, ties="all", device="cpu")
    assert i1.tolist() == [[q] for q in range(80)] and (d1 == 0).all()
    d64, i64 = voisin.knn_graph(X, 4, metric="cityblock", include_self=True, ties="all",
                                distances="f64", device="cpu")
    assert_rows(d64, i64, want, "cityblock", np.float64)


def test_ties_first_is_the_default_and_bad_values_are_refused(rng):
    base, queries = tied(rng, 60, 3), tied(rng, 10, 3)
    d, i = voisin.knn(base, queries, 4, device="cpu")
    d2, i2 = voisin.knn(base, queries, 4, ties="first", device="cpu")
    np.testing.assert_array_equal(i, i2)
    np.testing.assert_array_equal(d, d2)
    g = voisin.knn(base, queries, 4, output="csr", device="cpu")
    assert g.shape == (10, 60) and g.indices.reshape(10, 4).tolist() == i.tolist()
    for bad in ("some", None, "ALL", 1):
        with pytest.raises(ValueError, match="ties must be 'first' or 'all'"):
            voisin.knn(base, queries, 4, ties=bad, device="cpu")
        with pytest.raises(ValueError, match="ties must be 'first' or 'all'"):
            voisin.knn_graph(base, 4, ties=bad, device="cpu")
    with pytest.raises(ValueError, match="output must be"):
        voisin.knn(base, queries, 4, output="dense", device="cpu")
    with pytest.raises(ValueError, match="ties='all' returns masked NumPy arrays"):
        voisin.knn(base, queries, 4, ties="all", output="torch", device="cpu")


def test_strings_tie_on_their_edit_distance():
    words = ["ab", "ba", "abc", "b", "a", "", "abc", "cab", "bb", "aa", "ca"]
    asked = ["a", "abd", ""]
    want = expected(edit_matrix(words, asked), 2, lambda k: k)
    dist, ind = voisin.knn(words, asked, 2, metric="levenshtein", ties="all", device="cpu")
    assert_rows(dist, ind, want, "levenshtein")


def test_nearest_neighbors_kneighbors_with_ties(rng):
    X, Q = tied(rng, 100, 4), tied(rng, 20, 4)
    keys, to_distance = EXACT["euclidean"]
    nn = voisin.NearestNeighbors(n_neighbors=5, device="cpu").fit(X)
    for q, skip in ((None, True), (Q, False)):
        want = expected(keys(X, X if q is None else Q), 5, to_distance, skip_self=skip)
        dist, ind = nn.kneighbors(q, ties="all")  # exact float64 distances, as scikit-learn's
        assert_rows(dist, ind, want, "euclidean", np.float64)
        only = nn.kneighbors(q, ties="all", return_distance=False)
        assert only.tolist() == ind.tolist()
        assert_csr(nn.kneighbors_graph(q, mode="distance", ties="all"), want, 100)
        c = nn.kneighbors_graph(q, ties="all")
        assert_csr(c, [(i, np.ones(len(i))) for i, _ in want], 100)
        # The default stays exactly k.
        d, i = nn.kneighbors(q)
        assert i.shape == (len(want), 5) and not isinstance(i, np.ma.MaskedArray)
    with pytest.raises(ValueError, match="ties must be"):
        nn.kneighbors(Q, ties="every")


GPU_METRICS = ["euclidean", "sqeuclidean", "cosine", "correlation", "inner_product", "cityblock",
               "chebyshev", "minkowski:3"]


@pytest.mark.gpu
@pytest.mark.parametrize("metric", GPU_METRICS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8])
def test_ties_on_the_gpu_equal_the_cpu(rng, metric, dtype):
    base = tied(rng, 3000, 16).astype(dtype)
    queries = tied(rng, 200, 16).astype(dtype)
    X = tied(rng, 1500, 16).astype(dtype)
    calls = [
        lambda dev: voisin.knn(base, queries, 10, metric=metric, ties="all", device=dev),
        lambda dev: voisin.knn_graph(X, 10, metric=metric, ties="all", device=dev),
        lambda dev: voisin.knn_graph(X, 10, metric=metric, ties="all", include_self=True,
                                     device=dev),
        lambda dev: voisin.NearestNeighbors(n_neighbors=10, metric=metric, device=dev)
        .fit(base).kneighbors(queries, ties="all"),
    ]
    for call in calls:
        gd, gi = call("cuda")
        cd, ci = call("cpu")
        assert gi.shape == ci.shape and gi.shape[1] > 10
        np.testing.assert_array_equal(gi.mask, ci.mask)
        np.testing.assert_array_equal(gi.filled(), ci.filled())
        np.testing.assert_allclose(gd.compressed(), cd.compressed(), rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_ties_on_the_gpu_match_brute_force(rng):
    base, queries = tied(rng, 2000, 8), tied(rng, 100, 8)
    for metric in EXACT:
        keys, to_distance = EXACT[metric]
        want = expected(keys(base, queries), 7, to_distance)
        for device in ("cuda", "auto"):
            dist, ind = voisin.knn(base, queries, 7, metric=metric, ties="all", device=device)
            assert_rows(dist, ind, want, metric)
