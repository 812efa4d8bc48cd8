//! An index over one of voisin's data sets: [`Index`], any structure over one space, and
//! [`DatasetIndex`], one over vectors or strings (what index files hold and every index engine
//! builds and searches). Searching it here runs on the CPU's threads; `crate::face` puts every
//! device behind one trait.

use voisin::{Dataset, Error, KnnResult, Metric, RangeResult, Result};

use crate::kind::{check_kind, Kind, Params};
use crate::search::{self, MetricIndex};
use crate::space::{Space, StringSpace, VectorSpace};
use crate::{CoverTree, KdTree, ListOfClusters, Sss};

/// Any of the structures over one space.
pub enum Index<S: Space> {
    /// A List of Clusters ([`Kind::Lc`]).
    Lc(ListOfClusters<S>),
    /// SSS pivots with their distance table ([`Kind::Sss`]).
    Sss(Sss<S>),
    /// A cover tree ([`Kind::Cover`]).
    Cover(CoverTree<S>),
    /// A k-d tree, for vectors under a coordinate-wise metric ([`Kind::Kd`]).
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

    /// Which structure this is.
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
    /// An index over a vector set (its values kept as f32).
    Vectors(Index<VectorSpace>),
    /// An index over a string set.
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

    /// Which structure the index is.
    pub fn kind(&self) -> Kind {
        match self {
            DatasetIndex::Vectors(i) => i.kind(),
            DatasetIndex::Strings(i) => i.kind(),
        }
    }

    /// The metric the index was built under, which its searches measure with.
    pub fn metric(&self) -> &Metric {
        match self {
            DatasetIndex::Vectors(i) => i.space().metric(),
            DatasetIndex::Strings(i) => i.space().metric(),
        }
    }

    /// Number of indexed items.
    pub fn len(&self) -> usize {
        match self {
            DatasetIndex::Vectors(i) => i.space().len(),
            DatasetIndex::Strings(i) => i.space().len(),
        }
    }

    /// Whether the index holds no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Distance evaluations the construction made (0 for an index read from a file or a k-d
    /// tree, whose build measures no distance).
    pub fn build_evals(&self) -> u64 {
        match self {
            DatasetIndex::Vectors(i) => i.build_evals(),
            DatasetIndex::Strings(i) => i.build_evals(),
        }
    }

    /// The indexed items as a data set (a copy of the index's own: what its graph is of, for
    /// an index read from a file).
    pub fn items(&self) -> Result<Dataset> {
        Ok(match self {
            DatasetIndex::Vectors(i) => {
                let space = i.space();
                let n = space.len();
                voisin::VectorSet::from_f32(n, space.dim(), space.values().to_vec())?.into()
            }
            DatasetIndex::Strings(i) => i.space().strings().clone().into(),
        })
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
    /// brute force's graph (see [`graph_by`]).
    pub fn graph(&self, data: &Dataset, k: usize) -> Result<KnnResult> {
        graph_by(self.len(), data, k, |q, wide| self.knn(q, wide))
    }
}

/// The k-NN graph of a set of `n` indexed items from `knn`, a k-NN search of that index (on any
/// device): `data` must be the indexed set; k is capped at n − 1. Found as k + 1 neighbours of
/// each item with the item then dropped: when it is not among them, duplicates with smaller
/// indices filled its place.
pub(crate) fn graph_by(
    n: usize,
    data: &Dataset,
    k: usize,
    knn: impl FnOnce(&Dataset, usize) -> Result<KnnResult>,
) -> Result<KnnResult> {
    voisin::engine::check_k(k)?;
    if data.len() != n {
        return Err(Error::invalid(format!(
            "the graph of an index over {n} items needs those items, not {}",
            data.len()
        )));
    }
    let k = k.min(n.saturating_sub(1));
    if k == 0 {
        return Ok(KnnResult {
            n_queries: data.len(),
            k: 0,
            indices: Vec::new(),
            distances: Vec::new(),
            stats: Default::default(),
        });
    }
    let wide = knn(data, k + 1)?;
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

fn kind_mismatch(index: &DatasetIndex) -> Error {
    let (have, want) = match index {
        DatasetIndex::Vectors(_) => ("vectors", "strings"),
        DatasetIndex::Strings(_) => ("strings", "vectors"),
    };
    Error::invalid(format!("queries are {want} but the index holds {have}"))
}
