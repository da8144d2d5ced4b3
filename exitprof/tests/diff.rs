//! `diff` on runs of the running kernel: runs of one storm that differ by noise only, runs that
//! differ by a known amount of work in one stage (a larger teardown, a taskstats listener), and
//! files that are not run documents.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{
    attach_mode, c_program, exitprof, exitprof_path, num, require_root, run, run_json,
};

/// Saves the `--json` document of a run of `args` as `dir/name.json`.
fn save_run(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, run_json(args).to_string()).unwrap();
    path
}

/// `exitprof diff --json A... -- B...`, required to succeed.
fn diff(a: &[PathBuf], b: &[PathBuf]) -> Value {
    let out = exitprof().args(["diff", "--json"]).args(a).arg("--").args(b).output().unwrap();
    assert!(out.status.success(), "diff failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("diff prints a JSON document")
}

fn rows(doc: &Value) -> &Vec<Value> {
    doc["rows"].as_array().expect("rows")
}

/// Each row's time per exit: name, A, B, change, interval, judgement.
fn rows_table(doc: &Value) -> String {
    let lines: Vec<String> = rows(doc)
        .iter()
        .map(|r| {
            let c = &r["ns_per_exit"];
            format!(
                "{} A {:.0} B {:.0} change {:.0} interval {} beyond noise {}",
                r["name"],
                num(c, "a"),
                num(c, "b"),
                num(c, "delta"),
                c["interval"],
                c["beyond_noise"]
            )
        })
        .collect();
    format!("{}\nverdict: {}", lines.join("\n"), doc["verdict"])
}

/// Storm runs saved; each is some 1.3 s here, so that the test stays within a minute.
const SAME_STORM_RUNS: usize = 24;
/// Runs a side of each diff.
const RUNS_A_SIDE: usize = 3;

/// Every way of splitting `runs` (six) into two sides of three, each split once.
fn splits(runs: &[PathBuf]) -> Vec<(Vec<PathBuf>, Vec<PathBuf>)> {
    let n = runs.len();
    (0u32..1 << n)
        .filter(|mask| mask.count_ones() as usize == n / 2 && mask & 1 == 1)
        .map(|mask| {
            let (a, b): (Vec<_>, Vec<_>) =
                runs.iter().enumerate().partition(|(i, _)| mask & (1 << i) != 0);
            let paths =
                |side: Vec<(usize, &PathBuf)>| side.into_iter().map(|(_, p)| p.clone()).collect();
            (paths(a), paths(b))
        })
        .collect()
}

/// Diffs of runs of one storm against each other, forty per test run, bound the false alarms.
/// Measured on the 2-CPU 6.18 test machine, shared with other work: of six test runs' 240 diffs,
/// 4 claimed a change (1.7%; two test runs had two each, splits of one block sharing its runs;
/// none of the 24 interleaved splits), and 22 of 6780 figures (0.3%) were beyond noise. The test
/// allows 20% of the diffs and 10% of the figures.
#[test]
fn runs_of_one_storm_differ_by_no_more_than_noise() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let runs: Vec<PathBuf> = (0..SAME_STORM_RUNS)
        .map(|i| save_run(dir.path(), &format!("run{i}"), &["--threads", "200", "--reps", "3"]))
        .collect();
    // Six consecutive runs at a time, so that a slow drift of the machine falls within a block:
    // each of the block's ten splits into 3 vs 3 is one diff (the interleaved one, runs 0 2 4
    // against 1 3 5, among them).
    let (mut diffs, mut alarms, mut figures, mut flagged) = (0, 0, 0, 0);
    let (mut interleaved, mut interleaved_alarms) = (0, 0);
    for block in runs.chunks(2 * RUNS_A_SIDE) {
        for (a, b) in splits(block) {
            let doc = diff(&a, &b);
            assert_eq!(doc["noise"]["method"], "interval", "{doc}");
            assert!(
                doc["same_cut"].as_bool().unwrap(),
                "one storm, one kernel: {}",
                rows_table(&doc)
            );
            let changed = doc["changed"].as_bool().unwrap();
            diffs += 1;
            alarms += usize::from(changed);
            let names = |side: &[PathBuf]| -> Vec<String> {
                side.iter().map(|p| p.file_stem().unwrap().to_string_lossy().into_owned()).collect()
            };
            let is_interleaved = a.iter().zip(&b).all(|(x, y)| {
                let index = |p: &PathBuf| block.iter().position(|q| q == p).unwrap();
                index(y) == index(x) + 1
            });
            if is_interleaved {
                interleaved += 1;
                interleaved_alarms += usize::from(changed);
            }
            for row in rows(&doc) {
                for figure in [
                    "ns_per_exit",
                    "on_cpu_ns_per_exit",
                    "off_cpu_ns_per_exit",
                    "mean_ns",
                    "p50_ns",
                    "p99_ns",
                ] {
                    if let Some(judged) = row[figure]["beyond_noise"].as_bool() {
                        figures += 1;
                        flagged += usize::from(judged);
                    }
                }
            }
            if changed {
                eprintln!("false alarm: {:?} vs {:?}\n{}", names(&a), names(&b), rows_table(&doc));
            }
        }
    }
    let rate = |n: usize, of: usize| n as f64 / of as f64 * 100.0;
    eprintln!(
        "diffs of 3 vs 3 runs of one storm: {alarms} of {diffs} claimed a change in some row's time \
         per exit ({:.0}%); interleaved splits: {interleaved_alarms} of {interleaved}; figures \
         beyond noise: {flagged} of {figures} ({:.1}%)",
        rate(alarms, diffs),
        rate(flagged, figures)
    );
    // Each column's rows hold at 95% together: about one diff in twenty may claim a change.
    // Runs of this machine drift in bursts (another process's work lands on one run and its
    // neighbours), and the splits of a block share their runs, so the bound leaves room.
    assert!(
        rate(alarms, diffs) <= 20.0,
        "{alarms} of {diffs} diffs of runs of one storm claimed a change"
    );
    assert!(rate(flagged, figures) <= 10.0, "{flagged} of {figures} figures claimed a change");
}

