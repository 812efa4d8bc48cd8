"""The metric indexes from Python (``voisin.Index``, the estimators' ``algorithm``): answers
byte for byte as brute force (the reference for ties), index files written and read, bad
input refused with one clear error."""

import pickle

import numpy as np
import pytest

import voisin
from reference import assert_knn, distances, edit_matrix

VECTOR_METRICS = ["euclidean", "cityblock", "chebyshev", "minkowski:3"]
WORDS = ["kitten", "sitting", "kitten", "mitten", "", "sit", "bitten", "kit", "a", "mitt"]


def tied(rng, n, d):
    """Small integer coordinates: many ties, and a duplicated row."""
    X = rng.integers(-2, 3, size=(n, d)).astype(np.float32)
    X[1] = X[0]
    return X


@pytest.mark.parametrize("kind", ["lc", "sss", "cover", "kd"])
@pytest.mark.parametrize("metric", VECTOR_METRICS)
def test_index_answers_as_brute_force(rng, kind, metric):
    X, Q = tied(rng, 300, 3), tied(rng, 40, 3)
    idx = voisin.Index(kind, metric=metric, device="cpu", n_jobs=1).fit(X)
    assert len(idx) == idx.n_items == 300 and idx.build_evals >= 0
    assert idx.describe().startswith(f"{kind} index over 300 x 3 vectors")
    for k in (1, 7, 299, 400):
        d, i = idx.knn(Q, k)
        bd, bi = voisin.knn(X, Q, k, metric=metric, device="cpu")
        np.testing.assert_array_equal(i, bi)
        np.testing.assert_array_equal(d, bd)
    D, keys = distances(X, Q, metric)
    d, i = idx.knn(Q, 5)
    assert_knn(d, i, D, keys, 5)
    g = idx.knn_graph(4)
    bg = voisin.knn_graph(X, 4, metric=metric, device="cpu")
    np.testing.assert_array_equal(g[1], bg[1])
    np.testing.assert_array_equal(g[0], bg[0])
    r = float(np.quantile(D, 0.05))
    got = idx.range_search(Q, r)
    want = voisin.range_search(X, Q, r, metric=metric, device="cpu")
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)


@pytest.mark.parametrize("kind", ["lc", "sss", "cover"])
def test_index_over_words(kind):
    idx = voisin.Index(kind, metric="levenshtein", device="cpu").fit(WORDS)
    queries = ["kitten", "sat", ""]
    D = edit_matrix(WORDS, queries)
    d, i = idx.knn(queries, 4)
    assert_knn(d, i, D, D, 4, exact_ties=True)
    offsets, ind, dist = idx.range_search(queries, 2, output="arrays")
    for q in range(len(queries)):
        want = [j for j in np.argsort(D[q], kind="stable") if D[q][j] <= 2]
        assert ind[offsets[q]:offsets[q + 1]].tolist() == want
        np.testing.assert_array_equal(dist[offsets[q]:offsets[q + 1]], D[q][want])


def test_index_files_round_trip_and_are_checked(rng, tmp_path):
    X, Q = tied(rng, 200, 2), tied(rng, 20, 2)
    for kind, metric, data, queries in [("lc", "euclidean", X, Q), ("cover", "cityblock", X, Q),
                                        ("sss", "levenshtein", WORDS, ["kit", "mat"])]:
        idx = voisin.Index(kind, metric=metric, device="cpu").fit(data)
        path = tmp_path / f"{kind}.vidx"
        idx.save(path)
        back = voisin.Index.load(path, device="cpu")
        assert back.kind == kind and len(back) == len(idx) and back.build_evals == 0
        for a, b in zip(idx.knn(queries, 3), back.knn(queries, 3)):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(idx.knn_graph(2), back.knn_graph(2)):
            np.testing.assert_array_equal(a, b)
        # What is saved once is saved the same again.
        again = tmp_path / f"{kind}-again.vidx"
        back.save(again)
        assert again.read_bytes() == path.read_bytes()
    damaged = bytearray((tmp_path / "lc.vidx").read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    bad = tmp_path / "bad.vidx"
    bad.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="bad.vidx"):
        voisin.Index.load(bad, device="cpu")
    with pytest.raises(OSError, match="missing.vidx"):
        voisin.Index.load(tmp_path / "missing.vidx", device="cpu")


