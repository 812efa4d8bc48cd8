//! Bases larger than the GPU's free memory: streamed in shards (knn and range), and working sets
//! that shrink when an allocation fails. Every test needs a CUDA GPU:
//! `cargo test -p voisin-cuda --test streamed -- --include-ignored`. The tests take device
//! memory away from each other (ballast), so they run one at a time.

mod common;

use std::sync::Mutex;

use common::*;
use rand::prelude::*;
use voisin::{reference, Engine, Metric};
use voisin_cuda::{CudaEngine, CudaOptions};

/// Serialises the tests of this file: each one limits the device's free memory.
static DEVICE: Mutex<()> = Mutex::new(());

/// Device memory held by the test itself.
struct Ballast(cudarc::driver::sys::CUdeviceptr);

impl Ballast {
    fn leaving(ctx: &std::sync::Arc<cudarc::driver::CudaContext>, leave: usize) -> Ballast {
        ctx.synchronize().unwrap();
        let (free, _) = ctx.mem_get_info().unwrap();
        // Some memory the driver reports free cannot be had in one piece: back off a little
        // until the allocation succeeds.
        for slack in 0..64usize {
            let bytes = free.saturating_sub(leave + slack * (16 << 20));
            // SAFETY: never read or written; freed on drop in the same context.
            if let Ok(p) = unsafe { cudarc::driver::result::malloc_sync(bytes) } {
                return Ballast(p);
            }
        }
        panic!("could not allocate a ballast");
    }
}

impl Drop for Ballast {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_sync above, freed once.
        unsafe { cudarc::driver::result::free_sync(self.0) }.unwrap();
    }
}

fn capped(mib: usize) -> CudaEngine {
    CudaEngine::with_options(
        0,
        CudaOptions {
            device_memory: Some(mib << 20),
            ..Default::default()
        },
    )
    .expect("a CUDA GPU")
}

/// A 256 MiB cap and a 600k×64 base (150 MiB of rows, 300 MiB resident): several shards.
#[test]
#[ignore = "needs a CUDA GPU"]
fn streamed_search_equals_the_reference() {
    let _one = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = StdRng::seed_from_u64(seed());
    let e = capped(256);
    for adv in [false, true] {
        let (n, d) = (600_000, 64);
        let base = if adv {
            adversarial(&mut rng, n, d)
        } else {
            normal(&mut rng, n, d)
        };
        let queries = normal(&mut rng, 23, d);
        for m in metrics() {
            let before = e.streamed_shards();
            for k in [1, 10, 100] {
                let what = format!("streamed knn k={k} {m} adv={adv}");
                let want = reference::knn(&base, &queries, k, &m).unwrap();
                same_knn(&e.knn(&base, &queries, k, &m).unwrap(), &want, &what);
            }
            let shards = e.streamed_shards() - before;
            assert!(
                shards >= 6,
                "{m}: {shards} shards in 3 searches: not streamed"
            );
            let near = reference::knn(&base, &queries, 50, &m).unwrap();
            for col in [0, 49] {
                let r = near.row(0).1[col] as f64;
                let what = format!("streamed range r={r} {m} adv={adv}");
                let want = reference::range(&base, &queries, r, &m).unwrap();
                same_range(&e.range(&base, &queries, r, &m).unwrap(), &want, &what);
            }
        }
    }
}

/// The real case: a ballast leaves 1 GiB free and the base is 2.5 GB (≥ 2× the free memory).
#[test]
#[ignore = "needs a CUDA GPU"]
fn base_twice_the_free_memory() {
    let _one = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    let ctx = cudarc::driver::CudaContext::new(0).expect("a CUDA GPU");
    let e = CudaEngine::new(0).unwrap();
    // A plain cudaMalloc (cuMemAlloc), outside any stream-ordered pool, leaving 1 GiB free.
    let _ballast = Ballast::leaving(&ctx, 1 << 30);
    let (n, d) = (5_000_000, 128);
    let base = big_normal(n, d, seed());
    let queries = big_normal(20, d, 7);
    ctx.synchronize().unwrap();
    let free_now = ctx.mem_get_info().unwrap().0;
    eprintln!(
        "free {} MiB, base {} MiB",
        free_now >> 20,
        (n * d * 4) >> 20
    );
    assert!(
        n * d * 4 >= 2 * free_now,
        "the base must be at least twice the free memory"
    );
    let m = Metric::Euclidean;
    let got = e.knn(&base, &queries, 10, &m).unwrap();
    assert!(e.streamed_shards() >= 2, "not streamed");
    let want = reference::knn(&base, &queries, 10, &m).unwrap();
    same_knn(&got, &want, "knn over a base twice the free memory");
    let r = want.row(0).1[9] as f64;
    same_range(
        &e.range(&base, &queries, r, &m).unwrap(),
        &reference::range(&base, &queries, r, &m).unwrap(),
        "range over a base twice the free memory",
    );
}

/// Caps where the inputs fit but leave less than the budgeted working set: the tile buffers'
/// allocation fails, the engine halves them and goes on, with the same results.
#[test]
#[ignore = "needs a CUDA GPU"]
fn allocation_failure_shrinks_the_tiles() {
    let _one = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    // 250k×128 rows: 128 MiB raw and 128 MiB prepared; 4000 queries.
    let base = big_normal(250_000, 128, seed());
    let queries = big_normal(4000, 128, 3);
    let m = Metric::Euclidean;
    let want = CudaEngine::new(0)
        .unwrap()
        .knn(&base, &queries, 10, &m)
        .unwrap();
    let sub = big_normal(40, 128, 3);
    let want_sub = reference::knn(&base, &sub, 10, &m).unwrap();
    same_knn(
        &CudaEngine::new(0)
            .unwrap()
            .knn(&base, &sub, 10, &m)
            .unwrap(),
        &want_sub,
        "uncapped",
    );
    let mut shrinks = 0;
    for mib in (284..=360).step_by(4) {
        let e = capped(mib);
        let got = e.knn(&base, &queries, 10, &m).unwrap();
        identical(&got, &want, &format!("cap {mib} MiB"));
        eprintln!(
            "cap {mib} MiB: {} shrinks, {} shards",
            e.shrinks(),
            e.streamed_shards()
        );
        shrinks += e.shrinks();
    }
    assert!(shrinks > 0, "no cap made an allocation fail");
}
