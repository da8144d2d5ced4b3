//! The scenarios run in every guest: exitprof's arguments and what its `--json` document must
//! show on a kernel that has kprobes and fentry.
//!
//! To add one, add a row to [`SCENARIOS`] with a check function; the guest runs the rows in
//! order, one exitprof process each. The checks compose: [`threads_storm`] holds in every attach
//! mode, [`functions_timed`] where functions are probed (kprobe, fentry), [`attached_by`] where
//! one mode is expected.

use std::fmt::Display;

use serde_json::Value;

/// One exitprof run in the guest.
#[derive(Clone)]
pub struct Scenario {
    /// Names the run in the guest's report and the summary: `[a-z0-9-]+`.
    pub name: &'static str,
    /// exitprof's arguments.
    pub args: &'static [&'static str],
    /// Checks the parsed `--json` document.
    pub check: fn(&Value, &mut Checks),
    /// A file the run writes that the guest sends back: a record.
    pub sends: Option<&'static str>,
}

/// Where the recorded storm's run keeps its record in the guest.
pub const RECORD: &str = "/tmp/threads.rec";

/// The recorded storm: the run the [kernel diff](super::kernel_diff) compares across kernels.
pub const RECORDED: &str = "threads-record";

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "plan",
        args: &["plan", "--json"],
        check: |doc, c| {
            // free_ipc_ns is inlined on Debian's 6.1 and 6.12: the plan resolves it to free_ipc.
            resolved_to(doc, c, "free_ipc_ns", "free_ipc");
            architecture(doc, c);
        },
        sends: None,
    },
    Scenario {
        name: "threads-auto",
        args: &["--threads", "20", "--reps", "3", "--json"],
        check: |doc, c| {
            threads_storm(doc, c, 20 * 3);
            functions_timed(doc, c);
            // Both test kernels load fentry programs, which auto mode prefers.
            attached_by(doc, c, "fentry");
        },
        sends: None,
    },
    Scenario {
        name: "threads-kprobe",
        args: &["--attach", "kprobe", "--threads", "20", "--reps", "3", "--json"],
        check: |doc, c| {
            threads_storm(doc, c, 20 * 3);
            functions_timed(doc, c);
            attached_by(doc, c, "kprobe");
        },
        sends: None,
    },
    Scenario {
        name: "threads-fentry",
        args: &["--attach", "fentry", "--threads", "20", "--reps", "3", "--json"],
        check: |doc, c| {
            threads_storm(doc, c, 20 * 3);
            functions_timed(doc, c);
            attached_by(doc, c, "fentry");
        },
        sends: None,
    },
    Scenario {
        name: "ipcns-kprobe",
        args: &["--attach", "kprobe", "--workload", "ipcns", "--count", "64", "--json"],
        check: |doc, c| {
            storm(doc, c, 64);
            every_namespace_freed(doc, c, 64);
            attached_by(doc, c, "kprobe");
        },
        sends: None,
    },
    Scenario {
        name: "ipcns-fentry",
        args: &["--attach", "fentry", "--workload", "ipcns", "--count", "64", "--json"],
        check: |doc, c| {
            storm(doc, c, 64);
            every_namespace_freed(doc, c, 64);
            attached_by(doc, c, "fentry");
        },
        sends: None,
    },
    Scenario {
        name: "compare-kprobe",
        args: &[
            "compare",
            "--toggle",
            "taskstats-listener",
            "--runs",
            "2",
            "--attach",
            "kprobe",
            "--threads",
            "20",
            "--reps",
            "2",
            "--json",
        ],
        check: |doc, c| compared_with_listener(doc, c, 2, 40),
        sends: None,
    },
    Scenario {
        name: "threads-tracepoint",
        args: &["--attach", "tracepoint", "--threads", "20", "--reps", "3", "--json"],
        check: |doc, c| threads_storm(doc, c, 20 * 3),
        sends: None,
    },
    // As a user records a kernel: the default attach mode. A few thousand exits, 500 threads at
    // a time, are tens of seconds under emulation.
    Scenario {
        name: RECORDED,
        args: &["record", "-o", RECORD, "--threads", "500", "--reps", "4", "--json"],
        check: |doc, c| {
            threads_storm(doc, c, 500 * 4);
            functions_timed(doc, c);
            attached_by(doc, c, "fentry");
        },
        sends: Some(RECORD),
    },
];

