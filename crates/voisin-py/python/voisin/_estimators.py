"""scikit-learn estimators with scikit-learn's contracts, answered by voisin.

``NearestNeighbors`` follows :class:`sklearn.neighbors.NearestNeighbors`,
``KNeighborsTransformer`` and ``RadiusNeighborsTransformer`` their scikit-learn namesakes:
``X=None`` asks for each fitted item's neighbours without itself (from the symmetric graph
for ``kneighbors``), the transformers include each item itself, plus one extra neighbour in
``mode="distance"``, and return CSR rows sorted by distance. A fitted estimator keeps its
native index (and, on a GPU, its base in device memory) between calls; pickling keeps the data
and rebuilds the index on first use.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any, Optional

import numpy as np
import scipy.sparse
from sklearn.base import BaseEstimator, TransformerMixin

try:  # scikit-learn >= 1.2
    from sklearn.base import ClassNamePrefixFeaturesOutMixin
except ImportError:  # pragma: no cover
    ClassNamePrefixFeaturesOutMixin = object  # type: ignore
from sklearn.utils.validation import check_is_fitted

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn

    def _validate_data(est: Any, X: Any, **kw: Any) -> Any:
        return est._validate_data(X, **kw)


try:  # scikit-learn >= 1.9 returns the configured sparse interface
    from sklearn.utils._sparse import _align_api_if_sparse
except ImportError:  # pragma: no cover

    def _align_api_if_sparse(X: Any) -> Any:
        return X


try:  # scikit-learn >= 1.2 validates constructor arguments against declared constraints
    from sklearn.neighbors import KNeighborsTransformer as _SkKNT
    from sklearn.neighbors import NearestNeighbors as _SkNN
    from sklearn.neighbors import RadiusNeighborsTransformer as _SkRNT
    from sklearn.utils._param_validation import StrOptions as _StrOptions

    def _constraints(sk: Any, **ours: Any) -> dict:
        """scikit-learn's constraints for ``sk``'s arguments, with voisin's metrics (any name
        voisin knows, checked when the index is built) and voisin's own arguments."""
        c = dict(sk._parameter_constraints)
        c["metric"] = [str, callable]
        c["distances"] = [_StrOptions({"f32", "f64"})]
        c["device"] = [str]
        c["precision"] = [str]
        # voisin's indexes as well as scikit-learn's names, checked when the index is built.
        c["algorithm"] = [str]
        c.update(ours)
        return c
except (ImportError, AttributeError):  # pragma: no cover - older scikit-learn

    def _constraints(sk: Any, **ours: Any) -> dict:
        return {}

    _SkNN = _SkKNT = _SkRNT = None

from ._functions import _Progress, csr_matrix, csr_rows, exact_distances, index, metric_spec
from ._index import native_index, resolve_algorithm
from ._inputs import is_strings, strings, vectors
from ._ties import all_ties, masked

__all__ = ["NearestNeighbors", "KNeighborsTransformer", "RadiusNeighborsTransformer"]

_STRING_METRICS = ("levenshtein", "edit")


