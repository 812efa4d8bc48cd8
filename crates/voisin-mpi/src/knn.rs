//! Distributed k-NN: the base set is cut into one contiguous shard per rank; each rank finds the
//! exact k nearest of every query within its shard; rank 0 merges the shards' lists.
//!
//! Every rank reads all queries: queries are usually few next to the base, and this way each
//! shard is scanned once. A rank searches its shard with any engine (CPU, or its GPU), by brute
//! force or through a metric index built over the shard by the factory's index engine (the
//! seed's 1-Stage scheme: items partitioned over the ranks, queries to every rank, lists merged):
//! every engine's lists are the exact top-k, so the merge is the same.

use voisin::metric::scale::KeyScale;
use voisin::{Dataset, Engine, KnnResult, Metric, Result};
use voisin_index::{IndexEngine, Kind, Params};

use crate::comm::{agree, Comm, Failed};
use crate::rekey;
use crate::slice::{slice, split};

/// What searches a rank's shard.
#[derive(Clone, Copy)]
pub enum Searcher<'a> {
    /// Brute force on an engine (the CPU engine, or the rank's GPU).
    Brute(&'a dyn Engine),
    /// A metric index of this kind (default parameters) built over the shard by an index
    /// engine (the CPU's, or the rank's GPU's), then searched.
    Index(&'a dyn IndexEngine, Kind),
}

impl Searcher<'_> {
    /// The exact k nearest items of `shard` for each query.
    pub fn knn(
        &self,
        shard: &Dataset,
        queries: &Dataset,
        k: usize,
        metric: &Metric,
    ) -> Result<KnnResult> {
        match *self {
            Searcher::Brute(engine) => engine.knn(shard, queries, k, metric),
            Searcher::Index(indexes, kind) => {
                let index =
                    indexes.build(shard, metric.clone(), kind, &Params::default(), &|_| {})?;
                indexes.knn(&index, queries, k).map(|s| s.result)
            }
        }
    }
}

/// Rank `rank`'s share: for each query, the global indices of its best `min(k, shard)` base
/// items in this rank's shard, row after row, from `engine` (the CPU engine, or the rank's GPU).
pub fn local(
    engine: &dyn Engine,
    base: &Dataset,
    queries: &Dataset,
    k: usize,
    metric: &Metric,
    rank: usize,
    size: usize,
) -> Result<Vec<u32>> {
    local_by(
        Searcher::Brute(engine),
        base,
        queries,
        k,
        metric,
        rank,
        size,
    )
}

/// [`local`] with any [`Searcher`] (brute force or an index over the shard).
pub fn local_by(
    searcher: Searcher<'_>,
    base: &Dataset,
    queries: &Dataset,
    k: usize,
    metric: &Metric,
    rank: usize,
    size: usize,
) -> Result<Vec<u32>> {
    let shard = split(base.len(), size)[rank].clone();
    if shard.is_empty() {
        return Ok(Vec::new());
    }
    let res = searcher.knn(&slice(base, shard.clone()), queries, k, metric)?;
    Ok(res
        .indices
        .iter()
        .map(|&i| i + shard.start as u32)
        .collect())
}

/// Rank 0's merge of every rank's [`local`] output, concatenated in rank order.
pub fn merge(
    base: &Dataset,
    queries: &Dataset,
    k: usize,
    metric: &Metric,
    size: usize,
    gathered: &[u32],
) -> KnnResult {
    let kk = k.min(base.len());
    let nq = queries.len();
    // Where each rank's rows start in `gathered`, and how long they are.
    let mut parts = Vec::with_capacity(size);
    let mut at = 0;
    for shard in split(base.len(), size) {
        let kr = k.min(shard.len());
        parts.push((at, kr));
        at += kr * nq;
    }
    assert_eq!(at, gathered.len(), "gathered lists have the wrong length");
    let mut rows = Vec::with_capacity(nq * (1 + 2 * kk));
    let keyed = (metric, KeyScale::of_sets(metric, base, queries));
    let mut cand = Vec::with_capacity(size * kk);
    for q in 0..nq {
        cand.clear();
        for &(start, kr) in &parts {
            cand.extend_from_slice(&gathered[start + q * kr..start + (q + 1) * kr]);
        }
        let best = rekey::best(keyed, base, queries, q, &cand, kk);
        rekey::push_row(&mut rows, keyed, q, &best, kk);
    }
    rekey::assemble(&rows, nq, kk)
}

/// The whole k-NN search over `comm`'s ranks, each searching its shard with `searcher`; the
/// result on rank 0, `None` elsewhere.
pub fn run(
    comm: &dyn Comm,
    searcher: Searcher<'_>,
    base: &Dataset,
    queries: &Dataset,
    k: usize,
    metric: &Metric,
) -> std::result::Result<Option<KnnResult>, Failed> {
    let (rank, size) = (comm.rank(), comm.size());
    let mine = local_by(searcher, base, queries, k, metric, rank, size);
    let mine = agree(comm, mine)?;
    Ok(comm
        .gather(mine)
        .map(|all| merge(base, queries, k, metric, size, &all)))
}
