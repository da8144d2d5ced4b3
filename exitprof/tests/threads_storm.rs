//! The threads storm end to end on the running kernel: every exit recorded, none lost, latencies
//! plausible, stages summing to the exit, blocks traced to their kernel stacks.

use crate::support::{num, require_root, run_json};

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
    assert!(stages.len() >= 4, "expected the exit and at least three stages: {stages:#?}");
    let exit_total = num(&stages[0], "total_ns");
    let stage_total: f64 = stages[1..].iter().map(|s| num(s, "total_ns")).sum();
    // Totals are exact integer nanoseconds: the stages partition every exit.
    assert_eq!(stage_total, exit_total, "stages sum to {stage_total} ns, exits to {exit_total} ns");
    for s in &stages[1..] {
        assert!(num(s, "count") > 0.0, "empty stage listed: {s}");
    }
}

#[test]
fn blocked_exits_are_traced_to_kernel_stacks_unless_stacks_are_off() {
    require_root();
    for stacks in [true, false] {
        let mut args = vec!["--threads", "300", "--reps", "2", "--stagger-us", "0"];
        if !stacks {
            args.push("--no-block-stacks");
        }
        let doc = run_json(&args);
        let blocked_in = doc["blocked_in"].as_array().expect("blocked_in");
        if !stacks {
            assert!(blocked_in.is_empty(), "stacks off, yet {blocked_in:?}");
            continue;
        }
        let exit = &doc["stages"][0];
        if num(exit, "off_cpu_share") - num(exit, "runq_share") == 0.0 {
            continue; // no exit blocked: nothing to trace
        }
        assert!(!blocked_in.is_empty(), "exits blocked, but no stack was taken");
        let share: f64 = blocked_in.iter().map(|b| num(b, "share")).sum();
        assert!((share - 1.0).abs() < 1e-9, "shares add up to {share}");
        let exits: f64 = blocked_in.iter().map(|b| num(b, "exits")).sum();
        assert!(exits <= num(&doc, "exits_recorded"), "{exits} blocked exits");
        for b in blocked_in {
            let frames: Vec<&str> =
                b["stack"].as_array().unwrap().iter().filter_map(|f| f.as_str()).collect();
            assert!(!frames.is_empty(), "an empty stack: {b}");
            assert!(!frames.contains(&"__schedule"), "scheduler frames are left out: {frames:?}");
        }
    }
}
