//! The compat eBPF object (for kernels without task storage in tracing programs, `bpf_loop`,
//! BPF `cmpxchg`, `bpf_get_current_task_btf` or `sched_switch`'s `prev_state`), forced on the
//! running kernel: it accounts every exit, and measures what the default object measures.

use std::process::Command;

use serde_json::Value;

use crate::support::{attach_mode, c_program, exitprof, num, require_root};

/// `exitprof --json ARGS` in the attach mode under test, with the compat object forced or not.
fn run(args: &[&str], compat: bool) -> Value {
    let mut cmd: Command = exitprof();
    cmd.args(["--json", "--attach", &attach_mode()]).args(args);
    if compat {
        cmd.env("EXITPROF_COMPAT", "1");
    } else {
        cmd.env_remove("EXITPROF_COMPAT");
    }
    let out = cmd.output().expect("exitprof starts");
    assert!(
        out.status.success(),
        "exitprof {args:?} (compat {compat}) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("a JSON document");
    // Unforced, the kernel's own choice: the compat object too where it lacks what the default
    // one needs (5.10 to 5.17).
    if compat {
        assert_eq!(doc["object"]["name"], "compat", "{}", doc["object"]);
    }
    doc
}

#[test]
fn the_compat_object_accounts_every_exit_and_stages_sum_to_it() {
    require_root();
    let doc = run(&["--threads", "1000", "--reps", "4", "--stagger-us", "0"], true);
    assert_eq!(doc["object"]["follow"], "pid_hash");
    let (expected, recorded, lost) =
        (num(&doc, "exits_expected"), num(&doc, "exits_recorded"), num(&doc, "lost"));
    // Nothing here may lose an exit: the ring buffer holds the whole storm's records, and the
    // storm's threads, whose pids run in turn, never want the same slots (4,096 for 1,000
    // threads). Each loss would be the compat object's own: a slot claimed twice, a mark not
    // found, an exit counted at two points.
    assert_eq!((recorded, lost), (expected, 0.0), "losses: {}", doc["losses"]);
    let stages = doc["stages"].as_array().unwrap();
    let exit_total = num(&stages[0], "total_ns");
    let stage_total: f64 = stages[1..].iter().map(|s| num(s, "total_ns")).sum();
    let truncated = num(&doc, "truncated");
    assert!(
        truncated > 0.0 || (stage_total - exit_total).abs() <= 1_000.0 * recorded,
        "stages sum to {stage_total} ns, the exits to {exit_total} ns"
    );
}

/// Exits held by their tracer, profiled with each object in turn: the same stage blamed, the
/// same off-CPU share there, the same place named. The hold (100 ms) dwarfs what the probes
/// themselves cost an exit under emulation (milliseconds, more with the compat object's helper
/// reads), and the share compared is the held stage's, where that cost does not land.
#[test]
fn the_compat_object_measures_what_the_default_one_does() {
    require_root();
    let program = c_program("exit_stop");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("held");
    let args = ["--", program.to_str().unwrap(), "100", "3", out.to_str().unwrap()];
    let (default, compat) = (run(&args, false), run(&args, true));
    let held = |doc: &Value| {
        let stage = &doc["blocked_in"][0]["stage"];
        let row = doc["stages"].as_array().unwrap().iter().find(|s| s["name"] == *stage);
        let row = row.unwrap_or_else(|| panic!("no stage {stage} in {}", doc["stages"]));
        num(row, "off_cpu_share")
    };
    assert!(
        (held(&default) - held(&compat)).abs() <= 0.05,
        "the held stage is {:.3} off-CPU with the default object, {:.3} with the compat one",
        held(&default),
        held(&compat)
    );
    for doc in [&default, &compat] {
        assert_eq!(num(doc, "exits_recorded"), 4.0, "{}", doc["losses"]);
        // `ptrace_stop.part.0` where the compiler split it (6.1).
        let frame = doc["blocked_in"][0]["stack"][0].as_str().unwrap_or_default();
        assert!(frame.split('.').next() == Some("ptrace_stop"), "{}", doc["blocked_in"]);
    }
    assert_eq!(default["blocked_in"][0]["stage"], compat["blocked_in"][0]["stage"]);
}

/// The tests' switch that makes the default object one the kernel rejects for real: loading it
/// loads with it a program no verifier accepts.
const REJECT_DEFAULT: &str = "EXITPROF_TEST_REJECT_DEFAULT";

/// A default object the kernel rejects as it loads (on RHEL 9's backported 5.14, a kernel can
/// pass the probes that choose it and fail the verifier): the compat object is loaded instead,
/// and the plan, the run's warning and its document say so and why; every exit is accounted.
/// Where the kernel chooses the compat object itself (5.10), there is no default object to
/// reject: the switch changes nothing.
#[test]
fn a_default_object_the_kernel_rejects_falls_back_to_the_compat_one() {
    require_root();
    let plan = |reject: bool| -> Value {
        let mut cmd: Command = exitprof();
        cmd.args(["plan", "--json"]).env_remove("EXITPROF_COMPAT");
        if reject {
            cmd.env(REJECT_DEFAULT, "1");
        } else {
            cmd.env_remove(REJECT_DEFAULT);
        }
        let out = cmd.output().expect("exitprof starts");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("a JSON plan")
    };
    let chosen = plan(false)["object"].clone();
    let rejected = plan(true)["object"].clone();
    let mut cmd: Command = exitprof();
    cmd.args(["--json", "--attach", &attach_mode(), "--threads", "100", "--reps", "2"]);
    let out = cmd.env_remove("EXITPROF_COMPAT").env(REJECT_DEFAULT, "1").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("a JSON document");
    let (expected, recorded, lost) =
        (num(&doc, "exits_expected"), num(&doc, "exits_recorded"), num(&doc, "lost"));
    assert_eq!(recorded + lost, expected, "{}", doc["losses"]);
    if chosen["name"] == "compat" {
        eprintln!("this kernel loads the compat object itself: {chosen}");
        assert_eq!((&rejected, &doc["object"]), (&chosen, &chosen), "{stderr}");
        return;
    }
    assert_eq!(chosen["name"], "default", "{chosen}");
    let why = "the default object, which the kernel rejected: program rejected_by_the_verifier: \
               infinite loop detected";
    for (what, object) in [("plan", &rejected), ("run", &doc["object"])] {
        assert_eq!(object["name"], "compat", "{what}: {object}");
        let missing = object["missing"].as_array().unwrap();
        assert!(
            missing.len() == 1 && missing[0].as_str().unwrap().starts_with(why),
            "{what}: {object}"
        );
    }
    assert!(stderr.contains("loading the compat object instead"), "{stderr}");
    eprintln!("loaded instead: {}", doc["object"]["missing"][0]);
}
