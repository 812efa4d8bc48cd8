"""``voisin.Index``: a metric index over a fixed set, built once and searched many times.

The structures of ``voisin index build`` (List of Clusters, SSS pivots, cover tree, k-d tree),
built and searched by the index engine the device names (``"cpu"``; ``"cuda"``/``"cuda:N"``:
the GPU builds List of Clusters, SSS and cover trees and searches the first two; ``"auto"``:
the GPU for what it takes, the CPU for the rest), saved to and read from the index files of
``voisin index build`` / ``voisin index query``. Every answer is exact, equal to brute force's.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _voisin
from ._functions import (MetricLike, ProgressLike, _Progress, _check_k, csr_matrix,
                         exact_distances, metric_spec)
from ._inputs import items

__all__ = ["Index", "INDEX_KINDS", "native_index", "resolve_algorithm"]

#: The structures: List of Clusters, SSS pivot table, cover tree, k-d tree.
INDEX_KINDS = ("lc", "sss", "cover", "kd")


#: scikit-learn's names for its trees, mapped to voisin's nearest structure: its k-d tree, and
#: for the ball tree the cover tree (a tree of balls whose radii shrink level by level).
SKLEARN_ALGORITHMS = {"kd_tree": "kd", "ball_tree": "cover"}


def resolve_algorithm(algorithm: Any) -> Optional[str]:
    """The index kind an estimator's ``algorithm`` names, or ``None`` for brute force
    (``"auto"`` and ``"brute"``: voisin's brute-force engine, on a GPU when one is usable)."""
    if algorithm in ("auto", "brute"):
        return None
    if isinstance(algorithm, str) and algorithm in INDEX_KINDS:
        return algorithm
    if isinstance(algorithm, str) and algorithm in SKLEARN_ALGORITHMS:
        return SKLEARN_ALGORITHMS[algorithm]
    raise ValueError(
        f"algorithm {algorithm!r} is not one of 'auto', 'brute', 'lc', 'sss', 'cover', 'kd' "
        "(scikit-learn's 'kd_tree' is voisin's 'kd', its 'ball_tree' the cover tree 'cover')"
    )


def native_index(data: Any, metric: MetricLike, kind: str, *, p: Optional[float] = None,
                 device: str = "auto", n_jobs: Optional[int] = None,
                 progress: ProgressLike = False, **params: Any) -> "_voisin.MetricIndex":
    """The native metric index ``kind`` over ``data`` (checked and converted), built now."""
    spec = metric_spec(metric, p)
    threads = None if n_jobs is None or n_jobs < 0 else int(n_jobs)
    with _Progress(progress, f"voisin {kind} build") as cb:
        return _voisin.MetricIndex(items(data, "X", spec), spec, kind, device, threads,
                                   progress=cb, **params)


class Index:
    """An exact metric index (scikit-learn style: parameters first, then :meth:`fit`).

    Parameters
    ----------
    kind : {"lc", "sss", "cover", "kd"}, default="lc"
        List of Clusters, SSS pivot table, cover tree, or k-d tree (vectors under a
        coordinate-wise metric only). They prune with the triangle inequality: fast in low
        intrinsic dimension, on strings and for expensive metrics.
    metric : str or callable, default="euclidean"
        A true metric: ``euclidean``, ``cityblock``, ``chebyshev``, ``minkowski`` (with ``p``
        >= 1), ``levenshtein`` (strings), or a callable ``f(a, b) -> float`` (CPU only; such an
        index cannot be saved).
    p : float, optional
        The order of ``minkowski``.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where the index is built and searched.
    n_jobs : int, optional
        CPU threads (default: every core).
    cluster_size : int, default=32
        List of Clusters: items per cluster, center included.
    alpha : float, default=0.5
        SSS: a new pivot is at least alpha times the largest distance from every pivot.
    max_pivots : int, default=64
        SSS: at most this many pivots.
    radius_base : float, default=2.0
        Cover tree: the base of the level radii (> 1).
    progress : bool or callable, default=False
        ``True`` shows a tqdm bar while building; a callable receives ``(done, total)``.

    Examples
    --------
    >>> import voisin
    >>> idx = voisin.Index("lc", metric="levenshtein", device="cpu").fit(["cat", "cart", "dog"])
    >>> d, i = idx.knn(["cot"], 2)
    >>> i.tolist(), d.tolist()
    ([[0, 1]], [[1.0, 2.0]])
    """

    def __init__(self, kind: str = "lc", *, metric: MetricLike = "euclidean",
                 p: Optional[float] = None, device: str = "auto", n_jobs: Optional[int] = None,
                 cluster_size: int = 32, alpha: float = 0.5, max_pivots: int = 64,
                 radius_base: float = 2.0, progress: ProgressLike = False):
        self.kind = kind
        self.metric = metric
        self.p = p
        self.device = device
        self.n_jobs = n_jobs
        self.cluster_size = cluster_size
        self.alpha = alpha
        self.max_pivots = max_pivots
        self.radius_base = radius_base
        self.progress = progress

    def fit(self, X: Any, y: Any = None) -> "Index":
        """Builds the index over ``X`` (vectors, or a list of ``str`` under levenshtein).

        Returns
        -------
        self
        """
        self.index_ = native_index(X, self.metric, self.kind, p=self.p, device=self.device,
                                   n_jobs=self.n_jobs, progress=self.progress,
                                   cluster_size=int(self.cluster_size), alpha=float(self.alpha),
                                   max_pivots=int(self.max_pivots),
                                   radius_base=float(self.radius_base))
        return self

    @classmethod
    def load(cls, path: str, *, device: str = "auto", n_jobs: Optional[int] = None) -> "Index":
        """Reads an index file written by :meth:`save` or ``voisin index build``."""
        threads = None if n_jobs is None or n_jobs < 0 else int(n_jobs)
        native = _voisin.MetricIndex.load(str(path), device, threads)
        idx = cls(native.kind, metric=native.metric, device=device, n_jobs=n_jobs)
        idx.index_ = native
        return idx

    def save(self, path: str) -> None:
        """Writes the index file (all or nothing), readable by :meth:`load` and by
        ``voisin index query``."""
        self._native().save(str(path))

    def _native(self) -> "_voisin.MetricIndex":
        native = getattr(self, "index_", None)
        if native is None:
            raise ValueError("this Index is not fitted yet: call fit(X) or Index.load(path)")
        return native

    def __len__(self) -> int:
        return len(self._native())

    @property
    def n_items(self) -> int:
        """Number of indexed items."""
        return len(self._native())

    @property
    def build_evals(self) -> int:
        """Distance evaluations the build made (0 for an index read from a file)."""
        return self._native().build_evals

    @property
    def answering(self) -> str:
        """The engine that searches this index, e.g. ``"cpu"`` or the GPU's name."""
        return self._native().device

    def describe(self) -> str:
        """E.g. ``"lc index over 1000 x 3 vectors (euclidean)"``."""
        return self._native().describe()

    def knn(self, queries: Any, k: int, *, distances: str = "f32",
            progress: ProgressLike = False) -> Tuple[np.ndarray, np.ndarray]:
        """The k nearest indexed items of each query: ``(distances, indices)``, each
        ``n_queries x k`` (k capped at the number of items), ties by the smaller index;
        distances float32 (``distances="f64"``: the exact float64 values), as ``voisin.knn``."""
        _check_k(k)
        exact = exact_distances(distances)
        native = self._native()
        with _Progress(progress, "voisin knn") as cb:
            return native.knn(items(queries, "queries", native.metric), int(k), cb, exact)

    def knn_graph(self, k: int, *, distances: str = "f32",
                  progress: ProgressLike = False) -> Tuple[np.ndarray, np.ndarray]:
        """Each indexed item's k nearest other items (duplicates kept): ``(distances,
        indices)``, each ``n x k``, k capped at ``n - 1``; distances as for :meth:`knn`."""
        _check_k(k)
        exact = exact_distances(distances)
        with _Progress(progress, "voisin graph") as cb:
            return self._native().graph(int(k), cb, False, exact)

    def range_search(self, queries: Any, radius: float, *, output: str = "csr",
                     distances: str = "f32", progress: ProgressLike = False
                     ) -> Union["scipy.sparse.csr_matrix", Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Every indexed item within ``radius`` (inclusive) of each query: a CSR matrix of
        distances (``output="csr"``) or ``(offsets, indices, distances)``; rows sorted by
        distance, then index; distances as for :meth:`knn`."""
        if output not in ("arrays", "csr"):
            raise ValueError(f"output must be 'arrays' or 'csr', got {output!r}")
        exact = exact_distances(distances)
        native = self._native()
        csr = output == "csr"
        with _Progress(progress, "voisin range") as cb:
            rows = native.range(items(queries, "queries", native.metric), float(radius), cb,
                                exact, False, csr)
        return csr_matrix(rows, len(native)) if csr else rows

    def __repr__(self) -> str:
        native = getattr(self, "index_", None)
        what = native.describe() if native is not None else "not fitted"
        return f"voisin.Index({self.kind!r}: {what})"
