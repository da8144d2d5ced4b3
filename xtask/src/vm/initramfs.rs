//! The guest's whole userspace, as an initramfs: static busybox, static exitprof, its static
//! integration tests and their programs, all for the guest's architecture, and the `/init` that
//! runs them. Every binary is static, so no shared library is copied.

use std::{
    collections::BTreeSet,
    fs,
    io::{BufWriter, Write as _},
    path::{Path, PathBuf},
};

use anyhow::Context as _;

use super::{
    cpio::Archive,
    guest::{self, APPLETS, MODULES},
    qemu::report_tty,
    scenarios::Scenario,
    suite::{GuestTests, PROGRAMS, StaticBuild, TEST_BINARY},
};
use crate::dist::require_static;

/// Writes the initramfs to `path`.
pub fn build(
    binaries: &StaticBuild,
    modules: &[PathBuf],
    scenarios: &[Scenario],
    tests: &[GuestTests],
    path: &Path,
) -> anyhow::Result<()> {
    // Each file of the guest: where it goes, where it comes from.
    let mut files: Vec<(String, PathBuf)> = vec![
        ("/bin/busybox".into(), binaries.busybox.clone()),
        ("/bin/exitprof".into(), binaries.exitprof.clone()),
        (TEST_BINARY.into(), binaries.tests.clone()),
    ];
    files.extend(
        binaries
            .programs
            .iter()
            .map(|(name, binary)| (format!("{PROGRAMS}/{name}"), binary.clone())),
    );

    for (_, binary) in &files {
        require_static(binary, binaries.arch).context("the guest has no shared libraries")?;
    }
    // The kernel's modules, which `/init` loads.
    for module in modules {
        let name = module.file_name().context("a module file has a name")?;
        files.push((format!("{MODULES}/{}", name.to_string_lossy()), module.clone()));
    }

    let mut dirs: BTreeSet<String> =
        ["/bin", "/dev", "/proc", "/sys", "/tmp"].map(Into::into).into();
    for (dest, _) in &files {
        dirs.extend(Path::new(dest).ancestors().skip(1).map(|d| d.display().to_string()));
    }
    dirs.remove("/");

    let partial = path.with_extension("partial");
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let out =
        fs::File::create(&partial).with_context(|| format!("creating {}", partial.display()))?;
    let mut archive = Archive::new(BufWriter::new(out));
    // Sorted, so that every directory comes after its parent.
    for dir in &dirs {
        archive.dir(dir)?;
    }
    for (dest, source) in &files {
        let data = fs::read(source).with_context(|| format!("reading {}", source.display()))?;
        archive.file(dest, 0o755, &data)?;
    }
    for applet in APPLETS {
        archive.symlink(&format!("/bin/{applet}"), "busybox")?;
    }
    let init = guest::init_script(report_tty(binaries.arch), scenarios, tests);
    archive.file("/init", 0o755, init.as_bytes())?;
    archive.finish()?.flush().with_context(|| format!("writing {}", partial.display()))?;
    fs::rename(&partial, path).with_context(|| format!("moving {}", partial.display()))
}
