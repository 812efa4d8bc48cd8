#!/usr/bin/env python3
"""Draws the demo's digits as a 2-D embedding of voisin's graph, coloured by digit: `voisin graph`
builds the exact 31-NN graph of data/digits.u8bin, each row starting with the item itself
(--include-self -k 32: scikit-learn's convention), as a scipy sparse matrix (.csr.npz), and
scikit-learn's t-SNE lays it out from that sparse graph of distances alone (it never sees the
pixels; perplexity 10 needs 3 x 10 + 1 neighbours per row).

Usage: python3 scripts/digits_embedding.py [VOISIN_BINARY] [OUT.png]
(default binary: `voisin` on the PATH; default picture: scripts/digits_embedding.png; needs
numpy, scipy, scikit-learn and matplotlib)
"""

import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from sklearn.manifold import TSNE  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main():
    voisin = sys.argv[1] if len(sys.argv) > 1 else "voisin"
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "scripts" / "digits_embedding.png"
    with tempfile.TemporaryDirectory() as tmp:
        graph = Path(tmp) / "digits.csr.npz"
        subprocess.run(
            [voisin, "graph", "--input", str(ROOT / "data/digits.u8bin"), "-k", "32", "--include-self",
             "--out", str(graph)],
            check=True,
        )
        g = sp.load_npz(graph)
    xy = TSNE(
        metric="precomputed", perplexity=10, init="random", random_state=0
    ).fit_transform(g)
    labels = np.fromfile(ROOT / "data/digits-labels.u8bin", dtype=np.uint8)[8:]
    assert len(labels) == g.shape[0]

    fig, ax = plt.subplots(figsize=(7, 6))
    points = ax.scatter(xy[:, 0], xy[:, 1], c=labels, cmap="tab10", s=6, vmin=-0.5, vmax=9.5)
    for d in range(10):
        cx, cy = np.median(xy[labels == d], axis=0)
        ax.annotate(str(d), (cx, cy), fontsize=14, weight="bold", ha="center", va="center")
    fig.colorbar(points, ticks=range(10), label="digit")
    ax.set_title("UCI digits (1797 images): t-SNE of voisin's exact 31-NN graph (.csr.npz)",
                 fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