#[test]
fn a_larger_teardown_is_found_in_the_stage_that_covers_exit_mm() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let program = c_program("mm_teardown");
    let program = program.to_str().unwrap();
    let attach = attach_mode();
    let teardown = |mib: &str| {
        let args = ["--attach", &attach, "--", program, mib, "4"];
        save_run(dir.path(), &format!("mm{mib}"), &args)
    };
    let [small_mib, large_mib] = ["64", "512"];
    let (small, large) = (teardown(small_mib), teardown(large_mib));
    let doc = diff(std::slice::from_ref(&small), std::slice::from_ref(&large));
    let table = rows_table(&doc);
    eprintln!("{small_mib} MiB against {large_mib} MiB, one run a side:\n{table}");
    assert_eq!(doc["noise"]["method"], "factor", "{doc}");
    // Where the exit's own stages are cut depends on which points it reached: in tracepoint
    // mode `x86_fpu_dropped` does not fire for a task switched out since it last used the FPU
    // (a long teardown may be preempted), so its teardown lands in another stage that also
    // covers `exit_mm`. The stages covering it, together, must hold the change.
    let covers_mm = |r: &Value| {
        r["covers"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .any(|c| ["exit_mm", "exit_mmap"].contains(&c))
    };
    let stages = &rows(&doc)[1..];
    let biggest = stages
        .iter()
        .max_by(|x, y| {
            let change = |r: &Value| num(&r["ns_per_exit"], "delta").abs();
            change(x).total_cmp(&change(y))
        })
        .expect("stages");
    assert!(
        covers_mm(biggest),
        "the biggest change is in {} (covers {}), not in a stage of exit_mm:\n{table}",
        biggest["name"],
        biggest["covers"]
    );
    assert_eq!(biggest["ns_per_exit"]["beyond_noise"], true, "{table}");
    let of_mm = |key: &str| -> f64 {
        stages.iter().filter(|r| covers_mm(r)).map(|r| num(&r["ns_per_exit"], key)).sum()
    };
    // Eight times the memory: far past twice the time per exit, with one run a side.
    assert!(of_mm("b") > 4.0 * of_mm("a"), "{table}");
    let share: f64 =
        stages.iter().filter(|r| covers_mm(r)).filter_map(|r| r["share_of_change"].as_f64()).sum();
    assert!(share > 0.9, "the stages of exit_mm hold {share:.2} of the change:\n{table}");
    let verdict = doc["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("no interval") && verdict.contains(biggest["name"].as_str().unwrap()),
        "{verdict}"
    );
    // The verdict names the code, not only the stage: where the teardown computes.
    assert!(
        ["exit_mmap", "unmap_page_range", "unmap_vmas"].iter().any(|f| verdict.contains(f)),
        "the verdict does not name the teardown's code: {verdict}\n{}",
        doc["moved_code"]
    );
    // The differential flame graph draws what grew red, and most of it under the teardown.
    let flame = dir.path().join("mm.flame.svg");
    let out =
        exitprof().args(["diff", "--export"]).arg(&flame).args([&small, &large]).output().unwrap();
    assert!(out.status.success(), "diff --export: {}", String::from_utf8_lossy(&out.stderr));
    let frames = flame_frames(&std::fs::read_to_string(&flame).unwrap());
    let grown: Vec<&FlameFrame> = frames.iter().filter(|f| f.grown()).collect();
    let teardown = ["exit_mmap", "unmap_page_range", "unmap_vmas", "exit_mm", "__mmput", "mmput"];
    let under_teardown = |f: &FlameFrame| {
        teardown.contains(&f.name.as_str())
            || frames.iter().any(|a| teardown.contains(&a.name.as_str()) && a.holds(f))
    };
    let width = |fs: &mut dyn Iterator<Item = &&FlameFrame>| fs.map(|f| f.width).sum::<u64>();
    let (all, there) =
        (width(&mut grown.iter()), width(&mut grown.iter().filter(|f| under_teardown(f))));
    eprintln!("grown frames: {all} ns per exit wide, {there} of it under the teardown");
    assert!(all > 0 && there * 2 > all, "grown frames: {grown:#?}");
}

