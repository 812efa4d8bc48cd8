"""Turning what callers pass into what the native extension reads.

Vectors become a 2-D NumPy array of float32, float16 or uint8 (float32 C-contiguous arrays pass
through without a copy); strings become a list of ``str``. Other numeric types are accepted
when every value converts exactly: integers up to 2**24 in magnitude, and float64 values that
float32 holds exactly (once voisin stores float64, every float64 array is answered for its own
values). The messages are the command line's, less its file name.
"""

from __future__ import annotations

from typing import Any, List, Union

import sys

import numpy as np

from . import _voisin

Items = Union[np.ndarray, List[str]]

_NATIVE = (np.float32, np.float16, np.uint8)
_INT_LIMIT = 1 << 24
_F64_INT_LIMIT = 1 << 53


def _first_bad(bad: np.ndarray) -> tuple:
    flat = int(np.flatnonzero(bad.ravel())[0])
    return divmod(flat, bad.shape[1])


def is_strings(X: Any) -> bool:
    """Whether ``X`` holds strings (a list/tuple of ``str`` or a NumPy array of ``str``)."""
    if isinstance(X, (list, tuple)):
        return any(isinstance(s, str) for s in X)
    if isinstance(X, np.ndarray):
        if X.dtype.kind == "U":
            return True
        if X.dtype == object and X.ndim == 1:
            return any(isinstance(s, str) for s in X)
    return False


def strings(X: Any, what: str) -> List[str]:
    """A list of ``str`` from a list, tuple or 1-D NumPy array of strings."""
    if isinstance(X, np.ndarray):
        if X.ndim != 1:
            raise ValueError(f"{what}: expected a 1-D array of strings, got {X.ndim}-D")
        X = X.tolist()
    out = list(X)
    for i, s in enumerate(out):
        if not isinstance(s, str):
            raise TypeError(f"{what}: item {i} is {type(s).__name__}, not str")
    if not out:
        raise ValueError(f"{what}: no strings (an empty list)")
    return out


def vectors(X: Any, what: str) -> np.ndarray:
    """A 2-D array of a dtype the extension reads, or a clear ``ValueError``/``TypeError``."""
    sparse = sys.modules.get("scipy.sparse")  # a sparse matrix means scipy is loaded
    if sparse is not None and sparse.issparse(X):
        raise TypeError(f"{what}: sparse matrices are not supported; pass a dense array")
    if not isinstance(X, np.ndarray):
        try:
            X = np.asarray(X)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{what}: not a rectangular numeric array ({e})") from None
    if X.ndim != 2:
        raise ValueError(
            f"{what}: expected a 2-D array (items x dimension), got a {X.ndim}-D array "
            f"of shape {X.shape}"
        )
    if X.shape[0] == 0:
        raise ValueError(f"{what}: empty (0 rows of dimension {X.shape[1]})")
    if X.shape[1] == 0:
        raise ValueError(f"{what}: vectors have dimension 0")
    kind = X.dtype.kind
    if kind in "cOUSVMm" or kind not in "fiub":
        raise TypeError(
            f"{what}: unsupported dtype {X.dtype} (supported: float32, float16, uint8; also "
            "float64, bool and integers up to 2^53, answered exactly for their own values)"
        )
    if not X.dtype.isnative:
        X = X.astype(X.dtype.newbyteorder("="))
    if X.dtype in _NATIVE:
        return X
    if kind == "b":
        return X.astype(np.uint8)
    if kind in "iu":
        big = np.abs(X.astype(np.float64)) > _INT_LIMIT
        if big.any() and getattr(_voisin, "EXACT_FLOAT64", False):
            # float64 holds every integer up to 2^53: stored as f64, answered exactly.
            huge = (X > _F64_INT_LIMIT) | (X < -_F64_INT_LIMIT)
            if not huge.any():
                return np.ascontiguousarray(X, dtype=np.float64)
            r, c = _first_bad(huge)
            raise ValueError(
                f"{what}: value {X[r, c].item()} at row {r}, column {c} has no exact float64 "
                "form: its magnitude exceeds 2^53 = 9007199254740992, beyond which float64 "
                "cannot hold every integer"
            )
        if big.any():
            r, c = _first_bad(big)
            raise ValueError(
                f"{what}: value {X[r, c].item()} at row {r}, column {c} has no exact f32 form: its "
                "magnitude exceeds 2^24 = 16777216, beyond which f32 cannot hold every integer"
            )
        return X.astype(np.float32)
    # float64 (and wider floats)
    if getattr(_voisin, "EXACT_FLOAT64", False):
        return np.ascontiguousarray(X, dtype=np.float64)
    X32 = X.astype(np.float32)
    with np.errstate(invalid="ignore"):
        rounded = (X32 != X) & ~np.isnan(X)
    if rounded.any():
        r, c = _first_bad(rounded)
        raise ValueError(
            f"{what}: value {X[r, c].item()!r} at row {r}, column {c} has no exact f32 form: it would "
            "be rounded; convert the data to float32 first"
        )
    return X32


def items(X: Any, what: str, metric: Any) -> Items:
    """Vectors or strings, by the data (and by the metric for an empty list)."""
    if is_strings(X) or (isinstance(metric, str) and metric.lower() in ("levenshtein", "edit")):
        if isinstance(X, np.ndarray) and X.dtype.kind in "fiub":
            raise TypeError(f"{what}: metric {metric} takes strings, got a numeric array")
        return strings(X, what)
    return vectors(X, what)
