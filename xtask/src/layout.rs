//! The rules of exitprof/src's layout that the compiler does not enforce, checked by
//! `cargo xtask test` with the other lints: each folder's module comment says what it must not
//! import, and the rules here keep the arrows between layers running one way. From the top:
//! `main.rs` and `cli.rs`; the presentation layer (`present/` over `report/`, `export/` and
//! `diff/`); `run/` and `compare/`, which produce outcomes; the folders they are made of; and
//! `base/`, the ground floor.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

use crate::command::workspace_root;

/// Files of exitprof/src (those under `folders`, or all but `main.rs` and `cli.rs` when there
/// are none) must not use any path through one of `names`.
struct Rule {
    folders: &'static [&'static str],
    names: &'static [&'static str],
    why: &'static str,
}

/// `run/` and `compare/`, which produce outcomes, and the folders they are made of.
const BELOW_PRESENTATION: [&str; 9] =
    ["run", "compare", "analysis", "groups", "probes", "kernel", "conditions", "profiled", "base"];

/// The presentation layer: what renders outcomes.
const PRESENTATION: [&str; 4] = ["present", "report", "export", "diff"];

/// Every module but the ground floor.
const ABOVE_BASE: [&str; 14] = [
    "cli",
    "present",
    "report",
    "export",
    "diff",
    "run",
    "compare",
    "serve",
    "analysis",
    "groups",
    "probes",
    "kernel",
    "conditions",
    "profiled",
];

const RULES: &[Rule] = &[
    Rule {
        folders: &["analysis"],
        names: &["aya", "aya_obj", "tokio"],
        why: "analysis/ is pure: it turns records into numbers, without the eBPF object or the \
              async runtime",
    },
    Rule {
        folders: &[],
        names: &["cli"],
        why: "only main.rs reads clap's structs; everything else reads the requests cli.rs \
              builds",
    },
    Rule {
        folders: &BELOW_PRESENTATION,
        names: &PRESENTATION,
        why: "run and compare (and the folders they are made of) return outcomes, which the \
              presentation layer above them (present, report, export, diff) renders: an import \
              of it from below would make the arrows run both ways",
    },
    Rule {
        folders: &["report", "export", "diff"],
        names: &["present"],
        why: "present is the top of the presentation layer: it uses report, export and diff to \
              render outcomes, never the other way round",
    },
    Rule {
        folders: &["base"],
        names: &ABOVE_BASE,
        why: "base is the ground floor that every folder may use: it uses none of them",
    },
];

impl Rule {
    fn applies_to(&self, file: &Path) -> bool {
        if self.folders.is_empty() {
            file != Path::new("main.rs") && file != Path::new("cli.rs")
        } else {
            self.folders.iter().any(|folder| file.starts_with(folder))
        }
    }
}

/// Checks every file of exitprof/src against [`RULES`]; fails naming each file:line that breaks
/// one.
pub fn check() -> anyhow::Result<()> {
    let src = workspace_root().join("exitprof/src");
    let mut broken = Vec::new();
    for path in rust_files(&src)? {
        let file = path.strip_prefix(&src)?;
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        broken.extend(breaches(file, &text));
    }
    if !broken.is_empty() {
        bail!("the layout's rules are broken:\n{}", broken.join("\n"));
    }
    Ok(())
}

/// Where `text`, the file `file` of exitprof/src, breaks one of [`RULES`], and why.
fn breaches(file: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for rule in RULES.iter().filter(|rule| rule.applies_to(file)) {
        for (line, name) in uses(text, rule.names) {
            broken.push(format!("exitprof/src/{}:{line}: {name}: {}", file.display(), rule.why));
        }
    }
    broken
}

/// The `.rs` files under `dir`, at any depth.
fn rust_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            files.extend(rust_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(files)
}

/// Where `text` uses a path through one of `names` (`name::...`, or `...::name` as in
/// `use crate::name;`), comments left out: (line, name), lines counted from 1.
fn uses<'a>(text: &str, names: &[&'a str]) -> Vec<(usize, &'a str)> {
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split_once("//").map_or(line, |(code, _)| code);
        let words = code.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'));
        for word in words {
            let segments: Vec<&str> = word.split("::").collect();
            if segments.len() < 2 {
                continue;
            }
            if let Some(name) = names.iter().find(|name| segments.contains(name)) {
                found.push((i + 1, *name));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_through_a_name_are_found_and_other_words_are_not() {
        let text = "\
use aya::maps::RingBuf;
use crate::{cli::Target, run};
    cli::RunArgs,
use crate::cli;
let cli = parse(); cli.run.target(); // aya:: in a comment
/// tokio::spawn in a doc comment
#[tokio::main]
let x = not_aya::f();
";
        let found = uses(text, &["aya", "tokio", "cli"]);
        assert_eq!(found, [(1, "aya"), (2, "cli"), (3, "cli"), (4, "cli"), (7, "tokio")]);
    }

    #[test]
    fn rules_apply_to_their_folder_or_to_all_but_the_cli() {
        let [analysis, cli, ..] = RULES else { panic!("the analysis and cli rules first") };
        assert!(analysis.applies_to(Path::new("analysis/stages.rs")));
        assert!(!analysis.applies_to(Path::new("probes/load.rs")));
        assert!(cli.applies_to(Path::new("report/terminal.rs")));
        assert!(!cli.applies_to(Path::new("main.rs")));
        assert!(!cli.applies_to(Path::new("cli.rs")));
    }

    #[test]
    fn arrows_from_below_the_presentation_layer_or_out_of_the_ground_floor_are_breaches() {
        let up = "use crate::{report::progress::Progress, run::collect};\n";
        let broken = breaches(Path::new("run/mod.rs"), up);
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert!(broken[0].starts_with("exitprof/src/run/mod.rs:1: report: run and compare"));
        assert!(breaches(Path::new("present/run.rs"), up).is_empty());
        assert!(!breaches(Path::new("report/terminal.rs"), "use crate::present;\n").is_empty());
        assert!(!breaches(Path::new("base/mod.rs"), "use crate::run::RunOutcome;\n").is_empty());
        assert!(
            breaches(Path::new("probes/maps.rs"), "use crate::base::pidfd::PidFd;\n").is_empty()
        );
    }

    #[test]
    fn exitprof_src_keeps_the_rules() {
        check().unwrap();
    }
}
