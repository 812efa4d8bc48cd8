//! Splitting work into shards and merging the shards' candidate lists: the one merge that
//! several GPUs (multi.rs), a base streamed through one GPU (stream.rs) and the partial graphs of
//! several GPUs or ranks all use.
//!
//! Owns the candidate-list contract across shards; knows nothing about the device. A shard's
//! list for a query keeps some smallest approximate keys of the items that shard saw, and every
//! item it saw but left out has a key at least its *barrier* (its largest kept key), unless the
//! list is `complete`. The merged list keeps that contract over the union of the items: it is
//! cut at the smallest barrier of the incomplete lists (items of other shards above that cut
//! could hide smaller left-out ones) and then at `cap` entries.

use rayon::prelude::*;

use crate::search::finish::Raw;

impl Raw {
    /// The list of a query or item whose shard holds none of the items it is compared with.
    pub(crate) fn done() -> Raw {
        Raw {
            cands: Vec::new(),
            complete: true,
        }
    }
}

/// `n` items in `parts` contiguous, nearly equal ranges: the graph schedule's one split.
pub(crate) use voisin::graph::split;

/// Shifts a shard's local item indices to global ones.
pub(crate) fn offset(raws: &mut [Raw], by: usize) {
    if by == 0 {
        return;
    }
    let by = u32::try_from(by).expect("item indices fit in u32");
    raws.par_iter_mut()
        .for_each(|r| r.cands.iter_mut().for_each(|c| c.1 += by));
}

/// Merges one query's (or item's) lists from several shards, indices already global and the
/// shards disjoint: each list is its entries and whether it is complete. The result is sorted
/// by (key, index), at most `cap` long.
pub(crate) fn merge_candidates<L, E>(lists: L, cap: usize) -> Raw
where
    L: IntoIterator<Item = (E, bool)>,
    E: IntoIterator<Item = (f32, u32)>,
{
    let mut cands = Vec::new();
    let complete = merge_candidates_into(lists, cap, &mut cands);
    Raw { cands, complete }
}

/// [`merge_candidates`] into a caller's buffer (cleared first), returning whether the merged list
/// is complete: a merge of millions of graph items reuses one buffer per thread instead of
/// allocating one list per item.
pub(crate) fn merge_candidates_into<L, E>(lists: L, cap: usize, cands: &mut Vec<(f32, u32)>) -> bool
where
    L: IntoIterator<Item = (E, bool)>,
    E: IntoIterator<Item = (f32, u32)>,
{
    cands.clear();
    let mut cut: Option<f32> = None;
    let mut complete = true;
    // An incomplete list with nothing kept says nothing about the items it left out, so no
    // other item can be kept: its barrier is -inf.
    let mut blocked = false;
    for (entries, whole) in lists {
        let start = cands.len();
        cands.extend(entries);
        if !whole {
            complete = false;
            match cands[start..].iter().map(|c| c.0).reduce(f32::max) {
                Some(m) => cut = Some(cut.map_or(m, |c| c.min(m))),
                None => blocked = true,
            }
        }
    }
    let before = cands.len();
    if blocked {
        cands.clear();
    } else if let Some(cut) = cut {
        cands.retain(|c| c.0 <= cut);
    }
    cands.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    cands.truncate(cap);
    complete && cands.len() == before
}

/// Merges per-shard results query by query: `parts[s][q]` is shard `s`'s list for query `q`.
pub(crate) fn merge(parts: &[Vec<Raw>], cap: usize) -> Vec<Raw> {
    let nq = parts.first().map_or(0, Vec::len);
    assert!(
        parts.iter().all(|p| p.len() == nq),
        "shards answer the same queries"
    );
    (0..nq)
        .into_par_iter()
        .map(|q| {
            merge_candidates(
                parts
                    .iter()
                    .map(|p| (p[q].cands.iter().copied(), p[q].complete)),
                cap,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::prelude::*;

    /// What one shard's device would return for one query: the `kp` smallest of its items
    /// (ties at the cut broken arbitrarily), complete when it kept all.
    fn shard_list(rng: &mut StdRng, items: &[(f32, u32)], kp: usize) -> Raw {
        let mut v = items.to_vec();
        v.shuffle(rng);
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v.truncate(kp);
        v.shuffle(rng);
        Raw {
            complete: v.len() == items.len(),
            cands: v,
        }
    }

    /// Random shards over keys with many ties: the merged list keeps the contract against the
    /// union of all items, and is complete exactly when it holds every item.
    #[test]
    fn merged_lists_keep_the_contract() {
        let mut rng = StdRng::seed_from_u64(rand::random());
        for _ in 0..3000 {
            let n = rng.gen_range(0..60usize);
            let keys: Vec<(f32, u32)> = (0..n)
                .map(|i| (rng.gen_range(0..8) as f32 * 0.5, i as u32))
                .collect();
            let shards = split(n, rng.gen_range(1..5));
            let cap = rng.gen_range(1..20);
            let lists: Vec<Raw> = shards
                .iter()
                .map(|r| {
                    let kp = rng.gen_range(1..16);
                    shard_list(&mut rng, &keys[r.clone()], kp)
                })
                .collect();
            let m = merge_candidates(
                lists.iter().map(|r| (r.cands.iter().copied(), r.complete)),
                cap,
            );
            // The per-query form gives the same list.
            let parts: Vec<Vec<Raw>> = lists
                .iter()
                .map(|r| {
                    vec![Raw {
                        cands: r.cands.clone(),
                        complete: r.complete,
                    }]
                })
                .collect();
            let again = merge(&parts, cap);
            assert_eq!((&again[0].cands, again[0].complete), (&m.cands, m.complete));
            assert!(m.cands.len() <= cap);
            assert!(m.cands.windows(2).all(|w| w[0].0 <= w[1].0));
            let mut seen: Vec<u32> = m.cands.iter().map(|c| c.1).collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), m.cands.len(), "no duplicates");
            for &(key, i) in &m.cands {
                assert_eq!(keys[i as usize].0, key);
            }
            if m.complete {
                assert_eq!(m.cands.len(), n);
            } else if let Some(&(barrier, _)) = m.cands.last() {
                for &(key, i) in &keys {
                    if !seen.contains(&i) {
                        assert!(
                            key >= barrier,
                            "left out {i} ({key}) below barrier {barrier}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn offsets_shift_indices() {
        let mut raws = vec![Raw {
            cands: vec![(1.0, 0), (2.0, 3)],
            complete: false,
        }];
        offset(&mut raws, 10);
        assert_eq!(raws[0].cands, vec![(1.0, 10), (2.0, 13)]);
    }
}
