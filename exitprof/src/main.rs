//! exitprof: an eBPF profiler of the Linux exit path.

mod cli;
mod collect;
mod conditions;
mod exits;
mod histogram;
mod hold;
mod kernel;
mod load;
mod plan;
mod privileges;
mod profile;
mod report;
mod run;
mod signals;
mod stages;
mod workload;

use std::process::ExitCode;

use clap::Parser as _;

use crate::{
    cli::{Cli, Command},
    report::{document::RunDocument, terminal},
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
        Some(Command::Condition(args)) => hold::run(args),
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
    let json = args.json;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let outcome = runtime.block_on(run::run(args))?;
    let doc = RunDocument::new(&outcome);
    if json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", terminal::render(&doc));
    }
    if let Some(signal) = outcome.interrupted {
        // The shell convention for death by a signal, after a complete (partial) report.
        std::process::exit(128 + signal);
    }
    if let Some(failure) = outcome.child.failure() {
        anyhow::bail!("the workload {failure}");
    }
    Ok(())
}
