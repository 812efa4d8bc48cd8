"""Bad input raises ValueError/TypeError with one clear line; never a panic."""

import numpy as np
import pytest
import scipy.sparse

import voisin

X = np.arange(40, dtype=np.float32).reshape(10, 4)


@pytest.mark.parametrize(
    "base, queries, exc, match",
    [
        (X, X.reshape(2, 5, 4), ValueError, "queries: expected a 2-D array"),
        (X.ravel(), X, ValueError, "base: expected a 2-D array"),
        (X[:0], X, ValueError, r"base: empty \(0 rows"),
        (X, X[:, :0], ValueError, "queries: vectors have dimension 0"),
        (X, X[:, :3], ValueError, "base has dimension 4 but queries have dimension 3"),
        (X.astype(np.complex64), X, TypeError, "base: unsupported dtype complex64"),
        (X.astype(object), X, TypeError, "base: unsupported dtype object"),
        (np.array([[1.0, np.nan]]), np.zeros((1, 2)), ValueError,
         r"base: row 0, column 1 holds NaN \(counting from 0\)"),
        (X, np.where(X > 38, np.inf, X), ValueError, "queries: row 9, column 3 holds inf"),
        (np.array([[(1 << 53) + 1]]), np.zeros((1, 1), np.float32), ValueError,
         "base: value 9007199254740993 at row 0, column 0 has no exact float64 form: its "
         "magnitude"),
        (scipy.sparse.csr_matrix(X), X, TypeError, "base: sparse matrices are not supported"),
        (["ab", 3], ["a"], TypeError, "base: item 1 is int, not str"),
        (X, ["ab"], ValueError, "metric euclidean does not apply to strings"),
    ],
)
def test_bad_data(base, queries, exc, match):
    with pytest.raises(exc, match=match):
        voisin.knn(base, queries, 1, device="cpu")


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: voisin.knn(X, X, 0), ValueError, "k must be at least 1"),
        (lambda: voisin.knn(X, X, 1.5), TypeError, "k must be an integer"),
        (lambda: voisin.knn(X, X, 1, metric="nope"), ValueError, "unknown metric 'nope'"),
        (lambda: voisin.knn(X, X, 1, metric="levenshtein"), TypeError,
         "metric levenshtein takes strings"),
        (lambda: voisin.knn(["a"], ["b"], 1, metric="cosine"), ValueError,
         "metric cosine does not apply to strings"),
        (lambda: voisin.knn(X, X, 1, device="tpu"), ValueError, "unknown device 'tpu'"),
        (lambda: voisin.knn(X, X, 1, precision="fp8"), ValueError, "unknown precision 'fp8'"),
        (lambda: voisin.knn(X, X, 1, metric="minkowski", p=0.5), ValueError,
         "minkowski order 0.5 must be"),
        (lambda: voisin.range_search(X, X, -1.0), ValueError, "radius -1 is negative"),
        (lambda: voisin.range_search(X, X, float("nan")), ValueError, "is not a finite number"),
        (lambda: voisin.knn(X, X, 1, metric=42), TypeError, "metric must be a str or a callable"),
        (lambda: voisin.knn(X, X, 1, n_jobs=0), ValueError, "^n_jobs == 0 has no meaning"),
        (lambda: voisin.knn(X, X, 1, n_jobs=5000), ValueError, "^n_jobs must be at most 1024"),
        (lambda: voisin.knn(X, X, 1, n_jobs=2.0), TypeError, "^n_jobs must be an integer"),
        (lambda: voisin.knn(X, X, 1, distances="f16"), ValueError,
         "^distances must be 'f32' or 'f64', got 'f16'$"),
        (lambda: voisin.range_search(X, X[::-1], 1.0, pairs=True), ValueError,
         "^pairs=True is for self-joins: pass the same data as base and queries$"),
        (lambda: voisin.knn_graph(X, 2, include_self=True, pairs=True), ValueError,
         "^include_self and pairs exclude each other"),
        (lambda: voisin.knn(X, X, 1, progress="yes"), TypeError, "progress must be"),
        (lambda: voisin.knn_graph(X, 1, output="dense"), ValueError, "output must be"),
    ],
)
def test_bad_requests(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_cuda_without_a_gpu_is_a_runtime_error():
    if voisin.cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="^cuda"):
        voisin.knn(X, X, 1, device="cuda")


def test_callable_metric_on_the_gpu_is_refused():
    with pytest.raises(ValueError, match="runs on the CPU only"):
        voisin.knn(X, X, 1, metric=lambda a, b: 0.0, device="cuda")


# One-shot calls scan the base beside the engine's work (see Index.request); the base's error
# still comes first, and an index whose base is unchecked keeps refusing it.
B = X.copy()
B[7, 2] = np.nan


@pytest.mark.parametrize(
    "call",
    [
        lambda: voisin.knn(B, np.where(X > 38, np.inf, X), 1, device="cpu"),
        lambda: voisin.knn_graph(B, 2, device="cpu"),
        lambda: voisin.range_search(B, X, 1.0, device="cpu"),
        lambda: voisin.NearestNeighbors(n_neighbors=1, device="cpu").fit(B),
    ],
)
def test_bad_base_reported_first(call):
    with pytest.raises(ValueError, match=r"^base: row 7, column 2 holds NaN \(counting from 0\)$"):
        call()


def test_unchecked_base_keeps_being_refused():
    idx = voisin._voisin.Index(B, "euclidean", "cpu", "fp32", None, None, False)
    for _ in range(2):
        with pytest.raises(ValueError, match="base: row 7, column 2 holds NaN"):
            idx.knn(X, 1)
    good = voisin._voisin.Index(X, "euclidean", "cpu", "fp32", None, None, False)
    for _ in range(2):
        _, i = good.knn(X, 1)
        assert (i.ravel() == np.arange(10)).all()


@pytest.mark.parametrize(
    "engine, python",
    [
        # every message of the engines that names a command-line option and can reach Python
        ("--threads must be at least 1", "n_jobs must be at least 1"),
        ("vector 3 holds 1e39 at column 0, beyond the range of f32 (about ±3.4e38) that the "
         "cuda engine's tiles compute in; the CPU engine answers it exactly (--device cpu)",
         "vector 3 holds 1e39 at column 0, beyond the range of f32 (about ±3.4e38) that the "
         "cuda engine's tiles compute in; the CPU engine answers it exactly (device='cpu')"),
        ("--precision fp16 runs on f16 storage only and cannot take f32 rows; use --precision "
         "auto", "precision='fp16' runs on f16 storage only and cannot take f32 rows; use "
         "precision='auto'"),
        ("graphs larger than the GPU are not streamed yet; use --device cpu)",
         "graphs larger than the GPU are not streamed yet; use device='cpu')"),
        ("cuda: --gpus 3 asks for more", "cuda: --gpus 3 asks for more"),  # not Python's
        ("a - b -- c", "a - b -- c"),
    ],
)
def test_engine_messages_in_python_words(engine, python):
    assert voisin._voisin._python_words(engine) == python
