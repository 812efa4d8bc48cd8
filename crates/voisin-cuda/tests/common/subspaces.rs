//! Points on random 8-d affine subspaces, as gpu_bench's clustered kind: each subspace a centre
//! of spread 3 and 8 directions of norm about 1, each point its centre plus N(0, 1) times each
//! direction. Shared by the GPU tests (through common/), numerics/plan.rs's unit tests and
//! voisin-bench's gpu_bench (through `#[path]`).

use rand::prelude::*;
use rand_distr::StandardNormal;

/// `count` subspaces of `d` dimensions: per subspace 9 rows of `d` values, the centre first.
pub fn subspaces(rng: &mut StdRng, count: usize, d: usize) -> Vec<Vec<f32>> {
    (0..count)
        .map(|_| {
            (0..9 * d)
                .map(|i| {
                    let x: f32 = rng.sample(StandardNormal);
                    if i < d {
                        3.0 * x
                    } else {
                        x / (d as f32).sqrt()
                    }
                })
                .collect()
        })
        .collect()
}

/// One point on subspace `s` (its 9 rows of `out.len()` values) into `out`: the centre plus
/// N(0, 1) times each direction.
pub fn point_on(rng: &mut StdRng, s: &[f32], out: &mut [f32]) {
    let d = out.len();
    out.copy_from_slice(&s[..d]);
    for t in 0..8 {
        let z: f32 = rng.sample(StandardNormal);
        let dir = &s[(t + 1) * d..(t + 2) * d];
        out.iter_mut().zip(dir).for_each(|(x, &u)| *x += z * u);
    }
}

/// `m` rows of `d` values, row i on subspace i modulo their number.
pub fn rows_on(rng: &mut StdRng, spaces: &[Vec<f32>], m: usize, d: usize) -> Vec<f32> {
    let mut v = vec![0.0; m * d];
    for (i, row) in v.chunks_exact_mut(d).enumerate() {
        point_on(rng, &spaces[i % spaces.len()], row);
    }
    v
}
