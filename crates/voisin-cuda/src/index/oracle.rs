//! A pair oracle on one GPU (voisin-index's `PairOracle`): the batches of "item against
//! candidates within a radius" that the List of Clusters' and SSS's `build_with` ask for where
//! their device steps do not apply, measured by `kernels/index/cover_pairs.cu`, one thread a pair.
//!
//! Exactness: the integer edit distance, so every answer is the CPU's; pairs of two strings
//! longer than 64 chars (one machine word of bit vectors) are measured on the host.

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use rayon::prelude::*;
use voisin::{Error, Metric, Result, StringSet};
use voisin_index::{PairBatch, PairOracle, Space, StringSpace};

use crate::engine::CudaEngine;
use crate::runtime::context::{dev, Gpu};

/// Pairs per launch (the chunk's candidates and answers: 768 MiB of device memory).
const CHUNK: usize = 1 << 26;
/// Threads per block.
const THREADS: u32 = 256;
/// What the kernel writes for a pair it leaves to the host.
const ON_HOST: f64 = -1.0;

/// The strings as code points, item by item, and each item's offset (n + 1 of them).
pub(crate) fn pack(set: &StringSet) -> Result<(Vec<u32>, Vec<u32>)> {
    let total: usize = set.iter().map(<[char]>::len).sum();
    if total >= u32::MAX as usize {
        return Err(Error::invalid(format!(
            "the strings hold {total} chars; the GPU takes fewer than 2^32"
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

/// The pair oracle on one GPU.
pub(crate) struct DeviceOracle<'a, S: Space> {
    engine: &'a CudaEngine,
    /// The host's space, for the pairs the host decides.
    space: &'a S,
    kernel: CudaFunction,
    /// The strings as code points and each one's offset (`pack`).
    chars: CudaSlice<u32>,
    offs: CudaSlice<u32>,
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
            l.arg(&self.chars)
                .arg(&self.offs)
                .arg(&items)
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
            // SAFETY: matches cover_pairs_lev in kernels/index/cover_pairs.cu:
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
                    if *d == ON_HOST {
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

impl<'a> DeviceOracle<'a, StringSpace> {
    /// The oracle over `space`'s strings, uploaded now (levenshtein).
    pub(crate) fn strings(engine: &'a CudaEngine, space: &'a StringSpace) -> Result<Self> {
        if *space.metric() != Metric::Levenshtein {
            return Err(Error::invalid(format!(
                "the GPU measures pairs of strings under levenshtein, not {}",
                space.metric()
            )));
        }
        let (chars, offs) = pack(space.strings())?;
        let gpu = engine.lock()?;
        let up = |v: &[u32]| {
            gpu.stream
                .clone_htod(v)
                .map_err(dev("copying strings to the device"))
        };
        Ok(DeviceOracle {
            engine,
            space,
            kernel: gpu.k.cover_pairs_lev()?.clone(),
            chars: up(&chars)?,
            offs: up(&offs)?,
        })
    }
}
