"""Exact k-NN graphs, k-NN search and range search on a Dask cluster (``pip install voisin[dask]``).

:func:`knn_graph`, :func:`knn` and :func:`range_search` take the parameters of the one-process
functions (``voisin.knn_graph`` ...) and return the same results, byte for byte, whatever the
number of workers, the order the cluster runs the tasks in, or the tasks it runs again after a
worker is lost. Inputs are ``dask.array`` arrays (their row chunks are re-cut into blocks) or
NumPy arrays and lists of strings, which are cut into blocks here; the work runs on a
``distributed.Client`` (the current one by default), each task on its worker's device: the
CPU, or under ``device="auto"``/``"cuda"`` the worker's GPU (with dask-cuda, one worker per
GPU).

How the graph is built: the rows are cut into blocks B_0 .. B_{m-1}; each block pair (I, J),
I <= J, is one task that yields the exact lists (exact keys, global indices) of the rows of I
among J and of J among I; the lists of one block are merged pairwise (the core's merge under a
total order, so associative and commutative), and each block's merged lists become its rows.
A block reaches a worker once and stays there while its tasks run; the client holds only the
finished rows (or nothing, with ``compute=False``). Searches cut the base into shards and the
queries into blocks; each (shard, query block) task yields exact lists, merged the same way.

With ``checkpoint=FOLDER`` a graph writes each finished row block to ``FOLDER`` (from the
worker that finished it) after a manifest naming the job; a run started again with
``resume=True`` on that folder (after the client died, say) reads the finished blocks, measures
only the pairs that an open block needs, and returns the same bytes.
"""

from __future__ import annotations

import json
import math
import operator
import os
import threading
import zipfile
import zlib
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from . import _voisin
from ._functions import MetricLike, ProgressLike, _check_k, _Progress, csr_rows, metric_spec
from ._inputs import is_strings, items, strings

__all__ = ["knn_graph", "knn", "range_search"]

#: Rows per block when the caller does not choose: at most this many (a CPU task's candidate
#: buffers then stay near 100 MB at k = 15).
MAX_BLOCK_ROWS = 1 << 16
#: Block pairs per worker thread that the default block size aims for, so that the cluster
#: stays busy to the end.
PAIRS_PER_THREAD = 4

_MANIFEST = "manifest.json"
_FORMAT = "voisin-dask-graph"
_VERSION = 1


# ----------------------------------------------------------------------------------------------
# On the workers


class _Opts(NamedTuple):
    """What a worker's engine is built from; ``threads`` by worker address when not set."""

    device: str
    precision: str
    n_jobs: Optional[int]
    memory: Optional[int]
    threads: Dict[str, int]


_ENGINES: Dict[Tuple[Any, ...], "_voisin.BlockEngine"] = {}
_ENGINES_LOCK = threading.Lock()


def _engine(opts: _Opts) -> "_voisin.BlockEngine":
    """This worker process's engine for ``opts``, made once."""
    threads = opts.n_jobs
    if threads is None:
        try:
            from distributed import get_worker

            threads = opts.threads.get(get_worker().address)
        except (ImportError, ValueError):
            threads = None
    key = (opts.device, opts.precision, threads, opts.memory)
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            _ENGINES[key] = _voisin.BlockEngine(opts.device, opts.precision, threads, opts.memory)
        return _ENGINES[key]


def _prepared(block: Any, what: str, spec: MetricLike, start: int) -> Any:
    """A block as the extension reads it, its values checked (rows named in the whole set)."""
    got = items(block, what, spec)
    if isinstance(got, np.ndarray):
        _voisin.check_block(what, got, start)
    return got


def _crc(block: Any) -> int:
    """CRC-32 of a prepared block's bytes (strings: each one's UTF-8 after its length)."""
    if isinstance(block, np.ndarray):
        return zlib.crc32(str(block.dtype).encode() + np.ascontiguousarray(block).tobytes())
    crc = 0
    for s in block:
        b = s.encode("utf-8", "surrogatepass")
        crc = zlib.crc32(len(b).to_bytes(8, "little") + b, crc)
    return crc


def _pair(rows: Any, cols: Any, starts: Tuple[int, int], k: int, spec: MetricLike, opts: _Opts):
    return _engine(opts).graph_pair(rows, cols, starts, k, spec)


def _knn_shard(base: Any, queries: Any, start: int, k: int, spec: MetricLike, opts: _Opts):
    return _engine(opts).knn_shard(base, queries, start, k, spec)