/// A frame of an inferno flame graph, as drawn.
#[derive(Debug)]
struct FlameFrame {
    name: String,
    /// Its place and width in the graph's unit, and its row (roots at the bottom, the largest y).
    x: u64,
    width: u64,
    y: u64,
    /// Its fill's red, green and blue.
    fill: (u8, u8, u8),
}

impl FlameFrame {
    /// Drawn red: more time in B (a differential graph's white is rgb(250,250,250)).
    fn grown(&self) -> bool {
        self.fill.0 == 255 && self.fill.1 < 250
    }

    /// Whether `other` is drawn above this frame, within it: called from it.
    fn holds(&self, other: &FlameFrame) -> bool {
        self.y > other.y && self.x <= other.x && other.x + other.width <= self.x + self.width
    }
}

/// The frames of an inferno flame graph: `<title>NAME (...)</title><rect ... y="Y" ...
/// fill="rgb(R,G,B)" fg:x="X" fg:w="W"/>`.
fn flame_frames(svg: &str) -> Vec<FlameFrame> {
    let frame = regex::Regex::new(
        r#"<title>([^<]*?) \([^<]*</title><rect x="[^"]*" y="(\d+)" width="[^"]*" height="\d+" fill="rgb\((\d+),(\d+),(\d+)\)" fg:x="(\d+)" fg:w="(\d+)""#,
    )
    .unwrap();
    let frames: Vec<FlameFrame> = frame
        .captures_iter(svg)
        .map(|c| {
            let n = |i: usize| c[i].parse::<u64>().unwrap();
            FlameFrame {
                name: c[1].to_owned(),
                y: n(2),
                fill: (n(3) as u8, n(4) as u8, n(5) as u8),
                x: n(6),
                width: n(7),
            }
        })
        .collect();
    assert!(!frames.is_empty(), "no frames in the flame graph:\n{svg}");
    frames
}

