//! Debian's kernels for the VM tests: the newest package of each series, downloaded with apt
//! (not installed) and cached with its extracted `vmlinuz` outside the repository.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};
use clap::ValueEnum;

use crate::{
    command::{is_root, run},
    setup::cache_dir,
};

/// A Debian 12 (bookworm) kernel series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Series {
    /// bookworm's own kernel.
    #[value(name = "6.1")]
    V6_1,
    /// The newer kernel bookworm ships through its security updates.
    #[value(name = "6.12")]
    V6_12,
}

impl Series {
    pub const ALL: &[Series] = &[Series::V6_1, Series::V6_12];

    pub fn name(self) -> &'static str {
        match self {
            Self::V6_1 => "6.1",
            Self::V6_12 => "6.12",
        }
    }

    /// The metapackage that depends on the series' newest kernel package.
    fn metapackage(self) -> &'static str {
        match self {
            Self::V6_1 => "linux-image-amd64",
            Self::V6_12 => "linux-image-6.12-amd64",
        }
    }
}

/// A kernel ready to boot.
pub struct Kernel {
    /// The Debian package it comes from, e.g. `linux-image-6.1.0-57-amd64`.
    pub package: String,
    pub vmlinuz: PathBuf,
}

impl Kernel {
    /// Its `uname -r`, e.g. `6.1.0-57-amd64`.
    pub fn release(&self) -> &str {
        self.package.trim_start_matches("linux-image-")
    }
}

/// The newest kernel of `series`, from the cache or downloaded into it.
pub fn fetch(series: Series) -> anyhow::Result<Kernel> {
    let package = match newest_package(series) {
        Ok(package) => package,
        // A machine that never ran `apt-get update` has no package lists to look in.
        Err(e) if is_root() => {
            eprintln!("vm: {e:#}; running apt-get update");
            apt_get_update()?;
            newest_package(series)?
        }
        Err(e) => return Err(e.context("run `apt-get update` as root, then try again")),
    };
    let dir = cache_dir().join("kernels").join(&package);
    let vmlinuz = dir.join("vmlinuz");
    if vmlinuz.is_file() {
        eprintln!("vm: kernel {package}: cached in {}", dir.display());
    } else {
        eprintln!("vm: kernel {package}: downloading into {} (about 100 MB)", dir.display());
        download(&package, &dir)?;
    }
    Ok(Kernel { package, vmlinuz })
}

/// The kernel package `series`' metapackage depends on, as apt's package lists have it.
fn newest_package(series: Series) -> anyhow::Result<String> {
    let meta = series.metapackage();
    let out = Command::new("apt-cache")
        .args(["depends", meta])
        .output()
        .context("starting apt-cache (the VM tests take Debian's kernels)")?;
    let listing = String::from_utf8_lossy(&out.stdout);
    let depends: Vec<&str> =
        listing.lines().filter_map(|l| l.trim().strip_prefix("Depends: ")).collect();
    if depends.is_empty() {
        bail!("apt knows no package {meta}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let prefix = format!("linux-image-{}.", series.name());
    depends.iter().find(|p| p.starts_with(&prefix)).map(ToString::to_string).with_context(|| {
        format!(
            "{meta} depends on {depends:?}, not on a {} kernel: are apt's sources Debian 12 \
             (bookworm and bookworm-security)?",
            series.name()
        )
    })
}

fn apt_get_update() -> anyhow::Result<()> {
    run(Command::new("apt-get").args(["update", "-q"]))
}

/// Downloads `package` into `dir` and extracts its `vmlinuz` there. Each file appears under its
/// final name only once complete, so an interrupted download is redone, never half-used.
fn download(package: &str, dir: &Path) -> anyhow::Result<()> {
    let deb = dir.join(format!("{package}.deb"));
    let work = dir.join("partial");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    if !deb.is_file() {
        let mut apt = Command::new("apt-get");
        apt.args(["download", "-q", package]).current_dir(&work);
        if is_root() {
            // apt's sandbox user cannot write into root's cache; it would warn and go on as root.
            apt.args(["-o", "APT::Sandbox::User=root"]);
        }
        run(&mut apt)?;
        let fetched = only_file(&work, ".deb")?;
        fs::rename(&fetched, &deb).with_context(|| format!("moving {}", fetched.display()))?;
    }
    extract_vmlinuz(&deb, &work)?;
    let vmlinuz = only_file(&work.join("boot"), "")?;
    fs::rename(&vmlinuz, dir.join("vmlinuz"))
        .with_context(|| format!("moving {}", vmlinuz.display()))?;
    fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))
}

/// Extracts `./boot/vmlinuz-*` from the package into `into`, leaving out its modules.
fn extract_vmlinuz(deb: &Path, into: &Path) -> anyhow::Result<()> {
    let mut contents = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .context("starting dpkg-deb")?;
    let tar_input = contents.stdout.take().context("dpkg-deb's stdout")?;
    let tar = run(Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(into)
        .args(["--wildcards", "./boot/vmlinuz-*"])
        .stdin(tar_input));
    let status = contents.wait().context("waiting for dpkg-deb")?;
    tar.with_context(|| format!("extracting the kernel from {}", deb.display()))?;
    if !status.success() {
        bail!("dpkg-deb --fsys-tarfile {} failed: {status}", deb.display());
    }
    Ok(())
}

/// The one file in `dir` whose name ends with `suffix`.
fn only_file(dir: &Path, suffix: &str) -> anyhow::Result<PathBuf> {
    let found: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!("expected one *{suffix} file in {}, found {found:?}", dir.display()),
    }
}
