//! Distributed k-NN graph ([Dashti13] §3.2.2, docs/references.md): the items are cut into row blocks; the tiles of the
//! upper triangle of the distance matrix (block I against block J, I ≤ J) are dealt over ranks;
//! each tile is computed once and yields the exact lists of the rows of I among J and of the
//! rows of J among I. A rank measures its tiles of a round through the core's graph seam
//! ([`TileGraph::extend`], tiles of one block's edge, in batches into one running share: the
//! CPU engine re-ranks each row once for all its tiles of a batch), sends the lists to the
//! blocks' owners (block b is owned by rank b mod size), and an owner merges what it receives
//! into its blocks' final rows; rank 0 gathers the rows and alone writes the output.
//!
//! Why owners rather than the gathered shares of the GPU ranks ([`crate::gathered`]): a
//! gathered share holds lists for every item, so rank 0 would receive ranks × n × k entries;
//! here an owner receives only its blocks' lists (n × k / ranks from each round), which is
//! what lets the CPU ranks scale out on a cluster.
//!
//! Rounds: the schedule of every graph driver ([`voisin::graph::pass_steps`], one block a
//! pass): a catch-up share when resuming, then the tile row of each open block, in row order;
//! a round is one or more consecutive shares. Block I's rows are final once every tile
//! (I, J ≥ I) and (J < I, I) is done, so at the end of the round holding tile row I its owner
//! may save them. Without a checkpoint all tiles form one round (one
//! exchange); with one, about [`CHECKPOINT_ROUNDS`] rounds, each ending with the owners saving
//! their finished blocks as pass files of the core's checkpoint format
//! ([`voisin::graph::checkpoint`], one block per pass; rank 0 writes the manifest first),
//! through the core's pass bookkeeping ([`Passes::open_layout`], [`Passes::save`]).
//!
//! Resuming: rank 0 reads and checks every pass file ([`Passes`]), so a damaged or foreign
//! checkpoint is refused with one message, and tells every rank which blocks are done. Tiles
//! between two done blocks are skipped; a tile between a done and an open block is recomputed
//! for the open side only (those column lists lived in memory when the run was killed; the
//! owners keep them in memory only, so these ranks neither write nor read the partial lists of
//! [`voisin::graph::driver`]); the rest is computed as usual. The layout comes from the
//! manifest, so a build may resume with another rank count.
//!
//! Departures from the seed, and why:
//! - Tiles are dealt round-robin in row-major order with one counter across rounds
//!   ([`voisin::graph::deal`], the rule every driver uses), rather than
//!   "column J to rank J mod Q": the seed's rule gives rank Q−1 up to ~1.6× the tiles of rank
//!   0; round-robin keeps the counts within one per round, and the counter rotates the extras.
//! - Lists carry exact f64 keys (sent as two u32 words), so the owner merges them with
//!   [`merge_lists`] (the core's) and never recomputes a distance.
//!
//! Memory: an owner keeps k-lists for its own blocks only; a rank hands its tiles to the engine
//! in batches touching at most [`batch_items`] items (candidate buffers of about half a GiB),
//! and blocks are at most half a batch. With one rank and no checkpoint a graph of fewer items
//! than that is a single block: one diagonal tile, the CPU engine's own symmetric graph scan.
//!
//! Cost of rounds: a row's lists are re-ranked once per round that touches it and its
//! candidate buffers restart empty each round, so a checkpointed build spends O(n · rounds · k)
//! more exact evaluations (bench/NOTES.md, "MPI": +63 % CPU at 60 000 × 128, shrinking with n).

use std::collections::{BTreeMap, HashSet};
use std::ops::Range;

use voisin::graph::checkpoint::{CheckpointOptions, Layout};
use voisin::graph::driver::Passes;
use voisin::graph::{deal, merge_lists, pass_steps, triangle, CpuShare, TileGraph};
use voisin::metric::scale::KeyScale;
use voisin::{Dataset, Error, KnnResult, Metric, Result};

use crate::comm::{agree, Comm, Failed};
use crate::rekey;

/// Blocks per rank: enough tiles for round-robin to balance, few enough that lists stay long
/// (a tile's lists are k per row whatever its width).
const BLOCKS_PER_RANK: usize = 4;
/// Rounds (and at least as many blocks) of a checkpointed build: progress is saved about every
/// 1/16 of the work, as the single-process engine does by default.
pub const CHECKPOINT_ROUNDS: usize = 16;

/// Row blocks of the graph, each `block_rows` items (the last one shorter), and how many items
/// one batch of a rank's tiles may touch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub blocks: Vec<Range<usize>>,
    pub batch_items: usize,
}

