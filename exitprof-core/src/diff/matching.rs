//! Matching stages across runs that cut the exit differently (another kernel, another attach
//! mode, renamed functions, moved probe points): by the kernel code each stage covers, at the
//! finest cut both sides share.
//!
//! A stage whose covered code is exactly that of a stage of the other side is its match. The
//! others are merged on each side into groups that cover the same code as a group of the other
//! side: stages that share a covered function belong together. What one side covers and the other
//! does not (a function the other kernel lacks or names otherwise) stays in the group that has
//! it, and the group says so. A stage only one side's runs have, whose code the other side
//! covers too, is a path the other side's exits did not take: its own row, none on that side.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::document::run::RunDocument;

/// Stages of both sides that cover the same kernel code: one row of the diff.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Group {
    pub name: String,
    /// Side A's stages in the group, in kernel order (empty when no exit of A's runs took a
    /// path B's exits took).
    pub a_stages: Vec<String>,
    pub b_stages: Vec<String>,
    /// The kernel code the group covers: A's, in kernel order, then what only B covers.
    pub covers: Vec<String>,
    /// Code one side's stages in the group cover and the other's do not (for a group of one
    /// side's stages: code no stage of the other side covers).
    pub only_a: Vec<String>,
    pub only_b: Vec<String>,
}

impl Group {
    /// Both sides measure this group with one stage: its latency figures compare as they are.
    pub fn is_one_stage(&self) -> bool {
        self.a_stages.len() == 1 && self.b_stages.len() == 1
    }

    /// The sides cut this part of the exit alike: the same stages (or a path only one side's
    /// exits took), covering the same code.
    pub fn is_same_cut(&self) -> bool {
        let one_side = self.a_stages.is_empty() || self.b_stages.is_empty();
        (one_side || self.a_stages == self.b_stages)
            && self.only_a.is_empty()
            && self.only_b.is_empty()
    }
}

/// A stage as the matching sees it.
struct Stage {
    name: String,
    covers: Vec<String>,
}

impl Stage {
    /// What it covers; a stage that names no code is known by its name alone.
    fn key(&self) -> BTreeSet<&str> {
        if self.covers.is_empty() {
            BTreeSet::from([self.name.as_str()])
        } else {
            self.covers.iter().map(String::as_str).collect()
        }
    }
}

/// The groups of the two sides' stages (the whole exit left out), in kernel order.
pub fn match_stages(a: &[RunDocument], b: &[RunDocument]) -> Vec<Group> {
    let (a, b) = (side_stages(a), side_stages(b));
    // Nodes: A's stages, then B's; linked when they belong in one group.
    let mut sets = DisjointSets::new(a.len() + b.len());
    let exact: Vec<Option<usize>> =
        a.iter().map(|s| b.iter().position(|t| t.key() == s.key())).collect();
    let matched_b: Vec<usize> = exact.iter().flatten().copied().collect();
    for (i, j) in exact.iter().enumerate().filter_map(|(i, j)| Some((i, (*j)?))) {
        sets.join(i, a.len() + j);
    }
    let rest_a: Vec<usize> = (0..a.len()).filter(|i| exact[*i].is_none()).collect();
    let rest_b: Vec<usize> = (0..b.len()).filter(|j| !matched_b.contains(j)).collect();
    let rest: Vec<(usize, BTreeSet<&str>)> = rest_a
        .iter()
        .map(|&i| (i, a[i].key()))
        .chain(rest_b.iter().map(|&j| (a.len() + j, b[j].key())))
        .collect();
    for (n, (x, x_key)) in rest.iter().enumerate() {
        for (y, y_key) in &rest[n + 1..] {
            if !x_key.is_disjoint(y_key) {
                sets.join(*x, *y);
            }
        }
    }
    // Groups in kernel order: A's order, each of B's alone after the one before it in B's.
    let mut roots: Vec<(f64, usize)> = Vec::new();
    for i in 0..a.len() {
        let root = sets.root(i);
        if !roots.iter().any(|&(_, r)| r == root) {
            roots.push((i as f64, root));
        }
    }
    let mut after = -1.0;
    for j in 0..b.len() {
        let root = sets.root(a.len() + j);
        match roots.iter().find(|&&(_, r)| r == root) {
            Some(&(place, _)) => after = f64::max(after, place),
            None => roots.push((after + 0.5 + j as f64 / 1e6, root)),
        }
    }
    roots.sort_by(|x, y| x.0.total_cmp(&y.0));
    roots
        .into_iter()
        .map(|(_, root)| {
            group(&sets.members(root, &a, 0), &sets.members(root, &b, a.len()), &a, &b)
        })
        .collect()
}

