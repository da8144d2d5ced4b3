//! Bad input fails before anything is attached, with a clear message and the right status.

use std::process::Command;

use crate::support::{exitprof, require_root, run};

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

/// A request the machine cannot satisfy: status 2, a message naming the problem, and nothing
/// loaded or attached (with -v exitprof logs every attach).
fn assert_refused_before_attaching(args: &[&str], mentions: &str) {
    require_root();
    let mut with_verbose = vec!["-v"];
    with_verbose.extend_from_slice(args);
    assert_usage_error(&with_verbose, mentions);
    let stderr = String::from_utf8_lossy(&run(&with_verbose).stderr).into_owned();
    assert!(!stderr.contains("attach"), "exitprof {args:?} got as far as attaching:\n{stderr}");
}

#[test]
fn threads_beyond_threads_max_are_refused() {
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/threads-max")
        .expect("kernel.threads-max")
        .trim()
        .parse()
        .expect("a number");
    let threads = (max + 1).to_string();
    assert_refused_before_attaching(&["--threads", &threads, "--reps", "1"], "threads-max");
}

#[test]
fn an_unknown_command_is_refused() {
    assert_refused_before_attaching(&["--", "exitprof-no-such-command", "x"], "command not found");
    let data = std::env::temp_dir().join(format!("exitprof-not-a-program-{}", std::process::id()));
    std::fs::write(&data, "data\n").unwrap();
    let path = data.to_str().unwrap().to_owned();
    assert_refused_before_attaching(&["--", &path], "not an executable file");
    std::fs::remove_file(&data).unwrap();
}

#[test]
fn a_pid_that_does_not_exist_is_refused() {
    // A pid that existed a moment ago and has been reaped.
    let mut child = Command::new("true").spawn().expect("true runs");
    let pid = child.id().to_string();
    child.wait().unwrap();
    assert_refused_before_attaching(&["--pid", &pid, "--duration", "1"], "no such process");
}

#[test]
fn a_pid_that_is_a_thread_is_refused_naming_its_process() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        let _ = stopped.recv();
    });
    let tid = rx.recv().unwrap().to_string();
    let process = std::process::id();
    assert_refused_before_attaching(
        &["--pid", &tid, "--duration", "1"],
        &format!(
            "--pid {tid} is a thread of process {process}, not a process: use --pid {process}"
        ),
    );
    stop.send(()).unwrap();
    thread.join().unwrap();
}

#[test]
fn a_stagger_beyond_a_minute_of_sleep_is_refused() {
    assert_refused_before_attaching(
        &["--threads", "1000", "--stagger-us", "100000", "--reps", "1"],
        "the longest sleep, threads x stagger, is at most 60 s",
    );
}

#[test]
fn an_unreachable_rate_is_refused_with_the_rate_measured() {
    assert_refused_before_attaching(&["--rate", "1000000000"], "reached at most");
}

#[test]
fn options_of_another_target_are_usage_errors() {
    assert_usage_error(
        &["--count", "5"],
        "--count applies to --workload fork, ipcns and netns only",
    );
    assert_usage_error(&["--workload", "fork", "--all"], "--all");
    assert_usage_error(&["--comm", "a-name-of-more-than-15-bytes"], "15 bytes");
}

#[test]
fn without_capabilities_every_command_names_what_is_missing() {
    require_root();
    let delayacct = || std::fs::read_to_string("/proc/sys/kernel/task_delayacct").unwrap();
    let before = delayacct();
    for args in [
        &["--threads", "5", "--reps", "1"][..],
        &["plan"],
        &["compare", "--toggle", "delayacct", "--runs", "1", "--threads", "5", "--reps", "1"],
    ] {
        // Root with an empty bounding set has no capabilities after exec.
        let out = Command::new("setpriv")
            .args(["--bounding-set", "-all", "--"])
            .arg(exitprof().get_program())
            .args(args)
            .output()
            .expect("setpriv (util-linux) runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: status {}; stderr:\n{stderr}",
            out.status
        );
        assert!(
            stderr.contains("lacks CAP_BPF and CAP_PERFMON") && stderr.contains("Run it as root"),
            "{args:?}: stderr:\n{stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: a report was printed without privileges");
        assert_eq!(delayacct(), before, "{args:?} changed kernel.task_delayacct");
    }
}
