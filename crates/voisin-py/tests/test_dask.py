"""voisin.dask on a real LocalCluster of two worker processes: graphs and searches byte-identical
to the one-process functions, a worker killed mid-graph, a client killed and resumed."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import voisin

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
import voisin.dask as vd  # noqa: E402


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, worker_dashboard_address=None)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def same(got, want):
    """Byte-identical results: every array of the same dtype, shape and bytes."""
    if hasattr(want, "tocsr"):
        got, want = (got.indptr, got.indices, got.data), (want.indptr, want.indices, want.data)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


def words(n, rng):
    stems = ["cat", "cart", "care", "dog", "dot", "do", "", "a", "catalog", "zz"]
    return [stems[i % len(stems)] + "".join(rng.choice(list("ab"), size=i % 3)) for i in
            range(n)]


def sets(rng):
    n = 230
    grid = rng.integers(0, 3, size=(n, 3)).astype(np.float32)  # ties and duplicates
    cos = rng.normal(size=(n, 4)).astype(np.float32)
    cos[::17] = 0  # zero vectors: distance 1 from everything
    wide = rng.normal(size=(n, 5)) * np.exp(rng.uniform(-30, 30, size=(n, 1)))  # f64, not f32
    return {
        "normal": rng.normal(size=(n, 7)).astype(np.float32),
        "grid": grid,
        "cosine": cos,
        "f64": wide,
        "words": words(150, rng),
    }


CASES = [
    # (set, metric, k, block_rows, dask input, distances)
    ("normal", "euclidean", 15, 64, False, "f32"),
    ("normal", "euclidean", 229, 50, True, "f64"),
    ("grid", "euclidean", 1, 32, False, "f32"),
    ("grid", "sqeuclidean", 15, 40, True, "f64"),
    ("cosine", "cosine", 15, 70, False, "f64"),
    ("f64", "euclidean", 15, 64, True, "f64"),
    ("f64", "cityblock", 1, 100, False, "f32"),
    ("words", "levenshtein", 15, 32, False, "f64"),
    ("words", "levenshtein", 149, 64, False, "f32"),
    ("normal", "inner_product", 5, 60, False, "f64"),
]


@pytest.mark.parametrize("name,metric,k,rows,lazy,distances", CASES)
def test_graph_is_byte_identical(client, name, metric, k, rows, lazy, distances):
    X = sets(np.random.default_rng(7))[name]
    given = da.from_array(X, chunks=(37, -1)) if lazy else X
    kw = dict(metric=metric, device="cpu", distances=distances)
    got = vd.knn_graph(given, k, block_rows=rows, client=client, **kw)
    same(got, voisin.knn_graph(X, k, **kw))


GRAPH_FORMS = [
    dict(include_self=True),
    dict(output="csr"),
    dict(include_self=True, output="csr", distances="f64"),
    dict(include_self=True, distances="f64"),
    dict(pairs=True),
    dict(pairs=True, output="csr", distances="f64"),
]


def test_graph_options_match(client):
    X = sets(np.random.default_rng(8))["grid"]
    for kw in GRAPH_FORMS:
        got = vd.knn_graph(X, 15, device="cpu", block_rows=48, client=client, **kw)
        same(got, voisin.knn_graph(X, 15, device="cpu", **kw))
    # Pairs whose edges point back across blocks (duplicates and one-sided edges), strings.
    W = sets(np.random.default_rng(8))["words"]
    for kw in [dict(pairs=True), dict(pairs=True, distances="f64", output="csr")]:
        got = vd.knn_graph(W, 4, metric="levenshtein", device="cpu", block_rows=20,
                           client=client, **kw)
        same(got, voisin.knn_graph(W, 4, metric="levenshtein", device="cpu", **kw))
    # k beyond n - 1 is capped as in one process; a single block is one diagonal task.
    same(vd.knn_graph(X[:20], 50, device="cpu", client=client),
         voisin.knn_graph(X[:20], 50, device="cpu"))
    same(vd.knn_graph(X[:1], 3, include_self=True, device="cpu", client=client),
         voisin.knn_graph(X[:1], 3, include_self=True, device="cpu"))
    for kw in [dict(include_self=True, distances="f64"), dict(include_self=True, output="csr")]:
        # k = 1 with include_self: rows of the item itself alone, no pair measured.
        same(vd.knn_graph(X[:50], 1, device="cpu", block_rows=16, client=client, **kw),
             voisin.knn_graph(X[:50], 1, device="cpu", **kw))
    d, i, st = vd.knn_graph(X, 5, device="cpu", block_rows=48, client=client, stats=True)
    same((d, i), voisin.knn_graph(X, 5, device="cpu"))
    assert st["blocks"] == 5 and st["tasks"] == 15 + 5 and st["workers"] == 2
    assert st["device"].startswith("cpu") and st["compute_s"] > 0 and st["wall_s"] > 0


def test_lazy_results_stay_dask_arrays(client):
    X = sets(np.random.default_rng(9))["normal"]
    dist, ind = vd.knn_graph(X, 10, device="cpu", block_rows=64, client=client, compute=False)
    assert isinstance(dist, da.Array) and dist.chunks[0] == (64, 64, 64, 38)
    same(tuple(x.compute() for x in (dist, ind)), voisin.knn_graph(X, 10, device="cpu"))
    q = X[:30] + 0.5
    dist, ind = vd.knn(X, q, 4, device="cpu", block_rows=64, query_rows=16, client=client,
                       compute=False)
    same((dist.compute(), ind.compute()), voisin.knn(X, q, 4, device="cpu"))
    g = vd.range_search(X, q, 3.0, device="cpu", block_rows=64, query_rows=16, client=client,
                        compute=False)
    want = voisin.range_search(X, q, 3.0, device="cpu")
    got = g.compute()
    assert got.shape == want.shape and (got != want).nnz == 0
    # Ragged rows stay on the cluster as CSR blocks: pairs, exact distances.
    g = vd.knn_graph(X, 6, pairs=True, output="csr", distances="f64", device="cpu",
                     block_rows=64, client=client, compute=False)
    want = voisin.knn_graph(X, 6, pairs=True, output="csr", distances="f64", device="cpu")
    got = g.compute()
    assert got.dtype == np.float64 and got.shape == want.shape and (got != want).nnz == 0
    with pytest.raises(ValueError, match="output='csr'"):
        vd.knn_graph(X, 6, pairs=True, client=client, compute=False)


SEARCHES = [
    # (set, metric, k, base rows, query rows, dask input, distances)
    ("normal", "euclidean", 10, 64, 25, True, "f32"),
    ("grid", "euclidean", 1, 50, 100, False, "f64"),
    ("grid", "cityblock", 300, 64, 40, False, "f32"),  # k beyond the base and beyond a shard
    ("f64", "euclidean", 15, 100, 50, False, "f64"),
    ("cosine", "cosine", 15, 80, 60, True, "f64"),
    ("normal", "inner_product", 7, 70, 33, False, "f32"),
    ("words", "levenshtein", 6, 40, 30, False, "f64"),
]

RADII = {"levenshtein": 2, "inner_product": 1.0, "cosine": 0.3}


@pytest.mark.parametrize("name,metric,k,rows,qrows,lazy,distances", SEARCHES)
def test_search_is_byte_identical(client, name, metric, k, rows, qrows, lazy, distances):
    X = sets(np.random.default_rng(11))[name]
    base, queries = X[: len(X) * 2 // 3], X[len(X) // 2:]
    if lazy:
        base, queries = da.from_array(base, chunks=(29, -1)), da.from_array(queries, chunks=(31, -1))
    plain = [np.asarray(x) if name != "words" else x for x in (X[: len(X) * 2 // 3],
                                                                X[len(X) // 2:])]
    one = dict(metric=metric, device="cpu", distances=distances)
    kw = dict(block_rows=rows, query_rows=qrows, client=client, **one)
    same(vd.knn(base, queries, k, **kw), voisin.knn(*plain, k, **one))
    radius = RADII.get(metric, 2.0)
    for output in ("csr", "arrays"):
        same(vd.range_search(base, queries, radius, output=output, **kw),
             voisin.range_search(*plain, radius, output=output, **one))


@pytest.mark.parametrize("name,metric,lazy", [("grid", "euclidean", True),
                                              ("words", "levenshtein", False)])
def test_range_pairs_are_byte_identical(client, name, metric, lazy):
    X = sets(np.random.default_rng(12))[name]
    given = da.from_array(X, chunks=(41, -1)) if lazy else X
    radius = RADII.get(metric, 1.5)
    for kw in [dict(output="arrays"), dict(output="csr", distances="f64")]:
        got = vd.range_search(given, given, radius, pairs=True, metric=metric, device="cpu",
                              block_rows=50, query_rows=36, client=client, **kw)
        same(got, voisin.range_search(X, X, radius, pairs=True, metric=metric, device="cpu",
                                      **kw))


def test_bad_input_is_named_as_in_one_process(client):
    X = sets(np.random.default_rng(3))["normal"].copy()
    X[150, 2] = np.nan
    with pytest.raises(ValueError) as one:
        voisin.knn_graph(X, 5, device="cpu")
    with pytest.raises(ValueError) as dist:
        vd.knn_graph(da.from_array(X, chunks=(40, -1)), 5, device="cpu", block_rows=64,
                     client=client)
    assert str(dist.value) == str(one.value)
    with pytest.raises(ValueError, match="dimension"):
        vd.knn(X, X[:, :3], 3, device="cpu", client=client)
    with pytest.raises(ValueError, match="at least 1"):
        vd.knn_graph(X, 0, client=client)
    for bad in [dict(include_self=True, pairs=True), dict(distances="f16"),
                dict(output="dense")]:
        with pytest.raises(ValueError) as one:
            voisin.knn_graph(X[:10], 3, device="cpu", **bad)
        with pytest.raises(ValueError) as dist:
            vd.knn_graph(X[:10], 3, device="cpu", client=client, **bad)
        assert str(dist.value) == str(one.value)
    with pytest.raises(ValueError, match="self-joins"):
        vd.range_search(X, X[:20], 1.0, pairs=True, client=client)


def pids(client):
    return client.run(os.getpid)


def test_worker_killed_mid_graph_gives_the_same_graph(client):
    X = np.random.default_rng(5).integers(0, 4, size=(1200, 4)).astype(np.float32)
    want = voisin.knn_graph(X, 15, device="cpu")
    before = pids(client)
    victim = sorted(before)[0]
    killed = []

    def kill_once(done, total):
        if not killed and done >= total // 5:
            os.kill(before[victim], signal.SIGKILL)  # the worker process; its nanny restarts it
            killed.append(done)

    got = vd.knn_graph(X, 15, device="cpu", block_rows=60, client=client, progress=kill_once)
    assert killed and killed[0] < 250
    same(got, want)
    client.wait_for_workers(2, timeout=60)
    assert before[victim] not in pids(client).values()


CLIENT = """
import os, signal, sys
import numpy as np
import distributed, voisin.dask as vd
X = np.random.default_rng(6).normal(size=(1500, 6)).astype(np.float32)
folder = sys.argv[2]
def die(done, total):
    if sum(e.startswith("block-") for e in os.listdir(folder)) >= 3:
        os.kill(os.getpid(), signal.SIGKILL)
