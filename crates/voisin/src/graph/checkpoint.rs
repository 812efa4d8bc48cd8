//! Checkpoints of long graph builds: finished row passes kept in a directory, so a killed run
//! resumes where it stopped and ends with the same bytes as an uninterrupted one.
//!
//! Owns the directory layout and the file formats; the graph drivers (the CPU engine's
//! `graph`, voisin-cuda's GPU passes, voisin-mpi's ranks) decide what a pass is and must not
//! know about files. Engines that checkpoint implement
//! [`crate::Engine::graph_checkpointed`].
//!
//! - `DIR/manifest`: text, one `key value` per line: format version, the job (n, dim, element
//!   type, metric, k and a CRC-32 of every data byte, so another input, metric or k is refused)
//!   and the pass layout (rows per block, blocks per pass: pass p holds rows
//!   `p·rows_per_pass .. min((p+1)·rows_per_pass, n)`), then a CRC-32 of those lines.
//! - `DIR/pass-NNNN.bin`: one finished pass, little-endian: magic, version, pass number, first
//!   and end row, k, the CRC-32 of the manifest (a pass of another job is refused), the indices
//!   (u32) and exact keys (f64) of its rows, and a CRC-32 of all that.
//! - `DIR/partial.bin` (written after each pass file, by the core's driver): the running lists
//!   of the rows still open, which the finished passes handed on, so that a resumed build does
//!   not measure the pairs between finished and open rows again. Little-endian: magic
//!   `VOISINPL`, version, the CRC-32 of the manifest, the pass count, the lengths of the kind
//!   and of the lists; the kind (what the lists are: the CPU's exact k-lists, or a GPU's
//!   approximate lists under its numeric plan), one flag per pass (the first passes, whose
//!   pairs with every open row the lists hold), the lists (the backend's bytes), and a CRC-32
//!   of all that. A file of another kind, or one that covers a pass whose file is gone, is
//!   not used (the build does the catch-up, as for a checkpoint without one); a damaged file
//!   or one of another run is refused. The manifest and pass formats are those of format 1,
//!   unchanged, so checkpoints of older versions resume, and older versions resume these.
//!
//! Every file is written to a temporary name, synced and renamed, so a kill leaves either the
//! old state or the new file, never half of one. Results are exact whatever the layout, but a
//! resumed run takes the layout from the manifest so that pass files keep their meaning.
//!
//! The single-process graph lays passes out in its 512-row blocks; the GPU drivers keep those
//! blocks and make a fresh checkpoint's passes whole GPU tiles ([`Checkpoint::open_aligned`]),
//! so CPU and GPU builds resume each other's checkpoints. The MPI driver's CPU ranks use blocks
//! of their own size, one per pass, and may finish passes in any order and from several
//! processes (each file is written by one of them). All read and write through [`Checkpoint`],
//! so there is one format and one set of checks. [`CheckpointOptions::stop_after`] ends a run
//! after some passes, as a kill would, for tests of resuming.
//!
//! Hashing the whole input costs one read of it at a few GB/s (chunks are hashed in parallel),
//! small next to a graph build, which reads every row many times.

use std::fs;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::lists::{PassRows, PassStore};
use super::schedule::BLOCK_ROWS as GRAPH_TILE;
use crate::data::{Dataset, VectorData};
use crate::error::{Error, Result};
use crate::metric::Metric;

/// Version of the manifest and pass file formats.
const FORMAT: u32 = 1;
const MAGIC: &[u8; 8] = b"VOISINCP";
const MANIFEST: &str = "manifest";
/// Header of a pass file: magic, version, pass, first row, end row, k, manifest CRC.
const HEADER: usize = 8 + 4 + 4 + 8 + 8 + 8 + 4;
/// The partial lists' file, its magic and version (a file kind of its own: the manifest and
/// pass formats are unchanged).
const PARTIAL: &str = "partial.bin";
const PARTIAL_MAGIC: &[u8; 8] = b"VOISINPL";
const PARTIAL_FORMAT: u32 = 1;
/// Header of a partial file: magic, version, manifest CRC, passes, kind length, lists length.
const PARTIAL_HEADER: usize = 8 + 4 + 4 + 4 + 4 + 8;
/// Passes per build when the caller does not choose: progress is saved every 1/16 of the rows.
const DEFAULT_PASSES: usize = 16;

