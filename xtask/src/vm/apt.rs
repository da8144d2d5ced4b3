//! A private apt configuration for fetching Debian's kernels from suites the machine's own apt
//! sources need not list (Debian 11, unstable, backports).
//!
//! Everything apt reads or writes for it lives in one directory of exitprof's cache: its own
//! sources list, package lists, state, download cache and an empty dpkg status (so that what the
//! machine has installed plays no part in which version is chosen). The machine's sources,
//! pinning, lists and caches are neither read nor written; its `apt.conf.d` (proxies, checks)
//! still applies. Only the package lists of one architecture are fetched (no translations, no
//! other indexes), and they are refreshed when older than [`MAX_AGE`] or when a package is
//! missing. apt is told that architecture is the machine's, so that it finds an arm64 kernel or
//! busybox on an amd64 machine as it would on an arm64 one.

use std::{
    cmp::Ordering,
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, SystemTime},
};

use anyhow::{Context as _, bail};

use crate::{
    arch::Arch,
    command::{is_root, output, run},
};

/// The keyring every Debian suite's Release file is signed with (package
/// debian-archive-keyring, which every Debian system has).
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
const ARCHIVE: &str = "http://deb.debian.org/debian";
/// The security suites (`bookworm-security`) live in an archive of their own.
const SECURITY_ARCHIVE: &str = "http://deb.debian.org/debian-security";

/// Package lists older than this are refreshed before they are used.
pub const MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// The private apt configuration rooted at `dir`, for the packages of one architecture.
pub struct Apt {
    dir: PathBuf,
    arch: Arch,
    suites: Vec<String>,
    sources: String,
}

impl Apt {
    /// A configuration listing `suites` (the main component of each) for `arch`; writes its
    /// sources list and creates its directories.
    pub fn new(dir: PathBuf, arch: Arch, suites: &[&str]) -> anyhow::Result<Self> {
        let mut unique: Vec<String> = Vec::new();
        for suite in suites {
            if !unique.iter().any(|s| s == suite) {
                unique.push((*suite).to_owned());
            }
        }
        let apt = Self { sources: sources_list(arch, &unique), suites: unique, arch, dir };
        for sub in ["lists/partial", "cache/archives/partial", "state", "preferences.d"] {
            let path = apt.dir.join(sub);
            fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        }
        write_if_changed(&apt.dir.join("sources.list"), &apt.sources)?;
        write_if_changed(&apt.dir.join("status"), "")?;
        Ok(apt)
    }

    /// `program` (apt-get or apt-cache) with every option that keeps it inside this
    /// configuration.
    fn command(&self, program: &str) -> Command {
        let dir = |sub: &str| self.dir.join(sub).display().to_string();
        let mut cmd = Command::new(program);
        for (key, value) in [
            ("Dir::Etc::sourcelist", dir("sources.list")),
            ("Dir::Etc::sourceparts", "-".to_owned()),
            ("Dir::Etc::preferences", dir("preferences")),
            ("Dir::Etc::preferencesparts", dir("preferences.d")),
            ("Dir::State", dir("state")),
            ("Dir::State::Lists", dir("lists")),
            ("Dir::State::status", dir("status")),
            ("Dir::Cache", dir("cache")),
            // Some images turn the binary cache off; with lists this large every look-up would
            // parse them all again (1.5 s). The source cache would only be a second copy.
            ("Dir::Cache::pkgcache", "pkgcache.bin".to_owned()),
            ("Dir::Cache::srcpkgcache", String::new()),
            ("APT::Architecture", self.arch.debian().to_owned()),
            ("APT::Architectures", self.arch.debian().to_owned()),
        ] {
            cmd.arg("-o").arg(format!("{key}={value}"));
        }
        if is_root() {
            // apt's sandbox user cannot write into root's cache; it would warn and go on as root.
            cmd.args(["-o", "APT::Sandbox::User=root"]);
        }
        cmd
    }

    /// When the lists were last refreshed with the current sources, if they were.
    fn updated(&self) -> Option<SystemTime> {
        let stamp = self.dir.join("updated");
        let sources = fs::read_to_string(&stamp).ok()?;
        if sources != self.sources {
            return None;
        }
        fs::metadata(&stamp).and_then(|m| m.modified()).ok()
    }

    /// Whether the lists were refreshed with the current sources within [`MAX_AGE`].
    pub fn fresh(&self) -> bool {
        self.updated().and_then(|t| t.elapsed().ok()).is_some_and(|age| age < MAX_AGE)
    }

