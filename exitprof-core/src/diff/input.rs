//! What `diff` reads: saved runs, each its [`RunDocument`]: the document `exitprof --json`
//! printed, or a record file (`exitprof record`), whose report is that document.

use std::{
    hash::{DefaultHasher, Hash as _, Hasher as _},
    path::{Path, PathBuf},
};

use crate::{base::UsageError, document::run::RunDocument, run::record};

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

    /// Reads the run, with a hash of the file's bytes (the same run given twice has the same);
    /// a file that is not one is bad input (status 2).
    pub fn read(&self) -> Result<(RunDocument, u64), UsageError> {
        let path = self.path();
        let bad = |why: String| UsageError(format!("{}: {why}", path.display()));
        let text = std::fs::read(path).map_err(|e| {
            UsageError(format!("cannot read the saved run {}: {e}", path.display()))
        })?;
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        let content = hasher.finish();
        if !text.starts_with(record::MAGIC) {
            return RunDocument::from_json(&text).map(|doc| (doc, content)).map_err(bad);
        }
        let outcome = record::replay(path).map_err(|e| bad(e.to_string()))?;
        let mut doc = RunDocument::new(&outcome);
        // The document lists a stage's most sampled stacks only; a record has them all, which
        // the differential flame graph and the code named for a change weigh.
        for stage in &mut doc.stages {
            if let Some(sampled) = outcome.on_cpu.stages.iter().find(|s| s.stage == stage.name) {
                stage.on_cpu_in.clone_from(&sampled.stacks);
            }
        }
        Ok((doc, content))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::LazyLock;

    use super::*;
    use crate::document::run::{SCHEMA, tests::synthetic_run};

    /// The document of a run, every key of a real one.
    static BASE: LazyLock<serde_json::Value> =
        LazyLock::new(|| serde_json::to_value(RunDocument::new(&synthetic_run())).unwrap());

    /// A run document, every key of a real one, with the figures `diff` reads set: each stage
    /// is (name, covers, total_ns per exit), all on-CPU, every exit through every stage.
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
                "off_cpu_ns": 0,
                "runq_ns": 0,
                "share_of_exit": 0.0,
                "off_cpu_share": 0.0,
                "runq_share": 0.0,
                "covers": covers,
                "on_cpu_samples": 0,
                "on_cpu_mostly_in": null,
                "on_cpu_in": [],
                "probe_effect_ns": null,
                "buckets": [],
            })
        };
        let whole: f64 = stages.iter().map(|s| s.2).sum();
        let mut rows = vec![stage("exit", &[], whole)];
        rows.extend(stages.iter().map(|&(name, covers, ns)| stage(name, covers, ns)));
        let mut doc = BASE.clone();
        doc["kernel"] = "6.18.0-test".into();
        doc["attach"] = "auto".into();
        doc["workload"] = serde_json::json!({"kind": "threads", "threads": 200, "reps": 3, "stagger_us": 0, "rate": null});
        doc["exits_recorded"] = exits.into();
        doc["stages"] = rows.into();
        doc["blocked_in"] = serde_json::json!([]);
        doc
    }

    pub(crate) fn view(doc: &serde_json::Value) -> RunDocument {
        RunDocument::from_json(doc.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn a_run_document_is_read_and_its_workload_described() {
        let v =
            view(&document(10, &[("do_exit…taskstats_exit", &["do_exit", "exit_signals"], 50.0)]));
        assert_eq!(v.exits(), 10);
        assert_eq!(v.parts()[0].covers, ["do_exit", "exit_signals"]);
        assert_eq!(v.workload.describe(), "threads (threads=200 reps=3 stagger_us=0)");
    }

    /// A run's document read back from its JSON is the document written: written again, the
    /// same JSON.
    #[test]
    fn a_run_document_reads_back_as_written() {
        let doc = RunDocument::new(&synthetic_run());
        let json = serde_json::to_string_pretty(&doc).unwrap();
        let read = RunDocument::from_json(json.as_bytes()).unwrap();
        assert_eq!(read.schema, SCHEMA);
        assert_eq!(read.stages, doc.stages);
        assert_eq!(serde_json::to_string_pretty(&read).unwrap(), json);
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
        assert_eq!((v.schema, v.exits(), v.parts()[0].latency.total_ns), (0, 10, 500));
    }

    #[test]
    fn what_is_not_a_run_document_is_refused_saying_why() {
        let read = |doc: &serde_json::Value| RunDocument::from_json(doc.to_string().as_bytes());
        let doc = document(10, &[("exit_mm", &["exit_mm"], 5.0)]).to_string();
        let truncated = RunDocument::from_json(&doc.as_bytes()[..doc.len() / 2]).unwrap_err();
        assert!(truncated.contains("truncated"), "{truncated}");
        let garbage = RunDocument::from_json(b"stages: [exit]").unwrap_err();
        assert!(garbage.contains("not a JSON document"), "{garbage}");
        let other = RunDocument::from_json(br#"{"name": "package.json", "version": "1.0"}"#);
        let other = other.unwrap_err();
        assert!(
            other.contains("not an exitprof run document") && other.contains("kernel"),
            "{other}"
        );
        let compare = RunDocument::from_json(br#"{"on": {}, "off": {}, "table": []}"#);
        assert!(compare.unwrap_err().contains("compare"));
        let mut newer = document(10, &[("exit_mm", &["exit_mm"], 5.0)]);
        newer["schema"] = (SCHEMA + 1).into();
        let newer = read(&newer).unwrap_err();
        assert!(newer.contains("schema version 2") && newer.contains("newer exitprof"), "{newer}");
        let mut empty = document(0, &[]);
        assert!(read(&empty).unwrap_err().contains("no exit"));
        empty["stages"] = serde_json::json!([]);
        assert!(read(&empty).unwrap_err().contains("`exit`"));
    }
}
