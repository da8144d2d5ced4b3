//! The A/B conditions on the running kernel, driven through the hidden `exitprof __condition`
//! command: the taskstats listener counts real exit messages, and `kernel.task_delayacct` is
//! restored after a normal end, SIGINT, SIGTERM and (by the next run) SIGKILL.

use std::{
    fs,
    process::{Child, Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::support::{KilledOnDrop, exitprof, require_root};

const DELAYACCT: &str = "/proc/sys/kernel/task_delayacct";
/// Where a run keeps the original value while it holds the sysctl.
const DELAYACCT_RECORD: &str = "/run/exitprof/task_delayacct.original";

/// Runs `exitprof __condition ARGS`; returns its output, its JSON report (the last line of
/// stdout) and the stdout before it (the command's own output).
fn hold(args: &[&str]) -> (Output, Value, String) {
    let out = exitprof().arg("__condition").args(args).output().expect("exitprof starts");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exitprof __condition {args:?}: {}\n{stderr}", out.status);
    let (before, report) = split_report(&stdout);
    (out, report, before)
}

fn split_report(stdout: &str) -> (String, Value) {
    let trimmed = stdout.trim_end();
    let (before, last) = trimmed.rsplit_once('\n').unwrap_or(("", trimmed));
    let report = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("no JSON report as the last line ({e}):\n{stdout}"));
    (before.to_owned(), report)
}

fn u64_at(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer).and_then(Value::as_u64).unwrap_or_else(|| panic!("no {pointer} in {v}"))
}

/// A threads storm as a plain child process: exitprof's own workload, without a gate.
fn threads_storm(threads: u32, reps: u32) -> Vec<String> {
    let exe = exitprof().get_program().to_string_lossy().into_owned();
    [&exe, "__workload", "threads", "--stagger-us", "0"]
        .map(str::to_owned)
        .into_iter()
        .chain(["--threads".into(), threads.to_string(), "--reps".into(), reps.to_string()])
        .collect()
}

/// Holds the listener around a threads storm; returns the report and the storm's tgid.
fn listen_to_storm(rcvbuf: &str, threads: u32, reps: u32) -> (Value, u64) {
    let storm = threads_storm(threads, reps);
    let mut args = vec!["taskstats-listener", "on", "--rcvbuf", rcvbuf, "--"];
    args.extend(storm.iter().map(String::as_str));
    let (_, report, _) = hold(&args);
    let tgid = u64_at(&report, "/child/pid");
    assert_eq!(report["child"]["exit_code"], 0, "the storm failed: {report}");
    (report, tgid)
}

#[test]
fn the_listener_receives_every_exit_of_a_threads_storm() {
    require_root();
    let (report, tgid) = listen_to_storm("4194304", 50, 4);
    let listener = &report["listener"];
    // Every thread and the main thread exit once; the main thread is the last of the group.
    let tasks = u64_at(listener, &format!("/by_tgid/{tgid}/tasks"));
    let groups = u64_at(listener, &format!("/by_tgid/{tgid}/group_records"));
    assert_eq!(tasks, 50 * 4 + 1, "expected 201 exit messages for the storm, got {tasks}");
    assert_eq!(groups, 1, "expected the storm's one thread-group record, got {groups}");
    assert_eq!(u64_at(listener, "/enobufs"), 0, "{listener}");
    assert_eq!(u64_at(listener, "/errors"), 0, "{listener}");
    let messages = u64_at(listener, "/messages");
    assert!(messages >= tasks, "{messages} messages in all, fewer than the storm's {tasks}");
    // A taskstats message carries a whole struct taskstats (hundreds of bytes).
    let bytes = u64_at(listener, "/bytes");
    assert!(bytes > 300 * messages, "{bytes} bytes for {messages} messages");
    // The kernel doubles the buffer size asked for.
    assert_eq!(u64_at(listener, "/rcvbuf"), 2 * 4194304, "{listener}");
}

#[test]
fn a_receive_buffer_above_rmem_max_is_forced() {
    require_root();
    let rmem_max: u64 = fs::read_to_string("/proc/sys/net/core/rmem_max")
        .expect("net.core.rmem_max")
        .trim()
        .parse()
        .unwrap();
    let asked = (2 * rmem_max).min(i32::MAX as u64 / 2);
    assert!(asked > rmem_max, "net.core.rmem_max {rmem_max} leaves no room above it");
    let (_, report, _) =
        hold(&["taskstats-listener", "on", "--rcvbuf", &asked.to_string(), "--", "true"]);
    let granted = u64_at(&report, "/listener/rcvbuf");
    assert_eq!(granted, 2 * asked, "asked {asked} (rmem_max {rmem_max}), granted {granted}");
}

#[test]
fn a_tiny_receive_buffer_overflows_and_says_so() {
    require_root();
    let (report, tgid) = listen_to_storm("1", 1000, 10);
    let listener = &report["listener"];
    let expected = 1000 * 10 + 1;
    let received =
        listener.pointer(&format!("/by_tgid/{tgid}/tasks")).and_then(Value::as_u64).unwrap_or(0);
    let enobufs = u64_at(listener, "/enobufs");
    assert!(
        enobufs > 0,
        "a {}-byte buffer kept up with a 10000-thread storm: {received} of {expected} received",
        u64_at(listener, "/rcvbuf")
    );
    assert!(received < expected, "{received} of {expected} received despite {enobufs} ENOBUFS");
    assert_eq!(u64_at(listener, "/errors"), 0, "{listener}");
}