/// One round: the tiles, in dealing order, and the blocks whose rows are final after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Round {
    pub tiles: Vec<(usize, usize)>,
    pub finished: Vec<usize>,
}

impl Plan {
    /// Rows per block for `n` items over `size` ranks and lists of `k`: at most half a batch,
    /// so that any one tile fits in the engine's candidate buffers.
    pub fn block_rows(n: usize, size: usize, checkpointed: bool, k: usize) -> usize {
        let mut blocks = if size <= 1 { 1 } else { BLOCKS_PER_RANK * size };
        if checkpointed {
            blocks = blocks.max(CHECKPOINT_ROUNDS);
        }
        let rows = n.div_ceil(blocks.clamp(1, n.max(1))).max(1);
        rows.min((batch_items(k) / 2).max(1))
    }

    /// Blocks of `block_rows` items, batches sized for neighbour lists of `k`.
    pub fn new(n: usize, block_rows: usize, k: usize) -> Plan {
        let block_rows = block_rows.max(1);
        Plan {
            blocks: (0..n.div_ceil(block_rows))
                .map(|b| b * block_rows..((b + 1) * block_rows).min(n))
                .collect(),
            batch_items: batch_items(k),
        }
    }

    /// Rank owning block `b`'s rows.
    pub fn owner(&self, b: usize, size: usize) -> usize {
        b % size
    }

    /// The tiles still to compute when the blocks marked in `done` are final, in about
    /// `rounds` rounds of whole block rows. A tile between a done and an open block comes in
    /// the first round (only its open side is used); tiles between done blocks are left out.
    pub fn rounds(&self, done: &[bool], rounds: usize) -> Vec<Round> {
        let nb = self.blocks.len();
        // The core's schedule with one block a pass: the catch-up, then one share per open
        // block (its tile row); rounds group consecutive shares.
        let steps: Vec<Round> = pass_steps(done)
            .into_iter()
            .map(|s| Round {
                tiles: triangle(nb).filter(|&(i, j)| s.takes(done, i, j)).collect(),
                finished: s.proves.into_iter().collect(),
            })
            .collect();
        let total: usize = steps.iter().map(|s| s.tiles.len()).sum();
        let target = total.div_ceil(rounds.max(1)).max(1);
        let mut out = Vec::new();
        let mut cur = Round {
            tiles: Vec::new(),
            finished: Vec::new(),
        };
        for step in steps {
            let proves = !step.finished.is_empty();
            cur.tiles.extend(step.tiles);
            cur.finished.extend(step.finished);
            // The catch-up goes with the first open block's share.
            if proves && cur.tiles.len() >= target {
                out.push(std::mem::replace(
                    &mut cur,
                    Round {
                        tiles: Vec::new(),
                        finished: Vec::new(),
                    },
                ));
            }
        }
        if !cur.tiles.is_empty() {
            out.push(cur);
        }
        out
    }
}

/// The number of neighbours per row of a graph over `n` items.
pub fn row_len(n: usize, k: usize) -> usize {
    k.min(n.saturating_sub(1))
}

/// Lists of the rows of some blocks: block → one list per row of the block.
pub type BlockLists = BTreeMap<usize, Vec<Vec<(f64, u32)>>>;

/// Rank `rank`'s tiles of one round (dealt from position `dealt` on), measured by `engine`
/// through the core's graph seam (tiles of edge one block: tile I is block I), one
/// [`TileGraph::extend`] per batch into one running share: the lists of the open blocks they
/// touch.
pub fn local<E: TileGraph<Share = CpuShare>>(
    engine: &E,
    data: &Dataset,
    (k, metric): (usize, &Metric),
    plan: &Plan,
    round: &Round,
    done: &[bool],
    (rank, size, dealt): (usize, usize, usize),
) -> Result<BlockLists> {
    let dealt_to_me = deal(size, rank);
    let mine: Vec<(usize, usize)> = round
        .tiles
        .iter()
        .enumerate()
        .filter(|(t, _)| dealt_to_me(dealt + t))
        .map(|(_, &tile)| tile)
        .collect();
    let ranges: Vec<(Range<usize>, Range<usize>)> = mine
        .iter()
        .map(|&(i, j)| (plan.blocks[i].clone(), plan.blocks[j].clone()))
        .collect();
    let edge = plan.blocks[0].len();
    let mut running: Option<CpuShare> = None;
    let mut at = 0;
    for batch in batches(&ranges, plan.batch_items) {
        let tiles = &mine[at..at + batch.len()];
        at += batch.len();
        let these: HashSet<(usize, usize)> = tiles.iter().copied().collect();
        let owns = |i: usize, j: usize| these.contains(&(i, j));
        engine.extend(data, k, metric, &mut running, edge, &owns)?;
        // The lists of done blocks (a catch-up tile's other side) are not sent: freed batch by
        // batch, so they never pile up.
        if let Some(share) = &mut running {
            for b in tiles.iter().flat_map(|&(i, j)| [i, j]).filter(|&b| done[b]) {
                share.lists[plan.blocks[b].clone()]
                    .iter_mut()
                    .for_each(|list| *list = Vec::new());
            }
        }
    }
    let mut acc = BlockLists::new();
    if let Some(share) = &mut running {
        for b in mine.iter().flat_map(|&(i, j)| [i, j]) {
            if !done[b] && !acc.contains_key(&b) {
                let lists = share.lists[plan.blocks[b].clone()]
                    .iter_mut()
                    .map(std::mem::take)
                    .collect();
                acc.insert(b, lists);
            }
        }
    }
    Ok(acc)
}