class _Neighbors(BaseEstimator):
    """What the three estimators share: fitting, k-NN and radius queries."""

    def _set_common(self, metric: Any, p: Optional[float], metric_params: Optional[dict],
                    leaf_size: int, device: str, precision: str, n_jobs: Optional[int],
                    progress: Any, distances: str) -> None:
        """Stores the parameters every estimator takes (called by each ``__init__``)."""
        self.leaf_size = leaf_size
        self.metric = metric
        self.p = p
        self.metric_params = metric_params
        self.device = device
        self.precision = precision
        self.n_jobs = n_jobs
        self.progress = progress
        self.distances = distances

    def _takes_strings(self, X: Any) -> bool:
        m = self.metric
        return (isinstance(m, str) and m.lower() in _STRING_METRICS) or is_strings(X)

    def _check_params(self) -> None:
        validate = getattr(self, "_validate_params", None)
        if validate is not None and self._parameter_constraints:
            validate()  # scikit-learn's own checks and messages (InvalidParameterError)
        if not (callable(self.metric) or isinstance(self.metric, str)):
            raise TypeError("metric must be a str or a callable")
        if getattr(self, "mode", "connectivity") not in ("connectivity", "distance"):
            raise ValueError(
                'Unsupported mode, must be one of "connectivity", or "distance" but got '
                f'"{self.mode}" instead'
            )
        exact_distances(getattr(self, "distances", "f64"))
        self._effective_p()

    def _effective_p(self) -> Optional[float]:
        """The order of minkowski: ``metric_params["p"]`` over ``p``, as scikit-learn takes
        it; any other metric parameter is refused with what voisin does instead."""
        params = dict(self.metric_params or {})
        p = params.pop("p", self.p)
        if self.metric_params and "p" in self.metric_params and self.p is not None:
            warnings.warn("Parameter p is found in metric_params. The corresponding parameter "
                          "from __init__ is ignored.", SyntaxWarning, stacklevel=4)
        if params:
            hint = (" For minkowski weights w, scale the data instead: X * w ** (1 / p) under "
                    "minkowski is weighted minkowski with w." if "w" in params else "")
            raise ValueError(
                f"metric_params {sorted(params)} are not supported: voisin's metrics take no "
                f"parameters but minkowski's p (metric_params={{'p': 3}} or p=3).{hint}")
        return 2 if p is None else p

    def _effective_metric_params(self) -> dict:
        """``effective_metric_params_`` as scikit-learn sets it: minkowski keeps its p (and
        weights, None) unless they name cityblock, euclidean or chebyshev."""
        params = dict(self.metric_params or {})
        p = params.pop("p", self.p)
        if self.metric == "minkowski" and (p if p is not None else 2) not in (1, 2, np.inf):
            params.update(p=p, w=None)
        return params

    def _exact(self) -> bool:
        return exact_distances(getattr(self, "distances", "f64"))

    def fit(self, X: Any, y: Any = None) -> "_Neighbors":
        """Fit the nearest neighbours estimator from the training data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or list of str
            Training data (strings take ``metric="levenshtein"`` or a callable).
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        self
            The fitted estimator.
        """
        self._check_params()
        if self._takes_strings(X):
            data = strings(X, "X")
        else:
            X = _validate_data(self, X, accept_sparse=False, ensure_all_finite=False,
                               dtype=None if _is_numeric(X) else "numeric")
            data = vectors(X, "X")
        self._fit_X = data
        self.n_samples_fit_ = len(data)
        self.effective_metric_ = metric_spec(self.metric, self._effective_p())
        self.effective_metric_params_ = self._effective_metric_params()
        self._index = self._build_index()
        return self

    def _build_index(self) -> Any:
        kind = resolve_algorithm(getattr(self, "algorithm", "auto"))
        if kind is not None:
            return native_index(self._fit_X, self.metric, kind, p=self._effective_p(),
                                device=self.device, n_jobs=self.n_jobs)
        return index(self._fit_X, self.metric, p=self._effective_p(), device=self.device,
                     precision=self.precision, n_jobs=self.n_jobs, memory=None)

    def _native(self) -> Any:
        idx = getattr(self, "_index", None)
        if idx is None:
            idx = self._index = self._build_index()
        return idx

    def __getstate__(self) -> dict:
        state = super().__getstate__() if hasattr(super(), "__getstate__") else dict(self.__dict__)
        state = dict(state)
        state.pop("_index", None)
        return state

    def _queries(self, X: Any) -> Any:
        if isinstance(self._fit_X, list):
            return strings(X, "X")
        if (type(X) is np.ndarray and X.dtype == np.float32 and X.ndim == 2 and len(X)
                and X.shape[1] == self.n_features_in_
                and not hasattr(self, "feature_names_in_")):
            # What scikit-learn's checks would pass through unchanged, without their cost
            # (about 80 us, a fair share of a single query's time).
            return X
        X = _validate_data(self, X, accept_sparse=False, ensure_all_finite=False, reset=False,
                           dtype=None if _is_numeric(X) else "numeric")
        return vectors(X, "X")

    def kneighbors(self, X: Any = None, n_neighbors: Optional[int] = None,
                   return_distance: bool = True, ties: str = "first") -> Any:
        """Find the k nearest neighbours of points.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features), or None
            The query points. If None, the neighbours of each fitted point are returned, the
            point itself excluded (duplicates of it are other points and may be returned).
        n_neighbors : int, optional
            Number of neighbours per query (default: the ``n_neighbors`` parameter).
        return_distance : bool, default=True
            Whether to return the distances.
        ties : {"first", "all"}, default="first"
            ``first``: exactly ``n_neighbors``, ties at the last distance to the smaller
            index. ``all``: every fitted point at that distance as well; the arrays are then
            masked arrays (``numpy.ma``) padded to the longest row, the padding masked (index
            -1, distance inf, -inf for ``inner_product``).

        Returns
        -------
        neigh_dist : ndarray of shape (n_queries, n_neighbors), float64
            Distances, ascending (only when ``return_distance``).
        neigh_ind : ndarray of shape (n_queries, n_neighbors), int64
            Indices of the nearest fitted points; ties go to the smaller index.
        """
        every_tie = all_ties(ties)
        check_is_fitted(self)
        if n_neighbors is None:
            n_neighbors = self.n_neighbors
        if n_neighbors is None:
            raise ValueError("n_neighbors is None: give it to the constructor or to this call")
        elif n_neighbors <= 0:
            raise ValueError("Expected n_neighbors > 0. Got %d" % n_neighbors)
        elif not isinstance(n_neighbors, numbers.Integral):
            raise TypeError(
                "n_neighbors does not take %s value, enter integer value" % type(n_neighbors)
            )
        n_fit = self.n_samples_fit_
        query_is_train = X is None
        if not query_is_train:
            X = self._queries(X)
        wanted = n_neighbors + 1 if query_is_train else n_neighbors
        if wanted > n_fit:
            n_samples = n_fit if query_is_train else len(X)
            raise ValueError(
                "Expected n_neighbors <= n_samples_fit, but n_neighbors = %d, n_samples_fit = "
                "%d, n_samples = %d" % (wanted, n_fit, n_samples)
            )
        exact = self._exact() and return_distance
        with _Progress(getattr(self, "progress", False), "voisin kneighbors") as cb:
            native = self._native()
            if every_tie:
                rows = (native.graph(int(n_neighbors), cb, exact=exact, ties=True)
                        if query_is_train else
                        native.knn(X, int(n_neighbors), cb, exact=exact, ties=True))
                dist, ind = masked(rows, native.metric)
            elif query_is_train:
                dist, ind = self._native().graph(int(n_neighbors), cb, False, exact)
            else:
                dist, ind = self._native().knn(X, int(n_neighbors), cb, exact)
        return (dist, ind) if return_distance else ind

    def kneighbors_graph(self, X: Any = None, n_neighbors: Optional[int] = None,
                         mode: str = "connectivity", ties: str = "first") -> Any:
        """The (weighted) graph of k-neighbours of points in X.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features), or None
            The query points; None means the fitted points, each without itself.
        n_neighbors : int, optional
            Neighbours per row (default: the ``n_neighbors`` parameter).
        mode : {"connectivity", "distance"}, default="connectivity"
            Ones, or the distances, as the matrix values.
        ties : {"first", "all"}, default="first"
            As for :meth:`kneighbors`: with ``all``, rows hold every fitted point at the last
            distance as well, and have their own lengths.

        Returns
        -------
        A : sparse matrix of shape (n_queries, n_samples_fit)
            CSR, each row's entries in order of distance; explicit zeros kept.
        """
        every_tie = all_ties(ties)
        check_is_fitted(self)
        if n_neighbors is None:
            n_neighbors = self.n_neighbors
        if mode not in ("connectivity", "distance"):
            raise ValueError(
                'Unsupported mode, must be one of "connectivity", or "distance" but got '
                f'"{mode}" instead'
            )
        if mode == "connectivity":  # no distances to compute exactly
            ind = self.kneighbors(X, n_neighbors, return_distance=False, ties=ties)
            dist = np.ones(ind.shape)
        else:
            dist, ind = self.kneighbors(X, n_neighbors, ties=ties)
        if every_tie:  # rows of their own lengths: the unmasked entries, row by row
            offsets = np.concatenate([[0], np.cumsum(ind.count(axis=1))]).astype(np.int64)
            values = dist.compressed() if mode == "distance" else np.ones(offsets[-1])
            A = scipy.sparse.csr_matrix((values, ind.compressed(), offsets),
                                        shape=(len(offsets) - 1, self.n_samples_fit_))
            return _align_api_if_sparse(A)
        return _align_api_if_sparse(csr_rows(dist, ind, self.n_samples_fit_))

    def _range(self, X: Any, radius: Optional[float], exact: bool = True) -> Any:
        check_is_fitted(self)
        if radius is None:
            radius = self.radius
        query_is_train = X is None
        queries = self._fit_X if query_is_train else self._queries(X)
        exact = exact and self._exact()
        with _Progress(getattr(self, "progress", False), "voisin radius") as cb:
            offsets, ind, dist = self._native().range(queries, float(radius), cb, exact)
        if query_is_train:
            rows = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
            keep = ind != rows
            ind, dist = ind[keep], dist[keep]
            offsets = np.concatenate([[0], np.cumsum(np.bincount(rows[keep],
                                                                  minlength=len(offsets) - 1))])
        return offsets.astype(np.int64), ind, dist

    def radius_neighbors(self, X: Any = None, radius: Optional[float] = None,
                         return_distance: bool = True, sort_results: bool = False) -> Any:
        """Find the neighbours within a given radius of points.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features), or None
            The query points; None means the fitted points, each without itself.
        radius : float, optional
            Inclusive limit (default: the ``radius`` parameter).
        return_distance : bool, default=True
            Whether to return the distances.
        sort_results : bool, default=False
            Accepted for scikit-learn's API: results are always sorted by distance, then
            index. Requires ``return_distance=True``, as in scikit-learn.

        Returns
        -------
        neigh_dist : ndarray of shape (n_queries,) of arrays
            Distances of each query's neighbours (only when ``return_distance``).
        neigh_ind : ndarray of shape (n_queries,) of arrays
            Indices of each query's neighbours.
        """
        if sort_results and not return_distance:
            raise ValueError("return_distance must be True if sort_results is True.")
        offsets, ind, dist = self._range(X, radius, exact=return_distance)
        n = len(offsets) - 1
        neigh_ind = np.empty(n, dtype=object)
        neigh_ind[:] = np.split(ind, offsets[1:-1]) if n else []
        if not return_distance:
            return neigh_ind
        neigh_dist = np.empty(n, dtype=object)
        neigh_dist[:] = np.split(dist, offsets[1:-1]) if n else []
        return neigh_dist, neigh_ind

    def radius_neighbors_graph(self, X: Any = None, radius: Optional[float] = None,
                               mode: str = "connectivity", sort_results: bool = False) -> Any:
        """The (weighted) graph of neighbours within a radius of points in X.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features), or None
            The query points; None means the fitted points, each without itself.
        radius : float, optional
            Inclusive limit (default: the ``radius`` parameter).
        mode : {"connectivity", "distance"}, default="connectivity"
            Ones, or the distances, as the matrix values.
        sort_results : bool, default=False
            Accepted for scikit-learn's API: rows are always sorted by distance.

        Returns
        -------
        A : sparse matrix of shape (n_queries, n_samples_fit)
            CSR; explicit zeros kept.
        """
        if mode not in ("connectivity", "distance"):
            raise ValueError(
                'Unsupported mode, must be one of "connectivity", or "distance" but got '
                f'"{mode}" instead'
            )
        offsets, ind, dist = self._range(X, radius, exact=mode == "distance")
        if mode == "connectivity":
            dist = np.ones(len(ind))
        A = scipy.sparse.csr_matrix((dist, ind, offsets),
                                    shape=(len(offsets) - 1, self.n_samples_fit_))
        return _align_api_if_sparse(A)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        return tags

    def _more_tags(self) -> dict:  # scikit-learn < 1.6
        return {"allow_nan": False}


