//! The guests' shell and tools: Debian 12's static busybox of the guest's architecture, from
//! Debian's archive through the [private apt configuration](super::apt) of that architecture,
//! downloaded (never installed) and cached, as the binary alone, outside the repository.

use std::{fs, path::PathBuf};

use anyhow::Context as _;

use super::kernels::{apt_for, fsys_tar};
use crate::{arch::Arch, setup::cache_dir};

const PACKAGE: &str = "busybox-static";
/// The suites it is taken from, the newest version winning: Debian 12's.
const SUITES: &[&str] = &["bookworm", "bookworm-security"];
/// Where the package keeps it.
const MEMBER: &str = "./bin/busybox";

/// `arch`'s static busybox, from the cache or downloaded into it.
pub fn fetch(arch: Arch) -> anyhow::Result<PathBuf> {
    let (apt, _) = apt_for(arch)?;
    let versions = apt.versions(PACKAGE)?;
    let version = versions
        .iter()
        .filter(|(_, suite)| SUITES.contains(&suite.as_str()))
        .map(|(version, _)| version)
        .max_by(|a, b| super::apt::compare_versions(a, b))
        .with_context(|| {
            format!("no {arch} {PACKAGE} in {} ({versions:?})", SUITES.join(" or "))
        })?;
    let dir = cache_dir().join("busybox").join(format!(
        "{}_{}",
        arch.debian(),
        version.replace(':', "%3a")
    ));
    let busybox = dir.join("busybox");
    if busybox.is_file() {
        return Ok(busybox);
    }
    eprintln!("vm: downloading {PACKAGE}={version} ({}) into {}", arch.debian(), dir.display());
    let work = dir.join("partial");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let deb = apt.download(PACKAGE, version, &work)?;
    fsys_tar(&deb, &work, &["-x", MEMBER])?;
    // Complete under its final name, or not there at all.
    fs::rename(work.join(MEMBER), &busybox).context("moving busybox into the cache")?;
    fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    Ok(busybox)
}
