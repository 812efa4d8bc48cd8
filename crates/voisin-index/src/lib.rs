//! Metric-space indexes for voisin ([Barrientos13], [SharmaJoshi]; docs/references.md): List of Clusters, SSS
//! pivots and a cover tree, answering exact range and k-NN queries under any true metric.
//!
//! - [`space`]: the [`Space`] trait (items, exact keys, distances) and its adapters for vector
//!   sets, string sets and user distances.
//! - [`lc`], [`sss`], [`cover`]: the three metric-space structures; each only walks itself for
//!   one query. [`kd`]: a k-d tree for low-dimensional vectors under a coordinate-wise metric.
//! - [`search`]: probes that count distance evaluations, range and k-NN collectors, the parallel
//!   loop over queries and the result types of the core crate.
//! - [`pairs`]: the [`PairOracle`] seam through which constructions ask for batches of
//!   distances (the GPU builds answer them on the device).
//! - [`file`]: the self-contained index file (items, structure, checksum).
//! - [`auto`]: brute force or which index for a run (`--engine`), from an intrinsic-dimension
//!   estimate.
//!
//! Answers equal the brute-force reference (`voisin::reference`) exactly: the same keys, rows
//! sorted by (distance, index). This crate computes distances only through the core crate's
//! public metric functions and does not touch engines or devices.
//!
//! ```
//! use voisin::{Metric, StringSet};
//! use voisin_index::{space::StringSpace, Index, Kind, Params};
//! let words = StringSet::from_strings(["cat", "cart", "dog", "cot"]).unwrap();
//! let index = Index::build(StringSpace::new(words, Metric::Levenshtein).unwrap(), Kind::Lc, &Params::default());
//! let q: Vec<char> = "cat".chars().collect();
//! let res = voisin_index::search::range(&index, &[q.as_slice()], 1.0).unwrap();
//! assert_eq!(res.indices, vec![0, 1, 3]);
//! ```

pub mod auto;
pub mod cover;
pub mod file;
pub mod kd;
pub mod lc;
pub mod pairs;
pub mod pilot;
pub mod search;
pub mod space;
pub mod sss;

use std::fmt;
use std::str::FromStr;

use voisin::{Dataset, Error, KnnResult, Metric, RangeResult, Result};

pub use cover::{CoverTree, CpuNets, NetBatch, NetOracle, Nets};
pub use kd::KdTree;
pub use lc::ListOfClusters;
pub use pairs::{CpuOracle, PairBatch, PairOracle};
pub use search::MetricIndex;
pub use space::{Space, StringSpace, UserSpace, VectorSpace};
pub use sss::Sss;

/// Which structure to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Lc,
    Sss,
    Cover,
    /// The k-d tree: vectors under cityblock, euclidean, chebyshev or minkowski:P only.
    Kd,
}

impl Kind {
    /// The metric-space structures, which take every true metric (strings included).
    pub const ALL: [Kind; 3] = [Kind::Lc, Kind::Sss, Kind::Cover];
    /// Every structure.
    pub const EVERY: [Kind; 4] = [Kind::Lc, Kind::Sss, Kind::Cover, Kind::Kd];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Lc => "lc",
            Kind::Sss => "sss",
            Kind::Cover => "cover",
            Kind::Kd => "kd",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Kind::EVERY
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown index kind '{s}' (known: lc, sss, cover, kd)"
                ))
            })
    }
}

/// Construction parameters; each structure reads its own.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// List of Clusters: items per cluster, center included.
    pub cluster_size: usize,
    /// SSS: a new pivot is at least α·M from every pivot (M estimates the largest distance).
    pub alpha: f64,
    /// SSS: at most this many pivots.
    pub max_pivots: usize,
    /// Cover tree: the base of the level radii (> 1).
    pub base: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            cluster_size: 32,
            alpha: 0.5,
            max_pivots: 64,
            base: 2.0,
        }
    }
}

impl Params {
    /// Checks the values before a long build starts.
    pub fn check(&self) -> Result<()> {
        if self.cluster_size == 0 {
            return Err(Error::invalid("cluster size must be at least 1"));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(Error::invalid(format!("alpha {} must be > 0", self.alpha)));
        }
        if self.max_pivots == 0 {
            return Err(Error::invalid("at least one pivot is needed"));
        }
        if !(self.base.is_finite() && self.base > 1.0) {
            return Err(Error::invalid(format!(
                "cover tree base {} must be > 1",
                self.base
            )));
        }
        Ok(())
    }
}

/// Any of the structures over one space.
pub enum Index<S: Space> {
    Lc(ListOfClusters<S>),
    Sss(Sss<S>),
    Cover(CoverTree<S>),
    Kd(KdTree<S>),
}

