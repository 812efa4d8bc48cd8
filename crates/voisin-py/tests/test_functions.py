"""voisin.knn / knn_graph / range_search against scikit-learn's brute force, every metric, on
random and tie-heavy data."""

import numpy as np
import pytest

import voisin
from reference import METRICS, assert_knn, distances, edit_matrix

NAMES = [m for m, _ in METRICS]


def data(rng, kind, n, d):
    if kind == "random":
        return rng.normal(size=(n, d)).astype(np.float32)
    # tie-heavy: few distinct small integers, many exact duplicates
    X = rng.integers(0, 3, size=(n, d)).astype(np.float32)
    X[n // 2:] = X[: n - n // 2]
    return X


@pytest.mark.parametrize("kind", ["random", "ties"])
@pytest.mark.parametrize("metric", NAMES)
def test_knn_matches_brute_force(rng, metric, kind):
    base, queries = data(rng, kind, 300, 7), data(rng, kind, 40, 7)
    D, keys = distances(base, queries, metric)
    dist, ind = voisin.knn(base, queries, 10, metric=metric, device="cpu")
    exact = kind == "ties" and metric in ("euclidean", "sqeuclidean", "cityblock", "chebyshev")
    assert_knn(dist, ind, D, keys, 10, exact_ties=exact)


@pytest.mark.parametrize("kind", ["random", "ties"])
@pytest.mark.parametrize("metric", NAMES)
def test_knn_graph_matches_brute_force(rng, metric, kind):
    X = data(rng, kind, 200, 5)
    D, keys = distances(X, X, metric)
    dist, ind = voisin.knn_graph(X, 8, metric=metric, device="cpu")
    exact = kind == "ties" and metric in ("euclidean", "sqeuclidean", "cityblock", "chebyshev")
    assert_knn(dist, ind, D, keys, 8, exact_ties=exact, skip_self=True)


@pytest.mark.parametrize("kind", ["random", "ties"])
@pytest.mark.parametrize("metric", NAMES)
def test_range_matches_brute_force(rng, metric, kind):
    base, queries = data(rng, kind, 300, 6), data(rng, kind, 30, 6)
    D, keys = distances(base, queries, metric)
    # a radius that keeps about 5% of the pairs, moved off any reference value
    radius = radius_between(D, 0.95 if metric == "inner_product" else 0.05)
    g = voisin.range_search(base, queries, radius, metric=metric, device="cpu")
    assert g.shape == (30, 300)
    for q in range(30):
        want = np.flatnonzero(D[q] >= radius if metric == "inner_product" else D[q] <= radius)
        row = slice(g.indptr[q], g.indptr[q + 1])
        got = g.indices[row]
        assert sorted(got.tolist()) == want.tolist()
        np.testing.assert_allclose(g.data[row], D[q][got], rtol=1e-5, atol=1e-5)
        # sorted by key, then index
        k = keys[q][got]
        if len(k):
            assert np.all(np.diff(k) >= -1e-6 * max(1.0, np.abs(k).max()))


def radius_between(D, quantile):
    """A radius near the quantile, halfway between two distinct distances (far from any
    reference value, so float rounding cannot decide membership)."""
    vals = np.unique(D.round(6))
    i = min(int(quantile * len(vals)), len(vals) - 2)
    return float(vals[i] + vals[i + 1]) / 2


WORDS = ["kitten", "sitting", "mitten", "fitting", "kitchen", "bitten", "sitter", "knitting",
         "written", "kitten", "smitten", "mittens", "", "a", "ab", "été", "étés"]


def test_levenshtein_knn_graph_and_range():
    D = edit_matrix(WORDS, WORDS)
    dist, ind = voisin.knn(WORDS, WORDS, 4, metric="levenshtein", device="cpu")
    assert_knn(dist, ind, D, D, 4, exact_ties=True)
    dist, ind = voisin.knn_graph(WORDS, 3, metric="levenshtein", device="cpu")
    assert_knn(dist, ind, D, D, 3, exact_ties=True, skip_self=True)
    off, got, d = voisin.range_search(np.array(WORDS), ["kitten", "été"], 2,
                                      metric="levenshtein", output="arrays", device="cpu")
    for q, word in enumerate(["kitten", "été"]):
        row = got[off[q]:off[q + 1]]
        want = [i for i, w in enumerate(WORDS) if edit_matrix([w], [word])[0, 0] <= 2]
        assert sorted(row.tolist()) == want
        assert d[off[q]:off[q + 1]].tolist() == sorted(d[off[q]:off[q + 1]].tolist())


def test_python_callable_metric(rng):
    base = rng.normal(size=(60, 3)).astype(np.float32)
    queries = base[:5]
    calls = []

    def l1(a, b):
        calls.append(1)
        return float(np.abs(a - b).sum())

    dist, ind = voisin.knn(base, queries, 4, metric=l1, device="cpu")
    ref_d, ref_i = voisin.knn(base, queries, 4, metric="cityblock", device="cpu")
    np.testing.assert_array_equal(ind, ref_i)
    np.testing.assert_allclose(dist, ref_d, rtol=1e-6)
    assert calls

    def bad(a, b):
        raise ZeroDivisionError("from the metric")

    with pytest.raises(ZeroDivisionError, match="from the metric"):
        voisin.knn(base, queries, 2, metric=bad, device="cpu")

    def edit(a, b):
        assert isinstance(a, str) and isinstance(b, str)
        return float(len(a) != len(b))

    d, i = voisin.knn(["ab", "cd", "abc"], ["xy"], 3, metric=edit, device="cpu")
    assert i.tolist() == [[0, 1, 2]] and d.tolist() == [[0.0, 0.0, 1.0]]


def test_include_self_graph_and_csr(rng):
    X = rng.normal(size=(50, 4)).astype(np.float32)
    d, i = voisin.knn_graph(X, 5, include_self=True, device="cpu")
    assert i[:, 0].tolist() == list(range(50)) and (d[:, 0] == 0).all()
    d2, i2 = voisin.knn_graph(X, 4, device="cpu")
    np.testing.assert_array_equal(i[:, 1:], i2)
    g = voisin.knn_graph(X, 5, include_self=True, output="csr", device="cpu")
    assert g.shape == (50, 50) and g.nnz == 250
    np.testing.assert_array_equal(g.indices.reshape(50, 5), i)
    assert (g.diagonal() == 0).all()


def test_include_self_carries_the_self_distance():
    # The item by its own distance: its dot product under inner_product (placed by it), 1 for
    # a zero vector under cosine; k = 1 holds the item alone.
    X = np.array([[0, 0], [1, 0], [3, 1], [0.5, 0.5], [2, 2]], dtype=np.float32)
    d, i = voisin.knn_graph(X, 3, include_self=True, metric="inner_product", device="cpu")
    assert i[1].tolist() == [2, 4, 1] and d[1].tolist() == [3.0, 2.0, 1.0]
    d, i = voisin.knn_graph(X, 3, include_self=True, metric="cosine", device="cpu")
    assert i[0, 0] == 0 and d[0].tolist() == [1.0, 1.0, 1.0]
    d, i = voisin.knn_graph(X, 1, include_self=True, metric="cosine", device="cpu")
    assert i[:, 0].tolist() == list(range(5)) and d[:, 0].tolist() == [1.0, 0, 0, 0, 0]


def test_dtypes_are_answered_for_their_values(rng):
    Xi = rng.integers(0, 255, size=(80, 6))
    ref = voisin.knn(Xi.astype(np.float32), Xi[:7].astype(np.float32), 5, device="cpu")
    for dtype in (np.uint8, np.int16, np.int32, np.int64, np.float16, np.float64, np.uint16):
        X = Xi.astype(dtype)
        got = voisin.knn(X, X[:7], 5, device="cpu")
        np.testing.assert_array_equal(got[1], ref[1])
        np.testing.assert_allclose(got[0], ref[0])
    # non-contiguous and Fortran-ordered views are copied, with the same answer
    F = np.asfortranarray(Xi.astype(np.float32))
    np.testing.assert_array_equal(voisin.knn(F, F[:7], 5, device="cpu")[1], ref[1])
    W = np.zeros((80, 12), np.float32)
    W[:, ::2] = Xi
    np.testing.assert_array_equal(voisin.knn(W[:, ::2], Xi[:7], 5, device="cpu")[1], ref[1])
    B = Xi.astype(">f4")  # big-endian
    np.testing.assert_array_equal(voisin.knn(B, B[:7], 5, device="cpu")[1], ref[1])


def test_float32_base_is_read_in_place(rng):
    from voisin import _voisin

    X = rng.normal(size=(10, 3)).astype(np.float32)
    # A one-shot index (check=False, as voisin.knn builds): a fitted one (check=True) keeps the
    # base as its first search prepared it (on the CPU its prepared tiles, on a GPU its rows in
    # device memory), so later changes to the array are not its to see.
    idx = _voisin.Index(X, "euclidean", "cpu", check=False)
    q = X[:1].copy()
    assert idx.knn(q, 1)[1].item() == 0
    X[0] += 100.0  # the index reads the caller's array: no copy was made
    assert idx.knn(q, 1)[1].item() != 0


def test_progress_callback_and_tqdm(rng):
    X = rng.normal(size=(3000, 16)).astype(np.float32)
    seen = []
    voisin.knn_graph(X, 5, device="cpu", progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] > 0
    voisin.knn(X, X[:100], 3, device="cpu", progress=True)


def test_keyboard_interrupt_within_a_second(rng):
    import os
    import signal
    import threading
    import time

    X = rng.normal(size=(2000, 4)).astype(np.float32)
    state = {"stop": False}

    def slow(a, b):
        if state["stop"]:
            return 0.0
        time.sleep(1e-4)
        return float(np.abs(a - b).sum())

    # Python raises KeyboardInterrupt only where SIGINT was not ignored when it started: a
    # runner launched in the background of a non-interactive shell inherits it ignored (and
    # this call then ran the whole graph). Ctrl-C's own handler for the test's duration.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            voisin.knn_graph(X, 5, metric=slow, device="cpu", n_jobs=1)
    finally:
        state["stop"] = True
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < 2.0


def test_cuda_available_is_a_bool():
    assert isinstance(voisin.cuda_available(), bool)



def _direct(base, queries, metric):
    """float64 distances from the differences themselves (no dot-product trick, which loses
    digits far from the origin)."""
    diff = np.asarray(queries, np.float64)[:, None, :] - np.asarray(base, np.float64)[None]
    D = {"euclidean": np.sqrt((diff**2).sum(-1)), "cityblock": np.abs(diff).sum(-1),
         "chebyshev": np.abs(diff).max(-1)}[metric]
    return D


def test_float64_and_wide_integers_are_answered_for_their_own_values(rng):
    """float64 values f32 cannot hold (rows that differ only below f32 precision, far from the
    origin) and integers past 2^24 are stored as f64 and ranked on their own values, where
    rounding to float32 would tie them (and the tie would go to the smaller index)."""
    base = 1e4 + rng.normal(size=(60, 5))
    base[1] = base[0] - 1e-9  # equal in float32, apart in float64
    queries = np.vstack([base[1], base[:7] + 1e-7 * rng.normal(size=(7, 5))])
    for metric in ("euclidean", "cityblock", "chebyshev"):
        d, i = voisin.knn(base, queries, 6, metric=metric, device="cpu")
        assert i[0, :2].tolist() == [1, 0] and d[0, 0] == 0.0
        D = _direct(base, queries, metric)
        assert_knn(d, i, D, D, 6)
    wide = rng.integers(-(1 << 40), 1 << 40, size=(50, 3))
    wide[3] = wide[2]
    wide[3, 0] -= 1  # one apart in one coordinate, beyond float32's 2^24
    d, i = voisin.knn(wide, wide[3:8], 4, device="cpu")
    assert i[0, :2].tolist() == [3, 2] and d[0, 1] == 1.0
    D = _direct(wide, wide[3:8], "euclidean")
    assert_knn(d, i, D, D, 4)


@pytest.mark.parametrize("call", ["graph", "knn", "range"])
def test_keyboard_interrupt_stops_a_vector_call_and_the_index_answers_again(rng, call):
    import os
    import signal
    import threading
    import time

    from voisin import _voisin

    # seconds of work on 2 cores (the whole k-NN of 40k x 64 points)
    X = rng.normal(size=(40_000, 64)).astype(np.float32)
    idx = _voisin.Index(X, "euclidean", "cpu")
    work = {"graph": lambda: idx.graph(10), "knn": lambda: idx.knn(X, 10),
            "range": lambda: idx.range(X, 9.0)}[call]
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    sent = {}

    def interrupt():
        sent["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.3, interrupt)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            work()
        raised = time.monotonic() - sent["at"]
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    # a loose bound (the machine is shared): the interrupt does not wait for the work
    assert raised < 1.0, raised
    # the interrupted worker ends before the next request resets the engine's token
    d, i = idx.knn(X[:3], 1)
    assert i.ravel().tolist() == [0, 1, 2]
