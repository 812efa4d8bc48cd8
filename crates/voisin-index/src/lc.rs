//! List of Clusters ([Barrientos13] §2.2.5, docs/references.md): the set cut into clusters of a fixed size, each a center,
//! its covering radius and its members, in construction order.
//!
//! Construction: the first center is item 0; its cluster is the m − 1 items nearest to it among
//! those left (ties by smaller index); the next center is the item left whose summed distance to
//! all previous centers is largest (the seed's best heuristic). Every item left after cluster i is
//! at least the covering radius of cluster i away from its center, which gives the early-stop rule:
//! once the query ball lies strictly inside a cluster's ball no later cluster can hold an answer.
//! Members keep their distance to the center, sorted, so a scan only evaluates the members whose
//! stored distance is within the radius of the query's distance to the center.

use rayon::prelude::*;

use crate::file::ItemTally;
use crate::pairs::{one_to_many, PairOracle};
use crate::search::{Collector, MetricIndex, Probe};
use crate::space::Space;

/// One cluster: `members[start..end]` of the index, with their distances to `center`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    /// The center's item (a position in the space); it is in no cluster's member list.
    pub center: u32,
    /// Largest distance from the center to a member (0 for a lone center).
    pub radius: f64,
    /// Where the cluster's members begin in the index's member list (the previous cluster's
    /// `end`).
    pub start: usize,
    /// Where they end (exclusive): `end - start` members, the cluster size less one in every
    /// cluster but the last, which may hold fewer.
    pub end: usize,
}

/// A List of Clusters over a space.
pub struct ListOfClusters<S: Space> {
    space: S,
    clusters: Vec<Cluster>,
    /// Members of all clusters, each cluster's sorted by (distance to center, index).
    members: Vec<u32>,
    member_dist: Vec<f64>,
    /// [`Space::anchor`] of every center (by cluster) and member (as `members`), when the space
    /// has anchors: a scan rules out an item whose anchor is more than the radius from the
    /// query's without reading the item (for words: the length filter, from one sequential
    /// array instead of a random access into the strings).
    anchors: Option<Anchors>,
    build_evals: u64,
}

struct Anchors {
    centers: Vec<f64>,
    members: Vec<f64>,
}

impl Anchors {
    /// `None` also when an id is out of range: parts read from a file are checked after they
    /// are assembled ([`ListOfClusters::check`] refuses them then).
    fn of<S: Space>(space: &S, clusters: &[Cluster], members: &[u32]) -> Option<Anchors> {
        let of = |x: u32| {
            let x = x as usize;
            (x < space.len()).then(|| space.anchor(space.item(x)))?
        };
        Some(Anchors {
            centers: clusters
                .iter()
                .map(|c| of(c.center))
                .collect::<Option<_>>()?,
            members: members.iter().map(|&x| of(x)).collect::<Option<_>>()?,
        })
    }
}

/// The members after its center of each cluster that a List of Clusters over `n` items with
/// clusters of `cluster_size` items (center included) holds, in build order: every cluster takes
/// `cluster_size - 1` members but the last, which takes what is left. Known before any distance
/// is measured (the GPU build sizes its steps by it; auto prices the build by it).
pub fn cluster_cuts(n: usize, cluster_size: usize) -> Vec<usize> {
    let take = cluster_size.max(1) - 1;
    let mut cuts = Vec::with_capacity(n.div_ceil(take + 1));
    let mut left = n;
    while left > 0 {
        left -= 1;
        let cut = take.min(left);
        left -= cut;
        cuts.push(cut);
    }
    cuts
}

impl<S: Space> ListOfClusters<S> {
    /// Builds with clusters of `cluster_size` items (center included; at least 1).
    pub fn build(space: S, cluster_size: usize) -> Self {
        Self::build_with_progress(space, cluster_size, &|_| {})
    }

