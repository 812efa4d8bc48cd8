"""Rows with every item tied at the k-th distance (``ties="all"``): the native index answers them
in CSR form (offsets, indices, distances; rows of their own lengths, each sorted by distance,
then index); this module checks the argument and shapes those rows as the public functions and
estimators return them: masked arrays padded to the longest row, or a CSR matrix."""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

Rows = Tuple[np.ndarray, np.ndarray, np.ndarray]


def all_ties(ties: Any) -> bool:
    """Whether ``ties`` asks for every tie (``"all"``) rather than exactly k (``"first"``)."""
    if not isinstance(ties, str) or ties not in ("first", "all"):
        raise ValueError(f"ties must be 'first' or 'all', got {ties!r}")
    return ties == "all"


def with_self(rows: Rows) -> Rows:
    """Each row with its own item first, at distance 0 (``include_self``)."""
    offsets, ind, dist = rows
    n = len(offsets) - 1
    starts = offsets[:-1]
    ind = np.insert(ind, starts, np.arange(n, dtype=np.int64))
    dist = np.insert(dist, starts, 0.0)
    return offsets + np.arange(n + 1, dtype=np.int64), ind, dist


def masked(rows: Rows, metric: str) -> Tuple[np.ma.MaskedArray, np.ma.MaskedArray]:
    """(distances, indices) as masked arrays padded to the longest row: each row's entries
    first, the padding masked (index -1, distance inf; -inf for ``inner_product``, so that the
    data stay sorted as the rows are)."""
    offsets, ind, dist = rows
    n = len(offsets) - 1
    lens = np.diff(offsets)
    width = int(lens.max()) if n else 0
    row = np.repeat(np.arange(n), lens)
    col = np.arange(len(ind)) - np.repeat(offsets[:-1], lens)
    fill = -np.inf if metric == "inner_product" else np.inf
    D = np.full((n, width), fill)
    I = np.full((n, width), -1, dtype=np.int64)
    padding = np.ones((n, width), dtype=bool)
    D[row, col], I[row, col], padding[row, col] = dist, ind, False
    return (np.ma.MaskedArray(D, mask=padding, fill_value=fill),
            np.ma.MaskedArray(I, mask=padding.copy(), fill_value=-1))


def csr(rows: Rows, n_cols: int) -> "scipy.sparse.csr_matrix":
    """The rows as an ``n x n_cols`` CSR matrix of distances, in their order, zeros explicit."""
    import scipy.sparse

    offsets, ind, dist = rows
    return scipy.sparse.csr_matrix((dist, ind, offsets), shape=(len(offsets) - 1, n_cols))
