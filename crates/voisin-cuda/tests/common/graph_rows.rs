//! The rows a k-NN graph must hold for some of its items, from the CPU engine: for graphs too
//! large to compute whole on the CPU. Shared by the GPU tests (through common/) and
//! voisin-bench's gpu_bench (through `#[path]`).

use voisin::cpu::CpuEngine;
use voisin::{Dataset, Engine, Metric, VectorSet};

/// `count` evenly spaced items of an `n`-item set (every item when `count` ≥ n).
pub fn picks(n: usize, count: usize) -> Vec<usize> {
    let m = count.min(n);
    (0..m).map(|i| i * n / m).collect()
}

/// The graph rows (ids, distances) of the items `picks` of the vector set `base` under
/// `metric`, `k` each: the CPU engine's k + 1 nearest of each item's own row with the item left
/// out, or the last of them when more than k + 1 items tie at distance 0 before it.
pub fn expected(
    base: &Dataset,
    picks: &[usize],
    k: usize,
    metric: &Metric,
) -> Vec<(Vec<u32>, Vec<f32>)> {
    let set = base.as_vectors().expect("a vector set");
    let rows = picks
        .iter()
        .flat_map(|&i| set.row_f32(i).to_vec())
        .collect();
    let q: Dataset = VectorSet::from_f32(picks.len(), set.dim(), rows)
        .expect("the picked rows")
        .into();
    let want = CpuEngine::default()
        .knn(base, &q, k + 1, metric)
        .expect("the CPU engine's k-NN");
    picks
        .iter()
        .enumerate()
        .map(|(j, &i)| {
            let (ids, dist) = want.row(j);
            let keep: Vec<usize> = match ids.iter().position(|&x| x as usize == i) {
                Some(p) => (0..ids.len()).filter(|&c| c != p).collect(),
                None => (0..k.min(ids.len())).collect(),
            };
            (
                keep.iter().map(|&c| ids[c]).collect(),
                keep.iter().map(|&c| dist[c]).collect(),
            )
        })
        .collect()
}
