//! Debian's kernels for the VM tests: the newest package of each series, found in Debian's
//! archive through a [private apt configuration](super::apt) (the machine's own sources need
//! not list these suites), downloaded (never installed) and cached, as its extracted `vmlinuz`
//! and the few modules the guests load ([`MODULES`]), outside the repository.

use std::{
    fmt, fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};
use clap::ValueEnum;

use super::apt::{self, Apt};
use crate::{arch::Arch, setup::cache_dir};

/// A kernel series the VM tests boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Series {
    /// Debian 11's (bullseye) kernel, with its security updates: older than exitprof's
    /// minimum, where it must say so.
    #[value(name = "5.10")]
    V5_10,
    /// Debian 12's (bookworm) own kernel, with its security updates.
    #[value(name = "6.1")]
    V6_1,
    /// The newer kernel Debian 12 ships through its security updates.
    #[value(name = "6.12")]
    V6_12,
    /// Debian's newest kernel: unstable's or trixie-backports', whichever is newer when the
    /// tests run.
    #[value(name = "newest")]
    Newest,
}

impl Series {
    pub const ALL: &[Series] = &[Series::V5_10, Series::V6_1, Series::V6_12, Series::Newest];

    pub fn name(self) -> &'static str {
        match self {
            Self::V5_10 => "5.10",
            Self::V6_1 => "6.1",
            Self::V6_12 => "6.12",
            Self::Newest => "newest",
        }
    }

    /// The suites the series' metapackage is looked for in; the newest version among them wins.
    fn suites(self) -> &'static [&'static str] {
        match self {
            Self::V5_10 => &["bullseye", "bullseye-security"],
            Self::V6_1 | Self::V6_12 => &["bookworm", "bookworm-security"],
            Self::Newest => &["sid", "trixie-backports"],
        }
    }

    /// The metapackage that depends on the series' newest kernel package for `arch`.
    fn metapackage(self, arch: Arch) -> String {
        match self {
            Self::V5_10 | Self::V6_1 | Self::Newest => format!("linux-image-{}", arch.debian()),
            Self::V6_12 => format!("linux-image-6.12-{}", arch.debian()),
        }
    }

    /// What the kernel package's name starts with (`linux-image-5.10.0-46-amd64`); the newest
    /// series takes whichever version there is.
    fn image_prefix(self) -> &'static str {
        match self {
            Self::V5_10 => "linux-image-5.10.",
            Self::V6_1 => "linux-image-6.1.",
            Self::V6_12 => "linux-image-6.12.",
            Self::Newest => "linux-image-",
        }
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A package at one version, as found in one suite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pinned {
    pub package: String,
    pub version: String,
}

impl fmt::Display for Pinned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.package, self.version)
    }
}

/// What a series resolved to in the archive.
struct Resolved {
    /// The series' metapackage, at its newest version, and the suite that has it.
    meta: Pinned,
    suite: String,
    /// The kernel package it depends on (`linux-image-<release>`).
    image: Pinned,
    /// The package holding the `vmlinuz`: the image itself, or (since Debian split the kernel
    /// from its modules) the `linux-binary-<release>` it depends on.
    binary: Pinned,
}

/// A kernel ready to boot.
pub struct Kernel {
    pub arch: Arch,
    pub series: Series,
    /// The kernel package, e.g. `linux-image-6.1.0-57-amd64=6.1.192-3`.
    pub image: Pinned,
    /// The package the `vmlinuz` came from (the image itself, or its `linux-binary-*`).
    pub binary: Pinned,
    /// The suite the series' metapackage was taken from.
    pub suite: String,
    /// Its `uname -r`, from the `vmlinuz`'s path in the package.
    pub release: String,
    pub vmlinuz: PathBuf,
    /// The modules the guest loads ([`MODULES`]), uncompressed.
    pub modules: Vec<PathBuf>,
}

/// Modules the guests load, built as modules by Debian's kernels: `veth`, for the network
/// namespaces full of devices whose teardowns the tests time (it depends on no other module).
pub const MODULES: &[&str] = &["veth"];

impl Kernel {
    /// What the guest boots, for the run's output: series, suite and exact packages.
    pub fn describe(&self) -> String {
        let binary = if self.binary == self.image {
            String::new()
        } else {
            format!(", vmlinuz from {}", self.binary)
        };
        format!("{} {} ({}): {}{binary}", self.arch, self.series, self.suite, self.image)
    }
}

