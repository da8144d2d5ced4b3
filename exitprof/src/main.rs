//! exitprof: an eBPF profiler of the Linux exit path.

mod cli;
mod collect;
mod exits;
mod export;
mod histogram;
mod kernel;
mod load;
mod plan;
mod privileges;
mod profile;
mod report;
mod run;
mod stages;
mod workload;

use std::process::ExitCode;

use clap::Parser as _;

use crate::{
    cli::{Cli, Command},
    export::{ExportSet, ExportTarget},
    report::{document::RunDocument, terminal},
    run::RunOutcome,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        _ => log::LevelFilter::Debug,
    };
    env_logger::Builder::new().filter_level(level).format_timestamp(None).init();
    let result = match cli.command {
        Some(Command::Workload(child)) => workload::run_child(child),
        None => run_and_report(cli.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("exitprof: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_and_report(args: cli::RunArgs) -> anyhow::Result<()> {
    let exports = args.export_targets().unwrap_or_else(|usage| usage.exit());
    let json = args.json;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let outcome = runtime.block_on(run::run(args, &exports))?;
    let doc = RunDocument::new(&outcome);
    let document = serde_json::to_string_pretty(&doc)?;
    if json {
        println!("{document}");
    } else {
        print!("{}", terminal::render(&doc));
    }
    // An interrupted run is exported too: its exports say it is partial.
    let exported = write_exports(&outcome, &doc, document, &exports);
    if let Some(signal) = outcome.interrupted {
        // The shell convention for death by a signal, after a complete (partial) report.
        std::process::exit(128 + signal);
    }
    exported?;
    if let Some(failure) = outcome.child.failure() {
        anyhow::bail!("the workload {failure}");
    }
    Ok(())
}

/// Writes every export, each on its own: one that fails is reported and the others are written.
fn write_exports(
    outcome: &RunOutcome,
    doc: &RunDocument,
    document: String,
    exports: &[ExportTarget],
) -> anyhow::Result<()> {
    if exports.is_empty() {
        return Ok(());
    }
    let set = ExportSet::from_run(outcome, doc, document);
    let mut failed = 0;
    for target in exports {
        match export::write(&set, target) {
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
