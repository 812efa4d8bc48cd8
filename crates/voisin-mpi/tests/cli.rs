//! The `voisin-mpi` binary end to end: result files compared byte for byte with the reference's
//! result written by the same writer. With the `mpi` feature every case runs under
//! `mpirun -np 1, 2, 3` (skipped, saying so, when mpirun is not installed; CI installs it);
//! without it the binary runs as one process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rand::{rngs::StdRng, Rng, SeedableRng};
use voisin::{reference, Dataset, Engine, KnnResult, Metric, VectorSet};

const BIN: &str = env!("CARGO_BIN_EXE_voisin-mpi");

/// Small integer coordinates, so distances tie often, plus one duplicated vector.
fn tied(n: usize, dim: usize, seed: u64) -> VectorSet {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut v: Vec<f32> = (0..n * dim).map(|_| rng.gen_range(-2..3) as f32).collect();
    let (a, b) = v.split_at_mut(dim);
    b[..dim].copy_from_slice(a);
    VectorSet::from_f32(n, dim, v).unwrap()
}

/// How to launch the binary: directly, or under mpirun with `n` ranks.
fn launchers() -> Vec<Option<usize>> {
    if !cfg!(feature = "mpi") {
        return vec![None];
    }
    let have = Command::new("mpirun").arg("--version").output().is_ok();
    if !have {
        eprintln!("SKIPPED: mpirun not found; install openmpi-bin to run the MPI cases");
        return vec![None];
    }
    vec![Some(1), Some(2), Some(3)]
}

fn launch(ranks: Option<usize>, args: &[&str]) -> Output {
    let mut cmd = match ranks {
        None => Command::new(BIN),
        Some(n) => {
            let mut c = Command::new("mpirun");
            c.args(["--oversubscribe", "-np", &n.to_string(), BIN])
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            c
        }
    };
    cmd.args(args).args(["--threads", "1"]).output().unwrap()
}

/// The files a result name stands for (`x.npy` is written as two arrays).
fn result_files(out: &Path) -> Vec<PathBuf> {
    if out.extension().is_some_and(|e| e == "npy") {
        ["indices", "distances"]
            .iter()
            .map(|p| out.with_extension(format!("{p}.npy")))
            .collect()
    } else if out.extension().is_some_and(|e| e == "ivecs") {
        vec![out.to_path_buf(), out.with_extension("fvecs")]
    } else {
        vec![out.to_path_buf()]
    }
}

fn assert_same_files(expected: &KnnResult, got_out: &Path, dir: &Path, what: &str) {
    let ext = got_out.extension().unwrap().to_str().unwrap();
    let want = dir.join(format!("expected.{ext}"));
    voisin_io::write_knn(&want, expected).unwrap();
    for (w, g) in result_files(&want).iter().zip(result_files(got_out)) {
        let (w, g) = (std::fs::read(w).unwrap(), std::fs::read(&g).unwrap());
        assert!(
            w == g,
            "{what}: {} differs from the reference",
            got_out.display()
        );
    }
}

fn check_ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: {:?}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn graph_and_knn_match_the_reference_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let n = 29;
    let data = tied(n, 3, 7);
    let queries = tied(11, 3, 8);
    let (input, qpath) = (dir.path().join("data.fbin"), dir.path().join("q.fvecs"));
    voisin_io::write_vectors(&input, &data).unwrap();
    voisin_io::write_vectors(&qpath, &queries).unwrap();
    let (data, queries): (Dataset, Dataset) = (data.into(), queries.into());
    let exts = ["tsv", "ivecs", "npy"];
    for ranks in launchers() {
        for (mi, metric) in [Metric::Euclidean, Metric::Cityblock].iter().enumerate() {
            for (ki, k) in [1, 10, n - 1].into_iter().enumerate() {
                let ext = exts[(mi + ki) % exts.len()];
                let what = format!("{metric} k {k} ranks {ranks:?}");
                let out = dir.path().join(format!("graph.{ext}"));
                let ks = k.to_string();
                let m = metric.to_string();
                let o = launch(
                    ranks,
                    &[
                        "graph",
                        "--input",
                        input.to_str().unwrap(),
                        "-k",
                        &ks,
                        "--metric",
                        &m,
                        "--out",
                        out.to_str().unwrap(),
                    ],
                );
                check_ok(&o, &format!("graph {what}"));
                let expected = reference::graph(&data, k, metric).unwrap();
                assert_same_files(&expected, &out, dir.path(), &format!("graph {what}"));

                let out = dir.path().join(format!("knn.{ext}"));
                let o = launch(
                    ranks,
                    &[
                        "knn",
                        "--base",
                        input.to_str().unwrap(),
                        "--query",
                        qpath.to_str().unwrap(),
                        "-k",
                        &ks,
                        "--metric",
                        &m,
                        "--out",
                        out.to_str().unwrap(),
                    ],
                );
                check_ok(&o, &format!("knn {what}"));
                let expected = reference::knn(&data, &queries, k, metric).unwrap();
                assert_same_files(&expected, &out, dir.path(), &format!("knn {what}"));
            }
        }
    }
}

