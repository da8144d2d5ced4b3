//! Bad input fails before anything is attached, with a clear message and the right status.

mod support;

use std::process::Command;

use support::{exitprof, require_root, run};

fn assert_usage_error(args: &[&str], mentions: &str) {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "exitprof {args:?}: status {}; stderr:\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains(mentions),
        "exitprof {args:?}: stderr does not mention {mentions:?}:\n{stderr}"
    );
    assert!(out.stdout.is_empty(), "exitprof {args:?} printed a report");
}

#[test]
fn zero_threads_is_a_usage_error() {
    assert_usage_error(&["--threads", "0"], "--threads");
}

#[test]
fn negative_reps_is_a_usage_error() {
    assert_usage_error(&["--reps", "-1"], "--reps");
}

#[test]
fn unknown_workload_is_a_usage_error() {
    assert_usage_error(&["--workload", "forkbomb"], "forkbomb");
}

#[test]
fn without_capabilities_it_names_what_is_missing() {
    require_root();
    // Root with an empty bounding set has no capabilities after exec.
    let out = Command::new("setpriv")
        .args(["--bounding-set", "-all", "--"])
        .arg(exitprof().get_program())
        .args(["--threads", "5", "--reps", "1"])
        .output()
        .expect("setpriv (util-linux) runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "status {}; stderr:\n{stderr}", out.status);
    assert!(stderr.contains("CAP_BPF") && stderr.contains("CAP_PERFMON"), "stderr:\n{stderr}");
    assert!(out.stdout.is_empty(), "a report was printed without privileges");
}
