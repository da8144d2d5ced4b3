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
    for row in doc["table"].as_array().unwrap() {
        let (yes, no) = (num(&row["yes"], "median"), num(&row["no"], "median"));
        let ovhd = num(row, "ovhd_pct");
        // The seeds' formula; a baseline of 0 (user time below a clock tick) has no overhead.
        let expected = if no == 0.0 { 0.0 } else { (yes - no) / no * 100.0 };
        assert!((ovhd - expected).abs() < 1e-9, "Ovhd% of {row}");
    }
    // Every exit's stages partition it exactly, on each side; the per-exit means of the stages
    // therefore sum to the exit's up to float rounding of a few dozen additions.
    let d = &doc["stage_deltas"];
    let (exit_delta, stage_sum) =
        (num(d, "exit_delta_ns_per_exit"), num(d, "stages_delta_sum_ns_per_exit"));
    let tolerance = 1e-6 * num(d, "exit_yes_ns_per_exit").max(1.0);
    assert!(
        (exit_delta - stage_sum).abs() <= tolerance,
        "stage deltas sum to {stage_sum} ns/exit, the exit's delta is {exit_delta} ns/exit"
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
