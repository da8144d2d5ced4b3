//! `compare`: every run of each side is recorded, not only the first.

mod support;

use serde_json::Value;
use support::{exitprof, num, require_root};

fn compare_json(args: &[&str]) -> Value {
    let out = exitprof().arg("compare").arg("--json").args(args).output().expect("exitprof starts");
    assert!(
        out.status.success(),
        "exitprof compare {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("compare prints one JSON document")
}

#[test]
fn every_run_of_the_probed_side_is_recorded() {
    require_root();
    let (runs, exits_per_run) = (3, 40.0);
    let doc = compare_json(&[
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
