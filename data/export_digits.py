"""Exports scikit-learn's bundled copy of the UCI handwritten digits to the big-ann .u8bin layout.

Writes digits.u8bin (1797 x 64 pixel intensities 0..16) and digits-labels.u8bin (1797 x 1 digit
labels 0..9). Layout: u32 n, u32 d (little endian), then n*d bytes row-major. Run from anywhere:
    python3 data/export_digits.py
Needs scikit-learn and numpy (pip install scikit-learn numpy); no network access.
"""

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits


def write_u8bin(path: Path, rows: np.ndarray) -> None:
    rows = np.ascontiguousarray(rows, dtype=np.uint8)
    header = np.array(rows.shape, dtype="<u4")
    path.write_bytes(header.tobytes() + rows.tobytes())


def main() -> None:
    digits = load_digits()
    pixels = digits.data
    # The pixels are counts of set bits in 4x4 blocks, so integers 0..16: u8 loses nothing.
    assert pixels.min() >= 0 and pixels.max() <= 16 and np.all(pixels == np.round(pixels))
    here = Path(__file__).resolve().parent
    write_u8bin(here / "digits.u8bin", pixels)
    write_u8bin(here / "digits-labels.u8bin", digits.target.reshape(-1, 1))
    print(f"wrote {pixels.shape[0]} x {pixels.shape[1]} digits and their labels to {here}")


if __name__ == "__main__":
    main()