def _is_numeric(X: Any) -> bool:
    return isinstance(X, np.ndarray) and X.dtype.kind in "fiub"


_COMMON_DOC = """
    leaf_size : int, default=30
        Accepted as scikit-learn accepts it (an int of at least 1) and without effect:
        voisin's engines answer exactly by brute force, with no tree whose leaves it would
        size (scikit-learn's ``algorithm="brute"`` ignores it too).
    metric : str or callable, default="minkowski"
        ``minkowski`` with ``p`` (``p=2`` is ``euclidean``, 1 ``cityblock``, inf
        ``chebyshev``), ``euclidean``, ``sqeuclidean``, ``cosine``, ``correlation``,
        ``inner_product``, ``cityblock``/``manhattan``, ``chebyshev``, ``levenshtein`` (X a
        list of str), or a callable ``f(a, b) -> float`` (CPU only).
    p : float, default=2
        Order of ``minkowski`` (at least 1: smaller orders are no metric, and voisin refuses
        them).
    metric_params : dict, optional
        ``{"p": order}`` for ``minkowski`` (it wins over ``p``, with scikit-learn's warning);
        any other key is refused with a ``ValueError`` (voisin's metrics take no other
        parameter; weighted minkowski is minkowski on the data scaled by ``w ** (1 / p)``).
    n_jobs : int, optional
        CPU threads: ``None`` (the default) or ``-1`` every core, ``-2`` every core but one,
        and so on (scikit-learn's default is one core, voisin's every core).
    algorithm : {"auto", "brute", "lc", "sss", "cover", "kd", "kd_tree", "ball_tree"}, default="auto"
        ``auto`` and ``brute``: brute force (on a GPU when one is usable); ``lc`` (List of
        Clusters), ``sss`` (SSS pivots), ``cover`` (cover tree) or ``kd`` (k-d tree): a metric
        index built at ``fit`` (see :class:`voisin.Index`; true metrics only). scikit-learn's
        ``kd_tree`` is ``kd``, its ``ball_tree`` the cover tree.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        ``auto`` uses an NVIDIA GPU when one is usable, the CPU otherwise.
    precision : {"auto", "fp32", "tf32", "fp16x3", "fp16", "bf16", "int8"}, default="auto"
        GPU arithmetic of the candidate filter; answers are exact either way.
    distances : {"f64", "f32"}, default="f64"
        ``f64``: float64 distances, the exact values (scikit-learn's type); ``f32``: float32,
        each exact distance rounded to float32 (no recomputation of the returned entries).
    progress : bool or callable, default=False
        ``True`` shows a tqdm bar during long calls; a callable receives ``(done, total)``.
"""


