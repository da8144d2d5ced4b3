//! What `diff` reads: saved runs, each yielding a [`RunView`] of the figures it compares: the
//! document `exitprof --json` printed, or a record file (`exitprof record`), whose report is
//! that document.

use std::{
    hash::{DefaultHasher, Hash as _, Hasher as _},
    path::{Path, PathBuf},
};

use serde::Deserialize;

use crate::{base::UsageError, report::run_document::RunDocument, run::record};

/// One saved run: a `--json` run document or a record file, told apart by the record's magic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Saved(PathBuf),
}

impl Input {
    pub fn path(&self) -> &Path {
        match self {
            Self::Saved(path) => path,
        }
    }

    /// Reads the run; a file that is not one is bad input (status 2).
    pub fn read(&self) -> Result<RunView, UsageError> {
        let path = self.path();
        let bad = |why: String| UsageError(format!("{}: {why}", path.display()));
        let text = std::fs::read(path).map_err(|e| {
            UsageError(format!("cannot read the saved run {}: {e}", path.display()))
        })?;
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        let content = hasher.finish();
        if !text.starts_with(record::MAGIC) {
            return RunView::from_json(&text).map(|v| RunView { content, ..v }).map_err(bad);
        }
        let outcome = record::replay(path).map_err(|e| bad(e.to_string()))?;
        let document = serde_json::to_vec(&RunDocument::new(&outcome))
            .map_err(|e| bad(format!("its report cannot be written as JSON: {e}")))?;
        let mut view = RunView::from_json(&document).map_err(bad)?;
        view.content = content;
        // The document lists a stage's most sampled stacks only; a record has them all, which
        // the differential flame graph and the code named for a change weigh.
        for stage in &mut view.stages {
            if let Some(sampled) = outcome.on_cpu.stages.iter().find(|s| s.stage == stage.name) {
                stage.on_cpu_in = sampled
                    .stacks
                    .iter()
                    .map(|s| StackView { stack: s.stack.clone(), est_ns: s.est_ns })
                    .collect();
            }
        }
        Ok(view)
    }
}

/// The part of a run document that `diff` reads. Later versions of the document add keys; the
/// ones here stay.
#[derive(Clone, Debug, Deserialize)]
pub struct RunView {
    pub kernel: String,
    pub attach: String,
    /// The run was cut short.
    #[serde(default)]
    pub partial: bool,
    /// What was profiled, as the run document names it (kind and parameters).
    #[serde(default)]
    pub workload: serde_json::Map<String, serde_json::Value>,
    /// The whole exit (named `exit`) first, then each stage in kernel order.
    pub stages: Vec<StageView>,
    #[serde(default)]
    pub blocked_in: Vec<BlockedView>,
    /// Exits lost, all causes together, and those lost to a full ring buffer.
    #[serde(default)]
    pub lost: u64,
    #[serde(default)]
    pub losses: LossesView,
    /// A hash of the file's bytes: the same run given twice has the same.
    #[serde(skip)]
    pub content: u64,
    /// The namespace teardowns the exits set off (documents before them have none).
    #[serde(default)]
    pub teardowns: Option<TeardownsView>,
}

/// The losses of a run that `diff` weighs.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LossesView {
    /// Exits lost because the exit ring buffer was full: those of a burst, not a random sample.
    #[serde(default)]
    pub ringbuf_full: u64,
}

/// A run's namespace teardowns, by kind.
#[derive(Clone, Debug, Deserialize)]
pub struct TeardownsView {
    pub net: TeardownView,
    pub user: TeardownView,
}

impl TeardownsView {
    /// Each kind, by the key `diff` matches it on.
    pub fn each(&self) -> [(&'static str, &TeardownView); 2] {
        [("net", &self.net), ("user", &self.user)]
    }
}

/// One kind of teardown's figures.
#[derive(Clone, Debug, Deserialize)]
pub struct TeardownView {
    /// `network namespace`, and the work function that tears it down (`cleanup_net`).
    pub kind: String,
    pub function: String,
    /// Teardowns joined to their exits.
    pub joined: u64,
    /// Each one's share of its run, and the wait from its exit's end to its start.
    pub teardown_ns: SummaryView,
    pub exit_to_start_ns: SummaryView,
    /// Of the joined teardowns' time: blocked, and on a CPU.
    pub blocked_share: f64,
    pub on_cpu_share: f64,
}

/// A latency summary's figure `diff` reads.
#[derive(Clone, Debug, Deserialize)]
pub struct SummaryView {
    pub mean_ns: f64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct StageView {
    pub name: String,
    pub count: u64,
    pub mean_ns: f64,
    pub p50_ns: f64,
    pub p99_ns: f64,
    pub total_ns: f64,
    pub off_cpu_share: f64,
    /// The kernel code the stage covers (empty for the whole exit, and for a stage between two
    /// probe points with no known code between them).
    #[serde(default)]
    pub covers: Vec<String>,
    #[serde(default)]
    pub on_cpu_in: Vec<StackView>,
}

/// A sampled stack of a stage, with the on-CPU time it stands for.
#[derive(Clone, Debug, Deserialize)]
pub struct StackView {
    pub stack: Vec<String>,
    pub est_ns: f64,
}

/// A stack exits blocked in, with the time it stands for.
#[derive(Clone, Debug, Deserialize)]
pub struct BlockedView {
    pub stage: String,
    pub stack: Vec<String>,
    pub est_ns: f64,
}

/// Keys only the documents of `compare` and `sweep` have.
const COMPARISON_KEYS: [&str; 2] = ["on", "rows"];

impl RunView {
    /// Parses and checks a run document; says what is wrong with anything else.
    pub fn from_json(text: &[u8]) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_slice(text).map_err(|e| {
            if e.is_eof() {
                format!("the JSON ends early ({e}): a truncated run document?")
            } else {
                format!("not a JSON document: {e}")
            }
        })?;
        let not_a_run = "is not an exitprof run document (what `exitprof --json` prints)";
        if COMPARISON_KEYS.iter().any(|k| value.get(k).is_some()) {
            return Err(format!(
                "{not_a_run}: it is a compare or sweep document; diff compares the documents of \
                 plain runs"
            ));
        }
        let view: Self = serde_json::from_value(value).map_err(|e| format!("{not_a_run}: {e}"))?;
        match view.stages.first() {
            Some(exit) if exit.name == "exit" && exit.count > 0 => Ok(view),
            Some(exit) if exit.name == "exit" => Err("it records no exit".to_owned()),
            _ => Err(format!("{not_a_run}: its first stage is not the whole exit, `exit`")),
        }
    }