/// The group of `a`'s and `b`'s stages, of all the sides' stages `all_a` and `all_b`.
fn group(a: &[&Stage], b: &[&Stage], all_a: &[Stage], all_b: &[Stage]) -> Group {
    let code = |stages: &mut dyn Iterator<Item = &Stage>| -> Vec<String> {
        let mut covers: Vec<String> = Vec::new();
        for c in stages.flat_map(|s| &s.covers) {
            if !covers.contains(c) {
                covers.push(c.clone());
            }
        }
        covers
    };
    let (a_code, b_code) = (code(&mut a.iter().copied()), code(&mut b.iter().copied()));
    // What the other side's stages of the group cover; all it covers where it has none here.
    let theirs = |other: &[&Stage], all_other: &[Stage]| {
        if other.is_empty() {
            code(&mut all_other.iter())
        } else {
            code(&mut other.iter().copied())
        }
    };
    let only = |mine: &[String], theirs: &[String]| -> Vec<String> {
        mine.iter().filter(|c| !theirs.contains(c)).cloned().collect()
    };
    let only_a = only(&a_code, &theirs(b, all_b));
    let only_b = only(&b_code, &theirs(a, all_a));
    let names = |stages: &[&Stage]| stages.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    let (a_stages, b_stages) = (names(a), names(b));
    // Named after the code it covers as A's kernel has it (B's, where only B has it).
    let named_by = if a.is_empty() { &b_code } else { &a_code };
    let name = match (a_stages.as_slice(), b_stages.as_slice(), named_by.as_slice()) {
        ([x], [y], _) if x == y => x.clone(),
        ([x], [], _) | ([], [x], _) => x.clone(),
        (_, _, []) => a_stages.iter().chain(&b_stages).cloned().collect::<Vec<_>>().join(" + "),
        (_, _, [one]) => one.clone(),
        (_, _, [first, second]) => format!("{first}+{second}"),
        (_, _, [first, .., last]) => format!("{first}…{last}"),
    };
    let mut covers = a_code;
    covers.extend(only_b.iter().cloned());
    Group { name, a_stages, b_stages, covers, only_a, only_b }
}

/// Every stage of a side's runs, each once, in kernel order: a stage that only some runs have
/// goes after the stage before it in the first run that has it.
fn side_stages(docs: &[RunDocument]) -> Vec<Stage> {
    let mut stages: Vec<Stage> = Vec::new();
    for doc in docs {
        let mut at = 0;
        for s in doc.parts() {
            match stages.iter().position(|known| known.name == s.name) {
                Some(i) => at = i + 1,
                None => {
                    stages.insert(at, Stage { name: s.name.clone(), covers: s.covers.clone() });
                    at += 1;
                }
            }
        }
    }
    stages
}

/// Union-find over node indices.
struct DisjointSets(Vec<usize>);

impl DisjointSets {
    fn new(n: usize) -> Self {
        Self((0..n).collect())
    }

    fn root(&self, mut x: usize) -> usize {
        while self.0[x] != x {
            x = self.0[x];
        }
        x
    }

