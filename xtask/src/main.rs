//! Developer and CI automation for exitprof: toolchain setup, running as root, tests,
//! benchmarks.

mod arch;
mod bench;
mod bench_scale;
mod command;
mod dist;
mod layout;
mod measure;
mod overhead;
mod packages;
mod setup;
mod soak;
mod test;
mod vm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask", about = "exitprof's developer and CI tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Installs what building the eBPF side needs (nightly + rust-src, bpf-linker); idempotent.
    Setup,
    /// Sets up, builds exitprof in release mode and runs it as root with ARGS.
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Runs the whole test suite: lints, unit tests, root integration tests on this kernel, and
    /// the VM tests on Debian kernels.
    Test(test::TestArgs),
    /// Builds exitprof statically linked (musl) for x86_64 and aarch64 into
    /// target/dist/<amd64|arm64>/exitprof, and a Debian package of each with its manual pages,
    /// shell completions and a systemd unit for `exitprof serve`, installed disabled.
    Dist,
    /// Tests exitprof on Debian's kernels in qemu: x86_64's 5.10, 6.1, 6.12 and the newest, and
    /// arm64's 6.1 and the newest.
    VmTest(vm::VmTestArgs),
    /// Compares exitprof's storm drivers, without probes, with C programs that do what those of
    /// the 2006 LKML taskstats benchmark and the 2012 LKML CLONE_NEWIPC report did (interleaved
    /// runs, medians, ratios); writes target/bench-driver.json.
    BenchDriver(bench::BenchArgs),
    /// Profiles a storm of a million exits and one of a tenth of that: exitprof's own CPU time
    /// and peak memory against the storm's; fails if its memory grows with the exits. Writes
    /// target/bench-scale.json.
    BenchScale(bench_scale::ScaleArgs),
    /// Measures exitprof's own cost: its overhead on a storm and on programs unrelated to
    /// exits, its eBPF programs' run time per exit, the highest exit rate it records without
    /// loss, its CPU time and memory; compares each with its target; writes target/bench.json.
    Bench(overhead::BenchArgs),
    /// Prices what an always-on `exitprof serve --all` costs a node (ns per context switch, ns
    /// per exit) and checks the formula on a minute of mixed load; writes
    /// target/always-on.json.
    BenchAlwaysOn(overhead::AlwaysOnArgs),
    /// Runs `exitprof serve --all` and a `--comm` serve for 30 minutes under a churn of every
    /// way tasks end; checks every exit recorded or lost once against counts of its own, every
    /// map back to its size, memory flat, the metrics monotonic and promtool-clean. Writes
    /// target/soak.json.
    Soak(soak::SoakArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup::setup(),
        Task::Run { args } => run(&args),
        Task::Test(args) => test::test(&args),
        Task::Dist => dist::dist(),
        Task::VmTest(args) => setup::setup().and_then(|()| vm::vm_test(&args)),
        Task::BenchDriver(args) => bench::bench_driver(&args),
        Task::BenchScale(args) => bench_scale::bench_scale(&args),
        Task::Bench(args) => overhead::bench(&args),
        Task::BenchAlwaysOn(args) => overhead::bench_always_on(&args),
        Task::Soak(args) => soak::soak(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> anyhow::Result<()> {
    setup::setup()?;
    command::cargo(&["build", "--release", "--locked", "--package", "exitprof"])?;
    let exe = command::workspace_root().join("target/release/exitprof");
    let status = command::as_root(&exe, args)?;
    // Pass exitprof's own exit status through (2 for usage errors, 130 for Ctrl-C, ...).
    std::process::exit(status.code().unwrap_or(1));
}
