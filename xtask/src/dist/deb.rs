//! The Debian package, built with dpkg-deb (Debian's own tool, on every Debian system): the
//! static binary in /usr/bin, the systemd unit of `deploy/` (no maintainer scripts, so nothing
//! enables or starts it), the README with the pages of `docs/` it links to, and the copyright,
//! with the licenses of everything the static binary holds.

use std::{
    collections::BTreeSet,
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::TARGET;
use crate::command::{output, run, workspace_root};

const MAINTAINER: &str = "exitprof maintainers <maintainers@users.noreply.a-seed-8ee5fdc1.example>";
const DESCRIPTION: &str = "eBPF profiler of the Linux exit path
 exitprof drives an exit storm (or watches real processes), times every exit
 inside the kernel stage by stage with eBPF, and prints the latency
 distribution of the whole exit and of each stage, with its on-CPU and
 off-CPU share. `exitprof serve` exports the same histograms for Prometheus;
 its systemd unit, exitprof.service, is installed disabled.";

/// Builds `target/dist/exitprof_<version>_amd64.deb` around the static `binary`; returns its
/// path.
pub fn build(binary: &Path) -> anyhow::Result<PathBuf> {
    let root = workspace_root();
    let metadata: Value = serde_json::from_str(&output(
        Command::new(env!("CARGO"))
            .args(["metadata", "--locked", "--format-version", "1", "--filter-platform", TARGET])
            .current_dir(&root),
    )?)
    .context("parsing cargo metadata")?;
    let exitprof = metadata["packages"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "exitprof"))
        .context("cargo metadata lists no package exitprof")?;
    let version = exitprof["version"].as_str().context("exitprof has no version")?;
    let homepage = exitprof["repository"].as_str().context("exitprof has no repository")?;

    let staging = root.join("target/dist/deb");
    if staging.exists() {
        fs::remove_dir_all(&staging).with_context(|| format!("removing {}", staging.display()))?;
    }
    let doc = "usr/share/doc/exitprof";
    let mut files: Vec<(String, Vec<u8>, u32)> = vec![
        ("usr/bin/exitprof".to_owned(), read(binary)?, 0o755),
        (
            "usr/lib/systemd/system/exitprof.service".to_owned(),
            read(&root.join("deploy/exitprof.service"))?,
            0o644,
        ),
        (format!("{doc}/README.md"), read(&root.join("README.md"))?, 0o644),
        (format!("{doc}/copyright"), read(&root.join("xtask/deb/copyright"))?, 0o644),
        (format!("{doc}/third-party.txt"), third_party(&metadata)?.into_bytes(), 0o644),
    ];
    // The README's links into docs/ resolve where it is installed too.
    for page in doc_pages(&root.join("docs"))? {
        let name = page.file_name().context("a docs/ entry without a name")?.to_string_lossy();
        files.push((format!("{doc}/docs/{name}"), read(&page)?, 0o644));
    }
    // Installed-Size is in KiB, each file counted in whole KiB as du does.
    let installed_kib: usize = files.iter().map(|(_, data, _)| data.len().div_ceil(1024)).sum();
    let control = format!(
        "Package: exitprof\nVersion: {version}\nArchitecture: amd64\nMaintainer: {MAINTAINER}\n\
         Installed-Size: {installed_kib}\nSection: utils\nPriority: optional\n\
         Homepage: {homepage}\nDescription: {DESCRIPTION}\n"
    );
    for (path, data, mode) in files
        .iter()
        .map(|(p, d, m)| (p.as_str(), d.as_slice(), *m))
        .chain([("DEBIAN/control", control.as_bytes(), 0o644)])
    {
        install(&staging, path, data, mode)?;
    }

    let deb = root.join(format!("target/dist/exitprof_{version}_amd64.deb"));
    run(Command::new("dpkg-deb").args(["--root-owner-group", "--build"]).arg(&staging).arg(&deb))
        .context("building the Debian package (dpkg-deb comes with dpkg, on every Debian system)")?;
    Ok(deb)
}

/// The files of `docs/` (its pages and their figures), by name.
fn doc_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut pages = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        if entry.file_type()?.is_file() {
            pages.push(entry.path());
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
