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
mod serve;
mod target;

use std::{io::Write as _, process::ExitCode};

use anyhow::Context as _;

use crate::{
    cli::{Cli, Command},
    compare::CompareRequest,
    conditions::hold,
    export::{ExportSet, ExportTarget},
    probes::{ProbeOptions, plan},
    report::{plan_document::PlanDocument, run_document::RunDocument, terminal},
    run::RunRequest,
    target::{Target, UsageError, workload},
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
        Some(Command::Driver(child)) => {
            workload::run_child(child.channel_fd, child.command.driver())
        }
        Some(Command::Plan(args)) => print_plan(args.probes.options(), args.json),
        Some(Command::Condition(args)) => {
            hold::run(args.condition, args.side, args.options.options(), &args.command)
        }
        Some(Command::Floor) => runtime().and_then(|rt| rt.block_on(probes::floor::hold())),
        Some(Command::Compare(args)) => {
            compare_and_report(&args.request(None).unwrap_or_else(|usage| usage.exit()))
        }
        Some(Command::Serve(args)) => serve::serve(args.request()),
        Some(Command::Sweep(args)) => compare_and_report(
            &args.compare.request(Some(args.staggers)).unwrap_or_else(|usage| usage.exit()),
        ),
        None => run_and_report(&cli.run.request().unwrap_or_else(|usage| usage.exit())),
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

fn print_plan(probes: ProbeOptions, json: bool) -> anyhow::Result<()> {
    run::start::preflight(&[])?;
    // The plan of the default target, a storm exitprof drives.
    let wants = plan::Wants {
        ipc_frees_via_kfree: false,
        syscall_tracepoints: probes.syscall_tracepoints.unwrap_or(true),
        unusable_symbols: true,
    };
    let (facts, plan) = run::start::plan(probes.attach, wants)?;
    let plan = plan.with_points(probes.points);
    let doc = PlanDocument::new(&facts, &plan);
    if json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", doc.render());
    }
    Ok(())
}

fn run_and_report(request: &RunRequest) -> anyhow::Result<()> {
    let outcome = runtime()?.block_on(run::run(request))?;
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
    let text = if request.json { format!("{document}\n") } else { terminal::render(&doc) };
    publish(
        &text,
        &request.exports,
        || ExportSet::from_run(&outcome, &doc, document),
        outcome.interrupted,
    )?;
    if let Some(failure) = outcome.child.as_ref().and_then(workload::ChildOutcome::failure) {
        let what = match outcome.target {
            Target::Command(_) => "command",
            _ => "workload",
        };
        anyhow::bail!("the {what} {failure}");
    }
    Ok(())
}

fn compare_and_report(request: &CompareRequest) -> anyhow::Result<()> {
    let report = runtime()?.block_on(compare::run(request))?;
    let text = if request.run.json { format!("{}\n", report.document) } else { report.text };
    publish(&text, &request.run.exports, || report.export_set, report.interrupted)
}

/// The runtime of runs and comparisons: their work is waiting, one worker does it.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?)
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
