//! Which exits are which: thread exits (a thread of a process that lives on) and process exits
//! (the last or only thread) reported apart, and a thread that execs (the kernel's de_thread
//! gives it the leader's pid) recorded as the exits that really happen.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::support::{
    KilledOnDrop, Watcher, attach_mode, c_program, exitprof, num, require_root, run_json,
};

/// `by_kind` as (kind, exits) pairs.
fn kinds(doc: &Value) -> Vec<(String, f64)> {
    doc["by_kind"]
        .as_array()
        .expect("by_kind")
        .iter()
        .map(|k| (k["kind"].as_str().expect("kind").to_owned(), num(k, "exits")))
        .collect()
}

#[test]
fn storms_are_thread_exits_or_process_exits() {
    require_root();
    let threads = run_json(&["--threads", "50", "--reps", "2"]);
    assert_eq!(kinds(&threads), [("thread".to_owned(), 100.0)], "{}", threads["by_kind"]);
    let forks = run_json(&["--workload", "fork", "--count", "64"]);
    assert_eq!(kinds(&forks), [("process".to_owned(), 64.0)], "{}", forks["by_kind"]);
}

#[test]
fn a_command_with_threads_has_both_kinds_each_with_its_stages() {
    require_root();
    let program = c_program("threads_then_exit");
    let doc = run_json(&["--", program.to_str().unwrap(), "8"]);
    assert_eq!(num(&doc, "exits_recorded"), 9.0, "8 threads and the process");
    assert_eq!(num(&doc, "lost"), 0.0, "{}", doc["losses"]);
    assert_eq!(
        kinds(&doc),
        [("thread".to_owned(), 8.0), ("process".to_owned(), 1.0)],
        "{}",
        doc["by_kind"]
    );
    for kind in doc["by_kind"].as_array().unwrap() {
        let stages = kind["stages"].as_array().unwrap();
        assert_eq!(num(&stages[0], "count"), num(kind, "exits"), "{kind}");
        assert!(stages.len() > 1, "{} exits have no stages: {kind}", kind["kind"]);
    }
}

#[test]
fn a_thread_that_execs_does_not_take_over_the_leaders_record() {
    require_root();
    let program = c_program("thread_execs");
    let doc = run_json(&["--", program.to_str().unwrap(), "/bin/true"]);
    // The old leader dies in de_thread (a thread exit: its process lives on as /bin/true), and
    // the process ends when /bin/true does.
    assert_eq!(num(&doc, "exits_recorded"), 2.0, "{}", doc["by_kind"]);
    assert_eq!(num(&doc, "lost"), 0.0, "{}", doc["losses"]);
    assert_eq!(num(&doc["losses"], "stale_records"), 0.0, "{}", doc["losses"]);
    assert_eq!(
        kinds(&doc),
        [("thread".to_owned(), 1.0), ("process".to_owned(), 1.0)],
        "{}",
        doc["by_kind"]
    );
    assert_eq!(num(&doc, "truncated"), 0.0);
}

/// The leader exits first; then another thread executes a shell that runs three commands. The
/// shell is the same process, the target still: five exits (the leader's, three commands', the
/// shell's), where the new program's walk up its ancestry once reached exitprof, which is not
/// followed, and lost the shell and all it started without a count.
#[test]
fn a_program_executed_after_its_leader_exited_is_followed_with_all_it_starts() {
    require_root();
    let program = c_program("leader_exits_then_execs");
    let script = "/bin/true; /bin/true; /bin/true; :";
    let doc = run_json(&["--", program.to_str().unwrap(), "/bin/sh", "-c", script]);
    assert_eq!(num(&doc, "exits_recorded"), 5.0, "{}", doc["by_kind"]);
    assert_eq!(num(&doc, "lost"), 0.0, "{}", doc["losses"]);
    assert_eq!(
        kinds(&doc),
        [("thread".to_owned(), 1.0), ("process".to_owned(), 4.0)],
        "{}",
        doc["by_kind"]
    );
}

/// Depth of a process chain: more generations than the kernel side walks up.
const DEEP: u32 = 100;

