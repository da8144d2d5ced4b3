//! exitprof where users run it: inside a PID namespace of its own (a container without host
//! PIDs), where the kernel's pids are not the ones exitprof sees, and in a user namespace of its
//! own, where the kernel refuses BPF and exitprof must say so.

use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{exitprof_path, num, require_root};

/// Runs `exitprof ARGS` as pid 1's child in a new PID namespace with its own /proc.
fn in_pid_namespace(script: &str) -> Output {
    Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "sh", "-c", script])
        .env("EXITPROF", exitprof_path())
        .output()
        .expect("unshare (util-linux) runs")
}

fn document(out: &Output, what: &str) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed ({}):\n{stderr}", out.status);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: no JSON document ({e}); stderr:\n{stderr}"))
}

fn assert_every_exit(doc: &Value, expected: f64, what: &str) {
    let (recorded, lost) = (num(doc, "exits_recorded"), num(doc, "lost"));
    assert_eq!(
        (recorded, lost),
        (expected, 0.0),
        "{what}: expected {expected} exits, recorded {recorded}, lost {lost}: {}",
        doc["losses"]
    );
}

#[test]
fn a_storm_in_a_pid_namespace_records_every_exit() {
    require_root();
    let out = in_pid_namespace(r#""$EXITPROF" --json --threads 100 --reps 2"#);
    let doc = document(&out, "a storm in a PID namespace");
    assert_eq!(num(&doc, "exits_expected"), 200.0);
    assert_every_exit(&doc, 200.0, "a storm in a PID namespace");
}

#[test]
fn a_command_in_a_pid_namespace_records_every_exit() {
    require_root();
    let out =
        in_pid_namespace(r#""$EXITPROF" --json -- sh -c 'for i in 1 2 3 4 5; do /bin/true; done'"#);
    let doc = document(&out, "a command in a PID namespace");
    assert_every_exit(&doc, 6.0, "the shell and its five children");
}

#[test]
fn a_pid_in_a_pid_namespace_is_watched_by_the_pid_it_has_there() {
    require_root();
    // A shell in the namespace waits on a FIFO (a builtin read: no process of its own) until
    // exitprof says it is watching, then runs three commands and exits; exitprof watches it by
    // the pid the namespace gives it and ends with it: the three commands and the shell exit.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = in_pid_namespace(&format!(
        r#"cd {dir}
           mkfifo go
           sh -c 'read x < go; for i in 1 2 3; do /bin/true; done' &
           watched=$!
           "$EXITPROF" --json --pid "$watched" 2> stderr &
           until grep -q watching stderr 2>/dev/null; do sleep 0.05; done
           echo > go
           wait $!
           cat stderr >&2
           echo "watched=$watched" >&2"#,
        dir = dir.path().display()
    ));
    let doc = document(&out, "--pid in a PID namespace");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let watched: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("watched="))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid reported:\n{stderr}"));
    assert!(watched < 100, "a pid of the new namespace is small: {watched}");
    assert_eq!(doc["workload"]["pid"].as_u64(), Some(watched), "{}", doc["workload"]);
    assert_every_exit(&doc, 4.0, "three commands and the shell");
}

#[test]
fn a_user_namespace_of_its_own_is_refused_with_a_clear_error() {
    require_root();
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user"])
        .arg(exitprof_path())
        .args(["--threads", "10", "--reps", "1", "--json"])
        .output()
        .expect("unshare (util-linux) runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "status {}; stderr:\n{stderr}", out.status);
    assert!(
        stderr.contains("user namespace of its own") && stderr.contains("CAP_BPF"),
        "stderr does not say why BPF is refused:\n{stderr}"
    );
    assert!(out.stdout.is_empty(), "refused before any report: {:?}", out.stdout);
}
