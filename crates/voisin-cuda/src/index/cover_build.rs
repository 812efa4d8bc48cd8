//! The cover tree built on the GPU (docs/design/gpu-cover-tree.md, after [SharmaJoshi]'s
//! breadth-first construction): voisin-index's level algorithm as the CPU build runs it
//! (`CoverTree::build_with`), with every distance evaluation of a level sent here in a few large
//! batches and measured by `kernels/index/cover_pairs.cu`, one thread a pair.
//!
//! Exactness: under euclidean, cityblock and chebyshev the device computes the host's exact f64
//! keys and distances (`index/space.cuh`); under levenshtein the integer edit distance; so every
//! decision and every stored distance is the CPU's, and the tree is the CPU build's, node for
//! node. Under minkowski the device only screens: every pair it finds within the radius (widened
//! by a relative 1e-6, far above its rounding) is measured again on the host, which decides. Pairs
//! of two strings longer than 64 chars (one machine word of bit vectors) are measured on the host.

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use rayon::prelude::*;
use voisin::{Dataset, Error, Metric, Result, StringSet};
use voisin_index::cover::{PairBatch, PairOracle};
use voisin_index::{CoverTree, DatasetIndex, Index, Params, Space, StringSpace, VectorSpace};

use crate::engine::CudaEngine;
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};

/// Pairs per launch (the chunk's candidates and answers: 768 MiB of device memory).
const CHUNK: usize = 1 << 26;
/// Threads per block.
const THREADS: u32 = 256;
/// The kernel's code for minkowski (cover_pairs.cu's COVER_MINKOWSKI).
const MINKOWSKI: i32 = -1;
/// What the kernel writes for a pair it leaves to the host.
const ON_HOST: f64 = -1.0;

/// Builds a cover tree of base `base` over `data` under `metric` on the engine's GPU: the same
/// tree and the same index file as `DatasetIndex::build(data, metric, Kind::Cover, ..)` on the
/// CPU. Vectors take euclidean, cityblock, chebyshev or minkowski (p >= 1), strings
/// levenshtein; user metrics are refused (they run on the CPU).
pub fn build_cover(
    engine: &CudaEngine,
    data: &Dataset,
    metric: Metric,
    base: f64,
) -> Result<DatasetIndex> {
    Params {
        base,
        ..Params::default()
    }
    .check()?;
    Ok(match data {
        Dataset::Vectors(v) => {
            let code = match metric {
                Metric::Euclidean => abi::EX_SQEUCLIDEAN,
                Metric::Cityblock => abi::EX_CITYBLOCK,
                Metric::Chebyshev => abi::EX_CHEBYSHEV,
                Metric::Minkowski(_) => MINKOWSKI,
                ref m => return Err(refused(m)),
            };
            let space = VectorSpace::new(v, metric)?;
            let p = match space.metric() {
                Metric::Minkowski(p) => *p,
                _ => 0.0,
            };
            let on = |gpu: &Gpu| {
                Ok(Items::Vectors {
                    rows: gpu.upload(space.values())?,
                    dim: space.dim() as i32,
                    code,
                    p,
                })
            };
            DatasetIndex::Vectors(Index::Cover(on_device(engine, &space, base, on)?))
        }
        Dataset::Strings(s) => {
            if metric != Metric::Levenshtein {
                return Err(refused(&metric));
            }
            let space = StringSpace::new(s.clone(), metric)?;
            let (chars, offs) = pack(s)?;
            let on = |gpu: &Gpu| {
                let up = |v: &[u32]| {
                    gpu.stream
                        .clone_htod(v)
                        .map_err(dev("copying strings to the device"))
                };
                Ok(Items::Strings {
                    chars: up(&chars)?,
                    offs: up(&offs)?,
                })
            };
            DatasetIndex::Strings(Index::Cover(on_device(engine, &space, base, on)?))
        }
    })
}

/// The build over `space` with the items `upload` puts on the device.
fn on_device<S: Space + Clone>(
    engine: &CudaEngine,
    space: &S,
    base: f64,
    upload: impl FnOnce(&Gpu) -> Result<Items>,
) -> Result<CoverTree<S>> {
    let (on, kernel) = {
        let gpu = engine.lock()?;
        let on = upload(&gpu)?;
        let kernel = match on {
            Items::Vectors { .. } => gpu.k.cover_pairs_vec.clone(),
            Items::Strings { .. } => gpu.k.cover_pairs_lev.clone(),
        };
        (on, kernel)
    };
    let oracle = DeviceOracle {
        engine,
        space,
        kernel,
        on,
    };
    CoverTree::build_with(space.clone(), base, &oracle)
}

fn refused(metric: &Metric) -> Error {
    Error::invalid(format!(
        "the GPU builds cover trees under euclidean, cityblock, chebyshev, minkowski and \
         levenshtein, not {metric} (build on the CPU)"
    ))
}

