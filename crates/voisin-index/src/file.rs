//! The index file: self-contained (the items travel with the structure, so an index can never be
//! queried against a data file that changed under it) and checked before use.
//!
//! Layout, little-endian: the magic `VOISINIX`, a u32 format version, a u8 index kind, a u8 item
//! kind, the metric's name (u32 length + UTF-8), the items, the structure, and a CRC-32 of every
//! byte before it. Reading checks magic, version and checksum first, then parses with every length
//! field bounded by the bytes actually left (a corrupted length can never ask for a huge
//! allocation), then checks the structure's ids and ranges and measures again the distances the
//! search prunes with (LC member distances and radii, the SSS pivot table, cover tree parent
//! distances, duplicates and reaches), so a bad or forged file is an error, never a panic or a
//! wrong answer. This module owns the byte layout only.

use std::path::Path;

use voisin::{Error, Metric, Result, StringSet};

use crate::cover::{CoverTree, Node};
use crate::kd::KdTree;
use crate::lc::{Cluster, ListOfClusters};
use crate::space::{Space, StringSpace, VectorSpace};
use crate::sss::Sss;
use crate::{DatasetIndex, Index, Kind, MetricIndex};

/// The eight bytes every index file starts with.
pub const MAGIC: &[u8; 8] = b"VOISINIX";
/// The layout version written after the magic; reading refuses any other.
pub const VERSION: u32 = 1;

/// The index as bytes.
pub fn to_bytes(index: &DatasetIndex) -> Result<Vec<u8>> {
    let metric = index.metric();
    if matches!(metric, Metric::Custom(_)) {
        return Err(Error::invalid(format!(
            "an index under the user metric {metric} cannot be saved"
        )));
    }
    let mut w = Writer(Vec::new());
    w.0.extend_from_slice(MAGIC);
    w.u32(VERSION);
    w.u8(kind_code(index.kind()));
    let name = metric.name();
    match index {
        DatasetIndex::Vectors(i) => {
            w.u8(0);
            w.bytes(name.as_bytes());
            let s = i.space();
            w.u64(s.len() as u64);
            w.u64(s.dim() as u64);
            s.values().iter().for_each(|&x| w.f32(x));
            write_structure(&mut w, i);
        }
        DatasetIndex::Strings(i) => {
            w.u8(1);
            w.bytes(name.as_bytes());
            let s = i.space();
            w.u64(s.len() as u64);
            for k in 0..s.len() {
                w.bytes(s.strings().get_string(k).as_bytes());
            }
            write_structure(&mut w, i);
        }
    }
    let crc = crc32fast::hash(&w.0);
    w.u32(crc);
    Ok(w.0)
}

/// Writes the index to `path` through voisin's output commit (`voisin::commit`: checked target,
/// temporary file, rename), so a failure never leaves a partial index under the final name.
pub fn save(index: &DatasetIndex, path: &Path) -> Result<()> {
    let bytes = to_bytes(index)?;
    Ok(voisin::commit::write_file(path, &bytes)?)
}

/// Reads an index file (see the module doc for what is checked).
pub fn load(path: &Path) -> Result<DatasetIndex> {
    if let Some(why) = voisin::commit::unreadable_kind(path) {
        return Err(Error::invalid(why));
    }
    from_bytes(&std::fs::read(path)?)
}