    /// [`ListOfClusters::build`], calling `progress` with the number of items placed after each
    /// cluster.
    pub fn build_with_progress(
        space: S,
        cluster_size: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Self {
        let measure = |space: &S, center: u32, left: &[(u32, f64)]| {
            let c = space.item(center as usize);
            Ok(left
                .par_iter()
                .map(|&(x, sum)| {
                    let d = space.to_distance(space.key(c, space.item(x as usize)));
                    (d, x, sum + d)
                })
                .collect())
        };
        Self::build_by(space, cluster_size, progress, measure)
            .expect("the CPU's distance pass does not fail")
    }

    /// [`ListOfClusters::build_with_progress`] with every distance asked of `oracle`, one batch
    /// per cluster (the center against every item left): the GPU build of strings. With an
    /// oracle that answers the space's exact distances the index is the CPU build's, part for
    /// part (same centers, members, order, radii and evaluation count).
    pub fn build_with(
        space: S,
        cluster_size: usize,
        progress: &(dyn Fn(usize) + Sync),
        oracle: &dyn PairOracle,
    ) -> voisin::Result<Self> {
        let measure = |_: &S, center: u32, left: &[(u32, f64)]| {
            let ids: Vec<u32> = left.iter().map(|&(x, _)| x).collect();
            let d = one_to_many(oracle, center, &ids)?;
            Ok(left
                .par_iter()
                .zip(d)
                .map(|(&(x, sum), d)| (d, x, sum + d))
                .collect())
        };
        Self::build_by(space, cluster_size, progress, measure)
    }

    /// The heuristic, with `measure(space, center, left)` giving (distance to the center, item,
    /// summed distance with it) for every item left, in `left`'s order.
    fn build_by(
        space: S,
        cluster_size: usize,
        progress: &(dyn Fn(usize) + Sync),
        measure: impl Fn(&S, u32, &[(u32, f64)]) -> voisin::Result<Vec<(f64, u32, f64)>>,
    ) -> voisin::Result<Self> {
        let n = space.len();
        let take = cluster_size.max(1) - 1;
        let mut evals = 0u64;
        // Items left, each with its summed distance to the centers so far: kept together so
        // the sums update inside the parallel distance pass and the next center is a parallel
        // arg-max (at 1M items and clusters of 64, per-item bookkeeping by index dominated the
        // build). The sums add the same values in the same order as one array would.
        let mut left: Vec<(u32, f64)> = (0..n as u32).map(|x| (x, 0.0)).collect();
        let mut clusters = Vec::new();
        let mut members = Vec::with_capacity(n);
        let mut member_dist = Vec::with_capacity(n);
        // Position in `left` of the next center; item 0 first.
        let mut next = (n > 0).then_some(0usize);
        while let Some(pos) = next {
            // The order of `left` is free: the cut and the arg-max below break ties by index.
            let center = left.swap_remove(pos).0;
            let mut dists = measure(&space, center, &left)?;
            evals += dists.len() as u64;
            let by_rank =
                |a: &(f64, u32, f64), b: &(f64, u32, f64)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
            let cut = take.min(dists.len());
            if cut < dists.len() && cut > 0 {
                dists.select_nth_unstable_by(cut - 1, by_rank);
            }
            let (mine, rest) = dists.split_at_mut(cut);
            mine.sort_unstable_by(by_rank);
            let start = members.len();
            for &(d, x, _) in mine.iter() {
                members.push(x);
                member_dist.push(d);
            }
            clusters.push(Cluster {
                center,
                radius: mine.last().map_or(0.0, |m| m.0),
                start,
                end: members.len(),
            });
            progress(members.len() + clusters.len());
            left = rest.par_iter().map(|&(_, x, sum)| (x, sum)).collect();
            // Largest sum, ties to the smaller index (a total order, so no equal maxima).
            next = left
                .par_iter()
                .enumerate()
                .max_by(|(_, a), (_, b)| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
                .map(|(i, _)| i);
        }
        let anchors = Anchors::of(&space, &clusters, &members);
        Ok(ListOfClusters {
            space,
            clusters,
            members,
            member_dist,
            anchors,
            build_evals: evals,
        })
    }

    /// Assembles an index from its parts (read from a file, or built elsewhere: the GPU build
    /// of voisin-cuda) and validates it with [`ListOfClusters::check`]: every item placed once,
    /// contiguous clusters, every stored member distance re-measured bit for bit, members in
    /// (distance, index) order and each radius its largest member distance. `build_evals` is
    /// what the construction cost (0 for a file).
    pub fn from_parts(
        space: S,
        clusters: Vec<Cluster>,
        members: Vec<u32>,
        member_dist: Vec<f64>,
        build_evals: u64,
    ) -> Result<Self, String> {
        // Anchors leave out ids past the set (check refuses them next).
        let anchors = Anchors::of(&space, &clusters, &members);
        let lc = ListOfClusters {
            space,
            clusters,
            members,
            member_dist,
            anchors,
            build_evals,
        };
        lc.check()?;
        Ok(lc)
    }

    /// The clusters in construction order, the order a search visits them in.
    pub fn clusters(&self) -> &[Cluster] {
        &self.clusters
    }

    /// The clusters, the members of all clusters (each cluster's `start..end`) and the members'
    /// distances to their centers: what a device copy of the index (voisin-cuda) uploads.
    pub fn parts(&self) -> (&[Cluster], &[u32], &[f64]) {
        (&self.clusters, &self.members, &self.member_dist)
    }

    /// Distance evaluations the construction made.
    pub fn build_evals(&self) -> u64 {
        self.build_evals
    }

    /// A checksum catches accidents, not forgeries: every stored distance is computed again (one
    /// evaluation per member, as the build made them, so equal bit for bit), each cluster's
    /// members must be in (distance, index) order and its covering radius must be its largest
    /// member distance, which the search's pruning relies on.
    fn check_distances(&self) -> Result<(), String> {
        for (i, c) in self.clusters.iter().enumerate() {
            let center = self.space.item(c.center as usize);
            let mut prev: Option<(f64, u32)> = None;
            for j in c.start..c.end {
                let x = self.members[j];
                let d = self
                    .space
                    .to_distance(self.space.key(center, self.space.item(x as usize)));
                if d.to_bits() != self.member_dist[j].to_bits() {
                    return Err(format!(
                        "cluster {i}: item {x} is stored at distance {} from its center but is at {d}",
                        self.member_dist[j]
                    ));
                }
                if prev.is_some_and(|(pd, px)| pd.total_cmp(&d).then(px.cmp(&x)).is_ge()) {
                    return Err(format!("cluster {i}: members are not in order"));
                }
                prev = Some((d, x));
            }
            let radius = prev.map_or(0.0, |(d, _)| d);
            if radius.to_bits() != c.radius.to_bits() {
                return Err(format!(
                    "cluster {i}: covering radius {} is not its largest member distance {radius}",
                    c.radius
                ));
            }
        }
        Ok(())
    }

    /// Checks that every item is a center or a member exactly once and that the clusters are
    /// laid out consistently; used on indexes read from files.
    pub fn check(&self) -> Result<(), String> {
        let n = self.space.len();
        let mut tally = ItemTally::new(n);
        let mut at = 0;
        for c in &self.clusters {
            if c.start != at || c.end < c.start || c.end > self.members.len() {
                return Err("cluster ranges are inconsistent".into());
            }
            if c.radius.is_nan() || c.radius < 0.0 {
                return Err("a covering radius is negative or NaN".into());
            }
            tally.mark(c.center)?;
            for &x in &self.members[c.start..c.end] {
                tally.mark(x)?;
            }
            at = c.end;
        }
        if at != self.members.len() || self.member_dist.len() != self.members.len() {
            return Err("member lists are inconsistent".into());
        }
        self.check_distances()?;
        if !tally.complete() {
            return Err("some items belong to no cluster".into());
        }
        Ok(())
    }
}

impl<S: Space> MetricIndex for ListOfClusters<S> {
    type Space = S;

    fn space(&self) -> &S {
        &self.space
    }

    fn search(&self, probe: &Probe<'_, S>, out: &mut dyn Collector) {
        let space = &self.space;
        let anchors = self.anchors.as_ref();
        let qa = anchors
            .and_then(|_| space.anchor(probe.query()))
            .unwrap_or(0.0);
        // Whether the anchors alone put the item of anchor `a` farther than `limit` (anchors are
        // exact, so no allowance).
        let apart = |a: f64, limit: f64| (a - qa).abs() > limit;
        for (i, c) in self.clusters.iter().enumerate() {
            let r = out.radius();
            // Beyond radius + r from the center neither the center nor a member can answer.
            let reach = c.radius + r + space.slack(c.radius + r);
            if anchors.is_some_and(|a| apart(a.centers[i], reach)) {
                continue;
            }
            let Some(dc) = probe.within(c.center as usize, reach) else {
                continue;
            };
            out.offer(dc, c.center);
            let r = out.radius();
            let q = dc.dist;
            if !space.beyond(q - c.radius, r, q + c.radius) {
                let ds = &self.member_dist[c.start..c.end];
                let lo = ds.partition_point(|&d| space.beyond(q - d, r, q + d));
                for p in c.start + lo..c.end {
                    let r = out.radius();
                    let d = self.member_dist[p];
                    if space.beyond(d - q, r, q + d) {
                        break;
                    }
                    if anchors.is_some_and(|a| apart(a.members[p], r)) {
                        continue;
                    }
                    if let Some(dx) = probe.within(self.members[p] as usize, r) {
                        out.offer(dx, self.members[p]);
                    }
                }
            }
            // Early stop: the ball (q, r) lies strictly inside this cluster's ball, and every
            // later item is at least the covering radius from this center.
            let r = out.radius();
            if q + r + space.slack(q + r) < c.radius {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::VectorSpace;
    use voisin::{Metric, VectorSet};

    /// Forged structures that pass the layout checks (issue 14): zero radii, a stored distance
    /// that is not the real one, members out of order.
    #[test]
    fn check_recomputes_distances_and_radii() {
        let vals: Vec<f32> = (0..40).map(|i| ((i * 7) % 13) as f32).collect();
        let set = VectorSet::from_f32(20, 2, vals).unwrap();
        let space = VectorSpace::new(&set, Metric::Euclidean).unwrap();
        let mut lc = ListOfClusters::build(space, 5);
        assert_eq!(lc.check(), Ok(()));
        let c = lc.clusters.iter().position(|c| c.radius > 0.0).unwrap();
        let (start, end) = (lc.clusters[c].start, lc.clusters[c].end);
        let radius = lc.clusters[c].radius;
        lc.clusters[c].radius = 0.0;
        assert!(lc.check().unwrap_err().contains("covering radius"));
        lc.clusters[c].radius = radius;
        lc.member_dist[start] += 0.5;
        assert!(lc.check().unwrap_err().contains("stored at distance"));
        lc.member_dist[start] -= 0.5;
        lc.members[start..end].reverse();
        lc.member_dist[start..end].reverse();
        assert!(lc.check().is_err());
    }

    /// from_parts (what the GPU build assembles) accepts a build's own parts and refuses parts
    /// that break an invariant.
    #[test]
    fn from_parts_validates() {
        let vals: Vec<f32> = (0..60).map(|i| ((i * 5) % 11) as f32).collect();
        let set = VectorSet::from_f32(30, 2, vals).unwrap();
        let space = || VectorSpace::new(&set, Metric::Cityblock).unwrap();
        let lc = ListOfClusters::build(space(), 4);
        let (c, m, d) = lc.parts();
        let (c, m, d) = (c.to_vec(), m.to_vec(), d.to_vec());
        let ok = ListOfClusters::from_parts(space(), c.clone(), m.clone(), d.clone(), 7).unwrap();
        assert_eq!(ok.build_evals(), 7);
        assert_eq!(ok.parts(), lc.parts());
        let mut bad_d = d.clone();
        bad_d[2] += 1.0;
        let err = ListOfClusters::from_parts(space(), c.clone(), m.clone(), bad_d, 0);
        assert!(err.err().unwrap().contains("stored at distance"));
        let mut twice = m.clone();
        twice[1] = twice[0];
        assert!(ListOfClusters::from_parts(space(), c.clone(), twice, d.clone(), 0).is_err());
        let mut short = c.clone();
        short.pop();
        let err = ListOfClusters::from_parts(space(), short, m.clone(), d.clone(), 0);
        assert!(err.is_err());
        let mut radius = c.clone();
        let i = radius.iter().position(|c| c.radius > 0.0).unwrap();
        radius[i].radius *= 2.0;
        let err = ListOfClusters::from_parts(space(), radius, m, d, 0);
        assert!(err.err().unwrap().contains("covering radius"));
    }
}
