//! exitprof: an eBPF profiler of the Linux exit path.

mod analysis;
mod cli;
mod compare;
mod conditions;
mod export;
mod kernel;
mod probes;
mod report;
mod run;
mod target;

use std::{io::Write as _, process::ExitCode};

use anyhow::Context as _;

use crate::{
    cli::{Cli, Command, UsageError},
    conditions::hold,
    export::{ExportSet, ExportTarget},
    probes::plan,
    report::{plan_document::PlanDocument, run_document::RunDocument, terminal},
    target::workload,
};

fn main() -> ExitCode {
    let cli = Cli::parse_checked();
    let level = match cli.verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        2 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    env_logger::Builder::new()
        .filter_level(log::LevelFilter::Warn)
        .filter_module("exitprof", level)
        .format_timestamp(None)
        .init();
    let result = match cli.command {
        Some(Command::Workload(child)) => workload::run_child(child),
        Some(Command::Plan(args)) => print_plan(&args),
        Some(Command::Condition(args)) => hold::run(args),
        Some(Command::Compare(args)) => compare_and_report(args, None),
        Some(Command::Sweep(args)) => compare_and_report(args.compare, Some(args.staggers)),
        None => run_and_report(cli.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("exitprof: error: {e:#}");
            // 2: the request cannot be done as asked (fix the command line); 1: it failed.
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn print_plan(args: &cli::PlanArgs) -> anyhow::Result<()> {
    run::start::preflight(&[])?;
    // The plan of the default target, a storm exitprof drives.
    let wants = plan::Wants {
        ipc_frees_via_kfree: false,
        syscall_tracepoints: args.probes.syscall_tracepoints.or(true),
    };
    let (facts, plan) = run::start::plan(args.probes.attach, wants)?;
    let doc = PlanDocument::new(&facts, &plan);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", doc.render());
    }
    Ok(())
}

fn run_and_report(args: cli::RunArgs) -> anyhow::Result<()> {
    let exports = args.export_targets().unwrap_or_else(|usage| usage.exit());
    let json = args.json;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let outcome = runtime.block_on(run::run(args, &exports))?;
    let doc = RunDocument::new(&outcome);
    if doc.lost > 0 {
        // Said in the report too; here also for those who read only the exports.
        let advice = if doc.losses.kernel.ringbuf_full > 0 {
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
    let text = if json { format!("{document}\n") } else { terminal::render(&doc) };
    publish(
        &text,
        &exports,
        || ExportSet::from_run(&outcome, &doc, document),
        outcome.interrupted,
    )?;
    if let Some(failure) = outcome.child.as_ref().and_then(|c| c.failure()) {
        let what = match outcome.target {
            cli::Target::Command(_) => "command",
            _ => "workload",
        };
        anyhow::bail!("the {what} {failure}");
    }
    Ok(())
}

fn compare_and_report(args: cli::CompareArgs, staggers: Option<Vec<u32>>) -> anyhow::Result<()> {
    let exports = args.run.export_targets().unwrap_or_else(|usage| usage.exit());
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let report = runtime.block_on(compare::run(&args, staggers.as_deref(), &exports))?;
    let text = if args.run.json { format!("{}\n", report.document) } else { report.text };
    publish(&text, &exports, || report.export_set, report.interrupted)
}

/// Prints the report, then writes the exports (an interrupted run's too: they say it is
/// partial), then ends the process as the signal would have, when one cut the run short.
fn publish(
    text: &str,
    exports: &[ExportTarget],
    set: impl FnOnce() -> ExportSet,
    interrupted: Option<i32>,
) -> anyhow::Result<()> {
    // A reader that went away (`| head`) is not an error worth a report of its own.
    if let Err(e) = std::io::stdout().write_all(text.as_bytes())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(e).context("writing the report");
    }
    let exported = if exports.is_empty() { Ok(()) } else { write_exports(&set(), exports) };
    if let Some(signal) = interrupted {
        // The shell convention for death by a signal, after a complete (partial) report.
        std::process::exit(128 + signal);
    }
    exported
}

/// Writes every export, each on its own: one that fails is reported and the others are written.
fn write_exports(set: &ExportSet, exports: &[ExportTarget]) -> anyhow::Result<()> {
    let mut failed = 0;
    for target in exports {
        match export::write(set, target) {
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