/// Where and how a graph build keeps checkpoints.
#[derive(Clone, Debug)]
pub struct CheckpointOptions {
    /// Directory of the manifest and pass files.
    pub dir: PathBuf,
    /// Continue the build saved in `dir`. Without it, a non-empty `dir` is an error; with it,
    /// an empty or missing `dir` starts afresh.
    pub resume: bool,
    /// Rows per pass (rounded up to whole blocks of 512 rows, and capped by the memory budget);
    /// `None` saves progress every 1/16 of the rows. Passes cost no extra distance
    /// evaluations; a resumed build starts from the open rows' saved lists (or, without them,
    /// measures again the pairs between finished and open rows).
    pub pass_rows: Option<usize>,
    /// Stop with an error once this run has saved this many passes: a kill at a known point,
    /// for tests of resuming (the CLI's hidden `--stop-after-passes`).
    pub stop_after: Option<usize>,
}

impl CheckpointOptions {
    /// Checkpoints in `dir`, resumed or not, with the default pass size and no stop.
    pub fn new(dir: impl Into<PathBuf>, resume: bool) -> Self {
        CheckpointOptions {
            dir: dir.into(),
            resume,
            pass_rows: None,
            stop_after: None,
        }
    }
}

/// Checkpointed graph builds are on the engine seam ([`crate::Engine::graph_checkpointed`]);
/// the name that side trait had is kept for callers that import it.
pub use crate::Engine as GraphCheckpoints;

/// What a checkpoint is for: the fields a resumed run must match, in manifest order.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    fields: Vec<(&'static str, String)>,
    /// Items in the data: neighbour ids read back must be below it.
    n: usize,
}

impl Job {
    /// Describes a graph build of `data` with `k` neighbours (already capped) under `metric`.
    pub fn describe(data: &Dataset, metric: &Metric, k: usize) -> Self {
        let (dim, elem) = match data {
            Dataset::Vectors(v) => (v.dim().to_string(), v.elem_type().name().to_string()),
            Dataset::Strings(_) => ("-".into(), "string".into()),
        };
        Job {
            fields: vec![
                ("n", data.len().to_string()),
                ("dim", dim),
                ("elem", elem),
                ("metric", metric.name()),
                ("k", k.to_string()),
                ("data_crc32", format!("{:08x}", data_crc(data))),
            ],
            n: data.len(),
        }
    }
}

/// CRC-32 of every data byte: fixed-size chunks are hashed in parallel and their CRCs hashed
/// in order, so the value does not depend on the thread count.
fn data_crc(data: &Dataset) -> u32 {
    fn chunks_crc(bytes: &[u8]) -> u32 {
        const CHUNK: usize = 16 << 20;
        let parts: Vec<u32> = bytes.par_chunks(CHUNK).map(crc32fast::hash).collect();
        crc32fast::hash(bytemuck::cast_slice(&parts))
    }
    match data {
        Dataset::Vectors(v) => match v.data() {
            VectorData::F32(b) => chunks_crc(bytemuck::cast_slice(b.as_slice())),
            VectorData::F16(b) => chunks_crc(bytemuck::cast_slice(b.as_slice())),
            VectorData::Bf16(b) => chunks_crc(bytemuck::cast_slice(b.as_slice())),
            VectorData::U8(b) => chunks_crc(b.as_slice()),
            VectorData::F64(b) => chunks_crc(bytemuck::cast_slice(b.as_slice())),
        },
        Dataset::Strings(s) => {
            let mut h = crc32fast::Hasher::new();
            for item in s.iter() {
                h.update(&(item.len() as u64).to_le_bytes());
                for c in item {
                    h.update(&(*c as u32).to_le_bytes());
                }
            }
            h.finalize()
        }
    }
}

/// How rows are grouped into pass files: pass `p` holds rows
/// `p·rows_per_pass() .. min((p+1)·rows_per_pass(), n)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Rows per block: 512 in the single-process and GPU layouts, the ranks' own block size in
    /// voisin-mpi's. Always positive.
    pub block_rows: usize,
    /// Blocks in each pass (the last pass may hold fewer rows); always positive.
    pub blocks_per_pass: usize,
}

impl Layout {
    /// Rows in every pass but possibly the last: `block_rows × blocks_per_pass`.
    pub fn rows_per_pass(&self) -> usize {
        self.block_rows * self.blocks_per_pass
    }
}

