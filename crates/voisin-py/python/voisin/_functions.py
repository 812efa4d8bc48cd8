"""The everyday functions: ``knn``, ``knn_graph`` and ``range_search``."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Tuple, Union

import numpy as np

from . import _voisin
from ._inputs import items
from ._ties import all_ties, csr, masked, with_self

MetricLike = Union[str, Callable[[Any, Any], float]]
ProgressLike = Union[bool, Callable[[int, int], None], None]

_SKLEARN_ALIASES = {"manhattan": "cityblock", "infinity": "chebyshev"}


def metric_spec(metric: MetricLike, p: Optional[float] = None) -> MetricLike:
    """voisin's name for a metric given scikit-learn style (``"minkowski"`` with ``p``)."""
    if callable(metric):
        return metric
    if not isinstance(metric, str):
        raise TypeError(f"metric must be a str or a callable, got {type(metric).__name__}")
    name = _SKLEARN_ALIASES.get(metric.lower(), metric.lower())
    if name == "precomputed":
        raise ValueError("metric 'precomputed' is not supported: voisin computes the distances")
    if name == "minkowski" and p is not None:
        if p == 2:
            return "euclidean"
        if p == 1:
            return "cityblock"
        if p == math.inf:
            return "chebyshev"
        return f"minkowski:{p!r}"
    return name


class _Progress:
    """A progress callback: a tqdm bar for ``True``, the caller's callable, or nothing."""

    def __init__(self, progress: ProgressLike, desc: str):
        self.callback = None
        self.bar = None
        if progress is True:
            try:
                from tqdm.auto import tqdm
            except ImportError:  # pragma: no cover - tqdm is a test dependency
                raise ImportError("progress=True needs tqdm (pip install tqdm)") from None

            def show(done: int, total: int) -> None:
                if self.bar is None:
                    self.bar = tqdm(total=total, desc=desc)
                self.bar.update(done - self.bar.n)

            self.callback = show
        elif callable(progress):
            self.callback = progress
        elif progress not in (None, False):
            raise TypeError("progress must be True, False or a callable(done, total)")

    def __enter__(self) -> Optional[Callable[[int, int], None]]:
        return self.callback

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.close()


def index(
    base: Any,
    metric: MetricLike = "euclidean",
    *,
    p: Optional[float] = None,
    device: str = "auto",
    precision: str = "auto",
    n_jobs: Optional[int] = None,
    memory: Optional[int] = None,
    check: bool = True,
) -> "_voisin.Index":
    """The native index over ``base`` (checked and converted). ``check=False`` (one-shot calls)
    scans the base for NaN and infinities beside the first request instead of before it."""
    spec = metric_spec(metric, p)
    threads = None if n_jobs is None or n_jobs < 0 else int(n_jobs)
    return _voisin.Index(items(base, "base", spec), spec, device, precision, threads, memory,
                         check)


