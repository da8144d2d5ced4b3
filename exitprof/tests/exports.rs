//! `--export` end to end: every format from a real storm, read back by its own readers and
//! checked against the `--json` report; paths that cannot be written fail before the storm; a
//! full disk leaves no partial file; an interrupted run is exported as partial.

use std::{
    collections::HashMap,
    fs,
    os::unix::fs::FileTypeExt as _,
    path::Path,
    process::{Command, Output},
    time::Duration,
};

use base64::Engine as _;
use hdrhistogram::{
    Histogram,
    serialization::{
        Deserializer,
        interval_log::{IntervalLogIterator, LogEntry},
    },
};
use openmetrics_parser::{PrometheusValue, prometheus::parse_prometheus};
use serde::Deserialize;

use crate::support::{
    Started, assert_nothing_left, become_subreaper, exitprof, file_names, require_root, run,
};

/// The `--json` document's keys these tests read, typed.
#[derive(Debug, Deserialize)]
struct Document {
    partial: bool,
    exits_recorded: u64,
    stages: Vec<Stage>,
}

#[derive(Debug, Deserialize)]
struct Stage {
    name: String,
    count: u64,
    min_ns: u64,
    max_ns: u64,
    p99_ns: u64,
    buckets: Vec<Bucket>,
}

#[derive(Debug, Deserialize)]
struct Bucket {
    high_ns: u64,
    count: u64,
}

#[derive(Debug, Deserialize)]
struct CsvRow {
    stage: String,
    percentile: f64,
    value_ns: u64,
    count_at_or_below: u64,
    partial: bool,
}

const FORMATS: [&str; 5] = ["hlog", "json", "csv", "svg", "prom"];

/// `--export DIR/run.EXT` for every format.
fn export_args(dir: &Path) -> Vec<String> {
    FORMATS
        .iter()
        .flat_map(|ext| ["--export".to_owned(), format!("{}/run.{ext}", dir.display())])
        .collect()
}

fn run_ok(args: &[&str]) -> Output {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exitprof {args:?} failed ({}):\n{stderr}", out.status);
    out
}

/// Every interval histogram of an HdrHistogram log, by tag.
fn read_hlog(path: &Path) -> HashMap<String, Histogram<u64>> {
    let log = fs::read(path).unwrap();
    let mut deserializer = Deserializer::new();
    let mut histograms = HashMap::new();
    for entry in IntervalLogIterator::new(&log) {
        if let LogEntry::Interval(interval) = entry.expect("a well-formed interval log") {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(interval.encoded_histogram())
                .unwrap();
            let hist = deserializer.deserialize(&mut bytes.as_slice()).expect("a V2 histogram");
            histograms.insert(interval.tag().expect("a tag").to_string(), hist);
        }
    }
    histograms
}

fn read_csv(path: &Path) -> Vec<CsvRow> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    reader.deserialize().collect::<Result<_, _>>().expect("well-formed CSV")
}

/// Samples of a Prometheus family, each as (labels, value).
fn prom_samples(text: &str, family: &str) -> Vec<(HashMap<String, String>, PrometheusValue)> {
    let exposition =
        parse_prometheus(text).unwrap_or_else(|e| panic!("invalid exposition ({e:?}):\n{text}"));
    let family = &exposition.families[family];
    family
        .iter_samples()
        .map(|s| {
            let labels = s.get_labelset().unwrap();
            let labels = labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            (labels, s.value.clone())
        })
        .collect()
}

fn number(value: &PrometheusValue) -> f64 {
    match value {
        PrometheusValue::Counter(c) => c.value.as_f64(),
        PrometheusValue::Gauge(g) => g.as_f64(),
        other => panic!("not a number: {other:?}"),
    }
}

