//! Helpers of the fault tests (faults.rs, fault_corpus.rs): folder snapshots, the one-line
//! failure check, runs under a file size limit, runs ended by a signal, and CRC-32 to reseal
//! forged files.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use super::{stderr, stdout, Scratch};

/// Every file of a folder (recursively one level: entries of sub-folders too) with its bytes
/// (`None` for what is not a regular file), to compare before and after a failed run.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut all = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let t = e.file_type().unwrap();
        all.insert(
            name.clone(),
            t.is_file().then(|| std::fs::read(e.path()).unwrap()),
        );
        if t.is_dir() {
            for (sub, bytes) in snapshot(&e.path()) {
                all.insert(format!("{name}/{sub}"), bytes);
            }
        }
    }
    all
}

pub fn temporaries(dir: &Path) -> Vec<String> {
    snapshot(dir)
        .into_keys()
        .filter(|n| n.contains(".voisin-"))
        .collect()
}

pub fn check_fail(out: &Output, args: &[&str], code: i32, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err:?}");
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(err.starts_with("voisin: error: "), "{err:?}");
    for n in needles {
        assert!(err.contains(n), "{err:?} does not say {n:?}");
    }
    assert!(!err.contains("panicked"), "{err:?}");
    assert!(out.stdout.is_empty(), "printed results: {}", stdout(out));
}

/// Runs voisin under a file size limit (RLIMIT_FSIZE), which fails writes the way a full disk
/// does; voisin ignores SIGXFSZ so the write reports the error.
pub fn run_limited(s: &Scratch, bytes: u64, args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_voisin"));
    cmd.args(args).current_dir(s.dir.path());
    // SAFETY: setrlimit is async-signal-safe and touches only the child about to exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().expect("voisin runs")
}

pub fn spawn(s: &Scratch, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_voisin"))
        .args(args)
        .current_dir(s.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs voisin, sends `sig` after `ms` milliseconds, and waits for it.
pub fn killed(s: &Scratch, args: &[&str], ms: u64, sig: i32) -> Output {
    let child = spawn(s, args);
    std::thread::sleep(Duration::from_millis(ms));
    // SAFETY: signals a child this test started and has not reaped.
    unsafe { libc::kill(child.id() as i32, sig) };
    child.wait_with_output().unwrap()
}

pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Waits (up to 60 s) until `child` has `file` memory-mapped (Linux: its `/proc/PID/maps`), or
/// has ended; elsewhere returns at once.
pub fn wait_until_mapped(child: &mut std::process::Child, file: &Path) {
    let maps = format!("/proc/{}/maps", child.id());
    let Ok(file) = file.canonicalize() else {
        return;
    };
    let file = file.to_string_lossy().into_owned();
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        match std::fs::read_to_string(&maps) {
            Ok(m) if m.contains(&file) => return,
            Ok(_) if child.try_wait().ok().flatten().is_none() => {
                std::thread::sleep(Duration::from_millis(5))
            }
            _ => return,
        }
    }
}
