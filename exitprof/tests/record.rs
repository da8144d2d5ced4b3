//! `exitprof record` and `exitprof report`: a recorded run reports what the run printed and
//! exported, and its file gives away no kernel address and is its owner's alone; a run cut short
//! records a partial one, files that cannot be read are refused with nothing written, records of
//! earlier builds still read, and the views of a record (one process's exits, each kind of exit
//! apart, one stage in detail) show what they say.

use std::{
    fs, io::Read as _, os::unix::fs::PermissionsExt as _, path::Path, process::Output,
    time::Duration,
};

use serde_json::Value;

use crate::support::{Started, c_program, file_names, num, require_root, run, run_json};

/// A record of `exitprof record -o threads-8.rec --threads 8 --reps 1 --sample-hz 20000`, kept
/// so that a change of the format that breaks files of earlier builds is caught (on-CPU samples
/// at 20 kHz name a few stacks, whose symbols it keeps). To write it anew (when the format's
/// version is raised, keep the old one and add the new), as root from the workspace:
/// `cargo run -p exitprof -- record -o exitprof/tests/data/threads-8.rec --threads 8 --reps 1
/// --sample-hz 20000 --json`, until its document has samples joined, then update what
/// `an_earlier_record_still_reads` expects of it from that document.
const EARLIER_RECORD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/threads-8.rec");

/// The same run recorded in format 2 by the build before records hid kernel addresses (its
/// stacks' frames and their symbols are the kernel's own addresses), with `--sample-hz 20000`
/// until 4 samples were joined.
const RECORD_WITH_ADDRESSES: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/threads-8-v2.rec");

/// Where the kernel's addresses begin: the top half of the address space on x86_64, and from
/// there on arm64 (48-bit or 52-bit virtual addresses).
#[cfg(target_arch = "x86_64")]
const KERNEL_SPACE: u64 = 0xffff_8000_0000_0000;
#[cfg(not(target_arch = "x86_64"))]
const KERNEL_SPACE: u64 = 0xfff0_0000_0000_0000;

/// Every value of a record's frames, once decompressed, that lies where the kernel's addresses
/// do: each 8-byte word of the raw records (their 64-bit fields lie on 8-byte boundaries; at other
/// offsets, any timestamp's low bytes after a zero field can look like one), each number of the
/// opening and the closing (JSON).
fn kernel_words(record: &Path) -> Vec<u64> {
    fn numbers(value: &Value, found: &mut Vec<u64>) {
        match value {
            Value::Number(n) => found.extend(n.as_u64().filter(|&n| n >= KERNEL_SPACE)),
            Value::Array(values) => values.iter().for_each(|v| numbers(v, found)),
            Value::Object(fields) => fields.values().for_each(|v| numbers(v, found)),
            _ => {}
        }
    }
    let bytes = fs::read(record).unwrap();
    // The magic and the format's version, then one gzip stream of frames.
    let mut contents = Vec::new();
    flate2::read::GzDecoder::new(&bytes[20..]).read_to_end(&mut contents).unwrap();
    let mut found = Vec::new();
    let mut frames = &contents[..];
    while let [kind, l0, l1, l2, l3, rest @ ..] = frames {
        let (payload, next) = rest.split_at(u32::from_le_bytes([*l0, *l1, *l2, *l3]) as usize);
        if matches!(kind, 1 | 5) {
            numbers(&serde_json::from_slice(payload).expect("a JSON frame"), &mut found);
        } else {
            let words = payload.chunks_exact(8).map(|w| u64::from_ne_bytes(w.try_into().unwrap()));
            found.extend(words.filter(|&w| w >= KERNEL_SPACE));
        }
        frames = next;
    }
    found
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

fn document(out: &Output) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "status {}; stderr:\n{stderr}", out.status);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON document on stdout ({e}); stderr:\n{stderr}"))
}

