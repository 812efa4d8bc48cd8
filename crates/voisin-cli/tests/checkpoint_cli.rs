//! `voisin graph --checkpoint DIR [--resume]`: a build killed with SIGKILL at random points and
//! resumed writes the same bytes as an uninterrupted build; misuse and bad checkpoints end in
//! one error line and exit code 2.

mod common;

use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{stderr, Scratch};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

/// .fbin: n and dim (u32), then the rows as f32.
fn fbin(n: usize, dim: usize, seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut b = Vec::with_capacity(8 + n * dim * 4);
    b.extend((n as u32).to_le_bytes());
    b.extend((dim as u32).to_le_bytes());
    for _ in 0..n * dim {
        let x: f32 = StandardNormal.sample(&mut rng);
        b.extend(x.to_le_bytes());
    }
    b
}

fn pass_count(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.starts_with("pass-") && name.ends_with(".bin")
                })
                .count()
        })
        .unwrap_or(0)
}

/// About a second per build with optimised tests on two cores, in 30 passes.
const N: usize = 30_000;
const PASS_ROWS: usize = 1024;

#[test]
fn killed_builds_resume_to_the_same_bytes() {
    let s = Scratch::new();
    let input = s.raw("x.fbin", &fbin(N, 32, 5));
    let plain = s.run(&[
        "graph",
        "--input",
        &input,
        "-k",
        "9",
        "--out",
        "plain.tsv",
        "--device",
        "cpu",
    ]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let expected = std::fs::read(s.path("plain.tsv")).unwrap();
    let passes = N.div_ceil(PASS_ROWS);
    let pass_rows = PASS_ROWS.to_string();

    let mut rng = StdRng::seed_from_u64(2026);
    let mut killed_midway = 0;
    for trial in 0..3 {
        let dir = format!("ckpt{trial}");
        let out = format!("resumed{trial}.tsv");
        let args = [
            "graph",
            "--input",
            &input,
            "-k",
            "9",
            "--out",
            &out,
            "--threads",
            "2",
            "--checkpoint",
            &dir,
            "--checkpoint-rows",
            &pass_rows,
        ];
        let mut child = Command::new(env!("CARGO_BIN_EXE_voisin"))
            .args(args)
            .current_dir(s.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill once at least one pass is saved, right away in the first trial and after a
        // random share of the remaining passes in the others.
        let wait_for = if trial == 0 {
            1
        } else {
            rng.gen_range(1..passes)
        };
        let start = Instant::now();
        while pass_count(&s.path(&dir)) < wait_for && start.elapsed() < Duration::from_secs(120) {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            sleep(Duration::from_millis(2));
        }
        child.kill().ok();
        child.wait().unwrap();
        let saved = pass_count(&s.path(&dir));
        eprintln!("trial {trial}: killed with {saved} of {passes} passes saved");
        assert!(saved >= 1, "trial {trial}: no pass saved before the kill");
        if saved < passes {
            killed_midway += 1;
        }

        let resumed = s.run(&[&args[..], &["--resume"]].concat());
        assert!(resumed.status.success(), "{}", stderr(&resumed));
        assert_eq!(pass_count(&s.path(&dir)), passes);
        let got = std::fs::read(s.path(&out)).unwrap();
        assert!(
            got == expected,
            "trial {trial}: resumed output differs from an uninterrupted run"
        );
    }
    assert!(killed_midway > 0, "no build was interrupted before its end");
}

#[test]
fn bad_checkpoints_and_misuse_are_one_line_exit_2() {
    let s = Scratch::new();
    let input = s.raw("x.fbin", &fbin(1100, 4, 9));
    let base = [
        "graph",
        "--input",
        &input,
        "--out",
        "g.tsv",
        "--checkpoint",
        "c",
    ];
    let run = |extra: &[&str]| s.run(&[&base[..], extra].concat());
    let first = run(&["-k", "3", "--checkpoint-rows", "512"]);
    assert!(first.status.success(), "{}", stderr(&first));

    let expect_error = |extra: &[&str], needle: &str| {
        let out = run(extra);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.starts_with("voisin: error: ") && err.contains(needle),
            "{err}"
        );
    };
    expect_error(&["-k", "3"], "not empty");
    expect_error(&["-k", "4", "--resume"], "different input/metric/k");
    expect_error(
        &["-k", "3", "--resume", "--metric", "cosine"],
        "metric euclidean in checkpoint, cosine now",
    );
    if !voisin_cuda::gpu_available() {
        // The GPU builds checkpoints too; without one, --device cuda is a device error.
        let out = run(&["-k", "3", "--resume", "--device", "cuda"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.starts_with("voisin: error: cuda"), "{err}");
    }

    let pass = s.path("c/pass-0001.bin");
    let mut bytes = std::fs::read(&pass).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&pass, &bytes).unwrap();
    expect_error(
        &["-k", "3", "--resume"],
        "pass-0001.bin: checkpoint pass file is corrupted",
    );

    // --resume needs --checkpoint.
    let out = s.run(&["graph", "--input", &input, "-k", "3", "--resume"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// The hidden --stop-after-passes stops a build as a kill would (exit 1, the passes saved so
/// far kept); --resume then ends with the bytes of an uninterrupted build, on any device.
#[test]
fn stopped_builds_resume_to_the_same_bytes() {
    let s = Scratch::new();
    let input = s.raw("x.fbin", &fbin(2600, 7, 11));
    let graph = |extra: &[&str]| {
        let base = ["graph", "--input", &input, "-k", "5", "--device", "cpu"];
        s.run(&[&base[..], extra].concat())
    };
    let plain = graph(&["--out", "plain.tsv"]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let expected = std::fs::read(s.path("plain.tsv")).unwrap();
    let ck = [
        "--checkpoint",
        "c",
        "--checkpoint-rows",
        "512",
        "--out",
        "g.tsv",
    ];
    let stopped = graph(&[&ck[..], &["--stop-after-passes", "2"]].concat());
    let err = stderr(&stopped);
    assert_eq!(stopped.status.code(), Some(1), "{err}");
    assert!(err.contains("stopped after saving 2 passes"), "{err}");
    assert_eq!(pass_count(&s.path("c")), 2);
    assert!(
        !s.path("g.tsv").exists(),
        "a stopped build wrote its output"
    );
    let again = graph(&[&ck[..], &["--resume", "--stop-after-passes", "1"]].concat());
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert_eq!(pass_count(&s.path("c")), 3);
    let resumed = graph(&[&ck[..], &["--resume"]].concat());
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert_eq!(pass_count(&s.path("c")), 2600usize.div_ceil(512));
    assert!(std::fs::read(s.path("g.tsv")).unwrap() == expected);
}