class NearestNeighbors(_Neighbors):
    __doc__ = (
        """Exact unsupervised nearest neighbours (scikit-learn's ``NearestNeighbors`` API).

    Parameters
    ----------
    n_neighbors : int, default=5
        Number of neighbours for :meth:`kneighbors` queries.
    radius : float, default=1.0
        Range of :meth:`radius_neighbors` queries."""
        + _COMMON_DOC
        + """
    Attributes
    ----------
    n_samples_fit_ : int
        Number of fitted samples.
    n_features_in_ : int
        Number of features seen during fit (vectors only).
    effective_metric_ : str or callable
        voisin's name of the metric used.

    Examples
    --------
    >>> import numpy as np, voisin
    >>> X = np.array([[0, 0], [0, 1], [5, 5]], dtype=np.float32)
    >>> nn = voisin.NearestNeighbors(n_neighbors=1, device="cpu").fit(X)
    >>> nn.kneighbors(return_distance=False).ravel().tolist()
    [1, 0, 1]
    """
    )

    _parameter_constraints = _constraints(_SkNN)

    def __init__(self, *, n_neighbors: int = 5, radius: float = 1.0, leaf_size: int = 30,
                 metric: Any = "minkowski", p: float = 2, metric_params: Optional[dict] = None,
                 n_jobs: Optional[int] = None, device: str = "auto", precision: str = "auto",
                 distances: str = "f64", progress: Any = False, algorithm: str = "auto"):
        self.n_neighbors = n_neighbors
        self.radius = radius
        self._set_common(metric, p, metric_params, leaf_size, device, precision, n_jobs,
                         progress, distances)
        self.algorithm = algorithm