def _range_shard(base: Any, queries: Any, start: int, radius: float, spec: MetricLike,
                 opts: _Opts):
    return _engine(opts).range_shard(base, queries, start, radius, spec)


def _ca(*arrays: np.ndarray) -> tuple:
    """Arrays C-contiguous and aligned, as the extension reads lists (arrays that come over
    the network may be neither; copied only then)."""
    return tuple(np.require(a, requirements="CA") for a in arrays)


def _merge(a, b, k: int):
    return _voisin.merge_block_lists(*_ca(a[0], a[1], b[0], b[1]), k)


def _merge_ranges(a, b):
    return _voisin.merge_range_lists(_ca(*a), _ca(*b))


def _with_self(dist: np.ndarray, ind: np.ndarray, start: int) -> Tuple[np.ndarray, np.ndarray]:
    """Rows with the item itself first at distance 0 (``include_self``)."""
    n = ind.shape[0]
    return (np.hstack([np.zeros((n, 1)), dist]),
            np.hstack([np.arange(start, start + n, dtype=np.int64)[:, None], ind]))


class _Rows(NamedTuple):
    """How a graph block's merged lists become its rows."""

    k: int
    spec: MetricLike
    n: int
    include_self: bool


def _graph_rows(lists, start: int, rows: _Rows):
    dist, ind = _voisin.knn_block_rows(*_ca(*lists), rows.k, rows.spec, rows.n, start)
    return _with_self(dist, ind, start) if rows.include_self else (dist, ind)


def _finish_block(lists, start: int, rows: _Rows, path: Optional[str], digest: str):
    """A block's rows, written first to ``path`` when the graph keeps a folder."""
    if path is not None:
        _write_block(path, lists, start, digest)
    return _graph_rows(lists, start, rows)


def _load_block(path: str, start: int, length: int, rows: _Rows, digest: str):
    """A finished block's rows read back from its file, checked."""
    try:
        with np.load(path, allow_pickle=False) as f:
            keys, ids = f["keys"], f["ids"]
            job, first = str(f["job"]), int(f["start"])
        if job != digest or first != start or keys.shape != (length, rows.k):
            raise ValueError("a block of another checkpoint or of another layout")
        return _graph_rows((keys, ids), start, rows)
    except (OSError, ValueError, KeyError, zlib.error, zipfile.BadZipFile) as e:
        raise ValueError(f"{path}: damaged or foreign checkpoint block ({e})") from None


def _write_block(path: str, lists, start: int, digest: str) -> None:
    """Writes a block file whole or not at all: to a temporary name, synced, renamed."""
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "wb") as f:
        np.savez(f, keys=lists[0], ids=lists[1], job=np.array(digest), start=np.array(start))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _sync_dir(os.path.dirname(path))


def _sync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _range_rows(lists, spec: MetricLike, n_base: int):
    return _voisin.range_block_rows(_ca(*lists), spec, n_base)


def _range_csr(lists, spec: MetricLike, n_base: int):
    import scipy.sparse

    off, ind, dist = _range_rows(lists, spec, n_base)
    return scipy.sparse.csr_matrix((dist, ind, off), shape=(len(off) - 1, n_base))


# ----------------------------------------------------------------------------------------------
# On the client


class _Blocks(NamedTuple):
    """A set cut into row blocks, each a future of its prepared items on the cluster."""

    futures: list
    starts: List[int]
    lengths: List[int]
    n: int
    dim: Optional[int]
    dtype: str


def _client(client: Any) -> Any:
    if client is not None:
        return client
    from distributed import get_client

    try:
        return get_client()
    except ValueError:
        raise ValueError(
            "voisin.dask needs a distributed.Client: start one (Client(), or "
            "Client(LocalCluster(...))) or pass client="
        ) from None


def _default_rows(n: int, client: Any, parts_for: int) -> int:
    """Rows per block: enough blocks that every worker thread has ``PAIRS_PER_THREAD`` tasks
    (``parts_for(b)`` is the task count of ``b`` blocks), at most ``MAX_BLOCK_ROWS``, a
    multiple of 512 (the engines' tile) when above it."""
    threads = max(1, sum(client.nthreads().values()))
    blocks = 1
    while parts_for(blocks) < PAIRS_PER_THREAD * threads and blocks < n:
        blocks += 1
    rows = max(1, math.ceil(n / blocks))
    if rows > 512:
        rows = math.ceil(rows / 512) * 512
    return min(rows, MAX_BLOCK_ROWS)


