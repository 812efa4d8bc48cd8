//! Every item tied at the k-th distance (`voisin::ties`) against the plain f64 reference
//! (`reference::knn_ties`, `reference::graph_ties`: each row sorted, cut after the k-th key), on
//! tie-heavy data: through the reference's own lists, through the CPU engine, and as a property
//! over random small-integer sets. The CPU engine and the reference rank by the same exact keys,
//! so answers must be identical, distances bit for bit.

use std::sync::Mutex;

use proptest::prelude::*;
use rand::{rngs::StdRng, Rng, SeedableRng};
use voisin::cpu::{CpuEngine, CpuOptions};
use voisin::{
    reference, ties, Dataset, Engine, KnnResult, Metric, RangeResult, StringSet, VectorSet,
};

fn same(got: &RangeResult, want: &RangeResult, what: &str) {
    assert_eq!(got.offsets, want.offsets, "{what}: row lengths");
    assert_eq!(got.indices, want.indices, "{what}: ids");
    let bits = |d: &[f32]| d.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&got.distances),
        bits(&want.distances),
        "{what}: distances"
    );
}

/// Values 0, 1, 2: many exact ties and duplicate rows.
fn small_ints(rng: &mut StdRng, n: usize, d: usize) -> Dataset {
    let v = (0..n * d).map(|_| rng.gen_range(0..3) as f32).collect();
    VectorSet::from_f32(n, d, v).unwrap().into()
}

fn metrics() -> Vec<Metric> {
    Metric::builtins()
        .into_iter()
        .filter(|m| *m != Metric::Levenshtein)
        .collect()
}

fn cpu(threads: usize) -> CpuEngine {
    CpuEngine::new(CpuOptions {
        threads: Some(threads),
        ..CpuOptions::default()
    })
    .unwrap()
}

fn check_engine(engine: &dyn Engine, base: &Dataset, queries: &Dataset, metric: &Metric, k: usize) {
    let what = format!("{metric} k={k} n={}", base.len());
    let got = ties::knn_on(engine, base, queries, k, metric).unwrap();
    same(
        &got,
        &reference::knn_ties(base, queries, k, metric).unwrap(),
        &format!("knn {what}"),
    );
    let got = ties::graph_on(engine, base, k, metric).unwrap();
    same(
        &got,
        &reference::graph_ties(base, k, metric).unwrap(),
        &format!("graph {what}"),
    );
}

#[test]
fn the_reference_as_the_source_gives_the_reference() {
    let mut rng = StdRng::seed_from_u64(44);
    let base = small_ints(&mut rng, 60, 3);
    let queries = small_ints(&mut rng, 25, 3);
    for metric in metrics() {
        for k in [1, 2, 7, 59, 60, 100] {
            let lists = |q: &Dataset, w: usize| reference::knn(&base, q, w, &metric);
            let got = ties::knn(&base, &queries, k, &metric, &lists).unwrap();
            let want = reference::knn_ties(&base, &queries, k, &metric).unwrap();
            same(&got, &want, &format!("knn {metric} k={k}"));
            let graph = |w: usize| reference::graph(&base, w, &metric);
            let got = ties::graph(&base, k, &metric, &graph, &lists).unwrap();
            let want = reference::graph_ties(&base, k, &metric).unwrap();
            same(&got, &want, &format!("graph {metric} k={k}"));
        }
    }
}

#[test]
fn the_cpu_engine_equals_the_reference_on_tie_heavy_data() {
    let mut rng = StdRng::seed_from_u64(7);
    for (n, d) in [(1, 2), (2, 1), (97, 1), (130, 3), (70, 127)] {
        let base = small_ints(&mut rng, n, d);
        let queries = small_ints(&mut rng, 31, d);
        for metric in metrics() {
            for k in [1, 3, 10, n.saturating_sub(1).max(1), n + 5] {
                check_engine(&cpu(2), &base, &queries, &metric, k);
            }
        }
    }
}

#[test]
fn strings_tie_on_their_edit_distance() {
    let mut rng = StdRng::seed_from_u64(3);
    let word = |rng: &mut StdRng| -> String {
        (0..rng.gen_range(0..4))
            .map(|_| ["a", "b", "ab", "é"][rng.gen_range(0..4)])
            .collect()
    };
    let words: Vec<String> = (0..80).map(|_| word(&mut rng)).collect();
    let asked: Vec<String> = (0..20).map(|_| word(&mut rng)).collect();
    let base: Dataset = StringSet::from_strings(&words).unwrap().into();
    let queries: Dataset = StringSet::from_strings(&asked).unwrap().into();
    for k in [1, 4, 79] {
        check_engine(&cpu(1), &base, &queries, &Metric::Levenshtein, k);
    }
}

