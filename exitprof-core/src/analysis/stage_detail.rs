//! One stage in detail (`exitprof report --stage`): a gap between two probes says only how long
//! the kernel took between them; its on-CPU samples say in which functions it computed, and its
//! blocks where it waited.

use std::collections::HashMap;

use serde::Serialize;

use crate::analysis::{
    blocking::BlockedIn,
    histogram::Latency,
    on_cpu::{EXIT_FRAME, OnCpuIn, StageOnCpu},
    profile::StageRow,
};

/// One stage: its time on and off the CPU, the functions its samples fell in, and the stacks
/// it blocked in.
#[derive(Debug, Serialize)]
pub struct StageDetail {
    pub stage: String,
    /// What the kernel does in it.
    pub covers: Vec<String>,
    pub exits: u64,
    pub mean_ns: f64,
    pub share_of_exit: f64,
    /// Its time over all exits, on and off the CPU; off the CPU, runnable (preempted) or
    /// blocked.
    pub on_cpu_ns: u128,
    pub off_cpu_ns: u128,
    pub runnable_ns: u128,
    pub blocked_ns: u128,
    /// On-CPU samples taken in it.
    pub samples: u64,
    /// Every function its samples went through (`do_exit` left out), most samples first.
    pub functions: Vec<FunctionShare>,
    /// Every stack sampled in it, most samples first.
    pub stacks: Vec<OnCpuIn>,
    /// Where it blocked, most time first: its blocked time shared out by the blocks walked.
    pub blocked_in: Vec<BlockedIn>,
    /// Its blocked time when no block's stack was walked in it.
    pub blocked_unwalked_ns: u128,
}

/// A function the samples of a stage went through.
#[derive(Debug, PartialEq, Serialize)]
pub struct FunctionShare {
    pub function: String,
    /// Samples with it anywhere on their stack, and their share of the stage's samples.
    pub samples: u64,
    pub share: f64,
    /// Samples taken in its own code (it was the innermost frame), and their share.
    pub self_samples: u64,
    pub self_share: f64,
    /// The stage's on-CPU time times `share`.
    pub est_ns: f64,
}

/// The stage named `name`, or the one that covers the kernel function `name`, among `rows`;
/// `Err` says which stages there are.
pub fn find<'a>(rows: &'a [StageRow<'a>], name: &str) -> Result<&'a StageRow<'a>, String> {
    if let Some(row) = rows.iter().find(|r| r.stage.name == name) {
        return Ok(row);
    }
    let covering: Vec<&StageRow<'_>> =
        rows.iter().filter(|r| r.stage.covers.iter().any(|c| c == name)).collect();
    match covering.as_slice() {
        [row] => Ok(row),
        _ => {
            let names: Vec<&str> = rows.iter().map(|r| r.stage.name.as_str()).collect();
            let why = if covering.is_empty() {
                "no stage is named so or covers a function of that name"
            } else {
                "several stages cover it; name one"
            };
            Err(format!("{name:?}: {why} (the stages: {})", names.join(", ")))
        }
    }
}

impl StageDetail {
    /// `row`'s stage with its samples (`None`: it has none) and the run's blocked-in rows.
    pub fn of(row: &StageRow<'_>, samples: Option<&StageOnCpu>, blocked_in: &[BlockedIn]) -> Self {
        let name = &row.stage.name;
        let latency: &Latency = row.latency;
        let off_cpu_ns = latency.off_cpu_ns;
        let blocked_ns = off_cpu_ns.saturating_sub(latency.runq_ns);
        let on_cpu_ns = latency.total_ns.saturating_sub(off_cpu_ns);
        let blocked_in: Vec<BlockedIn> =
            blocked_in.iter().filter(|b| &b.stage == name).cloned().collect();
        let stacks = samples.map(|s| s.stacks.clone()).unwrap_or_default();
        let n = samples.map_or(0, |s| s.samples);
        Self {
            stage: name.clone(),
            covers: row.stage.covers.clone(),
            exits: latency.count(),
            mean_ns: latency.summary().mean_ns,
            share_of_exit: row.share_of_exit,
            on_cpu_ns,
            off_cpu_ns,
            runnable_ns: latency.runq_ns,
            blocked_ns,
            samples: n,
            functions: functions(&stacks, n, on_cpu_ns),
            stacks,
            blocked_unwalked_ns: if blocked_in.is_empty() { blocked_ns } else { 0 },
            blocked_in,
        }
    }
}

