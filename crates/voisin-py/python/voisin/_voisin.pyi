"""Type stubs of the native extension ``voisin._voisin`` (not public API)."""

from typing import Any, Callable, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str
EXACT_FLOAT64: bool

_Items = Union[npt.NDArray[np.float32], npt.NDArray[np.float16], npt.NDArray[np.uint8], List[str]]
_Progress = Optional[Callable[[int, int], None]]

def cuda_available() -> bool: ...

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
    def knn(
        self, queries: _Items, k: int, progress: _Progress = None
    ) -> Tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]: ...
    def graph(
        self, k: int, progress: _Progress = None
    ) -> Tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]: ...
    def range(
        self, queries: _Items, radius: float, progress: _Progress = None
    ) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]: ...
    def knn_ties(
        self, queries: _Items, k: int, progress: _Progress = None
    ) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]: ...
    def graph_ties(
        self, k: int, progress: _Progress = None
    ) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]: ...