/// Rows of one point: every item is at the k-th distance of every row, found over several
/// rounds of doubling lists (k = 1: lists of 2, 4, ..., 128 for 100 items).
#[test]
fn all_duplicates_return_every_item() {
    let base: Dataset = VectorSet::from_f32(100, 2, vec![0.5; 200]).unwrap().into();
    for metric in metrics() {
        let got = ties::knn_on(&cpu(2), &base, &base, 1, &metric).unwrap();
        assert_eq!(
            got.offsets,
            (0..=100).map(|q| q * 100).collect::<Vec<_>>(),
            "{metric}"
        );
        let g = ties::graph_on(&cpu(2), &base, 1, &metric).unwrap();
        for q in 0..100 {
            let want: Vec<u32> = (0..100).filter(|&i| i != q).collect();
            assert_eq!(g.row(q as usize).0, &want[..], "{metric} row {q}");
        }
    }
}

/// A source that records how many rows and how wide each call asked for.
struct Counted<'a> {
    base: &'a Dataset,
    metric: &'a Metric,
    calls: Mutex<Vec<(usize, usize)>>,
}

impl Counted<'_> {
    fn lists(&self, q: &Dataset, w: usize) -> voisin::Result<KnnResult> {
        self.calls.lock().unwrap().push((q.len(), w));
        reference::knn(self.base, q, w, self.metric)
    }
}

/// Only rows tied beyond their list are asked again, with lists twice as long; rows without a
/// tie cost one entry more than k.
#[test]
fn only_tied_rows_are_searched_again() {
    // Items at 1, 2, 3, ... on a line, and five copies of the item at 10.
    let mut v: Vec<f32> = (1..=40).map(|x| x as f32).collect();
    v.extend([10.0; 5]);
    let base: Dataset = VectorSet::from_f32(v.len(), 1, v).unwrap().into();
    // Query 0 at 0: its 10th nearest (at 10) has five copies beyond. Query 1 at 20.25: no tie.
    let queries: Dataset = VectorSet::from_f32(2, 1, vec![0.0, 20.25]).unwrap().into();
    let metric = Metric::Euclidean;
    let source = Counted {
        base: &base,
        metric: &metric,
        calls: Mutex::new(Vec::new()),
    };
    let got = ties::knn(&base, &queries, 10, &metric, &|q, w| source.lists(q, w)).unwrap();
    assert_eq!(*source.calls.lock().unwrap(), vec![(2, 11), (1, 22)]);
    assert_eq!(got.offsets, vec![0, 15, 25]);
    assert_eq!(&got.indices[9..15], &[9, 40, 41, 42, 43, 44]);
    same(
        &got,
        &reference::knn_ties(&base, &queries, 10, &metric).unwrap(),
        "line",
    );
}

/// The first k entries of every row are the engine's own k-NN answer, byte for byte.
#[test]
fn the_first_k_are_the_plain_answer() {
    let mut rng = StdRng::seed_from_u64(11);
    let base = small_ints(&mut rng, 150, 4);
    let queries = small_ints(&mut rng, 40, 4);
    let engine = cpu(2);
    for metric in metrics() {
        let plain = engine.knn(&base, &queries, 6, &metric).unwrap();
        let tied = ties::knn_on(&engine, &base, &queries, 6, &metric).unwrap();
        let graph = engine.graph(&base, 6, &metric).unwrap();
        let graph_tied = ties::graph_on(&engine, &base, 6, &metric).unwrap();
        for (plain, tied) in [(&plain, &tied), (&graph, &graph_tied)] {
            for q in 0..plain.n_queries {
                let (ids, ds) = tied.row(q);
                assert!(ids.len() >= 6);
                assert_eq!((&ids[..6], &ds[..6]), plain.row(q), "{metric} row {q}");
            }
        }
    }
}

