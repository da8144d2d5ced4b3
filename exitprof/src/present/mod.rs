//! The presentation layer: what exitprof shows of an outcome. It takes what the layers below
//! produced — a live run's outcome or a recorded one's, a compare's or a sweep's, a diff — and
//! prints its report (the tables, or the `--json` document), writes its exports, and ends the
//! process as a signal would have when one cut the work short.
//!
//! It sits on top of `report` (documents and text), `export` (files) and `diff`, and drives
//! `run` and `compare`, which only produce outcomes: nothing below imports it (checked by
//! `cargo xtask test`'s layers, `xtask/src/layout.rs`).

mod compare;
mod diff;
pub mod manuals;
mod plan_document;
mod progress;
mod publish;
mod run;

pub use self::{
    compare::compare,
    diff::diff,
    run::{recorded, run},
};
use exitprof_engine::{
    probes::{ProbeOptions, plan},
    run::start,
};

use crate::present::plan_document::PlanDocument;

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
