//! The kernel diff: one storm recorded on two kernels ([`PAIR`]), each record brought back from
//! its guest and read on the host as a user would read it on another machine
//! (`exitprof report`), then the two compared (`exitprof diff`). The report of each record must be
//! the document its run printed in the guest; the diff must match the kernels' stages by the
//! code they cover, account for every stage of both exits, and state its verdict.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

use super::{guest::SentFile, kernels::Series, scenarios::Checks};
use crate::arch::Arch;

/// The kernels whose records are diffed: A (the baseline), then B.
pub const PAIR: [Series; 2] = [Series::V6_1, Series::V6_12];
/// The architecture of the pair's kernels.
pub const ARCH: Arch = Arch::X86_64;

/// A run recorded in a guest, its record kept on the host.
pub struct Recorded {
    pub arch: Arch,
    pub series: Series,
    pub file: PathBuf,
    /// What the host's `exitprof report --json` made of the record.
    pub report: Value,
}

/// Writes the record the guest `sent` to `file`, and checks that the host reads it as the run
/// the guest printed (`live`); returns the host's report of it.
pub fn bring_back(
    exitprof: &Path,
    sent: Option<&SentFile>,
    live: &Value,
    file: &Path,
    c: &mut Checks,
) -> Option<Value> {
    let bytes = match sent.map(SentFile::bytes) {
        Some(Ok(bytes)) => bytes,
        Some(Err(why)) => {
            c.fail(format!("the record did not come back whole: {why}"));
            return None;
        }
        None => {
            c.fail("the guest sent no record back".to_owned());
            return None;
        }
    };
    if let Err(e) = fs::write(file, &bytes) {
        c.fail(format!("writing {}: {e}", file.display()));
        return None;
    }
    match kernel_words(&bytes) {
        Ok(0) => c.figure("no kernel address".to_owned()),
        Ok(n) => c.fail(format!("{} holds {n} 8-byte values in the kernel's half", file.display())),
        Err(e) => c.fail(format!("decompressing {}: {e}", file.display())),
    }
    let report = match exitprof_json(exitprof, &["report", "--json"], &[file]) {
        Ok(report) => report,
        Err(why) => {
            c.fail(why);
            return None;
        }
    };
    match first_difference(live, &report, "") {
        None => c.figure(format!("record of {} KiB reports as printed", bytes.len() / 1024)),
        Some(at) => c.fail(format!(
            "the host's report of {} is not the document the guest's run printed: {at}",
            file.display()
        )),
    }
    Some(report)
}

/// How many values of a record lie in the kernel's half of the address space (none may: records
/// keep frames as symbol + offset): the 8-byte words of its raw records, where their 64-bit
/// fields lie, and the numbers of its opening and closing (JSON).
fn kernel_words(record: &[u8]) -> std::io::Result<usize> {
    use std::io::Read as _;
    /// The magic and the format's version, before the gzip stream.
    const HEADER: usize = 20;
    const KERNEL_SPACE: u64 = 0xffff_8000_0000_0000;
    fn in_json(value: &Value) -> usize {
        match value {
            Value::Number(n) => usize::from(n.as_u64().is_some_and(|n| n >= KERNEL_SPACE)),
            Value::Array(values) => values.iter().map(in_json).sum(),
            Value::Object(fields) => fields.values().map(in_json).sum(),
            _ => 0,
        }
    }
    let mut contents = Vec::new();
    let stream = record.get(HEADER..).unwrap_or_default();
    flate2::read::GzDecoder::new(stream).read_to_end(&mut contents)?;
    let mut count = 0;
    let mut at = 0;
    while let Some(head) = contents.get(at..at + 5) {
        let length = u32::from_le_bytes(head[1..].try_into().expect("4 bytes")) as usize;
        let payload = contents.get(at + 5..at + 5 + length).unwrap_or_default();
        count += match head[0] {
            1 | 5 => serde_json::from_slice(payload).map_or(0, |json: Value| in_json(&json)),
            _ => payload
                .chunks_exact(8)
                .filter(|w| u64::from_le_bytes((*w).try_into().expect("8 bytes")) >= KERNEL_SPACE)
                .count(),
        };
        at += 5 + length;
    }
    Ok(count)
}

