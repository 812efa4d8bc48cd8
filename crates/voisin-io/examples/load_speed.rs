//! Measures how long writing and reading an n × d f32 set takes in each vector format, mapped
//! and owned, and prints a table. Not a test: timings depend on the machine and the page cache.
//!
//! `cargo run -p voisin-io --profile test --example load_speed -- [N] [D]` (default 1000000 128).
//! Files go to a temporary folder that is removed at the end. Reads run right after the writes,
//! so they mostly hit the page cache: they measure parsing and copying, not the disk.

use std::time::Instant;

use voisin::data::VectorSet;
use voisin_io::{read_dataset, write_vectors, ReadOptions, Role};

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().expect("a number"));
    let n = args.next().unwrap_or(1_000_000);
    let d = args.next().unwrap_or(128);
    let values: Vec<f32> = (0..n * d)
        .map(|i| (i % 1000) as f32 * 0.001 - 0.5)
        .collect();
    let set = VectorSet::from_f32(n, d, values).unwrap();
    let mb = (n * d * 4) as f64 / 1e6;
    let dir = tempfile::tempdir().unwrap();
    println!("{n} x {d} f32 ({mb:.0} MB of values)");
    println!(
        "{:<8} {:>10} {:>14} {:>14}",
        "format", "write s", "read mmap s", "read owned s"
    );
    for ext in ["fbin", "npy", "fvecs", "bvecs"] {
        let path = dir.path().join(format!("v.{ext}"));
        let data = if ext == "bvecs" {
            let bytes: Vec<u8> = (0..n * d).map(|i| (i % 251) as u8).collect();
            let data = voisin::data::VectorData::U8(voisin::data::Buffer::Owned(bytes));
            VectorSet::new(n, d, data).unwrap()
        } else {
            set.clone()
        };
        let t = Instant::now();
        write_vectors(&path, &data).unwrap();
        let write = t.elapsed().as_secs_f64();
        let mut read = [0.0; 2];
        for (slot, mmap) in [true, false].into_iter().enumerate() {
            let t = Instant::now();
            let ds = read_dataset(
                &path,
                &ReadOptions {
                    role: Role::Base,
                    mmap,
                    ..ReadOptions::default()
                },
            )
            .unwrap();
            read[slot] = t.elapsed().as_secs_f64();
            assert_eq!(ds.len(), n);
        }
        println!("{ext:<8} {write:>10.3} {:>14.3} {:>14.3}", read[0], read[1]);
    }
}