/// `knn --engine`: a metric index built over each rank's shard (through the engine factory's
/// index engine) answers byte for byte as the reference, for every index, auto and brute force,
/// over tied vectors (duplicates, k = n - 1) and words; a non-metric refuses a fixed index.
#[test]
fn knn_with_an_index_over_each_shard_matches_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let n = 60;
    let data: Dataset = tied(n, 2, 9).into();
    let queries: Dataset = tied(7, 2, 10).into();
    let input = dir.path().join("base.fbin");
    let qpath = dir.path().join("q.fbin");
    voisin_io::write_vectors(&input, data.as_vectors().unwrap()).unwrap();
    voisin_io::write_vectors(&qpath, queries.as_vectors().unwrap()).unwrap();
    let words = [
        "cat", "cart", "dog", "cot", "cat", "coat", "dig", "dot", "a", "at",
    ];
    let wpath = dir.path().join("w.txt");
    std::fs::write(&wpath, words.join("\n") + "\n").unwrap();
    let wdata: Dataset = voisin::StringSet::from_strings(words).unwrap().into();
    let sets = [
        (&input, &qpath, &data, &queries, Metric::Euclidean),
        (&input, &qpath, &data, &queries, Metric::Cityblock),
        (&wpath, &wpath, &wdata, &wdata, Metric::Levenshtein),
    ];
    for ranks in launchers() {
        for (base, q, bdata, qdata, metric) in &sets {
            for engine in ["lc", "sss", "cover", "kd", "auto", "brute"] {
                if engine == "kd" && *metric == Metric::Levenshtein {
                    continue;
                }
                for k in [1, 5, bdata.len() - 1] {
                    let what = format!("{engine} {metric} k {k} ranks {ranks:?}");
                    let out = dir.path().join("knn.tsv");
                    let (ks, m) = (k.to_string(), metric.to_string());
                    let o = launch(
                        ranks,
                        &[
                            "knn",
                            "--base",
                            base.to_str().unwrap(),
                            "--query",
                            q.to_str().unwrap(),
                            "-k",
                            &ks,
                            "--metric",
                            &m,
                            "--engine",
                            engine,
                            "--out",
                            out.to_str().unwrap(),
                        ],
                    );
                    check_ok(&o, &what);
                    let expected = reference::knn(bdata, qdata, k, metric).unwrap();
                    assert_same_files(&expected, &out, dir.path(), &what);
                }
            }
        }
        let out = dir.path().join("bad.tsv");
        let o = launch(
            ranks,
            &[
                "knn",
                "--base",
                input.to_str().unwrap(),
                "--query",
                qpath.to_str().unwrap(),
                "-k",
                "2",
                "--metric",
                "cosine",
                "--engine",
                "lc",
                "--out",
                out.to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("triangle inequality"), "{err}");
        assert!(!out.exists());
    }
}

#[test]
fn bad_input_is_one_line_from_rank_zero_and_exit_2_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.fbin");
    let empty = dir.path().join("empty.fvecs");
    std::fs::write(&empty, b"").unwrap();
    let good = dir.path().join("good.fbin");
    voisin_io::write_vectors(&good, &tied(5, 2, 1)).unwrap();
    let q3 = dir.path().join("q3.fbin");
    voisin_io::write_vectors(&q3, &tied(5, 3, 1)).unwrap();
    let out = dir.path().join("r.tsv");
    let out = out.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "graph",
                "--input",
                missing.to_str().unwrap(),
                "-k",
                "2",
                "--out",
                out,
            ],
            "missing.fbin",
        ),
        (
            vec![
                "graph",
                "--input",
                empty.to_str().unwrap(),
                "-k",
                "2",
                "--out",
                out,
            ],
            "empty.fvecs",
        ),
        (
            vec![
                "graph",
                "--input",
                good.to_str().unwrap(),
                "-k",
                "0",
                "--out",
                out,
            ],
            "k must be",
        ),
        (
            vec![
                "graph",
                "--input",
                good.to_str().unwrap(),
                "-k",
                "2",
                "--out",
                "r.csv",
            ],
            "r.csv",
        ),
        (
            vec![
                "graph",
                "--input",
                good.to_str().unwrap(),
                "-k",
                "2",
                "--metric",
                "levenshtein",
                "--out",
                out,
            ],
            "levenshtein",
        ),
        (
            vec![
                "graph",
                "--input",
                good.to_str().unwrap(),
                "-k",
                "2",
                "--device",
                "cuda",
                "--metric",
                "levenshtein",
                "--out",
                out,
            ],
            "--device cuda takes vectors",
        ),
        (
            vec![
                "knn",
                "--base",
                good.to_str().unwrap(),
                "--query",
                q3.to_str().unwrap(),
                "-k",
                "2",
                "--out",
                out,
            ],
            "q3.fbin",
        ),
    ];
    for ranks in launchers() {
        for (args, needle) in &cases {
            let o = launch(ranks, args);
            let err = String::from_utf8_lossy(&o.stderr);
            let lines: Vec<&str> = err
                .lines()
                .filter(|l| l.contains("voisin-mpi: error"))
                .collect();
            assert_eq!(lines.len(), 1, "{args:?} ranks {ranks:?}: stderr {err}");
            assert!(lines[0].contains(needle), "{args:?}: {}", lines[0]);
            assert_eq!(o.status.code(), Some(2), "{args:?} ranks {ranks:?}: {err}");
        }
    }
    assert!(!Path::new(out).exists());
}

