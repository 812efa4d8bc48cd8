"""Type stubs of the native extension ``voisin._voisin`` (not public API)."""

from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str
EXACT_FLOAT64: bool

# arrays, host tensors with __dlpack__, or strings
_Items = Union[npt.NDArray[np.float32], npt.NDArray[np.float16], npt.NDArray[np.uint8],
               npt.NDArray[np.float64], Any, List[str]]
_Progress = Optional[Callable[[int, int], None]]

def cuda_available() -> bool: ...
def cuda_info() -> dict[str, Any]: ...

class Index:
    def __init__(
        self,
        data: _Items,
        metric_spec: Union[str, Callable[[Any, Any], float]],
        device: str = "auto",
        precision: str = "auto",
        threads: Optional[int] = None,
        memory: Optional[int] = None,
        check: bool = True,
    ) -> None: ...
    def __len__(self) -> int: ...
    @property
    def dim(self) -> Optional[int]: ...
    @property
    def device(self) -> str: ...
    @property
    def metric(self) -> str: ...
    @property
    def last_call_seconds(self) -> float: ...
    @property
    def stats(self) -> Dict[str, Any]: ...
    # Rows: (distances, indices), n x k; ragged (csr, pairs, range): (offsets, indices,
    # distances). Distances float32, or float64 with exact; indices int64, or int32 for csr
    # while they fit (scipy.sparse's index type).
    def knn(
        self, queries: _Items, k: int, progress: _Progress = None, exact: bool = False,
        csr: bool = False, ties: bool = False,
    ) -> Tuple[npt.NDArray[Any], ...]: ...
    def graph(
        self, k: int, progress: _Progress = None, include_self: bool = False,
        exact: bool = False, pairs: bool = False, csr: bool = False, ties: bool = False,
    ) -> Tuple[npt.NDArray[Any], ...]: ...
    def range(
        self, queries: _Items, radius: float, progress: _Progress = None, exact: bool = False,
        pairs: bool = False, csr: bool = False,
    ) -> Tuple[npt.NDArray[Any], ...]: ...

def _python_words(message: str) -> str: ...
