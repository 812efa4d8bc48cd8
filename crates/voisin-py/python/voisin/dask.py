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

import contextlib
import json
import math
import operator
import os
import threading
import time
import zipfile
import zlib
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from . import _voisin
from ._functions import (_FRAMEWORKS, MetricLike, ProgressLike, _check_k, _check_output, _deliver,
                         _Progress, csr_matrix, exact_distances, metric_spec, same_items)
from ._inputs import items

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


class _Rows(NamedTuple):
    """How a block's merged lists become its rows, as the one process shapes them (the
    extension reads it by attribute): ``k`` entries a row, ``n`` items (columns),
    ``include_self`` and ``exact`` (``distances="f64"``)."""

    k: int
    spec: MetricLike
    n: int
    include_self: bool
    exact: bool


def _graph_rows(lists, start: int, items: Any, rows: _Rows):
    """A graph block's rows; ``items`` (the block itself, for ``include_self``) or None."""
    return _voisin.knn_block_rows(*_ca(*lists), rows, start, items)


def _knn_rows(lists, rows: _Rows):
    return _voisin.knn_block_rows(*_ca(*lists), rows)


def _range_rows(lists, rows: _Rows):
    return _voisin.range_block_rows(_ca(*lists), rows)


def _flat(lists) -> tuple:
    """Lists as flat (offsets, keys, indices): range lists are; k-NN lists (n x k) are viewed
    so."""
    if len(lists) == 3:
        return _ca(*lists)
    keys, ids = _ca(*lists)
    n, k = keys.shape
    return np.arange(n + 1, dtype=np.int64) * k, keys.ravel(), ids.ravel()


def _pair_pieces(lists, start: int, starts: List[int], n: int):
    return _voisin.pair_pieces(_flat(lists), start, list(starts), n)


def _block_pairs(lists, start: int, pieces: list, rows: _Rows):
    return _voisin.block_pairs(_flat(lists), start, [_ca(*p) for p in pieces], rows)


def _csr_block(part, n: int):
    """A block's result as a ``csr_matrix`` of ``n`` columns (``compute=False``)."""
    import scipy.sparse

    if len(part) == 2:
        dist, ind = part
        part = (np.arange(len(ind) + 1, dtype=np.int64) * ind.shape[1], ind.ravel(),
                dist.ravel())
    off, ind, dist = part
    return scipy.sparse.csr_matrix((dist, ind, off), shape=(len(off) - 1, n))


def _keep_block(lists, path: str, start: int, digest: str):
    """A block's merged lists, written first to ``path`` (the graph's folder)."""
    _write_block(path, lists, start, digest)
    return lists


