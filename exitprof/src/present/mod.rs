//! The presentation layer: what exitprof shows of an outcome. It takes what the layers below
//! produced — a live run's outcome or a recorded one's, a compare's or a sweep's, a diff — and
//! prints its report (the tables, or the `--json` document), writes its exports, and ends the
//! process as a signal would have when one cut the work short.
//!
//! It sits on top of `report` (documents and text), `export` (files) and `diff`, and drives
//! `run` and `compare`, which only produce outcomes: nothing below imports it (checked by
//! `cargo xtask test`'s layout rules).

mod compare;
pub mod manuals;
mod run;

use std::io::Write as _;

use anyhow::Context as _;

pub use self::{
    compare::compare,
    run::{recorded, run},
};
use crate::{
    diff::{self, DiffRequest},
    export::{self, ExportSet, ExportTarget},
    probes::{ProbeOptions, plan},
    report::plan_document::PlanDocument,
    run::start,
};

/// `exitprof plan`: the probe plan of the default target, a storm exitprof drives.
pub fn plan(probes: ProbeOptions, json: bool) -> anyhow::Result<()> {
    start::preflight()?;
    let wants = plan::Wants {
        ipc_frees_via_kfree: false,
        syscall_tracepoints: probes.syscall_tracepoints.unwrap_or(true),
        cgroup_paths: probes.cgroup_paths,
        unusable_symbols: true,
    };
    let (facts, plan) = start::plan(probes.attach, wants)?;
    let mut plan = plan.with_points(probes.points);
    plan.object = start::loaded_object(&plan, &facts, probes)?;
    let doc = PlanDocument::new(&facts, &plan);
    if json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", doc.render());
    }
    Ok(())
}

/// `exitprof diff`: the diff's report, then its exports.
pub fn diff(request: &DiffRequest) -> anyhow::Result<()> {
    let report = diff::diff(request)?;
    print_report(&report.text)?;
    write_exports(&request.exports, |target| report.write(target))
}

/// Checks, before anything runs, that every export can be written: a run must not be lost to a
/// file it cannot write at the end.
fn check_exports(exports: &[ExportTarget]) -> anyhow::Result<()> {
    for target in exports {
        export::check_writable(&target.path)?;
    }
    Ok(())
}

/// Prints the report, then writes the exports (an interrupted run's too: they say it is
/// partial), then ends the process as the signal would have, when one cut the run short.
fn publish(
    text: &str,
    exports: &[ExportTarget],
    set: impl FnOnce() -> ExportSet,
    interrupted: Option<i32>,
) -> anyhow::Result<()> {
    print_report(text)?;
    let exported = if exports.is_empty() {
        Ok(())
    } else {
        let set = set();
        write_exports(exports, |target| export::write(&set, target))
    };
    if let Some(signal) = interrupted {
        // The shell convention for death by a signal, after a complete (partial) report.
        std::process::exit(128 + signal);
    }
    exported
}

fn print_report(text: &str) -> anyhow::Result<()> {
    // A reader that went away (`| head`) is not an error worth a report of its own.
    if let Err(e) = std::io::stdout().write_all(text.as_bytes())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(e).context("writing the report");
    }
    Ok(())
}

/// Writes every export, each on its own: one that fails is reported and the others are written.
fn write_exports(
    exports: &[ExportTarget],
    write: impl Fn(&ExportTarget) -> Result<(), export::ExportError>,
) -> anyhow::Result<()> {
    let mut failed = 0;
    for target in exports {
        match write(target) {
            Ok(()) => log::info!("wrote {} ({})", target.path.display(), target.format),
            Err(e) => {
                eprintln!("exitprof: error: {:#}", anyhow::Error::new(e));
                failed += 1;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} exports were not written", exports.len());
    }
    Ok(())
}