/// The strings as code points, item by item, and each item's offset (n + 1 of them).
fn pack(set: &StringSet) -> Result<(Vec<u32>, Vec<u32>)> {
    let total: usize = set.iter().map(<[char]>::len).sum();
    if total >= u32::MAX as usize {
        return Err(Error::invalid(format!(
            "the strings hold {total} chars; the GPU cover tree takes fewer than 2^32"
        )));
    }
    let mut chars = Vec::with_capacity(total + 1);
    let mut offs = Vec::with_capacity(set.len() + 1);
    offs.push(0u32);
    for s in set.iter() {
        chars.extend(s.iter().map(|&c| c as u32));
        offs.push(chars.len() as u32);
    }
    // One padding char keeps the upload non-empty when every string is.
    chars.push(0);
    Ok((chars, offs))
}

/// The items on the device.
enum Items {
    /// Row-major f32 rows; `code` an EX_* code or [`MINKOWSKI`] with order `p`.
    Vectors {
        rows: CudaSlice<f32>,
        dim: i32,
        code: i32,
        p: f64,
    },
    Strings {
        chars: CudaSlice<u32>,
        offs: CudaSlice<u32>,
    },
}

/// The pair oracle on one GPU.
struct DeviceOracle<'a, S: Space> {
    engine: &'a CudaEngine,
    /// The host's space, for the pairs the host decides.
    space: &'a S,
    kernel: CudaFunction,
    on: Items,
}

impl<S: Space> DeviceOracle<'_, S> {
    /// The kernel's answers for every pair of `batch`, chunk by chunk.
    fn measure(&self, gpu: &Gpu, batch: &PairBatch) -> Result<Vec<f64>> {
        let s = &gpu.stream;
        let up_err = dev("copying a batch of pairs to the device");
        let starts: Vec<u64> = batch.starts().iter().map(|&x| x as u64).collect();
        let items = s.clone_htod(batch.items()).map_err(up_err)?;
        let radii = s
            .clone_htod(batch.radii())
            .map_err(dev("copying a batch of pairs to the device"))?;
        let starts = s
            .clone_htod(&starts)
            .map_err(dev("copying a batch of pairs to the device"))?;
        let nq = batch.len() as u32;
        let cands = batch.cands();
        let mut out = Vec::with_capacity(cands.len());
        for (c, chunk) in cands.chunks(CHUNK).enumerate() {
            let t0 = (c * CHUNK) as u64;
            let n = chunk.len() as i64;
            let dc = s
                .clone_htod(chunk)
                .map_err(dev("copying a batch of pairs to the device"))?;
            // SAFETY: every answer is written by the kernel below (one per pair).
            let mut dout = unsafe { s.alloc::<f64>(chunk.len()) }.map_err(dev("allocating"))?;
            let mut l = s.launch_builder(&self.kernel);
            let zero: f64 = std::iter::empty::<f64>().sum();
            match &self.on {
                Items::Vectors { rows, dim, code, p } => {
                    l.arg(rows).arg(dim).arg(code).arg(p).arg(&zero);
                }
                Items::Strings { chars, offs } => {
                    l.arg(chars).arg(offs);
                }
            }
            l.arg(&items)
                .arg(&radii)
                .arg(&starts)
                .arg(&nq)
                .arg(&t0)
                .arg(&n)
                .arg(&dc)
                .arg(&mut dout);
            let blocks = chunk.len().div_ceil(THREADS as usize).min(1 << 20) as u32;
            let cfg = LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: matches cover_pairs_vec / cover_pairs_lev in kernels/index/cover_pairs.cu:
            // every item and candidate id is below the number of items (the batch comes from
            // the construction over this set), `starts` has nq + 1 entries and covers the chunk.
            unsafe { l.launch(cfg) }.map_err(dev("cover_pairs"))?;
            out.extend(gpu.download(&dout.slice(..))?);
        }
        Ok(out)
    }
}

impl<S: Space> PairOracle for DeviceOracle<'_, S> {
    fn within(&self, batch: &PairBatch) -> Result<Vec<f64>> {
        let n = self.space.len() as u64;
        if batch
            .items()
            .iter()
            .chain(batch.cands())
            .any(|&x| u64::from(x) >= n)
        {
            return Err(Error::device("a pair names an item outside the set"));
        }
        let mut out = {
            let gpu = self.engine.lock()?;
            self.measure(&gpu, batch)?
        };
        let host_decides = matches!(
            self.on,
            Items::Vectors {
                code: MINKOWSKI,
                ..
            }
        );
        let space = self.space;
        let starts = batch.starts();
        out.par_chunks_mut(1 << 16)
            .enumerate()
            .for_each(|(c, part)| {
                let t0 = c << 16;
                let mut q = starts.partition_point(|&s| s <= t0) - 1;
                for (k, d) in part.iter_mut().enumerate() {
                    let t = t0 + k;
                    while starts[q + 1] <= t {
                        q += 1;
                    }
                    if *d == ON_HOST || (host_decides && !d.is_nan()) {
                        let (x, y, r) = (batch.items()[q], batch.cands()[t], batch.radii()[q]);
                        let key =
                            space.key_within(space.item(x as usize), space.item(y as usize), r);
                        *d = key
                            .map(|k| space.to_distance(k))
                            .filter(|&d| d <= r)
                            .unwrap_or(f64::NAN);
                    }
                }
            });
        Ok(out)
    }
}