    /// Refreshes the package lists. If that fails but older lists are there, warns and keeps
    /// them (a machine offline for a while still boots the kernels it has cached).
    pub fn update(&self) -> anyhow::Result<()> {
        eprintln!(
            "vm: refreshing the {} package lists of {} ({})",
            self.arch.debian(),
            self.suites.join(", "),
            self.dir.display()
        );
        let result = run(self.command("apt-get").args(["update", "-q"]));
        match (result, self.updated()) {
            (Ok(()), _) => {
                let stamp = self.dir.join("updated");
                fs::write(&stamp, &self.sources)
                    .with_context(|| format!("writing {}", stamp.display()))
            }
            (Err(e), Some(_)) => {
                eprintln!("vm: warning: {e:#}; going on with the lists there are");
                Ok(())
            }
            (Err(e), None) => Err(e.context("fetching Debian's package lists")),
        }
    }

    /// Every version of `package` the lists hold, each with its suite.
    pub fn versions(&self, package: &str) -> anyhow::Result<Vec<(String, String)>> {
        let listing = output(self.command("apt-cache").args(["madison", package]))?;
        Ok(parse_madison(&listing))
    }

    /// The names (each with its version) `version` of `package` depends on, first alternatives
    /// only.
    pub fn depends(&self, package: &str, version: &str) -> anyhow::Result<Vec<(String, String)>> {
        let record = output(
            self.command("apt-cache")
                .args(["show", "--no-all-versions"])
                .arg(format!("{package}={version}")),
        )?;
        Ok(parse_depends(&record))
    }

    /// Downloads `version` of `package` into `dir` (not installed); returns the `.deb`.
    pub fn download(&self, package: &str, version: &str, dir: &Path) -> anyhow::Result<PathBuf> {
        run(self
            .command("apt-get")
            .args(["download", "-q"])
            .arg(format!("{package}={version}"))
            .current_dir(dir))?;
        let found: Vec<PathBuf> = fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "deb"))
            .collect();
        match found.as_slice() {
            [one] => Ok(one.clone()),
            _ => bail!(
                "expected one .deb in {} after apt-get download, found {found:?}",
                dir.display()
            ),
        }
    }
}

/// One line per suite, `arch` only, its package lists only.
fn sources_list(arch: Arch, suites: &[String]) -> String {
    let mut text = String::new();
    for suite in suites {
        let archive = if suite.ends_with("-security") { SECURITY_ARCHIVE } else { ARCHIVE };
        text.push_str(&format!(
            "deb [arch={} lang=none target=Packages signed-by={KEYRING}] {archive} {suite} main\n",
            arch.debian()
        ));
    }
    text
}