/// The same run given twice is refused, on one side or across them, under any name: copies
/// agree exactly and would pass for runs without noise.
#[test]
fn a_run_given_twice_is_refused() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let one = save_run(dir.path(), "one", &["--threads", "20", "--reps", "1"]);
    let two = save_run(dir.path(), "two", &["--threads", "20", "--reps", "1"]);
    let copy = dir.path().join("copy.json");
    std::fs::copy(&one, &copy).unwrap();
    for args in [vec![&one, &one], vec![&one, &copy], vec![&one, &two, &copy, &two]] {
        let mut command = exitprof();
        command.arg("diff");
        match args.as_slice() {
            [a, b] => command.args([a, b]),
            sides => command.args(&sides[..2]).arg("--").args(&sides[2..]),
        };
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "diff {args:?}: {stderr}");
        assert!(stderr.contains("hold the same run"), "{stderr}");
        assert!(out.stdout.is_empty(), "diff {args:?} printed a report");
    }
}

/// A side that lost many of its exits to a full ring buffer (a burst of thread exits into the
/// smallest buffer) says so, in the text and the JSON, and is not compared as an equal.
#[test]
fn a_side_that_lost_exits_is_shown_with_its_losses() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let storm = ["--threads", "300", "--reps", "1", "--stagger-us", "0"];
    let whole = save_run(dir.path(), "whole", &storm);
    let lossy = (0..5)
        .map(|i| {
            let mut args = vec!["--ringbuf-bytes", "4096"];
            args.extend(storm);
            save_run(dir.path(), &format!("lossy{i}"), &args)
        })
        .find(|path| {
            let doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            num(&doc["losses"], "ringbuf_full") > 0.1 * num(&doc, "exits_recorded")
        })
        .expect("a burst of 300 thread exits into a 4 KiB ring buffer loses some of them");
    let doc = diff(std::slice::from_ref(&whole), std::slice::from_ref(&lossy));
    let b = &doc["b"];
    let (lost, rate) = (b["lost"][0].as_u64().unwrap(), num(b, "loss_rate"));
    assert!(lost > 0 && rate > 0.02, "side B: {b}");
    assert!(b["lost_ringbuf_full"][0].as_u64().unwrap() > 0, "{b}");
    let warnings = doc["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w.as_str().unwrap().starts_with("B lost"))
            && warnings.iter().any(|w| w.as_str().unwrap().contains("full ring buffer")),
        "{warnings:?}"
    );
    let out = exitprof().args(["diff"]).args([&whole, &lossy]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("{lost} lost (")) && text.contains("warning: B lost"), "{text}");
}

/// The row of `doc` whose stage covers the kernel function `function`.
fn row_covering<'a>(doc: &'a Value, function: &str) -> &'a Value {
    rows(doc)
        .iter()
        .find(|r| r["covers"].as_array().is_some_and(|c| c.iter().any(|f| f == function)))
        .unwrap_or_else(|| panic!("no stage covers {function}:\n{}", rows_table(doc)))
}

/// Runs a side of the taskstats listener's diff: with fewer, one run whose exits wait on the
/// listener's wakeups more than the others' widens the intervals past the change.
const LISTENER_RUNS: usize = 5;

