//! exitprof: an eBPF profiler of the Linux exit path.

mod cli;
mod present;

use std::process::ExitCode;

use clap::CommandFactory as _;

use exitprof_engine::{
    base::{self, UsageError},
    conditions::hold,
    probes,
    profiled::workload,
    serve,
};

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse_checked();
    let level = match cli.verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        2 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    let mut logger = env_logger::Builder::new();
    logger.filter_level(log::LevelFilter::Warn).format_timestamp(None);
    // exitprof's three crates log under their own names.
    for krate in ["exitprof", "exitprof_core", "exitprof_engine"] {
        logger.filter_module(krate, level);
    }
    logger.init();
    if let Some(mode) = cli.file_mode {
        base::atomic_file::set_mode(mode);
    }
    let result = match cli.command {
        Some(Command::Driver(child)) => {
            workload::run_child(child.channel_fd, child.command.driver())
        }
        Some(Command::Plan(args)) => present::plan(args.probes.options(), args.json),
        Some(Command::Condition(args)) => hold::run(
            args.condition.into(),
            args.side.into(),
            args.options.options(),
            &args.command,
        ),
        Some(Command::Floor { bpf_stats }) => {
            base::runtime().and_then(|rt| rt.block_on(probes::floor::hold(bpf_stats)))
        }
        Some(Command::Manuals { dir }) => present::manuals::write(&Cli::command(), &dir),
        Some(Command::Compare(args)) => {
            present::compare(&args.request(None), &or_usage(args.run.export_targets()))
        }
        Some(Command::Record(args)) => {
            present::run(&args.request(), &or_usage(args.run.export_targets()))
        }
        Some(Command::Report(args)) => {
            present::recorded(&args.file, &args.view(), args.json, &or_usage(args.export_targets()))
        }
        Some(Command::Serve(args)) => serve::serve(args.request()),
        Some(Command::Diff(args)) => {
            present::diff(&or_usage(args.request()), &or_usage(args.export_targets()))
        }
        Some(Command::Sweep(args)) => present::compare(
            &args.compare.request(Some(args.staggers)),
            &or_usage(args.compare.run.export_targets()),
        ),
        None => present::run(&cli.run.request(), &or_usage(cli.run.export_targets())),
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

/// What the command line asks for, or the end of exitprof with clap's usage error (status 2).
fn or_usage<T>(request: Result<T, clap::Error>) -> T {
    request.unwrap_or_else(|usage| usage.format(&mut Cli::command()).exit())
}
