//! The fault corpus of issue 14: output targets that must not be replaced (non-regular files,
//! foreign companions, folders in the way), paths that cannot work, full disks, signals,
//! concurrent writers, a mapped input shrinking mid-run and forged checkpoint passes. Every case
//! checks the exit code of the README's table, exactly one error line naming the problem, no
//! temporary file left behind (`.voisin-*`) and every earlier file intact, byte for byte.

mod common;

use std::os::unix::fs::{symlink, FileTypeExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::faults::*;
use common::*;

/// Asserts a clean failure: `code`, one line holding every needle, nothing printed, and the
/// folder exactly as before.
fn expect_fail(s: &Scratch, args: &[&str], code: i32, needles: &[&str]) {
    let before = snapshot(s.dir.path());
    let out = s.run(args);
    check_fail(&out, args, code, needles);
    assert_eq!(snapshot(s.dir.path()), before, "files changed: {args:?}");
}

/// A folder with `base.fvecs` (30 x 4) and `q.fvecs` (5 x 4).
fn scratch() -> Scratch {
    let s = Scratch::new();
    s.raw("base.fvecs", &fvecs(&normal_rows(30, 4, 1)));
    s.raw("q.fvecs", &fvecs(&normal_rows(5, 4, 2)));
    s
}

/// The arguments of each result-writing command with `--out out`; range results in `.npy`
/// have a third file, so each kind of output is tried.
fn commands(out: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&[
            "knn",
            "--base",
            "base.fvecs",
            "--query",
            "q.fvecs",
            "-k",
            "3",
            "--out",
            out,
        ]),
        v(&["graph", "--input", "base.fvecs", "-k", "2", "--out", out]),
        v(&[
            "range",
            "--base",
            "base.fvecs",
            "--query",
            "q.fvecs",
            "--radius",
            "1",
            "--out",
            out,
        ]),
    ]
}

/// A graph of `base.fvecs` written to `out`, which must succeed.
fn graph_ok(s: &Scratch, k: &str, out: &str) {
    let r = s.run(&["graph", "--input", "base.fvecs", "-k", k, "--out", out]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
}

/// Arguments written as one line.
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// [`expect_fail`] for owned arguments.
fn fail_with(s: &Scratch, args: &[String], code: i32, needles: &[&str]) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    expect_fail(s, &args, code, needles);
}

fn each_command(out: &str, code: i32, needles: &[&str], setup: impl Fn(&Scratch)) {
    for args in commands(out) {
        let s = scratch();
        setup(&s);
        fail_with(&s, &args, code, needles);
    }
}

// --- targets that are not regular files: refused, never replaced (3 commands x 4 formats) ---

fn link_to_file(s: &Scratch, name: &str) {
    s.raw("real.bin", b"someone's data");
    symlink("real.bin", s.path(name)).unwrap();
}

#[test]
fn symlinked_targets_are_refused_for_every_format() {
    for out in ["r.tsv", "r.ivecs", "r.fvecs.ivecs"] {
        each_command(out, 2, &["symbolic link"], |s| link_to_file(s, out));
    }
    // The companion half of a pair is a link.
    each_command("r.ivecs", 2, &["r.fvecs", "symbolic link"], |s| {
        s.raw("r.ivecs", b"old");
        link_to_file(s, "r.fvecs");
    });
    each_command("r.npy", 2, &["r.distances.npy", "symbolic link"], |s| {
        s.raw("r.indices.npy", b"old");
        link_to_file(s, "r.distances.npy");
    });
}

#[test]
fn dangling_and_looping_links_are_refused() {
    each_command("r.tsv", 2, &["symbolic link"], |s| {
        symlink("nowhere/at/all", s.path("r.tsv")).unwrap();
    });
    each_command("r.tsv", 2, &["symbolic link"], |s| {
        symlink("b.tsv", s.path("r.tsv")).unwrap();
        symlink("r.tsv", s.path("b.tsv")).unwrap();
    });
    // A loop in a folder of the path: the path cannot be used (exit 2, not 1).
    each_command("loop/r.tsv", 2, &["loop/r.tsv: ", "symbolic links"], |s| {
        symlink("loop", s.path("loop")).unwrap();
    });
}

#[test]
fn fifos_sockets_and_folders_are_refused() {
    each_command("r.tsv", 2, &["FIFO"], |s| {
        let ok = Command::new("mkfifo")
            .arg(s.path("r.tsv"))
            .status()
            .unwrap();
        assert!(ok.success());
    });
    let mut keep = Vec::new();
    for args in commands("r.ivecs") {
        let s = scratch();
        s.raw("r.ivecs", b"old");
        keep.push(std::os::unix::net::UnixListener::bind(s.path("r.fvecs")).unwrap());
        fail_with(&s, &args, 2, &["r.fvecs", "socket"]);
    }
    each_command("r.tsv", 2, &["is a folder"], |s| {
        std::fs::create_dir(s.path("r.tsv")).unwrap();
    });
}

