//! `--bpf-stats`: the kernel's own count of exitprof's program runs and run time during a storm.

use serde_json::Value;

use crate::support::{num, require_root, run_json};

/// The runs of `program` in the `kernel_cost` section.
fn runs_of(cost: &Value, program: &str) -> f64 {
    let programs = cost["programs"].as_array().expect("kernel_cost.programs is a list");
    let p = programs
        .iter()
        .find(|p| p["program"] == program)
        .unwrap_or_else(|| panic!("no program {program} in {cost}"));
    num(p, "runs")
}

/// The entry programs the run attached for `points` (a return probe does not start a stage).
fn programs_of(doc: &Value, points: &[&str]) -> Vec<String> {
    let probes = doc["probes"].as_array().expect("probes is a list");
    probes
        .iter()
        .filter(|p| points.iter().any(|&point| p["point"] == point))
        .filter_map(|p| p["programs"][0].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn bpf_stats_count_the_programs_every_exit_runs() {
    require_root();
    let exits = 40.0;
    let doc = run_json(&["--bpf-stats", "--threads", "20", "--reps", "2", "--stagger-us", "0"]);
    assert_eq!(num(&doc, "exits_recorded"), exits, "losses: {}", doc["losses"]);
    let cost = &doc["kernel_cost"];
    // Whatever the mode, every exit runs a program for its start (do_exit, or the tracepoints
    // that stand in for it), sched_process_exit, and the final switch's; they fire for every
    // task on the machine, the storm's exits among them.
    for (what, points) in [
        ("the start of an exit", &["do_exit", "sys_enter_exit", "sys_enter_exit_group"][..]),
        ("sched_process_exit", &["sched_process_exit"]),
        ("the end of an exit", &["final switch"]),
    ] {
        let programs = programs_of(&doc, points);
        assert!(
            !programs.is_empty(),
            "no program attached for {what} ({points:?}): {}",
            doc["probes"]
        );
        let runs: f64 = programs.iter().map(|p| runs_of(cost, p)).sum();
        assert!(runs >= exits, "{programs:?} ran {runs} times for {exits} thread exits: {cost}");
    }
    // Each program's runs take time, and less than 100 µs each on average: a run count or a
    // time in the wrong unit shows.
    for p in cost["programs"].as_array().unwrap() {
        let (runs, run_ns) = (num(p, "runs"), num(p, "run_ns"));
        assert!(
            runs == 0.0 || (run_ns >= runs && run_ns < runs * 100_000.0),
            "{}: {runs} runs in {run_ns} ns",
            p["program"]
        );
    }
    // The totals are every attached program's, each counted once: every program of the plan's
    // points is listed, once, and the totals are their sums.
    let listed: Vec<&str> =
        cost["programs"].as_array().unwrap().iter().filter_map(|p| p["program"].as_str()).collect();
    for program in
        doc["probes"].as_array().unwrap().iter().flat_map(|p| p["programs"].as_array().unwrap())
    {
        let program = program.as_str().unwrap();
        let times = listed.iter().filter(|&&l| l == program).count();
        assert_eq!(times, 1, "{program} is listed {times} times in kernel_cost: {cost}");
    }
    let sum =
        |key: &str| cost["programs"].as_array().unwrap().iter().map(|p| num(p, key)).sum::<f64>();
    assert_eq!(sum("runs"), num(cost, "runs"), "runs: {cost}");
    assert_eq!(sum("run_ns"), num(cost, "run_ns"), "run_ns: {cost}");
    let run_ns = num(cost, "run_ns");
    assert!(run_ns > 0.0, "the programs ran for no time at all? {cost}");
    let per_exit = num(cost, "ns_per_exit");
    assert!(
        (per_exit - run_ns / exits).abs() < 1e-6 * per_exit,
        "ns_per_exit {per_exit}, run_ns / exits = {}",
        run_ns / exits
    );
}

#[test]
fn without_bpf_stats_there_is_no_kernel_cost() {
    require_root();
    let doc = run_json(&["--threads", "4", "--reps", "1"]);
    assert!(
        doc["kernel_cost"].is_null(),
        "kernel_cost without --bpf-stats: {}",
        doc["kernel_cost"]
    );
}
