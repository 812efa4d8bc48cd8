"""voisin: exact nearest-neighbour search, k-NN graphs and range search, on CPUs and NVIDIA GPUs.

Functions :func:`knn`, :func:`knn_graph` and :func:`range_search` take NumPy arrays (or lists
of strings for ``levenshtein``) and return NumPy arrays or ``scipy.sparse`` matrices; the
estimators :class:`NearestNeighbors`, :class:`KNeighborsTransformer` and
:class:`RadiusNeighborsTransformer` follow scikit-learn's contracts, so graphs drop into
scikit-learn, UMAP and scanpy pipelines. :class:`Index` is a metric index (List of Clusters,
SSS, cover tree, k-d tree) built once, searched many times, and kept in voisin's index files;
the estimators take one through ``algorithm``. Every answer is exact, ties broken by the
smaller index, identical on every device.
"""

from ._voisin import __version__, cuda_info
from ._functions import cuda_available, knn, knn_graph, range_search
from ._index import Index
try:  # the estimators need scikit-learn (and scipy); the functions only NumPy
    from ._estimators import KNeighborsTransformer, NearestNeighbors, RadiusNeighborsTransformer
except ImportError as _missing:  # pragma: no cover - scikit-learn is a dependency
    _why = str(_missing)

    def _needs_sklearn(*args, **kwargs):
        raise ImportError(f"voisin's estimators need scikit-learn: {_why}")

    KNeighborsTransformer = NearestNeighbors = RadiusNeighborsTransformer = _needs_sklearn

__all__ = [
    "knn",
    "knn_graph",
    "range_search",
    "cuda_available",
    "Index",
    "cuda_info",
    "NearestNeighbors",
    "KNeighborsTransformer",
    "RadiusNeighborsTransformer",
    "__version__",
]
