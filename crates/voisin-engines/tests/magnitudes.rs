//! The auto engine (`Device::Auto`: the Routed engine where a GPU is usable, the CPU engine
//! otherwise) and prepared bases over the whole finite range of f32 and f64 (issue 40): k-NN,
//! graphs and prepared k-NN on values about 2^±120 (f32) and 2^±1000 (f64) equal the
//! big-integer reference. Without a GPU (CI) this holds the CPU engine behind the factory; on
//! a device it holds whatever auto routes to.

#[path = "../../voisin/tests/support/wide.rs"]
mod wide;

use std::sync::Arc;

use rand::{rngs::StdRng, Rng, SeedableRng};
use voisin::{Dataset, VectorSet};
use voisin_engines::{open_shared, Device, EngineConfig};
use wide::{check_knn, metrics, Wide};

#[test]
fn auto_engine_over_magnitudes() {
    let config = EngineConfig {
        threads: Some(2),
        ..Default::default()
    };
    let engine = open_shared(Device::Auto, &config).unwrap();
    let mut rng = StdRng::seed_from_u64(41);
    let (n, dim) = (30, 5);
    for (f64s, e) in [(false, 120), (false, -140), (true, 1000), (true, -1070)] {
        let v: Vec<f64> = (0..n * dim)
            .map(|_| wide::ldexp(rng.gen_range(-1.0..1.0), e))
            .map(|x: f64| if f64s { x } else { x as f32 as f64 })
            .collect();
        let set = match f64s {
            true => VectorSet::from_f64(n, dim, v.clone()),
            false => VectorSet::from_f32(n, dim, v.iter().map(|&x| x as f32).collect()),
        };
        let base = Arc::new(Dataset::from(set.unwrap()));
        for m in metrics() {
            let what = format!("auto f64 {f64s} 2^{e}");
            let w = Wide::new(&m, dim, &v, &v);
            check_knn(
                &w,
                &engine.knn(&base, &base, 4, &m).unwrap(),
                4,
                false,
                &what,
            );
            check_knn(&w, &engine.graph(&base, 4, &m).unwrap(), 4, true, &what);
            let prepared = Arc::clone(&engine).prepare(Arc::clone(&base), &m).unwrap();
            check_knn(
                &w,
                &prepared.knn(&base, 4).unwrap(),
                4,
                false,
                &format!("prepared {what}"),
            );
        }
    }
}
