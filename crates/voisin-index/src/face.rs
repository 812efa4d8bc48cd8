//! The one face of the metric indexes, as FAISS's indexes share `Index`: an [`IndexEngine`]
//! builds an index (or takes one read from an index file, `crate::file`), answers k-NN, range
//! and graph queries over it, and says what it supports ([`IndexEngine::supports`], the one
//! answer to "can it run?"). The index itself is a plain [`DatasetIndex`], the same whichever
//! device built it, so it is written (`crate::file`) and read anywhere.
//!
//! Implementations: [`CpuIndexes`] (here: the CPU's threads), `voisin_cuda::index::GpuIndexes`
//! (one GPU or several: the 1-Stage scheme and superclusters), and the engine factory's auto
//! engine (`voisin-engines`), which routes each request to the GPU when it supports it and
//! when, for a build, auto's cost model ([`crate::auto::gpu_build_pays`]) says it pays. Front
//! ends (the CLI, the MPI binary, Python) open one through the factory and hold
//! `dyn IndexEngine` only.

use voisin::{Dataset, Error, KnnResult, Metric, RangeResult, Result};

use crate::dataset::{graph_by, DatasetIndex};
use crate::kind::{Kind, Params};

/// A request an index engine may or may not take ([`IndexEngine::supports`]).
#[derive(Clone, Copy)]
pub enum IndexOp<'a> {
    /// Building `kind` over `data` under `metric` with `params`.
    Build {
        /// The items to index.
        data: &'a Dataset,
        /// The metric the index is built under.
        metric: &'a Metric,
        /// Which structure to build.
        kind: Kind,
        /// The structure's parameters.
        params: &'a Params,
    },
    /// Searching `index` for `queries` (k-NN, range or graph).
    Search {
        /// The built (or read) index to search.
        index: &'a DatasetIndex,
        /// The queries, of the same kind of data as the indexed items.
        queries: &'a Dataset,
    },
}

/// What streaming superclusters through a GPU did during one search (all zero when the index
/// was resident, and on the CPU).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamStats {
    /// Superclusters the streamed parts of the index were cut into.
    pub superclusters: usize,
    /// Copies made to the device (a supercluster needed by no query of the batch is not copied).
    pub copied: usize,
    /// Seconds the copies took on the copy stream.
    pub copy_s: f64,
    /// Seconds of copying during which the engine's stream was searching.
    pub overlapped_s: f64,
    /// Host seconds spent staging superclusters for their copies: packing them in the device
    /// layout and filling the page-locked buffer (waiting for that buffer's last copy to end is
    /// not counted).
    pub stage_s: f64,
    /// Of `stage_s`, the seconds during which a supercluster was being searched (staging that
    /// hid behind the search).
    pub stage_hidden_s: f64,
    /// Times the device ran out of memory and the superclusters were cut again with half the
    /// share (the search then started over).
    pub shrinks: usize,
}

impl StreamStats {
    /// Adds another part's streaming.
    pub fn add(&mut self, o: &StreamStats) {
        self.superclusters += o.superclusters;
        self.copied += o.copied;
        self.copy_s += o.copy_s;
        self.overlapped_s += o.overlapped_s;
        self.stage_s += o.stage_s;
        self.stage_hidden_s += o.stage_hidden_s;
        self.shrinks += o.shrinks;
    }

    /// The share of copy time overlapped with searching (0 without copies).
    pub fn overlap_share(&self) -> f64 {
        if self.copy_s > 0.0 {
            self.overlapped_s / self.copy_s
        } else {
            0.0
        }
    }
}

/// A search's answer and what streaming did to find it.
#[derive(Clone, Debug)]
pub struct Searched<R> {
    /// The answer itself, as brute force would give it.
    pub result: R,
    /// What streaming superclusters through a GPU did (all zero when none was streamed).
    pub streamed: StreamStats,
}

impl<R> Searched<R> {
    /// An answer found without streaming (a resident index, or the CPU).
    pub fn resident(result: R) -> Self {
        Searched {
            result,
            streamed: StreamStats::default(),
        }
    }
}

/// Builds metric indexes and answers over them on one device (or several): see the module doc.
/// Every answer equals the brute-force reference (`voisin::reference`) exactly, whichever
/// implementation gives it.
pub trait IndexEngine: Send + Sync {
    /// Where the work runs, e.g. "cpu" or the GPU's name.
    fn name(&self) -> String;

