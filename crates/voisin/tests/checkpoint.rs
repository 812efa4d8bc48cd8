//! Checkpointed graph builds: the same bytes as an uninterrupted build (fresh, resumed with
//! passes missing, resumed with nothing left to do), and damaged or foreign checkpoints
//! refused with an error that names the file.

use std::fs;
use std::path::Path;

use rand::{rngs::StdRng, Rng, SeedableRng};
use voisin::cpu::CpuEngine;
use voisin::graph::checkpoint::CheckpointOptions;
use voisin::reference::compare_knn;
use voisin::{reference, Dataset, Engine, Error, KnnResult, Metric, StringSet, VectorSet};

/// Rows not a multiple of the 512-row blocks, with duplicate rows so ties cross passes.
fn data(seed: u64, n: usize, dim: usize) -> Dataset {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut v: Vec<f32> = (0..n * dim).map(|_| rng.gen_range(0..4) as f32).collect();
    v.copy_within(..dim, dim);
    VectorSet::from_f32(n, dim, v).unwrap().into()
}

fn opts(dir: &Path, resume: bool, pass_rows: usize) -> CheckpointOptions {
    CheckpointOptions {
        dir: dir.to_path_buf(),
        resume,
        pass_rows: Some(pass_rows),
        stop_after: None,
    }
}

fn assert_same(a: &KnnResult, b: &KnnResult) {
    assert_eq!((a.n_queries, a.k), (b.n_queries, b.k));
    assert_eq!(a.indices, b.indices);
    let bits = |r: &KnnResult| r.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(a), bits(b));
}

fn pass_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pass-"))
        .collect();
    names.sort();
    names
}

fn invalid_message(r: voisin::Result<KnnResult>) -> String {
    match r {
        Err(e @ Error::InvalidInput(_)) => e.to_string(),
        Err(e) => panic!("expected invalid input, got {e}"),
        Ok(_) => panic!("a bad checkpoint was accepted"),
    }
}

#[test]
fn checkpointed_equals_plain_and_resumes_identically() {
    let engine = CpuEngine::default();
    for (metric, n, dim, k) in [
        (Metric::Euclidean, 1700, 5, 7),
        (Metric::Cosine, 1100, 3, 1),
        (Metric::Cityblock, 600, 127, 20),
    ] {
        let x = data(n as u64, n, dim);
        let plain = engine.graph(&x, k, &metric).unwrap();
        compare_knn(&reference::graph(&x, k, &metric).unwrap(), &plain, 1e-5).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ckpt");
        let first = engine
            .graph_checkpointed(&x, k, &metric, &opts(&dir, false, 512))
            .unwrap();
        assert_same(&plain, &first);
        let files = pass_files(&dir);
        assert_eq!(files.len(), n.div_ceil(512), "{files:?}");

        // Nothing left to do: the result comes from the files alone.
        let again = engine
            .graph_checkpointed(&x, k, &metric, &opts(&dir, true, 512))
            .unwrap();
        assert_same(&plain, &again);
        assert_eq!(again.stats.distance_evals, 0);

        // A kill between passes (the last one missing) and a lost file (the first one, when
        // that still leaves a pass to reuse).
        fs::remove_file(dir.join(&files[files.len() - 1])).unwrap();
        if files.len() > 2 {
            fs::remove_file(dir.join(&files[0])).unwrap();
        }
        let resumed = engine
            .graph_checkpointed(&x, k, &metric, &opts(&dir, true, 512))
            .unwrap();
        assert_same(&plain, &resumed);
        assert!(resumed.stats.distance_evals < first.stats.distance_evals);
        assert_eq!(pass_files(&dir), files);
    }
}

#[test]
fn resume_keeps_the_saved_layout() {
    let engine = CpuEngine::default();
    let x = data(7, 1600, 4);
    let plain = engine.graph(&x, 5, &Metric::Euclidean).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    engine
        .graph_checkpointed(&x, 5, &Metric::Euclidean, &opts(&dir, false, 1024))
        .unwrap();
    fs::remove_file(dir.join("pass-0001.bin")).unwrap();
    // Another pass size on resume must not reinterpret the files.
    let resumed = engine
        .graph_checkpointed(&x, 5, &Metric::Euclidean, &opts(&dir, true, 512))
        .unwrap();
    assert_same(&plain, &resumed);
    assert_eq!(pass_files(&dir), ["pass-0000.bin", "pass-0001.bin"]);
}

