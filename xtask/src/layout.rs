//! The layering of exitprof's three crates that Cargo does not enforce, checked by `cargo xtask
//! test` with the other lints. Cargo keeps the library (exitprof-core) from the engine
//! (exitprof-engine) and both from the binary (exitprof): [`dependencies`] checks that the
//! library's code reaches neither aya nor tokio nor libc and that only the binary has clap.
//! Inside the crates, the folders are stacked in one list, [`LAYERS`], from the ground floor up:
//! a file imports from its own folder and from the layers below, never from a layer above nor
//! from another folder of its own layer, and no files import each other in a circle.
//!
//! Imports are the `crate::`, `super::` and `self::` paths of the code (in `use` or inline) and
//! the paths through the other two crates (`exitprof_core::analysis::..` is in `analysis`'s
//! layer), comments and rustdoc links aside. A file's unit tests count for the layers, not for
//! the circles: a test may drive its module together with the one that reads its output.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

use crate::command::{self, workspace_root};

/// The top-level folders of the three crates, from the ground floor up; a name the library and
/// the engine share (`kernel`, `probes`, `run`, ...) is one layer, the engine's half above the
/// library's by Cargo. Folders of one layer do not import each other.
const LAYERS: &[&[&str]] = &[
    // exitprof's signals, pidfds, files written atomically, usage errors.
    &["base"],
    // Facts about the running kernel: version, BTF, symbols, the exit path per version.
    &["kernel"],
    // The eBPF object: the probe plan, loading and attaching, the maps it fills.
    &["probes"],
    // What compare switches on and off; what is profiled (storms, watched processes).
    &["conditions", "profiled"],
    // Pure: records into numbers (stages, histograms, groups, teardowns, stacks).
    &["analysis"],
    // One run, end to end, and a run kept in a file; it produces an outcome.
    &["run"],
    // The same storm with a condition on and off; it produces an outcome.
    &["compare"],
    // The run document, the one shape of a finished run, and the verdicts it is made with.
    &["document"],
    // `diff` of saved runs: it reads their run documents and makes the diff's document.
    &["diff"],
    // What a person reads in a terminal: the reports of runs, comparisons and diffs.
    &["report"],
    // Files for other tools, encoded from the outcomes and their documents, a diff's too.
    &["export"],
    // `serve`'s collection loop and metrics.
    &["serve"],
    // The presentation layer: prints and writes what the commands produce.
    &["present"],
    // The command line: clap's structs, turned into requests.
    &["cli"],
    // main.rs: dispatch.
    &["main"],
];

/// The crates whose sources are checked.
const SOURCES: &[&str] = &["exitprof-core", "exitprof-engine", "exitprof"];
/// The crates of [`SOURCES`] that others import, by the names they import them by.
const LIBRARIES: &[&str] = &["exitprof_core", "exitprof_engine"];

/// Crates a crate of exitprof's must not depend on, and why.
const FORBIDDEN: &[Forbidden] = &[
    (
        "exitprof-core",
        &["aya", "aya-obj", "aya-log", "tokio"],
        Reach::Any,
        "the library reads records and makes documents without the eBPF object or an async \
         runtime, at any depth",
    ),
    (
        "exitprof-core",
        &["libc", "clap"],
        Reach::Direct,
        "the library's code calls no libc and reads no command line",
    ),
    (
        "exitprof-engine",
        &["clap"],
        Reach::Direct,
        "the command line is the binary's: the engine reads requests",
    ),
];

/// A crate, the crates it must not depend on, how deep, and why.
type Forbidden = (&'static str, &'static [&'static str], Reach, &'static str);

/// Whether a forbidden crate is forbidden as a direct dependency or at any depth.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reach {
    Direct,
    Any,
}

/// Checks the crates' dependencies and their sources against [`LAYERS`] and for circles; fails
/// naming each dependency, each file:line that breaks a rule, and each circle.
pub fn check() -> anyhow::Result<()> {
    let mut broken = dependencies(FORBIDDEN)?;
    for krate in SOURCES {
        let src = workspace_root().join(krate).join("src");
        let mut files = BTreeMap::new();
        for path in rust_files(&src)? {
            let file = path.strip_prefix(&src)?.to_path_buf();
            let text =
                fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            files.insert(file, text);
        }
        broken.extend(breaches(krate, &files));
    }
    if !broken.is_empty() {
        bail!("the layout's rules are broken:\n{}", broken.join("\n"));
    }
    Ok(())
}