/// Diffs record A against record B on the host and checks the diff; keeps its text in `out`.
pub fn check(exitprof: &Path, a: &Recorded, b: &Recorded, out: &Path) -> Checks {
    let mut c = Checks::default();
    let files = [a.file.as_path(), b.file.as_path()];
    let doc = match exitprof_json(exitprof, &["diff", "--json"], &files) {
        Ok(doc) => doc,
        Err(why) => {
            c.fail(why);
            return c;
        }
    };
    diffed(&doc, &a.report, &b.report, &mut c);
    match exitprof_text(exitprof, &["diff"], &files) {
        Ok(text) => {
            let verdict = doc["verdict"].as_str().unwrap_or_default();
            if !text.contains(&format!("verdict: {verdict}")) {
                c.fail(format!("the diff's text does not state the document's verdict:\n{text}"));
            }
            if let Err(e) = fs::write(out, &text) {
                c.fail(format!("writing {}: {e}", out.display()));
            }
        }
        Err(why) => c.fail(why),
    }
    c
}

/// Checks the diff `doc` of the runs documented by `a` and `b` (their reports) against them.
fn diffed(doc: &Value, a: &Value, b: &Value, c: &mut Checks) {
    let rows = doc["rows"].as_array().map(Vec::as_slice).unwrap_or_default();
    let Some((exit, parts)) = rows.split_first() else {
        c.fail(format!("rows: expected the exit and its stages, got {}", doc["rows"]));
        return;
    };
    let sides = [Side::new("a", a), Side::new("b", b)];
    for side in &sides {
        let kernels = &doc[side.key]["kernels"];
        c.equal(
            &format!("{}.kernels", side.key),
            &Value::from([side.run["kernel"].clone()]),
            kernels,
        );
    }
    if a["kernel"] == b["kernel"] {
        c.fail(format!("both records are of one kernel, {}", a["kernel"]));
    }
    for side in &sides {
        side.accounted(parts, c);
    }
    let same_cut = matched(parts, &sides, c);
    c.equal(
        "same_cut (every row the same stages on both kernels)",
        same_cut,
        doc["same_cut"] == true,
    );
    adds_up(exit, parts, &sides, c);
    let verdict = doc["verdict"].as_str().unwrap_or_default();
    if !verdict.starts_with("An exit takes") {
        c.fail(format!("verdict: expected the exit's time on both sides, got {verdict:?}"));
    }
    if !same_cut && !verdict.contains("cut the exit differently") {
        c.fail(format!(
            "verdict: the sides cut the exit differently, it does not say so: {verdict}"
        ));
    }
    c.figure(if same_cut { "same cut" } else { "cuts differ" }.to_owned());
}

/// One side of the diff: its key in the document and its run's report.
struct Side<'a> {
    key: &'static str,
    run: &'a Value,
    /// Every function the run's stages cover.
    code: BTreeSet<&'a str>,
}

impl<'a> Side<'a> {
    fn new(key: &'static str, run: &'a Value) -> Self {
        let code = stages(run).iter().flat_map(|s| strings(&s["covers"])).collect();
        Self { key, run, code }
    }