/// Watching every exit, a process deeper than the ancestry walk is neither lost nor "not known
/// to be followed": only exitprof's own exits are left out, and those are known at once.
#[test]
fn watching_all_exits_counts_none_of_a_deep_tree_as_unknown() {
    require_root();
    let watcher = Watcher::start(&["--all", "--duration", "3"]);
    let status = Command::new(c_program("deep_tree"))
        .arg(DEEP.to_string())
        .status()
        .expect("deep_tree runs");
    assert!(status.success(), "deep_tree {DEEP} failed: {status}");
    let doc = watcher.finish();
    assert_eq!(num(&doc["losses"], "follow_unknown"), 0.0, "{}", doc["losses"]);
    assert_eq!(num(&doc, "lost"), 0.0, "{}", doc["losses"]);
    let recorded = num(&doc, "exits_recorded");
    assert!(recorded >= f64::from(DEEP), "{recorded} exits recorded, the chain alone made {DEEP}");
}

/// Watching exits by name, an exit of another name is not the target, whatever its ancestry: a
/// chain deeper than the walk up the ancestry beside it is neither recorded nor lost (it was
/// counted "not known to be followed"), and its own name's exits are all recorded.
#[test]
fn watching_by_name_counts_no_exit_of_another_name_as_lost() {
    require_root();
    let name = format!("xn{}", std::process::id());
    let watcher = Watcher::start(&["--comm", &name, "--duration", "3"]);
    let status = Command::new(c_program("deep_tree"))
        .arg(DEEP.to_string())
        .status()
        .expect("deep_tree runs");
    assert!(status.success(), "deep_tree {DEEP} failed: {status}");
    // Three exits of the name watched: a program's name is its file's.
    let dir = tempfile::tempdir().unwrap();
    let named = dir.path().join(&name);
    std::os::unix::fs::symlink("/bin/true", &named).unwrap();
    for _ in 0..3 {
        assert!(Command::new(&named).status().expect("true runs").success());
    }
    let doc = watcher.finish();
    assert_eq!(num(&doc["losses"], "follow_unknown"), 0.0, "{}", doc["losses"]);
    assert_eq!(num(&doc, "lost"), 0.0, "{}", doc["losses"]);
    assert_eq!(num(&doc, "exits_recorded"), 3.0, "{}", doc["losses"]);
}