/// Items whose candidates one batch of tiles may hold: the CPU engine keeps about `24k + 400` bytes
/// of candidates per item of its batch, and half a GiB of them is the CPU engine's default.
pub fn batch_items(k: usize) -> usize {
    (512 << 20) / (24 * k + 400)
}

/// Consecutive runs of `tiles` whose distinct ranges hold at most `limit` items (a tile alone
/// may hold more): the engine's memory stays bounded however many tiles a rank holds.
pub fn batches<'a>(
    tiles: &'a [(Range<usize>, Range<usize>)],
    limit: usize,
) -> Vec<&'a [(Range<usize>, Range<usize>)]> {
    let mut out = Vec::new();
    let (mut start, mut seen) = (0, Vec::<&Range<usize>>::new());
    let size = |seen: &[&Range<usize>]| seen.iter().map(|r| r.len()).sum::<usize>();
    for (t, (r, c)) in tiles.iter().enumerate() {
        let add = |seen: &mut Vec<&'a Range<usize>>| {
            for range in [r, c] {
                if !seen.contains(&range) {
                    seen.push(range);
                }
            }
        };
        add(&mut seen);
        if t > start && size(&seen) > limit {
            out.push(&tiles[start..t]);
            start = t;
            seen.clear();
            add(&mut seen);
        }
    }
    if start < tiles.len() {
        out.push(&tiles[start..]);
    }
    out
}

/// Wire form, per destination rank: `[row, len, len × (index, key low word, key high word)]`.
pub fn encode(acc: &BlockLists, plan: &Plan, size: usize) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); size];
    for (&b, rows) in acc {
        let dest = &mut out[plan.owner(b, size)];
        for (r, list) in plan.blocks[b].clone().zip(rows) {
            if list.is_empty() {
                continue;
            }
            dest.extend([r as u32, list.len() as u32]);
            for &(key, i) in list {
                let bits = key.to_bits();
                dest.extend([i, bits as u32, (bits >> 32) as u32]);
            }
        }
    }
    out
}

/// Merges received wire lists into the owner's blocks.
pub fn decode_into(received: &[u32], plan: &Plan, k: usize, mine: &mut BlockLists) {
    let block_rows = plan.blocks[0].len();
    let mut at = 0;
    while at < received.len() {
        let (r, len) = (received[at] as usize, received[at + 1] as usize);
        let list: Vec<(f64, u32)> = received[at + 2..at + 2 + 3 * len]
            .chunks_exact(3)
            .map(|w| (f64::from_bits(w[1] as u64 | (w[2] as u64) << 32), w[0]))
            .collect();
        at += 2 + 3 * len;
        let b = r / block_rows;
        let rows = mine
            .entry(b)
            .or_insert_with(|| vec![Vec::new(); plan.blocks[b].len()]);
        let row = &mut rows[r - plan.blocks[b].start];
        *row = merge_lists(row, &list, k);
    }
}

/// Opens the checkpoint on every rank through the core's pass bookkeeping ([`Passes`]): rank
/// 0 first (it creates or checks the manifest, then reads and checks every finished pass),
/// then the others, which find the manifest in place and read no pass. `fresh` is the layout
/// of a new one.
fn open_passes(
    comm: &dyn Comm,
    (data, k, metric): (&Dataset, usize, &Metric),
    opts: &CheckpointOptions,
    fresh: Layout,
) -> std::result::Result<Passes, Failed> {
    let first = if comm.rank() == 0 {
        Passes::open_layout(data, metric, k, fresh, opts, true).map(Some)
    } else {
        Ok(None)
    };
    let first = agree(comm, first)?;
    let opened = match first {
        Some(passes) => Ok(passes),
        None => {
            let resume = CheckpointOptions {
                resume: true,
                ..opts.clone()
            };
            Passes::open_layout(data, metric, k, fresh, &resume, false)
        }
    };
    let passes = agree(comm, opened)?;
    // Another rank reading a manifest other than rank 0's would number passes differently.
    let rows = passes.rows_per_pass();
    let agreed = comm.all_max(rows as u32) as usize;
    let same = comm.all_ok(agreed == rows);
    agree(
        comm,
        if same {
            Ok(passes)
        } else {
            Err(Error::invalid(format!(
                "{}: ranks read different checkpoint layouts (is the directory shared?)",
                opts.dir.display()
            )))
        },
    )
}

