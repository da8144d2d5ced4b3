//! The host's Debian packages the tests need, installed with apt when missing and run as root:
//! `cargo xtask test` on a fresh machine needs nothing installed by hand.

use std::process::Command;

use anyhow::bail;

use crate::command::{is_root, run};

/// What the root integration tests run besides exitprof: Debian's Prometheus scrapes `exitprof
/// serve`, and its promtool checks the Grafana dashboard's queries (promtool is in the prometheus
/// package up to bookworm, and a package of its own that prometheus depends on from trixie on);
/// util-linux's `unshare` and `setpriv` (part of every Debian system, named for
/// completeness); the C compiler and static C library that build the tests' programs; lintian,
/// which checks both Debian packages; headless Chromium opens the HTML reports, screenshots them
/// and reports their console's messages.
pub const INTEGRATION: &[&str] =
    &["prometheus", "util-linux", "gcc", "libc6-dev", "lintian", "chromium"];

/// What the VM tests need: qemu boots the test kernels, x86_64 ones and aarch64 ones; xz-utils
/// and zstd uncompress the modules of Debian's kernels that the guests load. (The guests'
/// busybox comes from Debian's archive, for each architecture, as their kernels do; the cross
/// compiler that builds for aarch64 is installed by the build, `cargo xtask dist`.)
pub const VM: &[&str] = &["qemu-system-x86", "qemu-system-arm", "xz-utils", "zstd"];

/// What `cargo xtask bench` runs beside exitprof: bpftrace times each exit with a minimal probe,
/// the floor exitprof is compared with.
pub const BENCH: &[&str] = &["bpftrace"];

/// Installs the missing ones of `packages` with apt when root; otherwise fails naming them.
pub fn ensure(packages: &[&str]) -> anyhow::Result<()> {
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "exitprof's tests and benchmarks need the Debian packages {}: install them as root \
             (`apt-get install {}`), or run them as root, which installs them",
            missing.join(", "),
            missing.join(" ")
        );
    }
    eprintln!("xtask: installing {} with apt-get", missing.join(", "));
    run(Command::new("apt-get").args(["update", "-q"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["--show", "--showformat=${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout) == "install ok installed")
}