#[test]
fn bad_requests_are_refused() {
    let base: Dataset = VectorSet::from_f32(3, 2, vec![0.0; 6]).unwrap().into();
    let other: Dataset = VectorSet::from_f32(3, 3, vec![0.0; 9]).unwrap().into();
    let engine = cpu(1);
    for got in [
        ties::knn_on(&engine, &base, &base, 0, &Metric::Euclidean),
        ties::graph_on(&engine, &base, 0, &Metric::Euclidean),
        ties::knn_on(&engine, &base, &other, 2, &Metric::Euclidean),
        ties::graph_on(&engine, &base, 2, &Metric::Levenshtein),
    ] {
        assert!(
            matches!(got, Err(voisin::Error::InvalidInput(_))),
            "{got:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn ties_equal_the_reference(
        values in prop::collection::vec(0u8..4, 2..240),
        d in 1usize..4,
        k in 1usize..12,
        metric in prop::sample::select(metrics()),
    ) {
        let n = values.len() / d;
        prop_assume!(n >= 1);
        let v: Vec<f32> = values[..n * d].iter().map(|&x| f32::from(x)).collect();
        let base: Dataset = VectorSet::from_f32(n, d, v).unwrap().into();
        let queries = base.gather(&(0..n).rev().step_by(3).collect::<Vec<_>>());
        let engine = cpu(1);
        let got = ties::knn_on(&engine, &base, &queries, k, &metric).unwrap();
        let want = reference::knn_ties(&base, &queries, k, &metric).unwrap();
        prop_assert_eq!((&got.offsets, &got.indices), (&want.offsets, &want.indices));
        let got = ties::graph_on(&engine, &base, k, &metric).unwrap();
        let want = reference::graph_ties(&base, k, &metric).unwrap();
        prop_assert_eq!((&got.offsets, &got.indices), (&want.offsets, &want.indices));
        prop_assert_eq!(got.distances, want.distances);
    }
}

/// The rows of tied queries are searched again as a set of their own: the same stored values,
/// in the same storage type, in the order asked.
#[test]
fn gathered_rows_keep_their_values_and_storage() {
    use voisin::data::{Buffer, ElemType, VectorData};
    let halves: Vec<half::f16> = (0..8)
        .map(|x| half::f16::from_f32(x as f32 / 3.0))
        .collect();
    let set = VectorSet::new(4, 2, VectorData::F16(Buffer::Owned(halves.clone()))).unwrap();
    let picked = set.gather(&[3, 0, 3]);
    assert_eq!((picked.len(), picked.elem_type()), (3, ElemType::F16));
    let VectorData::F16(b) = picked.data() else {
        unreachable!()
    };
    let want: Vec<half::f16> = [6, 7, 0, 1, 6, 7].iter().map(|&i| halves[i]).collect();
    assert_eq!(b.as_slice(), &want[..]);
    let wide = VectorSet::from_f64(2, 1, vec![0.1, 0.2])
        .unwrap()
        .gather(&[1]);
    assert_eq!((wide.elem_type(), wide.row_f64(0)[0]), (ElemType::F64, 0.2));
    let words = StringSet::from_strings(["a", "bé", ""])
        .unwrap()
        .gather(&[2, 1]);
    assert_eq!(
        (words.get_string(0), words.get_string(1)),
        ("".into(), "bé".into())
    );
}

/// A source that answers other lists than those asked for is an error, never a panic or a
/// loop: here one that always returns 2 neighbours, on data that ties beyond them.
#[test]
fn a_source_breaking_its_contract_is_an_error() {
    let base: Dataset = VectorSet::from_f32(9, 1, vec![1.0; 9]).unwrap().into();
    let short = |q: &Dataset, _: usize| reference::knn(&base, q, 2, &Metric::Euclidean);
    let got = ties::knn(&base, &base, 1, &Metric::Euclidean, &short);
    assert!(matches!(got, Err(voisin::Error::Device(_))), "{got:?}");
    let graph = |_: usize| reference::graph(&base, 2, &Metric::Euclidean);
    let got = ties::graph(&base, 1, &Metric::Euclidean, &graph, &short);
    assert!(matches!(got, Err(voisin::Error::Device(_))), "{got:?}");
    let none = |q: &Dataset, _: usize| reference::knn(&base, q, 1, &Metric::Euclidean);
    let got = ties::knn(&base, &base, 3, &Metric::Euclidean, &none);
    assert!(matches!(got, Err(voisin::Error::Device(_))), "{got:?}");
}
