//! `cargo xtask setup`: what building exitprof's eBPF side needs, installed only when missing.
//!
//! - the nightly toolchain with `rust-src` (eBPF targets are built with `-Z build-std=core`);
//! - bpf-linker 0.13, built against the nightly's own LLVM, because no prebuilt binary can be
//!   downloaded here and the linker's LLVM must match the one rustc emits bitcode for;
//! - for `cargo xtask dist` alone, the standard library of the musl target it links against.

use std::{
    fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context as _, bail};

use crate::command::{output, run};

const BPF_LINKER_VERSION: &str = "0.13.0";

/// Where exitprof keeps what it downloads or builds outside the repository.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("exitprof")
}

/// Makes sure the eBPF toolchain is there; says what it found and what it did.
pub fn setup() -> anyhow::Result<()> {
    let started = Instant::now();
    ensure_nightly()?;
    ensure_bpf_linker()?;
    eprintln!("setup: done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn rustup(args: &[&str]) -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(args);
    cmd
}

fn ensure_nightly() -> anyhow::Result<()> {
    let toolchains = output(&mut rustup(&["toolchain", "list"]))
        .context("rustup is needed to manage the nightly toolchain")?;
    if toolchains.lines().any(|l| l.starts_with("nightly-")) {
        eprintln!("setup: nightly toolchain: present");
    } else {
        eprintln!("setup: nightly toolchain: installing");
        run(&mut rustup(&["toolchain", "install", "nightly", "--profile", "minimal"]))?;
    }
    let components =
        output(&mut rustup(&["component", "list", "--toolchain", "nightly", "--installed"]))?;
    if components.lines().any(|l| l.starts_with("rust-src")) {
        eprintln!("setup: rust-src for nightly: present");
    } else {
        eprintln!("setup: rust-src for nightly: installing");
        run(&mut rustup(&["component", "add", "rust-src", "--toolchain", "nightly"]))?;
    }
    Ok(())
}

/// Installs the default toolchain's standard library for `target` when it is missing.
pub fn ensure_target(target: &str) -> anyhow::Result<()> {
    let installed = output(&mut rustup(&["target", "list", "--installed"]))
        .context("rustup is needed to add a target")?;
    if installed.lines().any(|l| l.trim() == target) {
        return Ok(());
    }
    eprintln!("setup: Rust's standard library for {target}: installing");
    run(&mut rustup(&["target", "add", target]))
}

/// The nightly's LLVM shared library (`libLLVM.so.<major>.<minor>-rust-<version>-nightly`) and
/// its LLVM major version.
fn nightly_llvm() -> anyhow::Result<(PathBuf, u32)> {
    let sysroot = output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?;
    let lib_dir = Path::new(sysroot.trim()).join("lib");
    let lib = fs::read_dir(&lib_dir)
        .with_context(|| format!("reading {}", lib_dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libLLVM.so.") && n.ends_with("-nightly"))
        })
        .with_context(|| format!("no libLLVM.so.*-nightly in {}", lib_dir.display()))?;
    let version = output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    let major = version
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.trim().parse().ok())
        .context("rustc +nightly -vV does not say its LLVM version")?;
    Ok((lib, major))
}

/// Whether the installed bpf-linker is the right version and runs (its LLVM library resolves).
fn bpf_linker_works() -> bool {
    Command::new("bpf-linker").arg("--version").output().is_ok_and(|o| {
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains(BPF_LINKER_VERSION)
    })
}

fn ensure_bpf_linker() -> anyhow::Result<()> {
    let (llvm_lib, llvm_major) = nightly_llvm()?;
    // bpf-linker links the library by its file name, from an rpath into this prefix: a prefix
    // whose `lib/` holds the nightly's own libLLVM under both names bpf-linker's build looks for.
    let prefix = cache_dir().join("llvm-nightly");
    let lib_dir = prefix.join("lib");
    fs::create_dir_all(&lib_dir).with_context(|| format!("creating {}", lib_dir.display()))?;
    let file_name = llvm_lib.file_name().context("LLVM library has no file name")?;
    for link in [lib_dir.join("libLLVM.so"), lib_dir.join(file_name)] {
        if fs::read_link(&link).ok().as_deref() != Some(llvm_lib.as_path()) {
            let _ = fs::remove_file(&link);
            symlink(&llvm_lib, &link).with_context(|| format!("linking {}", link.display()))?;
        }
    }
    if bpf_linker_works() {
        eprintln!("setup: bpf-linker {BPF_LINKER_VERSION}: present");
        return Ok(());
    }
    eprintln!(
        "setup: bpf-linker {BPF_LINKER_VERSION}: building against the nightly's LLVM {llvm_major} \
         (about a minute)"
    );
    let started = Instant::now();
    run(Command::new("cargo")
        .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION, "--force"])
        .args(["--no-default-features", "--features", &format!("llvm-{llvm_major}")])
        .env("LLVM_PREFIX", &prefix))?;
    if !bpf_linker_works() {
        bail!("bpf-linker was installed but does not run; is ~/.cargo/bin on PATH?");
    }
    eprintln!("setup: bpf-linker built in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}