    /// This side's stages in `row`.
    fn in_row<'r>(&self, row: &'r Value) -> Vec<&'r str> {
        strings(&row[format!("{}_stages", self.key)])
    }

    /// The functions `names` (stages of this side) cover.
    fn covered(&self, names: &[&str]) -> BTreeSet<&'a str> {
        stages(self.run)
            .iter()
            .filter(|s| names.contains(&s["name"].as_str().unwrap_or_default()))
            .flat_map(|s| strings(&s["covers"]))
            .collect()
    }

    /// Time per exit of the stages `names`, from the run's report.
    fn ns_per_exit(&self, names: &[&str]) -> f64 {
        let exits = self.run["stages"][0]["count"].as_f64().unwrap_or(f64::NAN);
        let total: f64 = stages(self.run)
            .iter()
            .filter(|s| names.contains(&s["name"].as_str().unwrap_or_default()))
            .filter_map(|s| s["total_ns"].as_f64())
            .sum();
        total / exits
    }

    /// Every stage of the run is in exactly one row, and no row names a stage it lacks.
    fn accounted(&self, parts: &[Value], c: &mut Checks) {
        let in_rows: Vec<&str> = parts.iter().flat_map(|r| self.in_row(r)).collect();
        let names: Vec<&str> = stages(self.run).iter().filter_map(|s| s["name"].as_str()).collect();
        for name in &names {
            let times = in_rows.iter().filter(|n| *n == name).count();
            if times != 1 {
                c.fail(format!("{}'s stage {name} is in {times} rows, expected 1", self.key));
            }
        }
        for name in in_rows.iter().filter(|n| !names.contains(n)) {
            c.fail(format!("a row holds {}'s stage {name}, which its run does not have", self.key));
        }
    }
}

/// Each row's stages cover the same code on both kernels, but for what the row says only one
/// side covers, which the other kernel covers nowhere; a row of one kernel's stages (a path only
/// its exits took) covers code the other kernel covers too. Returns whether both kernels cut the
/// exit alike: the same stages in every row, covering the same code.
fn matched(parts: &[Value], [a, b]: &[Side; 2], c: &mut Checks) -> bool {
    let (mut one_stage, mut one_sided) = (0, 0);
    let mut same_cut = true;
    for row in parts {
        let name = row["name"].as_str().unwrap_or_default();
        let (in_a, in_b) = (a.in_row(row), b.in_row(row));
        let (code_a, code_b) = (a.covered(&in_a), b.covered(&in_b));
        one_stage += usize::from(in_a.len() == 1 && in_b.len() == 1);
        let one_side = in_a.is_empty() || in_b.is_empty();
        same_cut &= one_side || (in_a == in_b && code_a == code_b);
        match (in_a.is_empty(), in_b.is_empty()) {
            (true, true) => c.fail(format!("row {name} holds no stage of either side")),
            (false, false) => {
                for (side, code, other_code, other) in
                    [(a, &code_a, &code_b, b), (b, &code_b, &code_a, a)]
                {
                    let only: BTreeSet<&str> =
                        strings(&row[format!("only_{}", side.key)]).into_iter().collect();
                    let found: BTreeSet<&str> = code.difference(other_code).copied().collect();
                    let (this, that) = (side.key, other.key);
                    if found != only {
                        c.fail(format!(
                            "row {name}: code only {this}'s stages cover is {found:?}, the diff \
                             says {only:?}"
                        ));
                    }
                    if let Some(f) = only.iter().find(|f| other.code.contains(*f)) {
                        c.fail(format!(
                            "row {name}: {f} is said to be {this}'s only, yet {that}'s stages \
                             cover it in another row"
                        ));
                    }
                }
            }
            (false, true) | (true, false) => {
                one_sided += 1;
                let (code, other) = if in_b.is_empty() { (&code_a, b) } else { (&code_b, a) };
                if let Some(f) = code.iter().find(|f| !other.code.contains(*f)) {
                    c.fail(format!(
                        "row {name} of one side's stages covers {f}, which {}'s stages do not: \
                         it is no path only one side took",
                        other.key
                    ));
                }
            }
        }
    }
    c.figure(format!(
        "{} rows: {one_stage} of one stage a side, {one_sided} of one kernel's path",
        parts.len()
    ));
    same_cut
}