#[test]
fn strings_checkpoint_too() {
    let mut rng = StdRng::seed_from_u64(3);
    let words: Vec<String> = (0..700)
        .map(|_| {
            (0..rng.gen_range(0..6))
                .map(|_| rng.gen_range(b'a'..b'd') as char)
                .collect()
        })
        .collect();
    let x: Dataset = StringSet::from_strings(&words).unwrap().into();
    let engine = CpuEngine::default();
    let plain = engine.graph(&x, 4, &Metric::Levenshtein).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let o = opts(tmp.path(), false, 512);
    let got = engine
        .graph_checkpointed(&x, 4, &Metric::Levenshtein, &o)
        .unwrap();
    assert_same(&plain, &got);
}

#[test]
fn damaged_and_foreign_checkpoints_are_refused() {
    let engine = CpuEngine::default();
    let m = Metric::Euclidean;
    let x = data(11, 1200, 6);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    engine
        .graph_checkpointed(&x, 4, &m, &opts(&dir, false, 512))
        .unwrap();

    // Without --resume a used directory is not overwritten.
    let msg = invalid_message(engine.graph_checkpointed(&x, 4, &m, &opts(&dir, false, 512)));
    assert!(msg.contains("not empty"), "{msg}");

    // Another k, another metric, other data.
    let msg = invalid_message(engine.graph_checkpointed(&x, 5, &m, &opts(&dir, true, 512)));
    assert!(
        msg.contains("different") && msg.contains("k 4 in checkpoint, 5 now"),
        "{msg}"
    );
    let msg = invalid_message(engine.graph_checkpointed(
        &x,
        4,
        &Metric::Cityblock,
        &opts(&dir, true, 512),
    ));
    assert!(msg.contains("metric euclidean in checkpoint"), "{msg}");
    let mut other = x.as_vectors().unwrap().as_f32().unwrap().to_vec();
    other[777] += 1.0;
    let y: Dataset = VectorSet::from_f32(1200, 6, other).unwrap().into();
    let msg = invalid_message(engine.graph_checkpointed(&y, 4, &m, &opts(&dir, true, 512)));
    assert!(msg.contains("data_crc32"), "{msg}");

    // One flipped byte anywhere in a pass file.
    let pass = dir.join("pass-0001.bin");
    let good = fs::read(&pass).unwrap();
    for at in [3, 40, good.len() / 2, good.len() - 1] {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        fs::write(&pass, &bad).unwrap();
        let msg = invalid_message(engine.graph_checkpointed(&x, 4, &m, &opts(&dir, true, 512)));
        assert!(
            msg.contains("pass-0001.bin") && msg.contains("corrupted"),
            "{msg}"
        );
    }
    // A truncated one.
    fs::write(&pass, &good[..good.len() - 9]).unwrap();
    let msg = invalid_message(engine.graph_checkpointed(&x, 4, &m, &opts(&dir, true, 512)));
    assert!(msg.contains("corrupted"), "{msg}");
    fs::write(&pass, &good).unwrap();

    // A pass file of another run with the same shape.
    let dir2 = tmp.path().join("c2");
    engine
        .graph_checkpointed(&y, 4, &m, &opts(&dir2, false, 512))
        .unwrap();
    fs::copy(dir2.join("pass-0001.bin"), &pass).unwrap();
    let msg = invalid_message(engine.graph_checkpointed(&x, 4, &m, &opts(&dir, true, 512)));
    assert!(msg.contains("another run"), "{msg}");
    fs::write(&pass, &good).unwrap();

    // A damaged manifest, and a directory that is not a checkpoint.
    let manifest = dir.join("manifest");
    let text = fs::read_to_string(&manifest).unwrap();
    fs::write(
        &manifest,
        text.replace("blocks_per_pass 1", "blocks_per_pass 2"),
    )
    .unwrap();
    let msg = invalid_message(engine.graph_checkpointed(&x, 4, &m, &opts(&dir, true, 512)));
    assert!(msg.contains("manifest is corrupted"), "{msg}");
    fs::write(&manifest, &text).unwrap();
    let plain = engine.graph(&x, 4, &m).unwrap();
    let ok = engine
        .graph_checkpointed(&x, 4, &m, &opts(&dir, true, 512))
        .unwrap();
    assert_same(&plain, &ok);

    let stranger = tmp.path().join("s");
    fs::create_dir(&stranger).unwrap();
    fs::write(stranger.join("notes.txt"), "hi").unwrap();
    let msg = invalid_message(engine.graph_checkpointed(&x, 4, &m, &opts(&stranger, true, 512)));
    assert!(msg.contains("no manifest"), "{msg}");

    // --resume on an empty or missing directory starts afresh.
    let fresh = tmp.path().join("fresh");
    let got = engine
        .graph_checkpointed(&x, 4, &m, &opts(&fresh, true, 512))
        .unwrap();
    assert_same(&plain, &got);
}