#[test]
fn every_format_agrees_with_the_json_report() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--threads", "100", "--reps", "5", "--json"];
    let exports = export_args(dir.path());
    args.extend(exports.iter().map(String::as_str));
    let out = run_ok(&args);
    let path = |ext: &str| dir.path().join(format!("run.{ext}"));

    assert_eq!(
        file_names(dir.path()),
        ["run.csv", "run.hlog", "run.json", "run.prom", "run.svg"],
        "exactly the exports, no temporary files"
    );
    let exported_json = fs::read(path("json")).unwrap();
    assert!(exported_json == out.stdout, "the .json export is not the --json document");
    let doc: Document = serde_json::from_slice(&out.stdout).expect("the typed --json document");
    assert!(!doc.partial);
    assert_eq!(doc.stages[0].name, "exit");
    assert_eq!(doc.stages[0].count, doc.exits_recorded);
    assert_eq!(doc.exits_recorded, 500, "expected 500 exits");

    let hlog = read_hlog(&path("hlog"));
    let csv = read_csv(&path("csv"));
    let prom = fs::read_to_string(path("prom")).unwrap();
    let prom_latency = prom_samples(&prom, "exitprof_exit_stage_latency_seconds");
    let svg = fs::read_to_string(path("svg")).unwrap();
    assert_eq!(hlog.len(), doc.stages.len(), "one interval per stage: {:?}", hlog.keys());
    assert_eq!(prom_latency.len(), doc.stages.len(), "one Prometheus histogram per stage");
    for stage in &doc.stages {
        let name = &stage.name;
        // The document's buckets are the histogram.
        let in_buckets: u64 = stage.buckets.iter().map(|b| b.count).sum();
        assert_eq!(in_buckets, stage.count, "{name}: buckets hold {in_buckets} of {}", stage.count);
        assert_eq!(stage.buckets.last().map(|b| b.high_ns), Some(stage.max_ns), "{name}");

        let h = hlog.get(name).unwrap_or_else(|| panic!("no interval tagged {name}"));
        assert_eq!(
            (h.len(), h.min(), h.max(), h.value_at_quantile(0.99)),
            (stage.count, stage.min_ns, stage.max_ns, stage.p99_ns),
            "{name}: hlog (count, min, max, p99) against the report"
        );

        let rows: Vec<&CsvRow> = csv.iter().filter(|r| r.stage == *name).collect();
        let last = rows.last().unwrap_or_else(|| panic!("no CSV rows for {name}"));
        assert_eq!(
            (last.percentile, last.value_ns, last.count_at_or_below),
            (100.0, stage.max_ns, stage.count),
            "{name}: CSV"
        );
        assert!(
            rows.windows(2)
                .all(|w| w[0].percentile < w[1].percentile && w[0].value_ns <= w[1].value_ns),
            "{name}: CSV not monotone"
        );
        assert!(rows.iter().all(|r| !r.partial));

        let (_, value) = prom_latency
            .iter()
            .find(|(l, _)| l["stage"] == *name)
            .unwrap_or_else(|| panic!("no Prometheus histogram for {name}"));
        let PrometheusValue::Histogram(ph) = value else { panic!("{name}: not a histogram") };
        assert_eq!(ph.count, Some(stage.count), "{name}: Prometheus _count");
        let inf = ph.buckets.last().unwrap();
        assert_eq!(
            (inf.upper_bound, inf.count.as_f64()),
            (f64::INFINITY, stage.count as f64),
            "{name}: +Inf bucket"
        );

        let legend = format!("{name} ({} exits)", stage.count);
        assert!(svg.lines().any(|l| l.trim() == legend), "the figure's legend has no {legend:?}");
    }
    let recorded = prom_samples(&prom, "exitprof_exits_recorded_total");
    assert_eq!(number(&recorded[0].1), doc.exits_recorded as f64, "exitprof_exits_recorded_total");
    assert_eq!(recorded[0].0["workload"], "threads");
    assert!(svg.contains("500 exits recorded of 500 expected"), "the figure's header");
    // Every cause of the document's losses is a sample of exitprof_losses_total, which its
    // help names: one list of causes.
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let losses = prom_samples(&prom, "exitprof_losses_total");
    let help = prom.lines().find(|l| l.starts_with("# HELP exitprof_losses_total ")).unwrap();
    for cause in json["losses"].as_object().unwrap().keys() {
        assert!(losses.iter().any(|(l, _)| l["cause"] == *cause), "no sample of {cause}");
        assert!(help.contains(&format!(" {cause} (")), "the help does not name {cause}: {help}");
    }
}

/// A kernel address as it would be written out: 16 hex digits from the kernel's half of the
/// address space (`ffff...`, with or without `0x`), or that number in decimal.
fn kernel_addresses_in(text: &str) -> Vec<String> {
    let words = text.split(|c: char| !c.is_ascii_alphanumeric());
    words
        .map(|w| w.strip_prefix("0x").unwrap_or(w))
        .filter(|w| {
            let hex = w.len() == 16 && w.to_ascii_lowercase().starts_with("ffff");
            let decimal = w.parse::<u64>().is_ok_and(|n| n >= 0xffff_0000_0000_0000);
            hex && u64::from_str_radix(w, 16).is_ok() || decimal
        })
        .map(str::to_owned)
        .collect()
}