impl<S: Space> Index<S> {
    /// Builds the structure `kind` over `space` (`params` are assumed checked).
    pub fn build(space: S, kind: Kind, params: &Params) -> Self {
        Self::build_with_progress(space, kind, params, &|_| {})
    }

    /// [`Index::build`], calling `progress` with the number of items placed now and then (the
    /// List of Clusters and SSS report; the trees report nothing).
    pub fn build_with_progress(
        space: S,
        kind: Kind,
        params: &Params,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Self {
        match kind {
            Kind::Lc => Index::Lc(ListOfClusters::build_with_progress(
                space,
                params.cluster_size,
                progress,
            )),
            Kind::Sss => Index::Sss(Sss::build_with_progress(
                space,
                params.alpha,
                params.max_pivots,
                progress,
            )),
            Kind::Cover => Index::Cover(CoverTree::build(space, params.base)),
            Kind::Kd => Index::Kd(KdTree::build(space)),
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Index::Lc(_) => Kind::Lc,
            Index::Sss(_) => Kind::Sss,
            Index::Cover(_) => Kind::Cover,
            Index::Kd(_) => Kind::Kd,
        }
    }

    /// Distance evaluations the construction made (0 for an index read from a file).
    pub fn build_evals(&self) -> u64 {
        match self {
            Index::Lc(i) => i.build_evals(),
            Index::Sss(i) => i.build_evals(),
            Index::Cover(i) => i.build_evals(),
            Index::Kd(_) => 0,
        }
    }

    fn inner(&self) -> &dyn MetricIndex<Space = S> {
        match self {
            Index::Lc(i) => i,
            Index::Sss(i) => i,
            Index::Cover(i) => i,
            Index::Kd(i) => i,
        }
    }
}

impl<S: Space> MetricIndex for Index<S> {
    type Space = S;

    fn space(&self) -> &S {
        self.inner().space()
    }

    fn search(&self, probe: &search::Probe<'_, S>, out: &mut dyn search::Collector) {
        self.inner().search(probe, out)
    }
}

/// An index over one of voisin's data sets under a built-in or user metric: what the CLI builds,
/// saves and queries.
pub enum DatasetIndex {
    Vectors(Index<VectorSpace>),
    Strings(Index<StringSpace>),
}

impl DatasetIndex {
    /// Checks the metric and parameters, then builds.
    pub fn build(data: &Dataset, metric: Metric, kind: Kind, params: &Params) -> Result<Self> {
        Self::build_with_progress(data, metric, kind, params, &|_| {})
    }