fn index_build(out: &str) -> Vec<String> {
    [
        "index",
        "build",
        "--input",
        "base.fvecs",
        "--kind",
        "lc",
        "--out",
        out,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `index build` has no extension check: the commit's own refusal must hold.
fn build_index_into(s: &Scratch, out: &str) {
    fail_with(
        s,
        &index_build(out),
        2,
        &[&format!("{out}: "), "character device"],
    );
}

/// A character device like /dev/null at `path`; false where that needs root.
fn mknod(path: &Path) -> bool {
    Command::new("mknod")
        .arg(path)
        .args(["c", "1", "3"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|st| st.success())
}

#[test]
fn device_nodes_are_refused_and_kept() {
    // Results are refused by extension first; either way the node is left alone.
    each_command("/dev/null", 2, &["/dev/null: "], |_| {});
    let s = scratch();
    build_index_into(&s, "/dev/null");
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
    // Nodes made in the scratch folder, where the test may (as root) create them.
    let made = mknod(&s.path("node.vidx"));
    if !made {
        eprintln!("skipped: mknod needs root");
        return;
    }
    build_index_into(&s, "node.vidx");
    std::fs::rename(s.path("node.vidx"), s.path("node.ivecs")).unwrap();
    each_command("node.ivecs", 2, &["character device"], |t| {
        assert!(mknod(&t.path("node.ivecs")));
    });
    let meta = std::fs::symlink_metadata(s.path("node.ivecs")).unwrap();
    assert!(meta.file_type().is_char_device());
}

// --- files voisin does not own ---

#[test]
fn a_foreign_companion_is_never_replaced() {
    each_command(
        "precious.ivecs",
        2,
        &["precious.fvecs: ", "not part of an earlier result"],
        |s| {
            s.raw("precious.fvecs", b"precious");
        },
    );
    each_command(
        "r.npy",
        2,
        &["r.distances.npy: ", "not part of an earlier result"],
        |s| {
            s.raw("r.distances.npy", b"precious");
        },
    );
    let s = scratch();
    s.raw("r.offsets.npy", b"precious");
    let range = &commands("r.npy")[2];
    fail_with(
        &s,
        range,
        2,
        &["r.offsets.npy: ", "not part of an earlier result"],
    );
}

/// Issue 14's first repro: the companion turned into a folder; the earlier result stays.
#[test]
fn a_companion_in_the_way_keeps_the_previous_result() {
    for (out, companion) in [
        ("g.ivecs", "g.fvecs"),
        ("g.npy", "g.distances.npy"),
        ("g.npy", "g.indices.npy"),
    ] {
        let s = scratch();
        graph_ok(&s, "3", out);
        std::fs::remove_file(s.path(companion)).unwrap();
        std::fs::create_dir(s.path(companion)).unwrap();
        expect_fail(
            &s,
            &["graph", "--input", "base.fvecs", "-k", "2", "--out", out],
            2,
            &[companion, "is a folder"],
        );
    }
}

#[test]
fn an_earlier_result_is_replaced_whole() {
    for out in ["g.ivecs", "g.npy", "g.tsv"] {
        let s = scratch();
        for k in ["3", "2"] {
            graph_ok(&s, k, out);
        }
        assert!(temporaries(s.dir.path()).is_empty());
        if out == "g.ivecs" {
            // Rows of k = 2 in both halves: 4 + 2·4 bytes each.
            let len = 30 * 12;
            assert_eq!(std::fs::read(s.path("g.ivecs")).unwrap().len(), len);
            assert_eq!(std::fs::read(s.path("g.fvecs")).unwrap().len(), len);
        }
    }
}

#[cfg(unix)]
#[test]
fn results_honour_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let s = scratch();
    graph_ok(&s, "2", "g.ivecs");
    // SAFETY: reads the umask by setting it and putting it back at once.
    let umask = unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    };
    let mode = std::fs::metadata(s.path("g.ivecs"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o666 & !umask);
}

// --- paths that cannot work, found before the computation ---

#[test]
fn unusable_output_names_exit_2_before_any_work() {
    let long = format!("{}.tsv", "x".repeat(300));
    each_command(&long, 2, &["too long"], |_| {});
    each_command("r.tsv/", 2, &["ends in '/'"], |_| {});
    let long_dir = format!("{}/r.tsv", "d".repeat(300));
    each_command(&long_dir, 2, &["name too long"], |_| {});
    each_command("base.fvecs/r.tsv", 2, &["is not a folder"], |_| {});
    each_command("/proc/r.tsv", 2, &["cannot write in folder /proc"], |_| {});
}

#[test]
fn unusable_input_paths_exit_2() {
    let s = scratch();
    symlink("loop.fvecs", s.path("loop.fvecs")).unwrap();
    expect_fail(
        &s,
        &["graph", "--input", "loop.fvecs", "-k", "2"],
        2,
        &["loop.fvecs: "],
    );
    let long = format!("{}.fvecs", "x".repeat(300));
    expect_fail(&s, &["graph", "--input", &long, "-k", "2"], 2, &[&long]);
}

#[test]
fn unusable_checkpoint_folders_exit_2() {
    let s = scratch();
    let ck = |dir: &str| -> Vec<String> {
        [
            "graph",
            "--input",
            "base.fvecs",
            "-k",
            "2",
            "--checkpoint",
            dir,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let long = "c".repeat(300);
    symlink("cloop", s.path("cloop")).unwrap();
    for (dir, needle) in [
        ("base.fvecs", "base.fvecs: "),
        ("/proc/ck", "/proc/ck: "),
        ("cloop", "cloop: "),
        (long.as_str(), "too long"),
        ("base.fvecs/ck", "base.fvecs/ck: "),
    ] {
        let args = ck(dir);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        expect_fail(&s, &args, 2, &[needle]);
    }
}

#[test]
fn too_many_threads_is_refused() {
    let s = scratch();
    for n in ["100000", "1025"] {
        expect_fail(
            &s,
            &["graph", "--input", "base.fvecs", "-k", "2", "--threads", n],
            2,
            &["--threads", "1024"],
        );
    }
}

// --- a full disk: exit 1 for every command, the earlier result intact ---

#[test]
fn a_full_disk_is_exit_1_for_every_command() {
    let mut all = commands("r.ivecs");
    all.extend(commands("r.npy"));
    all.push(index_build("i.vidx"));
    for args in all {
        let s = scratch();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ok = s.run(&args);
        assert_eq!(ok.status.code(), Some(0), "{args:?}: {}", stderr(&ok));
        let before = snapshot(s.dir.path());
        let out = run_limited(&s, 8, &args);
        check_fail(&out, &args, 1, &["File too large"]);
        assert_eq!(snapshot(s.dir.path()), before, "{args:?}");
    }
}

#[test]
fn a_full_tmpfs_is_exit_1() {
    let s = scratch();
    let mnt = s.path("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8k", "tmpfs"])
        .arg(&mnt)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|st| st.success());
    if !mounted {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    s.raw("big.fvecs", &fvecs(&normal_rows(3000, 4, 3)));
    let out = s.run(&[
        "graph",
        "--input",
        "big.fvecs",
        "-k",
        "5",
        "--out",
        "small/g.ivecs",
    ]);
    let left = snapshot(&mnt);
    let _ = Command::new("umount").arg(&mnt).status();
    check_fail(&out, &["graph"], 1, &["small/g."]);
    assert!(left.is_empty(), "left {left:?}");
}

// --- signals ---

#[test]
fn sigterm_and_sigint_remove_temporaries_and_exit_128_plus_signal() {
    for (sig, code) in [
        (libc::SIGTERM, 143),
        (libc::SIGINT, 130),
        (libc::SIGHUP, 129),
    ] {
        let s = scratch();
        s.raw("big.fvecs", &fvecs(&normal_rows(12000, 64, 4)));
        graph_ok(&s, "2", "g.ivecs");
        let before = snapshot(s.dir.path());
        let args = words("graph --input big.fvecs -k 10 --out g.ivecs");
        let out = killed(&s, &[&args[..], &["--threads", "1"]].concat(), 300, sig);
        if out.status.code() == Some(0) {
            eprintln!("skipped: the run ended before the signal");
            continue;
        }
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
        assert_eq!(snapshot(s.dir.path()), before);
    }
}

#[test]
fn a_killed_checkpoint_run_leaves_no_temporaries() {
    let s = scratch();
    s.raw("big.fvecs", &fvecs(&normal_rows(15000, 32, 5)));
    let args =
        words("graph --input big.fvecs -k 5 --checkpoint ck --checkpoint-rows 512 --threads 1");
    let out = killed(&s, &args, 700, libc::SIGTERM);
    if out.status.code() == Some(0) {
        eprintln!("skipped: the run ended before the signal");
        return;
    }
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(
        temporaries(s.dir.path()).is_empty(),
        "{:?}",
        temporaries(s.dir.path())
    );
}

// --- concurrent writers and checkpoint users ---

#[test]
fn concurrent_writers_never_mix_their_files() {
    let s = scratch();
    s.raw("mid.fvecs", &fvecs(&normal_rows(1500, 16, 6)));
    for _ in 0..4 {
        let a = spawn(
            &s,
            &[
                "graph",
                "--input",
                "mid.fvecs",
                "-k",
                "3",
                "--out",
                "c.ivecs",
            ],
        );
        let b = spawn(
            &s,
            &[
                "graph",
                "--input",
                "mid.fvecs",
                "-k",
                "4",
                "--out",
                "c.ivecs",
            ],
        );
        for child in [a, b] {
            let out = child.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        }
        let ids = std::fs::read(s.path("c.ivecs")).unwrap();
        let ds = std::fs::read(s.path("c.fvecs")).unwrap();
        assert_eq!(
            ids.len(),
            ds.len(),
            "indices of one run, distances of the other"
        );
        assert_eq!(ids[..4], ds[..4]);
        assert!(temporaries(s.dir.path()).is_empty());
    }
}

#[test]
fn a_checkpoint_folder_in_use_is_refused() {
    let s = scratch();
    std::fs::create_dir(s.path("ck")).unwrap();
    let lock = voisin::commit::try_lock_folder(&s.path("ck"))
        .unwrap()
        .unwrap();
    for extra in [&[][..], &["--resume"][..]] {
        let mut args = vec![
            "graph",
            "--input",
            "base.fvecs",
            "-k",
            "2",
            "--checkpoint",
            "ck",
        ];
        args.extend_from_slice(extra);
        expect_fail(&s, &args, 2, &["ck: ", "in use by another voisin run"]);
    }
    drop(lock);
    let ok = s.run(&[
        "graph",
        "--input",
        "base.fvecs",
        "-k",
        "2",
        "--checkpoint",
        "ck",
    ]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
}

// --- a mapped input shrinking during the run ---

#[test]
fn a_truncated_mapped_input_is_one_error_line() {
    let s = scratch();
    let rows = normal_rows(20000, 32, 7);
    s.raw("big.fbin", &fbin(&rows));
    let mut child = spawn(
        &s,
        &["graph", "--input", "big.fbin", "-k", "10", "--threads", "1"],
    );
    let t = Instant::now();
    wait_until_mapped(&mut child, &s.path("big.fbin"));
    std::thread::sleep(Duration::from_millis(400));
    std::fs::OpenOptions::new()
        .write(true)
        .open(s.path("big.fbin"))
        .unwrap()
        .set_len(8)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.code() == Some(0) {
        eprintln!("skipped: the run ended within {:?}", t.elapsed());
        return;
    }
    check_fail(
        &out,
        &["graph"],
        2,
        &["big.fbin: ", "memory-mapped input shrank"],
    );
}

// --- forged checkpoint passes with a valid checksum ---

#[test]
fn forged_checkpoint_passes_are_refused() {
    const HEADER: usize = 44;
    let s = scratch();
    s.raw("mid.fvecs", &fvecs(&normal_rows(1100, 4, 8)));
    let ck = words("graph --input mid.fvecs -k 2 --checkpoint ck --checkpoint-rows 512");
    let stopped = s.run(&[&ck[..], &["--stop-after-passes", "1"]].concat());
    assert_eq!(stopped.status.code(), Some(1), "{}", stderr(&stopped));
    let pass = s.path("ck/pass-0000.bin");
    let good = std::fs::read(&pass).unwrap();
    let ids = HEADER;
    let keys = HEADER + 512 * 2 * 4;
    let forgeries: [(usize, Vec<u8>); 5] = [
        (ids, 0xFFFF_FFFFu32.to_le_bytes().to_vec()),
        (ids, 1100u32.to_le_bytes().to_vec()),
        (ids + 4, 5000u32.to_le_bytes().to_vec()),
        (keys, f64::NAN.to_le_bytes().to_vec()),
        (keys, 1e300f64.to_le_bytes().to_vec()),
    ];
    for (at, bytes) in forgeries {
        let mut forged = good.clone();
        forged[at..at + bytes.len()].copy_from_slice(&bytes);
        let n = forged.len();
        let crc = crc32(&forged[..n - 4]);
        forged[n - 4..].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&pass, &forged).unwrap();
        expect_fail(
            &s,
            &[&ck[..], &["--resume"]].concat(),
            2,
            &["pass-0000.bin: ", "corrupted"],
        );
    }
    std::fs::write(&pass, &good).unwrap();
    let resumed = s.run(&[&ck[..], &["--resume"]].concat());
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
}
