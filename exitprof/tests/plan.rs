//! `exitprof plan` on the running kernel: the named probes and their fallbacks.

use crate::support::{require_root, run_json};

#[test]
fn free_ipc_ns_resolves_to_its_fallback() {
    require_root();
    let doc = run_json(&["plan"]);
    let all: Vec<(&str, String)> = ["points", "unavailable"]
        .iter()
        .flat_map(|k| doc[*k].as_array().into_iter().flatten())
        .map(|p| {
            let said = [&p["target"], &p["note"], &p["reason"]]
                .iter()
                .filter_map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            (p["point"].as_str().unwrap_or(""), said)
        })
        .collect();
    // free_ipc_ns is inlined on current kernels: the plan says what it resolves to, whether it
    // can be probed here or not, and what stands in for it.
    let said_of = |point: &str| {
        all.iter()
            .filter(|(p, _)| p.starts_with(point))
            .map(|(_, s)| s.as_str())
            .collect::<Vec<_>>()
    };
    let free_ipc_ns = said_of("free_ipc_ns").join(" | ");
    assert!(free_ipc_ns.contains("free_ipc"), "free_ipc_ns: {free_ipc_ns}");
    assert!(free_ipc_ns.contains("free_ipc_ns is not a symbol"), "free_ipc_ns: {free_ipc_ns}");
    for named in ["do_exit", "taskstats_exit"] {
        assert!(!said_of(named).is_empty(), "{named} is missing from the plan: {doc}");
    }
}