/// A chain of `depth` processes whose deepest runs `sh -c "echo ready && SCRIPT"` (its stdin a
/// pipe of the test's), once that says it is there.
fn waiting_chain(depth: u32, script: &str) -> KilledOnDrop {
    let chain = Command::new(c_program("deep_tree"))
        .args([&depth.to_string(), "/bin/sh", "-c", &format!("echo ready && {script}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("deep_tree starts");
    let mut chain = KilledOnDrop::new(chain);
    let mut ready = String::new();
    BufReader::new(chain.child().stdout.take().unwrap()).read_line(&mut ready).unwrap();
    assert_eq!(ready, "ready\n", "the chain's deepest process");
    chain
}

/// The target's chain of [`DEEP`] processes recorded whole, and no other exit recorded nor lost.
fn only_the_deep_chain_recorded(doc: &Value) {
    let losses = &doc["losses"];
    assert_eq!(num(losses, "follow_unknown"), 0.0, "{losses}");
    assert_eq!(num(doc, "lost"), 0.0, "{losses}");
    assert_eq!(num(doc, "exits_recorded"), f64::from(DEEP), "{}", doc["by_kind"]);
}

/// Watching a process (`--pid`), exits are told followed or not however deep their tree: a
/// chain deeper than the walk up the ancestry that runs beside it is neither recorded nor lost
/// (it was counted "not known to be followed"), and a chain as deep that the watched process
/// starts is recorded whole. Both are born during the run: their following is decided as they
/// are created.
#[test]
fn watching_a_process_decides_deep_chains_born_during_the_run() {
    require_root();
    let deep = c_program("deep_tree");
    // The watched process waits for a line, then becomes the top of a chain of DEEP processes.
    let script = format!("read go && exec {} {DEEP}", deep.display());
    let target = Command::new("/bin/sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .spawn()
        .expect("sh starts");
    let mut target = KilledOnDrop::new(target);
    let pid = target.id().to_string();
    let watcher = Watcher::start(&["--attach", &attach_mode(), "--pid", &pid]);
    let status = Command::new(&deep).arg(DEEP.to_string()).status().expect("deep_tree runs");
    assert!(status.success(), "the unrelated deep_tree {DEEP} failed: {status}");
    target.child().stdin.take().unwrap().write_all(b"go\n").unwrap();
    let status = target.take().wait().unwrap();
    assert!(status.success(), "the watched deep_tree {DEEP} failed: {status}");
    // The watched chain's every process, and none of the other chain's.
    only_the_deep_chain_recorded(&watcher.finish());
}

/// A workload is marked before it creates anything, so every exit is decided: a chain deeper
/// than the walk up the ancestry made before exitprof started, which ends while the workload
/// runs, is neither recorded nor lost (it was counted "not known to be followed"), and the
/// workload's own chain as deep is recorded whole.
#[test]
fn a_workload_neither_records_nor_loses_a_deep_chain_older_than_it() {
    require_root();
    let mut chain = waiting_chain(DEEP, "read go");
    // The workload says it runs, waits (in shell builtins: no process of its own) for the other
    // chain to end, and becomes a chain of DEEP processes.
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let script = format!(
        ": > {}; while [ -e /proc/{} ]; do :; done; exec {} {DEEP}",
        started.display(),
        chain.id(),
        c_program("deep_tree").display()
    );
    let profiled = exitprof()
        .args(["--json", "--attach", &attach_mode(), "--", "/bin/sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("exitprof starts");
    let profiled = KilledOnDrop::new(profiled);
    let deadline = Instant::now() + Duration::from_secs(90);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the workload never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    chain.child().stdin.take().unwrap().write_all(b"go\n").unwrap();
    let status = chain.take().wait().unwrap();
    assert!(status.success(), "the unrelated deep_tree {DEEP} failed: {status}");
    let out = profiled.take().wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exitprof failed: {stderr}");
    only_the_deep_chain_recorded(&serde_json::from_slice(&out.stdout).expect("a JSON document"));
}

/// A process deeper than the walk up the ancestry below the watched one, and there before the
/// run (so not decided as it was created), whose exits cannot be told followed or not (refused,
/// counted lost), where a thread execs: the kernel's de_thread ends the leader and, before the
/// leader's last points, gives it the execing thread's pid. Each exit is counted once: the
/// leader's refusal, by its pid before the exec, is still its own after it.
#[test]
fn a_refused_leader_whose_pid_an_exec_takes_is_lost_once() {
    require_root();
    // The chain's deepest process waits for a line, and execs thread_execs.
    let script = format!("read go && exec {} /bin/true", c_program("thread_execs").display());
    let mut chain = waiting_chain(80, &script);
    let top = chain.id().to_string();
    let watcher = Watcher::start(&["--attach", &attach_mode(), "--pid", &top]);
    chain.child().stdin.take().unwrap().write_all(b"go\n").unwrap();
    let status = chain.take().wait().unwrap();
    assert!(status.success(), "deep_tree 80 failed: {status}");
    let doc = watcher.finish();
    // The chain's 79 processes that exit, the leader the exec ends, and /bin/true's process.
    let exits = 79.0 + 2.0;
    let (recorded, lost) = (num(&doc, "exits_recorded"), num(&doc, "lost"));
    let losses = &doc["losses"];
    assert_eq!(recorded + lost, exits, "{recorded} recorded + {lost} lost: {losses}");
    assert_eq!(num(losses, "follow_unknown"), lost, "{losses}");
    assert!(lost >= 2.0, "the leader and /bin/true were not deeper than the walk: {losses}");
    assert_eq!(num(&doc["diagnostics"], "stale_refusals"), 0.0, "{}", doc["diagnostics"]);
}