    /// Exits recorded: those of the whole exit's row.
    pub fn exits(&self) -> u64 {
        self.stages[0].count
    }

    /// The stages, the whole exit left out.
    pub fn parts(&self) -> &[StageView] {
        &self.stages[1..]
    }

    /// `threads (threads=200 reps=3 stagger_us=2)`: the workload as the document names it.
    pub fn describe_workload(&self) -> String {
        let kind = self.workload.get("kind").and_then(|k| k.as_str()).unwrap_or("unknown workload");
        let params: Vec<String> = self
            .workload
            .iter()
            .filter(|(k, v)| *k != "kind" && !v.is_null())
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                serde_json::Value::Array(items) => {
                    let words: Vec<String> = items
                        .iter()
                        .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
                        .collect();
                    format!("{k}={}", words.join(" "))
                }
                other => format!("{k}={other}"),
            })
            .collect();
        if params.is_empty() { kind.to_owned() } else { format!("{kind} ({})", params.join(" ")) }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A run document with the keys `diff` reads; each stage is (name, covers, total_ns per
    /// exit), all on-CPU, every exit through every stage.
    pub(crate) fn document(exits: u64, stages: &[(&str, &[&str], f64)]) -> serde_json::Value {
        let stage = |name: &str, covers: &[&str], per_exit: f64| {
            serde_json::json!({
                "name": name,
                "count": exits,
                "mean_ns": per_exit,
                "p50_ns": per_exit,
                "p99_ns": per_exit * 2.0,
                "total_ns": per_exit * exits as f64,
                "off_cpu_share": 0.0,
                "covers": covers,
                "buckets": [],
            })
        };
        let whole: f64 = stages.iter().map(|s| s.2).sum();
        let mut rows = vec![stage("exit", &[], whole)];
        rows.extend(stages.iter().map(|&(name, covers, ns)| stage(name, covers, ns)));
        serde_json::json!({
            "partial": false,
            "kernel": "6.18.0-test",
            "attach": "auto",
            "workload": {"kind": "threads", "threads": 200, "reps": 3, "rate": null},
            "exits_recorded": exits,
            "stages": rows,
            "blocked_in": [],
            "verdict": "made by hand",
        })
    }

    pub(crate) fn view(doc: &serde_json::Value) -> RunView {
        RunView::from_json(doc.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn a_run_document_is_read_and_its_workload_described() {
        let v =
            view(&document(10, &[("do_exit…taskstats_exit", &["do_exit", "exit_signals"], 50.0)]));
        assert_eq!(v.exits(), 10);
        assert_eq!(v.parts()[0].covers, ["do_exit", "exit_signals"]);
        assert_eq!(v.describe_workload(), "threads (threads=200 reps=3)");
    }

    #[test]
    fn what_is_not_a_run_document_is_refused_saying_why() {
        let doc = document(10, &[("exit_mm", &["exit_mm"], 5.0)]).to_string();
        let truncated = RunView::from_json(&doc.as_bytes()[..doc.len() / 2]).unwrap_err();
        assert!(truncated.contains("truncated"), "{truncated}");
        let garbage = RunView::from_json(b"stages: [exit]").unwrap_err();
        assert!(garbage.contains("not a JSON document"), "{garbage}");
        let other = RunView::from_json(br#"{"name": "package.json", "version": "1.0"}"#);
        let other = other.unwrap_err();
        assert!(
            other.contains("not an exitprof run document") && other.contains("kernel"),
            "{other}"
        );
        let compare = RunView::from_json(br#"{"on": {}, "off": {}, "table": []}"#).unwrap_err();
        assert!(compare.contains("compare"), "{compare}");
        let mut empty = document(0, &[]);
        assert!(RunView::from_json(empty.to_string().as_bytes()).unwrap_err().contains("no exit"));
        empty["stages"] = serde_json::json!([]);
        assert!(RunView::from_json(empty.to_string().as_bytes()).unwrap_err().contains("`exit`"));
    }
}
