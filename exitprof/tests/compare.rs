//! `compare` and `sweep` on the running kernel: both sides measured and profiled, every run of
//! each side recorded, the stage deltas adding up to the exit's, the sweep's rows.

use serde_json::Value;

use crate::support::{num, require_root, run_json};

fn side<'a>(doc: &'a Value, name: &str) -> &'a Value {
    &doc[name]
}

#[test]
fn compare_with_the_taskstats_listener_explains_the_exit_delta() {
    require_root();
    let doc = run_json(&[
        "compare",
        "--toggle",
        "taskstats-listener",
        "--runs",
        "3",
        "--threads",
        "100",
        "--reps",
        "3",
    ]);
    for name in ["on", "off"] {
        let s = side(&doc, name);
        assert_eq!(s["runs"].as_array().map(Vec::len), Some(3), "{name}: {}", s["runs"]);
        let recorded = num(s, "exits_recorded");
        assert_eq!(recorded, 3.0 * 300.0, "{name}: expected 900 exits over 3 runs, got {recorded}");
        assert_eq!(num(s, "lost"), 0.0, "{name}: losses {}", s["losses"]);
        assert_eq!(s["stages"][0]["name"], "exit");
    }
    let table: Vec<&str> =
        doc["table"].as_array().unwrap().iter().filter_map(|r| r["metric"].as_str()).collect();
    assert_eq!(table, ["user", "sys", "elapsed"]);
    // The listener makes taskstats_exit build and send a message for every exit: the stage that
    // covers it computes more with the listener than without, more than any other stage does.
    let covering = side(&doc, "on")["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|stage| stage["covers"].as_array().unwrap().iter().any(|f| f == "taskstats_exit"))
        .map(|stage| stage["name"].clone())
        .expect("a stage covers taskstats_exit");
    let on_cpu_delta =
        |stage: &Value| num(stage, "delta_ns_per_exit") - num(stage, "off_cpu_delta_ns_per_exit");
    let deltas = doc["stage_deltas"]["stages"].as_array().unwrap();
    let most = deltas
        .iter()
        .max_by(|a, b| on_cpu_delta(a).total_cmp(&on_cpu_delta(b)))
        .expect("stage deltas");
    eprintln!(
        "on-CPU deltas per exit: {:?}",
        deltas.iter().map(|s| (&s["name"], on_cpu_delta(s))).collect::<Vec<_>>()
    );
    assert!(
        most["name"] == covering && on_cpu_delta(most) > 1000.0,
        "the listener's cost is not in {covering} (on-CPU, over 1 µs per exit): {}",
        doc["stage_deltas"]
    );
    let messages = num(&doc["listener"]["messages_per_run"], "median");
    assert!(messages >= 300.0, "the listener saw {messages} messages per run of 300 exits");
    assert!(doc["verdict"].as_str().is_some_and(|v| !v.is_empty()));
}

#[test]
fn sweep_has_a_row_per_exit_rate() {
    require_root();
    let doc = run_json(&[
        "sweep",
        "--toggle",
        "delayacct",
        "--stagger",
        "0,1,2,4,8",
        "--runs",
        "1",
        "--threads",
        "100",
        "--reps",
        "2",
    ]);
    let rows = doc["rows"].as_array().expect("rows");
    let staggers: Vec<f64> = rows.iter().map(|r| num(r, "stagger_us")).collect();
    assert_eq!(staggers, [0.0, 1.0, 2.0, 4.0, 8.0]);
    for row in rows {
        let rate = num(&row["exit_rate_off"], "median");
        assert!(rate > 0.0, "row {}: exit rate {rate}", row["stagger_us"]);
        assert_eq!(row["table"].as_array().map(Vec::len), Some(3), "{row}");
    }
}

#[test]
fn every_run_of_the_probed_side_is_recorded() {
    require_root();
    let (runs, exits_per_run) = (3, 40.0);
    let doc = run_json(&[
        "compare",
        "--toggle",
        "probes",
        "--runs",
        "3",
        "--threads",
        "20",
        "--reps",
        "2",
        "--stagger-us",
        "0",
    ]);
    let on = &doc["on"];
    assert_eq!(on["runs"].as_array().map(Vec::len), Some(runs), "{}", on["runs"]);
    assert_eq!(
        num(on, "exits_recorded"),
        runs as f64 * exits_per_run,
        "{runs} runs of {exits_per_run} exits; lost {}",
        on["losses"]
    );
    assert_eq!(num(on, "lost"), 0.0, "{}", on["losses"]);
    assert_eq!(num(&on["stages"][0], "count"), runs as f64 * exits_per_run, "the exit's histogram");
}

/// Runs of a command whose descendant's exit is held past the end of its run.
const STUCK_RUNS: usize = 3;

/// An exit held by its tracer longer than its run lasts is lost once, in the run it began in
/// (`unfinished`): it is neither counted in every later run nor recorded in the run it ends in.
#[test]
fn an_exit_stuck_across_runs_counts_once_in_its_own_run() {
    const HOLD_MS: f64 = 3000.0;
    require_root();
    let held = crate::support::c_program("exit_stop");
    // The shell waits while the tracer's child begins its exit, then ends the run.
    let script = format!("{} {HOLD_MS} 1 /dev/null & sleep 0.3", held.display());
    let runs = STUCK_RUNS.to_string();
    let doc =
        run_json(&["compare", "--toggle", "delayacct", "--runs", &runs, "--", "sh", "-c", &script]);
    for name in ["on", "off"] {
        let s = side(&doc, name);
        let unfinished = num(&s["losses"], "unfinished");
        assert_eq!(unfinished, STUCK_RUNS as f64, "{name}: one held exit per run: {}", s["losses"]);
        assert_eq!(num(s, "lost"), unfinished, "{name}: {}", s["losses"]);
        let longest = num(&s["stages"][0], "max_ns") / 1e6;
        assert!(
            longest < HOLD_MS,
            "{name}: a held exit of {longest:.0} ms was recorded in a later run"
        );
    }
}
