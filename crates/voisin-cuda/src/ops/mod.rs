//! Kernel launchers and the device-side steps built on them, each taking the GPU and the plan:
//! a set's upload and row preparation (`device_set`), one distance tile (`tile`), the selection
//! variants (`select`), the fused distance + filter (`fused`), threshold filters' survivors and
//! their merge (`survivors`), the graph's fused tile pair (`pair`) and the locality order whose
//! block spheres let it skip tiles (`locality`), rows scaled to f16 for TF32
//! plans (`scaled`), exact keys and the device finish (`exact`) and the range filter (`range`).
//!
//! Reads `runtime` (the GPU, its kernels, the host↔kernel table) and `numerics` (the plan);
//! knows nothing about how a search is tiled over its queries or proved (`search`).

pub(crate) mod device_set;
pub(crate) mod exact;
pub(crate) mod fused;
pub(crate) mod locality;
pub(crate) mod pair;
pub(crate) mod range;
pub(crate) mod scaled;
pub mod select;
pub(crate) mod survivors;
pub(crate) mod tile;

use voisin::Result;

use crate::runtime::context::Gpu;

/// Working-set limits of one pass.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    /// Bytes for distance tiles and candidate lists.
    pub bytes: usize,
}

impl Budget {
    /// The budget on `gpu` now: `tile_bytes`, at most a quarter of the free memory, at least
    /// [`MIN_BUDGET`] (measuring synchronises the context).
    pub fn measure(gpu: &Gpu, tile_bytes: usize) -> Result<Budget> {
        Ok(Budget {
            bytes: tile_bytes.min(gpu.free_memory()? / 4).max(MIN_BUDGET),
        })
    }
}

/// The smallest working set: one query row against a 16384-item tile plus lists.
pub(crate) const MIN_BUDGET: usize = 1 << 20;