/// Every suite any series is looked for in.
fn all_suites() -> Vec<&'static str> {
    Series::ALL.iter().flat_map(|s| s.suites()).copied().collect()
}

/// The private apt configuration for `arch`'s packages, its lists refreshed if they are old;
/// and whether they were refreshed now.
pub fn apt_for(arch: Arch) -> anyhow::Result<(Apt, bool)> {
    let apt = Apt::new(cache_dir().join(format!("apt-{}", arch.debian())), arch, &all_suites())?;
    let stale = !apt.fresh();
    if stale {
        apt.update()?;
    }
    Ok((apt, stale))
}

/// The newest kernel of each of `series` for `arch`, from the cache or downloaded into it.
pub fn fetch(arch: Arch, series: &[Series]) -> anyhow::Result<Vec<Kernel>> {
    let (apt, updated) = apt_for(arch)?;
    let resolved = match series.iter().map(|s| resolve(&apt, arch, *s)).collect() {
        Ok(resolved) => resolved,
        // A package the lists do not have yet (or no longer).
        Err(e) if !updated => {
            eprintln!("vm: {e:#}");
            apt.update()?;
            series.iter().map(|s| resolve(&apt, arch, *s)).collect::<anyhow::Result<Vec<_>>>()?
        }
        Err(e) => return Err(e),
    };
    series
        .iter()
        .zip(resolved)
        .map(|(series, resolved)| {
            let kernel = cached(&apt, arch, *series, resolved)?;
            eprintln!("vm: kernel {}", kernel.describe());
            Ok(kernel)
        })
        .collect()
}

/// The series' newest metapackage for `arch` in its suites, and the kernel package it depends
/// on.
fn resolve(apt: &Apt, arch: Arch, series: Series) -> anyhow::Result<Resolved> {
    let meta = series.metapackage(arch);
    let meta = meta.as_str();
    let versions = apt.versions(meta)?;
    let (version, suite) = newest_in(&versions, series.suites()).with_context(|| {
        format!("no {meta} in {} (apt's lists have {versions:?})", series.suites().join(" or "))
    })?;
    let meta = Pinned { package: meta.to_owned(), version };
    let depends = apt.depends(&meta.package, &meta.version)?;
    let image = depends
        .iter()
        .find(|(name, version)| {
            name.starts_with(series.image_prefix())
                && name.ends_with(&format!("-{}", arch.debian()))
                && *name != meta.package
                && !version.is_empty()
        })
        .map(|(package, version)| Pinned { package: package.clone(), version: version.clone() })
        .with_context(|| {
            format!("{meta} depends on {depends:?}, none a {} kernel package", series.name())
        })?;
    // Debian's newer kernels are split: linux-image-<release> depends on linux-binary-<release>
    // (the vmlinuz) and linux-modules-<release>.
    let split = format!("linux-binary-{}", image.package.trim_start_matches("linux-image-"));
    let binary = apt
        .depends(&image.package, &image.version)?
        .into_iter()
        .find(|(name, version)| *name == split && !version.is_empty())
        .map_or_else(|| image.clone(), |(package, version)| Pinned { package, version });
    Ok(Resolved { meta, suite, image, binary })
}

/// The newest (version, suite) of `versions` in one of `suites`.
fn newest_in(versions: &[(String, String)], suites: &[&str]) -> Option<(String, String)> {
    versions
        .iter()
        .filter(|(_, suite)| suites.contains(&suite.as_str()))
        .max_by(|a, b| apt::compare_versions(&a.0, &b.0))
        .cloned()
}

/// The kernel of `resolved` from the cache, downloading it first if needed. The cache keeps one
/// directory per package and version holding `vmlinuz-<release>` alone.
fn cached(apt: &Apt, arch: Arch, series: Series, resolved: Resolved) -> anyhow::Result<Kernel> {
    let Resolved { meta, suite, image, binary } = resolved;
    let dir = cache_dir().join("kernels").join(format!(
        "{}_{}",
        binary.package,
        binary.version.replace(':', "%3a")
    ));
    let vmlinuz = match find_vmlinuz(&dir)? {
        Some(found) => found,
        None => {
            eprintln!(
                "vm: {series}: {meta} ({suite}) depends on {image}: downloading {binary} into {}",
                dir.display()
            );
            download(apt, &binary, &dir)?
        }
    };
    let release = vmlinuz
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("vmlinuz-"))
        .context("a cached kernel is named vmlinuz-<release>")?
        .to_owned();
    // Up to 6.12 the image package holds the modules; later ones are in linux-modules-<release>.
    let modules_package = if binary == image {
        image.clone()
    } else {
        Pinned {
            package: format!("linux-modules-{}", image.package.trim_start_matches("linux-image-")),
            version: binary.version.clone(),
        }
    };
    let modules = cached_modules(apt, &modules_package, &dir.join("modules"))?;
    Ok(Kernel { arch, series, image, binary, suite, release, vmlinuz, modules })
}

