//! exitprof: an eBPF profiler of the Linux exit path.

mod cli;
mod collect;
mod exits;
mod histogram;
mod kernel;
mod load;
mod pidfd;
mod plan;
mod privileges;
mod profile;
mod progress;
mod report;
mod run;
mod stages;
mod watch;
mod workload;

use std::{io::Write as _, process::ExitCode};

use anyhow::Context as _;

use crate::{
    cli::{Cli, Command, UsageError},
    report::{document::RunDocument, terminal},
};

fn main() -> ExitCode {
    let cli = Cli::parse_checked();
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
            // 2: the request cannot be done as asked (fix the command line); 1: it failed.
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn run_and_report(args: cli::RunArgs) -> anyhow::Result<()> {
    let json = args.json;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let outcome = runtime.block_on(run::run(args))?;
    let doc = RunDocument::new(&outcome);
    let text =
        if json { serde_json::to_string_pretty(&doc)? + "\n" } else { terminal::render(&doc) };
    // A reader that went away (`| head`) is not an error worth a report of its own.
    if let Err(e) = std::io::stdout().write_all(text.as_bytes())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(e).context("writing the report");
    }
    if let Some(signal) = outcome.interrupted {
        // The shell convention for death by a signal, after a complete (partial) report.
        std::process::exit(128 + signal);
    }
    if let Some(failure) = outcome.child.as_ref().and_then(|c| c.failure()) {
        let what = match outcome.target {
            cli::Target::Command(_) => "command",
            _ => "workload",
        };
        anyhow::bail!("the {what} {failure}");
    }
    Ok(())
}