/// Each row's time per exit is its stages' in the reports, the rows add up to the whole exit on
/// both sides, and their changes to the exit's.
fn adds_up(exit: &Value, parts: &[Value], sides: &[Side; 2], c: &mut Checks) {
    let figure = |row: &Value, key: &str| row["ns_per_exit"][key].as_f64().unwrap_or(f64::NAN);
    for side in sides {
        let mut sum = 0.0;
        for row in parts {
            let got = figure(row, side.key);
            let expected = side.ns_per_exit(&side.in_row(row));
            if !close(got, expected) {
                c.fail(format!(
                    "row {}: {}'s time per exit is {got} ns, its stages' in the report \
                     {expected} ns",
                    row["name"], side.key
                ));
            }
            sum += got;
        }
        let whole = figure(exit, side.key);
        if !close(sum, whole) {
            c.fail(format!(
                "{}: the rows add up to {sum} ns per exit, the exit is {whole} ns",
                side.key
            ));
        }
    }
    let deltas: f64 = parts.iter().map(|r| figure(r, "delta")).sum();
    let delta = figure(exit, "delta");
    if !close(deltas, delta) {
        c.fail(format!(
            "the rows' changes add up to {deltas} ns per exit, the exit's is {delta} ns"
        ));
    }
    c.figure(format!(
        "exit {:.1} → {:.1} µs ({:+.1} µs)",
        figure(exit, "a") / 1e3,
        figure(exit, "b") / 1e3,
        delta / 1e3
    ));
}

/// Equal but for floating-point rounding.
fn close(x: f64, y: f64) -> bool {
    (x - y).abs() <= 1e-9 * x.abs().max(y.abs()) + 1e-6
}

/// The stages of a run document, the whole exit left out.
fn stages(run: &Value) -> &[Value] {
    run["stages"].as_array().map_or(&[], |s| s.get(1..).unwrap_or_default())
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

/// Where `got` first differs from `expected` (a JSON path), or `None` if they are equal.
fn first_difference(expected: &Value, got: &Value, at: &str) -> Option<String> {
    match (expected, got) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let (x, y) = (x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null));
                first_difference(x, y, &format!("{at}.{k}"))
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(x, y, &format!("{at}[{i}]"))),
        _ if expected == got => None,
        _ => Some(format!("at {at}: printed {expected}, reported {got}")),
    }
}

/// `exitprof ARGS FILES`'s stdout, parsed as JSON.
fn exitprof_json(exitprof: &Path, args: &[&str], files: &[&Path]) -> Result<Value, String> {
    let text = exitprof_text(exitprof, args, files)?;
    serde_json::from_str(&text).map_err(|e| format!("exitprof {args:?}: no JSON document ({e})"))
}

