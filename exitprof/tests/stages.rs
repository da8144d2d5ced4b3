//! Stages cut every exit alike: the same kernel work lands in the same stage whatever happened
//! to the exit on the way (preempted or not), so that each stage's figures are over the exits
//! that ran its code.

use std::collections::HashMap;

use serde_json::Value;

use crate::support::{c_program, num, require_root, run_json};

/// Exits of one run, one of them preempted in its teardown and the others not, in tracepoint
/// mode (where the points are tracepoints whose firing may depend on the exit's path): no kernel
/// function is covered by two stages. Since v6.16 `x86_fpu_dropped` fires only for an exit not
/// switched out since it left user space; bounding a stage, it put the preempted exit's
/// `exit_mm` in one stage and the others' in another.
#[test]
fn a_preempted_exit_is_cut_into_the_stages_of_the_others() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spun");
    let program = c_program("fifo_preempt");
    // The child is preempted as its exit enters exit_mm (by construction: the program fails
    // otherwise); the program's own exit and its spinner thread's are not held.
    let args = [
        "--attach",
        "tracepoint",
        "--",
        program.to_str().unwrap(),
        "128",
        "30",
        out.to_str().unwrap(),
    ];
    let doc = run_json(&args);
    assert_eq!(num(&doc, "exits_recorded"), 3.0, "{}", doc["losses"]);
    let stages = doc["stages"].as_array().unwrap();
    let mut covered_by: HashMap<&str, Vec<&str>> = HashMap::new();
    for stage in &stages[1..] {
        for work in stage["covers"].as_array().unwrap().iter().filter_map(Value::as_str) {
            covered_by.entry(work).or_default().push(stage["name"].as_str().unwrap());
        }
    }
    let table: Vec<String> = stages
        .iter()
        .map(|s| format!("{} ({} exits): {}", s["name"], s["count"], s["covers"]))
        .collect();
    let twice: Vec<String> = covered_by
        .iter()
        .filter(|(_, stages)| stages.len() > 1)
        .map(|(work, stages)| format!("{work} in {stages:?}"))
        .collect();
    assert!(
        twice.is_empty(),
        "kernel work in more than one stage: {}\n{}",
        twice.join("; "),
        table.join("\n")
    );
}
