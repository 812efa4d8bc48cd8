//! How every file voisin writes reaches its final name: results (through voisin-io), index files
//! and checkpoint passes all go through an [`OutputSet`], and every temporary file lives in one
//! process-wide registry so that a signal can remove them.
//!
//! The rules (the README's "Output files" section says the same to users):
//! - **Checked first.** [`OutputSet::new`] checks every target before any work: the folder exists
//!   and a file can be created in it, the name is not too long and does not end in `/`, and the
//!   target is absent or a regular file. Anything else (a folder, a symbolic link, a device node
//!   such as `/dev/null`, a FIFO, a socket) is refused as bad input: voisin never replaces or
//!   writes through a non-regular file.
//! - **Only its own files.** The first target of a set is the one the user named; the others are
//!   its companions (`res.fvecs` beside `res.ivecs`). An existing companion is replaced only when
//!   the named target exists too, i.e. when both are halves of an earlier result; a lone
//!   `precious.fvecs` beside a new `precious.ivecs` is refused.
//! - **All or nothing.** Each file is written to a temporary file in its destination folder and
//!   synced; only then are they renamed into place, under an exclusive `flock` on each folder for
//!   sets of several files (so two processes writing one set never interleave their files; one
//!   file is one atomic rename; a file system without locks is written unlocked) and with each
//!   replaced file kept as a hard-linked backup until every rename succeeded. A failed rename
//!   puts the backups back, so the previous result is never lost. Files are created
//!   `0666 & !umask`.
//! - **Signals.** [`exit_on_signals`] (called by the CLI) makes SIGINT, SIGTERM and SIGHUP remove
//!   every registered temporary file and exit with 128 + the signal number (130, 143, 129); a
//!   signal arriving while a set is being renamed into place waits until the set is complete.
//!   SIGBUS, which a memory-mapped input shrinking under the process raises, prints one error line
//!   (see [`set_bus_message`]), removes the temporary files and exits with code 2. SIGXFSZ is
//!   ignored so that a write past the file size limit fails like a full disk.
//!
//! - **Inputs.** Regular files and pipes (FIFOs, `<(zcat x.fvecs.gz)`) are read; a FIFO waits
//!   for its writer, as with any Unix tool. Device nodes and sockets are refused as bad input
//!   ([`unreadable_kind`]): `/dev/zero` would never end.
//!
//! This module is Unix-only, as is the rest of the workspace.

use std::ffi::{c_char, c_int, CString};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst,
};

use crate::error::is_user_io_error;

/// Longest file name (one path component) Linux file systems accept.
const NAME_MAX: usize = 255;

/// A failure to write one file of an output: which file, a one-line message, and whether the
/// user's path is at fault (exit code 2) or the machine (exit code 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitError {
    /// The file or folder at fault: one of the output's targets, or the folder that holds one.
    pub path: PathBuf,
    /// What went wrong, one line without the path (the `Display` form is `path: message`); the
    /// operating system's `(os error N)` suffix is cut off.
    pub message: String,
    /// True when the user's path is at fault (bad input, exit code 2), false for a failure of the
    /// machine (exit code 1); it picks the [`crate::Error`] variant the error converts to.
    pub user: bool,
}

impl CommitError {
    fn user(path: &Path, message: impl Into<String>) -> Self {
        CommitError {
            path: path.to_path_buf(),
            message: message.into(),
            user: true,
        }
    }

    fn io(path: &Path, what: &str, err: &io::Error) -> Self {
        let text = err.to_string();
        let text = text.find(" (os error").map_or(&text[..], |i| &text[..i]);
        CommitError {
            path: path.to_path_buf(),
            message: format!("{what}: {text}"),
            user: is_user_io_error(err),
        }
    }
}

impl fmt::Display for CommitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for CommitError {}

impl From<CommitError> for crate::Error {
    fn from(e: CommitError) -> Self {
        if e.user {
            crate::Error::InvalidInput(e.to_string())
        } else {
            crate::Error::Io(io::Error::other(e.to_string()))
        }
    }
}

/// The files of one output, written completely or not at all (see the module documentation).
pub struct OutputSet {
    targets: Vec<PathBuf>,
    temps: Vec<Option<TempFile>>,
}

impl OutputSet {
    /// Declares the targets (the named one first, then its companions) and checks them all.
    pub fn new(targets: Vec<PathBuf>) -> Result<Self, CommitError> {
        let set = OutputSet {
            temps: targets.iter().map(|_| None).collect(),
            targets,
        };
        set.check(true)?;
        Ok(set)
    }

