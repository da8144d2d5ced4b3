//! Slow exits as they happen (`--slower-than`) and one by one from a record (`report
//! --slowest`, `report --exit`): among a thousand fast exits, three slow ones of known cause,
//! each named by it.

use serde_json::Value;

use crate::support::{
    c_program, exitprof, joined_teardown, measured, measured_text, num, require_root,
};

/// Above any of the fast exits here (a `/bin/true` takes some 100 µs), below each slow one.
const THRESHOLD: &str = "40ms";
/// How long the FUSE server holds the flush, and the tracer the exit stop.
const HOLD_MS: &str = "200";
/// The teardown: some 100 ms of unmapping on this machine.
const TEARDOWN_MIB: &str = "1024";

/// Records `sh -c script` to `record` under `--slower-than THRESHOLD --json`: its stdout, and
/// each line of it, which must be JSON.
fn record_slow_exits(record: &std::path::Path, script: &str) -> (String, Vec<Value>) {
    let out = exitprof()
        .args(["record", "-o"])
        .arg(record)
        .args(["--slower-than", THRESHOLD, "--json", "--", "sh", "-c", script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    (stdout, lines)
}

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
    let (_, lines) = record_slow_exits(&record, &script);
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

/// Fast exits, then a killed process owning a network namespace of 256 veth pairs (its exit is
/// quick; its namespace's `cleanup_net` run takes some 100 ms here), in one recorded run under
/// `--slower-than 40ms --json`: the teardown is printed as its own line once it is joined to
/// the exit, named by the namespace's inode number and the exit's pid; its figures are those of
/// the run's joined teardown; the record's views show it with its exit.
#[test]
fn a_namespace_teardown_over_the_threshold_is_printed_when_it_is_joined() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let teardown = c_program("netns_teardown");
    let out_file = dir.path().join("teardown.out");
    let script = format!(
        "i=0; while [ $i -lt 200 ]; do /bin/true; i=$((i+1)); done; {teardown} 256 1 {out}",
        teardown = teardown.display(),
        out = out_file.display()
    );
    let record = dir.path().join("teardown.rec");
    let (stdout, lines) = record_slow_exits(&record, &script);
    let doc = lines.last().expect("the run's document, last");
    let of =
        |event: &str| -> Vec<&Value> { lines.iter().filter(|l| l["event"] == event).collect() };
    let (slow, teardowns) = (of("slow_exit"), of("slow_exit_teardown"));
    assert_eq!(slow.len() + teardowns.len() + 1, lines.len(), "{stdout}");
    let name = format!("net:[{}]", measured_text(&out_file, "victim_inum"));
    let victim: u64 = measured_text(&out_file, "victim_pid").parse().unwrap();
    let printed = teardowns
        .iter()
        .find(|t| t["namespace"] == name.as_str())
        .unwrap_or_else(|| panic!("{name}'s teardown is not printed: {stdout}"));
    eprintln!("{printed}");
    assert_eq!(printed["pid"], victim, "{printed}");
    assert_eq!((&printed["kind"], &printed["function"]), (&"net".into(), &"cleanup_net".into()));
    // Each teardown printed follows its exit's line, or took the threshold itself.
    let threshold_ns = 40e6;
    for t in &teardowns {
        let exit_printed =
            slow.iter().any(|e| e["pid"] == t["pid"] && e["start_ns"] == t["exit_start_ns"]);
        assert_eq!(t["exit_shown"], exit_printed, "{t}");
        assert!(exit_printed || num(t, "teardown_ns") >= threshold_ns, "{t}");
    }
    // Its figures are those of the run's joined teardown.
    let joined = joined_teardown(&doc["teardowns"]["net"], &name);
    for key in ["pid", "teardown_ns", "run_ns", "batch", "wait_ns", "blocked_ns", "on_cpu_ns"] {
        assert_eq!(printed[key], joined[key], "{key}: printed {printed}, joined {joined}");
    }
    let on_cpu = num(printed, "on_cpu_ns");
    let (blocked, runq) = (num(printed, "blocked_ns"), num(printed, "runq_ns"));
    assert!((on_cpu + blocked + runq - num(printed, "teardown_ns")).abs() <= 2.0, "{printed}");

    // The record shows it with its exit, in one exit's timeline and among the slowest.
    let report = |args: &[&str]| -> Value {
        let out = exitprof().arg("report").arg(&record).args(args).arg("--json").output().unwrap();
        assert!(out.status.success(), "report {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let timeline = report(&["--exit", &victim.to_string()]);
    let with_teardown: Vec<&Value> = timeline["exits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["teardowns"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(with_teardown.len(), 1, "{timeline:#}");
    for key in ["namespace", "teardown_ns", "run_ns", "wait_ns", "exit_start_ns"] {
        assert_eq!(with_teardown[0][key], printed[key], "{key}: {timeline:#}");
    }
    let all = doc["exits_recorded"].as_u64().unwrap().to_string();
    let slowest = report(&["--slowest", &all]);
    let listed = slowest["exits"].as_array().unwrap().iter().find(|e| e["pid"] == victim);
    let listed = listed.unwrap_or_else(|| panic!("pid {victim} not listed: {slowest:#}"));
    assert_eq!(listed["teardowns"][0]["namespace"], name.as_str(), "{listed}");
    let text = exitprof().arg("report").arg(&record).args(["--exit", &victim.to_string()]).output();
    let text = String::from_utf8_lossy(&text.unwrap().stdout).into_owned();
    assert!(text.contains("namespace teardowns joined to it") && text.contains(&name), "{text}");
}
