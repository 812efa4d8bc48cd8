//! The second fault and bad-input corpus of issue 14, one table of cases run by one function.
//!
//! Inventory of the classes: cases in faults.rs (and the crate tests named) before this
//! file, and the cases this file adds.
//!
//! | class | before (faults.rs) | here |
//! |---|---|---|
//! | 1 multi-file outputs replaced or lost | 6 (a companion in the way, replaced whole) + commit/io unit tests | 4 (range offsets a folder, a companion name too long, .csr.npz and .npz targets that are folders) |
//! | 2 targets not owned: devices, links, FIFOs, sockets, foreign companions | 48, all as outputs | 23 (device nodes as input, queries, index, index build input, checkpoint, .npz output; FIFOs as input, queries, index, .npz and index outputs; links: index and .csr.npz outputs, range offsets, dangling input, looping index; links to folders as an output, an .npy companion and an index output; and four that must work: outputs and a checkpoint folder through links to folders, an input through a link) |
//! | 3 concurrent writers, two resumes | 1 (.ivecs, 4 rounds) + 2 (checkpoint in use) | 5 (.npy, range .npy, index files, two new checkpoints, two resumes) |
//! | 4 minkowski:P of large P | 0 | 6 (orders below 1, infinite, tiny; range and two index kinds under huge orders; graph) + a test below; voisin tests/minkowski_orders.rs (3 tests) |
//! | 5 mapped input truncated (SIGBUS) | 1 | 5 (knn and range bases, a checkpointed graph, an .npy input; an index build, which copies its items, must work) |
//! | 6 signals leave temporaries | 4 (graph mid-compute, checkpoint) | 10 (knn, range, two index builds (SIGHUP, SIGTERM beside an earlier index), three checkpointed graphs (SIGINT, SIGTERM early and late); .tsv, .npz, .npy mid-write) |
//! | 7 exit codes: names, paths through files, read-only places, full disks | 30 | 32 (names and paths of index files and queries 8, read-only mounts 7, full tmpfs under 9 outputs, file size limit under 3 formats; garbage or nothing on standard input 5) |
//! | 8 forged files under a valid checksum | 5 checkpoint passes (+ LC unit test) | 19 (LC, SSS (2), cover (2), k-d tree (a NaN item) index files; npy, npz, fvecs, fbin, bvecs, hdf5 cut (3: in half, one byte, before its data), npz and Parquet cut in half, parquet footer, hdf5 external link) + voisin-index tests/forged.rs, voisin-io tests/hdf5_links.rs |
//! | 9 smaller: threads, umask, long lines, hdf5 soft links, resume race | 3 | 4 (a 1 MiB line under levenshtein, a 200 KiB line of another alphabet, HDF5 soft links in both group formats) + voisin-io tests/hdf5_links.rs, voisin cpu/items.rs |
//! | 10 a resume redoes most of the work | checkpoint_cli.rs (kills, stops) | 5 in [`resumes_redo_little_and_end_the_same`] (stopped after a quarter, half, three quarters; SIGKILL and SIGTERM after half): same bytes, at most 60 % of the evaluations once half the passes are saved |
//!
//! 108 cases in all (the table below), run by [`run_case`].
//!
//! Each case: the documented exit code (README's table), exactly one error line naming the file
//! and no panic text, nothing on standard output, no temporary file (`.voisin-*`) left in the
//! folder, and every earlier file byte-identical. Cases that need root (mount, mknod) print a
//! reason and pass where they cannot run.

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::faults::*;
use common::*;

/// What a case runs and how.
#[derive(Clone, Copy)]
enum How {
    /// The arguments, once.
    Plain,
    /// Under a file size limit of this many bytes.
    Limited(u64),
    /// Signal `sig` after `ms` milliseconds (mid-compute).
    SignalAfter(i32, u64),
    /// Signal `sig` as soon as a temporary output file holds bytes (mid-write).
    SignalWhileWriting(i32),
    /// These arguments and `other` at the same time, to the same outputs.
    Together(&'static str),
    /// The arguments, once, with these bytes on standard input.
    Stdin(&'static [u8]),
    /// The file cut to 8 bytes `ms` milliseconds into the run (a mapped input shrinking).
    ShrinkAfter(&'static str, u64),
}

/// What must come of it.
#[derive(Clone, Copy)]
enum Expect {
    /// The exit code and words of the one error line; the folder unchanged.
    Fail(i32, &'static [&'static str]),
    /// Success, and these files exist afterwards.
    Ok(&'static [&'static str]),
    /// Either of the two: a cut that may fall while the input is read or after it was.
    OkOrFail(&'static [&'static str], i32, &'static [&'static str]),
    /// Ended by the signal of [`How`]; the folder unchanged.
    Signalled,
    /// Both runs of [`How::Together`] succeed, or one is refused with this line, and the
    /// outputs equal those of one of the two runs made alone.
    OneWins(&'static [&'static str]),
}

struct Case {
    name: &'static str,
    /// Prepares the folder; `false` when the environment cannot (printed as skipped).
    setup: fn(&Env) -> bool,
    args: &'static str,
    how: How,
    expect: Expect,
    /// Paths (prefixes) a failed run may add: checkpoint passes written before the fault.
    may_add: &'static str,
}

/// A case's folder and the mounts to undo before it is removed.
struct Env {
    s: Scratch,
    mounts: std::cell::RefCell<Vec<PathBuf>>,
}

impl Drop for Env {
    fn drop(&mut self) {
        for m in self.mounts.borrow().iter().rev() {
            let _ = Command::new("umount").arg(m).status();
        }
    }
}