    /// The targets as declared, the named one first and then its companions; [`OutputSet::write`]
    /// takes its `i` as an index into them.
    pub fn targets(&self) -> &[PathBuf] {
        &self.targets
    }

    /// Writes target `i` to a synced temporary file beside it; nothing is visible yet.
    pub fn write(
        &mut self,
        i: usize,
        body: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> Result<(), CommitError> {
        let path = &self.targets[i];
        let dir = folder(path);
        let tmp = TempFile::create_in(dir, "tmp").map_err(|e| {
            CommitError::io(
                path,
                &format!("cannot create a file in {}", dir.display()),
                &e,
            )
        })?;
        let filled = (|| {
            let mut w = BufWriter::with_capacity(1 << 20, tmp.file());
            body(&mut w)?;
            w.flush()?;
            drop(w);
            tmp.file().sync_all()
        })();
        filled.map_err(|e| CommitError::io(path, "cannot write", &e))?;
        self.temps[i] = Some(tmp);
        Ok(())
    }

    /// Renames every written file into place, all or none (see the module documentation).
    pub fn commit(mut self) -> Result<(), CommitError> {
        if let Some(i) = self.temps.iter().position(Option::is_none) {
            let path = &self.targets[i];
            return Err(CommitError {
                path: path.clone(),
                message: "internal error: this file of the output was never written".into(),
                user: false,
            });
        }
        let _locks = self.lock_folders()?;
        let _critical = Critical::enter();
        // Another process may have changed the targets since the first check.
        self.check(false)?;
        let mut backups = Vec::with_capacity(self.targets.len());
        for path in &self.targets {
            backups.push(match fs::symlink_metadata(path) {
                Ok(_) => Some(
                    TempFile::backup_of(path)
                        .map_err(|e| CommitError::io(path, "cannot keep the old file", &e))?,
                ),
                Err(_) => None,
            });
        }
        let temps: Vec<TempFile> = self.temps.drain(..).map(Option::unwrap).collect();
        let mut placed = 0;
        let mut failure = None;
        for (tmp, path) in temps.into_iter().zip(&self.targets) {
            #[cfg(test)]
            if tests::FAIL_RENAME.load(SeqCst) == placed + 1 {
                failure = Some(CommitError::user(path, "injected failure"));
                break;
            }
            if let Err(e) = tmp.persist(path) {
                failure = Some(CommitError::io(path, "cannot rename into place", &e));
                break;
            }
            placed += 1;
        }
        if let Some(err) = failure {
            for (path, backup) in self.targets.iter().zip(backups).take(placed) {
                let _ = match backup {
                    Some(b) => b.persist(path),
                    None => fs::remove_file(path),
                };
            }
            return Err(err);
        }
        for dir in self.folders() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| CommitError::io(dir, "cannot sync the folder", &e))?;
        }
        Ok(())
    }

    fn folders(&self) -> Vec<&Path> {
        let mut dirs: Vec<&Path> = self.targets.iter().map(|p| folder(p)).collect();
        dirs.sort();
        dirs.dedup();
        dirs
    }

    /// Exclusive locks on the target folders, taken in sorted order. A set of one file needs
    /// none (one rename is atomic), which lets a process holding a folder's lock (a checkpoint
    /// folder in use) commit single files into it.
    fn lock_folders(&self) -> Result<Vec<File>, CommitError> {
        if self.targets.len() < 2 {
            return Ok(Vec::new());
        }
        self.folders().into_iter().map(lock_folder).collect()
    }

    /// The checks of the module documentation; `probe` also creates a file in each folder.
    fn check(&self, probe: bool) -> Result<(), CommitError> {
        let mut existing = Vec::with_capacity(self.targets.len());
        for path in &self.targets {
            check_name(path)?;
            check_folder(folder(path), path, false)?;
            existing.push(check_target(path)?);
        }
        if probe {
            for dir in self.folders() {
                check_folder(dir, &self.targets[0], true)?;
            }
        }
        if !existing[0] {
            if let Some(i) = (1..existing.len()).find(|&i| existing[i]) {
                return Err(CommitError::user(
                    &self.targets[i],
                    format!(
                        "exists but {} does not, so it is not part of an earlier result of \
                         voisin; it would be replaced (move it away or choose another output name)",
                        self.targets[0].display()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Writes one file all or nothing through an [`OutputSet`].
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), CommitError> {
    let mut set = OutputSet::new(vec![path.to_path_buf()])?;
    set.write(0, |w| w.write_all(bytes))?;
    set.commit()
}

/// Takes an exclusive `flock` on `dir`, held until the returned file is dropped: a second process
/// taking it waits. Used for committing output sets and for a checkpoint folder in use.
pub fn lock_folder(dir: &Path) -> Result<File, CommitError> {
    let f = File::open(dir).map_err(|e| CommitError::io(dir, "cannot open the folder", &e))?;
    lock_file(&f, true).map_err(|e| CommitError::io(dir, "cannot lock the folder", &e))?;
    Ok(f)
}

/// Like [`lock_folder`] without waiting: `Ok(None)` when another process holds the lock.
pub fn try_lock_folder(dir: &Path) -> Result<Option<File>, CommitError> {
    let f = File::open(dir).map_err(|e| CommitError::io(dir, "cannot open the folder", &e))?;
    match lock_file(&f, false) {
        Ok(()) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(CommitError::io(dir, "cannot lock the folder", &e)),
    }
}

fn lock_file(f: &File, wait: bool) -> io::Result<()> {
    let op = if wait {
        libc::LOCK_EX
    } else {
        libc::LOCK_EX | libc::LOCK_NB
    };
    loop {
        // SAFETY: flock on a file descriptor this function borrows for the call.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        // File systems without locks (some network mounts): go on unlocked rather than refuse
        // to write at all.
        if matches!(
            e.raw_os_error(),
            Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL)
        ) {
            return Ok(());
        }
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The folder a target goes to (`.` for a bare file name).
fn folder(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A target must name a file: no trailing `/`, a name the file system accepts.
fn check_name(path: &Path) -> Result<(), CommitError> {
    if path.as_os_str().as_bytes().ends_with(b"/") {
        return Err(CommitError::user(
            path,
            "ends in '/', which names a folder, not a file",
        ));
    }
    let Some(name) = path.file_name() else {
        let what = if path.is_dir() {
            "is a folder, not a file name"
        } else {
            "names no file"
        };
        return Err(CommitError::user(path, what));
    };
    if name.len() > NAME_MAX {
        return Err(CommitError::user(
            path,
            format!(
                "file name is too long ({} bytes, the limit is {NAME_MAX})",
                name.len()
            ),
        ));
    }
    Ok(())
}

/// What is at a target now: true for a regular file, false for nothing; anything else is refused.
fn check_target(path: &Path) -> Result<bool, CommitError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(CommitError::io(path, "cannot use this path", &e)),
    };
    let t = meta.file_type();
    if t.is_file() {
        return Ok(true);
    }
    let kind = kind_name(t);
    Err(CommitError::user(
        path,
        format!(
            "cannot rename into place: is {kind}; voisin writes only regular files and \
             never replaces anything else"
        ),
    ))
}

/// What a file that is not a regular file is, for messages ("a folder", "a FIFO", ...).
fn kind_name(t: fs::FileType) -> &'static str {
    if t.is_dir() {
        "a folder"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Why `path` cannot be an input (a device node or a socket, links followed), as a message for
/// the user; `None` for regular files, pipes, folders (callers say that themselves) and paths
/// that cannot be looked at (opening them reports why).
pub fn unreadable_kind(path: &Path) -> Option<String> {
    let t = fs::metadata(path).ok()?.file_type();
    let special = t.is_char_device() || t.is_block_device() || t.is_socket();
    special.then(|| {
        format!(
            "is {}; voisin reads regular files and pipes (give other data through a pipe or \
             standard input)",
            kind_name(t)
        )
    })
}

/// The folder exists, and with `probe` a file can be created in it (creating one is the only
/// reliable test of permission).
fn check_folder(dir: &Path, target: &Path, probe: bool) -> Result<(), CommitError> {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(CommitError::user(
                target,
                format!("{} is not a folder", dir.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(CommitError::user(
                target,
                format!(
                    "cannot create a file in {0}: folder {0} does not exist",
                    dir.display()
                ),
            ))
        }
        Err(e) => {
            return Err(CommitError::io(
                target,
                &format!("folder {}", dir.display()),
                &e,
            ))
        }
    }
    if !probe {
        return Ok(());
    }
    TempFile::create_in(dir, "probe.tmp")
        .map(drop)
        .map_err(|e| {
            CommitError::io(
                target,
                &format!("cannot write in folder {}", dir.display()),
                &e,
            )
        })
}

/// Slots of the registry of live temporary files: leaked C strings, read by the signal handler.
const SLOTS: usize = 256;
static LIVE: [AtomicPtr<c_char>; SLOTS] = [const { AtomicPtr::new(ptr::null_mut()) }; SLOTS];
static COUNTER: AtomicU64 = AtomicU64::new(0);

fn register(path: &Path) -> Option<usize> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?.into_raw();
    for (i, slot) in LIVE.iter().enumerate() {
        if slot
            .compare_exchange(ptr::null_mut(), c, SeqCst, SeqCst)
            .is_ok()
        {
            return Some(i);
        }
    }
    // SAFETY: `c` came from `into_raw` above and was not shared.
    drop(unsafe { CString::from_raw(c) });
    None
}

fn unregister(slot: usize) {
    let p = LIVE[slot].swap(ptr::null_mut(), SeqCst);
    if !p.is_null() {
        // SAFETY: only `register` stores pointers, each from `CString::into_raw`; the swap made
        // this the only owner (the signal handler swaps too and never frees).
        drop(unsafe { CString::from_raw(p) });
    }
}

/// Removes every registered temporary file. Async-signal-safe: only atomics and `unlink`. The
/// names are leaked, which is meant for a process about to exit.
pub fn remove_temporaries() {
    for slot in &LIVE {
        let p = slot.swap(ptr::null_mut(), SeqCst);
        if !p.is_null() {
            // SAFETY: `p` is a NUL-terminated string leaked by `register`.
            unsafe { libc::unlink(p) };
        }
    }
}

/// A temporary file in a registered slot: removed when dropped, by a signal, or renamed into
/// place by [`TempFile::persist`]. Created `0666 & !umask`.
pub struct TempFile {
    path: PathBuf,
    slot: Option<usize>,
    file: Option<File>,
}

impl TempFile {
    /// A new empty file `.voisin-<pid>-<n>.<suffix>` in `dir`. Suffixes end in `tmp`, which
    /// a checkpoint folder's reader ignores, so what a `kill -9` leaves never counts as progress.
    pub fn create_in(dir: &Path, suffix: &str) -> io::Result<TempFile> {
        TempFile::make(dir, suffix, |path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o666)
                .open(path)
                .map(Some)
        })
    }

    /// A hard link to `target` beside it (a copy where links are not supported).
    fn backup_of(target: &Path) -> io::Result<TempFile> {
        TempFile::make(folder(target), "bak.tmp", |path| {
            match fs::hard_link(target, path) {
                Ok(()) => Ok(None),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(e),
                Err(_) => fs::copy(target, path).map(|_| None),
            }
        })
    }

    fn make(
        dir: &Path,
        suffix: &str,
        create: impl Fn(&Path) -> io::Result<Option<File>>,
    ) -> io::Result<TempFile> {
        loop {
            let n = COUNTER.fetch_add(1, SeqCst);
            let path = dir.join(format!(".voisin-{}-{n}.{suffix}", std::process::id()));
            // Registered before it exists, so a signal never misses it.
            let slot = register(&path);
            match create(&path).and_then(|file| unless_exiting(&path, &EXITING).map(|()| file)) {
                Ok(file) => return Ok(TempFile { path, slot, file }),
                Err(e) => {
                    if let Some(s) = slot {
                        unregister(s);
                    }
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Where the temporary file lives: `.voisin-<pid>-<n>.<suffix>` in the folder it was made in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file (temporary files made by [`TempFile::create_in`] only).
    pub fn file(&self) -> &File {
        self.file
            .as_ref()
            .expect("a created temporary file is open")
    }

    /// Renames the file to `to`; on failure it stays temporary (and is removed when dropped).
    pub fn persist(mut self, to: &Path) -> io::Result<()> {
        fs::rename(&self.path, to)?;
        if let Some(s) = self.slot.take() {
            unregister(s);
        }
        self.path = PathBuf::new();
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        self.file = None;
        if !self.path.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.path);
        }
        if let Some(s) = self.slot.take() {
            unregister(s);
        }
    }
}

/// Set by the signal handler before it removes the temporary files: another thread may be
/// creating one at that moment (the handler runs on one thread while the others go on), after
/// the handler unlinked its registered name and before `_exit`; such a file is removed by its
/// creator ([`unless_exiting`]).
static EXITING: AtomicBool = AtomicBool::new(false);

/// Removes the just created `path` when the process is exiting on a signal (`exiting`), as
/// the handler may have unlinked its name before it existed. Ordering: the handler sets the
/// flag before it reads the registry, and a creator reads the flag after its file exists, so
/// either the handler sees the name and the file (or its creation comes later, and the creator
/// then sees the flag).
fn unless_exiting(path: &Path, exiting: &AtomicBool) -> io::Result<()> {
    if exiting.load(SeqCst) {
        let _ = fs::remove_file(path);
        return Err(io::Error::new(
            io::ErrorKind::Interrupted,
            "the process is exiting on a signal",
        ));
    }
    Ok(())
}

/// Nesting depth of sections in which INT/TERM/HUP wait, and the signal that waits.
static CRITICAL: AtomicUsize = AtomicUsize::new(0);
static PENDING: AtomicI32 = AtomicI32::new(0);
static BUS_MESSAGE: AtomicPtr<c_char> = AtomicPtr::new(ptr::null_mut());

/// While alive, a terminating signal waits (an output set is being renamed into place).
struct Critical;

impl Critical {
    fn enter() -> Critical {
        CRITICAL.fetch_add(1, SeqCst);
        Critical
    }
}

impl Drop for Critical {
    fn drop(&mut self) {
        if CRITICAL.fetch_sub(1, SeqCst) == 1 {
            let sig = PENDING.swap(0, SeqCst);
            if sig != 0 {
                on_signal(sig);
            }
        }
    }
}

extern "C" fn on_signal(sig: c_int) {
    if sig == libc::SIGBUS {
        let msg = BUS_MESSAGE.load(SeqCst);
        let fallback = c"voisin: error: a memory-mapped file became unreadable during the run \
                         (was it truncated?)\n";
        let msg = if msg.is_null() {
            fallback.as_ptr()
        } else {
            msg.cast_const()
        };
        // SAFETY: `msg` is NUL-terminated and never freed; write and _exit are
        // async-signal-safe.
        unsafe {
            libc::write(2, msg.cast(), libc::strlen(msg));
            EXITING.store(true, SeqCst);
            remove_temporaries();
            libc::_exit(2);
        }
    }
    // The signal is recorded before the section is tested: a section ending in between then
    // finds it (and handles it itself) instead of it being lost.
    PENDING.store(sig, SeqCst);
    if CRITICAL.load(SeqCst) > 0 {
        return;
    }
    EXITING.store(true, SeqCst);
    remove_temporaries();
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(128 + sig) };
}

/// Installs the signal policy of the module documentation. For the CLI; a library embedding
/// voisin keeps its own handlers.
pub fn exit_on_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGBUS] {
        // SAFETY: installs a handler that only touches atomics and async-signal-safe calls.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, ptr::null_mut());
        }
    }
    // SAFETY: ignoring a signal is always sound.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
}

/// The line SIGBUS prints (without `voisin: error: ` and the newline), e.g. naming the mapped
/// inputs. The previous message is leaked; this is set once or twice per run.
pub fn set_bus_message(message: &str) {
    let line = format!("voisin: error: {}\n", message.replace(['\n', '\0'], " "));
    let c = CString::new(line).expect("NULs were replaced").into_raw();
    BUS_MESSAGE.store(c, SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 + the index of a rename to fail, 0 for none.
    pub(super) static FAIL_RENAME: AtomicUsize = AtomicUsize::new(0);

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A temporary file created while the process exits on a signal (after the handler swept
    /// the registry) is removed by its creator; otherwise it stays.
    #[test]
    fn files_created_while_exiting_are_removed_by_their_creator() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".voisin-1-1.tmp");
        for exiting in [false, true] {
            fs::write(&path, b"x").unwrap();
            let got = unless_exiting(&path, &AtomicBool::new(exiting));
            assert_eq!(got.is_ok(), !exiting);
            assert_eq!(path.exists(), !exiting);
        }
    }

    #[test]
    fn a_failed_rename_restores_the_previous_set() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("r.ivecs"), dir.path().join("r.fvecs"));
        fs::write(&a, b"old a").unwrap();
        fs::write(&b, b"old b").unwrap();
        let mut set = OutputSet::new(vec![a.clone(), b.clone()]).unwrap();
        set.write(0, |w| w.write_all(b"new a")).unwrap();
        set.write(1, |w| w.write_all(b"new b")).unwrap();
        FAIL_RENAME.store(2, SeqCst);
        let err = set.commit().unwrap_err();
        FAIL_RENAME.store(0, SeqCst);
        assert_eq!(err.message, "injected failure");
        assert_eq!(fs::read(&a).unwrap(), b"old a");
        assert_eq!(fs::read(&b).unwrap(), b"old b");
        assert_eq!(names(dir.path()), ["r.fvecs", "r.ivecs"]);
    }

    #[test]
    fn temporaries_are_registered_until_persisted_or_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let t = TempFile::create_in(dir.path(), "tmp").unwrap();
        let slot = t.slot.unwrap();
        assert!(!LIVE[slot].load(SeqCst).is_null());
        drop(t);
        assert!(names(dir.path()).is_empty());
        let t = TempFile::create_in(dir.path(), "tmp").unwrap();
        t.persist(&dir.path().join("kept")).unwrap();
        assert_eq!(names(dir.path()), ["kept"]);
    }
}
