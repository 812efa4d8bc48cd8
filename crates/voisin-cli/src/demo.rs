//! `voisin demo`: builds the exact k-NN graph of a small real data set that is compiled into the
//! binary (the UCI handwritten digits, data/README.md) and prints a short human summary, so a
//! new user sees voisin work in seconds from any folder, with no files to find.

use std::fmt::Write as _;
use std::io::{ErrorKind, Write as _};
use std::time::Instant;

use voisin::{Dataset, KnnResult, Metric, VectorSet};

use crate::args::GlobalOpts;
use crate::device::{self, EngineConfig};
use crate::error::CliError;

const DIGITS: &[u8] = include_bytes!("../../../data/digits.u8bin");
const LABELS: &[u8] = include_bytes!("../../../data/digits-labels.u8bin");
const K: usize = 10;
/// Pixel values 0..=16 drawn darker as they grow, two characters per pixel for a square look.
const SHADES: &[u8] = b" .:-=+*#%@";

pub fn run(global: &GlobalOpts) -> Result<(), CliError> {
    let (n, dim, pixels) = parse_u8bin(DIGITS)?;
    let (_, _, labels) = parse_u8bin(LABELS)?;
    // Stored as f32 (exact for 0..16) so engines take their borrowed fast path.
    let values = pixels.iter().map(|&v| f32::from(v)).collect();
    let data: Dataset = VectorSet::from_f32(n, dim, values)
        .map_err(|e| CliError::core(e, None))?
        .into();
    let engine = device::select(
        voisin_engines::Device::Auto,
        &EngineConfig {
            threads: global.threads,
            memory_budget: global.memory,
            ..EngineConfig::default()
        },
    )?;
    let start = Instant::now();
    let graph = engine
        .graph(&data, K, &Metric::Euclidean)
        .map_err(|e| CliError::core(e, None))?;
    let seconds = start.elapsed().as_secs_f64();

    let text = summary(&graph, pixels, labels, dim, &engine.name(), seconds);
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(CliError::internal(format!(
            "cannot write to standard output: {e}"
        ))),
        _ => Ok(()),
    }
}

/// Splits a `.u8bin` image (u32 n, u32 d, n·d bytes) into its shape and rows.
fn parse_u8bin(bytes: &[u8]) -> Result<(usize, usize, &[u8]), CliError> {
    let bad = || CliError::internal("the demo data compiled into this binary is damaged");
    let word = |i: usize| -> Result<usize, CliError> {
        let b: [u8; 4] = bytes
            .get(i..i + 4)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?;
        Ok(u32::from_le_bytes(b) as usize)
    };
    let (n, d) = (word(0)?, word(4)?);
    let rows = &bytes[8..];
    if rows.len() != n * d {
        return Err(bad());
    }
    Ok((n, d, rows))
}

fn summary(
    graph: &KnnResult,
    pixels: &[u8],
    labels: &[u8],
    dim: usize,
    device: &str,
    seconds: f64,
) -> String {
    let n = graph.n_queries;
    let k = graph.k;
    let same = |q: usize, j: u32| labels[q] == labels[j as usize];
    let agree = (0..n)
        .map(|q| graph.row(q).0.iter().filter(|&&j| same(q, j)).count())
        .sum::<usize>();
    let first_wrong: Vec<usize> = (0..n).filter(|&q| !same(q, graph.row(q).0[0])).collect();
    // Chance agreement: the probability that another random image shows the same digit.
    let mut counts = [0usize; 256];
    labels.iter().for_each(|&l| counts[l as usize] += 1);
    let chance = counts
        .iter()
        .map(|&c| (c * c.saturating_sub(1)) as f64)
        .sum::<f64>()
        / (n * (n - 1)) as f64;

    let mut s = String::new();
    let _ = writeln!(
        s,
        "voisin demo: the exact {k}-NN graph of {n} handwritten digits\n"
    );
    let _ = writeln!(
        s,
        "data     UCI Optical Recognition of Handwritten Digits (Alpaydin & Kaynak 1998, CC BY 4.0):\n\
         \x20        {n} images of 8x8 pixels with values 0..16, read as {dim}-dimensional vectors"
    );
    let _ = writeln!(
        s,
        "search   each image's {k} nearest other images by euclidean distance, on {device}"
    );
    let _ = writeln!(s, "time     {seconds:.3} s for {n} x {} pairs", n - 1);
    let _ = writeln!(
        s,
        "result   {:.1} % of the {} neighbours show the same digit as their image ({:.1} % by chance);\n\
         \x20        {} of {n} images have a nearest neighbour showing another digit\n",
        100.0 * agree as f64 / (n * k) as f64,
        n * k,
        100.0 * chance,
        first_wrong.len(),
    );
    let mut show = |title: &str, q: usize| {
        let (ids, dists) = graph.row(q);
        let _ = writeln!(s, "{title}");
        let mut panels = vec![(q, format!("#{q}: a {}", labels[q]))];
        for (&j, &d) in ids.iter().zip(dists).take(3) {
            panels.push((
                j as usize,
                format!("#{j}: a {}, d {d:.1}", labels[j as usize]),
            ));
        }
        s.push_str(&draw(&panels, pixels, dim));
        s.push('\n');
    };
    show("Image 0 and its three nearest neighbours:", 0);
    if let Some(&q) = first_wrong.first() {
        show(
            "A hard case: an image whose nearest neighbour shows another digit:",
            q,
        );
    }
    let _ = writeln!(
        s,
        "The same on files: voisin graph --input data/digits.u8bin -k {k} --stats"
    );
    s
}

/// Draws 8x8 images side by side with a caption above each.
fn draw(panels: &[(usize, String)], pixels: &[u8], dim: usize) -> String {
    const SIDE: usize = 8;
    const WIDTH: usize = 2 * SIDE + 6;
    let mut s = String::new();
    for (_, caption) in panels {
        let _ = write!(s, "  {caption:<WIDTH$}");
    }
    s.push('\n');
    for y in 0..SIDE {
        for (item, _) in panels {
            s.push_str("  ");
            let row = &pixels[item * dim + y * SIDE..item * dim + (y + 1) * SIDE];
            for &v in row {
                let shade = SHADES[(v as usize * (SHADES.len() - 1) + 8) / 16] as char;
                s.push(shade);
                s.push(shade);
            }
            s.push_str(&" ".repeat(WIDTH - 2 * SIDE));
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_data_has_the_expected_shape() {
        let (n, d, rows) = parse_u8bin(DIGITS).unwrap();
        assert_eq!((n, d), (1797, 64));
        assert!(rows.iter().all(|&v| v <= 16));
        let (m, one, labels) = parse_u8bin(LABELS).unwrap();
        assert_eq!((m, one), (1797, 1));
        assert!(labels.iter().all(|&l| l <= 9));
    }

    #[test]
    fn damaged_data_is_an_internal_error() {
        for bad in [&b"\x01\0\0"[..], &b"\x02\0\0\0\x02\0\0\0\x01\x02\x03"[..]] {
            assert_eq!(parse_u8bin(bad).err().unwrap().exit_code(), 1);
        }
    }
}
