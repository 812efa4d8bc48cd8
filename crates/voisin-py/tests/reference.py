"""Brute-force references: scikit-learn's pairwise distances in float64, sorted stably (ties
to the smaller index, voisin's rule), and a plain edit distance for strings."""

import numpy as np
from sklearn.metrics import pairwise_distances

# (voisin metric, scikit-learn pairwise_distances arguments)
METRICS = [
    ("euclidean", dict(metric="euclidean")),
    ("sqeuclidean", dict(metric="sqeuclidean")),
    ("cosine", dict(metric="cosine")),
    ("correlation", dict(metric="correlation")),
    ("cityblock", dict(metric="cityblock")),
    ("chebyshev", dict(metric="chebyshev")),
    ("minkowski:3", dict(metric="minkowski", p=3)),
    ("inner_product", None),
]


def distances(base, queries, metric):
    """Reported distances (float64) and ranking keys (smaller is nearer)."""
    args = dict(METRICS)[metric]
    b, q = np.asarray(base, np.float64), np.asarray(queries, np.float64)
    if args is None:  # inner_product: the dot product, largest first
        dots = q @ b.T
        return dots, -dots
    D = pairwise_distances(q, b, **args)
    if metric == "correlation":
        # scipy gives NaN for a constant vector; voisin puts it at distance 1 from every vector,
        # the rule scikit-learn's cosine distance has for a zero vector
        D = np.nan_to_num(D, nan=1.0)
    return D, D


def levenshtein(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def edit_matrix(base, queries):
    return np.array([[levenshtein(q, b) for b in base] for q in queries], dtype=np.float64)


def assert_knn(dist, ind, D, keys, k, exact_ties=False, skip_self=False, dtype=np.float32):
    """(dist, ind) are the k nearest by `keys` with ties to the smaller index.

    Ids must match the reference wherever the reference keys are separated by more than the
    float tolerance; inside a group of keys that equal within it, ids must come from that group
    (the float64 reference may order true ties by rounding noise). With `exact_ties` the
    reference keys are exact and ids must match everywhere.
    """
    n = keys.shape[0]
    assert dist.shape == ind.shape == (n, k)
    assert dist.dtype == dtype and ind.dtype == np.int64
    for q in range(n):
        row = keys[q].astype(np.float64).copy()
        if skip_self:
            row[q] = np.inf
        order = np.argsort(row, kind="stable")[:k]
        np.testing.assert_allclose(dist[q], D[q][order], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(D[q][ind[q]], dist[q], rtol=1e-5, atol=1e-5)
        assert len(set(ind[q].tolist())) == k
        if skip_self:
            assert q not in set(ind[q].tolist())
        if exact_ties:
            assert ind[q].tolist() == order.tolist(), (q, ind[q], order)
            continue
        tol = 1e-5 * max(1.0, float(np.abs(row[order]).max()))
        for j in range(k):
            near = np.abs(row - row[order[j]]) <= tol
            if near.sum() == 1:
                assert ind[q][j] == order[j], (q, j)
            else:
                assert near[ind[q][j]], (q, j)