/// An open checkpoint directory: the pass store of one graph build.
pub struct Checkpoint {
    dir: PathBuf,
    n: usize,
    k: usize,
    layout: Layout,
    /// CRC-32 of the manifest, repeated in every pass file.
    job_crc: u32,
    /// Passes saved by this run, and after how many to stop ([`CheckpointOptions::stop_after`]).
    saved: usize,
    stop_after: Option<usize>,
}

impl Checkpoint {
    /// Opens `opts.dir` for `job`. A fresh build splits rows into passes of at most
    /// `max_blocks` blocks of 512 rows; a resumed one keeps the layout it started with.
    pub fn open(
        opts: &CheckpointOptions,
        job: &Job,
        k: usize,
        n: usize,
        max_blocks: usize,
    ) -> Result<Self> {
        Self::open_for(opts, job, k, n, GRAPH_TILE, max_blocks)
    }

    /// Opens `opts.dir` for `job` like [`Checkpoint::open`], for a driver whose work comes in
    /// tiles of `align_rows` rows (a power of two): without `opts.pass_rows`, a fresh build's
    /// passes are whole multiples of that tile, so no tile straddles two passes at full size.
    /// The GPU drivers use it; the layout stays the single-process one (512-row blocks), so
    /// CPU and GPU builds resume each other's checkpoints.
    pub fn open_aligned(
        opts: &CheckpointOptions,
        job: &Job,
        k: usize,
        n: usize,
        align_rows: usize,
    ) -> Result<Self> {
        Self::open_for(opts, job, k, n, align_rows, usize::MAX)
    }

    /// Opens `opts.dir` for `job`: [`Checkpoint::open_aligned`] with passes of at most
    /// `max_blocks` blocks (what a driver's running lists of one pass may hold). With tiles of
    /// 512 rows it is [`Checkpoint::open`].
    pub fn open_for(
        opts: &CheckpointOptions,
        job: &Job,
        k: usize,
        n: usize,
        align_rows: usize,
        max_blocks: usize,
    ) -> Result<Self> {
        let mut wanted = Self::wanted_blocks(opts, n);
        if opts.pass_rows.is_none() {
            let step = align_rows.div_ceil(GRAPH_TILE).max(1);
            wanted = wanted.div_ceil(step) * step;
        }
        let cap = n.div_ceil(GRAPH_TILE).max(1).min(max_blocks.max(1));
        Self::open_blocks(opts, job, k, wanted.clamp(1, cap))
    }

    /// Blocks per pass a fresh build asks for: `opts.pass_rows`, or 1/16 of the rows.
    fn wanted_blocks(opts: &CheckpointOptions, n: usize) -> usize {
        match opts.pass_rows {
            Some(rows) => rows.div_ceil(GRAPH_TILE),
            None => n.div_ceil(GRAPH_TILE).div_ceil(DEFAULT_PASSES),
        }
    }

    /// Opens a checkpoint of the single-process layout: blocks of 512 rows, `blocks_per_pass`
    /// of them a pass when it is fresh.
    fn open_blocks(
        opts: &CheckpointOptions,
        job: &Job,
        k: usize,
        blocks_per_pass: usize,
    ) -> Result<Self> {
        let fresh = Layout {
            block_rows: GRAPH_TILE,
            blocks_per_pass,
        };
        let cp = Self::open_with(opts, job, k, fresh)?;
        if cp.layout.block_rows != GRAPH_TILE {
            return Err(bad(
                &opts.dir,
                "checkpoint was written with another block size (by voisin-mpi?); resume it there",
            ));
        }
        Ok(cp)
    }