/// `exitprof ARGS FILES`'s stdout; fails unless it succeeds.
fn exitprof_text(exitprof: &Path, args: &[&str], files: &[&Path]) -> Result<String, String> {
    let out = Command::new(exitprof)
        .args(args)
        .args(files)
        .output()
        .map_err(|e| format!("starting {}: {e}", exitprof.display()))?;
    if !out.status.success() {
        return Err(format!(
            "exitprof {args:?} {files:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("exitprof {args:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A run document of 10 exits: each stage's name, the code it covers, its total time.
    fn run(kernel: &str, stages: &[(&str, &[&str], u64)]) -> Value {
        let total: u64 = stages.iter().map(|s| s.2).sum();
        let mut all = vec![json!({"name": "exit", "count": 10, "total_ns": total})];
        all.extend(stages.iter().map(|(n, c, t)| json!({"name": n, "covers": c, "total_ns": t})));
        json!({"kernel": kernel, "stages": all})
    }

    fn row(name: &str, a: &[&str], b: &[&str], ns: (f64, f64), only: (&[&str], &[&str])) -> Value {
        json!({
            "name": name, "a_stages": a, "b_stages": b, "only_a": only.0, "only_b": only.1,
            "ns_per_exit": {"a": ns.0, "b": ns.1, "delta": ns.1 - ns.0},
        })
    }

    fn diff(rows: Vec<Value>) -> Value {
        let (a, b) = rows.iter().fold((0.0, 0.0), |(a, b), r| {
            (
                a + r["ns_per_exit"]["a"].as_f64().unwrap(),
                b + r["ns_per_exit"]["b"].as_f64().unwrap(),
            )
        });
        let mut all = vec![row("exit", &["exit"], &["exit"], (a, b), (&[], &[]))];
        all.extend(rows);
        json!({
            "a": {"kernels": ["6.1.0-57-amd64"]}, "b": {"kernels": ["6.12.118"]},
            "same_cut": false, "rows": all,
            "verdict": "An exit takes 2.0µs in B against 1.0µs in A. A and B cut the exit \
                        differently: ...",
        })
    }

    /// 6.12 renamed exit_signals and cuts exit_mm with exit_files.
    fn runs() -> (Value, Value) {
        let a = run(
            "6.1.0-57-amd64",
            &[
                ("do_exit+exit_signals", &["do_exit", "exit_signals"], 300),
                ("exit_mm", &["exit_mm"], 500),
                ("exit_files", &["exit_files"], 200),
            ],
        );
        let b = run(
            "6.12.118",
            &[
                ("do_exit+exit_signal", &["do_exit", "exit_signal"], 500),
                ("exit_mm+exit_files", &["exit_mm", "exit_files"], 1_500),
            ],
        );
        (a, b)
    }

    fn rows() -> Vec<Value> {
        vec![
            row(
                "do_exit+exit_signals",
                &["do_exit+exit_signals"],
                &["do_exit+exit_signal"],
                (30.0, 50.0),
                (&["exit_signals"], &["exit_signal"]),
            ),
            row(
                "exit_mm+exit_files",
                &["exit_mm", "exit_files"],
                &["exit_mm+exit_files"],
                (70.0, 150.0),
                (&[], &[]),
            ),
        ]
    }

    #[test]
    fn a_diff_that_matches_and_accounts_for_both_kernels_passes() {
        let (a, b) = runs();
        let mut c = Checks::default();
        diffed(&diff(rows()), &a, &b, &mut c);
        assert!(c.failures.is_empty(), "{:?}", c.failures);
        assert_eq!(
            c.figures,
            [
                "2 rows: 1 of one stage a side, 0 of one kernel's path",
                "exit 0.1 → 0.2 µs (+0.1 µs)",
                "cuts differ"
            ]
        );
    }

    #[test]
    fn a_stage_left_out_or_code_said_to_be_one_sides_is_found() {
        let (a, b) = runs();
        let mut rows = rows();
        rows[1]["a_stages"] = json!(["exit_mm"]);
        rows[0]["only_a"] = json!([]);
        let mut c = Checks::default();
        diffed(&diff(rows), &a, &b, &mut c);
        assert_eq!(
            c.failures,
            [
                "a's stage exit_files is in 0 rows, expected 1",
                "row do_exit+exit_signals: code only a's stages cover is {\"exit_signals\"}, the \
                 diff says {}",
                "row exit_mm+exit_files: code only b's stages cover is {\"exit_files\"}, the diff \
                 says {}",
                "row \"exit_mm+exit_files\": a's time per exit is 70 ns, its stages' in the \
                 report 50 ns",
            ]
        );
    }

    #[test]
    fn rows_that_do_not_add_up_to_the_exit_fail() {
        let (a, b) = runs();
        let mut doc = diff(rows());
        doc["rows"][0]["ns_per_exit"] = json!({"a": 100.0, "b": 210.0, "delta": 110.0});
        let mut c = Checks::default();
        diffed(&doc, &a, &b, &mut c);
        assert_eq!(
            c.failures,
            [
                "b: the rows add up to 200 ns per exit, the exit is 210 ns",
                "the rows' changes add up to 100 ns per exit, the exit's is 110 ns",
            ]
        );
    }

    #[test]
    fn the_first_difference_is_named_by_its_path() {
        let printed = json!({"stages": [{"count": 3}, {"count": 4}], "lost": 0});
        let reported = json!({"stages": [{"count": 3}, {"count": 5}], "lost": 0});
        assert_eq!(
            first_difference(&printed, &reported, ""),
            Some("at .stages[1].count: printed 4, reported 5".to_owned())
        );
        assert_eq!(first_difference(&printed, &printed, ""), None);
    }
}