def knn(
    base: Any,
    queries: Any,
    k: int,
    *,
    metric: MetricLike = "euclidean",
    p: Optional[float] = None,
    device: str = "auto",
    precision: str = "auto",
    n_jobs: Optional[int] = None,
    memory: Optional[int] = None,
    progress: ProgressLike = False,
    ties: str = "first",
    output: str = "arrays",
) -> Union[Tuple[np.ndarray, np.ndarray], "scipy.sparse.csr_matrix"]:
    """Exact k nearest neighbours of each query among the base items.

    Parameters
    ----------
    base : array-like of shape (n_base, d), or list of str
        The items searched. float32 C-contiguous arrays are read in place; float16 and uint8
        are kept as they are; float64, bool and integer arrays are accepted when every value
        converts to float32 exactly. Strings (a list or array of ``str``) take ``levenshtein``.
    queries : array-like of shape (n_queries, d), or list of str
        The items whose neighbours are wanted, of the same kind as ``base``.
    k : int
        Neighbours per query; capped at ``n_base``.
    metric : str or callable, default="euclidean"
        ``euclidean``, ``sqeuclidean``, ``cosine``, ``correlation``, ``inner_product`` (largest
        dot product first), ``cityblock``, ``chebyshev``, ``minkowski`` (with ``p``) or
        ``levenshtein``; or a Python callable ``f(a, b) -> float`` (CPU only, slow: it is
        called once per pair).
    p : float, optional
        The order of ``minkowski`` (scikit-learn's spelling; ``"minkowski:3"`` works too).
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        ``auto`` uses an NVIDIA GPU when one is usable and the CPU otherwise.
    precision : {"auto", "fp32", "tf32", "fp16x3", "fp16", "bf16", "int8"}, default="auto"
        GPU arithmetic of the candidate filter; answers are exact either way.
    n_jobs : int, optional
        CPU threads (default: every core).
    memory : int, optional
        Working memory budget in bytes (default 1 GiB; inputs and outputs not counted).
    progress : bool or callable, default=False
        ``True`` shows a tqdm bar; a callable receives ``(done, total)``.
    ties : {"first", "all"}, default="first"
        ``first``: exactly k per query, ties at the k-th distance broken by the smaller index.
        ``all``: every base item at the k-th distance as well, so rows have their own lengths
        (at least k): with ``output="arrays"`` masked arrays (``numpy.ma``) padded to the
        longest row, the padding masked (index -1, distance inf, -inf for ``inner_product``).
    output : {"arrays", "csr"}, default="arrays"
        ``arrays`` gives ``(distances, indices)``; ``csr`` an ``n_queries x n_base``
        ``csr_matrix`` of distances, rows in their order (explicit zeros kept).

    Returns
    -------
    distances : ndarray of shape (n_queries, k), float64
        Sorted ascending (descending dot products for ``inner_product``).
    indices : ndarray of shape (n_queries, k), int64
        Base indices; ties are broken by the smaller index.

    With ``ties="all"``, the two are masked arrays of shape (n_queries, longest row); with
    ``output="csr"``, one ``csr_matrix`` takes their place.

    Examples
    --------
    >>> import numpy as np, voisin
    >>> base = np.array([[0, 0], [1, 0], [0, 2], [3, 3]], dtype=np.float32)
    >>> d, i = voisin.knn(base, np.array([[0.9, 0.1]], dtype=np.float32), k=2, device="cpu")
    >>> i.tolist()
    [[1, 0]]
    >>> d, i = voisin.knn(base, np.array([[0, 1]], dtype=np.float32), k=1, ties="all",
    ...                   device="cpu")
    >>> i.tolist(), d.tolist()
    ([[0, 2]], [[1.0, 1.0]])
    """
    _check_k(k)
    every_tie = all_ties(ties)
    _check_output(output)
    idx = index(base, metric, p=p, device=device, precision=precision, n_jobs=n_jobs,
                memory=memory, check=False)
    spec = metric_spec(metric, p)
    with _Progress(progress, "voisin knn") as cb:
        q = items(queries, "queries", spec)
        if every_tie:
            rows = idx.knn_ties(q, int(k), cb)
            return csr(rows, len(idx)) if output == "csr" else masked(rows, idx.metric)
        dist, ind = idx.knn(q, int(k), cb)
    return csr_rows(dist, ind, len(idx)) if output == "csr" else (dist, ind)


def knn_graph(
    X: Any,
    k: int,
    *,
    metric: MetricLike = "euclidean",
    p: Optional[float] = None,
    include_self: bool = False,
    output: str = "arrays",
    device: str = "auto",
    precision: str = "auto",
    n_jobs: Optional[int] = None,
    memory: Optional[int] = None,
    progress: ProgressLike = False,
    ties: str = "first",
) -> Union[Tuple[np.ndarray, np.ndarray], "scipy.sparse.csr_matrix"]:
    """The exact k-nearest-neighbour graph of a set: each item's k nearest other items.

    Parameters
    ----------
    X : array-like of shape (n, d), or list of str
        The items (see :func:`knn` for the accepted types).
    k : int
        Columns per row; capped at ``n - 1`` (``n`` with ``include_self``).
    include_self : bool, default=False
        When true, column 0 of each row is the item itself at distance 0 and the other
        ``k - 1`` columns its nearest other items: UMAP's ``precomputed_knn`` convention, where
        ``n_neighbors`` counts the point itself.
    output : {"arrays", "csr"}, default="arrays"
        ``arrays`` gives ``(distances, indices)``; ``csr`` an ``n x n`` ``csr_matrix`` of
        distances, rows sorted by distance (explicit zeros kept).
    metric, p, device, precision, n_jobs, memory, progress, ties
        As for :func:`knn` (with ``ties="all"`` and ``include_self``, the item itself, then its
        ``k - 1`` nearest others and every other item at the distance of the last of them).

    Returns
    -------
    (distances, indices) : ndarrays of shape (n, k), float64 and int64
        Or a ``scipy.sparse.csr_matrix`` for ``output="csr"``. Duplicates of an item are
        other items and are kept.

    Examples
    --------
    >>> import numpy as np, voisin
    >>> X = np.array([[0], [1], [3]], dtype=np.float32)
    >>> d, i = voisin.knn_graph(X, k=1, device="cpu")
    >>> i.ravel().tolist()
    [1, 0, 1]
    """
    _check_k(k)
    _check_output(output)
    every_tie = all_ties(ties)
    idx = index(X, metric, p=p, device=device, precision=precision, n_jobs=n_jobs,
                memory=memory, check=False)
    others = int(k) - 1 if include_self else int(k)
    n = len(idx)
    if every_tie:
        return _graph_ties(idx, others, include_self, output, progress)
    if others > 0 and n > 1:
        with _Progress(progress, "voisin graph") as cb:
            dist, ind = idx.graph(others, cb)
    else:
        dist, ind = np.zeros((n, 0)), np.zeros((n, 0), dtype=np.int64)
    if include_self:
        dist = np.hstack([np.zeros((n, 1)), dist])
        ind = np.hstack([np.arange(n, dtype=np.int64)[:, None], ind])
    if output == "csr":
        return csr_rows(dist, ind, n)
    return dist, ind


