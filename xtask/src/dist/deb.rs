//! The Debian package of one architecture, built with dpkg-deb (Debian's own tool, on every
//! Debian system): the static binary in /usr/bin, a manual page per command and the bash, zsh
//! and fish completions where Debian keeps them (made by exitprof itself from its command-line
//! definition), the systemd unit of `deploy/` (no maintainer scripts, so nothing enables or
//! starts it), the README with `docs/` whole (the pages it links to, which link to each other
//! across its folders), the changelog, and the copyright, with the licenses of everything the
//! static binary holds.

use std::{
    collections::BTreeSet,
    fs,
    io::Write as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::{
    arch::Arch,
    command::{output, run, workspace_root},
};

const MAINTAINER: &str = "exitprof maintainers <maintainers@users.noreply.a-seed-8ee5fdc1.example>";
const DESCRIPTION: &str = "eBPF profiler of the Linux exit path
 exitprof drives an exit storm (or watches real processes), times every exit
 inside the kernel stage by stage with eBPF, and prints the latency
 distribution of the whole exit and of each stage, with its on-CPU and
 off-CPU share. `exitprof serve` exports the same histograms for Prometheus;
 its systemd unit, exitprof.service, is installed disabled.";

/// The manual pages and completions, as `exitprof __manuals` writes them.
pub struct Manuals {
    /// `exitprof.1`, `exitprof-plan.1`, ...
    pages: Vec<PathBuf>,
    dir: PathBuf,
}

/// Where Debian keeps each shell's completions, by the name `exitprof __manuals` gives the file.
const COMPLETIONS: [(&str, &str); 3] = [
    ("exitprof.bash", "usr/share/bash-completion/completions/exitprof"),
    ("_exitprof", "usr/share/zsh/vendor-completions/_exitprof"),
    ("exitprof.fish", "usr/share/fish/vendor_completions.d/exitprof.fish"),
];

/// Runs `exitprof` (one this machine runs) to write its manual pages and completions into
/// `target/dist/manuals`: the command line is the same on every architecture.
pub fn manuals(exitprof: &Path) -> anyhow::Result<Manuals> {
    let dir = workspace_root().join("target/dist/manuals");
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    run(Command::new(exitprof).arg("__manuals").arg(&dir))
        .context("writing exitprof's manual pages and completions")?;
    let mut pages: Vec<PathBuf> = fs::read_dir(dir.join("man"))
        .with_context(|| format!("listing {}/man", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    pages.sort();
    if !pages.iter().any(|p| p.ends_with("exitprof.1")) {
        bail!("exitprof __manuals wrote no exitprof.1 into {}/man", dir.display());
    }
    Ok(Manuals { pages, dir })
}

/// Builds `target/dist/exitprof_<version>_<arch>.deb` around `arch`'s static `binary`; returns
/// its path.
pub fn build(arch: Arch, binary: &Path, manuals: &Manuals) -> anyhow::Result<PathBuf> {
    let root = workspace_root();
    let metadata: Value = serde_json::from_str(&output(
        Command::new(env!("CARGO"))
            .args(["metadata", "--locked", "--format-version", "1"])
            .args(["--filter-platform", arch.musl_target()])
            .current_dir(&root),
    )?)
    .context("parsing cargo metadata")?;
    let exitprof = metadata["packages"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "exitprof"))
        .context("cargo metadata lists no package exitprof")?;
    let version = exitprof["version"].as_str().context("exitprof has no version")?;
    let homepage = exitprof["repository"].as_str().context("exitprof has no repository")?;

    let staging = root.join("target/dist/deb").join(arch.debian());
    if staging.exists() {
        fs::remove_dir_all(&staging).with_context(|| format!("removing {}", staging.display()))?;
    }
    let doc = "usr/share/doc/exitprof";
    let exitprof_binary = read(binary)?;
    let overrides = lintian_overrides(&exitprof_binary)?;
    let mut files: Vec<(String, Vec<u8>, u32)> = vec![
        ("usr/bin/exitprof".to_owned(), exitprof_binary, 0o755),
        ("usr/share/lintian/overrides/exitprof".to_owned(), overrides.into_bytes(), 0o644),
        (
            "usr/lib/systemd/system/exitprof.service".to_owned(),
            read(&root.join("deploy/exitprof.service"))?,
            0o644,
        ),
        (format!("{doc}/README.md"), read(&root.join("README.md"))?, 0o644),
        (format!("{doc}/copyright"), read(&root.join("xtask/deb/copyright"))?, 0o644),
        (format!("{doc}/changelog.gz"), gzip(&changelog(version, homepage))?, 0o644),
        (format!("{doc}/third-party.txt"), third_party(&metadata)?.into_bytes(), 0o644),
    ];
    // The README's links into docs/, and the pages' links between its folders, resolve where
    // they are installed too: docs/ goes in whole, each file at its path under it.
    for (path, page) in doc_pages(&root.join("docs"))? {
        files.push((format!("{doc}/docs/{path}"), read(&page)?, 0o644));
    }
    for page in &manuals.pages {
        let name = page.file_name().context("a manual page without a name")?.to_string_lossy();
        files.push((format!("usr/share/man/man1/{name}.gz"), gzip(&read(page)?)?, 0o644));
    }
    for (written, installed) in COMPLETIONS {
        let file = manuals.dir.join("completions").join(written);
        files.push((installed.to_owned(), read(&file)?, 0o644));
    }
    // Installed-Size is in KiB, each file counted in whole KiB as du does.
    let installed_kib: usize = files.iter().map(|(_, data, _)| data.len().div_ceil(1024)).sum();
    let control = format!(
        "Package: exitprof\nVersion: {version}\nArchitecture: {}\nMaintainer: {MAINTAINER}\n\
         Installed-Size: {installed_kib}\nSection: utils\nPriority: optional\n\
         Homepage: {homepage}\nDescription: {DESCRIPTION}\n",
        arch.debian()
    );
    for (path, data, mode) in files
        .iter()
        .map(|(p, d, m)| (p.as_str(), d.as_slice(), *m))
        .chain([("DEBIAN/control", control.as_bytes(), 0o644)])
    {
        install(&staging, path, data, mode)?;
    }

    let deb = root.join(format!("target/dist/exitprof_{version}_{}.deb", arch.debian()));
    run(Command::new("dpkg-deb").args(["--root-owner-group", "--build"]).arg(&staging).arg(&deb))
        .context("building the Debian package (dpkg-deb comes with dpkg, on every Debian system)")?;
    Ok(deb)
}

/// What lintian says of a static binary that is meant to be static, with why (its overrides
/// file): a static executable is an error to lintian, a static PIE (what Rust links for x86_64
/// musl; its aarch64 musl target links no PIE) a library without the libraries it needs. The
/// binary is static so that one file runs on any distribution and in an image of nothing else.
/// Lintian also finds libyaml's strings in it: `serve --web.config.file` reads its YAML with
/// unsafe-libyaml, libyaml translated to Rust and compiled in, not a copy of the C library.
fn lintian_overrides(binary: &[u8]) -> anyhow::Result<String> {
    const ET_EXEC: u16 = 2;
    const ET_DYN: u16 = 3;
    let why = "# Static on purpose: one file that runs on any distribution, as `cargo xtask dist` \
               ships it.\n";
    let tag = match binary.get(16..18).map(|t| u16::from_le_bytes([t[0], t[1]])) {
        Some(ET_EXEC) => "statically-linked-binary",
        Some(ET_DYN) => "shared-library-lacks-prerequisites",
        other => bail!("the static binary is not an ELF executable (e_type {other:?})"),
    };
    let yaml = "# libyaml translated to Rust (unsafe-libyaml) and compiled in: there is no C \
                library to link against instead.\n";
    Ok(format!(
        "{why}exitprof: {tag} [usr/bin/exitprof]\n{yaml}exitprof: embedded-library libyaml \
         [usr/bin/exitprof]\n"
    ))
}

/// The package's changelog, in Debian's format: one entry for the version, dated by the last
/// commit (so that a rebuild of the same tree makes the same package).
fn changelog(version: &str, homepage: &str) -> Vec<u8> {
    let date = output(Command::new("git").args(["log", "-1", "--format=%aD"]))
        .map(|d| d.trim().to_owned())
        .ok()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "Thu, 01 Jan 2026 00:00:00 +0000".to_owned());
    format!(
        "exitprof ({version}) unstable; urgency=medium\n\n  * Release {version}; see the history \
         of\n    {homepage}.\n\n -- {MAINTAINER}  {date}\n"
    )
    .into_bytes()
}

/// `data` compressed as Debian wants manual pages and changelogs: gzip at its best, without a
/// name or time stamp in the header (the same input makes the same file).
fn gzip(data: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data)?;
    Ok(encoder.finish()?)
}

