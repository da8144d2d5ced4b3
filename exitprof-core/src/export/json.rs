//! JSON (`.json`): the `--json` document, byte for byte: run metadata, the stage table and every
//! stage's histogram buckets (see `docs/reference/exports.md` for its keys).

use super::ExportSet;

pub fn encode(set: &ExportSet) -> Vec<u8> {
    format!("{}\n", set.document).into_bytes()
}

#[cfg(test)]
mod tests {
    use hdrhistogram::Histogram;
    use serde::Deserialize;

    use super::*;
    use crate::{
        analysis::histogram::Bucket,
        document::run::{RunDocument, tests::synthetic_run},
    };

    /// The document's keys this test reads back, typed.
    #[derive(Deserialize)]
    struct DocumentBack {
        partial: bool,
        exits_recorded: u64,
        stages: Vec<StageBack>,
    }

    #[derive(Deserialize)]
    struct StageBack {
        name: String,
        count: u64,
        min_ns: u64,
        max_ns: u64,
        p99_ns: u64,
        total_ns: u128,
        buckets: Vec<Bucket>,
    }

    #[test]
    fn the_document_reads_back_with_every_histogram() {
        let run = synthetic_run();
        let doc = RunDocument::new(&run);
        let printed = serde_json::to_string_pretty(&doc).unwrap();
        let set = ExportSet::from_run(&run, &doc, printed.clone());
        let bytes = encode(&set);
        assert_eq!(bytes, format!("{printed}\n").into_bytes(), "the export is what --json prints");

        let back: DocumentBack = serde_json::from_slice(&bytes).unwrap();
        assert!(!back.partial);
        assert_eq!(back.exits_recorded, 2_000);
        let latencies: Vec<_> = run.profile.latencies().collect();
        assert_eq!(back.stages.len(), latencies.len());
        for (stage, (name, latency)) in back.stages.iter().zip(latencies) {
            assert_eq!(stage.name, name);
            let h = &latency.hist;
            let mut rebuilt = Histogram::<u64>::new_with_bounds(1, h.high(), 3).unwrap();
            for b in &stage.buckets {
                assert_eq!(h.lowest_equivalent(b.high_ns), b.low_ns, "{name}: bucket {b:?}");
                rebuilt.record_n(b.high_ns, b.count).unwrap();
            }
            assert_eq!(
                (rebuilt.len(), rebuilt.min(), rebuilt.max(), rebuilt.value_at_quantile(0.99)),
                (stage.count, stage.min_ns, stage.max_ns, stage.p99_ns),
                "{name}: buckets against the stage's figures"
            );
            assert_eq!(&rebuilt, h, "{name}: the buckets are not the histogram");
            assert_eq!(stage.total_ns, latency.total_ns);
        }
    }
}
