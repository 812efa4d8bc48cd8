//! Which work goes where in a graph build, for every driver (the CPU engine, one or several
//! GPUs, MPI ranks): the row blocks of the checkpoint layout, contiguous shards ([`split`]), the
//! triangle of tile pairs (I, J), I ≤ J, in row-major order ([`triangle`]), dealing work to N
//! parts ([`deal`], one rule for threads, GPUs and ranks) and the shares of a build in passes
//! ([`pass_steps`]): one share per open pass, after a catch-up when a resumed build has
//! finished passes.
//!
//! Owns arithmetic only: no data, no device, no files.

use std::ops::Range;

/// Rows per block of the single-process graph, and the block unit of the checkpoint layout
/// that the CPU and GPU drivers share (so either resumes the other's checkpoint).
pub const BLOCK_ROWS: usize = 512;

/// Which tile pairs (I, J), I ≤ J, of the triangle a caller computes.
pub type TileOwner<'a> = dyn Fn(usize, usize) -> bool + Sync + 'a;

/// `n` items in `parts` contiguous, nearly equal ranges (earlier ranges one larger); empty
/// ranges when `parts > n`.
pub fn split(n: usize, parts: usize) -> Vec<Range<usize>> {
    let parts = parts.max(1);
    let (q, r) = (n / parts, n % parts);
    let mut at = 0;
    (0..parts)
        .map(|p| {
            let len = q + usize::from(p < r);
            at += len;
            at - len..at
        })
        .collect()
}

/// The tile pairs (I, J), I ≤ J, of an `nt`-tile triangle in row-major order.
pub fn triangle(nt: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..nt).flat_map(move |i| (i..nt).map(move |j| (i, j)))
}

/// The position of tile pair (I, J), I ≤ J, in [`triangle`]`(nt)`.
pub fn triangle_index(nt: usize, i: usize, j: usize) -> usize {
    i * nt - i * i.saturating_sub(1) / 2 + (j - i)
}

/// The deal of a sequence of work items over `parts` callers: item number p goes to part
/// p mod `parts`. Neighbouring items (tile pairs of one row) cost about the same, so every part
/// gets the same work within one item. The owner test of `part`, by position.
pub fn deal(parts: usize, part: usize) -> impl Fn(usize) -> bool + Sync {
    let parts = parts.max(1);
    move |position| position % parts == part
}

/// [`deal`] over the tile pairs of an `nt`-tile triangle, numbered as [`triangle`] lists them:
/// the owner test of `part` by pair.
pub fn cyclic_share(nt: usize, parts: usize, part: usize) -> impl Fn(usize, usize) -> bool + Sync {
    let mine = deal(parts, part);
    move |i, j| mine(triangle_index(nt, i, j))
}

/// One share of a build in passes: the tile pairs it takes, by the passes of their row and
/// column tiles, and the pass whose rows are final once it is merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassStep {
    /// `None` for the catch-up: finished passes' rows against open passes' columns.
    pub proves: Option<usize>,
}

impl PassStep {
    /// Whether this share computes a tile pair (I, J), I ≤ J, of row pass `pi`, column pass `pj`.
    pub fn takes(&self, done: &[bool], pi: usize, pj: usize) -> bool {
        self.takes_after(done, &[], pi, pj)
    }

    /// [`PassStep::takes`] for a build that starts with the pairs of the passes `covered` (the
    /// first finished ones, a prefix) with every open row already in its running lists (a
    /// checkpoint's partial lists): the catch-up takes only the other finished passes. An empty
    /// `covered` is none.
    pub fn takes_after(&self, done: &[bool], covered: &[bool], pi: usize, pj: usize) -> bool {
        match self.proves {
            None => done[pi] && !covered.get(pi).copied().unwrap_or(false) && !done[pj],
            Some(p) => pi == p,
        }
    }
}

/// The shares of a build whose passes `done` are finished, in order: the catch-up when some
/// are, then one per open pass. Pass p's share takes its rows against themselves and every
/// later item; the pairs with earlier items came with earlier shares (or the catch-up), so its
/// rows have met every other item once it is merged, and every pair is measured once.
pub fn pass_steps(done: &[bool]) -> Vec<PassStep> {
    pass_steps_after(done, &[])
}

