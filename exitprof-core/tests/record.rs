//! The library alone, without the engine or the binary: a record file read back, reported and
//! diffed, as another program would use exitprof-core. The records are those the binary's tests
//! keep (8 threads, 1 rep, sampled at 20 kHz; the second in format 2, with kernel addresses).

use std::path::PathBuf;

use exitprof_core::{
    diff::{self, DiffRequest, Input},
    document::run::RunDocument,
    report::{self, terminal},
    run::record,
};

fn kept(name: &str) -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "..", "exitprof", "tests", "data", name].iter().collect()
}

#[test]
fn a_record_reads_back_into_its_report() {
    let outcome = record::replay(&kept("threads-8.rec")).unwrap();
    let doc = RunDocument::new(&outcome);
    assert_eq!((doc.exits_expected, doc.exits_recorded, doc.lost), (Some(8), 8, 0));
    assert_eq!(doc.elapsed_s, 0.006053399, "a figure not as it was measured");
    assert_eq!(doc.stages[0].name, "exit");
    assert_eq!(doc.stages[0].latency.count, 8);
    let joined: usize = doc.stages.iter().map(|s| s.on_cpu_in.len()).sum();
    assert_eq!(joined, 3, "the samples joined to stages");
    let report = terminal::render(&doc);
    assert!(report.contains("8 recorded of 8 expected, 0 lost"), "{report}");

    // The document reads back as it was written.
    let json = serde_json::to_vec(&doc).unwrap();
    let read = RunDocument::from_json(&json).unwrap();
    assert_eq!(serde_json::to_vec(&read).unwrap(), json);
}

#[test]
fn two_records_diff_stage_by_stage() {
    let request = DiffRequest {
        a: vec![Input::Saved(kept("threads-8.rec"))],
        b: vec![Input::Saved(kept("threads-8-v2.rec"))],
        json: false,
    };
    let doc = diff::diff(&request).unwrap();
    assert_eq!((doc.a.exits.as_slice(), doc.b.exits.as_slice()), ([8].as_slice(), [8].as_slice()));
    assert!(doc.rows.iter().any(|row| row.group.name == "exit"), "no row of the whole exit");
    assert!(!doc.verdict.is_empty());
    let table = report::diff::render(&doc);
    assert!(table.contains(&doc.verdict), "{table}");

    let same = DiffRequest { b: request.a.clone(), ..request };
    let refused = diff::diff(&same).unwrap_err();
    assert!(refused.to_string().contains("hold the same run"), "{refused}");
}
