//! The threads storm end to end on the running kernel: every exit recorded, none lost, latencies
//! plausible, stages summing to the exit, blocks traced to their kernel stacks.

use crate::support::{c_program, num, require_root, run_json};

#[test]
fn small_threads_storm_records_every_exit() {
    require_root();
    let doc = run_json(&["--workload", "threads", "--threads", "50", "--reps", "4"]);
    let expected = num(&doc, "exits_expected");
    let recorded = num(&doc, "exits_recorded");
    let lost = num(&doc, "lost");
    assert_eq!(expected, 200.0, "50 threads x 4 reps");
    assert_eq!(recorded, expected, "expected {expected} exits, recorded {recorded}, lost {lost}");
    assert_eq!(lost, 0.0, "losses: {}", doc["losses"]);

    let user = num(&doc, "user_s");
    let sys = num(&doc, "sys_s");
    assert!(user + sys > 0.0, "the storm used no CPU time? user {user} sys {sys}");
    assert!(num(&doc, "elapsed_s") > 0.0);

    let stages = doc["stages"].as_array().expect("stages list");
    let exit = &stages[0];
    assert_eq!(exit["name"], "exit", "the whole exit comes first");
    assert_eq!(num(exit, "count"), recorded);
    let (min, max) = (num(exit, "min_ns"), num(exit, "max_ns"));
    assert!(min > 0.0, "an exit took no time: min {min} ns");
    assert!(max < 1e9, "an exit took over a second: max {max} ns");
    for key in ["mean_ns", "p50_ns", "p90_ns", "p99_ns"] {
        let v = num(exit, key);
        assert!(v > 0.0 && v < 1e9, "exit {key} = {v} ns");
    }
}

#[test]
fn stages_sum_to_the_whole_exit() {
    require_root();
    let doc = run_json(&["--threads", "100", "--reps", "3", "--stagger-us", "0"]);
    let stages = doc["stages"].as_array().expect("stages list");
    // Two stages at least: tracepoint mode has two from v6.16 (`x86_fpu_dropped` bounds none).
    assert!(stages.len() >= 3, "expected the exit and at least two stages: {stages:#?}");
    let exit_total = num(&stages[0], "total_ns");
    let stage_total: f64 = stages[1..].iter().map(|s| num(s, "total_ns")).sum();
    // Totals are exact integer nanoseconds: the stages partition every exit.
    assert_eq!(stage_total, exit_total, "stages sum to {stage_total} ns, exits to {exit_total} ns");
    for s in &stages[1..] {
        assert!(num(s, "count") > 0.0, "empty stage listed: {s}");
    }
}

/// Exits that block by construction (their tracer holds each at its exit stop): all of their
/// blocked time is in "blocked in" when stacks are on, in stacks of the wait, and none is
/// when they are off, though the blocked time is measured either way.
#[test]
fn blocked_exits_are_traced_to_kernel_stacks_unless_stacks_are_off() {
    const EXITS: f64 = 3.0;
    require_root();
    let program = c_program("exit_stop");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("held");
    for stacks in [true, false] {
        let mut args = vec!["--"];
        if !stacks {
            args.insert(0, "--no-block-stacks");
        }
        args.extend([program.to_str().unwrap(), "20", "3", out.to_str().unwrap()]);
        let doc = run_json(&args);
        let hold = measured_hold(&out);
        let blocked = num(&doc, "blocked_ns");
        assert!(blocked >= EXITS * hold, "{blocked} ns blocked, the holds were {hold} ns each");
        let blocked_in = doc["blocked_in"].as_array().expect("blocked_in");
        if !stacks {
            assert!(blocked_in.is_empty(), "stacks off, yet {blocked_in:?}");
            continue;
        }
        let in_rows: f64 = blocked_in.iter().map(|b| num(b, "est_ns")).sum();
        let unwalked = num(&doc, "blocked_unwalked_ns");
        assert!(
            (in_rows + unwalked - blocked).abs() <= 1e-6 * blocked,
            "rows hold {in_rows} ns and {unwalked} ns were not walked, of {blocked} ns blocked"
        );
        let ptrace: f64 = blocked_in
            .iter()
            .filter(|b| b["stack"][0] == "ptrace_stop")
            .map(|b| num(b, "est_ns"))
            .sum();
        assert!(
            ptrace >= EXITS * hold,
            "{ptrace} ns in ptrace_stop of {blocked} ns: {blocked_in:?}"
        );
        for b in blocked_in {
            let frames: Vec<&str> =
                b["stack"].as_array().unwrap().iter().filter_map(|f| f.as_str()).collect();
            assert!(!frames.is_empty(), "an empty stack: {b}");
            assert!(!frames.contains(&"__schedule"), "scheduler frames are left out: {frames:?}");
        }
    }
}

/// The hold exit_stop measured.
fn measured_hold(path: &std::path::Path) -> f64 {
    let text = std::fs::read_to_string(path).unwrap();
    text.trim().strip_prefix("hold_ns=").and_then(|v| v.parse().ok()).expect("hold_ns=")
}