/// Parses index bytes.
pub fn from_bytes(bytes: &[u8]) -> Result<DatasetIndex> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad("not a voisin index file (wrong magic bytes)"));
    }
    if bytes.len() < MAGIC.len() + 4 {
        return Err(bad("index file is truncated"));
    }
    let version = u32::from_le_bytes(bytes[MAGIC.len()..MAGIC.len() + 4].try_into().expect("4"));
    if version != VERSION {
        return Err(bad(format!(
            "index format version {version} is not supported (this voisin reads version {VERSION})"
        )));
    }
    let Some(body_len) = bytes.len().checked_sub(4).filter(|&l| l >= MAGIC.len() + 4) else {
        return Err(bad("index file is truncated"));
    };
    let expected = u32::from_le_bytes(bytes[body_len..].try_into().expect("4 bytes"));
    if crc32fast::hash(&bytes[..body_len]) != expected {
        return Err(bad(
            "index file is corrupted or truncated (checksum mismatch)",
        ));
    }
    let mut r = Reader(&bytes[MAGIC.len() + 4..body_len]);
    let kind = match r.u8()? {
        1 => Kind::Lc,
        2 => Kind::Sss,
        3 => Kind::Cover,
        4 => Kind::Kd,
        k => return Err(bad(format!("unknown index kind code {k}"))),
    };
    let items = r.u8()?;
    let name =
        String::from_utf8(r.bytes()?.to_vec()).map_err(|_| bad("metric name is not UTF-8"))?;
    let metric: Metric = name
        .parse()
        .map_err(|e| bad(format!("stored metric: {e}")))?;
    let index = match items {
        0 => {
            let n = r.count(0)?;
            let dim = r.count(0)?;
            let len = n
                .checked_mul(dim)
                .filter(|&l| l.checked_mul(4).is_some_and(|b| b <= r.0.len()))
                .ok_or_else(|| bad("vector data is larger than the file"))?;
            let values = (0..len).map(|_| r.f32()).collect::<Result<Vec<_>>>()?;
            if dim == 0 {
                return Err(bad("vectors have dimension 0"));
            }
            // Indexes are built from finite values only (inputs with NaN or infinities are
            // refused or zeroed first): another value is a forgery that would answer wrongly.
            if let Some(at) = values.iter().position(|v| !v.is_finite()) {
                return Err(bad(format!(
                    "stored item {} holds the value {}; an index holds finite values only",
                    at / dim,
                    values[at]
                )));
            }
            let space = VectorSpace::from_f32(values, dim, metric).map_err(stored)?;
            DatasetIndex::Vectors(read_structure(&mut r, space, kind)?)
        }
        1 => {
            let n = r.count(4)?;
            let mut set = StringSet::new();
            for _ in 0..n {
                let s =
                    std::str::from_utf8(r.bytes()?).map_err(|_| bad("a string is not UTF-8"))?;
                set.push(s).map_err(stored)?;
            }
            let space = StringSpace::new(set, metric).map_err(stored)?;
            DatasetIndex::Strings(read_structure(&mut r, space, kind)?)
        }
        k => return Err(bad(format!("unknown item kind code {k}"))),
    };
    if !r.0.is_empty() {
        return Err(bad("index file has bytes after the structure"));
    }
    Ok(index)
}

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid(msg)
}

fn stored(e: Error) -> Error {
    bad(format!("stored items: {e}"))
}

fn kind_code(kind: Kind) -> u8 {
    match kind {
        Kind::Lc => 1,
        Kind::Sss => 2,
        Kind::Cover => 3,
        Kind::Kd => 4,
    }
}

fn write_structure<S: Space>(w: &mut Writer, index: &Index<S>) {
    match index {
        Index::Lc(lc) => {
            let (clusters, members, dists) = lc.parts();
            w.u64(clusters.len() as u64);
            for c in clusters {
                w.u32(c.center);
                w.f64(c.radius);
                w.u64(c.start as u64);
                w.u64(c.end as u64);
            }
            w.u32s(members);
            w.f64s(dists);
        }
        Index::Sss(sss) => {
            let (pivots, order, table) = sss.parts();
            w.u32s(pivots);
            w.u32s(order);
            w.f64s(table);
        }
        Index::Cover(tree) => {
            let (base, nodes, children, dups) = tree.parts();
            w.f64(base);
            w.u64(nodes.len() as u64);
            for n in nodes {
                w.u32(n.item);
                w.u32(n.level as u32);
                w.u32(n.parent);
                w.f64(n.parent_dist);
                w.f64(n.reach);
                for x in [n.c0, n.c1, n.d0, n.d1] {
                    w.u64(x as u64);
                }
            }
            w.u32s(children);
            w.u32s(dups);
        }
        // The tree is a function of the items, rebuilt when read (kd.rs).
        Index::Kd(_) => {}
    }
}