def range_search(
    base: Any,
    queries: Any,
    radius: float,
    *,
    metric: MetricLike = "euclidean",
    p: Optional[float] = None,
    output: str = "csr",
    device: str = "auto",
    precision: str = "auto",
    n_jobs: Optional[int] = None,
    memory: Optional[int] = None,
    progress: ProgressLike = False,
) -> Union["scipy.sparse.csr_matrix", Tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every base item within ``radius`` of each query.

    Parameters
    ----------
    base, queries : array-like or list of str
        As for :func:`knn`.
    radius : float
        Inclusive: items at distance <= radius are returned. For ``inner_product`` it is the
        smallest dot product returned, and may be negative.
    output : {"csr", "arrays"}, default="csr"
        ``csr`` gives an ``n_queries x n_base`` ``csr_matrix`` of distances (explicit zeros
        kept); ``arrays`` gives ``(offsets, indices, distances)``: the results of query ``q``
        are ``offsets[q]:offsets[q + 1]``.
    metric, p, device, precision, n_jobs, memory, progress
        As for :func:`knn`.

    Returns
    -------
    scipy.sparse.csr_matrix or (offsets, indices, distances)
        Rows sorted by distance, then index (decreasing dot product for ``inner_product``).

    Examples
    --------
    >>> import voisin
    >>> g = voisin.range_search(["cat", "cart", "dog"], ["cat"], 1, metric="levenshtein")
    >>> g.indices.tolist(), g.data.tolist()
    ([0, 1], [0.0, 1.0])
    """
    if output not in ("arrays", "csr"):
        raise ValueError(f"output must be 'arrays' or 'csr', got {output!r}")
    idx = index(base, metric, p=p, device=device, precision=precision, n_jobs=n_jobs,
                memory=memory, check=False)
    spec = metric_spec(metric, p)
    with _Progress(progress, "voisin range") as cb:
        offsets, ind, dist = idx.range(items(queries, "queries", spec), float(radius), cb)
    if output == "arrays":
        return offsets, ind, dist
    import scipy.sparse

    return scipy.sparse.csr_matrix((dist, ind, offsets), shape=(len(offsets) - 1, len(idx)))


def _graph_ties(idx: Any, others: int, include_self: bool, output: str,
                progress: ProgressLike) -> Any:
    """:func:`knn_graph` with ``ties="all"``: every other item at the k-th distance too."""
    n = len(idx)
    if others > 0 and n > 1:
        with _Progress(progress, "voisin graph") as cb:
            rows = idx.graph_ties(others, cb)
    else:
        rows = (np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0))
    if include_self:
        rows = with_self(rows)
    return csr(rows, n) if output == "csr" else masked(rows, idx.metric)


def _check_output(output: Any) -> None:
    if output not in ("arrays", "csr"):
        raise ValueError(f"output must be 'arrays' or 'csr', got {output!r}")


def csr_rows(dist: np.ndarray, ind: np.ndarray, n_cols: int) -> "scipy.sparse.csr_matrix":
    """Equal-length rows (in their order) as a CSR matrix, explicit zeros kept."""
    import scipy.sparse

    n, k = ind.shape
    indptr = np.arange(0, n * k + 1, k) if k else np.zeros(n + 1, dtype=np.int64)
    return scipy.sparse.csr_matrix((dist.ravel(), ind.ravel(), indptr), shape=(n, n_cols))


def _check_k(k: Any) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer, got {type(k).__name__}")
    if k < 1:
        raise ValueError("k must be at least 1")


def cuda_available() -> bool:
    """Whether an NVIDIA GPU with its driver, NVRTC and cuBLAS is usable by voisin."""
    return bool(_voisin.cuda_available())
