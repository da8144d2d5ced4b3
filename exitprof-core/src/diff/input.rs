//! What `diff` reads: saved runs, each yielding a [`RunView`] of the figures it compares: the
//! document `exitprof --json` printed, or a record file (`exitprof record`), whose report is
//! that document.

use std::{
    hash::{DefaultHasher, Hash as _, Hasher as _},
    path::{Path, PathBuf},
};

use exitprof_common::counters;
use serde::Deserialize;

use crate::{
    analysis::{blocking::BlockedIn, histogram::Summary, teardown::TeardownReport},
    base::UsageError,
    report::run_document::{RunDocument, SCHEMA, StageDoc},
    run::record,
};

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
        let mut view = RunView::of(RunDocument::new(&outcome));
        view.content = content;
        // The document lists a stage's most sampled stacks only; a record has them all, which
        // the differential flame graph and the code named for a change weigh.
        for stage in &mut view.stages {
            if let Some(sampled) = outcome.on_cpu.stages.iter().find(|s| s.stage == stage.name) {
                stage.on_cpu_in.clone_from(&sampled.stacks);
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
    pub stages: Vec<StageDoc>,
    #[serde(default)]
    pub blocked_in: Vec<BlockedIn>,
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
    pub teardown_ns: Summary,
    pub exit_to_start_ns: Summary,
    /// Of the joined teardowns' time: blocked, and on a CPU.
    pub blocked_share: f64,
    pub on_cpu_share: f64,
}

/// Keys only the documents of `compare` and `sweep` have.
const COMPARISON_KEYS: [&str; 2] = ["on", "rows"];

impl RunView {
    /// The figures of a run's document, as its JSON would read back.
    fn of(doc: RunDocument) -> Self {
        let teardown = |t: &TeardownReport| TeardownView {
            kind: t.kind.to_owned(),
            function: t.function.to_owned(),
            joined: t.joined,
            teardown_ns: t.teardown_ns.clone(),
            exit_to_start_ns: t.exit_to_start_ns.clone(),
            blocked_share: t.blocked_share,
            on_cpu_share: t.on_cpu_share,
        };
        let workload = match serde_json::to_value(&doc.workload) {
            Ok(serde_json::Value::Object(workload)) => workload,
            _ => serde_json::Map::new(),
        };
        Self {
            kernel: doc.kernel,
            attach: doc.attach.to_string(),
            partial: doc.partial,
            workload,
            stages: doc.stages,
            blocked_in: doc.blocked_in,
            lost: doc.lost,
            losses: LossesView { ringbuf_full: doc.losses.get(counters::RINGBUF_FULL) },
            content: 0,
            teardowns: Some(TeardownsView {
                net: teardown(&doc.teardowns.net),
                user: teardown(&doc.teardowns.user),
            }),
        }
    }

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
        // Documents before the version key are version 0; a newer one may mean anything.
        let schema = value.get("schema").map_or(Some(0), serde_json::Value::as_u64);
        match schema {
            None => return Err(format!("{not_a_run}: its `schema` is not a version number")),
            Some(version) if version > u64::from(SCHEMA) => {
                return Err(format!(
                    "it is a run document of schema version {version}, written by a newer \
                     exitprof; this one reads versions up to {SCHEMA}: read it with that \
                     exitprof or a newer one"
                ));
            }
            Some(_) => {}
        }
        if COMPARISON_KEYS.iter().any(|k| value.get(k).is_some()) {
            return Err(format!(
                "{not_a_run}: it is a compare or sweep document; diff compares the documents of \
                 plain runs"
            ));
        }
        let view: Self = serde_json::from_value(value).map_err(|e| format!("{not_a_run}: {e}"))?;
        match view.stages.first() {
            Some(exit) if exit.name == "exit" && exit.latency.count > 0 => Ok(view),
            Some(exit) if exit.name == "exit" => Err("it records no exit".to_owned()),
            _ => Err(format!("{not_a_run}: its first stage is not the whole exit, `exit`")),
        }
    }

    /// Exits recorded: those of the whole exit's row.
    pub fn exits(&self) -> u64 {
        self.stages[0].latency.count
    }

    /// The stages, the whole exit left out.
    pub fn parts(&self) -> &[StageDoc] {
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
            let ns = per_exit.round() as u64;
            serde_json::json!({
                "name": name,
                "count": exits,
                "mean_ns": per_exit,
                "min_ns": ns,
                "p50_ns": ns,
                "p90_ns": ns,
                "p99_ns": ns * 2,
                "p999_ns": ns * 2,
                "max_ns": ns * 2,
                "total_ns": (per_exit * exits as f64).round() as u64,
                "share_of_exit": 0.0,
                "off_cpu_share": 0.0,
                "runq_share": 0.0,
                "covers": covers,
                "buckets": [],
            })
        };
        let whole: f64 = stages.iter().map(|s| s.2).sum();
        let mut rows = vec![stage("exit", &[], whole)];
        rows.extend(stages.iter().map(|&(name, covers, ns)| stage(name, covers, ns)));
        serde_json::json!({
            "schema": SCHEMA,
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

    /// A latency summary whose mean is `mean_ns`, as documents write it.
    pub(crate) fn summary(mean_ns: f64) -> serde_json::Value {
        let ns = mean_ns.round() as u64;
        serde_json::json!({
            "count": 1, "mean_ns": mean_ns, "min_ns": ns, "p50_ns": ns, "p90_ns": ns,
            "p99_ns": ns, "p999_ns": ns, "max_ns": ns, "total_ns": ns, "off_cpu_ns": 0,
            "runq_ns": 0,
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

    /// A run's document read back from its JSON holds the stages it was written with, and the
    /// same figures as the document built straight from the run (how a record is read).
    #[test]
    fn a_run_document_reads_back_as_written() {
        let doc = RunDocument::new(&crate::export::from_run::tests::synthetic_run());
        let stages = doc.stages.clone();
        let json = serde_json::to_vec(&doc).unwrap();
        let read = RunView::from_json(&json).unwrap();
        assert_eq!(read.stages, stages);
        let built = RunView::of(doc);
        assert_eq!(built.stages, read.stages);
        assert_eq!(built.blocked_in, read.blocked_in);
        assert_eq!(
            (&built.kernel, &built.attach, &built.workload, built.lost, built.partial),
            (&read.kernel, &read.attach, &read.workload, read.lost, read.partial)
        );
        assert_eq!(built.describe_workload(), read.describe_workload());
    }

    /// Documents of the releases before the `schema` key, their stages without the off-CPU and
    /// runnable ns, read as they did.
    #[test]
    fn a_document_without_the_schema_key_is_read() {
        let mut doc = document(10, &[("exit_mm", &["exit_mm"], 50.0)]);
        let old = doc.as_object_mut().unwrap();
        old.remove("schema");
        for stage in old["stages"].as_array_mut().unwrap() {
            let stage = stage.as_object_mut().unwrap();
            stage.remove("off_cpu_ns");
            stage.remove("runq_ns");
        }
        let v = view(&doc);
        assert_eq!((v.exits(), v.parts()[0].latency.total_ns), (10, 500));
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
        let mut newer = document(10, &[("exit_mm", &["exit_mm"], 5.0)]);
        newer["schema"] = (SCHEMA + 1).into();
        let newer = RunView::from_json(newer.to_string().as_bytes()).unwrap_err();
        assert!(newer.contains("newer exitprof"), "{newer}");
        let mut empty = document(0, &[]);
        assert!(RunView::from_json(empty.to_string().as_bytes()).unwrap_err().contains("no exit"));
        empty["stages"] = serde_json::json!([]);
        assert!(RunView::from_json(empty.to_string().as_bytes()).unwrap_err().contains("`exit`"));
    }
}