    /// Whether this engine takes `op`; what it does not take, it refuses with a clear error.
    fn supports(&self, op: &IndexOp<'_>) -> bool;

    /// The engine that answers `op`: this one, or the one a routing engine hands it to.
    fn answering(&self, _op: &IndexOp<'_>) -> String {
        self.name()
    }

    /// The index `kind` over `data` under `metric`, calling `progress` with the number of items
    /// placed now and then (the List of Clusters and SSS report; the trees report nothing).
    fn build(
        &self,
        data: &Dataset,
        metric: Metric,
        kind: Kind,
        params: &Params,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<DatasetIndex>;

    /// The k nearest indexed items of each query (k capped at the number of items), ties by
    /// the smaller index.
    fn knn(&self, index: &DatasetIndex, queries: &Dataset, k: usize)
        -> Result<Searched<KnnResult>>;

    /// Every indexed item within `radius` of each query, rows sorted by (distance, index).
    fn range(
        &self,
        index: &DatasetIndex,
        queries: &Dataset,
        radius: f64,
    ) -> Result<Searched<RangeResult>>;

    /// The k-NN graph of the indexed set (`data` must be that set): each item's k nearest other
    /// items, k capped at n − 1, duplicates kept, as brute force's graph; by this engine's
    /// [`IndexEngine::knn`].
    fn graph(&self, index: &DatasetIndex, data: &Dataset, k: usize) -> Result<KnnResult> {
        graph_by(index.len(), data, k, |q, wide| {
            self.knn(index, q, wide).map(|s| s.result)
        })
    }
}

/// The CPU's index engine: every structure, every true metric, on a pool of worker threads.
pub struct CpuIndexes {
    pool: rayon::ThreadPool,
}

impl CpuIndexes {
    /// The engine on `threads` worker threads (every core by default); zero is invalid input.
    pub fn new(threads: Option<usize>) -> Result<Self> {
        if threads == Some(0) {
            return Err(Error::invalid("--threads must be at least 1"));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.unwrap_or(0))
            .build()
            .map_err(|e| Error::device(format!("cannot start threads: {e}")))?;
        Ok(CpuIndexes { pool })
    }

    /// The worker threads.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }
}

impl IndexEngine for CpuIndexes {
    fn name(&self) -> String {
        "cpu".into()
    }

    /// Every build whose metric and data the structure takes, every search.
    fn supports(&self, op: &IndexOp<'_>) -> bool {
        match *op {
            IndexOp::Build {
                data,
                metric,
                kind,
                params,
            } => {
                params.check().is_ok()
                    && crate::space::check_metric(metric).is_ok()
                    && crate::kind::check_kind(data, metric, kind).is_ok()
            }
            IndexOp::Search { .. } => true,
        }
    }

    fn build(
        &self,
        data: &Dataset,
        metric: Metric,
        kind: Kind,
        params: &Params,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<DatasetIndex> {
        self.pool
            .install(|| DatasetIndex::build_with_progress(data, metric, kind, params, progress))
    }

    fn knn(
        &self,
        index: &DatasetIndex,
        queries: &Dataset,
        k: usize,
    ) -> Result<Searched<KnnResult>> {
        self.pool
            .install(|| index.knn(queries, k))
            .map(Searched::resident)
    }

    fn range(
        &self,
        index: &DatasetIndex,
        queries: &Dataset,
        radius: f64,
    ) -> Result<Searched<RangeResult>> {
        self.pool
            .install(|| index.range(queries, radius))
            .map(Searched::resident)
    }

    fn graph(&self, index: &DatasetIndex, data: &Dataset, k: usize) -> Result<KnnResult> {
        self.pool.install(|| index.graph(data, k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use voisin::{StringSet, VectorSet};

    fn words() -> Dataset {
        StringSet::from_strings(["cat", "cart", "dog", "cot", "cat"])
            .unwrap()
            .into()
    }

    #[test]
    fn the_cpu_engine_answers_as_the_index_itself() {
        let cpu = CpuIndexes::new(Some(1)).unwrap();
        assert_eq!(cpu.threads(), 1);
        let data = words();
        for kind in Kind::ALL {
            let params = Params::default();
            let op = IndexOp::Build {
                data: &data,
                metric: &Metric::Levenshtein,
                kind,
                params: &params,
            };
            assert!(cpu.supports(&op), "{kind}");
            let index = cpu
                .build(&data, Metric::Levenshtein, kind, &params, &|_| {})
                .unwrap();
            let direct = DatasetIndex::build(&data, Metric::Levenshtein, kind, &params).unwrap();
            let got = cpu.knn(&index, &data, 2).unwrap();
            let want = direct.knn(&data, 2).unwrap();
            assert_eq!(got.result.indices, want.indices, "{kind}");
            assert_eq!(got.result.distances, want.distances, "{kind}");
            assert_eq!(got.streamed, StreamStats::default());
            let got = cpu.range(&index, &data, 1.0).unwrap().result;
            let want = direct.range(&data, 1.0).unwrap();
            assert_eq!(
                (got.offsets, got.indices, got.distances),
                (want.offsets, want.indices, want.distances),
                "{kind}"
            );
            let got = cpu.graph(&index, &data, 2).unwrap();
            let want = direct.graph(&data, 2).unwrap();
            assert_eq!((got.indices, got.distances), (want.indices, want.distances));
        }
    }

    #[test]
    fn the_cpu_engine_refuses_what_no_structure_takes() {
        assert!(CpuIndexes::new(Some(0)).err().unwrap().is_user_error());
        let cpu = CpuIndexes::new(Some(1)).unwrap();
        let data = words();
        let params = Params::default();
        let kd = IndexOp::Build {
            data: &data,
            metric: &Metric::Levenshtein,
            kind: Kind::Kd,
            params: &params,
        };
        assert!(!cpu.supports(&kd));
        let v: Dataset = VectorSet::from_f32(2, 1, vec![0.0, 1.0]).unwrap().into();
        let cosine = IndexOp::Build {
            data: &v,
            metric: &Metric::Cosine,
            kind: Kind::Lc,
            params: &params,
        };
        assert!(!cpu.supports(&cosine));
        let err = cpu
            .build(&data, Metric::Levenshtein, Kind::Kd, &params, &|_| {})
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("the kd index takes vectors"),
            "{err}"
        );
    }

    #[test]
    fn a_graph_by_the_face_drops_each_item_and_caps_k() {
        let cpu = CpuIndexes::new(Some(1)).unwrap();
        let data = words();
        let index = cpu
            .build(
                &data,
                Metric::Levenshtein,
                Kind::Lc,
                &Params::default(),
                &|_| {},
            )
            .unwrap();
        let g = cpu.graph(&index, &data, 10).unwrap();
        assert_eq!(g.k, 4);
        for q in 0..data.len() {
            assert!(!g.row(q).0.contains(&(q as u32)), "row {q}: {:?}", g.row(q));
        }
        // Item 4 duplicates item 0: each is the other's nearest.
        assert_eq!((g.row(0).0[0], g.row(4).0[0]), (4, 0));
    }
}