    /// [`DatasetIndex::build`] with a progress callback (see [`Index::build_with_progress`]).
    pub fn build_with_progress(
        data: &Dataset,
        metric: Metric,
        kind: Kind,
        params: &Params,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Self> {
        params.check()?;
        check_kind(data, &metric, kind)?;
        Ok(match data {
            Dataset::Vectors(v) => DatasetIndex::Vectors(Index::build_with_progress(
                VectorSpace::new(v, metric)?,
                kind,
                params,
                progress,
            )),
            Dataset::Strings(s) => DatasetIndex::Strings(Index::build_with_progress(
                StringSpace::new(s.clone(), metric)?,
                kind,
                params,
                progress,
            )),
        })
    }

    pub fn kind(&self) -> Kind {
        match self {
            DatasetIndex::Vectors(i) => i.kind(),
            DatasetIndex::Strings(i) => i.kind(),
        }
    }

    pub fn metric(&self) -> &Metric {
        match self {
            DatasetIndex::Vectors(i) => i.space().metric(),
            DatasetIndex::Strings(i) => i.space().metric(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            DatasetIndex::Vectors(i) => i.space().len(),
            DatasetIndex::Strings(i) => i.space().len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn build_evals(&self) -> u64 {
        match self {
            DatasetIndex::Vectors(i) => i.build_evals(),
            DatasetIndex::Strings(i) => i.build_evals(),
        }
    }

    /// "lc index over 1000 x 3 vectors (euclidean)".
    pub fn describe(&self) -> String {
        let items = match self {
            DatasetIndex::Vectors(i) => {
                format!("{} x {} vectors", i.space().len(), i.space().dim())
            }
            DatasetIndex::Strings(i) => format!("{} strings", i.space().len()),
        };
        format!("{} index over {items} ({})", self.kind(), self.metric())
    }

    /// Every indexed item within `radius` of each query.
    pub fn range(&self, queries: &Dataset, radius: f64) -> Result<RangeResult> {
        match (self, queries) {
            (DatasetIndex::Vectors(i), Dataset::Vectors(q)) => {
                let rows = vector_rows(i.space(), q)?;
                search::range(i, &rows.chunks(q.dim()).collect::<Vec<_>>(), radius)
            }
            (DatasetIndex::Strings(i), Dataset::Strings(q)) => {
                search::range(i, &q.iter().collect::<Vec<_>>(), radius)
            }
            _ => Err(kind_mismatch(self)),
        }
    }

    /// The k nearest indexed items of each query.
    pub fn knn(&self, queries: &Dataset, k: usize) -> Result<KnnResult> {
        match (self, queries) {
            (DatasetIndex::Vectors(i), Dataset::Vectors(q)) => {
                let rows = vector_rows(i.space(), q)?;
                search::knn(i, &rows.chunks(q.dim()).collect::<Vec<_>>(), k)
            }
            (DatasetIndex::Strings(i), Dataset::Strings(q)) => {
                search::knn(i, &q.iter().collect::<Vec<_>>(), k)
            }
            _ => Err(kind_mismatch(self)),
        }
    }
}

impl DatasetIndex {
    /// The k-NN graph of the indexed set itself (`data` must be that set): each item's k nearest
    /// other items, k capped at n − 1, duplicates of an item kept, ties by smaller index, as
    /// brute force's graph. Found as k + 1 neighbours of each item with the item then dropped:
    /// when it is not among them, duplicates with smaller indices filled its place.
    pub fn graph(&self, data: &Dataset, k: usize) -> Result<KnnResult> {
        voisin::engine::check_k(k)?;
        if data.len() != self.len() {
            return Err(Error::invalid(format!(
                "the graph of an index over {} items needs those items, not {}",
                self.len(),
                data.len()
            )));
        }
        let k = k.min(self.len().saturating_sub(1));
        if k == 0 {
            return Ok(KnnResult {
                n_queries: data.len(),
                k: 0,
                indices: Vec::new(),
                distances: Vec::new(),
                stats: Default::default(),
            });
        }
        let wide = self.knn(data, k + 1)?;
        let mut indices = Vec::with_capacity(data.len() * k);
        let mut distances = Vec::with_capacity(data.len() * k);
        for q in 0..data.len() {
            let (ids, ds) = wide.row(q);
            let others = ids.iter().zip(ds).filter(|(&i, _)| i as usize != q).take(k);
            for (&i, &d) in others {
                indices.push(i);
                distances.push(d);
            }
        }
        Ok(KnnResult {
            n_queries: data.len(),
            k,
            indices,
            distances,
            stats: wide.stats,
        })
    }
}

/// Tallies item ids while a structure read from a file is checked: each must appear exactly once.
pub(crate) struct ItemTally(Vec<bool>);

impl ItemTally {
    pub(crate) fn new(n: usize) -> Self {
        ItemTally(vec![false; n])
    }

    pub(crate) fn mark(&mut self, x: u32) -> std::result::Result<(), String> {
        let n = self.0.len();
        match self.0.get_mut(x as usize) {
            Some(seen) if !*seen => {
                *seen = true;
                Ok(())
            }
            Some(_) => Err(format!("item {x} appears twice")),
            None => Err(format!("item {x} is out of range (set of {n})")),
        }
    }

    /// Whether every item was marked.
    pub(crate) fn complete(&self) -> bool {
        self.0.iter().all(|&s| s)
    }
}

fn vector_rows<'a>(
    space: &VectorSpace,
    q: &'a voisin::VectorSet,
) -> Result<std::borrow::Cow<'a, [f32]>> {
    if q.dim() != space.dim() {
        return Err(Error::invalid(format!(
            "queries have dimension {} but the index holds vectors of dimension {}",
            q.dim(),
            space.dim()
        )));
    }
    q.require_f32_exact("metric indexes")?;
    Ok(q.rows_f32(0, q.len()))
}

/// The k-d tree needs coordinates and a coordinate-wise metric.
pub fn check_kind(data: &Dataset, metric: &Metric, kind: Kind) -> Result<()> {
    let boxes = space::box_order(metric).is_some();
    if kind == Kind::Kd && !(boxes && matches!(data, Dataset::Vectors(_))) {
        return Err(Error::invalid(format!(
            "the kd index takes vectors under euclidean, cityblock, chebyshev or minkowski:P, \
             not {} under {metric} (use lc, sss or cover)",
            data.describe()
        )));
    }
    Ok(())
}

fn kind_mismatch(index: &DatasetIndex) -> Error {
    let (have, want) = match index {
        DatasetIndex::Vectors(_) => ("vectors", "strings"),
        DatasetIndex::Strings(_) => ("strings", "vectors"),
    };
    Error::invalid(format!("queries are {want} but the index holds {have}"))
}