    /// Opens `opts.dir` for `job` with `fresh` as the layout of a new checkpoint; a resumed
    /// one keeps the layout it was started with (see [`Checkpoint::layout`]).
    pub fn open_with(opts: &CheckpointOptions, job: &Job, k: usize, fresh: Layout) -> Result<Self> {
        let dir = &opts.dir;
        // Temporary files are what a kill mid-write leaves; they never count as progress.
        let has_files = match fs::read_dir(dir) {
            Ok(entries) => entries
                .flatten()
                .any(|e| !e.file_name().to_string_lossy().ends_with(".tmp")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(io_err(dir, e)),
        };
        if has_files && !opts.resume {
            return Err(bad(
                dir,
                "checkpoint directory is not empty (add --resume to continue that run, or pick another directory)",
            ));
        }
        let (text, layout) = if has_files {
            let text = match fs::read_to_string(dir.join(MANIFEST)) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(bad(dir, "not a voisin checkpoint (no manifest)"))
                }
                Err(e) => return Err(io_err(dir, e)),
            };
            let layout = check_manifest(dir, &text, job)?;
            (text, layout)
        } else {
            if fresh.block_rows == 0 || fresh.blocks_per_pass == 0 {
                return Err(Error::invalid("checkpoint layout has empty passes (bug)"));
            }
            fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
            let text = manifest_text(job, fresh);
            write_atomic(&dir.join(MANIFEST), text.as_bytes())?;
            (text, fresh)
        };
        Ok(Checkpoint {
            dir: dir.clone(),
            n: job.n,
            k,
            layout,
            job_crc: crc32fast::hash(text.as_bytes()),
            saved: 0,
            stop_after: opts.stop_after,
        })
    }

    /// The layout the pass files follow.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    fn pass_path(&self, p: usize) -> PathBuf {
        self.dir.join(format!("pass-{p:04}.bin"))
    }

    /// The rows of every pass over `n` items: pass `p` is `passes(n)[p]`.
    pub fn passes(&self, n: usize) -> Vec<std::ops::Range<usize>> {
        let step = self.layout.rows_per_pass().max(1);
        (0..n).step_by(step).map(|a| a..(a + step).min(n)).collect()
    }

    /// Every pass an earlier run finished, checked (in parallel: each file is read and its
    /// CRC computed once), by pass number; `None` for the passes still to do.
    pub fn load_all(&self, n: usize) -> Result<Vec<Option<PassRows>>> {
        self.passes(n)
            .par_iter()
            .enumerate()
            .map(|(p, r)| self.read_pass(p, (r.start, r.end)))
            .collect()
    }
}

fn manifest_text(job: &Job, layout: Layout) -> String {
    let mut text = format!("voisin-checkpoint {FORMAT}\n");
    for (key, value) in &job.fields {
        text.push_str(&format!("{key} {value}\n"));
    }
    text.push_str(&format!(
        "block_rows {}\nblocks_per_pass {}\n",
        layout.block_rows, layout.blocks_per_pass
    ));
    let crc = crc32fast::hash(text.as_bytes());
    text.push_str(&format!("crc32 {crc:08x}\n"));
    text
}

/// Checks a manifest against the job; returns its layout.
fn check_manifest(dir: &Path, text: &str, job: &Job) -> Result<Layout> {
    let corrupt = || bad(dir, "checkpoint manifest is corrupted");
    let body_end = text.rfind("\ncrc32 ").ok_or_else(corrupt)? + 1;
    let (body, tail) = text.split_at(body_end);
    let crc = u32::from_str_radix(tail["crc32 ".len()..].trim_end(), 16).map_err(|_| corrupt())?;
    if crc != crc32fast::hash(body.as_bytes()) {
        return Err(corrupt());
    }
    let mut lines = body.lines().map(|l| l.split_once(' ').unwrap_or((l, "")));
    match lines.next() {
        Some(("voisin-checkpoint", v)) if v == FORMAT.to_string() => {}
        Some(("voisin-checkpoint", v)) => {
            return Err(bad(
                dir,
                format!("checkpoint format {v} is not supported (this voisin writes {FORMAT})"),
            ))
        }
        _ => return Err(bad(dir, "not a voisin checkpoint (bad manifest)")),
    }
    let saved: Vec<(&str, &str)> = lines.collect();
    let value = |key: &str| saved.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let differ: Vec<String> = job
        .fields
        .iter()
        .filter_map(|(key, now)| {
            let then = value(key).unwrap_or("missing");
            (then != now).then(|| format!("{key} {then} in checkpoint, {now} now"))
        })
        .collect();
    if !differ.is_empty() {
        return Err(bad(
            dir,
            format!(
                "checkpoint is for a different input/metric/k ({})",
                differ.join("; ")
            ),
        ));
    }
    let positive = |key: &str| {
        value(key)
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&b| b > 0)
            .ok_or_else(corrupt)
    };
    Ok(Layout {
        block_rows: positive("block_rows")?,
        blocks_per_pass: positive("blocks_per_pass")?,
    })
}

impl PassStore for Checkpoint {
    fn blocks_per_pass(&self) -> Option<usize> {
        Some(self.layout.blocks_per_pass)
    }