/// What a check found: mismatches (expected vs got) and the key figures for the summary.
#[derive(Default)]
pub struct Checks {
    pub failures: Vec<String>,
    pub figures: Vec<String>,
}

impl Checks {
    #[expect(
        clippy::needless_pass_by_value,
        reason = "the checks pass numbers and string slices, moved as cheaply as borrowed"
    )]
    pub fn equal<T: PartialEq + Display>(&mut self, what: &str, expected: T, got: T) {
        if expected != got {
            self.failures.push(format!("{what}: expected {expected}, got {got}"));
        }
    }

    pub fn fail(&mut self, failure: String) {
        self.failures.push(failure);
    }

    pub fn figure(&mut self, figure: String) {
        self.figures.push(figure);
    }

    /// An unsigned integer field, or a failure naming it.
    fn uint(&mut self, v: &Value, key: &str) -> u64 {
        v[key].as_u64().unwrap_or_else(|| {
            self.fail(format!("{key}: expected an unsigned integer, got {}", v[key]));
            0
        })
    }
}

/// Functions the stage table must time on its own on kernels where they can be probed.
/// Each is one function under the names kernels give it: `exit_task_namespaces` is
/// `exit_nsproxy_namespaces` from 7.x on.
const FUNCTION_STAGES: &[&[&str]] = &[
    &["exit_signals"],
    &["taskstats_exit"],
    &["exit_files"],
    &["exit_fs"],
    &["exit_task_namespaces", "exit_nsproxy_namespaces"],
];

/// Inlined work that must show up as a gap stage of its own between the probed functions.
const GAP_WORK: &str = "exit_mm";

/// A threads storm of `exits` exits: every exit recorded, none lost, the stages partitioning the
/// exit.
fn threads_storm(doc: &Value, c: &mut Checks, exits: u64) {
    storm(doc, c, exits);
}

/// A storm of `exits` exits: every exit recorded, none lost, the stages partitioning the exit.
fn storm(doc: &Value, c: &mut Checks, exits: u64) {
    let expected = c.uint(doc, "exits_expected");
    let recorded = c.uint(doc, "exits_recorded");
    let lost = c.uint(doc, "lost");
    c.equal("exits_expected", exits, expected);
    c.equal("exits_recorded", exits, recorded);
    c.equal("lost", 0, lost);
    c.figure(format!("exits {recorded}/{expected}, lost {lost}"));

    let stages = doc["stages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let Some((exit, parts)) = stages.split_first() else {
        c.fail(format!("stages: expected the exit and its stages, got {}", doc["stages"]));
        return;
    };
    c.equal("stages[0].name", "exit", exit["name"].as_str().unwrap_or_default());
    let timed = c.uint(exit, "count");
    c.equal("stages[0].count (exits timed)", recorded, timed);
    let exit_total = c.uint(exit, "total_ns");
    let parts_total: u64 = parts.iter().map(|s| c.uint(s, "total_ns")).sum();
    c.equal("sum of the stages' total_ns (the exit's total_ns)", exit_total, parts_total);
    c.figure(format!("{} stages", parts.len()));
    let p50 = c.uint(exit, "p50_ns");
    c.figure(format!("exit p50 {}", micros(p50)));
}

/// The functions of [`FUNCTION_STAGES`] are timed as stages of their own (function probes:
/// kprobe or fentry modes).
fn functions_timed(doc: &Value, c: &mut Checks) {
    let stages = doc["stages"].as_array().map(Vec::as_slice).unwrap_or_default();
    // The first is the whole exit.
    let names: Vec<&str> = stages.iter().skip(1).filter_map(|s| s["name"].as_str()).collect();
    for function in FUNCTION_STAGES {
        if !function.iter().any(|f| names.contains(f)) {
            c.fail(format!("stages: expected one named {}, got {names:?}", function.join(" or ")));
        }
    }
    if !names.iter().any(|n| n.split('+').any(|part| part == GAP_WORK)) {
        c.fail(format!("stages: expected a gap stage covering {GAP_WORK}, got {names:?}"));
    }
}