def _blocks(client: Any, X: Any, what: str, spec: MetricLike, rows: Optional[int],
            parts_for) -> _Blocks:
    """``X`` (a dask array, NumPy array or strings) cut into blocks of ``rows`` rows (chosen
    by :func:`_default_rows` when ``None``), each prepared and checked on a worker."""
    import dask.array as da

    lazy = isinstance(X, da.Array)
    if lazy:
        if X.ndim != 2:
            raise ValueError(f"{what}: expected a 2-D array (items x dimension), got {X.ndim}-D")
        if any(math.isnan(c) for c in X.chunks[0]):
            X = X.compute_chunk_sizes()
        n, dim, dtype = X.shape[0], X.shape[1], str(X.dtype)
        if n == 0:
            raise ValueError(f"{what}: empty (0 rows of dimension {dim})")
    else:
        X = items(X, what, spec)
        n = len(X)
        dim = X.shape[1] if isinstance(X, np.ndarray) else None
        dtype = str(X.dtype) if isinstance(X, np.ndarray) else "str"
    rows = int(rows) if rows is not None else _default_rows(n, client, parts_for)
    if rows < 1:
        raise ValueError(f"block_rows must be at least 1, got {rows}")
    starts = list(range(0, n, rows))
    lengths = [min(rows, n - s) for s in starts]
    if lazy:
        X = X.rechunk({0: rows, 1: -1})
        raw = client.compute(list(X.to_delayed().ravel()))
    else:
        # Each block travels inside its task, so a worker lost later can be given it again.
        raw = [X[s:s + L] for s, L in zip(starts, lengths)]
    futures = [client.submit(_prepared, b, what, spec, s, pure=False)
               for b, s in zip(raw, starts)]
    return _Blocks(futures, starts, lengths, n, dim, dtype)


