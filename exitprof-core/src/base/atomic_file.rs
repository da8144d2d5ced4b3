//! Writing a file atomically: readers see the old file or the whole new one, never a part, and a
//! failed write (a full disk) leaves nothing behind; readable by its owner only unless asked
//! otherwise.

use std::{
    fs::{self, File, Permissions},
    io::{self, Write},
    os::unix::fs::{FileTypeExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    sync::OnceLock,
};

use tempfile::NamedTempFile;

/// The permissions of the files exitprof writes when not told otherwise: its owner's alone, as
/// `perf record`'s `perf.data`. A record holds the command lines, task names and cgroup paths of
/// whatever ran (everything, under `--all`); an export, some of those.
pub const DEFAULT_MODE: u32 = 0o600;

/// The permissions given by `--file-mode`, once, before any file is written.
static MODE: OnceLock<u32> = OnceLock::new();

/// Makes every file written from now on get exactly `mode` (the umask does not take from it: it
/// was asked for). Only the first call counts.
pub fn set_mode(mode: u32) {
    let _ = MODE.set(mode & 0o777);
}

fn mode() -> u32 {
    MODE.get().copied().unwrap_or(DEFAULT_MODE)
}

/// Writes `bytes` to `path` atomically (see [`AtomicFile`]).
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = AtomicFile::create(path)?;
    file.write_all(bytes)?;
    file.commit()
}

/// A file written under a temporary name in the directory of its path, for files written as
/// they are made (a record file, all through a run). [`AtomicFile::commit`] syncs it, renames it
/// over its path, then syncs the directory so that the rename survives a crash; dropped before,
/// or on any error, it is removed and the path is left as it was.
pub struct AtomicFile {
    tmp: NamedTempFile,
    path: PathBuf,
}

impl AtomicFile {
    pub fn create(path: &Path) -> io::Result<Self> {
        check_replaceable(path).map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, why))?;
        Ok(Self { tmp: temporary_file_in(directory_of(path))?, path: path.to_owned() })
    }

    pub fn commit(self) -> io::Result<()> {
        self.tmp.as_file().sync_all()?;
        self.tmp.persist(&self.path).map_err(|e| e.error)?;
        File::open(directory_of(&self.path))?.sync_all()
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tmp.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tmp.flush()
    }
}

/// Checks that `path` can be written by [`write`]: a regular file or nothing yet, in a directory
/// that exists and takes a new file. Returns why not.
pub fn check_writable(path: &Path) -> Result<(), String> {
    check_replaceable(path)?;
    let dir = directory_of(path);
    match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(format!("{} is not a directory", dir.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!("directory {} does not exist", dir.display()));
        }
        Err(e) => return Err(format!("cannot reach directory {}: {e}", dir.display())),
    }
    temporary_file_in(dir)
        .map(drop)
        .map_err(|e| format!("cannot create a file in {}: {e}", dir.display()))
}

/// Fails unless `path` is a regular file or does not exist: [`write`] renames a new file over
/// it, which would replace a device, a FIFO or a symbolic link itself instead of writing to it.
fn check_replaceable(path: &Path) -> Result<(), String> {
    let kind = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => return Ok(()),
        // Nothing there yet (the checks of its directory say more when that is wrong).
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
            return Ok(());
        }
        Err(e) => return Err(format!("cannot look at it: {e}")),
        Ok(meta) => meta.file_type(),
    };
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_fifo() {
        "a FIFO"
    } else {
        "a socket"
    };
    Err(format!(
        "it is {what}, not a regular file (exitprof writes a file whole to a new file renamed \
         over its path; give the path of a regular file)"
    ))
}

/// A hidden temporary file, removed when dropped, created private and then given the permissions
/// the file is to have ([`set_mode`]), which it keeps when renamed over its path.
fn temporary_file_in(dir: &Path) -> io::Result<NamedTempFile> {
    let file = tempfile::Builder::new()
        .prefix(".exitprof-")
        .suffix(".tmp")
        .permissions(Permissions::from_mode(0o600))
        .tempfile_in(dir)?;
    file.as_file().set_permissions(Permissions::from_mode(mode()))?;
    Ok(file)
}

fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn replaces_the_file_whole_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        write(&path, b"first").unwrap();
        write(&path, b"second, longer").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second, longer");
        assert_eq!(entries(dir.path()), ["out.csv"]);
    }

    #[test]
    fn a_file_dropped_before_its_commit_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.rec");
        fs::write(&path, b"old").unwrap();
        let mut file = AtomicFile::create(&path).unwrap();
        file.write_all(b"half of the new").unwrap();
        drop(file);
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(entries(dir.path()), ["run.rec"]);
    }

    /// Unless told otherwise (the tests of this binary never set a mode): the owner's alone,
    /// the file replaced included, whatever the umask.
    #[test]
    fn new_files_are_their_owners_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        fs::write(&path, b"old").unwrap();
        fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        write(&path, b"x").unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, DEFAULT_MODE, "mode {mode:o}");
    }

    #[test]
    fn unwritable_paths_say_why() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_writable(&dir.path().join("ok.json")).is_ok());
        let missing = dir.path().join("nosuch/out.json");
        let why = check_writable(&missing).unwrap_err();
        assert!(why.contains("does not exist") && why.contains("nosuch"), "{why}");
        let why = check_writable(dir.path()).unwrap_err();
        assert!(why.starts_with("it is a directory, not a regular file"), "{why}");
        let file = dir.path().join("file");
        fs::write(&file, "").unwrap();
        let why = check_writable(&file.join("out.json")).unwrap_err();
        assert!(why.contains("not a directory"), "{why}");
        assert!(write(&missing, b"x").is_err());
        assert_eq!(entries(dir.path()), ["file"], "the checks left files behind");
    }

    #[test]
    fn only_regular_files_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(dir.path().join("file.json"), &link).unwrap();
        let fifo = dir.path().join("fifo.json");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success(), "mkfifo {}: {made}", fifo.display());
        for (path, what) in [(&link, "a symbolic link"), (&fifo, "a FIFO")] {
            let why = check_writable(path).unwrap_err();
            assert!(why.starts_with(&format!("it is {what}, not a regular file")), "{why}");
            let err = write(path, b"x").unwrap_err();
            assert!(err.to_string().contains(what), "{err}");
        }
        let why = check_writable(Path::new("/dev/null")).unwrap_err();
        assert!(why.starts_with("it is a character device"), "{why}");
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "link replaced");
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "FIFO replaced");
        assert_eq!(entries(dir.path()), ["fifo.json", "link.json"], "files left behind");
    }
}
