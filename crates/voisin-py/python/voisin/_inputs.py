"""Turning what callers pass into what the native extension reads.

Vectors become a 2-D NumPy array of float32, float16 or uint8 (float32 C-contiguous arrays pass
through without a copy), float64 (values float32 cannot hold, answered exactly), or a host
tensor of another framework read in place through DLPack (float32, float16, bfloat16, uint8,
int8: ``__dlpack__``, read by the native side); strings become a list of ``str``. Other
numeric types are accepted when every value converts exactly. A tensor in GPU memory is
brought to the host through its framework first (the CUDA engine uploads host rows). Every
copy made here is counted ([`counting`]) for the stats. The messages are the command line's,
less its file name.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Dict, Iterator, List, Union

import sys

import numpy as np

from . import _voisin

Items = Union[np.ndarray, List[str]]

_NATIVE = (np.float32, np.float16, np.uint8)
_INT_LIMIT = 1 << 24
_F64_INT_LIMIT = 1 << 53


# DLPack device types whose memory the host reads (kDLCPU, kDLCUDAHost), and the element types
# the native side reads in place from a DLPack tensor.
_HOST_DEVICES = (1, 3)
_DLPACK_NATIVE = ("float32", "float16", "bfloat16", "uint8", "int8")

_MOVED: contextvars.ContextVar = contextvars.ContextVar("voisin_moved", default=None)


@contextlib.contextmanager
def counting() -> Iterator[Dict[str, int]]:
    """Counts the bytes of vectors the conversions below copy, for a call's stats:
    ``host_copy_bytes`` (converted on the host) and ``device_to_host_bytes`` (brought from a
    GPU to the host)."""
    moved = {"host_copy_bytes": 0, "device_to_host_bytes": 0}
    token = _MOVED.set(moved)
    try:
        yield moved
    finally:
        _MOVED.reset(token)


def _count(key: str, nbytes: int) -> None:
    moved = _MOVED.get()
    if moved is not None:
        moved[key] += int(nbytes)


def _copied(original: Any, converted: np.ndarray) -> np.ndarray:
    """``converted``, counted as a host copy unless it is ``original``'s own memory."""
    if converted is not original and not (isinstance(original, np.ndarray)
                                          and np.shares_memory(original, converted)):
        _count("host_copy_bytes", converted.nbytes)
    return converted


def is_dlpack(X: Any) -> bool:
    """Whether ``X`` is another framework's tensor (not NumPy's) offering DLPack."""
    return not isinstance(X, np.ndarray) and hasattr(X, "__dlpack__") and hasattr(
        X, "__dlpack_device__")


def framework(X: Any) -> str:
    """The framework of a tensor: ``torch``, ``cupy``, ``jax``, or ``numpy`` for NumPy
    arrays and anything else."""
    top = type(X).__module__.split(".")[0]
    top = {"jaxlib": "jax"}.get(top, top)
    return top if is_dlpack(X) and top in ("torch", "cupy", "jax") else "numpy"


def _to_host(X: Any, what: str) -> Any:
    """A GPU tensor's values in host memory, through DLPack's copy to the host where the
    framework offers it, else through the framework's own call; counted."""
    try:
        host = np.from_dlpack(X, device="cpu", copy=True)
    except (TypeError, ValueError, BufferError, NotImplementedError, AttributeError):
        if hasattr(X, "detach") and hasattr(X, "cpu"):  # PyTorch (keeps bfloat16)
            host = X.detach().cpu()
        elif hasattr(X, "get"):  # CuPy
            host = X.get()
        else:
            try:
                host = np.asarray(X)  # JAX and others
            except Exception as e:
                raise TypeError(f"{what}: cannot bring this {type(X).__name__} from device "
                                f"{X.__dlpack_device__()} to the host ({e})") from None
    _count("device_to_host_bytes", _nbytes(host))
    return host


def _nbytes(X: Any) -> int:
    n = getattr(X, "nbytes", None)
    if n is None:  # PyTorch
        n = X.numel() * X.element_size()
    return int(n)


def _dlpack_vectors(X: Any, what: str) -> Any:
    """A tensor with ``__dlpack__``: itself when the native side reads it in place (host
    memory, a stored type), else a NumPy array of its values."""
    device = tuple(X.__dlpack_device__())
    if device[0] not in _HOST_DEVICES:
        X = _to_host(X, what)
        if isinstance(X, np.ndarray):
            return vectors(X, what)
    shape = tuple(X.shape)
    _check_shape(shape, what)
    if str(X.dtype).rsplit(".", 1)[-1] in _DLPACK_NATIVE:
        return X
    try:
        return vectors(np.from_dlpack(X), what)
    except (TypeError, BufferError, RuntimeError) as e:
        raise TypeError(f"{what}: unsupported dtype {X.dtype} ({e})") from None


def _check_shape(shape: tuple, what: str) -> None:
    if len(shape) != 2:
        raise ValueError(
            f"{what}: expected a 2-D array (items x dimension), got a {len(shape)}-D array "
            f"of shape {shape}"
        )
    if shape[0] == 0:
        raise ValueError(f"{what}: empty (0 rows of dimension {shape[1]})")
    if shape[1] == 0:
        raise ValueError(f"{what}: vectors have dimension 0")


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
    """A 2-D array of a dtype the extension reads (or a DLPack tensor it reads in place), or a
    clear ``ValueError``/``TypeError``."""
    sparse = sys.modules.get("scipy.sparse")  # a sparse matrix means scipy is loaded
    if sparse is not None and sparse.issparse(X):
        raise TypeError(f"{what}: sparse matrices are not supported; pass a dense array")
    if is_dlpack(X):
        return _dlpack_vectors(X, what)
    original = X
    return _copied(original, _numpy_vectors(X, what))


def _numpy_vectors(X: Any, what: str) -> np.ndarray:
    if not isinstance(X, np.ndarray):
        try:
            X = np.asarray(X)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{what}: not a rectangular numeric array ({e})") from None
    _check_shape(X.shape, what)
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
