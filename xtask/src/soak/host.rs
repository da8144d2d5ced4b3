//! What the soak changes on the machine, each undone when it is dropped: `kernel.core_pattern`
//! (the churn's core dumps go to a pipe that discards them), and the cgroup (v2) its churn runs
//! in. And tracefs, mounted if it is not (the independent count reads the tracepoint's id there).

use std::{
    fs,
    path::{Path, PathBuf},
    thread,
    time::Duration,
};

use anyhow::{Context as _, bail};

const CORE_PATTERN: &str = "/proc/sys/kernel/core_pattern";

/// Core dumps piped to a helper that reads and discards them: nothing lands on disk, and the
/// dumping exits take as long as writing the dump takes.
const DISCARD: &str = "|/bin/dd of=/dev/null status=none";

/// `kernel.core_pattern` set to discard dumps, restored when dropped.
pub struct CorePattern {
    saved: String,
}

impl CorePattern {
    pub fn discard() -> anyhow::Result<Self> {
        let saved = fs::read_to_string(CORE_PATTERN).context("reading kernel.core_pattern")?;
        fs::write(CORE_PATTERN, DISCARD).context("setting kernel.core_pattern")?;
        Ok(Self { saved })
    }
}

impl Drop for CorePattern {
    fn drop(&mut self) {
        if let Err(e) = fs::write(CORE_PATTERN, self.saved.trim_end()) {
            eprintln!("soak: could not restore kernel.core_pattern ({:?}): {e}", self.saved);
        }
    }
}

/// A cgroup (v2) of the soak's own, removed with every cgroup below it when dropped.
pub struct Cgroup {
    pub path: PathBuf,
    /// Its path from the v2 root, as exitprof names its group (`/exitprof-soak-PID`).
    pub name: String,
}

impl Cgroup {
    pub fn make() -> anyhow::Result<Self> {
        let root = v2_root()?;
        let name = format!("/exitprof-soak-{}", std::process::id());
        let path = root.join(&name[1..]);
        fs::create_dir(&path).with_context(|| format!("making the cgroup {}", path.display()))?;
        Ok(Self { path, name })
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Leaves first; a cgroup goes once its last task has been reaped.
        let mut dirs: Vec<PathBuf> = fs::read_dir(&self.path)
            .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
            .unwrap_or_default();
        dirs.push(self.path.clone());
        for dir in dirs {
            let removed = (0..50).any(|_| {
                fs::remove_dir(&dir).is_ok() || {
                    thread::sleep(Duration::from_millis(100));
                    false
                }
            });
            if !removed {
                eprintln!("soak: could not remove the cgroup {}", dir.display());
            }
        }
    }
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a
/// v1 hybrid).
fn v2_root() -> anyhow::Result<PathBuf> {
    let mounts = fs::read_to_string("/proc/mounts")?;
    mounts
        .lines()
        .find_map(|l| {
            let mut fields = l.split(' ');
            let (_, dir, kind) = (fields.next()?, fields.next()?, fields.next()?);
            (kind == "cgroup2").then(|| PathBuf::from(dir))
        })
        .context("the cgroup v2 hierarchy is not mounted: the soak's cgroup churn needs it")
}

/// tracefs, mounted at /sys/kernel/tracing if it is not yet mounted anywhere.
pub fn tracefs() -> anyhow::Result<PathBuf> {
    for dir in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(dir).join("events").is_dir() {
            return Ok(PathBuf::from(dir));
        }
    }
    let dir = "/sys/kernel/tracing";
    let (source, target, kind) = (c"nodev", c"/sys/kernel/tracing", c"tracefs");
    // SAFETY: NUL-terminated strings alive for the call; no data.
    let rc = unsafe {
        libc::mount(source.as_ptr(), target.as_ptr(), kind.as_ptr(), 0, std::ptr::null())
    };
    if rc != 0 {
        bail!("mounting tracefs at {dir}: {}", std::io::Error::last_os_error());
    }
    Ok(PathBuf::from(dir))
}