    fn load(&mut self, p: usize, rows: (usize, usize)) -> Result<Option<PassRows>> {
        self.read_pass(p, rows)
    }

    fn save(&mut self, p: usize, rows: (usize, usize), done: &PassRows) -> Result<()> {
        self.commit(p, rows, done, None)
    }
}

/// What a partial file holds beside its lists: the passes whose pairs with every open row
/// are in them (one flag per pass), and the kind of lists (`TileGraph::partial_kind`).
pub type PartialLists<'a> = (&'a [bool], &'a str, &'a [u8]);

impl Checkpoint {
    /// Saves finished pass `p` (rows `r0..r1`) and then, when given, the running lists of the
    /// rows still open (`partial`: the passes they cover, their kind and bytes), each through
    /// a synced temporary file and a rename; then stops if [`CheckpointOptions::stop_after`]
    /// says so. A kill between the two files leaves older partial lists, which a resumed
    /// build completes with a catch-up of the passes they miss.
    pub fn commit(
        &mut self,
        p: usize,
        (r0, r1): (usize, usize),
        done: &PassRows,
        partial: Option<PartialLists<'_>>,
    ) -> Result<()> {
        if done.len() != r1 - r0 || done.iter().any(|r| r.len() != self.k) {
            return Err(Error::device(
                "graph pass has rows of the wrong length (bug)",
            ));
        }
        let mut bytes = Vec::with_capacity(HEADER + (r1 - r0) * self.k * 12 + 4);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&FORMAT.to_le_bytes());
        bytes.extend_from_slice(&(p as u32).to_le_bytes());
        for v in [r0, r1, self.k] {
            bytes.extend_from_slice(&(v as u64).to_le_bytes());
        }
        bytes.extend_from_slice(&self.job_crc.to_le_bytes());
        bytes.extend(done.iter().flatten().flat_map(|&(_, i)| i.to_le_bytes()));
        bytes.extend(
            done.iter()
                .flatten()
                .flat_map(|&(key, _)| key.to_le_bytes()),
        );
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        write_atomic(&self.pass_path(p), &bytes)?;
        if let Some((covered, kind, lists)) = partial {
            write_atomic(
                &self.partial_path(),
                &self.partial_file(covered, kind, lists),
            )?;
        }
        self.saved += 1;
        if self.stop_after == Some(self.saved) {
            return Err(Error::device(format!(
                "{}: stopped after saving {} passes, as asked",
                self.dir.display(),
                self.saved
            )));
        }
        Ok(())
    }
}

impl Checkpoint {
    /// The file of the open rows' running lists: `DIR/partial.bin`.
    pub fn partial_path(&self) -> PathBuf {
        self.dir.join(PARTIAL)
    }

