"""Rows with every item tied at the k-th distance (``ties="all"``): the native index answers them
as rows of their own lengths (offsets, indices, distances; each sorted by distance, then index),
shaped by the core as the command line's ``--ties all`` (the item itself first for
``include_self``, pairs, exact distances, CSR). This module checks the argument and pads those
rows into masked arrays for ``output="arrays"``."""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

Rows = Tuple[np.ndarray, np.ndarray, np.ndarray]


def all_ties(ties: Any, output: str = "arrays") -> bool:
    """Whether ``ties`` asks for every tie (``"all"``) rather than exactly k (``"first"``); every
    tie comes as NumPy masked arrays or a CSR matrix, not in another framework's arrays."""
    if not isinstance(ties, str) or ties not in ("first", "all"):
        raise ValueError(f"ties must be 'first' or 'all', got {ties!r}")
    if ties == "all" and output not in ("arrays", "numpy", "csr"):
        raise ValueError(f"ties='all' returns masked NumPy arrays (output='arrays') or a CSR "
                         f"matrix (output='csr'), not output={output!r}")
    return ties == "all"


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
    D = np.full((n, width), fill, dtype=dist.dtype)
    I = np.full((n, width), -1, dtype=np.int64)
    padding = np.ones((n, width), dtype=bool)
    D[row, col], I[row, col], padding[row, col] = dist, ind, False
    return (np.ma.MaskedArray(D, mask=padding, fill_value=fill),
            np.ma.MaskedArray(I, mask=padding.copy(), fill_value=-1))