/// Every export of a run with named stacks (the flame graph and folded stacks of its samples)
/// holds names, never a kernel address.
#[test]
fn no_export_gives_away_a_kernel_address() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let every = ["hlog", "json", "csv", "svg", "prom", "folded", "flame.svg"];
    let exports: Vec<String> = every
        .iter()
        .flat_map(|ext| ["--export".to_owned(), format!("{}/run.{ext}", dir.path().display())])
        .collect();
    let mut args = vec!["--json", "--threads", "200", "--reps", "2", "--sample-hz", "20000"];
    args.extend(exports.iter().map(String::as_str));
    let out = run_ok(&args);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["samples"]["joined"].as_u64() > Some(0), "no stack: {}", doc["samples"]);
    for ext in every {
        let text = fs::read_to_string(dir.path().join(format!("run.{ext}"))).unwrap();
        let found = kernel_addresses_in(&text);
        assert!(found.is_empty(), "run.{ext} holds kernel addresses: {found:?}");
    }
    assert!(!kernel_addresses_in("at ffffffff81aad1a4 and 0xFFFF888001234000").is_empty());
    assert!(!kernel_addresses_in("18446744071589311908").is_empty());
}

#[test]
fn an_unknown_extension_is_a_usage_error() {
    let out = run(&["--threads", "5", "--reps", "1", "--export", "results.txt"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "status {}; stderr:\n{stderr}", out.status);
    for mention in ["results.txt", ".hlog", ".json", ".csv", ".svg", ".prom", "--format"] {
        assert!(stderr.contains(mention), "stderr does not mention {mention}:\n{stderr}");
    }
    assert!(out.stdout.is_empty());
}

/// Runs exitprof with `-v` and checks it failed before attaching anything: status 1, no report,
/// `mentions` in its error.
fn assert_fails_before_the_storm(out: &Output, mentions: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "status {}; stderr:\n{stderr}", out.status);
    for m in mentions {
        assert!(stderr.contains(m), "the error does not mention {m}:\n{stderr}");
    }
    assert!(
        !stderr.contains("attaching"),
        "probes were attached before the export path was checked:\n{stderr}"
    );
}

#[test]
fn a_missing_directory_fails_before_the_storm() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("nosuch/run.json");
    let target = target.to_str().unwrap();
    let out = run(&["-v", "--threads", "5", "--reps", "1", "--export", target]);
    assert_fails_before_the_storm(&out, &[target, "does not exist"]);
    assert!(out.stdout.is_empty(), "a report was printed");
    assert!(file_names(dir.path()).is_empty(), "files were left: {:?}", file_names(dir.path()));
}

#[test]
fn a_device_or_a_symlink_is_refused_before_the_storm_and_left_as_it_was() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    // The device of /dev/full (1, 7), made here: a regression replaces this node, not the
    // machine's /dev/full.
    let full = dir.path().join("full");
    let c_full = std::ffi::CString::new(full.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; mknod only reads it.
    let rc = unsafe { libc::mknod(c_full.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 7)) };
    assert_eq!(rc, 0, "mknod {}: {}", full.display(), std::io::Error::last_os_error());
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(dir.path().join("elsewhere.json"), &link).unwrap();
    for (path, what, format) in
        [(&full, "a character device", &["--format", "json"][..]), (&link, "a symbolic link", &[])]
    {
        let path = path.to_str().unwrap();
        let mut args = vec!["-v", "--threads", "5", "--reps", "1", "--export", path];
        args.extend(format);
        let out = run(&args);
        assert_fails_before_the_storm(&out, &[path, what, "not a regular file"]);
        assert!(out.stdout.is_empty(), "a report was printed");
    }
    assert!(fs::symlink_metadata(&full).unwrap().file_type().is_char_device(), "device replaced");
    assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "symlink replaced");
    assert_eq!(file_names(dir.path()), ["full", "link.json"], "files were left behind");
}

