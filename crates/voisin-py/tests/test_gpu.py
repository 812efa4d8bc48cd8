"""GPU tests: run on a machine with a CUDA GPU (skipped elsewhere by conftest.py)."""

import numpy as np
import pytest

import voisin

pytestmark = pytest.mark.gpu

METRICS = ["euclidean", "sqeuclidean", "cosine", "correlation", "inner_product", "cityblock",
           "chebyshev", "minkowski:3"]


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16x3"])
def test_cuda_equals_cpu(rng, metric, precision):
    base = rng.normal(size=(5000, 64)).astype(np.float32)
    queries = rng.normal(size=(300, 64)).astype(np.float32)
    for f in (lambda dev: voisin.knn(base, queries, 10, metric=metric, device=dev,
                                     precision=precision),
              lambda dev: voisin.knn_graph(base[:2000], 10, metric=metric, device=dev,
                                           precision=precision)):
        gd, gi = f("cuda")
        cd, ci = f("cpu")
        np.testing.assert_array_equal(gi, ci)
        np.testing.assert_allclose(gd, cd, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("metric", METRICS)
def test_float64_and_int64_on_the_gpu_equal_the_cpu(rng, metric):
    # Values f32 cannot hold (random float64, int64 far out with collisions in f32): answered on
    # the GPU for their own values, byte for byte as the CPU engine answers them.
    sets = [
        (rng.normal(size=(3000, 24)), rng.normal(size=(200, 24))),
        (10**12 + rng.integers(-40, 40, size=(3000, 7)),
         10**12 + rng.integers(-40, 40, size=(200, 7))),
    ]
    for base, queries in sets:
        for f in (lambda dev: voisin.knn(base, queries, 10, metric=metric, device=dev),
                  lambda dev: voisin.knn_graph(base[:1500], 10, metric=metric, device=dev)):
            cd, ci = f("cpu")
            if metric.startswith("minkowski") and base.dtype.kind == "i":
                # Minkowski's power sums are not answered on scaled copies: the GPU refuses the
                # values about 1e12 in the CLI's words, and auto answers them on the CPU.
                with pytest.raises(ValueError, match="the CPU engine answers it exactly"):
                    f("cuda")
                gd, gi = f("auto")
            else:
                gd, gi = f("cuda")
            np.testing.assert_array_equal(gi, ci)
            np.testing.assert_array_equal(gd, cd)


def test_auto_picks_the_gpu_and_a_fitted_base_answers_batches(rng):
    base = rng.normal(size=(20000, 128)).astype(np.float32)
    nn = voisin.NearestNeighbors(n_neighbors=10).fit(base)
    assert nn._native().device.startswith("cuda")
    cpu = voisin.NearestNeighbors(n_neighbors=10, device="cpu").fit(base)
    for _ in range(3):
        q = rng.normal(size=(100, 128)).astype(np.float32)
        np.testing.assert_array_equal(nn.kneighbors(q)[1], cpu.kneighbors(q)[1])


def test_levenshtein_range_on_the_gpu():
    words = ["kitten", "sitting", "mitten", "bitten", "kitchen", "written"] * 50
    g = voisin.range_search(words, ["kitten"], 2, metric="levenshtein", device="cuda")
    c = voisin.range_search(words, ["kitten"], 2, metric="levenshtein", device="cpu")
    assert (g != c).nnz == 0


@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_non_finite_values_named_as_on_the_cpu(rng, device):
    # The GPU refuses them itself (no scan before the work); the error still names the first.
    base = rng.normal(size=(3000, 16)).astype(np.float32)
    queries = rng.normal(size=(40, 16)).astype(np.float32)
    bad_base, bad_queries = base.copy(), queries.copy()
    bad_base[1234, 5] = np.nan
    bad_queries[17, 3] = np.inf
    calls = [
        (lambda: voisin.knn(bad_base, queries, 5, device=device), "base: row 1234, column 5"),
        (lambda: voisin.knn(base, bad_queries, 5, device=device), "queries: row 17, column 3"),
        (lambda: voisin.knn(bad_base, bad_queries, 5, device=device), "base: row 1234"),
        (lambda: voisin.knn_graph(bad_base, 5, device=device), "base: row 1234, column 5"),
        (lambda: voisin.range_search(base, bad_queries, 1.0, device=device), "queries: row 17"),
    ]
    for call, match in calls:
        with pytest.raises(ValueError, match=match):
            call()
    idx = voisin._voisin.Index(bad_base, "euclidean", device, "fp32", None, None, False)
    for _ in range(2):
        with pytest.raises(ValueError, match="base: row 1234, column 5 holds NaN"):
            idx.knn(queries, 3)


@pytest.mark.parametrize("kind", ["lc", "sss"])
@pytest.mark.parametrize("metric", ["euclidean", "cityblock", "chebyshev"])
def test_metric_indexes_on_the_gpu_equal_the_cpu(rng, tmp_path, kind, metric):
    # Built and searched on the GPU (the index face's GPU engine): the CPU build's file, byte
    # for byte, and the CPU's answers.
    X = rng.integers(-3, 4, size=(4000, 6)).astype(np.float32)
    Q = rng.integers(-3, 4, size=(300, 6)).astype(np.float32)
    gpu = voisin.Index(kind, metric=metric, device="cuda").fit(X)
    cpu = voisin.Index(kind, metric=metric, device="cpu").fit(X)
    assert gpu.answering != "cpu"
    gpu.save(tmp_path / "gpu.vidx")
    cpu.save(tmp_path / "cpu.vidx")
    assert (tmp_path / "gpu.vidx").read_bytes() == (tmp_path / "cpu.vidx").read_bytes()
    for k in (1, 10, 100):
        for a, b in zip(gpu.knn(Q, k), cpu.knn(Q, k)):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(gpu.knn_graph(5), cpu.knn_graph(5)):
        np.testing.assert_array_equal(a, b)
    g, c = gpu.range_search(Q, 2.0), cpu.range_search(Q, 2.0)
    np.testing.assert_array_equal(g.indptr, c.indptr)
    np.testing.assert_array_equal(g.indices, c.indices)
    np.testing.assert_array_equal(g.data, c.data)
    loaded = voisin.Index.load(tmp_path / "cpu.vidx", device="cuda")
    for a, b in zip(loaded.knn(Q, 10), cpu.knn(Q, 10)):
        np.testing.assert_array_equal(a, b)
    # The estimator's distances are float64 (its documented type): against the CPU's estimator.
    nn, on_cpu = (voisin.NearestNeighbors(n_neighbors=10, algorithm=kind, metric=metric,
                                          device=d).fit(X) for d in ("cuda", "cpu"))
    for a, b in zip(nn.kneighbors(Q), on_cpu.kneighbors(Q)):
        np.testing.assert_array_equal(a, b)


def test_a_cover_tree_builds_on_the_gpu_and_auto_searches_it_on_the_cpu(rng):
    X = rng.normal(size=(3000, 4)).astype(np.float32)
    Q = rng.normal(size=(100, 4)).astype(np.float32)
    cpu = voisin.Index("cover", device="cpu").fit(X)
    auto = voisin.Index("cover", device="auto").fit(X)
    for a, b in zip(auto.knn(Q, 5), cpu.knn(Q, 5)):
        np.testing.assert_array_equal(a, b)
    cuda = voisin.Index("cover", device="cuda").fit(X)
    with pytest.raises(ValueError, match="device='cpu'"):
        cuda.knn(Q, 5)