def test_index_refuses_bad_input(rng):
    X = rng.normal(size=(30, 2)).astype(np.float32)
    with pytest.raises(ValueError, match="unknown index kind 'ball'"):
        voisin.Index("ball", device="cpu").fit(X)
    with pytest.raises(ValueError, match="triangle inequality"):
        voisin.Index("lc", metric="cosine", device="cpu").fit(X)
    with pytest.raises(ValueError, match="the kd index takes vectors"):
        voisin.Index("kd", metric="levenshtein", device="cpu").fit(WORDS)
    with pytest.raises(ValueError, match="cluster size must be at least 1"):
        voisin.Index("lc", cluster_size=0, device="cpu").fit(X)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        voisin.Index("lc", device="tpu").fit(X)
    with pytest.raises(ValueError, match="not fitted"):
        voisin.Index("lc").knn(X, 1)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="row 3"):
        voisin.Index("lc", device="cpu").fit(bad)
    idx = voisin.Index("lc", device="cpu").fit(X)
    with pytest.raises(ValueError, match="dimension"):
        idx.knn(X[:, :1], 1)
    with pytest.raises(ValueError, match="k must be at least 1"):
        idx.knn(X, 0)


def test_a_user_metric_index_answers_and_cannot_be_saved(rng, tmp_path):
    X = tied(rng, 60, 2)

    def l1(a, b):
        return float(np.abs(a - b).sum())

    idx = voisin.Index("lc", metric=l1, device="cpu").fit(X)
    d, i = idx.knn(X[:5], 3)
    bd, bi = voisin.knn(X, X[:5], 3, metric="cityblock", device="cpu")
    np.testing.assert_array_equal(i, bi)
    np.testing.assert_array_equal(d, bd)
    with pytest.raises(ValueError):
        idx.save(tmp_path / "user.vidx")


@pytest.mark.parametrize("algorithm", ["lc", "sss", "cover", "kd", "kd_tree", "ball_tree",
                                       "brute", "auto"])
def test_estimator_algorithms_answer_as_brute_force(rng, algorithm):
    X, Q = tied(rng, 150, 3), tied(rng, 25, 3)
    ours = voisin.NearestNeighbors(n_neighbors=5, radius=1.0, algorithm=algorithm,
                                   device="cpu").fit(X)
    brute = voisin.NearestNeighbors(n_neighbors=5, radius=1.0, device="cpu").fit(X)
    assert ours.get_params()["algorithm"] == algorithm
    for q in (None, Q):
        for a, b in zip(ours.kneighbors(q), brute.kneighbors(q)):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(ours.radius_neighbors(q), brute.radius_neighbors(q)):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)
    g = voisin.KNeighborsTransformer(n_neighbors=4, algorithm=algorithm,
                                     device="cpu").fit_transform(X)
    h = voisin.KNeighborsTransformer(n_neighbors=4, device="cpu").fit_transform(X)
    assert (g != h).nnz == 0
    again = pickle.loads(pickle.dumps(ours))
    np.testing.assert_array_equal(again.kneighbors(Q)[1], ours.kneighbors(Q)[1])


def test_estimator_refuses_an_unknown_algorithm(rng):
    X = tied(rng, 20, 2)
    with pytest.raises(ValueError, match="kd_tree' is voisin's 'kd'"):
        voisin.NearestNeighbors(algorithm="octree", device="cpu").fit(X)
    with pytest.raises(ValueError, match="triangle inequality"):
        voisin.NearestNeighbors(algorithm="lc", metric="cosine", device="cpu").fit(X)
