#!/usr/bin/env python3
"""Real data sets that installed packages ship, written as f32 .fbin for gpu_bench's kinds table
(`gpu_bench --kinds digits=file:DIR/digits.fbin,...`, `gpu-check kinds`). Runs offline (the
device machine has numpy and scikit-learn, no network); prints the `--kinds` entries it wrote.

- digits: scikit-learn's bundled handwritten digits (`load_digits`), 1797 x 64 pixel counts
  0..16, as they are: no rows added, none changed (data/digits.u8bin holds the same values
  as u8).
- patches: every 8 x 8 x 3 patch at a stride of 4 pixels of the two photographs scikit-learn
  ships (`load_sample_images`: china.jpg and flower.jpg, 427 x 640 RGB), 192 values 0..255 a
  row: image features with the redundancy of real pictures (sky, blur). Needs Pillow, which
  `load_sample_images` reads the JPEGs with; left out, and said so, without it.

The word list's sentence embeddings need a model the device machine does not have:
bench/gpu/embed_words.py makes them where the model package installs, to carry.

usage: real_kinds.py OUT_DIR
"""
import sys
from pathlib import Path

import numpy as np


def write_fbin(path: Path, rows: np.ndarray) -> None:
    rows = np.ascontiguousarray(rows, dtype="<f4")
    path.write_bytes(np.array(rows.shape, dtype="<u4").tobytes() + rows.tobytes())


def digits() -> np.ndarray:
    from sklearn.datasets import load_digits

    return load_digits().data


def patches(size: int = 8, stride: int = 4) -> np.ndarray:
    from sklearn.datasets import load_sample_images

    out = []
    for image in load_sample_images().images:
        h, w, c = image.shape
        for y in range(0, h - size + 1, stride):
            for x in range(0, w - size + 1, stride):
                out.append(image[y : y + size, x : x + size].reshape(size * size * c))
    return np.stack(out)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, make in (("digits", digits), ("patches", patches)):
        try:
            rows = make()
        except ImportError as e:
            print(f"real_kinds: {name} left out: {e}", file=sys.stderr)
            continue
        path = out / f"{name}.fbin"
        write_fbin(path, rows)
        print(f"real_kinds: {path}: {rows.shape[0]} x {rows.shape[1]}", file=sys.stderr)
        entries.append(f"{name}=file:{path}")
    print(",".join(entries))


if __name__ == "__main__":
    main()
