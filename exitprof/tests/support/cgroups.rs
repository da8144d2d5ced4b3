//! Cgroups of the v2 hierarchy that a test makes under a parent of its own, wherever this machine
//! mounts the hierarchy (`/sys/fs/cgroup` on a v2-only host, `/sys/fs/cgroup/unified` on a hybrid
//! one), with processes started in them; all removed with the test, whatever still runs in them.

use std::{
    fs::{self, File},
    io,
    os::{fd::AsRawFd as _, unix::process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command},
    time::{Duration, Instant},
};

/// The parent cgroup `exitprof-test-<pid>-<what>` under the v2 hierarchy's root. Dropped, it
/// kills what still runs in its subtree and removes every cgroup of it, the deepest first.
pub struct TestCgroups {
    /// The hierarchy's root, and the parent's directory.
    root: PathBuf,
    dir: PathBuf,
}

impl TestCgroups {
    /// Makes the parent. The v2 hierarchy is a prerequisite: without it, the test fails.
    pub fn new(what: &str) -> Self {
        let mounts = fs::read_to_string("/proc/self/mounts").expect("reading /proc/self/mounts");
        let root = mounts
            .lines()
            .find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(fields[1]))
            })
            .expect(
                "this test needs the cgroup v2 hierarchy mounted, and /proc/self/mounts has none",
            );
        let dir = root.join(format!("exitprof-test-{}-{what}", std::process::id()));
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("making cgroup {}: {e}", dir.display()));
        Self { root, dir }
    }

    /// Makes the child cgroup `name`.
    pub fn make(&self, name: &str) {
        let dir = self.dir.join(name);
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("making cgroup {}: {e}", dir.display()));
    }

    /// The `cgroup.procs` of the child cgroup `name`: a process that writes its pid there moves
    /// into it.
    pub fn procs(&self, name: &str) -> PathBuf {
        self.dir.join(name).join("cgroup.procs")
    }

    /// The path of the child cgroup `name` as the kernel names cgroups: from the hierarchy's
    /// root.
    pub fn kernel_path(&self, name: &str) -> String {
        format!("/{}", self.dir.join(name).strip_prefix(&self.root).unwrap().display())
    }

    /// Removes the child cgroup `name`, once the processes that ran in it have been reaped.
    pub fn remove(&self, name: &str) {
        remove_dir(&self.dir.join(name)).unwrap_or_else(|e| panic!("removing cgroup {name}: {e}"));
    }

    /// Starts `command` in the child cgroup `name`: the forked child moves itself into it
    /// (writing 0 to its `cgroup.procs`) before it execs.
    pub fn spawn_in(&self, name: &str, command: &mut Command) -> Child {
        let procs = File::options()
            .write(true)
            .open(self.dir.join(name).join("cgroup.procs"))
            .unwrap_or_else(|e| panic!("opening cgroup {name}'s cgroup.procs: {e}"));
        let fd = procs.as_raw_fd();
        // SAFETY: the hook only calls write(2), which is async-signal-safe, on a descriptor the
        // parent keeps open until the child has execed (spawn returns after the exec).
        unsafe {
            command.pre_exec(move || {
                if libc::write(fd, b"0".as_ptr().cast(), 1) == 1 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            });
        }
        command.spawn().unwrap_or_else(|e| panic!("starting a process in cgroup {name}: {e}"))
    }
}

impl Drop for TestCgroups {
    fn drop(&mut self) {
        let mut dirs = Vec::new();
        subtree(&self.dir, &mut dirs);
        // cgroup.kill (v5.14 on) kills the whole subtree at once; before it, each process.
        let kill = self.dir.join("cgroup.kill");
        if !(kill.exists() && fs::write(&kill, "1").is_ok()) {
            for dir in &dirs {
                let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    // SAFETY: kill(2) on a pid read from a cgroup of the test's own.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        // The deepest first: a cgroup with children cannot be removed.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in dirs {
            if let Err(e) = remove_dir(&dir) {
                eprintln!("leaving cgroup {}: {e}", dir.display());
            }
        }
    }
}

/// `dir` and every cgroup under it.
fn subtree(dir: &Path, found: &mut Vec<PathBuf>) {
    found.push(dir.to_owned());
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            subtree(&entry.path(), found);
        }
    }
}

/// Removes a cgroup, waiting (5 s at most) while it is busy: a killed process leaves its cgroup
/// a little after the signal.
fn remove_dir(dir: &Path) -> io::Result<()> {
    let started = Instant::now();
    loop {
        match fs::remove_dir(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && started.elapsed() < BUSY_FOR => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            done => return done,
        }
    }
}

const BUSY_FOR: Duration = Duration::from_secs(5);
