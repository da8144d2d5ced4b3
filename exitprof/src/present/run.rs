//! A run's outcome presented: the live run's, and the recorded run's that `exitprof report`
//! reads back, alike.

use std::path::Path;

use exitprof_common::counters;
use exitprof_core::{
    analysis::stage_detail::{self, StageDetail},
    document::run::RunDocument,
    export::{ExportSet, ExportTarget},
    report::{record_views, terminal},
};
use exitprof_engine::{
    base::{UsageError, runtime},
    profiled::{Target, workload},
    run::{
        self, RunOutcome, RunRequest,
        record::{
            self, ExitsShown,
            view::{Shown, View},
        },
    },
};

use super::publish::{check_exports, publish};
use crate::present::progress::ProgressLine;

/// A plain run (or `exitprof record`), with a progress line unless the report is JSON.
pub fn run(request: &RunRequest, exports: &[ExportTarget]) -> anyhow::Result<()> {
    check_exports(exports)?;
    let mut progress = ProgressLine::new(!request.json, request.json);
    let outcome = runtime()?.block_on(run::run(request, &mut progress))?;
    // Slow exits printed as JSON lines: the document is one line more.
    let one_line = request.json && request.slower_than.is_some();
    present(&outcome, request.json, exports, outcome.interrupted, None, one_line)?;
    if let Some(failure) = workload_failure(&outcome) {
        anyhow::bail!("{failure}");
    }
    Ok(())
}

/// `exitprof report`: a recorded run's report, as the run printed and exported it, or a view of
/// it. A file that cannot be read is refused like bad usage (status 2), before anything is
/// printed or written.
pub fn recorded(
    file: &Path,
    view: &View,
    json: bool,
    exports: &[ExportTarget],
) -> anyhow::Result<()> {
    let outcome = view.replay(file).map_err(|e| UsageError(format!("{}: {e}", file.display())))?;
    let shown = view_text(view, file, &outcome, json)?;
    // Partial or not, the report itself was not cut short: it ends as usual.
    present(&outcome, json, exports, None, shown, false)?;
    // As the run said it (not of a workload it killed on a signal).
    if let Some(failure) = workload_failure(&outcome).filter(|_| outcome.interrupted.is_none()) {
        eprintln!("exitprof: in the recorded run, {failure}");
    }
    Ok(())
}

/// Prints a run's report (the tables, or its JSON document), or a view of it (`shown`), and
/// writes its exports; when `interrupted`, then ends the process as that signal would have.
fn present(
    outcome: &RunOutcome,
    json: bool,
    exports: &[ExportTarget],
    interrupted: Option<i32>,
    shown: Option<String>,
    one_line: bool,
) -> anyhow::Result<()> {
    let doc = RunDocument::new(outcome);
    if doc.lost > 0 {
        // Said in the report too; here also for those who read only the exports.
        let advice = if doc.losses.get(counters::RINGBUF_FULL) > 0 {
            "; a larger --ringbuf-bytes keeps up with faster storms"
        } else {
            ""
        };
        eprintln!(
            "exitprof: warning: {} exits were lost{}{advice}",
            doc.lost,
            terminal::loss_detail(&doc)
        );
    }
    let document = serde_json::to_string_pretty(&doc)?;
    let text = match shown {
        Some(view) => view,
        None if json && one_line => format!("{}\n", serde_json::to_string(&doc)?),
        None if json => format!("{document}\n"),
        None => terminal::render(&doc),
    };
    publish(&text, exports, || ExportSet::from_run(outcome, &doc, document), interrupted)
}

/// What a view of a record prints of its run `run`, replayed from `file`; `None` for the run's
/// report itself.
fn view_text(
    view: &View,
    file: &Path,
    run: &RunOutcome,
    json: bool,
) -> anyhow::Result<Option<String>> {
    match &view.shown {
        Shown::Report => Ok(None),
        Shown::ByKind => {
            let kinds = run
                .profile
                .kinds()
                .into_iter()
                .map(|(kind, _, _)| view.replay_kind(file, kind))
                .collect::<Result<Vec<_>, _>>()?;
            record_views::by_kind(run, &kinds, json).map(Some)
        }
        Shown::Stage(name) => {
            let rows = run.profile.rows();
            let row = stage_detail::find(&rows, name)
                .map_err(|why| UsageError(format!("--stage {why}")))?;
            let samples = run.on_cpu.stages.iter().find(|s| s.stage == row.stage.name);
            let detail = StageDetail::of(row, samples, &run.blocked.stacks);
            record_views::stage(run, &detail, json).map(Some)
        }
        Shown::Exits(shown) => {
            let exits = record::replay_exits(file, *shown)
                .map_err(|e| UsageError(format!("{}: {e}", file.display())))?;
            if let (ExitsShown::Of(pid), true) = (shown, exits.is_empty()) {
                return Err(UsageError(format!(
                    "{}: no exit of pid {pid} was recorded (pids as exitprof's PID namespace saw \
                     them; `exitprof report --slowest 10` lists exits with their pids)",
                    file.display()
                ))
                .into());
            }
            record_views::exits(run, &exits, *shown, json).map(Some)
        }
    }
}

/// How the run's workload or command failed, if it did.
fn workload_failure(outcome: &RunOutcome) -> Option<String> {
    let failure = outcome.child.as_ref().and_then(workload::failure)?;
    let what = match outcome.target {
        Target::Command(_) => "command",
        _ => "workload",
    };
    Some(format!("the {what} {failure}"))
}