fn write_if_changed(path: &Path, text: &str) -> anyhow::Result<()> {
    if fs::read_to_string(path).ok().as_deref() != Some(text) {
        fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `apt-cache madison`'s lines (`name | version | archive suite/component arch Packages`) as
/// (version, suite) pairs.
fn parse_madison(listing: &str) -> Vec<(String, String)> {
    listing
        .lines()
        .filter_map(|line| {
            let mut fields = line.split('|').map(str::trim);
            let (_, version, source) = (fields.next()?, fields.next()?, fields.next()?);
            let suite = source.split_whitespace().nth(1)?.split('/').next()?;
            Some((version.to_owned(), suite.to_owned()))
        })
        .collect()
}

/// A package record's `Depends:` as (name, version) pairs: the first alternative of each, its
/// version the one an `(= version)` relation names, else empty.
fn parse_depends(record: &str) -> Vec<(String, String)> {
    let Some(depends) = record.lines().find_map(|l| l.strip_prefix("Depends:")) else {
        return Vec::new();
    };
    depends
        .split(',')
        .filter_map(|dep| {
            let first = dep.split('|').next()?.trim();
            let (name, relation) = match first.split_once('(') {
                Some((name, relation)) => (name.trim(), relation.trim_end_matches(')').trim()),
                None => (first, ""),
            };
            let version = relation.strip_prefix('=').map_or("", str::trim);
            Some((name.to_owned(), version.to_owned()))
        })
        .collect()
}

/// Orders two Debian versions as dpkg does (`[epoch:]upstream[-revision]`, `~` before
/// anything, even the end).
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    fn split(v: &str) -> (u64, &str, &str) {
        let (epoch, rest) = match v.split_once(':') {
            Some((epoch, rest)) => (epoch.parse().unwrap_or(0), rest),
            None => (0, v),
        };
        let (upstream, revision) = rest.rsplit_once('-').unwrap_or((rest, ""));
        (epoch, upstream, revision)
    }
    let (a, b) = (split(a), split(b));
    a.0.cmp(&b.0)
        .then_with(|| compare_part(a.1.as_bytes(), b.1.as_bytes()))
        .then_with(|| compare_part(a.2.as_bytes(), b.2.as_bytes()))
}

/// dpkg's `verrevcmp`: alternating runs of non-digits (compared by [`weight`]) and of digits
/// (compared as numbers).
fn compare_part(left: &[u8], right: &[u8]) -> Ordering {
    fn weight(c: Option<&u8>) -> i32 {
        match c {
            None => 0,
            Some(b'~') => -1,
            Some(c) if c.is_ascii_digit() => 0,
            Some(c) if c.is_ascii_alphabetic() => i32::from(*c),
            Some(c) => i32::from(*c) + 256,
        }
    }
    let digit = |s: &[u8], at: usize| s.get(at).is_some_and(u8::is_ascii_digit);
    let (mut at_left, mut at_right) = (0, 0);
    while at_left < left.len() || at_right < right.len() {
        while (at_left < left.len() && !digit(left, at_left))
            || (at_right < right.len() && !digit(right, at_right))
        {
            let order = weight(left.get(at_left)).cmp(&weight(right.get(at_right)));
            if order != Ordering::Equal {
                return order;
            }
            at_left += 1;
            at_right += 1;
        }
        while left.get(at_left) == Some(&b'0') {
            at_left += 1;
        }
        while right.get(at_right) == Some(&b'0') {
            at_right += 1;
        }
        let mut first_difference = Ordering::Equal;
        while digit(left, at_left) && digit(right, at_right) {
            if first_difference == Ordering::Equal {
                first_difference = left[at_left].cmp(&right[at_right]);
            }
            at_left += 1;
            at_right += 1;
        }
        if digit(left, at_left) {
            return Ordering::Greater;
        }
        if digit(right, at_right) {
            return Ordering::Less;
        }
        if first_difference != Ordering::Equal {
            return first_difference;
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn security_suites_come_from_their_own_archive() {
        let suites = ["bullseye".to_owned(), "bullseye-security".to_owned()];
        let text = sources_list(Arch::X86_64, &suites);
        assert_eq!(
            text,
            format!(
                "deb [arch=amd64 lang=none target=Packages signed-by={KEYRING}] \
                 http://deb.debian.org/debian bullseye main\n\
                 deb [arch=amd64 lang=none target=Packages signed-by={KEYRING}] \
                 http://deb.debian.org/debian-security bullseye-security main\n"
            )
        );
        assert!(sources_list(Arch::Aarch64, &suites).starts_with("deb [arch=arm64 lang=none"));
    }

    #[test]
    fn madison_lines_give_versions_and_suites() {
        let listing = "linux-image-amd64 | 7.3.4-1~bpo13+1 | http://deb.debian.org/debian \
                       trixie-backports/main amd64 Packages\n\
                       linux-image-amd64 | 6.1.192-3 | http://deb.debian.org/debian-security \
                       bookworm-security/main amd64 Packages\n";
        assert_eq!(
            parse_madison(listing),
            [
                ("7.3.4-1~bpo13+1".to_owned(), "trixie-backports".to_owned()),
                ("6.1.192-3".to_owned(), "bookworm-security".to_owned()),
            ]
        );
    }

    #[test]
    fn depends_keep_names_and_pinned_versions() {
        let record = "Package: linux-image-7.3.4+deb13-amd64\nVersion: 7.3.4-1~bpo13+1\n\
                      Depends: dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, \
                      linux-binary-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), kmod\n";
        assert_eq!(
            parse_depends(record),
            [
                ("dracut".to_owned(), String::new()),
                ("linux-binary-7.3.4+deb13-amd64".to_owned(), "7.3.4-1~bpo13+1".to_owned()),
                ("kmod".to_owned(), String::new()),
            ]
        );
    }

    #[test]
    fn versions_are_ordered_as_dpkg_orders_them() {
        use Ordering::{Equal, Greater, Less};
        for (a, b, expected) in [
            ("7.3.4-1~bpo13+1", "7.2.13-1", Greater),
            ("6.1.192-3", "6.1.176-1", Greater),
            ("5.10.262-1", "5.10.223-1", Greater),
            ("6.12.118-1~deb12u1", "6.12.118-1", Less),
            ("7.0~rc7-1~exp1", "7.0-1", Less),
            ("1:6.0-1", "7.0-1", Greater),
            ("6.1.0", "6.1", Greater),
            ("6.1.10-1", "6.1.9-1", Greater),
            ("6.1a-1", "6.1-1", Greater),
            ("6.1+b1", "6.1.1", Less),
            ("5.10.262-1", "5.10.262-1", Equal),
            ("6.1.0-01", "6.1.0-1", Equal),
        ] {
            assert_eq!(compare_versions(a, b), expected, "{a} vs {b}");
            assert_eq!(compare_versions(b, a), expected.reverse(), "{b} vs {a}");
        }
    }
}