/// The whole graph over `comm`'s ranks, each measuring its tiles with `engine` (the CPU
/// engine's side of the core's graph seam); the result on rank 0, `None` elsewhere. Every rank
/// must call it with the same arguments. With `checkpoint`, finished row blocks are kept there
/// and a killed build resumes (see the module docs).
pub fn run<E: TileGraph<Share = CpuShare>>(
    comm: &dyn Comm,
    engine: &E,
    data: &Dataset,
    k: usize,
    metric: &Metric,
    checkpoint: Option<&CheckpointOptions>,
) -> std::result::Result<Option<KnnResult>, Failed> {
    let (rank, size, n) = (comm.rank(), comm.size(), data.len());
    let kk = row_len(n, k);
    // The scale of the CPU engine's keys in every rank's lists (one for the whole data).
    let keyed = (metric, KeyScale::of_sets(metric, data, data));
    if kk == 0 {
        let empty = KnnResult {
            n_queries: n,
            ..Default::default()
        };
        return Ok((rank == 0).then_some(empty));
    }
    let mut block_rows = Plan::block_rows(n, size, checkpoint.is_some(), kk);
    // Rank 0's passes hold the rows of the finished blocks; every rank's saves its own.
    let mut passes = match checkpoint {
        Some(opts) => {
            let fresh = Layout {
                block_rows,
                blocks_per_pass: 1,
            };
            let passes = open_passes(comm, (data, kk, metric), opts, fresh)?;
            block_rows = passes.rows_per_pass();
            Some(passes)
        }
        None => None,
    };
    let plan = Plan::new(n, block_rows, kk);
    let nb = plan.blocks.len();

    // Rank 0 tells every rank which blocks are done.
    let flags: Vec<u32> = match &passes {
        Some(p) if rank == 0 => p.done.iter().map(|&d| u32::from(d)).collect(),
        _ => vec![0; nb],
    };
    let to_all = if rank == 0 {
        vec![flags; size]
    } else {
        vec![Vec::new(); size]
    };
    let done: Vec<bool> = comm.all_to_all(to_all).iter().map(|&f| f == 1).collect();

    let rounds = if checkpoint.is_some() {
        CHECKPOINT_ROUNDS
    } else {
        1
    };
    let mut mine = BlockLists::new();
    let mut finished_rows = Vec::new();
    let mut dealt = 0;
    for round in plan.rounds(&done, rounds) {
        let acc = local(
            engine,
            data,
            (kk, metric),
            &plan,
            &round,
            &done,
            (rank, size, dealt),
        );
        dealt += round.tiles.len();
        let acc = agree(comm, acc)?;
        let received = comm.all_to_all(encode(&acc, &plan, size));
        decode_into(&received, &plan, kk, &mut mine);
        let saved = round
            .finished
            .iter()
            .filter(|&&b| plan.owner(b, size) == rank)
            .try_for_each(|&b| {
                let rows = mine.remove(&b).unwrap_or_default();
                let range = plan.blocks[b].clone();
                if rows.len() != range.len() || rows.iter().any(|r| r.len() != kk) {
                    return Err(Error::device(format!(
                        "block {b} ended with missing neighbours (bug)"
                    )));
                }
                if let Some(passes) = &mut passes {
                    passes.save(b, &rows)?;
                }
                for (q, row) in range.zip(&rows) {
                    rekey::push_row(&mut finished_rows, keyed, q, row, kk);
                }
                Ok(())
            });
        agree(comm, saved)?;
    }
    if let (Some(p), 0) = (passes, rank) {
        let loaded: Vec<Range<usize>> = (p.passes.iter().zip(&p.done))
            .filter(|(_, &d)| d)
            .map(|(r, _)| r.clone())
            .collect();
        let rows = p.into_rows();
        for range in loaded {
            for q in range {
                rekey::push_row(&mut finished_rows, keyed, q, &rows[q], kk);
            }
        }
    }
    Ok(comm
        .gather(finished_rows)
        .map(|rows| rekey::assemble(&rows, n, kk)))
}