#[test]
fn a_report_of_a_record_is_what_its_run_printed_and_exported() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.rec");
    let exports = ["csv", "folded", "hlog", "json"];
    let export_args = |prefix: &str| -> Vec<String> {
        let path = |ext| format!("{}/{prefix}.{ext}", path_str(dir.path()));
        exports.iter().flat_map(|ext| ["--export".to_owned(), path(ext)]).collect()
    };
    let live_exports = export_args("live");
    // Sampled often, so that the record holds stacks to name.
    let mut args = vec!["record", "-o", path_str(&file), "--threads", "200", "--reps", "2"];
    args.extend(["--sample-hz", "20000"]);
    args.extend(live_exports.iter().map(String::as_str));
    let live = run_json(&args);
    assert_eq!(live["exits_recorded"], 400, "{}", live["losses"]);
    assert!(live["samples"]["joined"].as_u64() > Some(0), "no stack: {}", live["samples"]);
    let addresses = kernel_words(&file);
    assert!(addresses.is_empty(), "{} kernel addresses in the record", addresses.len());
    assert_eq!(mode(&file), 0o600, "the record's mode");

    let reported_exports = export_args("reported");
    let mut args = vec!["report", path_str(&file)];
    args.extend(reported_exports.iter().map(String::as_str));
    let reported = run_json(&args);
    // Every figure, exitprof's own cost and timings included: they are the run's, kept.
    assert_eq!(reported, live, "the report of the record is not the document the run printed");
    for ext in exports {
        let read = |prefix: &str| fs::read(dir.path().join(format!("{prefix}.{ext}"))).unwrap();
        assert!(read("live") == read("reported"), "the .{ext} exports differ");
        assert_eq!(mode(&dir.path().join(format!("live.{ext}"))), 0o600, ".{ext}'s mode");
    }

    let out = run(&["report", path_str(&file)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("400 recorded of 400 expected"), "{text}");
}

/// A netns storm's record reports its namespace teardowns as the run did: their joins, shares
/// and the stacks of their kworker (named from the symbols the file keeps), in the document and
/// in the exports.
#[test]
fn a_record_keeps_the_namespace_teardowns() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("netns.rec");
    let export = |prefix: &str| format!("{}/{prefix}.prom", path_str(dir.path()));
    let (live_prom, reported_prom) = (export("live"), export("reported"));
    let args = ["record", "-o", path_str(&file), "--workload", "netns", "--count", "4"];
    let mut live_args = args.to_vec();
    live_args.extend(["--veth-pairs", "32", "--export", &live_prom]);
    let live = run_json(&live_args);
    let joined = &live["teardowns"]["net"]["joined"];
    assert_eq!(joined, 4, "{:#}", live["teardowns"]);
    // The exits' network and user namespaces, and those torn down, are numbers.
    let addresses = kernel_words(&file);
    assert!(addresses.is_empty(), "{} kernel addresses in the record", addresses.len());
    let reported = run_json(&["report", path_str(&file), "--export", &reported_prom]);
    assert_eq!(reported, live, "the report of the record is not the document the run printed");
    assert_eq!(fs::read(&live_prom).unwrap(), fs::read(&reported_prom).unwrap());
    assert!(
        fs::read_to_string(&live_prom).unwrap().contains("exitprof_namespace_teardown_seconds")
    );
}

#[test]
fn a_run_cut_short_by_sigint_records_a_partial_run() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.rec");
    let args = ["record", "-o", path_str(&file), "--json", "--threads", "1000", "--reps", "1000"];
    let mut started = Started::start(&args, Duration::from_millis(300));
    assert_eq!(file_names(dir.path()).len(), 1, "no file being written mid-run");
    started.signal(libc::SIGINT);
    let out = started.finish();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let live: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(live["partial"], true);
    assert_eq!(file_names(dir.path()), ["run.rec"], "the record is not in place, or more is left");
    let reported = document(&run(&["report", "--json", path_str(&file)]));
    assert_eq!(reported, live, "the record of the partial run is not what it printed");
}