/// The files of `docs/` and of its folders (its pages and their figures), each with its path
/// under `docs/` (`guides/reading-a-report.md`), in order of path.
fn doc_pages(docs: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let mut pages = Vec::new();
    let mut dirs = vec![docs.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
            let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
            let (kind, path) = (entry.file_type()?, entry.path());
            if kind.is_dir() {
                dirs.push(path);
            } else if kind.is_file() {
                let under = path
                    .strip_prefix(docs)?
                    .to_str()
                    .with_context(|| format!("{} is not named in UTF-8", path.display()))?;
                pages.push((under.to_owned(), path.clone()));
            }
        }
    }
    pages.sort();
    Ok(pages)
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// Writes `data` to `staging/path` with `mode`, its directories 0755 whatever the umask (dpkg
/// installs them as packed).
fn install(staging: &Path, path: &str, data: &[u8], mode: u32) -> anyhow::Result<()> {
    let dest = staging.join(path);
    for dir in Path::new(path).ancestors().skip(1).map(|d| staging.join(d)) {
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
    }
    fs::write(&dest, data).with_context(|| format!("writing {}", dest.display()))?;
    fs::set_permissions(&dest, fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", dest.display()))
}

/// The crates linked into the binary (exitprof's normal dependencies and those of its eBPF
/// programs, transitively, for the shipped target), one `name version: license` line each.
fn third_party(metadata: &Value) -> anyhow::Result<String> {
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .context("cargo metadata has no workspace_members")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let packages = metadata["packages"].as_array().context("cargo metadata has no packages")?;
    let nodes = metadata["resolve"]["nodes"].as_array().context("cargo metadata has no resolve")?;
    let id_of = |name: &str| {
        packages
            .iter()
            .find(|p| p["name"] == name && members.contains(p["id"].as_str().unwrap_or_default()))
            .and_then(|p| p["id"].as_str())
            .with_context(|| format!("no workspace package {name}"))
    };
    // Procedural macros run in the compiler: neither they nor what they use are linked.
    let proc_macro = |id: &str| {
        packages
            .iter()
            .filter(|p| p["id"] == id)
            .filter_map(|p| p["targets"].as_array())
            .flatten()
            .any(|t| {
                t["kind"].as_array().is_some_and(|kinds| kinds.iter().any(|k| k == "proc-macro"))
            })
    };
    let mut todo = vec![id_of("exitprof")?, id_of("exitprof-ebpf")?];
    let mut linked = BTreeSet::new();
    while let Some(id) = todo.pop() {
        if proc_macro(id) || !linked.insert(id) {
            continue;
        }
        let node = nodes.iter().find(|n| n["id"] == id).context("a package outside the resolve")?;
        for dep in node["deps"].as_array().into_iter().flatten() {
            let normal = dep["dep_kinds"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].is_null()));
            if normal && let Some(dep_id) = dep["pkg"].as_str() {
                todo.push(dep_id);
            }
        }
    }
    let mut lines: Vec<String> = packages
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| linked.contains(id) && !members.contains(id)))
        .map(|p| {
            let license = p["license"].as_str().unwrap_or("see the crate's license file");
            let (name, version) = (&p["name"], &p["version"]);
            format!(
                "{} {}: {license}",
                name.as_str().unwrap_or("?"),
                version.as_str().unwrap_or("?")
            )
        })
        .collect();
    if lines.is_empty() {
        bail!("cargo metadata lists no dependency of exitprof");
    }
    lines.sort();
    Ok(format!(
        "Rust crates statically linked into /usr/bin/exitprof, with their licenses (their \
         texts are in each crate's source on crates.io):\n\n{}\n",
        lines.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The relative link targets of a Markdown text, without their `#anchor`s.
    fn links(text: &str) -> Vec<&str> {
        text.split("](")
            .skip(1)
            .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
            .map(|target| target.split_once('#').map_or(target, |(path, _)| path))
            .filter(|target| !target.is_empty() && !target.contains(':'))
            .collect()
    }

    /// Every page of `docs/` the package holds that the README, or a page it holds, links to.
    #[test]
    fn the_package_holds_every_page_of_docs_linked_to() {
        let root = workspace_root();
        let pages = doc_pages(&root.join("docs")).unwrap();
        let installed: BTreeSet<PathBuf> =
            pages.iter().map(|(under, _)| Path::new("docs").join(under)).collect();
        assert!(installed.contains(Path::new("docs/reference/exports.md")), "{installed:?}");
        let readme = ("README.md".to_owned(), root.join("README.md"));
        let texts = pages.iter().map(|(under, path)| (format!("docs/{under}"), path.clone()));
        for (name, path) in [readme]
            .into_iter()
            .chain(texts)
            .filter(|(_, p)| p.extension().is_some_and(|e| e == "md"))
        {
            let text = fs::read_to_string(&path).unwrap();
            for target in links(&text) {
                // Resolved by hand: the target need not exist for canonicalize.
                let mut resolved = PathBuf::new();
                for part in Path::new(&name).parent().unwrap().join(target).components() {
                    match part {
                        std::path::Component::ParentDir => _ = resolved.pop(),
                        std::path::Component::CurDir => {}
                        other => resolved.push(other),
                    }
                }
                if resolved.starts_with("docs") {
                    assert!(
                        installed.contains(&resolved),
                        "{name} links to {target}, not packaged"
                    );
                }
            }
        }
    }
}