impl Env {
    fn new() -> Env {
        let s = Scratch::new();
        s.raw("base.fvecs", &fvecs(&normal_rows(30, 4, 1)));
        s.raw("q.fvecs", &fvecs(&normal_rows(5, 4, 2)));
        Env {
            s,
            mounts: Default::default(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.s.path(name)
    }

    /// Runs voisin, which must succeed (making an earlier result).
    fn ok(&self, args: &str) {
        let out = self.s.run(&words(args));
        assert_eq!(out.status.code(), Some(0), "{args}: {}", stderr(&out));
    }

    /// A tmpfs at `name` with mount options `opts`; false where mounting needs root.
    fn mount(&self, name: &str, opts: &str) -> bool {
        let dir = self.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(&dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|st| st.success());
        if ok {
            self.mounts.borrow_mut().push(dir);
        }
        ok
    }

    /// A small tmpfs at `small/` (64 KiB) holding an earlier graph result in `out`.
    fn full_disk_with(&self, out: &str) -> bool {
        if !self.mount("small", "size=64k") {
            return false;
        }
        self.s.raw("big.fvecs", &fvecs(&normal_rows(3000, 4, 3)));
        if out.ends_with(".vidx") {
            self.ok(&format!(
                "index build --input base.fvecs --kind lc --out small/{out}"
            ));
        } else if !out.is_empty() {
            self.ok(&format!("graph --input base.fvecs -k 1 --out small/{out}"));
        }
        true
    }

    /// A read-only tmpfs at `ro/`.
    fn read_only(&self) -> bool {
        self.mount("ro", "ro,size=16k")
    }

    /// A device node (`/dev/zero`'s numbers) at `name`; false where that needs root.
    fn node(&self, name: &str) -> bool {
        Command::new("mknod")
            .arg(self.path(name))
            .args(["c", "1", "5"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|st| st.success())
    }

    fn fifo(&self, name: &str) -> bool {
        Command::new("mkfifo")
            .arg(self.path(name))
            .status()
            .is_ok_and(|st| st.success())
    }

    /// A FIFO whose writer (a thread, waiting for the reader) sends `bytes` and closes it.
    fn fifo_sending(&self, name: &str, bytes: &'static [u8]) -> bool {
        if !self.fifo(name) {
            return false;
        }
        let path = self.path(name);
        std::thread::spawn(move || std::fs::write(path, bytes));
        true
    }

    fn link(&self, target: &str, name: &str) -> bool {
        symlink(target, self.path(name)).is_ok()
    }

    /// Builds an index of `base.fvecs` and changes the f64 at `at(len)` of the file to `value`,
    /// with the checksum made valid again.
    fn forged_index(&self, kind: &str, at: fn(usize) -> usize, value: f64) -> bool {
        self.ok(&format!(
            "index build --input base.fvecs --kind {kind} --out i.vidx"
        ));
        let mut v = std::fs::read(self.path("i.vidx")).unwrap();
        let o = at(v.len());
        v[o..o + 8].copy_from_slice(&value.to_le_bytes());
        reseal(&mut v);
        self.s.raw("i.vidx", &v);
        true
    }

    /// A copy of one of voisin-io's test files with `edit` applied.
    fn fixture(&self, name: &str, as_name: &str, edit: fn(&mut Vec<u8>)) -> bool {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../voisin-io/tests/data");
        let mut v = std::fs::read(dir.join(name)).unwrap();
        edit(&mut v);
        self.s.raw(as_name, &v);
        true
    }
}

/// Recomputes the trailing CRC-32 of a voisin file.
fn reseal(v: &mut [u8]) {
    let n = v.len();
    let crc = crc32(&v[..n - 4]);
    v[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Where the structure of a `base.fvecs` (30 x 4, euclidean) index starts.
fn structure_start() -> usize {
    8 + 4 + 1 + 1 + 4 + "euclidean".len() + 8 + 8 + 30 * 4 * 4
}

/// Signals and the exit codes they give.
const TERM: i32 = libc::SIGTERM;
const INT: i32 = libc::SIGINT;
const HUP: i32 = libc::SIGHUP;

const FULL: &[&str] = &["No space left on device", "small/"];
const RO: &[&str] = &["ro/", "Read-only file system"];
const DEVICE: &[&str] = &["zero.", "character device"];
const SHRUNK: &[&str] = &["big.fbin: ", "memory-mapped input shrank"];

fn nothing(_: &Env) -> bool {
    true
}

/// An input big enough that a graph or knn runs for a second or more on one thread.
fn slow_input(e: &Env) -> bool {
    e.s.raw("big.fvecs", &fvecs(&normal_rows(12000, 64, 4)));
    e.ok("graph --input base.fvecs -k 2 --out g.ivecs");
    true
}

/// A memory-mapped input (.fbin) big enough that a graph or knn runs a second or more on one
/// thread, and an earlier result.
fn mapped_input(e: &Env) -> bool {
    e.s.raw("big.fbin", &fbin(&normal_rows(12000, 64, 4)));
    e.ok("graph --input base.fvecs -k 2 --out g.ivecs");
    true
}

/// An input whose result files take a while to write.
fn wide_output(e: &Env) -> bool {
    e.s.raw("mid.fvecs", &fvecs(&normal_rows(4000, 4, 6)));
    e.ok("graph --input base.fvecs -k 2 --out g.tsv");
    e.ok("graph --input base.fvecs -k 2 --out g.npz");
    e.ok("graph --input base.fvecs -k 2 --out g.npy");
    true
}

fn concurrent_input(e: &Env) -> bool {
    e.s.raw("mid.fvecs", &fvecs(&normal_rows(1500, 16, 7)));
    true
}

/// A case run once that must fail with `code` and an error line holding `needles`.
const fn fails(
    name: &'static str,
    setup: fn(&Env) -> bool,
    args: &'static str,
    code: i32,
    needles: &'static [&'static str],
) -> Case {
    Case {
        name,
        setup,
        args,
        how: How::Plain,
        expect: Expect::Fail(code, needles),
        may_add: "",
    }
}

/// A case run once with `bytes` on standard input that must fail with `code` and `needles`.
const fn fails_reading(
    name: &'static str,
    bytes: &'static [u8],
    args: &'static str,
    needles: &'static [&'static str],
) -> Case {
    Case {
        name,
        setup: nothing,
        args,
        how: How::Stdin(bytes),
        expect: Expect::Fail(2, needles),
        may_add: "",
    }
}

/// A folder `real` and a link to it at `name`.
fn linked_folder(e: &Env, name: &str) -> bool {
    std::fs::create_dir(e.path("real")).is_ok() && e.link("real", name)
}

/// A case run once that must succeed and write `files`.
const fn works(
    name: &'static str,
    setup: fn(&Env) -> bool,
    args: &'static str,
    files: &'static [&'static str],
) -> Case {
    Case {
        name,
        setup,
        args,
        how: How::Plain,
        expect: Expect::Ok(files),
        may_add: "",
    }
}

const CASES: &[Case] = &[
    // --- class 1: multi-file outputs ---
    fails(
        "range .npy whose offsets companion became a folder keeps the earlier result",
        |e| {
        e.ok("range --base base.fvecs --query q.fvecs --radius 1 --out r.npy");
        std::fs::remove_file(e.path("r.offsets.npy")).unwrap();
        std::fs::create_dir(e.path("r.offsets.npy")).unwrap();
        true
    },
        "range --base base.fvecs --query q.fvecs --radius 2 --out r.npy",
        2, &["r.offsets.npy", "is a folder"],
    ),
    fails(
        "a companion name too long for the file system",
        nothing,
        "graph --input base.fvecs -k 2 --out xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.npy",
        2, &[".indices.npy", "too long"],
    ),
    fails(
        "a .csr.npz target that is a folder",
        |e| std::fs::create_dir(e.path("g.csr.npz")).is_ok(),
        "graph --input base.fvecs -k 2 --out g.csr.npz",
        2, &["g.csr.npz", "is a folder"],
    ),
    fails(
        "a knn .npz target that is a folder with an earlier result beside it",
        |e| {
        e.ok("knn --base base.fvecs --query q.fvecs -k 2 --out r.npy");
        std::fs::create_dir(e.path("r.npz")).is_ok()
    },
        "knn --base base.fvecs --query q.fvecs -k 3 --out r.npz",
        2, &["r.npz", "is a folder"],
    ),
    // --- class 2: device nodes, FIFOs, links, read and written ---
    fails(
        "an input that is a character device",
        |e| e.node("zero.fvecs"),
        "graph --input zero.fvecs -k 2",
        2, DEVICE,
    ),
    fails(
        "queries that are a character device",
        |e| e.node("zero.fvecs"),
        "knn --base base.fvecs --query zero.fvecs -k 2",
        2, DEVICE,
    ),
    fails(
        "an index that is a character device",
        |e| e.node("zero.vidx"),
        "index query --index zero.vidx --query q.fvecs -k 2",
        2, DEVICE,
    ),
    fails(
        "an index built from a character device",
        |e| e.node("zero.fvecs"),
        "index build --input zero.fvecs --kind lc --out i.vidx",
        2, DEVICE,
    ),
    fails(
        "a checkpoint folder that is a character device",
        |e| e.node("zero.ck"),
        "graph --input base.fvecs -k 2 --checkpoint zero.ck",
        2, &["zero.ck"],
    ),
    fails(
        "an .npz output that is a character device",
        |e| e.node("zero.npz"),
        "graph --input base.fvecs -k 2 --out zero.npz",
        2, DEVICE,
    ),
    fails(
        "an input FIFO whose writer sends nothing",
        |e| e.fifo_sending("f.fvecs", b""),
        "graph --input f.fvecs -k 2",
        2, &["f.fvecs"],
    ),
    fails(
        "a query FIFO whose writer sends a cut row",
        |e| e.fifo_sending("f.fvecs", b"\x04\x00\x00\x00\x00\x00\x80\x3f"),
        "knn --base base.fvecs --query f.fvecs -k 2",
        2, &["f.fvecs"],
    ),
    fails(
        "an index FIFO whose writer sends no index",
        |e| e.fifo_sending("f.vidx", b"VOISINIX but not really"),
        "index query --index f.vidx --query q.fvecs -k 2",
        2, &["f.vidx"],
    ),
    fails(
        "an .npz output that is a FIFO",
        |e| e.fifo("f.npz"),
        "graph --input base.fvecs -k 2 --out f.npz",
        2, &["f.npz", "FIFO"],
    ),
    fails(
        "an index output that is a FIFO",
        |e| e.fifo("f.vidx"),
        "index build --input base.fvecs --kind sss --out f.vidx",
        2, &["f.vidx", "FIFO"],
    ),
    fails(
        "an index output that is a link to an earlier index",
        |e| {
        e.ok("index build --input base.fvecs --kind lc --out real.vidx");
        e.link("real.vidx", "l.vidx")
    },
        "index build --input base.fvecs --kind cover --out l.vidx",
        2, &["l.vidx", "symbolic link"],
    ),
    fails(
        "a .csr.npz output that is a link",
        |e| {
        e.s.raw("real", b"someone's data");
        e.link("real", "g.csr.npz")
    },
        "graph --input base.fvecs -k 2 --out g.csr.npz",
        2, &["g.csr.npz", "symbolic link"],
    ),
    fails(
        "a range offsets companion that is a link",
        |e| {
        e.ok("range --base base.fvecs --query q.fvecs --radius 1 --out r.npy");
        std::fs::remove_file(e.path("r.offsets.npy")).unwrap();
        e.s.raw("real", b"someone's data");
        e.link("real", "r.offsets.npy")
    },
        "range --base base.fvecs --query q.fvecs --radius 2 --out r.npy",
        2, &["r.offsets.npy", "symbolic link"],
    ),
    fails(
        "a dangling link as input",
        |e| e.link("gone.fvecs", "l.fvecs"),
        "graph --input l.fvecs -k 2",
        2, &["l.fvecs", "No such file"],
    ),
    fails(
        "an index path in a link loop",
        |e| e.link("loop.vidx", "loop.vidx"),
        "index query --index loop.vidx --query q.fvecs -k 2",
        2, &["loop.vidx"],
    ),
    works(
        "an output through a linked folder is written (the rule is about the target)",
        |e| {
        std::fs::create_dir(e.path("real")).unwrap();
        e.link("real", "via")
    },
        "graph --input base.fvecs -k 2 --out via/g.ivecs",
        &["real/g.ivecs", "real/g.fvecs"],
    ),
    works(
        "an input through a link is read",
        |e| e.link("base.fvecs", "l.fvecs"),
        "graph --input l.fvecs -k 2 --out g.npy",
        &["g.indices.npy", "g.distances.npy"],
    ),
    fails(
        "an output that is a link to a folder",
        |e| linked_folder(e, "g.ivecs"),
        "graph --input base.fvecs -k 2 --out g.ivecs",
        2, &["g.ivecs", "symbolic link"],
    ),
    fails(
        "an .npy companion that is a link to a folder, beside an earlier result",
        |e| {
        e.ok("graph --input base.fvecs -k 2 --out g.npy");
        std::fs::remove_file(e.path("g.distances.npy")).unwrap();
        linked_folder(e, "g.distances.npy")
    },
        "graph --input base.fvecs -k 3 --out g.npy",
        2, &["g.distances.npy", "symbolic link"],
    ),
    fails(
        "an index output that is a link to a folder",
        |e| linked_folder(e, "i.vidx"),
        "index build --input base.fvecs --kind lc --out i.vidx",
        2, &["i.vidx", "symbolic link"],
    ),
    works(
        "a checkpoint folder through a link to a folder is used",
        |e| linked_folder(e, "ckl"),
        "graph --input base.fvecs -k 2 --checkpoint ckl --out c.ivecs",
        &["c.ivecs", "real/manifest"],
    ),
    works(
        "an output through two links to a folder is written",
        |e| linked_folder(e, "a") && e.link("a", "b"),
        "graph --input base.fvecs -k 2 --out b/g.npy",
        &["real/g.indices.npy", "real/g.distances.npy"],
    ),
    // --- class 7: paths that cannot work, read-only places, full disks ---
    fails(
        "an index output name too long",
        nothing,
        "index build --input base.fvecs --kind lc --out iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii.vidx",
        2, &["iiii", "too long"],
    ),
    fails(
        "an index name too long",
        nothing,
        "index query --index iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii.vidx --query q.fvecs -k 2",
        2, &["iiii", "too long"],
    ),
    fails(
        "a query name too long",
        nothing,
        "knn --base base.fvecs -k 2 --query qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq.fvecs",
        2, &["qqqq", "too long"],
    ),
    fails(
        "an input path through a file",
        nothing,
        "graph --input base.fvecs/x.fvecs -k 2",
        2, &["base.fvecs/x.fvecs", "Not a directory"],
    ),
    fails(
        "an index output path through a file",
        nothing,
        "index build --input base.fvecs --kind lc --out base.fvecs/i.vidx",
        2, &["base.fvecs/i.vidx", "is not a folder"],
    ),
    fails(
        "an index path through a file",
        nothing,
        "index query --index base.fvecs/i.vidx --query q.fvecs -k 2",
        2, &["base.fvecs/i.vidx"],
    ),
    fails(
        "an index output ending in '/'",
        nothing,
        "index build --input base.fvecs --kind lc --out i.vidx/",
        2, &["i.vidx/", "ends in '/'"],
    ),
    fails(
        "an index output in a missing folder",
        nothing,
        "index build --input base.fvecs --kind lc --out nowhere/i.vidx",
        2, &["nowhere/i.vidx", "does not exist"],
    ),
    fails(
        "knn into a read-only file system",
        Env::read_only,
        "knn --base base.fvecs --query q.fvecs -k 2 --out ro/r.ivecs",
        2, RO,
    ),
    fails(
        "graph .npy into a read-only file system",
        Env::read_only,
        "graph --input base.fvecs -k 2 --out ro/g.npy",
        2, RO,
    ),
    fails(
        "range .tsv into a read-only file system",
        Env::read_only,
        "range --base base.fvecs --query q.fvecs --radius 1 --out ro/r.tsv",
        2, RO,
    ),
    fails(
        "an index into a read-only file system",
        Env::read_only,
        "index build --input base.fvecs --kind lc --out ro/i.vidx",
        2, RO,
    ),
    fails(
        "graph .csr.npz into a read-only file system",
        Env::read_only,
        "graph --input base.fvecs -k 2 --out ro/g.csr.npz",
        2, RO,
    ),
    fails(
        "knn .npz into a read-only file system",
        Env::read_only,
        "knn --base base.fvecs --query q.fvecs -k 2 --out ro/r.npz",
        2, RO,
    ),
    fails(
        "a checkpoint folder on a read-only file system",
        Env::read_only,
        "graph --input base.fvecs -k 2 --checkpoint ro/ck",
        2, RO,
    ),
    fails(
        "a full disk under graph .ivecs",
        |e| e.full_disk_with("g.ivecs"),
        "graph --input big.fvecs -k 5 --out small/g.ivecs",
        1, FULL,
    ),
    fails(
        "a full disk under graph .npy",
        |e| e.full_disk_with("g.npy"),
        "graph --input big.fvecs -k 5 --out small/g.npy",
        1, FULL,
    ),
    fails(
        "a full disk under graph .npz",
        |e| e.full_disk_with("g.npz"),
        "graph --input big.fvecs -k 5 --out small/g.npz",
        1, FULL,
    ),
    fails(
        "a full disk under graph .csr.npz",
        |e| e.full_disk_with("g.csr.npz"),
        "graph --input big.fvecs -k 5 --out small/g.csr.npz",
        1, FULL,
    ),
    fails(
        "a full disk under graph .tsv",
        |e| e.full_disk_with("g.tsv"),
        "graph --input big.fvecs -k 5 --out small/g.tsv",
        1, FULL,
    ),
    fails(
        "a full disk under knn .ivecs",
        |e| e.full_disk_with("g.ivecs"),
        "knn --base big.fvecs --query big.fvecs -k 5 --out small/g.ivecs",
        1, FULL,
    ),
    fails(
        "a full disk under range .npy (three files)",
        |e| e.full_disk_with("g.npy"),
        "range --base big.fvecs --query big.fvecs --radius 0.5 --out small/r.npy",
        1, FULL,
    ),
    fails(
        "a full disk under index build",
        |e| e.full_disk_with("i.vidx"),
        "index build --input big.fvecs --kind lc --out small/i.vidx",
        1, FULL,
    ),
    Case {
        name: "a full disk under checkpoint passes",
        setup: |e| e.full_disk_with(""),
        args: "graph --input big.fvecs -k 5 --checkpoint small/ck --checkpoint-rows 1024",
        how: How::Plain,
        expect: Expect::Fail(1, FULL),
        may_add: "small/ck",
    },
    Case {
        name: "a file size limit under .npz",
        setup: |e| {
            e.ok("graph --input base.fvecs -k 2 --out g.npz");
            true
        },
        args: "graph --input base.fvecs -k 3 --out g.npz",
        how: How::Limited(64),
        expect: Expect::Fail(1, &["g.npz", "File too large"]),
        may_add: "",
    },
    Case {
        name: "a file size limit under .csr.npz",
        setup: |e| {
            e.ok("graph --input base.fvecs -k 2 --out g.csr.npz");
            true
        },
        args: "graph --input base.fvecs -k 3 --out g.csr.npz",
        how: How::Limited(64),
        expect: Expect::Fail(1, &["g.csr.npz", "File too large"]),
        may_add: "",
    },
    Case {
        name: "a file size limit under .tsv",
        setup: |e| {
            e.ok("graph --input base.fvecs -k 2 --out g.tsv");
            true
        },
        args: "graph --input base.fvecs -k 3 --out g.tsv",
        how: How::Limited(64),
        expect: Expect::Fail(1, &["g.tsv", "File too large"]),
        may_add: "",
    },
    // --- class 6: signals mid-compute and mid-write ---
    Case {
        name: "SIGTERM during knn",
        setup: slow_input,
        args: "knn --base big.fvecs --query big.fvecs -k 10 --threads 1 --out g.ivecs",
        how: How::SignalAfter(TERM, 300),
        expect: Expect::Signalled,
        may_add: "",
    },
    Case {
        name: "SIGINT during range",
        setup: slow_input,
        args: "range --base big.fvecs --query big.fvecs --radius 3 --threads 1 --out r.npy",
        how: How::SignalAfter(INT, 300),
        expect: Expect::Signalled,
        may_add: "",
    },
    Case {
        name: "SIGHUP during index build",
        setup: slow_input,
        args: "index build --input big.fvecs --kind cover --threads 1 --out g.vidx",
        how: How::SignalAfter(HUP, 300),
        expect: Expect::Signalled,
        may_add: "",
    },
    Case {
        name: "SIGINT during a checkpointed graph",
        setup: slow_input,
        args: "graph --input big.fvecs -k 5 --threads 1 --checkpoint ck --checkpoint-rows 512",
        how: How::SignalAfter(INT, 500),
        expect: Expect::Signalled,
        may_add: "ck",
    },
    Case {
        name: "SIGTERM during index build, beside an earlier index",
        setup: |e| {
            slow_input(e);
            e.ok("index build --input base.fvecs --kind lc --out g.vidx");
            true
        },
        args: "index build --input big.fvecs --kind cover --threads 1 --out g.vidx",
        how: How::SignalAfter(TERM, 500),
        expect: Expect::Signalled,
        may_add: "",
    },
    Case {
        name: "SIGTERM early in a checkpointed graph",
        setup: slow_input,
        args: "graph --input big.fvecs -k 5 --threads 1 --checkpoint ck --checkpoint-rows 512",
        how: How::SignalAfter(TERM, 250),
        expect: Expect::Signalled,
        may_add: "ck",
    },
    Case {
        name: "SIGTERM late in a checkpointed graph, between pass saves",
        setup: slow_input,
        args: "graph --input big.fvecs -k 5 --threads 1 --checkpoint ck --checkpoint-rows 512",
        how: How::SignalAfter(TERM, 450),
        expect: Expect::Signalled,
        may_add: "ck",
    },
    Case {
        name: "SIGTERM while a .tsv is written",
        setup: wide_output,
        args: "graph --input mid.fvecs -k 40 --out g.tsv",
        how: How::SignalWhileWriting(TERM),
        expect: Expect::Signalled,
        may_add: "",
    },
    Case {
        name: "SIGINT while an .npz is written",
        setup: wide_output,
        args: "graph --input mid.fvecs -k 40 --out g.npz",
        how: How::SignalWhileWriting(INT),
        expect: Expect::Signalled,
        may_add: "",
    },
    Case {
        name: "SIGHUP while .npy files are written",
        setup: wide_output,
        args: "graph --input mid.fvecs -k 40 --out g.npy",
        how: How::SignalWhileWriting(HUP),
        expect: Expect::Signalled,
        may_add: "",
    },
    // --- class 5: a memory-mapped input cut during the run (.fbin and .npy are mapped;
    // .fvecs rows are parsed into memory) ---
    Case {
        name: "the base of a knn cut during the run",
        setup: mapped_input,
        args: "knn --base big.fbin --query big.fbin -k 10 --threads 1 --out g.ivecs",
        how: How::ShrinkAfter("big.fbin", 300),
        expect: Expect::Fail(2, SHRUNK),
        may_add: "",
    },
    Case {
        name: "the base of a range search cut during the run",
        setup: mapped_input,
        args: "range --base big.fbin --query big.fbin --radius 3 --threads 1 --out r.npy",
        how: How::ShrinkAfter("big.fbin", 300),
        expect: Expect::Fail(2, SHRUNK),
        may_add: "",
    },
    Case {
        // Cut after the items were read the index is of the whole input; cut while they are
        // read, the one error line.
        name: "the input of an index build cut during the build",
        setup: mapped_input,
        args: "index build --input big.fbin --kind cover --threads 1 --out g.vidx",
        how: How::ShrinkAfter("big.fbin", 300),
        expect: Expect::OkOrFail(&["g.vidx"], 2, SHRUNK),
        may_add: "",
    },
    Case {
        name: "the input of a checkpointed graph cut during the run",
        setup: mapped_input,
        args: "graph --input big.fbin -k 5 --threads 1 --checkpoint ck --checkpoint-rows 512",
        how: How::ShrinkAfter("big.fbin", 400),
        expect: Expect::Fail(2, SHRUNK),
        may_add: "ck",
    },
    Case {
        name: "an .npy input cut during a graph",
        setup: |e| {
            // Large enough that the cut falls in the tiles, not in the output's write and
            // fsync after the last read (which may rightly succeed, as a loaded machine showed).
            e.s.raw("big.npy", &npy_f32(&normal_rows(30000, 64, 4)));
            e.ok("graph --input base.fvecs -k 2 --out g.ivecs");
            true
        },
        args: "graph --input big.npy -k 5 --threads 1 --out g.ivecs",
        how: How::ShrinkAfter("big.npy", 300),
        expect: Expect::Fail(2, &["big.npy: ", "memory-mapped input shrank"]),
        may_add: "",
    },
    // --- class 3: concurrent writers ---
    Case {
        name: "two graphs to one .npy",
        setup: concurrent_input,
        args: "graph --input mid.fvecs -k 3 --out c.npy",
        how: How::Together("graph --input mid.fvecs -k 4 --out c.npy"),
        expect: Expect::OneWins(&[]),
        may_add: "",
    },
    Case {
        name: "two ranges to one .npy (three files)",
        setup: concurrent_input,
        args: "range --base mid.fvecs --query mid.fvecs --radius 0.5 --out c.npy",
        how: How::Together("range --base mid.fvecs --query mid.fvecs --radius 0.8 --out c.npy"),
        expect: Expect::OneWins(&[]),
        may_add: "",
    },
    Case {
        name: "two index builds to one file",
        setup: concurrent_input,
        args: "index build --input mid.fvecs --kind lc --out c.vidx",
        how: How::Together("index build --input mid.fvecs --kind sss --out c.vidx"),
        expect: Expect::OneWins(&[]),
        may_add: "",
    },
    Case {
        name: "two checkpointed graphs on one new folder",
        setup: concurrent_input,
        args: "graph --input mid.fvecs -k 3 --checkpoint ck --checkpoint-rows 256 --out c.ivecs",
        how: How::Together(
            "graph --input mid.fvecs -k 3 --checkpoint ck --checkpoint-rows 256 --out c.ivecs",
        ),
        expect: Expect::OneWins(&["ck"]),
        may_add: "",
    },
    Case {
        name: "two resumes of one checkpoint",
        setup: |e| {
            concurrent_input(e);
            let out = e.s.run(&words(
                "graph --input mid.fvecs -k 3 --checkpoint ck --checkpoint-rows 256 \
                 --stop-after-passes 2",
            ));
            assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
            true
        },
        args: "graph --input mid.fvecs -k 3 --checkpoint ck --checkpoint-rows 256 --resume --out c.ivecs",
        how: How::Together(
            "graph --input mid.fvecs -k 3 --checkpoint ck --checkpoint-rows 256 --resume --out c.ivecs",
        ),
        expect: Expect::OneWins(&["ck"]),
        may_add: "",
    },
    // --- class 8: forged files ---
    fails(
        "an LC index whose last member distance lies",
        |e| e.forged_index("lc", |len| len - 12, 12345.0),
        "index query --index i.vidx --query q.fvecs -k 2",
        2, &["i.vidx", "inconsistent"],
    ),
    fails(
        "an SSS index whose last table entry lies",
        |e| e.forged_index("sss", |len| len - 12, 12345.0),
        "index query --index i.vidx --query q.fvecs -k 2",
        2, &["i.vidx", "inconsistent"],
    ),
    // The structure: base (f64), node count (u64), then the root: item, level, parent
    // (u32 each), parent distance and reach (f64).
    fails(
        "a cover tree whose root reach is 0",
        |e| e.forged_index("cover", |_| structure_start() + 8 + 8 + 12 + 8, 0.0),
        "index query --index i.vidx --query q.fvecs -k 2",
        2, &["i.vidx", "inconsistent"],
    ),
    fails(
        "an .npy whose shape claims fewer rows than it holds",
        |e| {
        let mut v = npy_header("<f4", false, &[3, 4]);
        v.extend(std::iter::repeat_n(0u8, 5 * 4 * 4));
        e.s.raw("lie.npy", &v);
        true
    },
        "graph --input lie.npy -k 2",
        2, &["lie.npy"],
    ),
    fails(
        "an .npy whose dtype claims wider values than it holds",
        |e| {
        let mut v = npy_header("<f8", false, &[5, 4]);
        v.extend(std::iter::repeat_n(0u8, 5 * 4 * 4));
        e.s.raw("lie.npy", &v);
        true
    },
        "graph --input lie.npy -k 2",
        2, &["lie.npy"],
    ),
    fails(
        "an .npz whose member claims more rows than it holds",
        |e| {
        e.ok("graph --input base.fvecs -k 2 --out g.npz");
        let mut v = std::fs::read(e.path("g.npz")).unwrap();
        // The first member's shape, (30, 2), becomes (90, 2) in place: same length.
        let at = v.windows(7).position(|w| w == b"(30, 2)").unwrap();
        v[at + 1..at + 3].copy_from_slice(b"90");
        e.s.raw("lie.npz", &v);
        true
    },
        "graph --input lie.npz -k 2",
        2, &["lie.npz"],
    ),
    fails(
        "an .fvecs whose first row claims 2^30 values",
        |e| {
        let mut v = fvecs(&normal_rows(3, 4, 9));
        v[..4].copy_from_slice(&(1i32 << 30).to_le_bytes());
        e.s.raw("lie.fvecs", &v);
        true
    },
        "graph --input lie.fvecs -k 2",
        2, &["lie.fvecs"],
    ),
    fails(
        "an .fbin whose rows times dimension overflow",
        |e| {
        let mut v = fbin(&normal_rows(3, 4, 9));
        v[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        v[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        e.s.raw("lie.fbin", &v);
        true
    },
        "graph --input lie.fbin -k 2",
        2, &["lie.fbin"],
    ),
    fails(
        "a .bvecs whose second row claims another dimension",
        |e| {
        let mut v = bvecs(&[vec![1, 2, 3, 4], vec![5, 6, 7, 8], vec![9, 9, 9, 9]]);
        v[8..12].copy_from_slice(&3i32.to_le_bytes());
        e.s.raw("lie.bvecs", &v);
        true
    },
        "graph --input lie.bvecs -k 1",
        2, &["lie.bvecs"],
    ),
    fails(
        "a k-d tree index whose items hold a NaN",
        |e| e.forged_index("kd", |_| structure_start() - 16, f64::NAN),
        "index query --index i.vidx --query q.fvecs -k 2",
        2, &["i.vidx", "finite values only"],
    ),
    fails(
        "an SSS index whose first pivot is out of range",
        |e| e.forged_index("sss", |_| structure_start() + 8, 1e300),
        "index query --index i.vidx --query q.fvecs -k 2",
        2, &["i.vidx"],
    ),
    fails(
        "a cover tree whose root item is out of range",
        |e| e.forged_index("cover", |_| structure_start() + 8 + 8, 1e300),
        "index query --index i.vidx --query q.fvecs -k 2",
        2, &["i.vidx"],
    ),
    fails(
        "an .npz cut in half",
        |e| {
        e.ok("graph --input base.fvecs -k 2 --out g.npz");
        let v = std::fs::read(e.path("g.npz")).unwrap();
        e.s.raw("cut.npz", &v[..v.len() / 2]);
        true
    },
        "graph --input cut.npz -k 2",
        2, &["cut.npz", "ZIP"],
    ),
    fails(
        "a Parquet file cut in half",
        |e| e.fixture("columns.parquet", "cut.parquet", |v| v.truncate(v.len() / 2)),
        "graph --input cut.parquet -k 2",
        2, &["cut.parquet"],
    ),
    fails(
        "an HDF5 file missing its last byte",
        |e| e.fixture("ann.hdf5", "cut.hdf5", |v| v.truncate(v.len() - 1)),
        "graph --input cut.hdf5 -k 2",
        2, &["cut.hdf5", "cut short"],
    ),
    fails(
        "an HDF5 file of the new format cut before its data",
        |e| e.fixture("ann_latest.h5", "cut.h5", |v| v.truncate(2000)),
        "knn --base cut.h5 --query q.fvecs -k 2",
        2, &["cut.h5"],
    ),
    fails_reading(
        "standard input of garbage read as .npy",
        b"garbage\x00\x01\x02",
        "graph --input - --format npy -k 2 --out s.ivecs",
        &["<stdin>", "npy"],
    ),
    fails_reading(
        "standard input of garbage read as .fvecs",
        b"garbage\x00\x01\x02",
        "graph --input - --format fvecs -k 2 --out s.ivecs",
        &["<stdin>", "dimension"],
    ),
    fails_reading(
        "queries on standard input of garbage read as Parquet",
        b"garbage",
        "knn --base base.fvecs --query - --format parquet -k 2 --out s.ivecs",
        &["<stdin>", "Parquet"],
    ),
    fails_reading(
        "an empty standard input",
        b"",
        "graph --input - --format txt -k 2 --out s.ivecs",
        &["<stdin>", "empty"],
    ),
    fails_reading(
        "standard input without --format",
        b"garbage",
        "graph --input - -k 2 --out s.ivecs",
        &["-", "--format"],
    ),
    fails(
        "an HDF5 file cut in half",
        |e| e.fixture("ann.hdf5", "cut.hdf5", |v| v.truncate(v.len() / 2)),
        "graph --input cut.hdf5 -k 2",
        2, &["cut.hdf5"],
    ),
    fails(
        "a Parquet footer whose length lies",
        |e| {
        e.fixture("columns.parquet", "lie.parquet", |v| {
            let n = v.len();
            v[n - 8..n - 4].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
        })
    },
        "graph --input lie.parquet -k 2",
        2, &["lie.parquet"],
    ),
    fails(
        "an HDF5 train that is an external link",
        |e| {
        e.fixture("ann.hdf5", "ann.hdf5", |_| {});
        e.fixture("external.hdf5", "external.hdf5", |_| {})
    },
        "graph --input external.hdf5 -k 2",
        2, &["external.hdf5", "external link"],
    ),
    // --- classes 4 and 9: metrics, strings and links that made runs wrong or slow ---
    works(
        "an HDF5 train that is a soft link (old group format)",
        |e| e.fixture("soft_v1.hdf5", "soft.hdf5", |_| {}),
        "knn --base soft.hdf5 --query soft.hdf5 -k 2 --out s.tsv",
        &["s.tsv"],
    ),
    works(
        "an HDF5 train that is a soft link (new group format)",
        |e| e.fixture("soft_v2.h5", "soft.h5", |_| {}),
        "graph --input soft.h5 -k 2 --out s.npy",
        &["s.indices.npy", "s.distances.npy"],
    ),
    fails(
        "minkowski of an order below 1",
        nothing,
        "graph --input base.fvecs -k 2 --metric minkowski:0.5",
        2, &["minkowski order 0.5 must be"],
    ),
    fails(
        "minkowski of an infinite order",
        nothing,
        "knn --base base.fvecs --query q.fvecs -k 2 --metric minkowski:inf",
        2, &["minkowski order inf must be"],
    ),
    fails(
        "minkowski of a tiny order, quoted as written",
        nothing,
        "graph --input base.fvecs -k 2 --metric minkowski:1e-300",
        2, &["minkowski order 1e-300 must be"],
    ),
    works(
        "a range search under minkowski:1e300",
        nothing,
        "range --base base.fvecs --query q.fvecs --radius 1 --metric minkowski:1e300 --out r.tsv",
        &["r.tsv"],
    ),
    works(
        "a k-d tree and a cover tree under minkowski of huge orders",
        |e| {
        e.ok("index build --input base.fvecs --kind kd --metric minkowski:1e300 --out k.vidx");
        e.ok("index build --input base.fvecs --kind cover --metric minkowski:1e6 --out i.vidx");
        true
    },
        "index query --index i.vidx --query q.fvecs -k 2 --out c.tsv",
        &["c.tsv", "k.vidx"],
    ),
    works(
        "minkowski:1e300 gives chebyshev's distances, finite",
        nothing,
        "graph --input base.fvecs -k 3 --metric minkowski:1e300 --out m.tsv",
        &["m.tsv"],
    ),
    works(
        "a 1 MiB line in a text input under levenshtein",
        |e| {
        let mut text: String = "lorem ipsum dolor sit amet "
            .chars()
            .cycle()
            .take(1 << 20)
            .collect();
        text.push('\n');
        // Short lines of the long line's letters (so each is a subsequence of it).
        let letters: Vec<char> = "loremipsudta".chars().collect();
        for mut i in 0..2000usize {
            let mut w = String::from("sit ");
            while i > 0 || w.len() == 4 {
                w.push(letters[i % letters.len()]);
                i /= letters.len();
            }
            text.push_str(&w);
            text.push('\n');
        }
        e.s.raw("long.txt", text.as_bytes());
        true
    },
        "graph --input long.txt -k 2 --threads 2 --out l.tsv",
        &["l.tsv"],
    ),
    works(
        "a 200 KiB line sharing no character with the words, under levenshtein",
        |e| {
            // No word is a subsequence of the line and every word is at the same distance
            // from it: before the cut-off scans this graph took minutes.
            let mut text: String = "QWERTY0123456789".chars().cycle().take(200 << 10).collect();
            text.push('\n');
            for i in 0..2000u32 {
                let w: String = (0..3 + i % 8)
                    .map(|t| (b'a' + ((i * 5 + t * 11 + i / 26) % 26) as u8) as char)
                    .collect();
                text.push_str(&w);
                text.push('\n');
            }
            e.s.raw("foreign.txt", text.as_bytes());
            true
        },
        "graph --input foreign.txt -k 3 --threads 2 --out f.tsv",
        &["f.tsv"],
    ),
];

/// Polls `dir` until a temporary output (`.voisin-*.tmp`, not a probe) holds bytes, or `child`
/// ends; true when one was seen.
fn wait_for_temporary(dir: &Path, child: &mut std::process::Child) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let writing = name.starts_with(".voisin-")
                && name.ends_with(".tmp")
                && !name.ends_with("probe.tmp");
            if writing && e.metadata().is_ok_and(|m| m.len() > 0) {
                return true;
            }
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    false
}

/// The files a run wrote (everything that was not there before), with their bytes.
/// A folder's files and their bytes (`None` for what is not a regular file).
type Snapshot = std::collections::BTreeMap<String, Option<Vec<u8>>>;

fn outputs(dir: &Path, before: &Snapshot) -> Snapshot {
    snapshot(dir)
        .into_iter()
        .filter(|(k, _)| !before.contains_key(k) && !k.starts_with("ck"))
        .collect()
}

/// Runs one case and checks it; returns false when it was skipped.
fn run_case(c: &Case) -> bool {
    let e = Env::new();
    if !(c.setup)(&e) {
        eprintln!("skipped: {}: needs root (mount or mknod)", c.name);
        return false;
    }
    let dir = e.s.dir.path();
    let args = words(c.args);
    let mut before = snapshot(dir);
    let (out, sig) = match c.how {
        How::ShrinkAfter(name, ms) => {
            let mut child = spawn(&e.s, &args);
            // The cut must fall during the run, not before the input is read: on a loaded
            // machine the start alone can take the whole delay.
            wait_until_mapped(&mut child, &e.path(name));
            std::thread::sleep(Duration::from_millis(ms));
            if child.try_wait().unwrap().is_some() {
                eprintln!("skipped: {}: the run ended before the cut", c.name);
                return false;
            }
            let file = std::fs::OpenOptions::new().write(true).open(e.path(name));
            file.unwrap().set_len(8).unwrap();
            // The cut is the case's own change to the folder.
            before.insert(name.to_string(), Some(std::fs::read(e.path(name)).unwrap()));
            (child.wait_with_output().unwrap(), None)
        }
        How::Plain => (e.s.run(&args), None),
        How::Stdin(bytes) => {
            let mut child = Command::new(env!("CARGO_BIN_EXE_voisin"))
                .args(&args)
                .current_dir(dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut input = child.stdin.take().unwrap();
            // Small enough for the pipe's buffer; voisin may stop reading early.
            let _ = std::io::Write::write_all(&mut input, bytes);
            drop(input);
            (child.wait_with_output().unwrap(), None)
        }
        How::Limited(bytes) => (run_limited(&e.s, bytes, &args), None),
        How::SignalAfter(sig, ms) => (killed(&e.s, &args, ms, sig), Some(sig)),
        How::SignalWhileWriting(sig) => {
            let mut child = spawn(&e.s, &args);
            let seen = wait_for_temporary(dir, &mut child);
            if seen {
                // SAFETY: signals a child this test started and has not reaped.
                unsafe { libc::kill(child.id() as i32, sig) };
            }
            (child.wait_with_output().unwrap(), Some(sig))
        }
        How::Together(other) => {
            let second = words(other);
            // Each run alone first, in a folder of its own, for the outputs to compare with.
            let alone: Vec<_> = [&args, &second]
                .iter()
                .map(|a| {
                    let solo = Env::new();
                    (c.setup)(&solo);
                    let b = snapshot(solo.s.dir.path());
                    let out = solo.s.run(a);
                    assert_eq!(out.status.code(), Some(0), "{}: {}", c.name, stderr(&out));
                    outputs(solo.s.dir.path(), &b)
                })
                .collect();
            let (a, b) = (spawn(&e.s, &args), spawn(&e.s, &second));
            let outs = [a, b].map(|ch| ch.wait_with_output().unwrap());
            let Expect::OneWins(refusal) = c.expect else {
                panic!("{}: Together needs OneWins", c.name)
            };
            for out in &outs {
                if out.status.code() != Some(0) {
                    check_fail(out, &args, 2, refusal);
                }
            }
            assert!(
                outs.iter().any(|o| o.status.code() == Some(0)),
                "{}: both failed",
                c.name
            );
            let got = outputs(dir, &before);
            assert!(
                alone.contains(&got),
                "{}: the outputs are of neither run alone: {:?}",
                c.name,
                got.keys().collect::<Vec<_>>()
            );
            assert!(
                temporaries(dir).is_empty(),
                "{}: {:?}",
                c.name,
                temporaries(dir)
            );
            return true;
        }
    };
    let left = temporaries(dir);
    assert!(left.is_empty(), "{}: left {left:?}", c.name);
    let expect = match c.expect {
        Expect::OkOrFail(files, _, _) if out.status.code() == Some(0) => Expect::Ok(files),
        Expect::OkOrFail(_, code, needles) => Expect::Fail(code, needles),
        expect => expect,
    };
    match expect {
        Expect::Fail(code, needles) => {
            check_fail(&out, &args, code, needles);
            let mut after = snapshot(dir);
            if !c.may_add.is_empty() {
                after.retain(|k, _| before.contains_key(k) || !k.starts_with(c.may_add));
            }
            assert_eq!(after, before, "{}: files changed", c.name);
        }
        Expect::Signalled => {
            let sig = sig.expect("a signal case");
            if out.status.code() == Some(0) {
                eprintln!("skipped: {}: the run ended before the signal", c.name);
                return false;
            }
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(128 + sig), "{}: {err}", c.name);
            assert!(!err.contains("panicked"), "{}: {err}", c.name);
            let keep = |snap: &mut Snapshot, before: &Snapshot| {
                if !c.may_add.is_empty() {
                    snap.retain(|k, _| before.contains_key(k) || !k.starts_with(c.may_add));
                }
            };
            let mut after = snapshot(dir);
            keep(&mut after, &before);
            if after != before {
                // A signal arriving while the result is renamed into place waits for the
                // rename to finish: the folder must then hold the whole result of a run
                // left alone, nothing less.
                let solo = Env::new();
                (c.setup)(&solo);
                let solo_before = snapshot(solo.s.dir.path());
                let out = solo.s.run(&args);
                assert_eq!(out.status.code(), Some(0), "{}: {}", c.name, stderr(&out));
                let mut whole = snapshot(solo.s.dir.path());
                keep(&mut whole, &solo_before);
                assert_eq!(
                    after, whole,
                    "{}: files changed, not to the whole result",
                    c.name
                );
                eprintln!(
                    "note: {}: the signal came after the result was in place",
                    c.name
                );
            }
        }
        Expect::Ok(files) => {
            assert_eq!(out.status.code(), Some(0), "{}: {}", c.name, stderr(&out));
            for f in files {
                assert!(e.path(f).is_file(), "{}: no {f}", c.name);
            }
        }
        Expect::OneWins(_) => unreachable!("only with How::Together"),
        Expect::OkOrFail(..) => unreachable!("resolved by the exit code above"),
    }
    true
}

/// Runs the cases whose names `pick` accepts (all of them across the tests below).
fn run_cases(pick: impl Fn(&Case) -> bool) -> usize {
    CASES
        .iter()
        .filter(|c| pick(c))
        .filter(|c| run_case(c))
        .count()
}

fn is_signal(c: &Case) -> bool {
    matches!(
        c.how,
        How::SignalAfter(..) | How::SignalWhileWriting(_) | How::ShrinkAfter(..)
    )
}

fn is_together(c: &Case) -> bool {
    matches!(c.how, How::Together(_))
}

#[test]
fn the_corpus_holds_sixty_cases() {
    assert!(CASES.len() >= 60, "{} cases", CASES.len());
}

#[test]
fn files_paths_and_disks() {
    let ran = run_cases(|c| !is_signal(c) && !is_together(c));
    eprintln!("{ran} cases ran");
}

#[test]
fn signals() {
    run_cases(is_signal);
}

#[test]
fn concurrent_writers() {
    run_cases(is_together);
}

/// The case of `minkowski:1e300` names chebyshev's neighbours at chebyshev's distances.
#[test]
fn minkowski_of_a_huge_order_is_chebyshev() {
    let e = Env::new();
    e.ok("graph --input base.fvecs -k 3 --metric minkowski:1e300 --out m.tsv");
    e.ok("graph --input base.fvecs -k 3 --metric chebyshev --out c.tsv");
    let read = |f: &str| std::fs::read_to_string(e.path(f)).unwrap();
    assert_eq!(read("m.tsv"), read("c.tsv"));
}

// --- class 10: a resume redoes little ---

/// Saved passes in a checkpoint folder.
fn saved_passes(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with("pass-") && name.ends_with(".bin")
            })
            .count()
    })
}

