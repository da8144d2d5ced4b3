//! `exitprof plan` on the running kernel: the named probes and their fallbacks.

use crate::support::{require_root, run, run_json};

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

#[test]
fn a_forced_mode_the_kernel_lacks_fails_with_advice() {
    require_root();
    let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists();
    if kprobes {
        // This kernel has kprobes: the VM tests cover the forced modes that work.
        assert!(run(&["plan", "--attach", "kprobe"]).status.success());
        return;
    }
    let out = run(&["--attach", "kprobe", "--threads", "5", "--reps", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    assert!(stderr.contains("no kprobes"), "stderr:\n{stderr}");
    assert!(stderr.contains("--attach tracepoint"), "stderr:\n{stderr}");
    assert!(
        out.stdout.is_empty(),
        "a report was printed:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