/// Every IPC namespace the storm created was freed by `free_ipc` runs and joined to its exit.
fn every_namespace_freed(doc: &Value, c: &mut Checks, namespaces: u64) {
    let ipc = &doc["deferred"]["ipc"];
    let runs = c.uint(ipc, "runs");
    let freed = c.uint(ipc, "namespaces_freed");
    let joined = c.uint(ipc, "namespaces_joined");
    c.equal("deferred.ipc.namespaces_freed", namespaces, freed);
    c.equal("deferred.ipc.namespaces_joined", namespaces, joined);
    if runs == 0 {
        c.fail("deferred.ipc.runs: expected free_ipc runs, got 0".to_owned());
    }
    c.figure(format!("{freed} namespaces freed in {runs} free_ipc runs, {joined} joined"));
}

/// A `compare --toggle taskstats-listener --json` document: both sides profiled with
/// `runs` runs of `exits` exits each, a taskstats_exit stage on both, listener messages counted.
fn compared_with_listener(doc: &Value, c: &mut Checks, runs: u64, exits: u64) {
    for side in ["on", "off"] {
        let s = &doc[side];
        let measured = s["runs"].as_array().map_or(0, Vec::len) as u64;
        c.equal(&format!("{side}.runs"), runs, measured);
        c.equal(&format!("{side}.exits_recorded"), runs * exits, c_uint(s, "exits_recorded"));
        let names: Vec<&str> = s["stages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["name"].as_str())
            .collect();
        if !names.contains(&"taskstats_exit") {
            c.fail(format!("{side}.stages: expected taskstats_exit, got {names:?}"));
        }
    }
    let messages = doc["listener"]["messages_per_run"]["median"].as_f64().unwrap_or(0.0);
    if messages < exits as f64 {
        c.fail(format!("listener.messages_per_run: expected at least {exits}, got {messages}"));
    }
    let deltas = doc["stage_deltas"]["stages"].as_array().map_or(0, Vec::len);
    c.figure(format!("listener {messages} messages/run, {deltas} stage deltas"));
}

fn c_uint(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// In a `plan --json` document, `point` is planned and attached to `target`.
fn resolved_to(doc: &Value, c: &mut Checks, point: &str, target: &str) {
    let points = doc["points"].as_array().map(Vec::as_slice).unwrap_or_default();
    match points.iter().find(|p| p["point"] == point) {
        Some(p) => {
            c.equal(&format!("{point} attached to"), target, p["target"].as_str().unwrap_or(""));
            c.figure(format!("{point} -> {} ({})", p["target"], p["how"]));
        }
        None => c.fail(format!("plan: expected {point} among the planned points, got {doc}")),
    }
}

/// A `plan --json` document names the architecture exitprof was built for; on arm64 the x86
/// FPU marker is left out as x86's. The figures say what the kernel offers.
fn architecture(doc: &Value, c: &mut Checks) {
    let arch = doc["arch"]["name"].as_str().unwrap_or_default();
    if !["x86_64", "aarch64"].contains(&arch) {
        c.fail(format!("arch.name: expected x86_64 or aarch64, got {}", doc["arch"]));
    }
    if arch == "aarch64" {
        let unavailable = doc["unavailable"].as_array().map(Vec::as_slice).unwrap_or_default();
        let fpu = unavailable.iter().find(|u| u["point"] == "x86_fpu_dropped");
        let reason = fpu.and_then(|u| u["reason"].as_str()).unwrap_or_default();
        if !reason.starts_with("x86 only") {
            c.fail(format!("x86_fpu_dropped on arm64: expected \"x86 only\", got {fpu:?}"));
        }
    }
    let offered =
        |mode: &str| doc[mode].as_str().map_or("?", |s| if s == "yes" { "yes" } else { "no" });
    c.figure(format!("{arch}, kprobes {}, fentry {}", offered("kprobes"), offered("fentry")));
}

/// Every function probe is attached with `how` (fentry or kprobe); markers may be tracepoints.
fn attached_by(doc: &Value, c: &mut Checks, how: &str) {
    let probes = doc["probes"].as_array().map(Vec::as_slice).unwrap_or_default();
    if probes.is_empty() {
        c.fail(format!("probes: expected a list of attached probes, got {}", doc["probes"]));
    }
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for probe in probes {
        let got = probe["how"].as_str().unwrap_or_default();
        match counts.iter_mut().find(|(h, _)| *h == got) {
            Some((_, n)) => *n += 1,
            None => counts.push((got, 1)),
        }
        let is_tracepoint = got.ends_with("tracepoint");
        if !is_tracepoint && got != how {
            c.fail(format!("probe {}: expected {how}, got {got}", probe["point"]));
        }
    }
    let points: Vec<&str> = probes.iter().filter_map(|p| p["point"].as_str()).collect();
    if !points.contains(&"do_exit") {
        c.fail(format!("probes: expected do_exit among them, got {points:?}"));
    }
    let counts: Vec<String> = counts.iter().map(|(h, n)| format!("{h} {n}")).collect();
    c.figure(format!("probes {}", counts.join(" + ")));
}

fn micros(ns: u64) -> String {
    format!("{:.1} µs", ns as f64 / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(recorded: u64, stage_totals: &[(&str, u64)]) -> Value {
        let exit_total: u64 = 100;
        let mut stages = vec![serde_json::json!({
            "name": "exit", "count": recorded, "total_ns": exit_total, "p50_ns": 1500,
        })];
        stages.extend(
            stage_totals.iter().map(|(n, t)| serde_json::json!({"name": n, "total_ns": t})),
        );
        serde_json::json!({
            "exits_expected": 60, "exits_recorded": recorded, "lost": 60 - recorded,
            "stages": stages,
            "probes": [{"point": "do_exit", "how": "fentry"}, {"point": "final switch", "how": "btf_tracepoint"}],
        })
    }

    #[test]
    fn a_complete_storm_passes() {
        let stages = [
            ("exit_signals", 10),
            ("taskstats_exit", 20),
            ("exit_mm+acct_process", 0),
            ("exit_files", 30),
            ("exit_fs", 40),
            ("exit_task_namespaces", 0),
        ];
        let mut c = Checks::default();
        threads_storm(&doc(60, &stages), &mut c, 60);
        functions_timed(&doc(60, &stages), &mut c);
        attached_by(&doc(60, &stages), &mut c, "fentry");
        assert!(c.failures.is_empty(), "{:?}", c.failures);
        assert_eq!(
            c.figures,
            [
                "exits 60/60, lost 0",
                "6 stages",
                "exit p50 1.5 µs",
                "probes fentry 1 + btf_tracepoint 1"
            ]
        );
    }

    #[test]
    fn a_function_renamed_by_a_newer_kernel_is_found_under_its_new_name() {
        let stages = [
            ("exit_signals", 10),
            ("taskstats_exit", 20),
            ("exit_mm", 0),
            ("exit_files", 30),
            ("exit_fs", 40),
            ("exit_nsproxy_namespaces", 0),
        ];
        let mut c = Checks::default();
        functions_timed(&doc(60, &stages), &mut c);
        assert!(c.failures.is_empty(), "{:?}", c.failures);
    }

    #[test]
    fn mismatches_print_both_sides() {
        let mut c = Checks::default();
        let stages = [("exit_signals", 10), ("exit_files", 30)];
        threads_storm(&doc(59, &stages), &mut c, 60);
        functions_timed(&doc(59, &stages), &mut c);
        attached_by(&doc(59, &[]), &mut c, "kprobe");
        assert_eq!(
            c.failures,
            [
                "exits_recorded: expected 60, got 59",
                "lost: expected 0, got 1",
                "sum of the stages' total_ns (the exit's total_ns): expected 100, got 40",
                "stages: expected one named taskstats_exit, got [\"exit_signals\", \"exit_files\"]",
                "stages: expected one named exit_fs, got [\"exit_signals\", \"exit_files\"]",
                "stages: expected one named exit_task_namespaces or exit_nsproxy_namespaces, got [\"exit_signals\", \"exit_files\"]",
                "stages: expected a gap stage covering exit_mm, got [\"exit_signals\", \"exit_files\"]",
                "probe \"do_exit\": expected kprobe, got fentry",
            ]
        );
    }
}