def _load_block(path: str, start: int, length: int, k: int, digest: str):
    """A finished block's merged lists read back from its file (checked again when shaped)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            keys, ids = f["keys"], f["ids"]
            job, first = str(f["job"]), int(f["start"])
        if job != digest or first != start or keys.shape != (length, k):
            raise ValueError("a block of another checkpoint or of another layout")
        return keys, ids
    except (OSError, ValueError, KeyError, zlib.error, zipfile.BadZipFile) as e:
        raise ValueError(f"{path}: damaged or foreign checkpoint block ({e})") from None


def _empty_lists(length: int):
    return np.zeros((length, 0)), np.zeros((length, 0), dtype=np.uint32)


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


def _gathered(parts: list, n: int, output: str) -> Any:
    """The blocks' results as one (what the one process returns): rows of equal length
    stacked, ragged rows joined; for ``output="csr"`` a ``csr_matrix`` with the index type the
    one process picks (:func:`_csr`)."""
    if len(parts[0]) == 2:
        dist = np.concatenate([d for d, _ in parts])
        ind = np.concatenate([i for _, i in parts])
        if output != "csr":
            return dist, ind
        rows = (np.arange(len(ind) + 1, dtype=np.int64) * ind.shape[1], ind.ravel(),
                dist.ravel())
    else:
        ends = np.cumsum([0] + [len(ind) for _, ind, _ in parts])
        offsets = np.concatenate([parts[0][0][:1]] + [off[1:] + at for (off, _, _), at in
                                                       zip(parts, ends[:-1])])
        rows = (offsets, np.concatenate([i for _, i, _ in parts]),
                np.concatenate([d for _, _, d in parts]))
        if output != "csr":
            return rows
    return _csr(rows, n)


def _csr(rows: tuple, n: int) -> Any:
    """Ragged rows ``(offsets, indices, distances)`` (int64) as an ``n``-column
    ``csr_matrix``, int32 indices where the one process takes them (the extension's rule)."""
    offsets, ind, dist = rows
    if _voisin.csr_narrow(n, len(offsets), len(ind)):
        offsets, ind = offsets.astype(np.int32), ind.astype(np.int32)
    return csr_matrix((offsets, ind, dist), n)


def _pair_tasks(client: Any, lists: list, starts: List[int], rows: _Rows) -> list:
    """The futures of each block's pair rows (``pairs=True``) from the futures of its merged
    lists: every block after the first sends each earlier block the entries whose pair lives
    there (:func:`_pair_pieces`), and each block's pairs are shaped from its own lists and
    those pieces, in block order (:func:`_block_pairs`)."""
    m = len(lists)
    pieces = [None] + [client.submit(_pair_pieces, lists[b], starts[b], starts[:b], rows.n,
                                     pure=False) for b in range(1, m)]
    return [client.submit(_block_pairs, lists[c], starts[c],
                          [client.submit(operator.getitem, pieces[b], c, pure=False)
                           for b in range(c + 1, m)], rows, pure=False)
            for c in range(m)]


def _output(output: str, compute: bool, pairs: bool, allowed: Tuple[str, ...]) -> None:
    """Checks ``output`` as the one process does, and what ``compute=False`` can give: dask
    arrays of equal-length rows (``arrays``), or a dask array of ``csr_matrix`` blocks
    (``csr``)."""
    _check_output(output, allowed)
    if compute:
        return
    lazy = ("csr",) if pairs else tuple(o for o in ("arrays", "numpy", "csr") if o in allowed)
    if output not in lazy:
        raise ValueError(f"compute=False gives dask arrays: use output={lazy[0]!r}"
                         + (" (pairs are ragged rows)" if pairs else ""))


def _results(client: Any, finals: list, counted: list, run: "_Call", shapes: list) -> Any:
    """The call's result from the futures of its blocks' results: dask arrays that stay on
    the cluster with ``compute=False``, else gathered (with progress) and joined, in the
    framework ``output`` names, with the stats when asked."""
    width = shapes[0][1] if shapes else 0
    if not run.compute:
        if run.output == "csr":
            blocks = [client.submit(_csr_block, f, run.n, pure=False) for f in finals]
            import scipy.sparse

            return _lazy(blocks, [(s[0], run.n) for s in shapes], run.dtype,
                         meta=scipy.sparse.csr_matrix((0, 0), dtype=run.dtype))
        dist = [client.submit(operator.getitem, f, 0, pure=False) for f in finals]
        ind = [client.submit(operator.getitem, f, 1, pure=False) for f in finals]
        shapes = [(s[0], width) for s in shapes]
        return _lazy(dist, shapes, run.dtype), _lazy(ind, shapes, np.int64)
    with _measured(client, run.stats) as stream:
        start = time.perf_counter()
        parts = _run(client, counted, finals, run.progress, run.desc)
        wall = time.perf_counter() - start
    got = _gathered(parts, run.n, run.output)
    stats = run.stats and _stats(client, stream, run, len(finals), len(counted), wall)
    return _deliver(got, run.output, run.like, stats)


class _Call(NamedTuple):
    """What a call asked for, beside its blocks: the result's form and how to report."""

    output: str
    compute: bool
    stats: bool
    progress: ProgressLike
    desc: str
    n: int
    dtype: Any
    like: Any
    opts: _Opts


def _measured(client: Any, stats: bool) -> Any:
    """Dask's own task stream while the tasks run (``stats=True``), or nothing."""
    if not stats:
        return contextlib.nullcontext(None)
    from distributed import get_task_stream

    return get_task_stream(client=client)


def _stats(client: Any, stream: Any, run: "_Call", blocks: int, tasks: int,
           wall: float) -> Dict[str, Any]:
    """What the cluster measured for one call (see :func:`knn_graph`)."""
    seconds = {"compute": 0.0, "transfer": 0.0}
    for task in stream.data:
        for step in task.get("startstops", ()):
            if step["action"] in seconds:
                seconds[step["action"]] += step["stop"] - step["start"]
    devices = sorted({d for names in client.run(_devices, run.opts).values() for d in names})
    return {"device": " | ".join(devices), "workers": len(client.nthreads()),
            "blocks": blocks, "tasks": tasks, "wall_s": wall,
            "compute_s": seconds["compute"], "transfer_s": seconds["transfer"]}


def _devices(opts: _Opts) -> List[str]:
    """The engines this worker measured with for ``opts`` (any thread count)."""
    with _ENGINES_LOCK:
        return [e.device for key, e in _ENGINES.items()
                if (key[0], key[1], key[3]) == (opts.device, opts.precision, opts.memory)]


def knn_graph(
    X: Any,
    k: int,
    *,
    metric: MetricLike = "euclidean",
    p: Optional[float] = None,
    include_self: bool = False,
    pairs: bool = False,
    output: str = "arrays",
    device: str = "auto",
    precision: str = "auto",
    n_jobs: Optional[int] = None,
    memory: Optional[int] = None,
    progress: ProgressLike = False,
    distances: str = "f32",
    stats: bool = False,
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
    k, metric, p, include_self, pairs, output, device, precision, memory, distances
        As for ``voisin.knn_graph``. ``device`` is each worker's: ``auto`` takes the worker's
        GPU when it has a usable one. ``output`` may also name a framework (``torch`` ...),
        which gets the gathered NumPy arrays.
    n_jobs : int, optional
        CPU threads per task (default: each host's cores shared out over its worker threads).
    progress : bool or callable, default=False
        ``True`` shows a tqdm bar on the client; a callable receives ``(done, total)`` tasks.
        The cluster's dashboard shows the tasks too.
    stats : bool, default=False
        Also return a dict of what the cluster measured (Dask's task stream): ``device`` (the
        workers' engines), ``workers``, ``blocks``, ``tasks``, ``wall_s`` (on the client),
        ``compute_s`` and ``transfer_s`` (task seconds summed over the workers).
    client : distributed.Client, optional
        The cluster (default: the current client).
    block_rows : int, optional
        Rows per block (default: enough blocks for every worker thread to have a few pairs,
        at most 65536 rows).
    compute : bool, default=True
        ``False`` returns dask arrays whose blocks are computed on the cluster and stay there
        (as after ``persist``): ``(distances, indices)`` for ``output="arrays"``, or one dask
        array of ``csr_matrix`` row blocks for ``output="csr"`` (the only form of
        ``pairs=True``).
    checkpoint : str, optional
        A folder where each finished row block is written; ``resume=True`` continues the
        graph saved there (an empty or missing folder starts afresh). A folder holding
        another job's checkpoint, or a damaged block, is refused. ``distances``, ``pairs`` and
        ``output`` may change between runs on one folder (the blocks keep exact lists).

    Returns
    -------
    (distances, indices), (offsets, indices, distances) or scipy.sparse.csr_matrix
        As ``voisin.knn_graph`` returns them (and the stats); dask arrays with
        ``compute=False``.
    """
    _check_k(k)
    _output(output, compute, pairs, ("csr",) + _FRAMEWORKS)
    exact = exact_distances(distances)
    if include_self and pairs:
        raise ValueError("include_self and pairs exclude each other: pairs never hold an item "
                         "itself")
    if stats and not compute:
        raise ValueError("stats=True measures the computation: use compute=True")
    client = _client(client)
    spec = metric_spec(metric, p)
    blocks = _blocks(client, X, "base", spec, block_rows, lambda b: b * (b + 1) // 2)
    n = blocks.n
    others = int(k) - 1 if include_self else int(k)
    kk = min(others, n - 1) if others > 0 else 0
    rows = _Rows(kk, spec, n, bool(include_self), exact)
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
        lists, counted = _graph_tasks(client, blocks, rows, opts, folder)
        if pairs:
            finals = _pair_tasks(client, lists, blocks.starts, rows)
        else:
            finals = [client.submit(_graph_rows, f, s, b if include_self else None, rows,
                                    pure=False)
                      for f, s, b in zip(lists, blocks.starts, blocks.futures)]
        run = _Call(output, compute, stats, progress, "voisin graph", n,
                    np.float64 if exact else np.float32, X, opts)
        width = kk + int(include_self)
        return _results(client, finals, counted + finals, run,
                        [(L, width) for L in blocks.lengths])
    finally:
        if folder is not None:
            folder.close()


def _graph_tasks(client: Any, blocks: _Blocks, rows: _Rows, opts: _Opts,
                 folder: Optional[_Folder]) -> Tuple[list, list]:
    """The graph's tasks: the futures of each block's merged lists (written to the folder,
    or read back from it), and the tasks to count."""
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
    lists = []
    digest = folder.digest if folder is not None else ""
    for b in range(m):
        start, length = blocks.starts[b], blocks.lengths[b]
        if done[b]:
            f = client.submit(_load_block, folder.block(b), start, length, rows.k, digest,
                              pure=False)
        elif rows.k == 0:
            f = client.submit(_empty_lists, length, pure=False)
        else:
            f = _reduce(client, sides[b], _merge, rows.k)
            if folder is not None:
                f = client.submit(_keep_block, f, folder.block(b), start, digest, pure=False)
        lists.append(f)
    return lists, pairs


def _metric_name(spec: MetricLike) -> str:
    if callable(spec):
        return f"callable:{getattr(spec, '__qualname__', type(spec).__name__)}"
    return spec


def _search_tasks(client: Any, base: _Blocks, queries: _Blocks, shard, shard_args: tuple,
                  merge, merge_args: tuple) -> Tuple[list, list]:
    """One task per (base shard, query block), merged per query block: the futures of each
    query block's merged lists, and the shard tasks to count."""
    counted, merged = [], []
    for qf in queries.futures:
        lists = [client.submit(shard, bf, qf, s, *shard_args, pure=False)
                 for bf, s in zip(base.futures, base.starts)]
        merged.append(_reduce(client, lists, merge, *merge_args))
        counted.extend(lists)
    return merged, counted


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
    distances: str = "f32",
    output: str = "arrays",
    stats: bool = False,
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
    the result as for ``voisin.knn``, with ``client``, ``n_jobs``, ``stats`` and ``compute``
    as for :func:`knn_graph` (``compute=False``: dask arrays).
    """
    _check_k(k)
    _output(output, compute, False, _FRAMEWORKS)
    exact = exact_distances(distances)
    if stats and not compute:
        raise ValueError("stats=True measures the computation: use compute=True")
    client = _client(client)
    spec = metric_spec(metric, p)
    shards = _blocks(client, base, "base", spec, block_rows, lambda b: b)
    qrows = query_rows if query_rows is not None else MAX_BLOCK_ROWS
    qs = _blocks(client, queries, "queries", spec, qrows, lambda b: b)
    _same_kind(shards, qs)
    opts = _opts(client, device, precision, n_jobs, memory)
    kk = min(int(k), shards.n)
    rows = _Rows(kk, spec, shards.n, False, exact)
    merged, counted = _search_tasks(client, shards, qs, _knn_shard, (int(k), spec, opts),
                                    _merge, (kk,))
    finals = [client.submit(_knn_rows, f, rows, pure=False) for f in merged]
    run = _Call(output, compute, stats, progress, "voisin knn", shards.n,
                np.float64 if exact else np.float32, base, opts)
    return _results(client, finals, counted + finals, run, [(L, kk) for L in qs.lengths])


def _same_kind(base: _Blocks, queries: _Blocks) -> None:
    if (base.dim is None) != (queries.dim is None):
        raise TypeError("base and queries must both be vectors or both be strings")
    if base.dim is not None and base.dim != queries.dim:
        raise ValueError(f"queries have dimension {queries.dim}, the base {base.dim}")


def _same_set(base: Any, queries: Any) -> bool:
    """Whether ``base`` and ``queries`` hold the same items (``pairs=True``): one object, dask
    arrays of one graph (their names), or equal arrays or lists."""
    import dask.array as da

    if isinstance(base, da.Array) or isinstance(queries, da.Array):
        return base is queries or (isinstance(base, da.Array) and
                                   isinstance(queries, da.Array) and base.name == queries.name)
    return same_items(base, queries)


def range_search(
    base: Any,
    queries: Any,
    radius: float,
    *,
    metric: MetricLike = "euclidean",
    p: Optional[float] = None,
    pairs: bool = False,
    output: str = "csr",
    device: str = "auto",
    precision: str = "auto",
    n_jobs: Optional[int] = None,
    memory: Optional[int] = None,
    progress: ProgressLike = False,
    distances: str = "f32",
    stats: bool = False,
    client: Any = None,
    block_rows: Optional[int] = None,
    query_rows: Optional[int] = None,
    compute: bool = True,
):
    """Every base item within ``radius`` of each query, on a Dask cluster:
    ``voisin.range_search``'s result, byte for byte.

    Shards and query blocks as for :func:`knn`; a query block's lists are merged over the
    shards (every entry kept, rows in (distance, index) order). ``pairs=True`` (a self-join:
    ``queries`` the same items as ``base``, for dask arrays the same array) gives each
    unordered pair once, as in one process. ``compute=False`` (with ``output="csr"``) returns
    a dask array whose blocks are ``scipy.sparse.csr_matrix`` rows; ``stats`` as for
    :func:`knn_graph`.
    """
    _output(output, compute, True, ("csr",) + _FRAMEWORKS)
    exact = exact_distances(distances)
    if pairs and not _same_set(base, queries):
        raise ValueError("pairs=True is for self-joins: pass the same data as base and queries")
    if stats and not compute:
        raise ValueError("stats=True measures the computation: use compute=True")
    client = _client(client)
    spec = metric_spec(metric, p)
    shards = _blocks(client, base, "base", spec, block_rows, lambda b: b)
    qrows = query_rows if query_rows is not None else MAX_BLOCK_ROWS
    qs = _blocks(client, queries, "queries", spec, qrows, lambda b: b)
    _same_kind(shards, qs)
    opts = _opts(client, device, precision, n_jobs, memory)
    rows = _Rows(0, spec, shards.n, False, exact)
    merged, counted = _search_tasks(client, shards, qs, _range_shard,
                                    (float(radius), spec, opts), _merge_ranges, ())
    if pairs:
        finals = _pair_tasks(client, merged, qs.starts, rows)
    else:
        finals = [client.submit(_range_rows, f, rows, pure=False) for f in merged]
    run = _Call(output, compute, stats, progress, "voisin range", shards.n,
                np.float64 if exact else np.float32, base, opts)
    return _results(client, finals, counted + finals, run, [(L, 0) for L in qs.lengths])
