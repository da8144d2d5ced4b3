//! The host's Debian packages the VM tests need, installed when missing and allowed.

use std::process::Command;

use anyhow::bail;

use crate::command::{is_root, run};

/// qemu boots the test kernels; busybox (static, so it needs no libraries in the guest) is the
/// guest's shell and tools.
const PACKAGES: &[&str] = &["qemu-system-x86", "busybox-static"];

/// Installs the missing packages with apt when root; otherwise fails naming them.
pub fn ensure() -> anyhow::Result<()> {
    let missing: Vec<&str> = PACKAGES.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "the VM tests need the Debian packages {}: install them as root (`apt-get install \
             {}`), or skip the VM tests with --no-vm",
            missing.join(", "),
            missing.join(" ")
        );
    }
    eprintln!("vm: installing {} with apt-get", missing.join(", "));
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
