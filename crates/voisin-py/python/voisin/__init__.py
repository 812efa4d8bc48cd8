"""voisin: exact nearest-neighbour search, k-NN graphs and range search, on CPUs and NVIDIA GPUs.

Functions :func:`knn`, :func:`knn_graph` and :func:`range_search` take NumPy arrays (or lists
of strings for ``levenshtein``) and return NumPy arrays or ``scipy.sparse`` matrices; the
estimators :class:`NearestNeighbors`, :class:`KNeighborsTransformer` and
:class:`RadiusNeighborsTransformer` follow scikit-learn's contracts, so graphs drop into
scikit-learn, UMAP and scanpy pipelines. Every answer is exact, ties broken by the smaller
index, identical on every device.
"""

from ._voisin import __version__
from ._functions import cuda_available, knn, knn_graph, range_search
from ._estimators import KNeighborsTransformer, NearestNeighbors, RadiusNeighborsTransformer

__all__ = [
    "knn",
    "knn_graph",
    "range_search",
    "cuda_available",
    "NearestNeighbors",
    "KNeighborsTransformer",
    "RadiusNeighborsTransformer",
    "__version__",
]
