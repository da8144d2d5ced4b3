//! `cargo xtask test`: the whole test suite, in the order that fails fastest, after installing
//! the Debian packages it needs (as root, when missing).
//!
//! 1. lints: the layout's rules, rustfmt, clippy on the userspace crates and on the eBPF crate;
//! 2. unit tests (no root needed);
//! 3. the static binary and its Debian package (`cargo xtask dist`), which an integration test
//!    installs;
//! 4. integration tests, as root, one at a time (they load eBPF programs and share kernel state);
//! 5. a 3-minute soak of `exitprof serve` under churn (`cargo xtask soak`), of the static binary;
//! 6. the VM tests on Debian kernels (kprobe and fentry modes, which this host lacks).

use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::{
    arch::Arch,
    command::{cargo, root_command, run, workspace_root},
    dist, layout, packages, setup, soak,
    vm::{self, VmTestArgs},
};

/// The churn of the soak `cargo xtask test` runs (its settling and checks add some 80 s).
const SOAK: Duration = Duration::from_secs(180);

#[derive(Args)]
pub struct TestArgs {
    /// Skip the VM tests (a local shortcut; CI runs them).
    #[arg(long)]
    pub no_vm: bool,
}

pub fn test(args: &TestArgs) -> anyhow::Result<()> {
    setup::setup()?;
    let mut needed = packages::INTEGRATION.to_vec();
    if !args.no_vm {
        needed.extend(packages::VM);
    }
    packages::ensure(&needed)?;
    stage("lints", lint)?;
    stage("unit tests", || {
        cargo(&[
            "test",
            "--locked",
            "--workspace",
            "--exclude",
            "exitprof-ebpf",
            "--lib",
            "--bins",
        ])?;
        // The library's own integration tests: records read, reported and diffed with it alone
        // (the binary's need root and run one at a time, below).
        cargo(&["test", "--locked", "--package", "exitprof-core", "--tests"])
    })?;
    stage("static binary and Debian package", dist::build)?;
    stage("root integration tests", integration)?;
    stage("soak (3 minutes of churn)", || {
        soak::run(&dist::dir(Arch::host()).join("exitprof"), SOAK)
    })?;
    if args.no_vm {
        eprintln!("xtask: VM tests skipped (--no-vm): kprobe and fentry modes were not tested");
    } else {
        stage("VM tests", || vm::vm_test(&VmTestArgs::default()))?;
    }
    Ok(())
}

fn stage(name: &str, f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    eprintln!("xtask: == {name} ==");
    let started = Instant::now();
    f().with_context(|| format!("{name} failed"))?;
    eprintln!("xtask: {name} passed in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The layout's rules, rustfmt, and clippy on both halves: userspace for the host, eBPF (both
/// objects) for the BPF target.
pub fn lint() -> anyhow::Result<()> {
    layout::check()?;
    cargo(&["fmt", "--all", "--", "--check"])?;
    cargo(&[
        "clippy",
        "--locked",
        "--workspace",
        "--exclude",
        "exitprof-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    // Both objects: the default one and the compat one.
    for features in [&[][..], &["--features", "compat"]] {
        run(Command::new("cargo")
            .args(["+nightly", "clippy", "--locked", "--package", "exitprof-ebpf", "--release"])
            .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
            .args(features)
            .args(["--", "-D", "warnings"])
            .current_dir(workspace_root()))?;
    }
    Ok(())
}

/// Builds the integration tests, then runs each binary as root, one test at a time.
fn integration() -> anyhow::Result<()> {
    let binaries = test_binaries(Command::new(env!("CARGO")), &[])?;
    if binaries.is_empty() {
        bail!("no integration test binaries were built");
    }
    for binary in binaries {
        let mut cmd = root_command(&binary, &["--test-threads=1"])?;
        cmd.env("RUST_BACKTRACE", "1");
        run(&mut cmd)?;
    }
    Ok(())
}

/// Paths of exitprof's integration-test executables, built by `cargo` (a command for one
/// target: [`crate::dist::cargo_for`]) with the `extra` arguments (cargo's JSON messages name
/// them).
pub fn test_binaries(mut cargo: Command, extra: &[&str]) -> anyhow::Result<Vec<PathBuf>> {
    let out = cargo
        .args(["test", "--locked", "--package", "exitprof", "--tests", "--no-run"])
        .args(["--message-format=json-render-diagnostics"])
        .args(extra)
        .current_dir(workspace_root())
        .output()
        .context("building the integration tests")?;
    if !out.status.success() {
        bail!("building the integration tests failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    let mut binaries = Vec::new();
    for line in String::from_utf8(out.stdout)?.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let is_integration_test =
            msg["target"]["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "test"));
        if is_integration_test && let Some(exe) = msg["executable"].as_str() {
            binaries.push(PathBuf::from(exe));
        }
    }
    Ok(binaries)
}