/// With a taskstats listener registered for every CPU, `taskstats_exit` builds and sends a
/// message at every exit, on the CPU (here some 1.3 µs per exit with a release build, 1 to 3 µs
/// with the debug build the tests run, whose listener drains more slowly); without one it
/// returns at once. Runs with and without, interleaved so that a drift of the machine falls on
/// both sides: the stage that covers `taskstats_exit` changes beyond noise in its median, no
/// other stage's on-CPU time changes as much, and most of the whole exit's on-CPU change is
/// there. Not judged on the means: the listener wakes up on the same two CPUs, and a few exits
/// of some runs wait much longer, which makes the means of a side spread wide.
#[test]
fn a_taskstats_listener_is_found_in_the_stage_that_covers_taskstats_exit() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let storm = ["--threads", "300", "--reps", "3"];
    let exe = exitprof_path();
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for i in 0..LISTENER_RUNS {
        off.push(save_run(dir.path(), &format!("off{i}"), &storm));
        // The listener held by `exitprof __condition` around a recorded run.
        let file = dir.path().join(format!("on{i}.rec"));
        let out = exitprof()
            .args(["__condition", "taskstats-listener", "on", "--"])
            .arg(&exe)
            .args(["record", "-o"])
            .arg(&file)
            .args(storm)
            .output()
            .unwrap();
        assert!(out.status.success(), "listened run: {}", String::from_utf8_lossy(&out.stderr));
        on.push(file);
    }
    let doc = diff(&off, &on);
    let table = rows_table(&doc);
    let on_cpu = |r: &Value| num(&r["on_cpu_ns_per_exit"], "delta");
    let listed: Vec<String> = rows(&doc)
        .iter()
        .map(|r| {
            let p50 = &r["p50_ns"];
            let median = p50["delta"].as_f64().map_or("-".to_owned(), |d| format!("{d:+.0}"));
            format!(
                "{}: on CPU {:+.0}, median {median} ({})",
                r["name"],
                on_cpu(r),
                p50["interval"]
            )
        })
        .collect();
    eprintln!(
        "without the listener against with it, {LISTENER_RUNS} runs a side:\n{table}\n\
         changes (ns per exit):\n{}",
        listed.join("\n")
    );
    let taskstats = row_covering(&doc, "taskstats_exit");
    let median = &taskstats["p50_ns"];
    assert_eq!(median["beyond_noise"], true, "median {median}\n{table}");
    assert!(num(median, "delta") > 0.0 && on_cpu(taskstats) > 0.0, "median {median}\n{table}");
    let biggest = rows(&doc)[1..].iter().max_by(|x, y| on_cpu(x).total_cmp(&on_cpu(y))).unwrap();
    assert_eq!(biggest["name"], taskstats["name"], "{listed:?}");
    let exit = &rows(&doc)[0];
    assert!(on_cpu(taskstats) > 0.5 * on_cpu(exit), "{listed:?}");
}

#[test]
fn what_is_not_a_run_document_is_refused_and_nothing_is_written() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let good = save_run(dir.path(), "good", &["--threads", "20", "--reps", "1"]);
    let text = std::fs::read_to_string(&good).unwrap();
    let truncated = dir.path().join("truncated.json");
    std::fs::write(&truncated, &text[..text.len() / 2]).unwrap();
    let foreign = dir.path().join("package.json");
    std::fs::write(&foreign, r#"{"name": "left-pad", "version": "1.3.0", "stages": 3}"#).unwrap();
    let figure = dir.path().join("diff.svg");
    for (bad, mentions) in [(&truncated, "truncated"), (&foreign, "not an exitprof run document")] {
        for args in [[&good, bad], [bad, &good]] {
            let out =
                exitprof().args(["diff", "--export"]).arg(&figure).args(args).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "diff {args:?}: {}; {stderr}", out.status);
            let name = bad.display().to_string();
            assert!(stderr.contains(&name) && stderr.contains(mentions), "{stderr}");
            assert!(out.stdout.is_empty(), "diff {args:?} printed a report");
            assert!(!figure.exists(), "diff {args:?} wrote {}", figure.display());
        }
    }
    let missing = dir.path().join("missing.json");
    let out = run(&["diff", good.to_str().unwrap(), missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the saved run"));
}

/// A record file reads as the run it recorded: diffed against the `--json` document that same
/// run printed, every row is the same on both sides and nothing changed.
#[test]
fn a_record_file_diffs_as_the_document_of_its_run() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (rec, json) = (dir.path().join("run.rec"), dir.path().join("run.json"));
    let out = exitprof()
        .args(["record", "-o", rec.to_str().unwrap(), "--json", "--threads", "200", "--reps", "2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "record failed: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(&json, &out.stdout).unwrap();
    let doc = diff(&[rec], &[json]);
    assert_eq!(doc["changed"], false, "{}", rows_table(&doc));
    for row in rows(&doc) {
        let c = &row["ns_per_exit"];
        assert_eq!(num(c, "a"), num(c, "b"), "{}", rows_table(&doc));
    }
}
