//! Which exits are which: thread exits (a thread of a process that lives on) and process exits
//! (the last or only thread) reported apart, and a thread that execs (the kernel's de_thread
//! gives it the leader's pid) recorded as the exits that really happen.

use serde_json::Value;

use crate::support::{c_program, num, require_root, run_json};

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