class _GraphTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, _Neighbors):
    """What the two transformers share: one output feature per fitted sample."""

    def fit(self, X: Any, y: Any = None) -> "_GraphTransformer":
        """Fit the transformer from the training data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or list of str
            Training data.
        y : Ignored
            Not used.

        Returns
        -------
        self
            The fitted transformer.
        """
        super().fit(X)
        self._n_features_out = self.n_samples_fit_
        return self

    def fit_transform(self, X: Any, y: Any = None) -> Any:
        """Fit to X, then transform X.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training set.
        y : Ignored
            Not used.

        Returns
        -------
        Xt : sparse matrix of shape (n_samples, n_samples)
            As :meth:`transform`.
        """
        return self.fit(X).transform(X)


class KNeighborsTransformer(_GraphTransformer):
    __doc__ = (
        """Transform X into a (weighted) graph of its k nearest neighbours.

    scikit-learn's ``KNeighborsTransformer`` contract: each row holds the point itself (a
    query equal to a fitted point is at distance 0) and, in ``mode="distance"``, one more
    neighbour than ``n_neighbors``, so that estimators taking ``metric="precomputed"`` with
    ``n_neighbors`` neighbours (TSNE, Isomap, UMAP, scanpy) find enough of them.

    Parameters
    ----------
    mode : {"distance", "connectivity"}, default="distance"
        Distances, or ones, as the matrix values.
    n_neighbors : int, default=5
        Neighbours per sample (one more in distance mode)."""
        + _COMMON_DOC
        + """
    Examples
    --------
    >>> import numpy as np, voisin
    >>> X = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
    >>> G = voisin.KNeighborsTransformer(n_neighbors=5, device="cpu").fit_transform(X)
    >>> G.shape, G.getnnz(axis=1).max()
    ((100, 100), 6)
    """
    )

    _parameter_constraints = _constraints(_SkKNT)

    def __init__(self, *, mode: str = "distance", n_neighbors: int = 5, leaf_size: int = 30,
                 metric: Any = "minkowski", p: float = 2, metric_params: Optional[dict] = None,
                 n_jobs: Optional[int] = None, device: str = "auto", precision: str = "auto",
                 distances: str = "f64", progress: Any = False, algorithm: str = "auto"):
        self.mode = mode
        self.n_neighbors = n_neighbors
        self._set_common(metric, p, metric_params, leaf_size, device, precision, n_jobs,
                         progress, distances)
        self.algorithm = algorithm

    def fit_transform(self, X: Any, y: Any = None) -> Any:
        """Fit to X, then transform X: the k-neighbours graph of X, from one graph request.

        The same graph as ``fit(X).transform(X)`` (scikit-learn's definition), computed as
        the symmetric k-NN graph of X with each point itself first in its row: about half
        the work of searching X against itself, and the row of a point with exact
        duplicates always holds the point itself (then its duplicates, smaller index first).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training set.
        y : Ignored
            Not used.

        Returns
        -------
        Xt : sparse matrix of shape (n_samples, n_samples)
            CSR; ``n_neighbors`` entries per row (``n_neighbors + 1`` in distance mode), the
            point itself first at distance 0, then by distance and index.
        """
        self.fit(X)
        n = self.n_samples_fit_
        entries = self.n_neighbors + (self.mode == "distance")
        if entries > n:
            raise ValueError(
                "Expected n_neighbors <= n_samples_fit, but n_neighbors = %d, n_samples_fit = "
                "%d, n_samples = %d" % (entries, n, n)
            )
        distance = self.mode == "distance"
        if entries > 1:
            with _Progress(getattr(self, "progress", False), "voisin kneighbors") as cb:
                rows = self._native().graph(entries - 1, cb, True, distance and self._exact(),
                                            False, True)
        else:  # each row the point alone
            rows = (np.arange(n + 1), np.arange(n), np.zeros(n))
        if not distance:
            rows = (rows[0], rows[1], np.ones(len(rows[1])))
        return _align_api_if_sparse(csr_matrix(rows, n))

    def transform(self, X: Any) -> Any:
        """The k-neighbours graph of the points of X against the fitted points.

        Parameters
        ----------
        X : array-like of shape (n_samples_transform, n_features)
            Sample data.

        Returns
        -------
        Xt : sparse matrix of shape (n_samples_transform, n_samples_fit)
            CSR; ``n_neighbors`` entries per row (``n_neighbors + 1`` in distance mode),
            sorted by distance, the diagonal explicit.
        """
        check_is_fitted(self)
        add_one = self.mode == "distance"
        return self.kneighbors_graph(X, mode=self.mode, n_neighbors=self.n_neighbors + add_one)