/// The [`MODULES`] of `package` from the cache (`dir`), downloading it first if needed; each
/// kept uncompressed (Debian compresses them with xz or zstd), for busybox's `insmod`.
fn cached_modules(apt: &Apt, package: &Pinned, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let wanted = || MODULES.iter().map(|m| dir.join(format!("{m}.ko")));
    if wanted().all(|path| path.is_file()) {
        return Ok(wanted().collect());
    }
    eprintln!(
        "vm: downloading {package} for the modules {} into {}",
        MODULES.join(", "),
        dir.display()
    );
    let work = dir.join("partial");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let deb = apt.download(&package.package, &package.version, &work)?;
    let listing = fsys_tar(&deb, &work, &["-t"])?;
    for module in MODULES {
        let member = module_member(&listing, module)
            .with_context(|| format!("{package} has no module {module}"))?;
        fsys_tar(&deb, &work, &["-x", member])?;
        let extracted = work.join(member);
        let path = dir.join(format!("{module}.ko"));
        let decompress = match member.rsplit('.').next() {
            Some("xz") => Some("xz"),
            Some("zst") => Some("zstd"),
            _ => None,
        };
        match decompress {
            Some(tool) => {
                let out = Command::new(tool)
                    .args(["-d", "-c"])
                    .arg(&extracted)
                    .output()
                    .with_context(|| format!("starting {tool} (package xz-utils or zstd)"))?;
                if !out.status.success() {
                    bail!("{tool} -d {} failed: {}", extracted.display(), out.status);
                }
                fs::write(&path, out.stdout)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            None => fs::rename(&extracted, &path)
                .with_context(|| format!("moving {}", extracted.display()))?,
        }
    }
    fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    Ok(wanted().collect())
}

/// In a package's file list, the module `name` (`.../kernel/drivers/net/veth.ko`, maybe
/// compressed: `.ko.xz`, `.ko.zst`).
fn module_member<'a>(listing: &'a str, name: &str) -> Option<&'a str> {
    listing.lines().map(str::trim).find(|member| {
        let file = member.rsplit('/').next().unwrap_or_default();
        member.contains("/modules/")
            && [".ko", ".ko.xz", ".ko.zst"].iter().any(|ext| file == format!("{name}{ext}"))
    })
}

/// The `vmlinuz-*` in `dir`, if it is there.
fn find_vmlinuz(dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let Ok(entries) = fs::read_dir(dir) else { return Ok(None) };
    let found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .collect();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        _ => bail!("more than one vmlinuz-* in {}: {found:?}", dir.display()),
    }
}

/// Downloads `package` into `dir` and extracts its `vmlinuz` there as `vmlinuz-<release>`; the
/// package itself is not kept. The kernel appears under its final name only once complete, so
/// an interrupted download is redone, never half-used.
fn download(apt: &Apt, package: &Pinned, dir: &Path) -> anyhow::Result<PathBuf> {
    let work = dir.join("partial");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let deb = apt.download(&package.package, &package.version, &work)?;
    let listing = fsys_tar(&deb, &work, &["-t"])?;
    let (member, release) = vmlinuz_member(&listing).with_context(|| {
        format!("{package} has neither ./boot/vmlinuz-* nor ./usr/lib/modules/*/vmlinuz")
    })?;
    fsys_tar(&deb, &work, &["-x", member])?;
    let vmlinuz = dir.join(format!("vmlinuz-{release}"));
    let extracted = work.join(member);
    fs::rename(&extracted, &vmlinuz).with_context(|| format!("moving {}", extracted.display()))?;
    fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    Ok(vmlinuz)
}

