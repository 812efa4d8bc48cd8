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