/// Where the crates depend on what `rules` forbid them, as `cargo tree` resolves each crate
/// alone (its normal dependencies, with the features it asks for: a test may use anything).
fn dependencies(rules: &[Forbidden]) -> anyhow::Result<Vec<String>> {
    let mut broken = Vec::new();
    for &(krate, names, reach, why) in rules {
        let mut tree =
            std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        tree.current_dir(workspace_root()).args([
            "tree",
            "--locked",
            "--package",
            krate,
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ]);
        if reach == Reach::Direct {
            tree.args(["--depth", "1"]);
        }
        let listed = command::output(&mut tree)?;
        let found: BTreeSet<&str> = listed.lines().filter_map(|l| l.split(' ').next()).collect();
        for name in names.iter().filter(|name| found.contains(*name)) {
            broken.push(format!("{krate} depends on {name}: {why}"));
        }
    }
    Ok(broken)
}

/// Where `files` (path under `krate`/src -> text) break a rule, and why.
fn breaches(krate: &str, files: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let modules: BTreeMap<Vec<String>, &Path> =
        files.keys().map(|file| (module_of(file), file.as_path())).collect();
    let mut broken = Vec::new();
    let mut graph: BTreeMap<&Path, BTreeSet<&Path>> = BTreeMap::new();
    for (file, text) in files {
        let here = module_of(file);
        let top = top_of(&here);
        let Some(layer) = layer_of(top) else {
            broken.push(format!(
                "{krate}/src/{}: {top} is in no layer: place it in xtask/src/layout.rs's LAYERS",
                file.display()
            ));
            continue;
        };
        let (code, tests) = split_tests(text);
        for (line, path, in_tests) in imports(code)
            .into_iter()
            .map(|(l, p)| (l, p, false))
            .chain(imports(tests).into_iter().map(|(l, p)| (l + line_count(code), p, true)))
        {
            // A file's tests are its module `tests`: their `super` is the file.
            let from =
                if in_tests { [&here[..], &["tests".to_owned()]].concat() } else { here.clone() };
            let target = resolve(&from, &path, &modules);
            let Some(to) = target.map(top_of).or_else(|| other_crate_folder(&path)) else {
                continue;
            };
            if to != top
                && let Some(to_layer) = layer_of(to)
                && to_layer >= layer
            {
                let how = if to_layer == layer { "beside it in its layer" } else { "above it" };
                broken.push(format!(
                    "{krate}/src/{}:{line}: {path}: {top} imports {to}, which is {how} \
                     (xtask/src/layout.rs's LAYERS)",
                    file.display()
                ));
            }
            if let Some(target) = target
                && !in_tests
                && target != here.as_slice()
                && !target.is_empty()
            {
                graph.entry(file).or_default().insert(modules[target]);
            }
        }
    }
    for circle in circles(&graph) {
        let names: Vec<String> = circle.iter().map(|f| f.display().to_string()).collect();
        broken.push(format!(
            "these files of {krate} import each other in a circle: {}",
            names.join(", ")
        ));
    }
    broken
}

/// The module a file of a crate's src is: `run/start.rs` is `run::start`, `run/mod.rs` is `run`,
/// `main.rs` and `lib.rs` the crate's root (no segment).
fn module_of(file: &Path) -> Vec<String> {
    let mut segments: Vec<String> =
        file.with_extension("").iter().map(|s| s.to_string_lossy().into_owned()).collect();
    if segments.last().is_some_and(|s| s == "mod") || segments == ["main"] || segments == ["lib"] {
        segments.pop();
    }
    segments
}

/// The top-level module a module is in (`main` for the crate's root).
fn top_of(module: &[String]) -> &str {
    module.first().map_or("main", String::as_str)
}

/// The layer of top-level module `top`: its index in [`LAYERS`].
fn layer_of(top: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&top))
}

