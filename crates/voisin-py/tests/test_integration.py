"""The graphs drop into UMAP, scikit-learn's TSNE and Isomap, and scanpy without glue code."""

import warnings

import numpy as np
import pytest
from sklearn.manifold import TSNE, Isomap
from sklearn.pipeline import make_pipeline

import voisin


def blobs(rng, n, d, centers=4):
    c = rng.normal(scale=8.0, size=(centers, d))
    labels = rng.integers(0, centers, size=n)
    return (c[labels] + rng.normal(size=(n, d))).astype(np.float32), labels


def test_umap_precomputed_knn_from_knn_graph(rng):
    umap = pytest.importorskip("umap")
    X, labels = blobs(rng, 600, 10)
    dist, ind = voisin.knn_graph(X, 15, include_self=True, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        emb = umap.UMAP(n_neighbors=15, precomputed_knn=(ind, dist, None), random_state=0,
                        n_epochs=50).fit_transform(X)
    assert emb.shape == (600, 2) and np.isfinite(emb).all()


def test_tsne_and_isomap_behind_the_transformer_in_a_pipeline(rng):
    X, _ = blobs(rng, 300, 8)
    perplexity = 10
    tsne = make_pipeline(
        voisin.KNeighborsTransformer(n_neighbors=int(3 * perplexity + 1), device="cpu"),
        TSNE(metric="precomputed", init="random", perplexity=perplexity, random_state=0,
             max_iter=250),
    )
    emb = tsne.fit_transform(X)
    assert emb.shape == (300, 2) and np.isfinite(emb).all()
    X = rng.normal(size=(300, 8)).astype(np.float32)  # one connected component
    iso = make_pipeline(voisin.KNeighborsTransformer(n_neighbors=10, device="cpu"),
                        Isomap(n_neighbors=10, metric="precomputed"))
    emb = iso.fit_transform(X)
    assert emb.shape == (300, 2) and np.isfinite(emb).all()


def test_scanpy_neighbors_with_the_transformer(rng):
    sc = pytest.importorskip("scanpy")
    anndata = pytest.importorskip("anndata")
    X, _ = blobs(rng, 400, 20)
    ad = anndata.AnnData(X)
    sc.pp.neighbors(ad, n_neighbors=10, use_rep="X",
                    transformer=voisin.KNeighborsTransformer(n_neighbors=10, device="cpu"))
    from sklearn.neighbors import KNeighborsTransformer

    # the same graph as scikit-learn's transformer gives scanpy (float64, so that its rounding
    # noise stays below the tolerance)
    ref = anndata.AnnData(X.astype(np.float64))
    sc.pp.neighbors(ref, n_neighbors=10, use_rep="X",
                    transformer=KNeighborsTransformer(n_neighbors=10, algorithm="brute"))
    np.testing.assert_allclose(ad.obsp["distances"].toarray(), ref.obsp["distances"].toarray(),
                               rtol=1e-5, atol=1e-5)
    # connectivities as scanpy's own path computes them: it zeroes the self-distances that
    # scikit-learn's arithmetic leaves slightly positive (UMAP's rho depends on them), which
    # voisin returns as exact zeros
    ref = anndata.AnnData(X)
    sc.pp.neighbors(ref, n_neighbors=10, use_rep="X", transformer="sklearn")
    np.testing.assert_allclose(ad.obsp["connectivities"].toarray(),
                               ref.obsp["connectivities"].toarray(), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_100k_graph_into_umap_and_scanpy():
    """The workload of the issue: a 100k x 128 graph with k = 15, once per CI run."""
    umap = pytest.importorskip("umap")
    sc = pytest.importorskip("scanpy")
    anndata = pytest.importorskip("anndata")
    rng = np.random.default_rng(7)
    X, _ = blobs(rng, 100_000, 128, centers=20)
    transformer = voisin.KNeighborsTransformer(n_neighbors=15)
    G = transformer.fit_transform(X)
    assert G.shape == (100_000, 100_000) and G.nnz == 100_000 * 16
    ad = anndata.AnnData(X)
    sc.pp.neighbors(ad, n_neighbors=15, use_rep="X", transformer=transformer)
    assert ad.obsp["connectivities"].shape == (100_000, 100_000)
    # the same graph as UMAP's precomputed_knn: self in column 0, then 14 neighbours
    ind = G.indices.reshape(100_000, 16)[:, :15]
    dist = G.data.reshape(100_000, 16)[:, :15]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        emb = umap.UMAP(n_neighbors=15, precomputed_knn=(ind, dist, None), n_epochs=20,
                        random_state=0).fit_transform(X)
    assert emb.shape == (100_000, 2)
