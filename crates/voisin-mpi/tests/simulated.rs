//! The distributed algorithms run in one process with simulated ranks (every rank's phase in
//! turn, buffers routed by hand), compared with the f64 reference for identity: same indices,
//! same distances, on data full of ties and duplicates. Runs without MPI installed.

use rand::{rngs::StdRng, Rng, SeedableRng};
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use voisin::cpu::{CpuEngine, CpuOptions};
use voisin::engine::{GraphRequest, KnnRequest, RangeRequest};
use voisin::graph::checkpoint::CheckpointOptions;
use voisin::graph::{triangle, CpuShare, PassRows, TileGraph, TileOwner};
use voisin::reference;
use voisin::{Dataset, Engine, KnnResult, Metric, RangeResult, StringSet, VectorSet};
use voisin_mpi::comm::{Failed, Threads};
use voisin_mpi::{graph, knn};

fn engine() -> CpuEngine {
    CpuEngine::new(CpuOptions {
        threads: Some(1),
        ..CpuOptions::default()
    })
    .unwrap()
}

/// Small integer coordinates: many equal distances and some identical vectors.
fn tied(n: usize, dim: usize, seed: u64) -> Dataset {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut v: Vec<f32> = (0..n * dim).map(|_| rng.gen_range(-2..3) as f32).collect();
    if n > 3 {
        let (a, b) = v.split_at_mut(dim);
        b[..dim].copy_from_slice(a);
    }
    VectorSet::from_f32(n, dim, v).unwrap().into()
}

/// The CPU engine's side of the graph seam, counting the item pairs its tiles cover.
struct Counting {
    engine: CpuEngine,
    pairs: AtomicU64,
}

impl Counting {
    fn new() -> Self {
        Counting {
            engine: engine(),
            pairs: AtomicU64::new(0),
        }
    }

    /// Counts the pairs of the tile pairs (I, J), I ≤ J, of edge `edge` over `n` items that
    /// `owns` accepts.
    fn count(&self, n: usize, edge: usize, owns: &TileOwner<'_>) {
        let size = |t: usize| ((t + 1) * edge).min(n) - t * edge;
        let pairs: usize = triangle(n.div_ceil(edge))
            .filter(|&(i, j)| owns(i, j))
            .map(|(i, j)| {
                if i == j {
                    size(i) * size(i).saturating_sub(1) / 2
                } else {
                    size(i) * size(j)
                }
            })
            .sum();
        self.pairs.fetch_add(pairs as u64, Ordering::Relaxed);
    }
}

impl Engine for Counting {
    fn name(&self) -> String {
        self.engine.name()
    }

    fn knn_request(&self, req: &KnnRequest<'_>) -> voisin::Result<KnnResult> {
        self.engine.knn_request(req)
    }

    fn range_request(&self, req: &RangeRequest<'_>) -> voisin::Result<RangeResult> {
        self.engine.range_request(req)
    }

    fn graph_request(&self, req: &GraphRequest<'_>) -> voisin::Result<KnnResult> {
        self.engine.graph_request(req)
    }
}

impl TileGraph for Counting {
    type Share = CpuShare;

    fn tile_edge(&self, data: &Dataset, k: usize, metric: &Metric) -> voisin::Result<usize> {
        self.engine.tile_edge(data, k, metric)
    }

    fn share(
        &self,
        data: &Dataset,
        k: usize,
        metric: &Metric,
        edge: usize,
        owns: &TileOwner<'_>,
    ) -> voisin::Result<CpuShare> {
        self.count(data.len(), edge, owns);
        self.engine.share(data, k, metric, edge, owns)
    }

    fn extend(
        &self,
        data: &Dataset,
        k: usize,
        metric: &Metric,
        running: &mut Option<CpuShare>,
        edge: usize,
        owns: &TileOwner<'_>,
    ) -> voisin::Result<()> {
        self.count(data.len(), edge, owns);
        self.engine.extend(data, k, metric, running, edge, owns)
    }

    fn finish(
        &self,
        data: &Dataset,
        metric: &Metric,
        share: &CpuShare,
        rows: Range<usize>,
    ) -> voisin::Result<PassRows> {
        self.engine.finish(data, metric, share, rows)
    }
}

