"""The estimators against scikit-learn's own, and scikit-learn's estimator checks."""

import pickle

import numpy as np
import pytest
import sklearn.neighbors as skn
from sklearn.utils.estimator_checks import parametrize_with_checks

import voisin
from voisin import _inputs, _voisin


def data(rng, n=120, d=5):
    return rng.normal(size=(n, d)).astype(np.float32)


@pytest.mark.parametrize("metric, p", [("minkowski", 2), ("minkowski", 1), ("minkowski", 3),
                                       ("cosine", 2), ("chebyshev", 2), ("sqeuclidean", 2)])
def test_nearest_neighbors_equals_scikit_learn(rng, metric, p):
    X, Q = data(rng), data(rng, 30)
    ours = voisin.NearestNeighbors(n_neighbors=6, radius=1.5, metric=metric, p=p, device="cpu")
    theirs = skn.NearestNeighbors(n_neighbors=6, radius=1.5, metric=metric, p=p,
                                  algorithm="brute")
    ours.fit(X)
    theirs.fit(X.astype(np.float64))
    for q in (None, Q):
        qq = None if q is None else q.astype(np.float64)
        d1, i1 = ours.kneighbors(q)
        d2, i2 = theirs.kneighbors(qq)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_allclose(d1, d2, rtol=1e-5, atol=1e-6)
        r1 = ours.radius_neighbors(q, radius=1.5 if metric != "sqeuclidean" else 2.0)
        r2 = theirs.radius_neighbors(qq, radius=1.5 if metric != "sqeuclidean" else 2.0,
                                     sort_results=True)
        for a, b, c, e in zip(*r1, *r2):
            np.testing.assert_array_equal(b, e)
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
        for mode in ("connectivity", "distance"):
            g1 = ours.kneighbors_graph(q, mode=mode)
            g2 = theirs.kneighbors_graph(qq, mode=mode)
            np.testing.assert_allclose(g1.toarray(), g2.toarray(), rtol=1e-5, atol=1e-6)
            g1 = ours.radius_neighbors_graph(q, mode=mode)
            g2 = theirs.radius_neighbors_graph(qq, mode=mode)
            np.testing.assert_allclose(g1.toarray(), g2.toarray(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["distance", "connectivity"])
def test_transformers_equal_scikit_learn(rng, mode):
    X, Q = data(rng), data(rng, 20)
    for ours, theirs in [
        (voisin.KNeighborsTransformer(mode=mode, n_neighbors=4, device="cpu"),
         skn.KNeighborsTransformer(mode=mode, n_neighbors=4, algorithm="brute")),
        (voisin.RadiusNeighborsTransformer(mode=mode, radius=2.0, device="cpu"),
         skn.RadiusNeighborsTransformer(mode=mode, radius=2.0, algorithm="brute")),
    ]:
        a = ours.fit_transform(X)
        b = theirs.fit_transform(X.astype(np.float64))
        assert a.format == "csr" and a.shape == b.shape and a.nnz == b.nnz
        np.testing.assert_allclose(a.toarray(), b.toarray(), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(a.indptr, b.indptr)
        # rows sorted by distance, the diagonal explicit
        for r in range(a.shape[0]):
            row = a.data[a.indptr[r]:a.indptr[r + 1]]
            assert np.all(np.diff(row) >= 0) or mode == "connectivity"
            assert r in a.indices[a.indptr[r]:a.indptr[r + 1]]
        np.testing.assert_allclose(ours.transform(Q).toarray(),
                                   theirs.transform(Q.astype(np.float64)).toarray(),
                                   rtol=1e-5, atol=1e-6)
        assert list(ours.get_feature_names_out()) == [
            f"{type(ours).__name__.lower()}{i}" for i in range(len(X))]


def test_k_transformer_distance_mode_has_one_extra_neighbour(rng):
    X = data(rng, 50)
    g = voisin.KNeighborsTransformer(n_neighbors=5, device="cpu").fit_transform(X)
    assert (np.diff(g.indptr) == 6).all()
    assert (g.diagonal() == 0).all() and g.indices[::6].tolist() == list(range(50))


def test_get_set_params_and_pickle(rng):
    X = data(rng)
    est = voisin.NearestNeighbors(n_neighbors=3, device="cpu")
    assert est.get_params()["n_neighbors"] == 3
    est.set_params(n_neighbors=4, metric="cosine")
    assert est.n_neighbors == 4 and est.metric == "cosine"
    est.fit(X)
    before = est.kneighbors(X[:10])
    again = pickle.loads(pickle.dumps(est))
    after = again.kneighbors(X[:10])
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_array_equal(before[0], after[0])
    assert again.n_samples_fit_ == len(X) and again.n_features_in_ == 5


def test_x_none_with_duplicates_excludes_only_itself():
    X = np.array([[0.0], [0.0], [0.0], [5.0]], dtype=np.float32)
    d, i = voisin.NearestNeighbors(n_neighbors=2, device="cpu").fit(X).kneighbors()
    assert i.tolist() == [[1, 2], [0, 2], [0, 1], [0, 1]]
    assert d[:3].tolist() == [[0, 0]] * 3
    nd, ni = voisin.NearestNeighbors(radius=0.5, device="cpu").fit(X).radius_neighbors()
    assert [r.tolist() for r in ni] == [[1, 2], [0, 2], [0, 1], []]


def test_strings_estimator():
    words = ["cat", "cart", "card", "dog", "dot"]
    nn = voisin.NearestNeighbors(n_neighbors=1, metric="levenshtein", device="cpu").fit(words)
    assert nn.kneighbors(return_distance=False).ravel().tolist() == [1, 0, 1, 4, 3]
    g = voisin.RadiusNeighborsTransformer(radius=1, metric="levenshtein",
                                          device="cpu").fit_transform(words)
    assert g.shape == (5, 5) and g[0, 1] == 1 and g[0, 0] == 0


def test_estimator_errors(rng):
    X = data(rng, 10)
    nn = voisin.NearestNeighbors(n_neighbors=10, device="cpu").fit(X)
    with pytest.raises(ValueError, match="Expected n_neighbors <= n_samples_fit"):
        nn.kneighbors()
    with pytest.raises(ValueError, match="X has 4 features, but NearestNeighbors is expecting 5"):
        nn.kneighbors(X[:, :4])
    with pytest.raises(ValueError, match="return_distance must be True"):
        nn.radius_neighbors(X, sort_results=True, return_distance=False)
    # scikit-learn's own check and message
    with pytest.raises(ValueError, match="The 'mode' parameter of KNeighborsTransformer must be "
                                         "a str among"):
        voisin.KNeighborsTransformer(mode="weights").fit(X)


@pytest.fixture
def float64_as_float32(monkeypatch):
    """scikit-learn's checks feed float64 data drawn at random, which voisin answers exactly
    only once it stores float64 (EXACT_FLOAT64). Until then these checks exercise the
    estimators' contracts on the float32 rounding of that data."""
    if _voisin.EXACT_FLOAT64:
        yield
        return
    original = _inputs.vectors

    def rounded(X, what):
        X = np.asarray(X) if not hasattr(X, "dtype") else X
        if getattr(X, "dtype", None) is not None and X.dtype.kind == "f" and X.dtype.itemsize > 4:
            X = X.astype(np.float32)
        return original(X, what)

    import voisin._estimators as est

    monkeypatch.setattr(est, "vectors", rounded)
    yield


# No expected failures. scikit-learn marks check_methods_sample_order_invariance as "not
# applicable" for its two transformers (instance_generator.py); voisin's pass it, since their
# rows are sorted by distance and then index, so it runs here as a normal check. The three
# array-API checks skip themselves unless SCIPY_ARRAY_API is set, as for scikit-learn's own.
@parametrize_with_checks(
    [voisin.NearestNeighbors(device="cpu"), voisin.KNeighborsTransformer(device="cpu"),
     voisin.RadiusNeighborsTransformer(device="cpu")],
)
def test_sklearn_estimator_checks(estimator, check, float64_as_float32):
    check(estimator)


@pytest.mark.parametrize("cls, sk", [(voisin.NearestNeighbors, skn.NearestNeighbors),
                                     (voisin.KNeighborsTransformer, skn.KNeighborsTransformer),
                                     (voisin.RadiusNeighborsTransformer,
                                      skn.RadiusNeighborsTransformer)])
def test_scikit_learn_arguments_accepted_or_refused_as_scikit_learn_does(rng, cls, sk):
    X = data(rng, 40)
    ours = set(cls().get_params()) - {"device", "precision", "distances", "progress"}
    theirs = set(sk().get_params()) - {"algorithm"}  # wired to voisin's indexes elsewhere
    assert theirs <= ours, theirs - ours
    # refused with scikit-learn's own error and message
    for bad in [dict(leaf_size=0), dict(p=-1), dict(metric_params=3), dict(n_jobs=1.5)] + (
            [dict(n_neighbors=5.0), dict(n_neighbors=0)] if "n_neighbors" in theirs else []) + (
            [dict(radius=-1.0)] if "radius" in theirs else []):
        with pytest.raises(ValueError) as ours_err:
            cls(device="cpu", **bad).fit(X)
        with pytest.raises(ValueError) as theirs_err:
            sk(**bad).fit(X)
        assert str(ours_err.value) == str(theirs_err.value).replace(sk.__name__, cls.__name__)
    # accepted: leaf_size has no effect, metric_params' p wins over p (with the warning)
    base = cls(device="cpu", metric="minkowski", p=3).fit(X)
    same = cls(device="cpu", leaf_size=1, metric="minkowski", p=1, metric_params={"p": 3})
    with pytest.warns(SyntaxWarning, match="Parameter p is found in metric_params"):
        same.fit(X)
    assert same.effective_metric_ == base.effective_metric_ == "minkowski:3"
    assert same.effective_metric_params_ == {"p": 3, "w": None}
    if hasattr(base, "n_neighbors"):
        np.testing.assert_array_equal(base.kneighbors()[1], same.kneighbors()[1])
    # other metric parameters: a line saying what voisin does instead
    with pytest.raises(ValueError, match=r"metric_params \['w'\] are not supported: voisin's "
                                         r"metrics take no parameters but minkowski's p .*"
                                         r"X \* w \*\* \(1 / p\)"):
        cls(device="cpu", metric_params={"w": np.ones(5)}).fit(X)


def test_weighted_minkowski_is_minkowski_on_scaled_data(rng):
    # the refusal's advice, checked against scikit-learn's weighted minkowski
    X, w = data(rng, 60), rng.uniform(0.5, 2.0, size=5)
    ours = voisin.NearestNeighbors(n_neighbors=4, p=3, device="cpu").fit(
        (X * w ** (1 / 3)).astype(np.float32))
    theirs = skn.NearestNeighbors(n_neighbors=4, p=3, metric_params={"w": w},
                                  algorithm="brute").fit(X.astype(np.float64))
    np.testing.assert_array_equal(ours.kneighbors()[1], theirs.kneighbors()[1])


def test_effective_metric_params_follow_scikit_learn(rng):
    X = data(rng, 30)
    for p in (1, 2, 3, 1.5, np.inf):
        ours = voisin.NearestNeighbors(p=p, device="cpu").fit(X)
        theirs = skn.NearestNeighbors(p=p).fit(X)
        assert ours.effective_metric_params_ == theirs.effective_metric_params_, p


def test_n_jobs_as_joblib_reads_it(rng):
    X = data(rng, 30)
    for n_jobs in (None, 1, 2, -1, -2, -100):
        d, i = voisin.NearestNeighbors(n_neighbors=3, n_jobs=n_jobs, device="cpu").fit(
            X).kneighbors()
        assert i.shape == (30, 3)
    with pytest.raises(ValueError, match="n_jobs == 0 has no meaning"):
        voisin.NearestNeighbors(n_jobs=0, device="cpu").fit(X)


def test_fit_transform_is_one_graph_equal_to_transform(rng):
    X = data(rng, 200)
    for mode in ("distance", "connectivity"):
        for k in (1, 5):
            est = voisin.KNeighborsTransformer(mode=mode, n_neighbors=k, device="cpu")
            a = est.fit_transform(X)
            b = est.transform(X)
            assert a.dtype == b.dtype == np.float64
            assert (a.indptr == b.indptr).all() and (a.indices == b.indices).all()
            np.testing.assert_array_equal(a.data, b.data)
    # with duplicates, each row still holds the point itself, first
    X[100:] = X[:100]
    g = voisin.KNeighborsTransformer(n_neighbors=3, device="cpu").fit_transform(X)
    assert (g.indices.reshape(200, 4)[:, 0] == np.arange(200)).all()
    assert (g.indices.reshape(200, 4)[:, 1] == (np.arange(200) + 100) % 200).all()
    with pytest.raises(ValueError, match="Expected n_neighbors <= n_samples_fit, but "
                                         "n_neighbors = 6, n_samples_fit = 5, n_samples = 5"):
        voisin.KNeighborsTransformer(n_neighbors=5, device="cpu").fit_transform(X[:5])