/// Distance evaluations of the passes `0..m` of 512 rows over `n` items: every pair with an
/// item of those rows.
fn evals_of_first_passes(n: u64, m: u64) -> u64 {
    let rest = n.saturating_sub(512 * m);
    n * (n - 1) / 2 - rest * rest.saturating_sub(1) / 2
}

fn with_stop(dir: &Path, resume: bool, stop_after: Option<usize>) -> CheckpointOptions {
    CheckpointOptions {
        stop_after,
        ..opts(dir, resume, 512)
    }
}

/// A build killed after half its distance evaluations resumes from the open rows' partial
/// lists with at most 60 % of them left (issue 14), byte-identical; without the partial file
/// (a checkpoint of an older version) it does the catch-up, byte-identical too.
#[test]
fn resumed_half_way_redoes_at_most_the_rest() {
    let engine = CpuEngine::default();
    let (n, k, m) = (16 * 512 - 100, 6, Metric::Euclidean);
    let x = data(5, n, 8);
    let plain = engine.graph(&x, k, &m).unwrap();
    let total = plain.stats.distance_evals;
    assert_eq!(total, (n * (n - 1) / 2) as u64);
    // The first pass count whose evaluations reach half of them.
    let stop = (1..16)
        .find(|&p| 2 * evals_of_first_passes(n as u64, p) >= total)
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("half");
    let err = engine
        .graph_checkpointed(&x, k, &m, &with_stop(&dir, false, Some(stop as usize)))
        .unwrap_err();
    assert!(err.to_string().contains("stopped after saving"), "{err}");
    assert!(dir.join("partial.bin").exists());
    let copy = tmp.path().join("old");
    fs::create_dir(&copy).unwrap();
    for f in fs::read_dir(&dir).unwrap() {
        let f = f.unwrap();
        fs::copy(f.path(), copy.join(f.file_name())).unwrap();
    }
    let resumed = engine
        .graph_checkpointed(&x, k, &m, &with_stop(&dir, true, None))
        .unwrap();
    assert_same(&plain, &resumed);
    let left = resumed.stats.distance_evals as f64 / total as f64;
    let done = evals_of_first_passes(n as u64, stop) as f64 / total as f64;
    eprintln!("stopped after {stop} of 16 passes ({done:.3} of the evaluations): resumed with {left:.3} left");
    assert!(left <= 0.6, "{left}");
    assert_eq!(
        resumed.stats.distance_evals,
        total - evals_of_first_passes(n as u64, stop)
    );

    // Without partial lists: the catch-up, then the same bytes.
    fs::remove_file(copy.join("partial.bin")).unwrap();
    let caught_up = engine
        .graph_checkpointed(&x, k, &m, &with_stop(&copy, true, None))
        .unwrap();
    assert_same(&plain, &caught_up);
    let again = caught_up.stats.distance_evals as f64 / total as f64;
    eprintln!("without partial lists: resumed with {again:.3} left");
    assert!(caught_up.stats.distance_evals > resumed.stats.distance_evals);
}

