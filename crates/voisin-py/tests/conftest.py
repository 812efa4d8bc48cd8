import numpy as np
import pytest

import voisin


def pytest_collection_modifyitems(config, items):
    if voisin.cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (voisin.cuda_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
