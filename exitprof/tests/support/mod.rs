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

/// Runs exitprof with `args --json`, requires success, and parses the document.
pub fn run_json(args: &[&str]) -> Value {
    let out = exitprof().args(args).arg("--json").output().expect("exitprof starts");
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