/// Runs exitprof in a private mount namespace with a tmpfs (mount options `options`) on `dir`,
/// then lists what is left in `dir` after a `LEFT:` marker line on stdout. Root ignores
/// permission bits, so only a mount can make a directory read-only or full for it.
fn run_on_tmpfs(dir: &Path, options: &str, args: &[&str]) -> (Output, Vec<String>) {
    let script = r#"mount -t tmpfs -o "$1" exitprof-test "$2" || exit 99
dir=$2; shift 2
"$@"; status=$?
echo LEFT:; ls -A "$dir"
exit $status"#;
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script, "sh", options])
        .arg(dir)
        .arg(exitprof().get_program())
        .args(args)
        .output()
        .expect("unshare (util-linux) runs");
    assert_ne!(
        out.status.code(),
        Some(99),
        "mounting a tmpfs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (report, left) = stdout.rsplit_once("LEFT:\n").expect("the listing marker");
    let left = left.lines().map(str::to_owned).collect();
    (Output { stdout: report.as_bytes().to_vec(), ..out }, left)
}

#[test]
fn a_read_only_directory_fails_before_the_storm() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("run.csv");
    let target = target.to_str().unwrap();
    let (out, left) = run_on_tmpfs(
        dir.path(),
        "ro,size=64k",
        &["-v", "--threads", "5", "--reps", "1", "--export", target],
    );
    assert_fails_before_the_storm(&out, &[target, "Read-only file system"]);
    assert!(
        out.stdout.is_empty(),
        "a report was printed:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(left.is_empty(), "files were left: {left:?}");
}

#[test]
fn a_full_disk_leaves_no_partial_file_and_loses_nothing_else() {
    require_root();
    let full = tempfile::tempdir().unwrap();
    let fine = tempfile::tempdir().unwrap();
    let json = full.path().join("run.json");
    let csv = fine.path().join("run.csv");
    // One page of tmpfs: the checks pass (an empty file fits), the JSON document does not.
    let (out, left) = run_on_tmpfs(
        full.path(),
        "size=4k",
        &[
            "--threads",
            "50",
            "--reps",
            "2",
            "--export",
            json.to_str().unwrap(),
            "--export",
            csv.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "status {}; stderr:\n{stderr}", out.status);
    assert!(
        stderr.contains(json.to_str().unwrap()) && stderr.contains("No space left on device"),
        "stderr:\n{stderr}"
    );
    assert!(left.is_empty(), "a partial export was left on the full disk: {left:?}");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("100 recorded of 100 expected"), "the report was lost:\n{report}");
    let rows = read_csv(&csv);
    let exit_rows = rows.iter().filter(|r| r.stage == "exit").count();
    assert!(
        exit_rows > 10,
        "the CSV export beside the failed one has {exit_rows} rows for the exit"
    );
}

#[test]
fn an_interrupted_run_is_exported_as_partial_and_leaves_nothing() {
    require_root();
    become_subreaper();
    let dir = tempfile::tempdir().unwrap();
    // A storm far longer than the test: 1000 threads x 1000 reps.
    let mut args = vec!["--threads", "1000", "--reps", "1000", "--json"];
    let exports = export_args(dir.path());
    args.extend(exports.iter().map(String::as_str));
    let mut run = Started::start(&args, Duration::from_millis(300));
    run.signal(libc::SIGINT);
    // Both pipes are read together: the report can be larger than a pipe holds.
    let out = run.finish();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "status {}; stderr:\n{stderr}", out.status);
    assert_nothing_left(&run);

    let doc: Document = serde_json::from_slice(&out.stdout).expect("the --json document");
    assert!(doc.partial, "the report does not say partial");
    assert!(doc.exits_recorded > 0, "no exits were recorded in 300 ms of storm");
    let path = |ext: &str| dir.path().join(format!("run.{ext}"));
    assert!(
        fs::read(path("json")).unwrap() == out.stdout,
        "the .json export is not the --json document"
    );
    let prom = fs::read_to_string(path("prom")).unwrap();
    let partial = prom_samples(&prom, "exitprof_run_partial");
    assert_eq!(number(&partial[0].1), 1.0, "exitprof_run_partial");
    assert!(read_csv(&path("csv")).iter().all(|r| r.partial), "CSV rows not marked partial");
    assert!(fs::read_to_string(path("hlog")).unwrap().contains("\n#PARTIAL"), "hlog header");
    assert_eq!(read_hlog(&path("hlog"))["exit"].len(), doc.exits_recorded);
    assert!(fs::read_to_string(path("svg")).unwrap().contains("PARTIAL"), "the figure");
}