fn delayacct() -> bool {
    match fs::read_to_string(DELAYACCT).expect("kernel.task_delayacct").trim() {
        "0" => false,
        "1" => true,
        other => panic!("{DELAYACCT} holds {other:?}"),
    }
}

fn side(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

/// The sysctl's value for `on`.
fn digit(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

/// Puts kernel.task_delayacct back as the test found it and removes any record, however the
/// test ends.
struct DelayacctRestore(bool);

impl DelayacctRestore {
    fn new() -> Self {
        require_root();
        Self(delayacct())
    }
}

impl Drop for DelayacctRestore {
    fn drop(&mut self) {
        fs::write(DELAYACCT, digit(self.0)).expect("restoring delayacct");
        let _ = fs::remove_file(DELAYACCT_RECORD);
    }
}

/// `exitprof __condition delayacct SIDE` holding until signalled; killed if the test fails.
struct Holder(KilledOnDrop);

impl Holder {
    /// Starts the hold and waits until the sysctl shows it.
    fn start(on: bool) -> Self {
        let child = exitprof()
            .args(["__condition", "delayacct", side(on)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("exitprof starts");
        let mut holder = Holder(KilledOnDrop::new(child));
        let started = Instant::now();
        while delayacct() != on {
            if let Some(status) = holder.child().try_wait().unwrap() {
                panic!("the hold ended before it set delayacct {}: {status}", side(on));
            }
            assert!(started.elapsed() < Duration::from_secs(10), "delayacct never became {on}");
            thread::sleep(Duration::from_millis(10));
        }
        holder
    }

    fn child(&mut self) -> &mut Child {
        self.0.child()
    }

    fn signal(&mut self, signal: i32) {
        // SAFETY: signalling our own child, not yet reaped.
        assert_eq!(unsafe { libc::kill(self.child().id() as i32, signal) }, 0);
    }

    fn wait(self) -> Output {
        self.0.take().wait_with_output().expect("waiting for exitprof")
    }
}

#[test]
fn delayacct_is_set_while_held_and_restored_after() {
    let original = DelayacctRestore::new();
    for on in [true, false] {
        let (_, report, during) = hold(&["delayacct", side(on), "--", "cat", DELAYACCT]);
        assert_eq!(during.trim(), digit(on), "delayacct while held `{}`: {report}", side(on));
        assert_eq!(delayacct(), original.0, "delayacct not restored after `{}`", side(on));
        assert!(fs::metadata(DELAYACCT_RECORD).is_err(), "{DELAYACCT_RECORD} left behind");
    }
}

#[test]
fn sigint_and_sigterm_restore_delayacct() {
    let original = DelayacctRestore::new();
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let mut holder = Holder::start(!original.0);
        holder.signal(signal);
        let out = holder.wait();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + signal), "signal {signal}: {stderr}");
        assert_eq!(delayacct(), original.0, "signal {signal} left delayacct changed: {stderr}");
        let (_, report) = split_report(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(report["interrupted"], signal, "{report}");
        assert!(fs::metadata(DELAYACCT_RECORD).is_err(), "{DELAYACCT_RECORD} left behind");
    }
}

#[test]
fn after_sigkill_the_next_run_restores_delayacct() {
    let original = DelayacctRestore::new();
    let mut holder = Holder::start(!original.0);
    holder.signal(libc::SIGKILL);
    let out = holder.wait();
    assert_eq!(out.status.code(), None, "exitprof survived SIGKILL?");
    assert_eq!(delayacct(), !original.0, "a killed run cannot restore anything");
    let record = fs::read_to_string(DELAYACCT_RECORD).expect("the killed run's record");
    assert_eq!(record.trim(), digit(original.0), "the killed run's record");

    let out = exitprof()
        .args(["__condition", "delayacct", side(!original.0), "--", "true"])
        .output()
        .expect("exitprof starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(stderr.contains("ended without restoring it"), "no word of the leftover:\n{stderr}");
    assert_eq!(delayacct(), original.0, "the next run did not restore the original");
    assert!(fs::metadata(DELAYACCT_RECORD).is_err(), "{DELAYACCT_RECORD} left behind");
}

#[test]
fn two_runs_cannot_hold_delayacct_at_once() {
    let original = DelayacctRestore::new();
    let mut holder = Holder::start(!original.0);
    let out = Command::new(exitprof().get_program())
        .args(["__condition", "delayacct", side(original.0), "--", "true"])
        .output()
        .expect("exitprof starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "the second run: {stderr}");
    assert!(stderr.contains("another exitprof run is holding"), "{stderr}");
    assert_eq!(delayacct(), !original.0, "the second run changed the sysctl");
    holder.signal(libc::SIGINT);
    let out = holder.wait();
    assert_eq!(out.status.code(), Some(128 + libc::SIGINT));
    assert_eq!(delayacct(), original.0);
}
