//! Shared helpers for the CLI's integration tests: running the built binary and writing input
//! files byte by byte (independently of voisin-io, so the tests also check its formats).

#![allow(dead_code)]

pub mod faults;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `voisin` with `args` in `cwd`.
pub fn voisin_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_voisin"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the voisin binary runs")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Names of the entries of a folder, to see that a failed run left nothing behind.
pub fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A temporary folder holding a test's files.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        Scratch {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes raw bytes and returns the file name (relative to the folder).
    pub fn raw(&self, name: &str, bytes: &[u8]) -> String {
        std::fs::write(self.path(name), bytes).unwrap();
        name.to_string()
    }

    pub fn run(&self, args: &[&str]) -> Output {
        voisin_in(self.dir.path(), args)
    }
}

fn le32(v: u32) -> [u8; 4] {
    v.to_le_bytes()
}

/// TEXMEX .fvecs: each row is its dimension (i32) then its values.
pub fn fvecs(rows: &[Vec<f32>]) -> Vec<u8> {
    let mut b = Vec::new();
    for r in rows {
        b.extend(le32(r.len() as u32));
        r.iter().for_each(|x| b.extend(x.to_le_bytes()));
    }
    b
}

/// TEXMEX .bvecs: each row is its dimension (i32) then one byte per value.
pub fn bvecs(rows: &[Vec<u8>]) -> Vec<u8> {
    let mut b = Vec::new();
    for r in rows {
        b.extend(le32(r.len() as u32));
        b.extend(r);
    }
    b
}

/// big-ann .fbin: u32 n, u32 d, then row-major f32.
pub fn fbin(rows: &[Vec<f32>]) -> Vec<u8> {
    let d = rows.first().map_or(0, Vec::len);
    let mut b = Vec::new();
    b.extend(le32(rows.len() as u32));
    b.extend(le32(d as u32));
    rows.iter()
        .flatten()
        .for_each(|x| b.extend(x.to_le_bytes()));
    b
}

/// big-ann .u8bin: u32 n, u32 d, then row-major bytes.
pub fn u8bin(rows: &[Vec<u8>]) -> Vec<u8> {
    let d = rows.first().map_or(0, Vec::len);
    let mut b = Vec::new();
    b.extend(le32(rows.len() as u32));
    b.extend(le32(d as u32));
    rows.iter().for_each(|r| b.extend(r));
    b
}

/// A .npy (version 1.0) header for `descr` and `shape`, padded so the data starts at a multiple
/// of 64 bytes.
pub fn npy_header(descr: &str, fortran: bool, shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let order = if fortran { "True" } else { "False" };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    dict.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((dict.len() as u16).to_le_bytes());
    b.extend(dict.as_bytes());
    b
}

/// A C-order f32 .npy of the rows.
pub fn npy_f32(rows: &[Vec<f32>]) -> Vec<u8> {
    let d = rows.first().map_or(0, Vec::len);
    let mut b = npy_header("<f4", false, &[rows.len(), d]);
    rows.iter()
        .flatten()
        .for_each(|x| b.extend(x.to_le_bytes()));
    b
}

/// A Fortran-order f32 .npy of the rows (column-major data).
pub fn npy_f32_fortran(rows: &[Vec<f32>]) -> Vec<u8> {
    let d = rows.first().map_or(0, Vec::len);
    let mut b = npy_header("<f4", true, &[rows.len(), d]);
    for c in 0..d {
        rows.iter().for_each(|r| b.extend(r[c].to_le_bytes()));
    }
    b
}

/// Deterministic pseudo-random rows with small integer values, so that exact ties and
/// duplicates occur.
pub fn int_rows(n: usize, d: usize, seed: u64, levels: u32) -> Vec<Vec<f32>> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    (0..n)
        .map(|_| (0..d).map(|_| (next() % levels as u64) as f32).collect())
        .collect()
}

/// Gaussian-ish rows from `rand` for general data.
pub fn normal_rows(n: usize, d: usize, seed: u64) -> Vec<Vec<f32>> {
    use rand::{Rng, SeedableRng};
    use rand_distr::StandardNormal;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            (0..d)
                .map(|_| rng.sample::<f32, _>(StandardNormal))
                .collect()
        })
        .collect()
}

/// One parsed TSV line: query, neighbour, distance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    pub query: usize,
    pub neighbor: u32,
    pub distance: f32,
}

/// Parses TSV output strictly: three tab-separated fields, integers then a float, every line
/// ended by a newline.
pub fn parse_tsv(text: &str) -> Vec<Line> {
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "output does not end with a newline"
    );
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 3, "line {l:?} has not 3 fields");
            Line {
                query: f[0].parse().unwrap_or_else(|_| panic!("query in {l:?}")),
                neighbor: f[1]
                    .parse()
                    .unwrap_or_else(|_| panic!("neighbour in {l:?}")),
                distance: f[2].parse().unwrap_or_else(|_| panic!("distance in {l:?}")),
            }
        })
        .collect()
}

/// Flattens reference rows into the lines the CLI must print.
pub fn expected_lines(rows: impl Iterator<Item = (usize, Vec<(u32, f32)>)>) -> Vec<Line> {
    rows.flat_map(|(q, row)| {
        row.into_iter().map(move |(neighbor, distance)| Line {
            query: q,
            neighbor,
            distance,
        })
    })
    .collect()
}

/// Asserts that the CLI's lines are the reference's: same (query, neighbour) sequence, distances
/// equal to a relative tolerance.
pub fn assert_same_lines(got: &[Line], want: &[Line]) {
    assert_eq!(got.len(), want.len(), "number of results");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(
            (g.query, g.neighbor),
            (w.query, w.neighbor),
            "got {g:?}, want {w:?}"
        );
        let tol = 1e-4 * (1.0 + w.distance.abs());
        assert!(
            (g.distance - w.distance).abs() <= tol,
            "got {g:?}, want {w:?}"
        );
    }
}