fn read_structure<S: Space>(r: &mut Reader<'_>, space: S, kind: Kind) -> Result<Index<S>> {
    let index = match kind {
        Kind::Lc => {
            let nc = r.count(28)?;
            let clusters = (0..nc)
                .map(|_| {
                    Ok(Cluster {
                        center: r.u32()?,
                        radius: r.f64()?,
                        start: r.u64()? as usize,
                        end: r.u64()? as usize,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let members = r.u32s()?;
            let dists = r.f64s()?;
            let lc = ListOfClusters::from_parts(space, clusters, members, dists, 0)
                .map_err(structure)?;
            Index::Lc(lc)
        }
        Kind::Sss => {
            let pivots = r.u32s()?;
            let order = r.u32s()?;
            let table = r.f64s()?;
            let sss = Sss::from_parts(space, pivots, order, table, 0).map_err(structure)?;
            Index::Sss(sss)
        }
        Kind::Cover => {
            let base = r.f64()?;
            let nn = r.count(60)?;
            let nodes = (0..nn)
                .map(|_| {
                    Ok(Node {
                        item: r.u32()?,
                        level: r.u32()? as i32,
                        parent: r.u32()?,
                        parent_dist: r.f64()?,
                        reach: r.f64()?,
                        c0: r.u64()? as usize,
                        c1: r.u64()? as usize,
                        d0: r.u64()? as usize,
                        d1: r.u64()? as usize,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let children = r.u32s()?;
            let dups = r.u32s()?;
            let tree = CoverTree::from_parts(space, base, nodes, children, dups);
            tree.check_layout().map_err(structure)?;
            tree.check_distances().map_err(structure)?;
            Index::Cover(tree)
        }
        Kind::Kd => {
            if space.box_order().is_none() {
                return Err(structure(
                    "a kd index needs vectors under a coordinate-wise metric".into(),
                ));
            }
            Index::Kd(KdTree::build(space))
        }
    };
    Ok(index)
}

fn structure(msg: String) -> Error {
    bad(format!("index structure is inconsistent: {msg}"))
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, x: u8) {
        self.0.push(x);
    }
    fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn f32(&mut self, x: f32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn f64(&mut self, x: f64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn u32s(&mut self, xs: &[u32]) {
        self.u64(xs.len() as u64);
        xs.iter().for_each(|&x| self.u32(x));
    }
    fn f64s(&mut self, xs: &[f64]) {
        self.u64(xs.len() as u64);
        xs.iter().for_each(|&x| self.f64(x));
    }
}

/// Reads from the bytes left; every read fails cleanly at the end of the data.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.0.len() {
            return Err(bad("index file ends in the middle of its structure"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn f32(&mut self) -> Result<f32> {
        Ok(f32::from_le_bytes(self.array()?))
    }
    fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array()?))
    }
    /// A count of elements of `size` bytes each (0: no bound but usize), checked against the
    /// bytes left so that no allocation can exceed the file.
    fn count(&mut self, size: usize) -> Result<usize> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| bad("a length field is impossibly large"))?;
        if size > 0 && n.checked_mul(size).is_none_or(|b| b > self.0.len()) {
            return Err(bad("a length field exceeds the file"));
        }
        Ok(n)
    }
    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn u32s(&mut self) -> Result<Vec<u32>> {
        let n = self.count(4)?;
        (0..n).map(|_| self.u32()).collect()
    }
    fn f64s(&mut self) -> Result<Vec<f64>> {
        let n = self.count(8)?;
        (0..n).map(|_| self.f64()).collect()
    }
}
/// Tallies item ids while a structure read from a file is checked: each must appear exactly once.
pub(crate) struct ItemTally(Vec<bool>);

impl ItemTally {
    pub(crate) fn new(n: usize) -> Self {
        ItemTally(vec![false; n])
    }

    pub(crate) fn mark(&mut self, x: u32) -> std::result::Result<(), String> {
        let n = self.0.len();
        match self.0.get_mut(x as usize) {
            Some(seen) if !*seen => {
                *seen = true;
                Ok(())
            }
            Some(_) => Err(format!("item {x} appears twice")),
            None => Err(format!("item {x} is out of range (set of {n})")),
        }
    }

    /// Whether every item was marked.
    pub(crate) fn complete(&self) -> bool {
        self.0.iter().all(|&s| s)
    }
}
