//! Property tests for k-selection and k-list merging.

use proptest::prelude::*;
use voisin::select::{merge_sorted, Candidates, TopK};

fn sorted(mut v: Vec<(f64, u32)>) -> Vec<(f64, u32)> {
    v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    v
}

/// Keys drawn from a small set so that ties are common.
fn keys() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(
        prop_oneof![(0u8..6).prop_map(|x| x as f64), -1e3f64..1e3],
        0..300,
    )
}

proptest! {
    #[test]
    fn topk_equals_sort_then_truncate(ks in keys(), k in 0usize..40) {
        let items: Vec<(f64, u32)> = ks.iter().enumerate().map(|(i, &x)| (x, i as u32)).collect();
        let mut h = TopK::new(k);
        // Offer in a scrambled order: the result must not depend on it.
        for j in 0..items.len() {
            let (x, i) = items[(j * 7919) % items.len()];
            h.push(x, i);
        }
        let mut want = sorted(items);
        want.truncate(k);
        prop_assert_eq!(h.into_sorted(), want);
    }

    #[test]
    fn merge_equals_sort_of_union(ks in keys(), split in 0usize..300, k in 0usize..50) {
        let items: Vec<(f64, u32)> = ks.iter().enumerate().map(|(i, &x)| (x, i as u32)).collect();
        let split = split.min(items.len());
        let a = sorted(items[..split].to_vec());
        let b = sorted(items[split..].to_vec());
        let mut want = sorted(items);
        want.truncate(k);
        prop_assert_eq!(merge_sorted(&a, &b, k), want.clone());
        prop_assert_eq!(merge_sorted(&b, &a, k), want);
    }

    #[test]
    fn candidates_keep_the_exact_top_k(
        ks in keys(),
        noise in prop::collection::vec(-1.0f64..1.0, 300),
        width in prop::collection::vec(0.0f64..5.0, 300),
        k in 1usize..30,
        parts in 1usize..4,
    ) {
        // Exact key x, approximate key v within ±e of it: the buffer sees only (v − e, v + e).
        let mut shards: Vec<Candidates> = (0..parts).map(|_| Candidates::new(k)).collect();
        for (i, &x) in ks.iter().enumerate() {
            let e = width[i];
            let v = x + noise[i] * e;
            shards[i % parts].push(v - e, v + e, i as u32);
        }
        let mut all = shards.remove(0);
        for s in &shards {
            all.absorb(s);
        }
        let kept: std::collections::HashSet<u32> = all.into_indices().into_iter().collect();
        let items: Vec<(f64, u32)> = ks.iter().enumerate().map(|(i, &x)| (x, i as u32)).collect();
        for (x, i) in sorted(items).into_iter().take(k) {
            prop_assert!(kept.contains(&i), "item {} with key {} was dropped", i, x);
        }
    }
}