/// Runs the whole distributed graph with `size` ranks as threads; rank 0's result.
fn run_with(
    worker: &Counting,
    data: &Dataset,
    k: usize,
    metric: &Metric,
    size: usize,
    checkpoint: Option<&CheckpointOptions>,
) -> Result<KnnResult, Failed> {
    let results: Vec<Result<Option<KnnResult>, Failed>> = std::thread::scope(|s| {
        let handles: Vec<_> = Threads::world(size)
            .into_iter()
            .map(|comm| s.spawn(move || graph::run(&comm, worker, data, k, metric, checkpoint)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut results = results.into_iter();
    let first = results.next().unwrap();
    for (r, other) in results.enumerate() {
        match (&first, other) {
            (Ok(_), Ok(None)) => {}
            (Err(a), Err(b)) => assert_eq!(a.code, b.code, "rank {} exit code", r + 1),
            (a, b) => panic!("ranks disagree: rank 0 {a:?}, rank {} {b:?}", r + 1),
        }
    }
    first.map(|r| r.expect("rank 0 holds the result"))
}

fn simulate_graph(data: &Dataset, k: usize, metric: &Metric, size: usize) -> KnnResult {
    run_with(&Counting::new(), data, k, metric, size, None).unwrap()
}

fn simulate_knn(base: &Dataset, q: &Dataset, k: usize, metric: &Metric, size: usize) -> KnnResult {
    let e = engine();
    let all: Vec<u32> = (0..size)
        .flat_map(|r| knn::local(&e, base, q, k, metric, r, size).unwrap())
        .collect();
    knn::merge(base, q, k, metric, size, &all)
}

fn same(expected: &KnnResult, got: &KnnResult, what: &str) {
    reference::compare_knn(expected, got, 0.0).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(expected.indices, got.indices, "{what}");
    assert_eq!(expected.distances, got.distances, "{what}");
}

/// Every tile (I ≤ J) exactly once over the rounds, except those between two done blocks;
/// every open block finished exactly once, after its last tile.
#[test]
fn rounds_cover_every_needed_tile_once() {
    let mut rng = StdRng::seed_from_u64(5);
    for n in [1, 2, 5, 37, 1000] {
        for rows in [1, 3, 64] {
            let plan = graph::Plan::new(n, rows, 5);
            let nb = plan.blocks.len();
            for trial in 0..4 {
                let done: Vec<bool> = (0..nb).map(|_| trial > 0 && rng.gen_bool(0.4)).collect();
                for want in [1, 4, 16] {
                    let rounds = plan.rounds(&done, want);
                    let mut seen = vec![vec![0; nb]; nb];
                    let mut finished = vec![usize::MAX; nb];
                    for (r, round) in rounds.iter().enumerate() {
                        for &(i, j) in &round.tiles {
                            assert!(i <= j);
                            seen[i][j] += 1;
                        }
                        for &b in &round.finished {
                            assert_eq!(finished[b], usize::MAX, "block {b} finished twice");
                            finished[b] = r;
                        }
                    }
                    assert!(rounds.len() <= want.max(1) + 1, "{} rounds", rounds.len());
                    for i in 0..nb {
                        assert_eq!(finished[i] == usize::MAX, done[i], "block {i}");
                        for j in i..nb {
                            let need = !(done[i] && done[j]);
                            assert_eq!(seen[i][j], usize::from(need), "tile ({i},{j})");
                        }
                    }
                    // A block is finished no earlier than the round of its last tile.
                    for (r, round) in rounds.iter().enumerate() {
                        for &(i, j) in &round.tiles {
                            for b in [i, j] {
                                if !done[b] {
                                    assert!(
                                        finished[b] >= r,
                                        "block {b} finished before tile ({i},{j})"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn blocks_cover_the_items() {
    for n in [1, 2, 5, 37, 20_000] {
        for size in 1..6 {
            for ckpt in [false, true] {
                let rows = graph::Plan::block_rows(n, size, ckpt, 10);
                let plan = graph::Plan::new(n, rows, 5);
                assert_eq!(plan.blocks[0].start, 0);
                assert_eq!(plan.blocks.last().unwrap().end, n);
                for w in plan.blocks.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
                if size == 1 && !ckpt {
                    assert_eq!(plan.blocks.len(), 1);
                }
            }
        }
    }
}

#[test]
fn graph_matches_reference_for_any_rank_count() {
    for (n, dim) in [(1, 3), (2, 1), (7, 3), (23, 5), (40, 2)] {
        let data = tied(n, dim, n as u64);
        for metric in [Metric::Euclidean, Metric::Cityblock, Metric::InnerProduct] {
            for k in [1, 10, n.saturating_sub(1).max(1), n + 5] {
                let expected = reference::graph(&data, k, &metric).unwrap();
                for size in 1..=5 {
                    let got = simulate_graph(&data, k, &metric, size);
                    same(
                        &expected,
                        &got,
                        &format!("n {n} {metric} k {k} ranks {size}"),
                    );
                }
            }
        }
    }
}

#[test]
fn graph_matches_reference_on_zero_vectors_and_wide_rows() {
    for dim in [1, 127] {
        let n = 13;
        let mut v = vec![0.0f32; n * dim];
        for (i, x) in v.iter_mut().enumerate().skip(4 * dim) {
            *x = ((i * 7) % 5) as f32 - 2.0;
        }
        let data: Dataset = VectorSet::from_f32(n, dim, v).unwrap().into();
        for metric in [Metric::Euclidean, Metric::Cosine, Metric::Chebyshev] {
            for k in [1, 5, n - 1] {
                let expected = reference::graph(&data, k, &metric).unwrap();
                for size in [2, 3, 4] {
                    let got = simulate_graph(&data, k, &metric, size);
                    same(
                        &expected,
                        &got,
                        &format!("dim {dim} {metric} k {k} ranks {size}"),
                    );
                }
            }
        }
    }
}

#[test]
fn graph_of_strings_matches_reference() {
    let words = [
        "kitten", "sitting", "kitten", "mitten", "", "sit", "bitten", "kit", "a",
    ];
    let data: Dataset = StringSet::from_strings(words).unwrap().into();
    for k in [1, 3, 8] {
        let expected = reference::graph(&data, k, &Metric::Levenshtein).unwrap();
        for size in 1..=4 {
            let got = simulate_graph(&data, k, &Metric::Levenshtein, size);
            same(&expected, &got, &format!("strings k {k} ranks {size}"));
        }
    }
}

#[test]
fn knn_matches_reference_for_any_rank_count() {
    for (nb, nq, dim) in [(1, 3, 2), (2, 4, 1), (19, 6, 3), (33, 9, 4)] {
        let base = tied(nb, dim, 100 + nb as u64);
        let q = tied(nq, dim, 200 + nq as u64);
        for metric in [Metric::Euclidean, Metric::Cityblock] {
            for k in [1, 10, nb.saturating_sub(1).max(1), nb + 3] {
                let expected = reference::knn(&base, &q, k, &metric).unwrap();
                for size in 1..=5 {
                    let got = simulate_knn(&base, &q, k, &metric, size);
                    same(
                        &expected,
                        &got,
                        &format!("base {nb} {metric} k {k} ranks {size}"),
                    );
                }
            }
        }
    }
}

/// Every index over each rank's shard (the 1-Stage scheme, through the CPU's index engine)
/// merges to the reference's k-NN, for any rank count: tied vectors (k past a shard's size,
/// k > n) and words.
#[test]
fn knn_through_an_index_over_each_shard_matches_reference() {
    use voisin_index::{CpuIndexes, Kind};
    let indexes = CpuIndexes::new(Some(1)).unwrap();
    let words = [
        "kitten", "sitting", "kitten", "mitten", "", "sit", "bitten", "kit", "a",
    ];
    let strings: Dataset = StringSet::from_strings(words).unwrap().into();
    let cases = [
        (tied(33, 3, 7), tied(9, 3, 8), Metric::Euclidean),
        (tied(19, 2, 5), tied(6, 2, 6), Metric::Chebyshev),
        (strings.clone(), strings, Metric::Levenshtein),
    ];
    for (base, q, metric) in &cases {
        let kinds: &[Kind] = if base.as_vectors().is_some() {
            &Kind::EVERY
        } else {
            &Kind::ALL
        };
        for &kind in kinds {
            for k in [1, 4, base.len() + 2] {
                let expected = reference::knn(base, q, k, metric).unwrap();
                for size in 1..=4 {
                    let all: Vec<u32> = (0..size)
                        .flat_map(|r| {
                            let by = knn::Searcher::Index(&indexes, kind);
                            knn::local_by(by, base, q, k, metric, r, size).unwrap()
                        })
                        .collect();
                    let got = knn::merge(base, q, k, metric, size, &all);
                    same(
                        &expected,
                        &got,
                        &format!("{kind} {metric} k {k} ranks {size}"),
                    );
                }
            }
        }
    }
}

fn ckpt(dir: &Path, resume: bool) -> CheckpointOptions {
    CheckpointOptions {
        dir: dir.to_path_buf(),
        resume,
        pass_rows: None,
        stop_after: None,
    }
}

fn pass_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pass-"))
        .collect();
    names.sort();
    names
}

#[test]
fn every_pair_is_measured_once() {
    let data = tied(300, 3, 1);
    let n = 300u64;
    for size in 1..=4 {
        for with_ckpt in [false, true] {
            let tmp = tempfile::tempdir().unwrap();
            let opts = ckpt(&tmp.path().join("c"), false);
            let w = Counting::new();
            run_with(
                &w,
                &data,
                5,
                &Metric::Euclidean,
                size,
                with_ckpt.then_some(&opts),
            )
            .unwrap();
            assert_eq!(
                w.pairs.load(Ordering::Relaxed),
                n * (n - 1) / 2,
                "ranks {size}"
            );
        }
    }
}

#[test]
fn checkpointed_builds_resume_with_any_rank_count() {
    let mut rng = StdRng::seed_from_u64(77);
    for (n, k, metric) in [
        (300, 7, Metric::Euclidean),
        (41, 40, Metric::Cityblock),
        (9, 3, Metric::Cosine),
        (2, 5, Metric::Euclidean),
    ] {
        let data = tied(n, 4, n as u64);
        let expected = reference::graph(&data, k, &metric).unwrap();
        let plain = CpuEngine::default().graph(&data, k, &metric).unwrap();
        same(&expected, &plain, "cpu engine");
        for size in 1..=3 {
            let what = format!("n {n} k {k} {metric} ranks {size}");
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("c");
            let first = run_with(
                &Counting::new(),
                &data,
                k,
                &metric,
                size,
                Some(&ckpt(&dir, false)),
            )
            .unwrap();
            same(&expected, &first, &what);
            let files = pass_files(&dir);
            assert!(!files.is_empty(), "{what}");

            // Nothing left: no tile is computed.
            let w = Counting::new();
            let again = run_with(&w, &data, k, &metric, size + 1, Some(&ckpt(&dir, true))).unwrap();
            same(&expected, &again, &what);
            assert_eq!(w.pairs.load(Ordering::Relaxed), 0, "{what}");

            // Some blocks lost (as a kill mid-build leaves them), resumed with another rank
            // count: the same result, for less work than a fresh build.
            for name in &files {
                if rng.gen_bool(0.5) {
                    std::fs::remove_file(dir.join(name)).unwrap();
                }
            }
            let left = pass_files(&dir).len();
            let rows = graph::Plan::block_rows(n, size, true, graph::row_len(n, k));
            let done_items: usize = pass_files(&dir)
                .iter()
                .map(|f| {
                    let b: usize = f["pass-".len().."pass-".len() + 4].parse().unwrap();
                    ((b + 1) * rows).min(n) - b * rows
                })
                .sum();
            let w = Counting::new();
            let resumed = run_with(
                &w,
                &data,
                k,
                &metric,
                1 + (size % 3),
                Some(&ckpt(&dir, true)),
            )
            .unwrap();
            same(
                &expected,
                &resumed,
                &format!("{what} resumed with {left} files"),
            );
            assert_eq!(pass_files(&dir), files, "{what}");
            // Exactly the pairs between two saved items are skipped.
            let skipped = done_items * done_items.saturating_sub(1) / 2;
            assert_eq!(
                w.pairs.load(Ordering::Relaxed),
                (n * (n - 1) / 2 - skipped) as u64,
                "{what}"
            );
        }
    }
}

#[test]
fn damaged_and_foreign_checkpoints_are_refused_by_rank_zero() {
    let data = tied(200, 3, 3);
    let m = Metric::Euclidean;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    run_with(&Counting::new(), &data, 4, &m, 2, Some(&ckpt(&dir, false))).unwrap();
    let refused = |k: usize, metric: &Metric, opts: &CheckpointOptions, needle: &str| {
        for size in [1, 3] {
            let f = run_with(&Counting::new(), &data, k, metric, size, Some(opts)).unwrap_err();
            assert_eq!(f.code, 2, "{needle}");
            let msg = f.error.expect("rank 0 reports it").to_string();
            assert!(msg.contains(needle), "{msg}");
        }
    };
    refused(4, &m, &ckpt(&dir, false), "not empty");
    refused(5, &m, &ckpt(&dir, true), "k 4 in checkpoint, 5 now");
    refused(
        4,
        &Metric::Cosine,
        &ckpt(&dir, true),
        "metric euclidean in checkpoint",
    );

    let pass = dir.join(&pass_files(&dir)[5]);
    let good = std::fs::read(&pass).unwrap();
    let mut bad = good.clone();
    bad[good.len() / 2] ^= 4;
    std::fs::write(&pass, &bad).unwrap();
    refused(4, &m, &ckpt(&dir, true), "corrupted");
    // A pass of another run of the same shape.
    let other = tied(200, 3, 4);
    let dir2 = tmp.path().join("c2");
    run_with(
        &Counting::new(),
        &other,
        4,
        &m,
        2,
        Some(&ckpt(&dir2, false)),
    )
    .unwrap();
    std::fs::copy(dir2.join(pass.file_name().unwrap()), &pass).unwrap();
    refused(4, &m, &ckpt(&dir, true), "another run");
    std::fs::write(&pass, &good).unwrap();
    let ok = run_with(&Counting::new(), &data, 4, &m, 3, Some(&ckpt(&dir, true))).unwrap();
    same(&reference::graph(&data, 4, &m).unwrap(), &ok, "repaired");
}

#[test]
fn batches_keep_order_and_bound_items() {
    let blocks: Vec<Range<usize>> = [0, 10, 30, 35, 80, 100]
        .windows(2)
        .map(|w| w[0]..w[1])
        .collect();
    let mut tiles = Vec::new();
    for i in 0..blocks.len() {
        for j in i..blocks.len() {
            tiles.push((blocks[i].clone(), blocks[j].clone()));
        }
    }
    for limit in [1, 20, 45, 60, 1000] {
        let got = graph::batches(&tiles, limit);
        let flat: Vec<_> = got.iter().flat_map(|b| b.iter().cloned()).collect();
        assert_eq!(flat, tiles, "limit {limit}");
        for batch in &got {
            let mut ranges: Vec<&Range<usize>> = batch.iter().flat_map(|(r, c)| [r, c]).collect();
            ranges.sort_by_key(|r| r.start);
            ranges.dedup();
            let items: usize = ranges.iter().map(|r| r.len()).sum();
            assert!(
                items <= limit || batch.len() == 1,
                "limit {limit}: {items} items"
            );
        }
    }
}

/// A rank's round in many small batches gives the lists of one batch.
#[test]
fn small_batches_give_the_same_lists() {
    let data = tied(230, 3, 9);
    let m = Metric::Euclidean;
    let big = graph::Plan::new(230, 40, 6);
    let mut small = big.clone();
    small.batch_items = 50;
    let done = vec![false; big.blocks.len()];
    let w = Counting::new();
    for round in big.rounds(&done, 3) {
        for (rank, size) in [(0, 1), (1, 3)] {
            let a = graph::local(&w, &data, (6, &m), &big, &round, &done, (rank, size, 0)).unwrap();
            let b =
                graph::local(&w, &data, (6, &m), &small, &round, &done, (rank, size, 0)).unwrap();
            assert_eq!(a, b);
        }
    }
}

/// One checkpoint format: a build the single-process engine started resumes under MPI, and
/// the engine refuses an MPI checkpoint laid out in blocks it does not use.
#[test]
fn checkpoints_move_between_the_engine_and_ranks() {
    let data = tied(1300, 3, 12);
    let m = Metric::Euclidean;
    let expected = reference::graph(&data, 5, &m).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let opts = CheckpointOptions {
        dir: dir.clone(),
        resume: false,
        pass_rows: Some(512),
        stop_after: None,
    };
    engine().graph_checkpointed(&data, 5, &m, &opts).unwrap();
    std::fs::remove_file(dir.join("pass-0001.bin")).unwrap();
    let w = Counting::new();
    let got = run_with(&w, &data, 5, &m, 2, Some(&ckpt(&dir, true))).unwrap();
    same(&expected, &got, "engine checkpoint resumed by 2 ranks");
    assert_eq!(pass_files(&dir).len(), 3);
    // Only the pairs with the lost block's 512 rows were measured.
    let (lost, n) = (512u64, 1300u64);
    assert_eq!(
        w.pairs.load(Ordering::Relaxed),
        lost * (lost - 1) / 2 + lost * (n - lost)
    );

    let dir2 = tmp.path().join("m");
    run_with(&Counting::new(), &data, 5, &m, 3, Some(&ckpt(&dir2, false))).unwrap();
    let err = engine()
        .graph_checkpointed(&data, 5, &m, &ckpt(&dir2, true))
        .unwrap_err();
    assert!(err.to_string().contains("another block size"), "{err}");
}

/// The gathered-shares driver (the GPU ranks' one) over the CPU engine's side of the graph
/// seam: every rank count gives the reference graph, and its checkpoints (the single-process
/// layout) resume on the CPU engine and the other way round.
#[test]
fn gathered_shares_over_the_cpu_engine() {
    use voisin_mpi::gathered;
    let gathered_run = |data: &Dataset, k, m: &Metric, size, cp: Option<&CheckpointOptions>| {
        let e = engine();
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = Threads::world(size)
                .into_iter()
                .map(|comm| {
                    let e = &e;
                    s.spawn(move || gathered::graph(&comm, e, data, k, m, cp))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        let mut results = results.into_iter();
        let first = results.next().unwrap();
        for other in results {
            match (&first, other) {
                (Ok(_), Ok(None)) => {}
                (Err(a), Err(b)) => assert_eq!(a.code, b.code),
                (a, b) => panic!("ranks disagree: {a:?} / {b:?}"),
            }
        }
        first.map(|r| r.expect("rank 0 holds the result"))
    };
    for (n, k, metric) in [
        (700, 6, Metric::Euclidean),
        (41, 40, Metric::Cityblock),
        (2, 5, Metric::Cosine),
    ] {
        let data = tied(n, 3, n as u64);
        let expected = reference::graph(&data, k, &metric).unwrap();
        for size in 1..=3 {
            let got = gathered_run(&data, k, &metric, size, None).unwrap();
            same(&expected, &got, &format!("n {n} k {k} ranks {size}"));
        }
    }
    let (n, k, m) = (1300, 5, Metric::Euclidean);
    let data = tied(n, 3, 5);
    let expected = reference::graph(&data, k, &m).unwrap();
    let opts = |dir: &Path, resume: bool, stop_after: Option<usize>| CheckpointOptions {
        dir: dir.to_path_buf(),
        resume,
        pass_rows: Some(512),
        stop_after,
    };
    // Killed on the CPU engine after one pass, resumed by ranks; and the other way round.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a");
    assert!(engine()
        .graph_checkpointed(&data, k, &m, &opts(&dir, false, Some(1)))
        .is_err());
    let got = gathered_run(&data, k, &m, 2, Some(&opts(&dir, true, None))).unwrap();
    same(&expected, &got, "cpu engine, resumed by 2 ranks");
    assert_eq!(pass_files(&dir).len(), 3);
    let dir = tmp.path().join("b");
    assert!(gathered_run(&data, k, &m, 3, Some(&opts(&dir, false, Some(2)))).is_err());
    let got = engine()
        .graph_checkpointed(&data, k, &m, &opts(&dir, true, None))
        .unwrap();
    same(&expected, &got, "3 ranks, resumed by the cpu engine");
}

/// Checkpointed gathered ranks keep the open rows' running lists beside their passes (the
/// core driver's partial file): stopped after two passes, the CPU engine resumes without the
/// catch-up, measuring only the pairs of the open rows among themselves.
#[test]
fn gathered_ranks_keep_partial_lists() {
    use voisin_mpi::gathered;
    let (n, k, m) = (2000, 5, Metric::Euclidean);
    let data = tied(n, 3, 8);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p");
    let opts = CheckpointOptions {
        pass_rows: Some(512),
        stop_after: Some(2),
        ..CheckpointOptions::new(&dir, false)
    };
    let e = engine();
    let stopped: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = Threads::world(2)
            .into_iter()
            .map(|comm| {
                let (e, data, m, opts) = (&e, &data, &m, &opts);
                s.spawn(move || gathered::graph(&comm, e, data, k, m, Some(opts)).is_err())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(stopped, [true, true]);
    assert!(dir.join("partial.bin").exists());
    let got = engine()
        .graph_checkpointed(&data, k, &m, &CheckpointOptions::new(&dir, true))
        .unwrap();
    same(&reference::graph(&data, k, &m).unwrap(), &got, "resumed");
    let open = (n - 1024) as u64;
    assert_eq!(got.stats.distance_evals, open * (open - 1) / 2);
}

/// One checkpoint (the single-process layout) passed around every driver, each stopped part
/// way: the CPU engine, then the CPU ranks (owners; they leave the engine's partial lists as
/// they are), then the gathered ranks, then the CPU engine again; the result is the graph and
/// no pair between two finished blocks is measured again by the CPU ranks.
#[test]
fn one_checkpoint_resumes_across_the_engine_and_both_rank_drivers() {
    use voisin_mpi::gathered;
    let (n, k, m) = (2600, 5, Metric::Euclidean);
    let data = tied(n, 3, 21);
    let expected = reference::graph(&data, k, &m).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("x");
    let opts = |resume: bool, stop_after: Option<usize>| CheckpointOptions {
        pass_rows: Some(512),
        stop_after,
        ..CheckpointOptions::new(&dir, resume)
    };
    // The engine: passes 0 and 1, with its partial lists beside them.
    assert!(engine()
        .graph_checkpointed(&data, k, &m, &opts(false, Some(2)))
        .is_err());
    assert_eq!(pass_files(&dir).len(), 2);
    assert!(dir.join("partial.bin").exists());
    // Three CPU ranks: one pass each at most before they stop.
    let w = Counting::new();
    assert!(run_with(&w, &data, k, &m, 3, Some(&opts(true, Some(1)))).is_err());
    let after_ranks = pass_files(&dir).len();
    assert!(after_ranks > 2, "{after_ranks} passes");
    // Only pairs with an open item were measured.
    let (done, open) = (1024u64, (n - 1024) as u64);
    assert!(w.pairs.load(Ordering::Relaxed) <= open * (open - 1) / 2 + open * done);
    // Two gathered ranks: one more pass.
    let e = engine();
    let stopped: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = Threads::world(2)
            .into_iter()
            .map(|comm| {
                let (e, data, m, o) = (&e, &data, &m, opts(true, Some(1)));
                s.spawn(move || gathered::graph(&comm, e, data, k, m, Some(&o)).is_err())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(stopped, [true, true]);
    assert!(pass_files(&dir).len() > after_ranks);
    // The engine finishes it; then every driver finds it complete.
    let got = engine()
        .graph_checkpointed(&data, k, &m, &opts(true, None))
        .unwrap();
    same(&expected, &got, "engine, last");
    assert_eq!(pass_files(&dir).len(), n.div_ceil(512));
    let w = Counting::new();
    let again = run_with(&w, &data, k, &m, 2, Some(&opts(true, None))).unwrap();
    same(&expected, &again, "cpu ranks, complete");
    assert_eq!(w.pairs.load(Ordering::Relaxed), 0);
}