with distributed.Client(sys.argv[1]) as c:
    vd.knn_graph(X, 15, device="cpu", block_rows=50, client=c, checkpoint=folder, progress=die)
"""


def test_client_killed_resumes_on_its_folder(client, tmp_path):
    folder = str(tmp_path / "ckpt")
    os.makedirs(folder)
    X = np.random.default_rng(6).normal(size=(1500, 6)).astype(np.float32)
    want = voisin.knn_graph(X, 15, device="cpu")
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(CLIENT),
                          client.scheduler.address, folder], capture_output=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()[-2000:]
    kept = {e: os.stat(os.path.join(folder, e)).st_mtime_ns for e in os.listdir(folder)
            if e.startswith("block-")}
    assert 3 <= len(kept) < 30
    kw = dict(device="cpu", block_rows=50, client=client, checkpoint=folder)
    with pytest.raises(ValueError, match="resume=True"):
        vd.knn_graph(X, 15, **kw)
    with pytest.raises(ValueError, match="another job"):
        vd.knn_graph(X, 14, resume=True, **kw)
    same(vd.knn_graph(X, 15, resume=True, **kw), want)
    # The blocks the killed client finished were read, not measured again.
    assert all(os.stat(os.path.join(folder, e)).st_mtime_ns == t for e, t in kept.items())
    assert sum(e.startswith("block-") for e in os.listdir(folder)) == 30
    same(vd.knn_graph(X, 15, resume=True, **kw), want)  # all finished: read back
    # The blocks keep exact lists: other forms of the same graph come from the same folder.
    for form in [dict(distances="f64"), dict(pairs=True, output="csr")]:
        same(vd.knn_graph(X, 15, resume=True, **form, **kw),
             voisin.knn_graph(X, 15, device="cpu", **form))
    damaged = os.path.join(folder, sorted(kept)[0])
    with open(damaged, "r+b") as f:
        f.seek(200)
        f.write(b"\xff" * 64)
    with pytest.raises(ValueError, match="damaged or foreign"):
        vd.knn_graph(X, 15, resume=True, **kw)


def test_the_example_hands_the_graph_to_scanpy_and_umap(client):
    pytest.importorskip("scanpy")
    pytest.importorskip("umap")
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts", "dask_graph.py")
    spec = importlib.util.spec_from_file_location("dask_graph", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    n, k = 1200, 10
    G, emb = example.main(["--n", str(n), "--dim", "8", "--k", str(k), "--block-rows", "256"],
                          client=client)
    X = example.clustered(n, 8, 256).compute()
    same(G, voisin.knn_graph(X, k + 1, include_self=True, output="csr", device="cpu"))
    assert emb["scanpy"].shape == (n, 2) and emb["umap"].shape == (n, 2)
    assert np.isfinite(emb["scanpy"]).all() and np.isfinite(emb["umap"]).all()


@pytest.mark.gpu
def test_gpu_worker_gives_the_one_process_graph_and_searches(client):
    """On a worker with a GPU (device="cuda": the diagonal blocks through the CUDA engine's
    TileGraph share and finish, the cross pairs and searches through its k-NN and range)."""
    rng = np.random.default_rng(21)
    X = rng.normal(size=(3000, 24)).astype(np.float32)
    X[100:140] = X[0]  # duplicates
    for metric, k, distances in [("euclidean", 15, "f32"), ("cosine", 1, "f64"),
                                 ("euclidean", 2999, "f32"), ("euclidean", 15, "f64")]:
        want = voisin.knn_graph(X, k, metric=metric, device="cpu", distances=distances)
        same(vd.knn_graph(X, k, metric=metric, device="cuda", block_rows=1024, client=client,
                          distances=distances), want)
        same(voisin.knn_graph(X, k, metric=metric, device="cuda", distances=distances), want)
    same(vd.knn_graph(X, 10, pairs=True, device="cuda", block_rows=1024, client=client),
         voisin.knn_graph(X, 10, pairs=True, device="cpu"))
    q = X[::7] + 0.25
    for distances in ("f32", "f64"):
        same(vd.knn(X, q, 10, device="cuda", block_rows=700, query_rows=200, client=client,
                    distances=distances), voisin.knn(X, q, 10, device="cpu", distances=distances))
        same(vd.range_search(X, q, 4.0, device="cuda", block_rows=700, client=client,
                             distances=distances),
             voisin.range_search(X, q, 4.0, device="cpu", distances=distances))