/// Runs `tar ARGS` in `dir` on the package's file system tree (`dpkg-deb --fsys-tarfile`);
/// returns tar's output.
pub fn fsys_tar(deb: &Path, dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let mut contents = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .context("starting dpkg-deb")?;
    let tar_input = contents.stdout.take().context("dpkg-deb's stdout")?;
    let tar = Command::new("tar")
        .args(args)
        .current_dir(dir)
        .stdin(tar_input)
        .stderr(Stdio::inherit())
        .output()
        .context("starting tar");
    let status = contents.wait().context("waiting for dpkg-deb")?;
    let tar = tar?;
    if !tar.status.success() {
        bail!("tar {} on {} failed: {}", args.join(" "), deb.display(), tar.status);
    }
    if !status.success() {
        bail!("dpkg-deb --fsys-tarfile {} failed: {status}", deb.display());
    }
    Ok(String::from_utf8_lossy(&tar.stdout).into_owned())
}

/// In a package's file list, the kernel image and its release: `./boot/vmlinuz-<release>`
/// (Debian's linux-image packages up to 6.12) or `./usr/lib/modules/<release>/vmlinuz` (the
/// linux-binary packages of later ones).
fn vmlinuz_member(listing: &str) -> Option<(&str, &str)> {
    listing.lines().map(str::trim).find_map(|member| {
        if let Some(release) = member.strip_prefix("./boot/vmlinuz-") {
            return (!release.is_empty() && !release.contains('/')).then_some((member, release));
        }
        let release = member.strip_prefix("./usr/lib/modules/")?.strip_suffix("/vmlinuz")?;
        (!release.is_empty() && !release.contains('/')).then_some((member, release))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_layouts_of_the_kernel_image_are_found() {
        let old = "./\n./boot/\n./boot/System.map-6.1.0-57-amd64\n./boot/config-6.1.0-57-amd64\n\
                   ./boot/vmlinuz-6.1.0-57-amd64\n./lib/modules/6.1.0-57-amd64/kernel/x.ko\n";
        assert_eq!(vmlinuz_member(old), Some(("./boot/vmlinuz-6.1.0-57-amd64", "6.1.0-57-amd64")));
        let split = "./\n./usr/lib/modules/\n./usr/lib/modules/7.3.4+deb13-amd64/\n\
                     ./usr/lib/modules/7.3.4+deb13-amd64/vmlinuz\n./usr/share/doc/\n";
        assert_eq!(
            vmlinuz_member(split),
            Some(("./usr/lib/modules/7.3.4+deb13-amd64/vmlinuz", "7.3.4+deb13-amd64"))
        );
        assert_eq!(vmlinuz_member("./\n./usr/share/doc/linux-image-amd64\n"), None);
    }

    #[test]
    fn modules_are_found_compressed_or_not() {
        let listing = "./lib/modules/6.1.0-57-amd64/kernel/drivers/net/vethx.ko\n\
                       ./lib/modules/6.1.0-57-amd64/kernel/drivers/net/veth.ko\n";
        assert_eq!(
            module_member(listing, "veth"),
            Some("./lib/modules/6.1.0-57-amd64/kernel/drivers/net/veth.ko")
        );
        let split = "./usr/lib/modules/7.3.4+deb13-amd64/kernel/drivers/net/veth.ko.xz\n";
        assert_eq!(module_member(split, "veth"), Some(split.trim()));
        assert_eq!(module_member("./boot/veth.ko\n", "veth"), None);
    }

    #[test]
    fn the_newest_version_of_the_series_suites_wins() {
        let versions = [
            ("7.3.4-1~bpo13+1", "trixie-backports"),
            ("7.2.13-1", "sid"),
            ("6.1.192-3", "bookworm-security"),
            ("6.1.176-1", "bookworm"),
            ("5.10.262-1", "bullseye-security"),
            ("5.10.223-1", "bullseye"),
        ]
        .map(|(v, s)| (v.to_owned(), s.to_owned()));
        let newest = |series: Series| newest_in(&versions, series.suites()).map(|(v, _)| v);
        assert_eq!(newest(Series::V5_10).as_deref(), Some("5.10.262-1"));
        assert_eq!(newest(Series::V6_1).as_deref(), Some("6.1.192-3"));
        assert_eq!(newest(Series::Newest).as_deref(), Some("7.3.4-1~bpo13+1"));
        // Unstable ahead of backports.
        let versions = [("7.4.1-1", "sid"), ("7.3.4-1~bpo13+1", "trixie-backports")]
            .map(|(v, s)| (v.to_owned(), s.to_owned()));
        assert_eq!(
            newest_in(&versions, Series::Newest.suites()),
            Some(("7.4.1-1".to_owned(), "sid".to_owned()))
        );
    }
}