def _opts(client: Any, device: str, precision: str, n_jobs: Optional[int],
          memory: Optional[int]) -> _Opts:
    """Engine options; without ``n_jobs`` each worker takes its host's cores shared out over
    the threads of the workers on that host."""
    threads: Dict[str, int] = {}
    if n_jobs is None or n_jobs < 0:
        hosts = client.run(_host)
        nthreads = client.nthreads()
        per_host: Dict[str, int] = {}
        for addr, (host, _) in hosts.items():
            per_host[host] = per_host.get(host, 0) + nthreads.get(addr, 1)
        for addr, (host, cores) in hosts.items():
            threads[addr] = max(1, cores // max(1, per_host[host]))
        n_jobs = None
    return _Opts(device, precision, n_jobs, memory, threads)


def _host() -> Tuple[str, int]:
    """This worker's host name and the cores it may use."""
    import socket

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return socket.gethostname(), cores


def _reduce(client: Any, futures: list, merge, *args) -> Any:
    """The futures merged pairwise (a balanced tree of tasks)."""
    while len(futures) > 1:
        nxt = [client.submit(merge, a, b, *args, pure=False)
               for a, b in zip(futures[0::2], futures[1::2])]
        if len(futures) % 2:
            nxt.append(futures[-1])
        futures = nxt
    return futures[0]


def _run(client: Any, counted: list, finals: list, progress: ProgressLike, desc: str) -> list:
    """Waits for ``counted`` (reporting progress, one unit each) and returns ``finals``'
    results; the first task error is raised as it is."""
    from distributed import as_completed

    total = len(counted)
    with _Progress(progress, desc) as cb:
        done = 0
        for f in as_completed(counted):
            if f.status == "error":
                f.result()
            done += 1
            if cb is not None:
                cb(done, total)
    return client.gather(finals)


def _lazy(parts: list, shapes: list, dtype: Any, meta: Any = None) -> Any:
    """Futures of row blocks as one dask array (blocks stay on the cluster)."""
    import dask
    import dask.array as da

    arrays = [da.from_delayed(dask.delayed(f), shape=s, dtype=dtype, meta=meta)
              for f, s in zip(parts, shapes)]
    return da.concatenate(arrays, axis=0)


class _Folder:
    """A graph's checkpoint folder on the client: its lock, its manifest, its block files."""

    def __init__(self, path: str, resume: bool, job: Dict[str, Any]):
        import fcntl

        self.path = os.path.abspath(os.fspath(path))
        os.makedirs(self.path, exist_ok=True)
        self._lock = open(os.path.join(self.path, ".lock"), "a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise ValueError(f"{self.path}: checkpoint folder in use by another run") from None
        text = json.dumps(job, sort_keys=True)
        manifest = os.path.join(self.path, _MANIFEST)
        if os.path.exists(manifest):
            if not resume:
                self.close()
                raise ValueError(f"{self.path}: holds a checkpoint already; pass resume=True "
                                 "to continue it")
            try:
                with open(manifest) as f:
                    old = json.load(f)
            except (OSError, ValueError) as e:
                self.close()
                raise ValueError(f"{manifest}: damaged checkpoint manifest ({e})") from None
            if old != job:
                self.close()
                diff = sorted(k for k in set(old) | set(job) if old.get(k) != job.get(k))
                raise ValueError(f"{manifest}: a checkpoint of another job (differs in "
                                 f"{', '.join(diff)})")
        else:
            others = [e for e in os.listdir(self.path) if e != ".lock"]
            if others and not resume:
                self.close()
                raise ValueError(f"{self.path}: not empty; a checkpoint starts in an empty "
                                 "folder")
            tmp = manifest + ".tmp"
            with open(tmp, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, manifest)
            _sync_dir(self.path)
        self.digest = f"{zlib.crc32(text.encode()):08x}"

    def block(self, b: int) -> str:
        return os.path.join(self.path, f"block-{b:06d}.npz")

    def done(self, b: int) -> bool:
        return os.path.exists(self.block(b))

    def close(self) -> None:
        self._lock.close()


def knn_graph(
    X: Any,
    k: int,
    *,
    metric: MetricLike = "euclidean",
    p: Optional[float] = None,
    include_self: bool = False,
    output: str = "arrays",
    device: str = "auto",
    precision: str = "auto",
    n_jobs: Optional[int] = None,
    memory: Optional[int] = None,
    progress: ProgressLike = False,
    client: Any = None,
    block_rows: Optional[int] = None,
    compute: bool = True,
    checkpoint: Optional[str] = None,
    resume: bool = False,
):
    """The exact k-nearest-neighbour graph of a set on a Dask cluster: ``voisin.knn_graph``'s
    result, byte for byte.

    Parameters
    ----------
    X : dask.array.Array of shape (n, d), array-like, or list of str
        The items (see ``voisin.knn`` for the accepted types). A dask array is re-cut into
        blocks of ``block_rows`` rows on the workers; other inputs are cut here.
    k, metric, p, include_self, output, device, precision, memory
        As for ``voisin.knn_graph``. ``device`` is each worker's: ``auto`` takes the worker's
        GPU when it has a usable one.
    n_jobs : int, optional
        CPU threads per task (default: each host's cores shared out over its worker threads).
    progress : bool or callable, default=False
        ``True`` shows a tqdm bar on the client; a callable receives ``(done, total)`` tasks.
        The cluster's dashboard shows the tasks too.
    client : distributed.Client, optional
        The cluster (default: the current client).
    block_rows : int, optional
        Rows per block (default: enough blocks for every worker thread to have a few pairs,
        at most 65536 rows).
    compute : bool, default=True
        ``False`` returns ``(distances, indices)`` as dask arrays whose blocks are computed on
        the cluster and stay there (as after ``persist``); ``output`` must be ``"arrays"``.
    checkpoint : str, optional
        A folder where each finished row block is written; ``resume=True`` continues the
        graph saved there (an empty or missing folder starts afresh). A folder holding
        another job's checkpoint, or a damaged block, is refused.

    Returns
    -------
    (distances, indices) or scipy.sparse.csr_matrix
        As ``voisin.knn_graph`` returns them; dask arrays with ``compute=False``.
    """
    _check_k(k)
    if output not in ("arrays", "csr"):
        raise ValueError(f"output must be 'arrays' or 'csr', got {output!r}")
    if not compute and output != "arrays":
        raise ValueError("compute=False gives dask arrays: use output='arrays'")
    client = _client(client)
    spec = metric_spec(metric, p)
    blocks = _blocks(client, X, "base", spec, block_rows, lambda b: b * (b + 1) // 2)
    n = blocks.n
    others = int(k) - 1 if include_self else int(k)
    kk = min(others, n - 1) if others > 0 else 0
    rows = _Rows(kk, spec, n, include_self)
    opts = _opts(client, device, precision, n_jobs, memory)
    folder = None
    if checkpoint is not None:
        crcs = client.gather([client.submit(_crc, f, pure=False) for f in blocks.futures])
        job = {"format": _FORMAT, "version": _VERSION, "n": n, "dim": blocks.dim,
               "dtype": blocks.dtype, "metric": _metric_name(spec), "k": kk,
               "include_self": bool(include_self), "block_rows": blocks.lengths[0],
               "block_crc32": crcs}
        folder = _Folder(checkpoint, resume, job)
    try:
        finals, counted = _graph_tasks(client, blocks, rows, opts, folder)
        width = kk + int(include_self)
        if not compute:
            dist = [client.submit(operator.getitem, f, 0) for f in finals]
            ind = [client.submit(operator.getitem, f, 1) for f in finals]
            shapes = [(L, width) for L in blocks.lengths]
            return _lazy(dist, shapes, np.float64), _lazy(ind, shapes, np.int64)
        parts = _run(client, counted, finals, progress, "voisin graph")
    finally:
        if folder is not None:
            folder.close()
    dist = np.concatenate([d for d, _ in parts])
    ind = np.concatenate([i for _, i in parts])
    if output == "csr":
        return csr_rows(dist, ind, n)
    return dist, ind


def _graph_tasks(client: Any, blocks: _Blocks, rows: _Rows, opts: _Opts,
                 folder: Optional[_Folder]) -> Tuple[list, list]:
    """The graph's tasks: the futures of each block's rows, and every task to count."""
    m = len(blocks.futures)
    done = [folder is not None and folder.done(b) for b in range(m)]
    sides: List[list] = [[] for _ in range(m)]
    pairs = []
    if rows.k > 0:
        for i in range(m):
            for j in range(i, m):
                if done[i] and done[j]:
                    continue
                cols = blocks.futures[j] if j > i else None
                f = client.submit(_pair, blocks.futures[i], cols,
                                  (blocks.starts[i], blocks.starts[j]), rows.k, rows.spec, opts,
                                  pure=False)
                pairs.append(f)
                if not done[i]:
                    sides[i].append(client.submit(operator.getitem, f, 0, pure=False))
                if j > i and not done[j]:
                    sides[j].append(client.submit(operator.getitem, f, 1, pure=False))
    finals = []
    digest = folder.digest if folder is not None else ""
    for b in range(m):
        start, length = blocks.starts[b], blocks.lengths[b]
        if done[b]:
            f = client.submit(_load_block, folder.block(b), start, length, rows, digest,
                              pure=False)
        elif rows.k == 0:
            f = client.submit(_empty_rows, length, start, rows.include_self, pure=False)
        else:
            merged = _reduce(client, sides[b], _merge, rows.k)
            path = folder.block(b) if folder is not None else None
            f = client.submit(_finish_block, merged, start, rows, path, digest, pure=False)
        finals.append(f)
    return finals, pairs + finals


def _empty_rows(length: int, start: int, include_self: bool):
    dist, ind = np.zeros((length, 0)), np.zeros((length, 0), dtype=np.int64)
    return _with_self(dist, ind, start) if include_self else (dist, ind)


def _metric_name(spec: MetricLike) -> str:
    if callable(spec):
        return f"callable:{getattr(spec, '__qualname__', type(spec).__name__)}"
    return spec


def _search_tasks(client: Any, base: _Blocks, queries: _Blocks, shard, shard_args: tuple,
                  merge, merge_args: tuple, finish, finish_args: tuple) -> Tuple[list, list]:
    """One task per (base shard, query block), merged per query block, then finished: the
    futures of each query block's result, and every task to count."""
    counted, finals = [], []
    for qf in queries.futures:
        lists = [client.submit(shard, bf, qf, s, *shard_args, pure=False)
                 for bf, s in zip(base.futures, base.starts)]
        merged = _reduce(client, lists, merge, *merge_args)
        counted.extend(lists)
        finals.append(client.submit(finish, merged, *finish_args, pure=False))
    return finals, counted + finals


def knn(
    base: Any,
    queries: Any,
    k: int,
    *,
    metric: MetricLike = "euclidean",
    p: Optional[float] = None,
    device: str = "auto",
    precision: str = "auto",
    n_jobs: Optional[int] = None,
    memory: Optional[int] = None,
    progress: ProgressLike = False,
    client: Any = None,
    block_rows: Optional[int] = None,
    query_rows: Optional[int] = None,
    compute: bool = True,
):
    """Exact k nearest neighbours of each query among the base items, on a Dask cluster:
    ``voisin.knn``'s result, byte for byte.

    The base is cut into shards of ``block_rows`` rows, the queries into blocks of
    ``query_rows`` rows (default: 65536); each (shard, query block) is one task, on its
    worker's device; a query block's lists are merged over the shards. Other parameters and
    the result as for ``voisin.knn``, with ``client``, ``n_jobs`` and ``compute`` as for
    :func:`knn_graph` (``compute=False``: dask arrays).
    """
    _check_k(k)
    client = _client(client)
    spec = metric_spec(metric, p)
    shards = _blocks(client, base, "base", spec, block_rows, lambda b: b)
    qrows = query_rows if query_rows is not None else MAX_BLOCK_ROWS
    qs = _blocks(client, queries, "queries", spec, qrows, lambda b: b)
    _same_kind(shards, qs)
    opts = _opts(client, device, precision, n_jobs, memory)
    kk = min(int(k), shards.n)

    finals, counted = _search_tasks(client, shards, qs, _knn_shard, (int(k), spec, opts),
                                    _merge, (kk,), _knn_rows, (kk, spec, shards.n))
    if not compute:
        dist = [client.submit(operator.getitem, f, 0) for f in finals]
        ind = [client.submit(operator.getitem, f, 1) for f in finals]
        shapes = [(L, kk) for L in qs.lengths]
        return _lazy(dist, shapes, np.float64), _lazy(ind, shapes, np.int64)
    parts = _run(client, counted, finals, progress, "voisin knn")
    return np.concatenate([d for d, _ in parts]), np.concatenate([i for _, i in parts])


def _knn_rows(lists, k: int, spec: MetricLike, n_base: int):
    return _voisin.knn_block_rows(*_ca(*lists), k, spec, n_base)


def _same_kind(base: _Blocks, queries: _Blocks) -> None:
    if (base.dim is None) != (queries.dim is None):
        raise TypeError("base and queries must both be vectors or both be strings")
    if base.dim is not None and base.dim != queries.dim:
        raise ValueError(f"queries have dimension {queries.dim}, the base {base.dim}")


def range_search(
    base: Any,
    queries: Any,
    radius: float,
    *,
    metric: MetricLike = "euclidean",
    p: Optional[float] = None,
    output: str = "csr",
    device: str = "auto",
    precision: str = "auto",
    n_jobs: Optional[int] = None,
    memory: Optional[int] = None,
    progress: ProgressLike = False,
    client: Any = None,
    block_rows: Optional[int] = None,
    query_rows: Optional[int] = None,
    compute: bool = True,
):
    """Every base item within ``radius`` of each query, on a Dask cluster:
    ``voisin.range_search``'s result, byte for byte.

    Shards and query blocks as for :func:`knn`; a query block's lists are merged over the
    shards (every entry kept, rows in (distance, index) order). ``compute=False`` (with
    ``output="csr"``) returns a dask array whose blocks are ``scipy.sparse.csr_matrix`` rows.
    """
    if output not in ("arrays", "csr"):
        raise ValueError(f"output must be 'arrays' or 'csr', got {output!r}")
    if not compute and output != "csr":
        raise ValueError("compute=False gives a dask array of CSR blocks: use output='csr'")
    import scipy.sparse

    client = _client(client)
    spec = metric_spec(metric, p)
    shards = _blocks(client, base, "base", spec, block_rows, lambda b: b)
    qrows = query_rows if query_rows is not None else MAX_BLOCK_ROWS
    qs = _blocks(client, queries, "queries", spec, qrows, lambda b: b)
    _same_kind(shards, qs)
    opts = _opts(client, device, precision, n_jobs, memory)

    finish = _range_csr if not compute else _range_rows
    finals, counted = _search_tasks(client, shards, qs, _range_shard, (float(radius), spec, opts),
                                    _merge_ranges, (), finish, (spec, shards.n))
    if not compute:
        shapes = [(L, shards.n) for L in qs.lengths]
        return _lazy(finals, shapes, np.float64, meta=scipy.sparse.csr_matrix((0, 0)))
    parts = _run(client, counted, finals, progress, "voisin range")
    ends = np.cumsum([0] + [len(ind) for _, ind, _ in parts])
    offsets = np.concatenate([parts[0][0][:1]] + [off[1:] + at for (off, _, _), at in
                                                   zip(parts, ends[:-1])])
    ind = np.concatenate([i for _, i, _ in parts])
    dist = np.concatenate([d for _, _, d in parts])
    if output == "arrays":
        return offsets, ind, dist
    return scipy.sparse.csr_matrix((dist, ind, offsets), shape=(len(offsets) - 1, shards.n))