    /// The stages of `side` (its nodes start at `offset`) in the set of `root`.
    fn members<'s>(&self, root: usize, side: &'s [Stage], offset: usize) -> Vec<&'s Stage> {
        side.iter()
            .enumerate()
            .filter(|&(k, _)| self.root(offset + k) == root)
            .map(|(_, s)| s)
            .collect()
    }

    fn join(&mut self, x: usize, y: usize) {
        let (x, y) = (self.root(x), self.root(y));
        // The lower index leads: groups take their place from their first stage.
        self.0[x.max(y)] = x.min(y);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::input::tests::{document, view};

    fn side(stages: &[(&str, &[&str], f64)]) -> Vec<RunDocument> {
        vec![view(&document(10, stages))]
    }

    fn summary(groups: &[Group]) -> Vec<(String, Vec<String>, Vec<String>)> {
        groups.iter().map(|g| (g.name.clone(), g.a_stages.clone(), g.b_stages.clone())).collect()
    }

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|&w| w.to_owned()).collect()
    }

    #[test]
    fn the_same_cut_matches_stage_by_stage() {
        let stages: [(&str, &[&str], f64); 3] = [
            ("do_exit…taskstats_exit", &["do_exit", "exit_signals", "taskstats_exit"], 1.0),
            ("exit_mm", &["exit_mm"], 1.0),
            ("exit_files…__schedule", &["exit_files", "exit_notify", "__schedule"], 1.0),
        ];
        let groups = match_stages(&side(&stages), &side(&stages));
        assert_eq!(groups.len(), 3);
        assert!(groups.iter().all(|g| g.is_same_cut() && g.is_one_stage()), "{groups:?}");
        assert_eq!(groups[1].name, "exit_mm");
    }

    #[test]
    fn different_cuts_meet_at_the_finest_cut_both_share() {
        // A (kprobes) has exit_mm and exit_files as stages of their own; B (tracepoints only)
        // cuts the same code into two gaps at another place.
        let a = side(&[
            ("do_exit…exit_itimers", &["do_exit", "exit_signals", "exit_itimers"], 1.0),
            ("exit_mm", &["exit_mm"], 1.0),
            ("acct_process+exit_sem", &["acct_process", "exit_sem"], 1.0),
            ("exit_files", &["exit_files"], 1.0),
            ("exit_notify…__schedule", &["exit_notify", "__schedule"], 1.0),
        ]);
        let b = side(&[
            ("do_exit…exit_mm", &["do_exit", "exit_signals", "exit_itimers", "exit_mm"], 1.0),
            ("acct_process…exit_files", &["acct_process", "exit_sem", "exit_files"], 1.0),
            ("exit_notify…__schedule", &["exit_notify", "__schedule"], 1.0),
        ]);
        let groups = match_stages(&a, &b);
        assert_eq!(
            summary(&groups),
            [
                (
                    "do_exit…exit_mm".to_owned(),
                    strings(&["do_exit…exit_itimers", "exit_mm"]),
                    strings(&["do_exit…exit_mm"])
                ),
                (
                    "acct_process…exit_files".to_owned(),
                    strings(&["acct_process+exit_sem", "exit_files"]),
                    strings(&["acct_process…exit_files"])
                ),
                (
                    "exit_notify…__schedule".to_owned(),
                    strings(&["exit_notify…__schedule"]),
                    strings(&["exit_notify…__schedule"])
                ),
            ]
        );
        assert!(groups[..2].iter().all(|g| !g.is_same_cut() && !g.is_one_stage()));
        assert!(groups[0].only_a.is_empty() && groups[0].only_b.is_empty());
        assert!(groups[2].is_same_cut());
    }

    #[test]
    fn cuts_that_overlap_merge_into_one_group() {
        // A cuts after b, B after c: neither cut is the other's, so a..d is one group.
        let a = side(&[("a+b", &["a", "b"], 1.0), ("c+d", &["c", "d"], 1.0)]);
        let b = side(&[("a…c", &["a", "b", "c"], 1.0), ("d", &["d"], 1.0)]);
        let groups = match_stages(&a, &b);
        assert_eq!(
            summary(&groups),
            [("a…d".to_owned(), strings(&["a+b", "c+d"]), strings(&["a…c", "d"]))]
        );
    }

    #[test]
    fn renamed_and_missing_code_is_named_on_its_side() {
        // B's kernel renamed exit_itimers and lacks acct_collect; a stage only A has (a
        // variant's gap with no code known) has no counterpart.
        let a = side(&[
            ("do_exit…acct_collect", &["do_exit", "exit_itimers", "acct_collect"], 1.0),
            ("exit_mm", &["exit_mm"], 1.0),
            ("sys_enter_exit→do_exit", &[], 1.0),
        ]);
        let b = side(&[
            ("do_exit+exit_timers", &["do_exit", "exit_timers"], 1.0),
            ("exit_mm", &["exit_mm"], 1.0),
        ]);
        let groups = match_stages(&a, &b);
        let first = &groups[0];
        assert_eq!(first.name, "do_exit…acct_collect");
        assert_eq!(
            (first.only_a.clone(), first.only_b.clone()),
            (strings(&["exit_itimers", "acct_collect"]), strings(&["exit_timers"]))
        );
        assert!(first.is_one_stage() && !first.is_same_cut());
        assert!(groups[1].is_same_cut());
        let lone = &groups[2];
        assert_eq!(lone.name, "sys_enter_exit→do_exit");
        assert!(lone.b_stages.is_empty() && lone.only_a.is_empty(), "{lone:?}");
    }

    #[test]
    fn a_path_only_one_side_took_is_its_own_row_of_the_same_cut() {
        // Some of A's exits blocked on their way to __schedule, a path with a stage of its own
        // (its code is that of the stages around it); none of B's did.
        let a = side(&[
            ("a+b", &["a", "b"], 1.0),
            ("a…d", &["a", "b", "c", "d"], 1.0),
            ("c+d", &["c", "d"], 1.0),
        ]);
        let b = side(&[("a+b", &["a", "b"], 1.0), ("c+d", &["c", "d"], 1.0)]);
        let groups = match_stages(&a, &b);
        assert_eq!(summary(&groups)[1], ("a…d".to_owned(), strings(&["a…d"]), vec![]));
        assert!(groups.iter().all(Group::is_same_cut), "{groups:?}");
    }

    #[test]
    fn a_stage_only_some_runs_have_keeps_its_place() {
        let with = document(10, &[("a", &["a"], 1.0), ("v", &["v"], 1.0), ("z", &["z"], 1.0)]);
        let without = document(10, &[("a", &["a"], 1.0), ("z", &["z"], 1.0)]);
        let names: Vec<String> =
            side_stages(&[view(&without), view(&with)]).into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["a", "v", "z"]);
        let groups = match_stages(&[view(&without)], &[view(&with), view(&without)]);
        assert_eq!(summary(&groups)[1], ("v".to_owned(), vec![], strings(&["v"])));
    }
}