/// Partial lists that are damaged, truncated or of another run are refused with one line
/// naming the file; partial lists that miss a finished pass (a kill between the pass file and
/// the partial file) are completed by a catch-up of that pass.
#[test]
fn damaged_and_foreign_partial_lists_are_refused() {
    let engine = CpuEngine::default();
    let m = Metric::Euclidean;
    let x = data(12, 2000, 5);
    let plain = engine.graph(&x, 4, &m).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    engine
        .graph_checkpointed(&x, 4, &m, &with_stop(&dir, false, Some(2)))
        .unwrap_err();
    let partial = dir.join("partial.bin");
    let good = fs::read(&partial).unwrap();
    for at in [0, 9, 13, 30, good.len() / 2, good.len() - 1] {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        fs::write(&partial, &bad).unwrap();
        let msg = invalid_message(engine.graph_checkpointed(&x, 4, &m, &opts(&dir, true, 512)));
        assert!(
            msg.contains("partial.bin") && msg.contains("corrupted") && !msg.contains('\n'),
            "{msg}"
        );
    }
    for cut in [0, 10, good.len() - 5] {
        fs::write(&partial, &good[..cut]).unwrap();
        let msg = invalid_message(engine.graph_checkpointed(&x, 4, &m, &opts(&dir, true, 512)));
        assert!(
            msg.contains("partial.bin") && msg.contains("corrupted"),
            "{msg}"
        );
    }

    // The partial file of another run with the same shape.
    let mut other = x.as_vectors().unwrap().as_f32().unwrap().to_vec();
    other[99] += 1.0;
    let y: Dataset = VectorSet::from_f32(2000, 5, other).unwrap().into();
    let dir2 = tmp.path().join("c2");
    engine
        .graph_checkpointed(&y, 4, &m, &with_stop(&dir2, false, Some(2)))
        .unwrap_err();
    fs::copy(dir2.join("partial.bin"), &partial).unwrap();
    let msg = invalid_message(engine.graph_checkpointed(&x, 4, &m, &opts(&dir, true, 512)));
    assert!(
        msg.contains("partial.bin") && msg.contains("another run"),
        "{msg}"
    );

    // Older lists (saved with the first pass only) beside two finished passes: a catch-up of
    // the second one.
    let dir3 = tmp.path().join("c3");
    engine
        .graph_checkpointed(&x, 4, &m, &with_stop(&dir3, false, Some(1)))
        .unwrap_err();
    fs::copy(dir3.join("partial.bin"), &partial).unwrap();
    let got = engine
        .graph_checkpointed(&x, 4, &m, &opts(&dir, true, 512))
        .unwrap();
    assert_same(&plain, &got);

    // Lists that cover a pass whose file is gone are not used.
    let dir4 = tmp.path().join("c4");
    engine
        .graph_checkpointed(&x, 4, &m, &with_stop(&dir4, false, Some(2)))
        .unwrap_err();
    fs::remove_file(dir4.join("pass-0000.bin")).unwrap();
    let got = engine
        .graph_checkpointed(&x, 4, &m, &opts(&dir4, true, 512))
        .unwrap();
    assert_same(&plain, &got);
    assert_eq!(
        got.stats.distance_evals,
        plain.stats.distance_evals - {
            // Pairs within pass 1 (rows 512..1024) are the only ones not measured again.
            512 * 511 / 2
        }
    );
}

/// Partial lists with a valid checksum but an impossible entry (a neighbour out of range, the
/// row itself, a NaN key, a list out of order or longer than k) are refused: checksums catch
/// accidents, not forgeries.
#[test]
fn forged_partial_lists_are_refused() {
    let engine = CpuEngine::default();
    let m = Metric::Euclidean;
    let x = data(13, 1500, 4);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    engine
        .graph_checkpointed(&x, 3, &m, &with_stop(&dir, false, Some(1)))
        .unwrap_err();
    let partial = dir.join("partial.bin");
    let good = fs::read(&partial).unwrap();
    let word = |at: usize| u32::from_le_bytes(good[at..at + 4].try_into().unwrap()) as usize;
    // Header: magic, version, manifest CRC, passes, kind length (u32 each after the magic),
    // lists length (u64); then the kind, the pass flags and the lists: the first open row (512)
    // is its length, then (index, key) entries.
    let lists = 32 + word(20) + word(16);
    assert_eq!(word(lists), 3);
    let entry = lists + 4;
    let forge = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good[..good.len() - 4].to_vec();
        edit(&mut b);
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        fs::write(&partial, &b).unwrap();
        invalid_message(engine.graph_checkpointed(&x, 3, &m, &opts(&dir, true, 512)))
    };
    let put = |b: &mut Vec<u8>, at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
    for (what, edit) in [
        (
            "out of range",
            &(|b: &mut Vec<u8>| put(b, entry, &1500u32.to_le_bytes())) as &dyn Fn(&mut Vec<u8>),
        ),
        ("itself", &|b: &mut Vec<u8>| {
            put(b, entry, &512u32.to_le_bytes())
        }),
        ("NaN", &|b: &mut Vec<u8>| {
            put(b, entry + 4, &f64::NAN.to_le_bytes())
        }),
        ("order", &|b: &mut Vec<u8>| {
            put(b, entry + 4, &1e300f64.to_le_bytes())
        }),
        ("longer than k", &|b: &mut Vec<u8>| {
            put(b, lists, &4u32.to_le_bytes())
        }),
        ("pass flags", &|b: &mut Vec<u8>| b[32 + word(20)] = 7),
    ] {
        let msg = forge(edit);
        assert!(
            msg.contains("partial.bin") && !msg.contains('\n'),
            "{what}: {msg}"
        );
    }
    fs::write(&partial, &good).unwrap();
    let got = engine
        .graph_checkpointed(&x, 3, &m, &opts(&dir, true, 512))
        .unwrap();
    assert_same(&engine.graph(&x, 3, &m).unwrap(), &got);
}
