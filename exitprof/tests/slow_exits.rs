//! Slow exits as they happen (`--slower-than`) and one by one from a record (`report
//! --slowest`, `report --exit`): among a thousand fast exits, three slow ones of known cause,
//! each named by it.

use serde_json::Value;

use crate::support::{c_program, exitprof, measured, require_root};

/// Above any of the fast exits here (a `/bin/true` takes some 100 µs), below each slow one.
const THRESHOLD: &str = "40ms";
/// How long the FUSE server holds the flush, and the tracer the exit stop.
const HOLD_MS: &str = "200";
/// The teardown: some 100 ms of unmapping on this machine.
const TEARDOWN_MIB: &str = "1024";

/// 1,000 fast exits, then a FUSE flush held 200 ms, a tracer's exit stop held 200 ms and a
/// 1 GiB teardown, in one recorded run under `--slower-than 40ms --json`: exactly those three
/// are printed, each with its cause named (the flush's and the exit stop's stacks, the
/// teardown's chain of calls); every line is JSON; the record shows them again, and one exit's
/// blocks add up to its time off the CPU.
#[test]
fn three_slow_exits_among_a_thousand_fast_ones_are_printed_with_their_cause() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let mountpoint = dir.path().join("fuse");
    std::fs::create_dir(&mountpoint).unwrap();
    let (fuse, stop, teardown) =
        (c_program("fuse_flush"), c_program("exit_stop"), c_program("mm_teardown"));
    let script = format!(
        "i=0; while [ $i -lt 1000 ]; do /bin/true; i=$((i+1)); done; \
         {fuse} {mnt} {HOLD_MS} 1 {dir}/fuse.out && {stop} {HOLD_MS} 1 {dir}/stop.out && \
         {teardown} {TEARDOWN_MIB} 1",
        fuse = fuse.display(),
        stop = stop.display(),
        teardown = teardown.display(),
        mnt = mountpoint.display(),
        dir = dir.path().display()
    );
    let record = dir.path().join("slow.rec");
    let out = exitprof()
        .args(["record", "-o"])
        .arg(&record)
        .args(["--slower-than", THRESHOLD, "--json", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    let (slow, rest): (Vec<&Value>, Vec<&Value>) =
        lines.iter().partition(|l| l["event"] == "slow_exit");
    let doc = rest.last().expect("the run's document, last");
    assert_eq!(rest.len(), 1, "lines that are neither a slow exit nor the document: {rest:?}");
    let recorded = doc["exits_recorded"].as_u64().unwrap();
    assert!(recorded >= 1_000, "{recorded} exits recorded");
    let describe = |e: &Value| {
        format!("{} {} {}: {}", e["process_comm"], e["pid"], e["duration_ns"], e["cause"])
    };
    let listed: Vec<String> = slow.iter().map(|e| describe(e)).collect();
    eprintln!("{} slow of {recorded} exits:\n{}", slow.len(), listed.join("\n"));
    assert_eq!(slow.len(), 3, "{listed:#?}");
    let of = |comm: &str| -> &Value {
        slow.iter().find(|e| e["process_comm"] == comm).unwrap_or_else(|| panic!("{listed:#?}"))
    };
    let frames = |e: &Value, key: &str| -> Vec<String> {
        let list = e["cause"][key].as_array().unwrap_or_else(|| panic!("{}", describe(e)));
        list.iter().map(|f| f.as_str().unwrap().to_owned()).collect()
    };
    let (flush, exit_stop, mm) = (of("fuse_flush"), of("exit_stop"), of("mm_teardown"));
    // Each wait is the one its program held, to the block.
    let held = |out: &str, e: &Value| {
        let hold = measured(&dir.path().join(out), "hold_ns");
        let blocked = e["cause"]["stack_ns"].as_f64().unwrap_or_default();
        assert!(blocked >= hold && blocked < hold * 1.5, "held {hold} ns: {}", describe(e));
    };
    assert_eq!(flush["cause"]["kind"], "blocked", "{}", describe(flush));
    held("fuse.out", flush);
    assert!(frames(flush, "stack").iter().any(|f| f == "fuse_flush"), "{}", describe(flush));
    assert_eq!(exit_stop["cause"]["kind"], "blocked", "{}", describe(exit_stop));
    held("stop.out", exit_stop);
    assert!(
        frames(exit_stop, "stack").iter().any(|f| f.starts_with("ptrace_")),
        "{}",
        describe(exit_stop)
    );
    assert_eq!(mm["cause"]["kind"], "computed", "{}", describe(mm));
    let teardown_code = ["exit_mmap", "unmap_vmas", "unmap_page_range"];
    assert!(
        frames(mm, "chain").iter().any(|f| teardown_code.contains(&f.as_str())),
        "{}",
        describe(mm)
    );

    // The record lists the same three as its slowest.
    let report = |args: &[&str]| -> Value {
        let out = exitprof().arg("report").arg(&record).args(args).arg("--json").output().unwrap();
        assert!(out.status.success(), "report {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let slowest = report(&["--slowest", "3"]);
    let pids = |exits: &[&Value]| {
        let mut pids: Vec<u64> = exits.iter().map(|e| e["pid"].as_u64().unwrap()).collect();
        pids.sort_unstable();
        pids
    };
    let listed_by_report: Vec<&Value> = slowest["exits"].as_array().unwrap().iter().collect();
    assert_eq!(pids(&listed_by_report), pids(&slow));

    // One exit's timeline: its blocks, each with its stack and length, add up with the time it
    // waited for a CPU to its time off the CPU.
    let pid = flush["ns_pid"].as_u64().unwrap().to_string();
    let timeline = report(&["--exit", &pid]);
    let exit = &timeline["exits"][0];
    let blocks: Vec<&Value> = exit["blocked"].as_array().unwrap().iter().collect();
    assert!(!blocks.is_empty(), "{exit}");
    let blocked: u64 = blocks.iter().map(|b| b["ns"].as_u64().unwrap()).sum();
    let (off, runq) = (exit["off_cpu_ns"].as_u64().unwrap(), exit["runq_ns"].as_u64().unwrap());
    assert_eq!(exit["unwalked_blocked_ns"], 0, "{exit}");
    assert!(
        (blocked + runq).abs_diff(off) <= off / 100,
        "blocks {blocked} + runnable {runq} against off-CPU {off}: {exit}"
    );
    assert!(blocks.iter().all(|b| !b["stack"].as_array().unwrap().is_empty()), "{exit}");
    let text = exitprof().arg("report").arg(&record).args(["--exit", &pid]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("fuse_flush") && text.contains("blocks: "), "{text}");
}