/// Each function on the sampled stacks, counted once per sample however often it recurs.
fn functions(stacks: &[OnCpuIn], samples: u64, on_cpu_ns: u128) -> Vec<FunctionShare> {
    let mut counts: HashMap<&str, (u64, u64)> = HashMap::new();
    for s in stacks {
        let mut seen: Vec<&str> = Vec::new();
        for (depth, frame) in s.stack.iter().enumerate() {
            if frame == EXIT_FRAME || seen.contains(&frame.as_str()) {
                continue;
            }
            seen.push(frame);
            let c = counts.entry(frame).or_default();
            c.0 += s.samples;
            if depth == 0 {
                c.1 += s.samples;
            }
        }
    }
    let of = |n: u64| if samples == 0 { 0.0 } else { n as f64 / samples as f64 };
    let mut rows: Vec<FunctionShare> = counts
        .into_iter()
        .map(|(function, (n, own))| FunctionShare {
            function: function.to_owned(),
            samples: n,
            share: of(n),
            self_samples: own,
            self_share: of(own),
            est_ns: of(n) * on_cpu_ns as f64,
        })
        .collect();
    rows.sort_by(|a, b| {
        (b.samples, b.self_samples)
            .cmp(&(a.samples, a.self_samples))
            .then(a.function.cmp(&b.function))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stages::Stage;

    fn stage(name: &str, covers: &[&str]) -> Stage {
        Stage {
            name: name.to_owned(),
            covers: covers.iter().map(|&c| c.to_owned()).collect(),
            waits_inline: Vec::new(),
            order: (0, 0),
        }
    }

    /// 4 exits of 100 µs in the stage, 30 µs of each off the CPU, 10 µs of that runnable.
    fn latency() -> Latency {
        let mut l = Latency::default();
        for _ in 0..4 {
            l.record_waits(100_000, 30_000, 10_000);
        }
        l
    }

    fn sampled(stack: &[&str], samples: u64) -> OnCpuIn {
        let stack = stack.iter().map(|&f| f.to_owned()).collect();
        OnCpuIn { stack, samples, share: 0.0, est_ns: 0.0 }
    }

    fn blocked(stage: &str, frame: &str, est_ns: f64) -> BlockedIn {
        let stack = vec![frame.to_owned(), EXIT_FRAME.to_owned()];
        BlockedIn { stage: stage.to_owned(), stack, blocks: 1, walked_ns: 1, est_ns, share: 0.5 }
    }

    #[test]
    fn a_stage_is_found_by_its_name_or_a_function_it_covers() {
        let (mm, files) = (stage("a…b", &["exit_mm", "exit_sem"]), stage("c…d", &["exit_files"]));
        let twice = stage("e…f", &["exit_mm"]);
        let l = latency();
        let row = |stage| StageRow { stage, latency: &l, share_of_exit: 0.5 };
        let rows = [row(&mm), row(&files)];
        assert_eq!(find(&rows, "a…b").unwrap().stage.name, "a…b");
        assert_eq!(find(&rows, "exit_files").unwrap().stage.name, "c…d");
        let name = |found: Result<&StageRow<'_>, String>| found.map(|r| r.stage.name.clone());
        let unknown = name(find(&rows, "exit_fs")).unwrap_err();
        assert!(unknown.contains("no stage") && unknown.contains("a…b, c…d"), "{unknown}");
        let rows = [row(&mm), row(&twice)];
        assert!(name(find(&rows, "exit_mm")).unwrap_err().contains("several stages"));
    }

    #[test]
    fn samples_are_split_by_the_functions_they_fell_in() {
        let s = stage("a…b", &["exit_mm"]);
        let l = latency();
        let row = StageRow { stage: &s, latency: &l, share_of_exit: 0.25 };
        let samples = StageOnCpu {
            stage: "a…b".to_owned(),
            samples: 10,
            on_cpu_ns: 280_000,
            mostly_in: None,
            stacks: vec![
                sampled(&["zap_pte_range", "unmap_vmas", "exit_mmap", EXIT_FRAME], 6),
                sampled(&["free_pgtables", "exit_mmap", EXIT_FRAME], 3),
                // Recursion counts once per sample.
                sampled(&["kfree", "kfree", EXIT_FRAME], 1),
            ],
        };
        let blocks = [blocked("a…b", "mutex_lock", 5_000.0), blocked("other", "x", 1.0)];
        let d = StageDetail::of(&row, Some(&samples), &blocks);
        assert_eq!((d.exits, d.samples, d.share_of_exit), (4, 10, 0.25));
        assert_eq!(
            (d.on_cpu_ns, d.off_cpu_ns, d.runnable_ns, d.blocked_ns),
            (280_000, 120_000, 40_000, 80_000)
        );
        let functions: Vec<(&str, u64, u64)> =
            d.functions.iter().map(|f| (f.function.as_str(), f.samples, f.self_samples)).collect();
        assert_eq!(
            functions,
            [
                ("exit_mmap", 9, 0),
                ("zap_pte_range", 6, 6),
                ("unmap_vmas", 6, 0),
                ("free_pgtables", 3, 3),
                ("kfree", 1, 1)
            ]
        );
        let mmap = &d.functions[0];
        assert!((mmap.share - 0.9).abs() < 1e-12 && (mmap.est_ns - 252_000.0).abs() < 1e-6);
        assert_eq!(d.blocked_in.len(), 1, "only the stage's own blocks");
        assert_eq!(d.blocked_unwalked_ns, 0);

        let none = StageDetail::of(&row, None, &[]);
        assert!(none.functions.is_empty() && none.stacks.is_empty());
        assert_eq!(none.blocked_unwalked_ns, 80_000, "no block walked: all of it unwalked");
    }
}