/// `text` cut before its unit tests: the first module under `#[cfg(test)]`, which runs to the end
/// of the file.
fn split_tests(text: &str) -> (&str, &str) {
    let tests = text.match_indices("#[cfg(test)]\n").map(|(at, _)| at).find(|&at| {
        let next = text[at..].lines().nth(1).unwrap_or_default();
        next.trim_start_matches("pub(crate) ").trim_start_matches("pub ").starts_with("mod ")
    });
    tests.map_or((text, ""), |at| text.split_at(at))
}

fn line_count(text: &str) -> usize {
    text.matches('\n').count()
}

/// The module `path` (a path from `crate`, `super` or `self`, read in module `here`) names, as
/// the longest of its prefixes that is a file's module; `None` for a path out of the crate.
fn resolve<'a>(
    here: &[String],
    path: &str,
    modules: &'a BTreeMap<Vec<String>, &Path>,
) -> Option<&'a [String]> {
    let mut segments = path.split("::").peekable();
    let mut full: Vec<String> = match segments.next()? {
        "crate" => Vec::new(),
        "self" => here.to_vec(),
        "super" => {
            let mut up = here[..here.len().checked_sub(1)?].to_vec();
            while segments.next_if_eq(&"super").is_some() {
                up.pop()?;
            }
            up
        }
        _ => return None,
    };
    full.extend(segments.filter(|s| *s != "self").map(str::to_owned));
    (0..=full.len())
        .rev()
        .find_map(|n| modules.get_key_value(&full[..n]).map(|(k, _)| k.as_slice()))
}

/// The `crate::`, `super::` and `self::` paths `text` uses, comments left out: (line, path),
/// lines counted from 1. A `use` tree gives one path per leaf.
fn imports(text: &str) -> Vec<(usize, String)> {
    let code: String = text
        .lines()
        .map(|line| line.split_once("//").map_or(line, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = Vec::new();
    let mut rest = code.as_str();
    let mut offset = 0;
    while let Some(at) = find_word(rest, &["use", "crate", "super", "self"]) {
        let line = line_count(&code[..offset + at]) + 1;
        let word = &rest[at..];
        let tree = word.strip_prefix("use").filter(|t| t.starts_with(char::is_whitespace));
        let taken = if let Some(tree) = tree.filter(|t| is_ours(t.trim_start())) {
            let end = tree.find(';').unwrap_or(tree.len());
            let tree = tree[..end].split_whitespace().collect::<Vec<_>>().join(" ");
            found.extend(leaves(&tree).into_iter().map(|leaf| (line, leaf)));
            "use".len() + end
        } else if tree.is_some() {
            "use".len()
        } else {
            let end = word
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(word.len());
            let path = word[..end].trim_end_matches(':');
            if path.contains("::") {
                found.push((line, path.to_owned()));
            }
            end.max(1)
        };
        offset += at + taken;
        rest = &code[offset..];
    }
    found.retain(|(_, path)| is_ours(path));
    found
}

/// Whether `path` starts in exitprof's crates: from `crate`, `super` or `self`, or from the
/// library or the engine by name.
fn is_ours(path: &str) -> bool {
    let root = path.split(|c: char| !(c.is_alphanumeric() || c == '_')).next();
    root.is_some_and(|root| ["crate", "super", "self"].contains(&root) || LIBRARIES.contains(&root))
}

/// The folder of another crate of exitprof's that `path` names through the crate
/// (`exitprof_core::analysis::..`), when it is one in [`LAYERS`].
fn other_crate_folder(path: &str) -> Option<&str> {
    let mut segments = path.split("::");
    let root = segments.next()?;
    let folder = segments.next()?;
    (LIBRARIES.contains(&root) && layer_of(folder).is_some()).then_some(folder)
}

/// Where in `text` the first of `words` begins as a word of its own (not part of an identifier
/// or a longer path).
fn find_word(text: &str, words: &[&str]) -> Option<usize> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = 0;
    while from < text.len() {
        let at = from + text[from..].find(|c: char| ident(c))?;
        let end = text[at..].find(|c: char| !ident(c)).map_or(text.len(), |n| at + n);
        let before = text[..at].chars().next_back();
        if words.contains(&&text[at..end]) && !before.is_some_and(|c| c == ':' || c == '#') {
            return Some(at);
        }
        from = end;
    }
    None
}

/// The paths of a `use` tree (`crate::{a, b::{c, d as e}}`): one per leaf, `as` renamings
/// left out.
fn leaves(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree);
        return vec![path.trim().trim_end_matches("::").to_owned()];
    };
    let prefix = tree[..open].trim().trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|item| !item.trim().is_empty())
        .flat_map(leaves)
        .map(|leaf| if prefix.is_empty() { leaf } else { format!("{prefix}::{leaf}") })
        .collect()
}

