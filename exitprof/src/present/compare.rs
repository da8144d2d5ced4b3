//! A compare's or a sweep's outcome presented: its document, its tables and its exports.

use exitprof_core::{
    export::{ExportSet, ExportTarget},
    report::compare_document::{
        CompareDocument, ComparisonDoc, ComparisonSetup, SweepDocument, SweepRow,
    },
};
use exitprof_engine::{
    base::runtime,
    compare::{self, CompareRequest, Compared, Comparison},
};

use super::publish::{check_exports, publish};

/// `compare` or `sweep`: runs it, then prints its report and writes its exports.
pub fn compare(request: &CompareRequest, exports: &[ExportTarget]) -> anyhow::Result<()> {
    check_exports(exports)?;
    let outcome = runtime()?.block_on(compare::run(request))?;
    let target = &request.run.target;
    // Each comparison with its row's tag in the exports (none for a plain compare).
    let (document, text, tagged) = match &outcome.compared {
        Compared::Storm(comparison) => {
            let doc = CompareDocument::new(&outcome, target, comparison);
            let document = serde_json::to_string_pretty(&doc)?;
            (document, doc.render(), vec![(None, &**comparison)])
        }
        Compared::Staggers(rows) => {
            let doc = SweepDocument {
                setup: ComparisonSetup::new(&outcome, target),
                rows: rows
                    .iter()
                    .map(|(stagger_us, c)| SweepRow {
                        stagger_us: *stagger_us,
                        result: ComparisonDoc::new(c),
                    })
                    .collect(),
                probes: outcome.plan.points.clone(),
            };
            let document = serde_json::to_string_pretty(&doc)?;
            let tagged = rows.iter().map(|(s, c)| (Some(format!("stagger={s}")), c)).collect();
            (document, doc.render(), tagged)
        }
    };
    let text = if request.run.json { format!("{document}\n") } else { text };
    let tagged: Vec<(Option<String>, &Comparison)> = tagged;
    let set = || ExportSet::from_comparisons(&outcome, target, &tagged, &document);
    publish(&text, exports, set, outcome.interrupted)
}