/// [`pass_steps`] for a build whose open rows start with the pairs of the finished passes
/// `covered` (see [`PassStep::takes_after`]): the catch-up comes only when some finished pass
/// is not covered. `covered` must be a prefix of `done` (passes 0..c, all finished); an empty
/// one is none.
pub fn pass_steps_after(done: &[bool], covered: &[bool]) -> Vec<PassStep> {
    let missing = (0..done.len()).any(|p| done[p] && !covered.get(p).copied().unwrap_or(false));
    let catch_up = missing.then_some(PassStep { proves: None });
    catch_up
        .into_iter()
        .chain(
            (0..done.len())
                .filter(|&p| !done[p])
                .map(|p| PassStep { proves: Some(p) }),
        )
        .collect()
}

/// The largest power of two at most `x` (1 for 0): the tile size a fresh checkpoint's passes
/// are whole multiples of (`Checkpoint::open_aligned`) for a tile edge `x`.
pub fn pass_alignment(x: usize) -> usize {
    1 << (usize::BITS - 1 - x.max(1).leading_zeros())
}

/// The tile edge of a build in `passes` passes of `rows_per_pass` rows on backends whose tile
/// edge is `edge`: at most `edge`, and a divisor of the pass size so that no tile straddles
/// two passes.
pub fn pass_tile_edge(edge: usize, rows_per_pass: usize, passes: usize) -> usize {
    let edge = pass_alignment(edge);
    if passes <= 1 {
        edge
    } else {
        edge.min(rows_per_pass & rows_per_pass.wrapping_neg())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_everything_once_and_evenly() {
        for n in 0..40 {
            for parts in 1..9 {
                let r = split(n, parts);
                assert_eq!(r.len(), parts);
                assert_eq!(r[0].start, 0);
                assert_eq!(r[parts - 1].end, n);
                for w in r.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                    assert!(w[0].len() >= w[1].len());
                }
                let (lo, hi) = (n / parts, n.div_ceil(parts));
                assert!(r.iter().all(|x| x.len() == lo || x.len() == hi));
            }
        }
    }

    /// The one dealing rule: every item of a sequence (here the tile pairs of a triangle, by
    /// position and by pair) goes to exactly one part, and the counts differ by one at most.
    #[test]
    fn deals_cover_once_and_evenly() {
        for nt in 1..30 {
            assert!(triangle(nt)
                .enumerate()
                .all(|(p, (i, j))| triangle_index(nt, i, j) == p));
            for parts in 1..6 {
                let owners: Vec<_> = (0..parts).map(|g| cyclic_share(nt, parts, g)).collect();
                let by_position: Vec<_> = (0..parts).map(|g| deal(parts, g)).collect();
                let mut counts = vec![0usize; parts];
                for (p, (i, j)) in triangle(nt).enumerate() {
                    let who: Vec<usize> = (0..parts).filter(|&g| owners[g](i, j)).collect();
                    assert_eq!(who.len(), 1, "nt={nt} parts={parts} ({i},{j})");
                    assert!(by_position[who[0]](p));
                    counts[who[0]] += 1;
                }
                let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                assert!(hi - lo <= 1, "{counts:?}");
            }
        }
    }

    /// Every pair of items with an open pass's item is measured exactly once over the shares,
    /// and before that pass is proved; pairs of two finished passes are never measured. Tile
    /// pairs (I, J), I ≤ J, are modelled item by item, tiles dividing the pass size.
    #[test]
    fn shares_measure_each_needed_pair_once_and_in_time() {
        for (n, t, rpp) in [
            (10usize, 1usize, 3usize),
            (23, 2, 4),
            (23, 4, 8),
            (17, 3, 3),
            (9, 9, 9),
        ] {
            let passes = n.div_ceil(rpp);
            for mask in 0..1u32 << passes {
                let done: Vec<bool> = (0..passes).map(|p| mask >> p & 1 == 1).collect();
                let pass_of = |a: usize| a / rpp;
                let all = pass_steps(&done);
                let mut count = std::collections::BTreeMap::<(usize, usize), u32>::new();
                let mut proved = vec![false; passes];
                for step in &all {
                    let owned =
                        |i: usize, j: usize| step.takes(&done, pass_of(i * t), pass_of(j * t));
                    for a in 0..n {
                        for b in a + 1..n {
                            if owned(a / t, b / t) {
                                *count.entry((a, b)).or_default() += 1;
                            }
                        }
                    }
                    if let Some(p) = step.proves {
                        assert!(!done[p] && !proved[p], "pass {p} proved twice or when done");
                        proved[p] = true;
                        // Its rows have met every other item once.
                        for a in (0..n).filter(|&a| pass_of(a) == p) {
                            for b in (0..n).filter(|&b| b != a) {
                                let (x, y) = (a.min(b), a.max(b));
                                assert_eq!(
                                    count.get(&(x, y)),
                                    Some(&1),
                                    "n {n} t {t} done {done:?} pair {x},{y}"
                                );
                            }
                        }
                    }
                }
                assert!(proved.iter().zip(&done).all(|(p, d)| p != d), "{done:?}");
                for a in 0..n {
                    for b in a + 1..n {
                        let needed = !done[pass_of(a)] || !done[pass_of(b)];
                        let got = count.get(&(a, b)).copied().unwrap_or(0);
                        assert_eq!(got, u32::from(needed), "{done:?} pair {a},{b}");
                    }
                }
            }
        }
    }

    /// With the pairs of the first finished passes (`covered`) already in the open rows'
    /// lists, the remaining shares measure every other needed pair once, and nothing twice.
    #[test]
    fn shares_after_partial_lists_measure_the_rest_once() {
        let (n, t, rpp) = (23usize, 2usize, 4usize);
        let passes = n.div_ceil(rpp);
        let pass_of = |a: usize| a / rpp;
        for mask in 0..1u32 << passes {
            let done: Vec<bool> = (0..passes).map(|p| mask >> p & 1 == 1).collect();
            // Covered passes are a prefix of the finished ones.
            let prefix = done.iter().take_while(|&&d| d).count();
            for c in 0..=prefix {
                let covered: Vec<bool> = (0..passes).map(|p| p < c).collect();
                let mut count = std::collections::BTreeMap::<(usize, usize), u32>::new();
                // What the partial lists hold: pairs of a covered pass with an open row.
                for a in 0..n {
                    for b in a + 1..n {
                        let (pa, pb) = (pass_of(a), pass_of(b));
                        if (covered[pa] && !done[pb]) || (covered[pb] && !done[pa]) {
                            *count.entry((a, b)).or_default() += 1;
                        }
                    }
                }
                let steps = pass_steps_after(&done, &covered);
                let catch_up = steps.iter().any(|s| s.proves.is_none());
                assert_eq!(catch_up, done != covered, "{done:?} {covered:?}");
                for step in &steps {
                    for a in 0..n {
                        for b in a + 1..n {
                            let (i, j) = (a / t, b / t);
                            if step.takes_after(&done, &covered, pass_of(i * t), pass_of(j * t)) {
                                *count.entry((a, b)).or_default() += 1;
                            }
                        }
                    }
                }
                for a in 0..n {
                    for b in a + 1..n {
                        let needed = !done[pass_of(a)] || !done[pass_of(b)];
                        let got = count.get(&(a, b)).copied().unwrap_or(0);
                        assert_eq!(got, u32::from(needed), "{done:?} {covered:?} pair {a},{b}");
                    }
                }
            }
        }
    }

    #[test]
    fn powers_of_two_below() {
        let got: Vec<usize> = [0, 1, 2, 3, 511, 512, 513, 16384, 20000]
            .iter()
            .map(|&x| pass_alignment(x))
            .collect();
        assert_eq!(got, [1, 1, 2, 2, 256, 512, 512, 16384, 16384]);
        // Tiles divide the pass size; one pass takes the whole edge.
        assert_eq!(pass_tile_edge(16384, 4096 * 3, 5), 4096);
        assert_eq!(pass_tile_edge(3000, 512 * 5, 2), 512);
        assert_eq!(pass_tile_edge(300, 1024, 9), 256);
        assert_eq!(pass_tile_edge(3000, 1 << 20, 1), 2048);
    }
}
