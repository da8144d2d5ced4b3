//! The guest's whole userspace, as an initramfs: static busybox, exitprof with the shared
//! libraries it is linked against, and the `/init` that runs the scenarios.

use std::{
    collections::BTreeSet,
    fs,
    io::{BufWriter, Write as _},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use super::{
    cpio::Archive,
    guest::{self, APPLETS},
    scenarios::Scenario,
};
use crate::command::which;

/// Writes the initramfs to `path`.
pub fn build(exitprof: &Path, scenarios: &[Scenario], path: &Path) -> anyhow::Result<()> {
    let busybox = which("busybox").context("busybox is not on PATH (package busybox-static)")?;
    // Each file of the guest: where it goes, where it comes from.
    let mut files: Vec<(String, PathBuf)> =
        vec![("/bin/busybox".into(), busybox.clone()), ("/bin/exitprof".into(), exitprof.into())];
    let mut libraries = BTreeSet::new();
    for binary in [exitprof, &busybox] {
        libraries.extend(shared_libraries(binary)?);
    }
    // The dynamic linker finds them where ldd did: their paths are the ones it searches.
    files.extend(libraries.into_iter().map(|lib| (lib.display().to_string(), lib)));

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
    archive.file("/init", 0o755, guest::init_script(scenarios).as_bytes())?;
    archive.finish()?.flush().with_context(|| format!("writing {}", partial.display()))?;
    fs::rename(&partial, path).with_context(|| format!("moving {}", partial.display()))
}

/// The shared libraries `binary` loads, with the dynamic linker, as `ldd` lists them.
fn shared_libraries(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd").arg(binary).output().context("starting ldd")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if format!("{stdout}{stderr}").contains("not a dynamic executable") {
            return Ok(Vec::new());
        }
        bail!("ldd {} failed: {}\n{stderr}", binary.display(), out.status);
    }
    parse_ldd(&stdout).with_context(|| format!("ldd {}", binary.display()))
}

fn parse_ldd(listing: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for line in listing.lines().map(str::trim) {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", "/lib64/ld-linux-x86-64.so.2
        // (0x...)", or the vDSO, which the kernel provides: "linux-vdso.so.1 (0x...)".
        let target = line.split_once("=> ").map_or(line, |(_, target)| target);
        if target.starts_with("not found") {
            bail!("a library is missing: {line}");
        }
        let path = target.split(" (").next().unwrap_or_default();
        if path.starts_with('/') {
            paths.push(PathBuf::from(path));
        }
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_listing_names_the_libraries_and_the_loader() {
        let listing = "\tlinux-vdso.so.1 (0x00007ff7c2a55000)
\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007ff7c2a21000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007ff7c233e000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007ff7c2a57000)
";
        assert_eq!(
            parse_ldd(listing).unwrap(),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
    }
}