/// Without a GPU (or without the `cuda` feature) `--device cuda` is a device failure: exit 1 on
/// every rank, rank 0's line naming the cause, no output file.
#[test]
fn gpu_ranks_without_a_gpu_fail_with_exit_1() {
    if cfg!(feature = "cuda") && has_gpu() {
        eprintln!("SKIPPED: a GPU is present (scripts/gpu-check mpi covers GPU ranks)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.fbin");
    voisin_io::write_vectors(&good, &tied(50, 3, 2)).unwrap();
    let out = dir.path().join("r.tsv");
    let args = [
        "graph",
        "--input",
        good.to_str().unwrap(),
        "-k",
        "3",
        "--device",
        "cuda",
        "--out",
        out.to_str().unwrap(),
    ];
    for ranks in launchers() {
        let o = launch(ranks, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "ranks {ranks:?}: {err}");
        // Ranks write their lines at once, so they may interleave: look for rank 0's words.
        let cause = if cfg!(feature = "cuda") {
            "cuda"
        } else {
            "without the `cuda` feature"
        };
        assert!(
            err.contains("voisin-mpi: error: ") && err.contains(cause),
            "ranks {ranks:?}: {err}"
        );
        assert!(!out.exists());
    }
}

/// Whether CUDA loads here and sees a device (only known with the `cuda` feature).
fn has_gpu() -> bool {
    #[cfg(feature = "cuda")]
    {
        voisin_cuda::gpu_available()
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
    }
}

fn pass_count(dir: &Path) -> usize {
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

/// Processes whose parent is `pid` (the ranks mpirun started: Open MPI puts each in its own
/// session, so killing mpirun or its process group would leave them running).
fn children(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces, so split after its ')'.
        let after = &stat[stat.rfind(')').unwrap_or(0) + 1..];
        if after.split_whitespace().nth(1) == Some(&pid.to_string()) {
            out.push(name);
        }
    }
    out
}

/// A checkpointed build killed (every rank, SIGKILL) at a random point and resumed, with
/// another rank count too, writes the bytes the single-process CPU engine writes; damaged
/// checkpoints and misuse end in one error line and exit code 2.
#[test]
fn killed_mpi_builds_resume_to_the_same_bytes() {
    if launchers() == [None] {
        eprintln!("SKIPPED: needs the mpi feature and mpirun");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // About two seconds per build under two ranks with optimised tests, in 16 blocks.
    let (n, dim, k) = (20_000, 32, 9);
    let mut rng = StdRng::seed_from_u64(4);
    let values: Vec<f32> = (0..n * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let data = VectorSet::from_f32(n, dim, values).unwrap();
    let input = dir.path().join("x.fbin");
    voisin_io::write_vectors(&input, &data).unwrap();
    let data: Dataset = data.into();
    let expected = voisin::cpu::CpuEngine::default()
        .graph(&data, k, &Metric::Euclidean)
        .unwrap();
    let blocks = voisin_mpi::graph::CHECKPOINT_ROUNDS;

    let mut killed_midway = 0;
    for (trial, resume_ranks) in [(0, 3), (1, 2)] {
        let ckpt = dir.path().join(format!("ckpt{trial}"));
        let out = dir.path().join(format!("g{trial}.tsv"));
        let args = [
            "graph",
            "--input",
            input.to_str().unwrap(),
            "-k",
            "9",
            "--out",
            out.to_str().unwrap(),
            "--checkpoint",
            ckpt.to_str().unwrap(),
        ];
        let mut child = Command::new("mpirun")
            .args(["--oversubscribe", "-np", "2", BIN])
            .args(args)
            .args(["--threads", "1"])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let wait_for = rng.gen_range(1..blocks);
        let start = std::time::Instant::now();
        while pass_count(&ckpt) < wait_for
            && start.elapsed() < std::time::Duration::from_secs(120)
            && child.try_wait().unwrap().is_none()
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let ranks = children(child.id());
        if !ranks.is_empty() {
            Command::new("kill")
                .arg("-KILL")
                .args(&ranks)
                .status()
                .unwrap();
        }
        child.wait().unwrap();
        let saved = pass_count(&ckpt);
        eprintln!("trial {trial}: killed with {saved} of {blocks} blocks saved");
        if saved < blocks {
            killed_midway += 1;
        }
        let o = launch(Some(resume_ranks), &[&args[..], &["--resume"]].concat());
        check_ok(&o, &format!("resume of trial {trial}"));
        assert_eq!(pass_count(&ckpt), blocks);
        assert_same_files(&expected, &out, dir.path(), &format!("trial {trial}"));
    }
    assert!(killed_midway > 0, "no build was interrupted before its end");

    // Misuse and damage, under two ranks: one line, exit 2.
    let ckpt = dir.path().join("ckpt0");
    let out = dir.path().join("e.tsv");
    let base = [
        "graph",
        "--input",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--checkpoint",
        ckpt.to_str().unwrap(),
    ];
    let pass = ckpt.join("pass-0003.bin");
    let mut bytes = std::fs::read(&pass).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&pass, &bytes).unwrap();
    for (extra, needle) in [
        (&["-k", "9"][..], "not empty"),
        (&["-k", "8", "--resume"][..], "k 9 in checkpoint, 8 now"),
        (
            &["-k", "9", "--resume"][..],
            "pass-0003.bin: checkpoint pass file is corrupted",
        ),
    ] {
        let o = launch(Some(2), &[&base[..], extra].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("voisin-mpi: error"))
            .collect();
        assert_eq!(lines.len(), 1, "{extra:?}: {err}");
        assert!(lines[0].contains(needle), "{extra:?}: {}", lines[0]);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
    }
    assert!(!out.exists());
}

/// Issue 40 on MPI: the files of a run are checked as `voisin` checks them, before any work (an
/// output that is an input, or that lies in the checkpoint folder, is refused: exit 2, the
/// input byte-identical), and a metric declared by an HDF5 input is the run's.
#[test]
fn outputs_over_inputs_are_refused_and_declared_metrics_used() {
    let dir = tempfile::tempdir().unwrap();
    let at = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    std::fs::write(at("data.tsv"), "0.5\t1\n2\t3\n4.5\t5\n6\t7.25\n").unwrap();
    voisin_io::write_vectors(Path::new(&at("d.fbin")), &tied(30, 3, 5)).unwrap();
    std::fs::create_dir(at("ck")).unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../voisin-io/tests/data/angular.hdf5");
    let angular = fixture.to_str().unwrap();
    let refused: [(Vec<String>, &str); 2] = [
        (
            [
                "graph",
                "--input",
                &at("data.tsv"),
                "-k",
                "2",
                "--out",
                &at("data.tsv"),
            ]
            .map(String::from)
            .to_vec(),
            "is an input",
        ),
        (
            [
                "graph",
                "--input",
                &at("d.fbin"),
                "-k",
                "2",
                "--checkpoint",
                &at("ck"),
                "--out",
                &at("ck/g.ivecs"),
            ]
            .map(String::from)
            .to_vec(),
            "inside the checkpoint folder",
        ),
    ];
    let before = std::fs::read(at("data.tsv")).unwrap();
    for ranks in launchers() {
        for (args, words) in &refused {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = launch(ranks, &args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{args:?} ranks {ranks:?}: {err}");
            assert!(err.contains(words), "{args:?} ranks {ranks:?}: {err}");
            assert_eq!(std::fs::read(at("data.tsv")).unwrap(), before);
            assert_eq!(std::fs::read_dir(at("ck")).unwrap().count(), 0);
        }
        let out = at("nn.tsv");
        let o = launch(
            ranks,
            &[
                "knn", "--base", angular, "--query", angular, "-k", "3", "--out", &out,
            ],
        );
        check_ok(&o, "knn over an angular HDF5 file");
        let read = |role| {
            let opts = voisin_io::ReadOptions {
                role,
                ..Default::default()
            };
            voisin_io::read_dataset(&fixture, &opts).unwrap()
        };
        let (train, test) = (read(voisin_io::Role::Base), read(voisin_io::Role::Query));
        let expected = reference::knn(&train, &test, 3, &Metric::Cosine).unwrap();
        assert_same_files(&expected, Path::new(&out), dir.path(), "angular knn");
    }
}
