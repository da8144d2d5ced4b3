//! The guest's whole userspace, as an initramfs: busybox and exitprof, both statically linked
//! (the guest has no libraries), and the `/init` that runs the scenarios.

use std::{
    fs,
    io::{BufWriter, Write as _},
    path::{Path, PathBuf},
};

use anyhow::Context as _;

use super::{
    cpio::Archive,
    guest::{self, APPLETS},
    scenarios::Scenario,
};
use crate::{command::which, dist::require_static};

/// Writes the initramfs to `path`.
pub fn build(exitprof: &Path, scenarios: &[Scenario], path: &Path) -> anyhow::Result<()> {
    let busybox = which("busybox").context("busybox is not on PATH (package busybox-static)")?;
    // Each file of the guest: where it goes, where it comes from.
    let files: Vec<(String, PathBuf)> =
        vec![("/bin/busybox".into(), busybox), ("/bin/exitprof".into(), exitprof.into())];
    for (_, binary) in &files {
        require_static(binary).context("the guest has no shared libraries")?;
    }

    let partial = path.with_extension("partial");
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let out =
        fs::File::create(&partial).with_context(|| format!("creating {}", partial.display()))?;
    let mut archive = Archive::new(BufWriter::new(out));
    for dir in ["/bin", "/dev", "/proc", "/sys", "/tmp"] {
        archive.dir(dir)?;
    }
    for (dest, source) in &files {
        let data = fs::read(source).with_context(|| format!("reading {}", source.display()))?;
        archive.file(dest, 0o755, &data)?;
    }
    for applet in APPLETS {
        archive.symlink(&format!("/bin/{applet}"), "busybox")?;
    }
    archive.file("/init", 0o755, guest::init_script(scenarios).as_bytes())?;
    archive.finish()?.flush().with_context(|| format!("writing {}", partial.display()))?;
    fs::rename(&partial, path).with_context(|| format!("moving {}", partial.display()))
}