/// The circles of `graph` (file -> the files it imports): its strongly connected components of
/// more than one file (Tarjan's algorithm), each sorted.
fn circles<'a>(graph: &BTreeMap<&'a Path, BTreeSet<&'a Path>>) -> Vec<Vec<&'a Path>> {
    struct Walk<'g, 'a> {
        graph: &'g BTreeMap<&'a Path, BTreeSet<&'a Path>>,
        index: BTreeMap<&'a Path, usize>,
        low: BTreeMap<&'a Path, usize>,
        stack: Vec<&'a Path>,
        circles: Vec<Vec<&'a Path>>,
    }
    impl<'a> Walk<'_, 'a> {
        fn visit(&mut self, file: &'a Path) {
            let n = self.index.len();
            self.index.insert(file, n);
            self.low.insert(file, n);
            self.stack.push(file);
            for &next in self.graph.get(file).into_iter().flatten() {
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[file].min(self.low[next]);
                    self.low.insert(file, low);
                } else if self.stack.contains(&next) {
                    let low = self.low[file].min(self.index[next]);
                    self.low.insert(file, low);
                }
            }
            if self.low[file] == self.index[file] {
                let at = self.stack.iter().rposition(|&f| f == file).unwrap_or(0);
                let mut component = self.stack.split_off(at);
                if component.len() > 1 {
                    component.sort();
                    self.circles.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        circles: Vec::new(),
    };
    for &file in graph.keys() {
        if !walk.index.contains_key(file) {
            walk.visit(file);
        }
    }
    walk.circles
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree of files from (path, text) pairs.
    fn tree(files: &[(&str, &str)]) -> BTreeMap<PathBuf, String> {
        files.iter().map(|(path, text)| (PathBuf::from(path), (*text).to_owned())).collect()
    }

    #[test]
    fn use_trees_and_inline_paths_are_imports_and_comments_are_not() {
        let text = "\
use std::fmt;
use super::{
    load::{self, Probes},
    maps::RingBuf as Ring,
};
pub(crate) use crate::run::RunOutcome;
/// Read by [`crate::report::terminal`].
let x = crate::kernel::arch::NAME; // crate::diff::f()
let y = my_crate::z; Self::new(); self.crate_name;
";
        let found = imports(text);
        assert_eq!(
            found,
            [
                (2, "super::load::self".to_owned()),
                (2, "super::load::Probes".to_owned()),
                (2, "super::maps::RingBuf".to_owned()),
                (6, "crate::run::RunOutcome".to_owned()),
                (8, "crate::kernel::arch::NAME".to_owned()),
            ]
        );
    }

    #[test]
    fn paths_name_the_longest_module_they_go_through() {
        let modules: BTreeMap<Vec<String>, &Path> =
            ["main.rs", "run/mod.rs", "run/record/mod.rs", "run/record/view.rs", "kernel/mod.rs"]
                .iter()
                .map(|f| (module_of(Path::new(f)), Path::new(*f)))
                .collect();
        let here = module_of(Path::new("run/record/view.rs"));
        let resolved = |path| resolve(&here, path, &modules).map(|m| m.join("::"));
        assert_eq!(resolved("super::Recorder"), Some("run::record".to_owned()));
        assert_eq!(resolved("super::super::RunOutcome"), Some("run".to_owned()));
        assert_eq!(
            resolved("crate::run::record::view::self"),
            Some("run::record::view".to_owned())
        );
        assert_eq!(resolved("crate::kernel::arch::NAME"), Some("kernel".to_owned()));
        assert_eq!(resolved("self::Shown"), Some("run::record::view".to_owned()));
    }

    #[test]
    fn an_import_up_a_layer_or_across_one_is_a_breach() {
        let files = tree(&[
            ("main.rs", "mod probes;\nmod run;\nmod report;\nmod conditions;\nmod profiled;\n"),
            ("probes/mod.rs", "use crate::run::own_cost::enable_bpf_stats;\n"),
            ("run/mod.rs", "pub struct RunOutcome;\n"),
            ("report/mod.rs", "use crate::run::RunOutcome;\n"),
            ("conditions/mod.rs", "fn f() { crate::profiled::storm(); }\n"),
            ("profiled/mod.rs", "pub fn storm() {}\n"),
        ]);
        let broken = breaches("exitprof", &files);
        assert_eq!(broken.len(), 2, "{broken:#?}");
        assert!(broken[0].starts_with(
            "exitprof/src/conditions/mod.rs:1: crate::profiled::storm: conditions imports \
             profiled, which is beside it in its layer"
        ));
        assert!(broken[1].starts_with(
            "exitprof/src/probes/mod.rs:1: crate::run::own_cost::enable_bpf_stats: probes \
             imports run, which is above it"
        ));
    }

    #[test]
    fn files_that_import_each_other_in_a_circle_are_a_breach_but_their_tests_are_not() {
        let files = tree(&[
            ("diff/mod.rs", "mod document;\nmod verdict;\nmod text;\n"),
            ("diff/document.rs", "use super::verdict::verdict;\n"),
            ("diff/verdict.rs", "use super::text::percent;\n"),
            ("diff/text.rs", "use super::document::Doc;\n"),
            ("run/mod.rs", "mod start;\npub use self::start::Started;\n"),
            ("run/start.rs", "fn f() {}\n#[cfg(test)]\nmod tests {\n    use super::super::*;\n}\n"),
        ]);
        let broken = breaches("exitprof", &files);
        assert_eq!(
            broken,
            ["these files of exitprof import each other in a circle: diff/document.rs, \
              diff/text.rs, diff/verdict.rs"]
        );
    }

    #[test]
    fn a_folder_in_no_layer_is_a_breach() {
        let files =
            tree(&[("widgets/mod.rs", "fn f() {}\n"), ("cli/mod.rs", "use clap::Parser;\n")]);
        let broken = breaches("exitprof", &files);
        assert_eq!(
            broken,
            ["exitprof/src/widgets/mod.rs: widgets is in no layer: place it in \
                             xtask/src/layout.rs's LAYERS"]
        );
    }

    #[test]
    fn a_folder_of_another_crate_is_in_its_layer() {
        let files = tree(&[
            ("lib.rs", "pub mod probes;\n"),
            (
                "probes/mod.rs",
                "use exitprof_core::report::fmt_ns;\nuse exitprof_core::export::Format;\n",
            ),
            ("probes/load.rs", "use exitprof_core::kernel::kallsyms::Kallsyms;\n"),
        ]);
        let broken = breaches("exitprof-engine", &files);
        assert_eq!(broken.len(), 2, "{broken:#?}");
        assert!(broken[0].starts_with(
            "exitprof-engine/src/probes/mod.rs:1: exitprof_core::report::fmt_ns: probes imports \
             report"
        ));
        assert!(broken[1].starts_with(
            "exitprof-engine/src/probes/mod.rs:2: exitprof_core::export::Format: probes imports \
             export"
        ));
    }

    #[test]
    fn a_forbidden_dependency_is_a_breach_at_the_depth_it_is_forbidden() {
        // The library derives serde's traits: serde is a direct dependency of its, serde_derive
        // one of serde's.
        let rules: &[Forbidden] = &[
            ("exitprof-core", &["serde", "aya"], Reach::Direct, "planted"),
            ("exitprof-core", &["serde_derive"], Reach::Direct, "planted"),
            ("exitprof-core", &["serde_derive"], Reach::Any, "planted"),
        ];
        assert_eq!(
            dependencies(rules).unwrap(),
            [
                "exitprof-core depends on serde: planted",
                "exitprof-core depends on serde_derive: planted"
            ]
        );
    }

    #[test]
    fn the_crates_keep_the_rules() {
        check().unwrap();
    }
}