/// The distance evaluations of a run's `--stats` line.
fn distance_evals(out: &std::process::Output) -> u64 {
    let err = stderr(out);
    let at = err.find("\"distance_evals\":").expect("a --stats line") + 17;
    let digits: String = err[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

/// Checkpointed graphs interrupted in five ways (stopped after a quarter, half and three
/// quarters of the passes; SIGKILL and SIGTERM once half are saved) resume to the bytes of an
/// uninterrupted run, and once half the passes are saved the resume does at most 60 % of that
/// run's distance evaluations (issue 14: the partial lists of unfinished rows are kept).
#[test]
fn resumes_redo_little_and_end_the_same() {
    const PASSES: usize = 24;
    let s = Scratch::new();
    s.raw("x.fbin", &fbin(&normal_rows(PASSES * 1024, 32, 8)));
    let graph = "graph --input x.fbin -k 9 --threads 2 --device cpu --stats";
    let plain = s.run(&words(&format!("{graph} --out plain.tsv")));
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    let (want, all) = (
        std::fs::read(s.path("plain.tsv")).unwrap(),
        distance_evals(&plain),
    );
    let stops: [(&str, Option<i32>, usize); 5] = [
        ("stopped after a quarter", None, PASSES / 4),
        ("stopped after half", None, PASSES / 2),
        ("stopped after three quarters", None, 3 * PASSES / 4),
        ("SIGKILL after half", Some(libc::SIGKILL), PASSES / 2),
        ("SIGTERM after half", Some(libc::SIGTERM), PASSES / 2),
    ];
    for (t, (what, sig, passes)) in stops.into_iter().enumerate() {
        let (ck, out) = (format!("ck{t}"), format!("r{t}.tsv"));
        let run = format!("{graph} --checkpoint {ck} --checkpoint-rows 1024 --out {out}");
        match sig {
            None => {
                let stop = s.run(&words(&format!("{run} --stop-after-passes {passes}")));
                assert_eq!(stop.status.code(), Some(1), "{what}: {}", stderr(&stop));
            }
            Some(sig) => {
                let mut child = spawn(&s, &words(&run));
                let start = Instant::now();
                while saved_passes(&s.path(&ck)) < passes
                    && child.try_wait().unwrap().is_none()
                    && start.elapsed() < Duration::from_secs(60)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                // SAFETY: signals a child this test started and has not reaped.
                unsafe { libc::kill(child.id() as i32, sig) };
                let end = child.wait_with_output().unwrap();
                if end.status.code() == Some(0) {
                    eprintln!("skipped: {what}: the build ended before the signal");
                    continue;
                }
                // SIGKILL leaves what it cut short; a handled signal leaves nothing.
                if sig != libc::SIGKILL {
                    let left = temporaries(&s.path(&ck));
                    assert!(left.is_empty(), "{what}: left {left:?}");
                }
            }
        }
        let saved = saved_passes(&s.path(&ck));
        assert!(!s.path(&out).exists(), "{what}: an output before the end");
        let resumed = s.run(&words(&format!("{run} --resume")));
        assert_eq!(
            resumed.status.code(),
            Some(0),
            "{what}: {}",
            stderr(&resumed)
        );
        assert!(
            std::fs::read(s.path(&out)).unwrap() == want,
            "{what}: other bytes"
        );
        let redone = distance_evals(&resumed) as f64 / all as f64;
        eprintln!("{what}: {saved} of {PASSES} passes saved, {redone:.2} of the work redone");
        if saved >= PASSES / 2 {
            assert!(redone <= 0.6, "{what}: {redone:.2} of the work redone");
        }
    }
}
