//! Helpers shared by exitprof's integration tests. They run the real binary, which loads real
//! eBPF programs into the running kernel: root is required, and CI runs them as root.

#![allow(dead_code, reason = "each test binary uses its own subset of these helpers")]

use std::process::{Command, Output};

use serde_json::Value;

/// Fails the test, loudly, when not root: these tests must not silently pass without a kernel.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test loads eBPF programs and must run as root: use `cargo xtask test`"
    );
}

/// The exitprof binary under test.
pub fn exitprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_exitprof"))
}

/// Runs exitprof with `args` and returns its output, whatever the status.
pub fn run(args: &[&str]) -> Output {
    exitprof().args(args).output().expect("exitprof starts")
}

/// Runs exitprof with `args` and `--json`, requires success, and parses the document.
pub fn run_json(args: &[&str]) -> Value {
    // --json right after the subcommand, if any: everything after `--` belongs to the command
    // being profiled.
    let subcommand = usize::from(args.first().is_some_and(|a| !a.starts_with('-')));
    let (head, rest) = args.split_at(subcommand);
    let out = exitprof().args(head).arg("--json").args(rest).output().expect("exitprof starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exitprof {args:?} failed ({}):\n{stderr}", out.status);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "exitprof {args:?} printed no JSON document ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A numeric field of a JSON object, as f64.
pub fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number {key} in {v}"))
}

/// A running `exitprof --json ...` that watches processes (--pid, --comm, --all).
pub struct Watcher {
    child: std::process::Child,
    stderr: std::sync::mpsc::Receiver<String>,
    args: Vec<String>,
}

impl Watcher {
    /// Starts exitprof with `--json args` and returns once it says it is watching.
    pub fn start(args: &[&str]) -> Self {
        use std::io::BufRead as _;
        let mut child = exitprof()
            .arg("--json")
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("exitprof starts");
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut watcher =
            Self { child, stderr: rx, args: args.iter().map(|s| s.to_string()).collect() };
        let line = watcher.next_line_containing("watching");
        eprintln!("{line}");
        watcher
    }

    /// Waits (30 s at most) for a line of stderr containing `needle`; returns it.
    pub fn next_line_containing(&mut self, needle: &str) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.stderr.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(line) => seen.push(line),
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        panic!(
            "exitprof {:?} never printed {needle:?}; stderr so far:\n{}",
            self.args,
            seen.join("\n")
        );
    }

    /// Sends `signal` to exitprof.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling our own child, which is not reaped before `finish`.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Waits for exitprof to end; requires success and returns its JSON document.
    pub fn finish(self) -> Value {
        let out = self.child.wait_with_output().expect("exitprof runs");
        let rest: Vec<String> = self.stderr.try_iter().collect();
        assert!(
            out.status.success(),
            "exitprof {:?} failed ({}):\n{}",
            self.args,
            out.status,
            rest.join("\n")
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("exitprof {:?} printed no JSON document ({e})", self.args))
    }
}
