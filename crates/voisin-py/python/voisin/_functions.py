"""The everyday functions: ``knn``, ``knn_graph`` and ``range_search``."""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Optional, Tuple, Union

import numpy as np

from . import _voisin
from ._inputs import counting, framework, items
from ._ties import all_ties, masked

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
    return _voisin.Index(items(base, "base", spec), spec, device, precision, threads(n_jobs),
                         memory, check)


_MAX_THREADS = 1024


def threads(n_jobs: Any) -> Optional[int]:
    """CPU threads for ``n_jobs`` as joblib and scikit-learn read it: ``None`` or ``-1`` every
    core, ``-2`` every core but one, and so on; ``0`` means nothing."""
    if n_jobs is None:
        return None
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer)):
        raise TypeError(f"n_jobs must be an integer or None, got {type(n_jobs).__name__}")
    n_jobs = int(n_jobs)
    if n_jobs == 0:
        raise ValueError("n_jobs == 0 has no meaning: give 1 or more threads, -1 for every core, "
                         "or None")
    if n_jobs > _MAX_THREADS:
        raise ValueError(f"n_jobs must be at most {_MAX_THREADS}, got {n_jobs}")
    if n_jobs < 0:
        return None if n_jobs == -1 else max(1, (os.cpu_count() or 1) + 1 + n_jobs)
    return n_jobs


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
    distances: str = "f32",
    output: str = "arrays",
    stats: bool = False,
    ties: str = "first",
) -> Any:
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
    distances : {"f32", "f64"}, default="f32"
        ``f32``: float32 distances, each the exact distance rounded to float32 (the command
        line's default); ``f64``: float64, the exact values themselves (``--distances f64``).
    output : {"arrays", "csr", "torch", "cupy", "jax", "input"}, default="arrays"
        NumPy arrays, an ``n_queries x n_base`` ``csr_matrix`` of distances (rows in their
        order, explicit zeros kept), or the arrays of that framework (``input``: the framework
        and device of ``base``); on a GPU when ``base`` was a tensor on that GPU.
    stats : bool, default=False
        Also return a dict of what the call measured: the engine's phase times, evaluations,
        device and arithmetic, ``host_copy_bytes`` (input vectors copied on the host to read
        them; 0 when read in place) and ``device_to_host_bytes`` (GPU tensors brought to the
        host).
    ties : {"first", "all"}, default="first"
        ``first``: exactly k per query, ties at the k-th distance broken by the smaller index.
        ``all``: every base item at the k-th distance as well (the command line's ``--ties
        all``), so rows have their own lengths (at least k): for ``output="arrays"`` masked
        arrays (``numpy.ma``) padded to the longest row, the padding masked (index -1,
        distance inf, -inf for ``inner_product``), or a ``csr_matrix``.

    Returns
    -------
    distances : ndarray of shape (n_queries, k), float32 (float64 for ``distances="f64"``)
        Sorted ascending (descending dot products for ``inner_product``).
    indices : ndarray of shape (n_queries, k), int64
        Base indices; ties are broken by the smaller index.

    With ``ties="all"`` the two are masked arrays of shape (n_queries, longest row); with
    ``output="csr"`` one ``csr_matrix`` takes their place.

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
    _check_output(output, ("csr",) + _FRAMEWORKS)
    every_tie = all_ties(ties, output)
    exact = exact_distances(distances)
    with counting() as moved:
        idx = index(base, metric, p=p, device=device, precision=precision, n_jobs=n_jobs,
                    memory=memory, check=False)
        q = items(queries, "queries", metric_spec(metric, p))
    csr = output == "csr"
    with _Progress(progress, "voisin knn") as cb:
        got = idx.knn(q, int(k), cb, exact, csr, every_tie)
    if csr:
        got = csr_matrix(got, len(idx))
    elif every_tie:
        got = masked(got, idx.metric)
    return _deliver(got, output, base, stats and _stats(idx, moved))


def knn_graph(
    X: Any,
    k: int,
    *,
    metric: MetricLike = "euclidean",
    p: Optional[float] = None,
    include_self: bool = False,
    pairs: bool = False,
    output: str = "arrays",
    device: str = "auto",
    precision: str = "auto",
    n_jobs: Optional[int] = None,
    memory: Optional[int] = None,
    progress: ProgressLike = False,
    distances: str = "f32",
    stats: bool = False,
    ties: str = "first",
) -> Any:
    """The exact k-nearest-neighbour graph of a set: each item's k nearest other items.

    Parameters
    ----------
    X : array-like of shape (n, d), or list of str
        The items (see :func:`knn` for the accepted types).
    k : int
        Columns per row; capped at ``n - 1`` (``n`` with ``include_self``).
    include_self : bool, default=False
        When true, each row holds the item itself and its ``k - 1`` nearest other items:
        UMAP's ``precomputed_knn`` convention, where ``n_neighbors`` counts the point itself.
        The item carries its own distance (0, or 1 for a zero vector under cosine and a
        constant one under correlation, its dot product with itself under inner_product) and
        sits where that distance puts it, first among equal ones: column 0 under every metric
        but inner_product.
    pairs : bool, default=False
        Each unordered pair {i, j} of the graph (an edge in either direction) once, in row
        ``min(i, j)``, sorted by distance then index: the command line's ``--pairs``. The
        result is ragged: ``(offsets, indices, distances)`` for ``output="arrays"``, or an
        upper-triangular ``csr_matrix``.
    output : {"arrays", "csr", "torch", "cupy", "jax", "input"}, default="arrays"
        ``arrays`` gives ``(distances, indices)``; ``csr`` an ``n x n`` ``csr_matrix`` of
        distances, rows sorted by distance (explicit zeros kept); a framework, its arrays (as
        for :func:`knn`).
    metric, p, device, precision, n_jobs, memory, progress, distances, stats, ties
        As for :func:`knn` (with ``ties="all"`` and ``include_self``, the item itself, then its
        ``k - 1`` nearest others and every other item at the distance of the last of them).

    Returns
    -------
    (distances, indices) : ndarrays of shape (n, k), float32 (or float64) and int64
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
    _check_output(output, ("csr",) + _FRAMEWORKS)
    every_tie = all_ties(ties, output)
    exact = exact_distances(distances)
    if include_self and pairs:
        raise ValueError("include_self and pairs exclude each other: pairs never hold an item "
                         "itself")
    with counting() as moved:
        idx = index(X, metric, p=p, device=device, precision=precision, n_jobs=n_jobs,
                    memory=memory, check=False)
    others = int(k) - 1 if include_self else int(k)
    n, csr = len(idx), output == "csr"
    ragged = csr or pairs or every_tie
    if (others > 0 and n > 1) or (include_self and n > 0):
        # The item itself by its own distance (1 for a zero vector under cosine, its dot
        # product under inner_product), placed by the core as --include-self places it; with
        # no other item to find, rows of the item alone.
        with _Progress(progress, "voisin graph") as cb:
            got = idx.graph(others if n > 1 else 0, cb, include_self, exact, pairs, csr,
                            every_tie)
    else:  # no other item to find: empty rows
        dist = np.zeros((n, 0), np.float64 if exact else np.float32)
        ind = np.zeros((n, 0), dtype=np.int64)
        got = (np.zeros(n + 1, dtype=np.int64), ind.ravel(), dist.ravel()) \
            if ragged else (dist, ind)
    if csr:
        got = csr_matrix(got, n)
    elif every_tie and not pairs:
        got = masked(got, idx.metric)
    return _deliver(got, output, X, stats and _stats(idx, moved))


def range_search(
    base: Any,
    queries: Any,
    radius: float,
    *,
    metric: MetricLike = "euclidean",
    p: Optional[float] = None,
    pairs: bool = False,
    output: str = "csr",
    device: str = "auto",
    precision: str = "auto",
    n_jobs: Optional[int] = None,
    memory: Optional[int] = None,
    progress: ProgressLike = False,
    distances: str = "f32",
    stats: bool = False,
) -> Any:
    """Every base item within ``radius`` of each query.

    Parameters
    ----------
    base, queries : array-like or list of str
        As for :func:`knn`.
    radius : float
        Inclusive: items at distance <= radius are returned. For ``inner_product`` it is the
        smallest dot product returned, and may be negative.
    pairs : bool, default=False
        For a self-join (``queries`` the same as ``base``): each unordered pair {i, j},
        i != j, once, in row ``min(i, j)``, without the items themselves: near-duplicate
        detection without the mirrored and self pairs (the command line's ``--pairs``).
    output : {"csr", "arrays", "torch", "cupy", "jax", "input"}, default="csr"
        ``csr`` gives an ``n_queries x n_base`` ``csr_matrix`` of distances (explicit zeros
        kept); ``arrays`` gives ``(offsets, indices, distances)``: the results of query ``q``
        are ``offsets[q]:offsets[q + 1]``; a framework, those arrays in it (as for
        :func:`knn`).
    metric, p, device, precision, n_jobs, memory, progress, distances, stats
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
    _check_output(output, ("csr",) + _FRAMEWORKS)
    exact = exact_distances(distances)
    if pairs and not same_items(base, queries):
        raise ValueError("pairs=True is for self-joins: pass the same data as base and queries")
    with counting() as moved:
        idx = index(base, metric, p=p, device=device, precision=precision, n_jobs=n_jobs,
                    memory=memory, check=False)
        q = items(queries, "queries", metric_spec(metric, p))
    csr = output == "csr"
    with _Progress(progress, "voisin range") as cb:
        got = idx.range(q, float(radius), cb, exact, pairs, csr)
    return _deliver(csr_matrix(got, len(idx)) if csr else got, output, base,
                    stats and _stats(idx, moved))


def csr_rows(dist: np.ndarray, ind: np.ndarray, n_cols: int) -> "scipy.sparse.csr_matrix":
    """Equal-length rows (in their order) as a CSR matrix, explicit zeros kept."""
    n, k = ind.shape
    indptr = np.arange(0, n * k + 1, k) if k else np.zeros(n + 1, dtype=np.int64)
    return csr_matrix((indptr, ind.ravel(), dist.ravel()), n_cols)


def csr_matrix(rows: Tuple[np.ndarray, np.ndarray, np.ndarray],
               n_cols: int) -> "scipy.sparse.csr_matrix":
    """Ragged rows ``(offsets, indices, distances)`` as an ``n x n_cols`` CSR matrix, explicit
    zeros kept; the native rows come in scipy's index type, so nothing is copied."""
    import scipy.sparse

    offsets, ind, dist = rows
    return scipy.sparse.csr_matrix((dist, ind, offsets), shape=(len(offsets) - 1, n_cols))


def exact_distances(distances: Any) -> bool:
    """Whether ``distances`` asks for the exact float64 values (``"f64"``) rather than their
    float32 roundings (``"f32"``)."""
    if distances not in ("f32", "f64"):
        raise ValueError(f"distances must be 'f32' or 'f64', got {distances!r}")
    return distances == "f64"


def same_items(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` hold the same items (a self-join): the same object, or equal
    arrays or lists."""
    if a is b:
        return True
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return list(a) == list(b)
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except (TypeError, ValueError):
        return False


_FRAMEWORKS = ("arrays", "numpy", "torch", "cupy", "jax", "input")


def _check_output(output: Any, allowed: Tuple[str, ...]) -> None:
    if output not in allowed:
        raise ValueError(f"output must be one of {', '.join(map(repr, allowed))}, "
                         f"got {output!r}")


def _stats(idx: Any, moved: dict) -> dict:
    """The native index's stats of its last request, with the copies made converting the
    inputs (host conversions here and in the extension, GPU tensors brought to the host)."""
    out = dict(idx.stats)
    out["host_copy_bytes"] = (moved["host_copy_bytes"] + out.pop("base_copied_bytes")
                              + out.pop("queries_copied_bytes"))
    out["device_to_host_bytes"] = moved["device_to_host_bytes"]
    return out


def _deliver(result: Any, output: str, like: Any, stats: Any) -> Any:
    """``result`` (a tuple of arrays, or a CSR matrix) in the framework ``output`` names
    (``input``: ``like``'s), with the stats appended when asked."""
    target = framework(like) if output == "input" else output
    if target not in ("arrays", "numpy", "csr"):
        result = tuple(to_framework(a, target, like) for a in result)
    if stats is False:
        return result
    return (*result, stats) if isinstance(result, tuple) else (result, stats)


def to_framework(a: np.ndarray, name: str, like: Any) -> Any:
    """A NumPy result array as an array of framework ``name``: on ``like``'s device when
    ``like`` is that framework's tensor, else on its default device."""
    same = framework(like) == name
    if name == "torch":
        import torch

        t = torch.from_numpy(a)
        return t.to(like.device) if same and like.device.type != "cpu" else t
    if name == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id if same else None):
            return cupy.asarray(a)
    if name == "jax":
        import jax

        return jax.device_put(a, next(iter(like.devices())) if same else None)
    raise ValueError(f"unknown output framework {name!r}")


def _check_k(k: Any) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer, got {type(k).__name__}")
    if k < 1:
        raise ValueError("k must be at least 1")


def cuda_available() -> bool:
    """Whether an NVIDIA GPU with its driver, NVRTC and cuBLAS is usable by voisin."""
    return bool(_voisin.cuda_available())