    /// The bytes of a partial file (see the module docs).
    fn partial_file(&self, covered: &[bool], kind: &str, lists: &[u8]) -> Vec<u8> {
        let mut b = Vec::with_capacity(PARTIAL_HEADER + kind.len() + covered.len() + lists.len());
        b.extend_from_slice(PARTIAL_MAGIC);
        b.extend_from_slice(&PARTIAL_FORMAT.to_le_bytes());
        b.extend_from_slice(&self.job_crc.to_le_bytes());
        b.extend_from_slice(&(covered.len() as u32).to_le_bytes());
        b.extend_from_slice(&(kind.len() as u32).to_le_bytes());
        b.extend_from_slice(&(lists.len() as u64).to_le_bytes());
        b.extend_from_slice(kind.as_bytes());
        b.extend(covered.iter().map(|&c| u8::from(c)));
        b.extend_from_slice(lists);
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// The running lists an earlier run saved beside its passes, checked: the passes they
    /// cover (the first ones: their pairs with every later row are in the lists) and their
    /// bytes. `None` when there are none, when they are of another kind than
    /// `kind`, or when they cover a pass that is not finished (its file was deleted): the
    /// build then does the catch-up. A damaged file, or one of another run, is refused.
    pub fn load_partial(&self, done: &[bool], kind: &str) -> Result<Option<(Vec<bool>, Vec<u8>)>> {
        let path = self.partial_path();
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path, e)),
        };
        let corrupt = |what: &str| {
            bad(
                &path,
                format!(
                    "checkpoint partial file is corrupted ({what}); delete it to resume without it"
                ),
            )
        };
        if bytes.len() < PARTIAL_HEADER + 4 {
            return Err(corrupt("too short"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if u32::from_le_bytes(crc.try_into().expect("4 bytes")) != crc32fast::hash(body) {
            return Err(corrupt("checksum mismatch"));
        }
        let mut header = Reader(&body[..PARTIAL_HEADER]);
        if header.take(8) != PARTIAL_MAGIC || header.u32() != PARTIAL_FORMAT {
            return Err(corrupt("bad header"));
        }
        let (job_crc, passes) = (header.u32(), header.u32() as usize);
        let (kind_len, lists_len) = (header.u32() as usize, header.u64() as usize);
        let rest = &body[PARTIAL_HEADER..];
        let sizes = kind_len
            .checked_add(passes)
            .and_then(|x| x.checked_add(lists_len));
        if sizes != Some(rest.len()) {
            return Err(corrupt("wrong size"));
        }
        if job_crc != self.job_crc || passes != done.len() {
            return Err(bad(&path, "checkpoint partial file belongs to another run"));
        }
        let (saved_kind, rest) = rest.split_at(kind_len);
        let (flags, lists) = rest.split_at(passes);
        let covered = flags
            .iter()
            .map(|&f| match f {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(corrupt("bad pass flags")),
            })
            .collect::<Result<Vec<bool>>>()?;
        // Lists hold the pairs of the first passes with the rows after them.
        let prefix = covered.iter().take_while(|&&c| c).count();
        if covered[prefix..].iter().any(|&c| c) {
            return Err(corrupt("covered passes are not the first ones"));
        }
        let stale = covered.iter().zip(done).any(|(&c, &d)| c && !d);
        if saved_kind != kind.as_bytes() || stale {
            return Ok(None);
        }
        Ok(Some((covered, lists.to_vec())))
    }

    /// Pass `p` (rows `r0..r1`) as an earlier run saved it, checked; `None` if not saved.
    fn read_pass(&self, p: usize, (r0, r1): (usize, usize)) -> Result<Option<PassRows>> {
        let path = self.pass_path(p);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path, e)),
        };
        let (rows, k) = (r1 - r0, self.k);
        let corrupt = |what: &str| {
            bad(
                &path,
                format!(
                    "checkpoint pass file is corrupted ({what}); delete it to recompute that pass"
                ),
            )
        };
        if bytes.len() != HEADER + rows * k * 12 + 4 {
            return Err(corrupt("wrong size"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if u32::from_le_bytes(crc.try_into().expect("4 bytes")) != crc32fast::hash(body) {
            return Err(corrupt("checksum mismatch"));
        }
        let mut header = Reader(&body[..HEADER]);
        if header.take(8) != MAGIC || header.u32() != FORMAT {
            return Err(corrupt("bad header"));
        }
        let fields = (
            header.u32() as usize,
            header.u64() as usize,
            header.u64() as usize,
            header.u64() as usize,
        );
        if fields != (p, r0, r1, k) || header.u32() != self.job_crc {
            return Err(bad(&path, "checkpoint pass file belongs to another run"));
        }
        let (idx, keys) = body[HEADER..].split_at(rows * k * 4);
        let idx = idx
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
        let keys = keys
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")));
        let flat: Vec<(f64, u32)> = keys.zip(idx).collect();
        // A checksum catches accidents, not forgeries: every entry must be a real neighbour.
        for (row, list) in (r0..).zip(flat.chunks(k.max(1))) {
            for (j, &(key, id)) in list.iter().enumerate() {
                if id as usize >= self.n || key.is_nan() {
                    return Err(corrupt(&format!(
                        "row {row} holds neighbour {id} with key {key}, impossible for {} items",
                        self.n
                    )));
                }
                if id as usize == row {
                    return Err(corrupt(&format!("row {row} holds itself")));
                }
                if j > 0 && !super::lists::ordered(list[j - 1], (key, id)) {
                    return Err(corrupt(&format!("row {row} is not in order")));
                }
            }
            if let Some(id) = super::lists::repeated(list.iter().map(|&(_, i)| i)) {
                return Err(corrupt(&format!("row {row} holds neighbour {id} twice")));
            }
        }
        Ok(Some(flat.chunks(k.max(1)).map(<[_]>::to_vec).collect()))
    }
}

/// Little-endian fields read in order from a slice whose length was checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().expect("4 bytes"))
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().expect("8 bytes"))
    }
}