class RadiusNeighborsTransformer(_GraphTransformer):
    __doc__ = (
        """Transform X into a (weighted) graph of its neighbours within a radius.

    scikit-learn's ``RadiusNeighborsTransformer`` contract: each row holds every fitted point
    within ``radius`` (the point itself included), sorted by distance.

    Parameters
    ----------
    mode : {"distance", "connectivity"}, default="distance"
        Distances, or ones, as the matrix values.
    radius : float, default=1.0
        Inclusive radius of the neighbourhoods."""
        + _COMMON_DOC
    )

    _parameter_constraints = _constraints(_SkRNT)

    def __init__(self, *, mode: str = "distance", radius: float = 1.0, leaf_size: int = 30,
                 metric: Any = "minkowski", p: float = 2, metric_params: Optional[dict] = None,
                 n_jobs: Optional[int] = None, device: str = "auto", precision: str = "auto",
                 distances: str = "f64", progress: Any = False, algorithm: str = "auto"):
        self.mode = mode
        self.radius = radius
        self._set_common(metric, p, metric_params, leaf_size, device, precision, n_jobs,
                         progress, distances)
        self.algorithm = algorithm

    def transform(self, X: Any) -> Any:
        """The radius-neighbours graph of the points of X against the fitted points.

        Parameters
        ----------
        X : array-like of shape (n_samples_transform, n_features)
            Sample data.

        Returns
        -------
        Xt : sparse matrix of shape (n_samples_transform, n_samples_fit)
            CSR, rows sorted by distance, the diagonal explicit.
        """
        check_is_fitted(self)
        return self.radius_neighbors_graph(X, mode=self.mode, sort_results=True)
