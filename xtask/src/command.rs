//! Running commands: cargo, things that need root, things that print.

use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
    process::{Command, ExitStatus},
};

use anyhow::{Context as _, bail};

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").into()
}

/// Runs a command to completion; fails unless it succeeds.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// Runs a command and returns its stdout; fails unless it succeeds.
pub fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("starting {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// `cargo ARGS` in the workspace root.
pub fn cargo(args: &[&str]) -> anyhow::Result<()> {
    run(Command::new(env!("CARGO")).args(args).current_dir(workspace_root()))
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A command that runs `program ARGS` as root: directly when already root, else through sudo.
pub fn root_command(program: &Path, args: &[impl AsRef<OsStr>]) -> anyhow::Result<Command> {
    if is_root() {
        let mut cmd = Command::new(program);
        cmd.args(args);
        return Ok(cmd);
    }
    if which("sudo").is_none() {
        bail!(
            "{} needs root (it loads eBPF programs): run this command as root; there is no sudo \
             on this machine to do it for you",
            program.display()
        );
    }
    let mut cmd = Command::new("sudo");
    cmd.arg("--preserve-env=RUST_LOG,RUST_BACKTRACE").arg(program).args(args);
    Ok(cmd)
}

/// Runs `program ARGS` as root and returns its exit status.
pub fn as_root(program: &Path, args: &[impl AsRef<OsStr>]) -> anyhow::Result<ExitStatus> {
    let mut cmd = root_command(program, args)?;
    cmd.status().with_context(|| format!("starting {cmd:?}"))
}

/// The first `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