/// Writes `path` through a synced temporary file and a rename (the crate's one commit path).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    Ok(crate::commit::write_file(path, bytes)?)
}

fn bad(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{}: {msg}", path.display()))
}

fn io_err(path: &Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("{}: {e}", path.display()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VectorSet;

    fn data(n: usize) -> Dataset {
        let v: Vec<f32> = (0..n * 2).map(|i| (i % 7) as f32).collect();
        VectorSet::from_f32(n, 2, v).unwrap().into()
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("voisin-ckpt-unit-{}-{name}", std::process::id()));
        fs::remove_dir_all(&dir).ok();
        dir
    }

    fn opened(n: usize, pass_rows: Option<usize>, align: usize) -> Layout {
        let dir = scratch(&format!("layout-{n}-{pass_rows:?}-{align}"));
        let opts = CheckpointOptions {
            pass_rows,
            ..CheckpointOptions::new(&dir, false)
        };
        let job = Job::describe(&data(n), &Metric::Euclidean, 3);
        let layout = Checkpoint::open_aligned(&opts, &job, 3, n, align)
            .unwrap()
            .layout();
        fs::remove_dir_all(&dir).ok();
        layout
    }

    /// Fresh GPU layouts keep 512-row blocks (so the CPU engine resumes them) and make passes
    /// whole tiles, unless the caller chose the pass size.
    #[test]
    fn aligned_layouts_are_whole_tiles_of_512_row_blocks() {
        for (n, pass_rows, align, bpp) in [
            (20_000, None, 4096, 8),
            (20_000, None, 256, 3),
            (20_000, Some(512), 4096, 1),
            (20_000, Some(700), 16384, 2),
            (3000, None, 16384, 6),
            (1_000_000, None, 16384, 128),
            (1, None, 1, 1),
        ] {
            let got = opened(n, pass_rows, align);
            assert_eq!(got.block_rows, GRAPH_TILE, "n {n}");
            assert_eq!(
                got.blocks_per_pass, bpp,
                "n {n} {pass_rows:?} align {align}"
            );
        }
    }

    /// `stop_after` ends a run with an error right after that many passes reached the disk;
    /// they are then loaded by a resumed run, and a damaged one is refused.
    #[test]
    fn stops_after_the_asked_passes_and_loads_them_back() {
        let dir = scratch("stop");
        let n = 1300;
        let job = Job::describe(&data(n), &Metric::Euclidean, 2);
        let opts = CheckpointOptions {
            pass_rows: Some(512),
            stop_after: Some(2),
            ..CheckpointOptions::new(&dir, false)
        };
        let mut cp = Checkpoint::open(&opts, &job, 2, n, 100).unwrap();
        let passes = cp.passes(n);
        assert_eq!(passes, [0..512, 512..1024, 1024..1300]);
        let rows = |r: &std::ops::Range<usize>| -> PassRows {
            r.clone()
                // Real rows: two other items, each once (a loaded pass is checked so).
                .map(|i| {
                    vec![
                        (i as f64, (i as u32 + 1) % 1300),
                        (i as f64 + 0.5, (i as u32 + 2) % 1300),
                    ]
                })
                .collect()
        };
        cp.save(0, (0, 512), &rows(&passes[0])).unwrap();
        let err = cp.save(2, (1024, 1300), &rows(&passes[2])).unwrap_err();
        assert!(
            err.to_string().contains("stopped after saving 2 passes"),
            "{err}"
        );
        let resume = CheckpointOptions {
            resume: true,
            stop_after: None,
            ..opts.clone()
        };
        let cp = Checkpoint::open(&resume, &job, 2, n, 100).unwrap();
        let loaded = cp.load_all(n).unwrap();
        assert_eq!(loaded[0].as_ref(), Some(&rows(&passes[0])));
        assert!(loaded[1].is_none());
        assert_eq!(loaded[2].as_ref(), Some(&rows(&passes[2])));
        let path = dir.join("pass-0002.bin");
        let mut bytes = fs::read(&path).unwrap();
        bytes[HEADER + 3] ^= 4;
        fs::write(&path, bytes).unwrap();
        let err = cp.load_all(n).unwrap_err();
        assert!(
            err.is_user_error() && err.to_string().contains("pass-0002.bin"),
            "{err}"
        );
        fs::remove_dir_all(&dir).ok();
    }
}