#[test]
fn an_earlier_record_still_reads() {
    let doc = document(&run(&["report", "--json", EARLIER_RECORD]));
    assert_eq!(doc["partial"], false);
    assert_eq!(doc["ended"], "workload-ended");
    assert_eq!(doc["workload"]["threads"], 8);
    assert_eq!(doc["exits_expected"], 8);
    assert_eq!(doc["exits_recorded"], 8);
    assert_eq!(doc["lost"], 0);
    assert_eq!(doc["stages"][0]["count"], 8);
    assert!(doc["probes"].as_array().is_some_and(|p| !p.is_empty()), "no probe points");
    // Figures kept as they were measured.
    assert_eq!(doc["elapsed_s"], 0.006053399);
    assert_eq!(doc["exitprof"]["peak_rss_bytes"], 40390656);
    // Stacks named from the symbols the file keeps.
    assert_eq!(doc["samples"]["joined"], 3);
    let stacks: Vec<Vec<&str>> = doc["stages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["on_cpu_in"].as_array().unwrap())
        .map(|s| s["stack"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect())
        .collect();
    assert_eq!(stacks.len(), 3, "{stacks:?}");
    assert!(stacks.iter().all(|s| s.last() == Some(&"do_exit")), "{stacks:?}");
    assert!(stacks.iter().flatten().any(|&f| f == "exit_task_stack_account"), "{stacks:?}");

    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("run.csv");
    let out = run(&["report", EARLIER_RECORD, "--export", path_str(&csv)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("8 recorded of 8 expected"));
    assert!(fs::read_to_string(&csv).unwrap().lines().count() > 1, "an empty export");
}

/// A record written before records hid kernel addresses reads as its run printed it: its frames
/// named from the kernel symbols it kept.
#[test]
fn a_record_holding_kernel_addresses_still_reads() {
    assert!(!kernel_words(Path::new(RECORD_WITH_ADDRESSES)).is_empty(), "not the earlier kind");
    let doc = document(&run(&["report", "--json", RECORD_WITH_ADDRESSES]));
    assert_eq!((&doc["exits_recorded"], &doc["lost"]), (&8.into(), &0.into()));
    assert_eq!(doc["elapsed_s"], 0.054754101);
    assert_eq!(doc["exitprof"]["peak_rss_bytes"], 41381888);
    assert_eq!(doc["samples"]["joined"], 4);
    let mut stacks: Vec<String> = doc["stages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["on_cpu_in"].as_array().unwrap())
        .map(|s| {
            let frames: Vec<&str> =
                s["stack"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
            frames.join(";")
        })
        .collect();
    stacks.sort();
    assert_eq!(
        stacks,
        [
            "_raw_spin_unlock_irqrestore;do_exit",
            "_raw_spin_unlock_irqrestore;taskstats_exit;do_exit",
            "seccomp_filter_release;do_exit",
            "switch_task_namespaces;do_exit",
        ]
    );
}

/// IPC namespaces are told apart by their numbers in the file, not their addresses: every
/// namespace the storm freed is joined to its exit in the report as in the run.
#[test]
fn ipc_namespaces_are_joined_without_their_addresses() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ipcns.rec");
    let live = run_json(&["record", "-o", path_str(&file), "--workload", "ipcns", "--count", "64"]);
    let joined = &live["deferred"]["ipc"]["namespaces_joined"];
    assert_eq!(joined, 64, "{}", live["deferred"]);
    let addresses = kernel_words(&file);
    assert!(addresses.is_empty(), "{} kernel addresses in the record", addresses.len());
    let reported = document(&run(&["report", "--json", path_str(&file)]));
    assert_eq!(reported, live, "the report of the record is not the document the run printed");
}

/// `--file-mode` gives the files exactly the mode asked for, whatever the umask.
#[test]
fn files_get_the_mode_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("run.csv");
    for (args, expected) in [(&[][..], 0o600), (&["--file-mode", "644"][..], 0o644)] {
        let out =
            run(&[&["report", EARLIER_RECORD, "--export", path_str(&csv)][..], args].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(mode(&csv), expected, "{args:?}");
    }
}

#[test]
fn files_that_cannot_be_read_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let record = fs::read(EARLIER_RECORD).unwrap();
    let mut damaged = record.clone();
    damaged[record.len() / 2] ^= 0xff;
    let mut newer = record.clone();
    newer[16..20].copy_from_slice(&1000u32.to_le_bytes());
    let cases: [(&str, &[u8], &str); 6] = [
        ("truncated.rec", &record[..record.len() / 2], "it is truncated"),
        ("cut-at-the-end.rec", &record[..record.len() - 1], "it is truncated"),
        ("damaged.rec", &damaged, "it is damaged"),
        ("newer.rec", &newer, "written by a newer exitprof, in record format 1000"),
        ("document.json", b"{\"partial\": false}\n", "it is not an exitprof record"),
        ("empty.rec", b"", "it is not an exitprof record"),
    ];
    for (name, bytes, _) in cases {
        fs::write(dir.path().join(name), bytes).unwrap();
    }
    let before = file_names(dir.path());
    for (name, _, says) in cases {
        let file = dir.path().join(name);
        let export = dir.path().join("out.json");
        let out = run(&["report", "--json", path_str(&file), "--export", path_str(&export)]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: status {}; stderr:\n{stderr}", out.status);
        assert!(stderr.contains(name) && stderr.contains(says), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name}: a report was printed");
        assert_eq!(file_names(dir.path()), before, "{name}: a file was written");
    }
}

/// The views of the earlier record need no root: its 8 exits are all thread exits, and 2 of the
/// 3 samples of its last stage went through `release_task`.
#[test]
fn views_of_an_earlier_record() {
    let by_kind = document(&run(&["report", "--json", "--by-kind", EARLIER_RECORD]));
    assert_eq!(by_kind["exits_recorded"], 8);
    let kinds = by_kind["kinds"].as_array().unwrap();
    assert_eq!(kinds.len(), 1, "{by_kind}");
    assert_eq!((&kinds[0]["kind"], &kinds[0]["exits"]), (&"thread".into(), &8.into()));
    assert_eq!(kinds[0]["report"]["samples"]["joined"], 3);

    let stage = document(&run(&["report", "--json", "--stage", "release_task", EARLIER_RECORD]));
    assert!(stage["covers"].as_array().unwrap().iter().any(|c| c == "release_task"), "{stage}");
    assert_eq!(stage["samples"], 3);
    let top = &stage["functions"][0];
    assert_eq!((&top["function"], &top["samples"]), (&"release_task".into(), &2.into()), "{stage}");
    let text = String::from_utf8_lossy(
        &run(&["report", "--stage", "release_task", EARLIER_RECORD]).stdout,
    )
    .into_owned();
    assert!(text.contains("release_task") && text.contains("67%"), "{text}");

    let none = document(&run(&["report", "--json", "--pid", "999999", EARLIER_RECORD]));
    assert_eq!(none["exits_recorded"], 0);
    assert_eq!(none["selected"]["exits_in_run"], 8);

    for (args, says) in [
        (["--comm", "x"], "no task names (it was written in record format 1"),
        (["--stage", "no_such_fn"], "the stages: do_exit…taskstats_exit"),
    ] {
        let out = run(&[&["report", EARLIER_RECORD][..], &args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says) && out.stdout.is_empty(), "{args:?}: {stderr}");
    }
}

/// Threads each of the two processes of [`record_two_processes`] creates and joins.
const THREADS: [u32; 2] = [5, 20];

/// Records a command running two processes side by side, one creating and joining
/// `THREADS[0]` threads, the other `THREADS[1]`; returns the record and their pids.
fn record_two_processes(dir: &Path) -> (std::path::PathBuf, Vec<u32>) {
    let program = c_program("threads_then_exit");
    let p = program.to_str().unwrap();
    let script =
        format!("{p} {} & echo pid=$!; {p} {} & echo pid=$!; wait", THREADS[0], THREADS[1]);
    let file = dir.join("two.rec");
    // Sampled often, so that the exits' few microseconds have samples to split.
    let args = ["record", "--json", "-o", path_str(&file), "--sample-hz", "20000", "--"];
    let out = run(&[&args[..], &["sh", "-c", &script]].concat());
    // With --json, the command's output goes to stderr.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let pids: Vec<u32> =
        stderr.lines().filter_map(|l| l.strip_prefix("pid=")?.parse().ok()).collect();
    assert_eq!(pids.len(), 2, "{stderr}");
    (file, pids)
}

/// Each kind's exits, from a `--by-kind --json` document.
fn kind_counts(doc: &Value) -> Vec<(String, u64)> {
    let kinds = doc["kinds"].as_array().expect("kinds");
    kinds
        .iter()
        .map(|k| (k["kind"].as_str().unwrap().to_owned(), k["exits"].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_report_of_one_process_has_its_exits_and_the_kinds_add_up() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (file, pids) = record_two_processes(dir.path());
    let file = path_str(&file);
    let whole = document(&run(&["report", "--json", file]));
    let all = whole["exits_recorded"].as_u64().unwrap();
    for (pid, threads) in pids.iter().zip(THREADS) {
        let pid = pid.to_string();
        let doc = document(&run(&["report", "--json", "--pid", &pid, file]));
        let expected = u64::from(threads) + 1;
        assert_eq!(doc["exits_recorded"], expected, "pid {pid}: {}", doc["by_kind"]);
        assert_eq!(doc["stages"][0]["count"], expected);
        assert_eq!(doc["selected"]["pid"], pid.parse::<u64>().unwrap());
        assert_eq!(doc["selected"]["exits_in_run"], all);
        // Losses are the run's, and the document says so.
        assert_eq!((&doc["lost"], &doc["losses"]), (&whole["lost"], &whole["losses"]));
        assert!(doc["selected"]["run_wide"].as_array().unwrap().iter().any(|k| k == "lost"));
        let mine = document(&run(&["report", "--json", "--by-kind", "--pid", &pid, file]));
        let expected_kinds = [("thread".to_owned(), u64::from(threads)), ("process".to_owned(), 1)];
        assert_eq!(kind_counts(&mine), expected_kinds, "pid {pid}");
        let text =
            String::from_utf8_lossy(&run(&["report", "--pid", &pid, file]).stdout).into_owned();
        assert!(
            text.contains(&format!("{expected} recorded of pid {pid} ({all} in the run)")),
            "{text}"
        );
    }

    // By name (the program's, cut at 15 bytes as the kernel keeps it): the two processes' exits,
    // and no other (the shell's are under its own name).
    let named = document(&run(&["report", "--json", "--comm", "threads_then_ex", file]));
    let both: u32 = THREADS.iter().map(|t| t + 1).sum();
    assert_eq!(named["exits_recorded"], u64::from(both), "{}", named["selected"]);
    assert_eq!(named["selected"]["comm"], "threads_then_ex");

    let by_kind = document(&run(&["report", "--json", "--by-kind", file]));
    let counts = kind_counts(&by_kind);
    assert_eq!(counts.iter().map(|(_, n)| n).sum::<u64>(), all, "{counts:?} of {all}");
    let threads = counts.iter().find(|(k, _)| k == "thread").map(|&(_, n)| n);
    assert_eq!(threads, Some(u64::from(THREADS[0] + THREADS[1])), "{counts:?}");
    // Each kind's report is of its exits alone: its stages and samples add up to the run's.
    let kinds = by_kind["kinds"].as_array().unwrap();
    let sum = |f: &dyn Fn(&Value) -> u64| kinds.iter().map(|k| f(&k["report"])).sum::<u64>();
    assert_eq!(sum(&|r| r["stages"][0]["count"].as_u64().unwrap()), all);
    let samples = |r: &Value, what: &str| r["samples"][what].as_u64().unwrap();
    assert_eq!(sum(&|r| samples(r, "joined")), samples(&whole, "joined"));
    assert_eq!(sum(&|r| samples(r, "unplaced")), samples(&whole, "unplaced"));
    // A sample of another kind's exit is not one of these exits' own, never recorded.
    let each: Vec<&Value> = kinds.iter().map(|k| &k["report"]["samples"]).collect();
    assert_eq!(sum(&|r| samples(r, "unjoined")), 0, "{each:?}");
}

#[test]
fn a_stage_in_detail_names_the_function_that_computes_in_it() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mm.rec");
    let program = c_program("mm_teardown");
    let args = [
        "record",
        "-o",
        path_str(&file),
        "--sample-hz",
        "4999",
        "--",
        program.to_str().unwrap(),
        "256",
        "2",
    ];
    let out = run(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = document(&run(&["report", "--json", "--stage", "exit_mm", path_str(&file)]));
    assert!(doc["covers"].as_array().unwrap().iter().any(|c| c == "exit_mm"), "{doc}");
    let samples = doc["samples"].as_u64().unwrap();
    assert!(samples >= 10, "{samples} samples of a 256 MiB teardown");
    // Tearing down the memory is what the exit computes: most of the samples are under it.
    let functions = doc["functions"].as_array().unwrap();
    let teardown =
        functions.iter().find(|f| f["function"] == "exit_mmap").expect("exit_mmap sampled");
    assert!(
        num(teardown, "share") > 0.5,
        "exit_mmap: {teardown}; {:?}",
        &functions[..5.min(functions.len())]
    );
    let (on, off) = (num(&doc, "on_cpu_ns"), num(&doc, "off_cpu_ns"));
    assert!(on > off, "a teardown computes: on CPU {on} ns, off {off} ns");
    assert_eq!(num(&doc, "off_cpu_ns"), num(&doc, "runnable_ns") + num(&doc, "blocked_ns"));
}
