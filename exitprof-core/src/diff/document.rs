//! The diff itself, as a document: each row's figures on both sides and their changes, the
//! stacks whose time changed most, and the verdict (`--json` prints it as it is).

use std::collections::HashMap;

use exitprof_common::counters;
use serde::Serialize;

use super::{
    matching::{Group, match_stages},
    noise::{
        CONFIDENCE, Change, FEW_RUNS_FACTOR, FEW_RUNS_FLOOR, Figure, RUNS_FOR_AN_INTERVAL,
        row_level,
    },
};
use crate::{
    analysis::{
        on_cpu::{EXIT_FRAME, heaviest_chain},
        teardown::TeardownReport,
    },
    document::run::{RunDocument, StageDoc},
};

/// Stacks listed per kind, those whose time per exit changed most.
pub const STACKS_SHOWN: usize = 5;

/// The `diff --json` document.
#[derive(Debug, Serialize)]
pub struct DiffDocument {
    /// The baseline.
    pub a: SideDoc,
    pub b: SideDoc,
    pub noise: NoiseDoc,
    /// Both sides cut the exit alike: each row is the same stage on both.
    pub same_cut: bool,
    /// The whole exit (named `exit`) first, then each group of stages in kernel order (a
    /// group of one side's stages only: none of the other side's exits were there).
    pub rows: Vec<RowDoc>,
    /// Blocked-in and on-CPU stacks whose time per exit changed most, by row.
    pub blocked_in: Vec<StackChange>,
    pub on_cpu_in: Vec<StackChange>,
    /// Every stack of each kind, for the differential flame graph.
    #[serde(skip)]
    pub every_on_cpu: Vec<StackChange>,
    #[serde(skip)]
    pub every_blocked: Vec<StackChange>,
    /// The code whose time moved, for each row the verdict names (largest change first).
    pub moved_code: Vec<MovedCode>,
    /// Each kind of namespace teardown that some run of either side joined to an exit,
    /// matched by kind across the sides (their kernels' work functions may differ within).
    pub teardowns: Vec<TeardownChange>,
    /// Some row's time per exit changed beyond run-to-run noise.
    pub changed: bool,
    /// What makes the comparison less than fair (a side that lost many of its exits, sides
    /// that lost at different rates), in words.
    pub warnings: Vec<String>,
    pub verdict: String,
}

/// Where a row's change lies in the kernel's code.
#[derive(Debug, Serialize)]
pub struct MovedCode {
    pub row: String,
    /// The kernel code the row covers: what lies between its probe points.
    pub covers: Vec<String>,
    /// The chain of calls most of the row's change of on-CPU time goes through, weighed by each
    /// sampled stack's change; `null` where the samples do not lead one way.
    pub on_cpu: Option<ChainChange>,
    /// The stack whose blocked time changed most in the row the way the row's off-CPU time did.
    pub blocked: Option<ChainChange>,
}

/// A chain of calls and the change of time per exit of the stacks through it.
#[derive(Debug, Serialize)]
pub struct ChainChange {
    /// Innermost first.
    pub frames: Vec<String>,
    pub delta_ns_per_exit: f64,
    /// Of the change of the row's stacks of this kind that went the same way.
    pub share: f64,
}

/// One side's runs.
#[derive(Debug, Serialize)]
pub struct SideDoc {
    pub files: Vec<String>,
    /// Each distinct kernel, attach mode and workload of its runs.
    pub kernels: Vec<String>,
    pub attach: Vec<String>,
    pub workloads: Vec<String>,
    /// Exits recorded, per run.
    pub exits: Vec<u64>,
    /// Exits lost, per run (all causes), and of them those lost to a full ring buffer.
    pub lost: Vec<u64>,
    pub lost_ringbuf_full: Vec<u64>,
    /// Of all the exits its runs saw, the part they lost.
    pub loss_rate: f64,
    /// Some run was cut short.
    pub partial: bool,
}

/// How changes were told from run-to-run noise.
#[derive(Debug, Serialize)]
pub struct NoiseDoc {
    pub runs_a: usize,
    pub runs_b: usize,
    /// `interval`: Welch's t over the runs (3 or more a side); `factor`: fewer runs, beyond
    /// noise only past `factor` either way and by `floor` of the whole exit's figure or more.
    pub method: &'static str,
    /// Of the intervals of a column, all rows together; `row_level` is each one's.
    pub confidence: f64,
    pub row_level: f64,
    pub factor: f64,
    pub floor: f64,
}

/// A group of stages (or the whole exit) on both sides.
#[derive(Debug, Serialize)]
pub struct RowDoc {
    #[serde(flatten)]
    pub group: Group,
    /// Time spent in it per exit (all exits, also those that did not pass through it).
    pub ns_per_exit: Change,
    /// This row's part of the whole exit's change of time per exit.
    pub share_of_change: Option<f64>,
    pub on_cpu_ns_per_exit: Change,
    pub off_cpu_ns_per_exit: Change,
    /// Of the exits through it, where it is one stage on each side (a merged group's
    /// percentiles cannot be had from its stages'): `null` otherwise.
    pub mean_ns: Option<Change>,
    pub p50_ns: Option<Change>,
    pub p99_ns: Option<Change>,
}

/// A kernel stack's time per exit on both sides (means over each side's runs; a run that does
/// not list it counts as none, so stacks near the end of a run's list are uncertain).
#[derive(Clone, Debug, Serialize)]
pub struct StackChange {
    pub row: String,
    /// Innermost frame first.
    pub stack: Vec<String>,
    pub a_ns_per_exit: f64,
    pub b_ns_per_exit: f64,
    pub delta_ns_per_exit: f64,
}

/// One kind of namespace teardown on both sides: each joined namespace's teardown (its share of
/// its run), the wait from its exit's end to its start (means over each side's runs of their
/// means), and the shares of its time blocked and on a CPU. `null` where a side joined none.
#[derive(Debug, Serialize)]
pub struct TeardownChange {
    /// `net`, `user`.
    pub kind: &'static str,
    /// `network namespace teardown (cleanup_net)`.
    pub name: String,
    /// Teardowns joined, per run of each side.
    pub a_joined: Vec<u64>,
    pub b_joined: Vec<u64>,
    pub teardown_ns: Option<Change>,
    pub wait_ns: Option<Change>,
    pub blocked_share: Option<Change>,
    pub on_cpu_share: Option<Change>,
}

/// A row's figures in one run.
struct RunFigures {
    ns_per_exit: f64,
    off_cpu_ns_per_exit: f64,
    /// Mean, p50 and p99 of the exits through it, where it is one stage that this run has.
    latency: Option<[f64; 3]>,
}

impl DiffDocument {
    /// Sides `a` and `b` compared, the verdict left empty: [`DiffDocument::judged`] (in
    /// `verdict.rs`, which reads the document) writes it.
    pub fn new(a: &[(String, RunDocument)], b: &[(String, RunDocument)]) -> Self {
        let views = |side: &[(String, RunDocument)]| side.iter().map(|(_, v)| v.clone()).collect();
        let (a_runs, b_runs): (Vec<RunDocument>, Vec<RunDocument>) = (views(a), views(b));
        let groups = match_stages(&a_runs, &b_runs);
        let exit = Group {
            name: "exit".to_owned(),
            a_stages: vec!["exit".to_owned()],
            b_stages: vec!["exit".to_owned()],
            covers: Vec::new(),
            only_a: Vec::new(),
            only_b: Vec::new(),
        };
        let same_cut = groups.iter().all(Group::is_same_cut);
        let level = row_level(groups.len() + 1);
        let whole = row(exit, &a_runs, &b_runs, level, None);
        let mut rows: Vec<RowDoc> =
            groups.into_iter().map(|g| row(g, &a_runs, &b_runs, level, Some(&whole))).collect();
        rows.insert(0, whole);
        let exit_delta = rows[0].ns_per_exit.delta;
        for r in &mut rows {
            r.share_of_change = (exit_delta != 0.0).then(|| r.ns_per_exit.delta / exit_delta);
        }
        let noise = NoiseDoc {
            runs_a: a_runs.len(),
            runs_b: b_runs.len(),
            method: if a_runs.len().min(b_runs.len()) >= RUNS_FOR_AN_INTERVAL {
                "interval"
            } else {
                "factor"
            },
            confidence: CONFIDENCE,
            row_level: level,
            factor: FEW_RUNS_FACTOR,
            floor: FEW_RUNS_FLOOR,
        };
        let row_of = |side: Side, stage: &str| -> Option<String> {
            rows.iter()
                .find(|r| side.stages(&r.group).iter().any(|s| s == stage))
                .map(|r| r.group.name.clone())
        };
        let blocked_in = stack_changes(&a_runs, &b_runs, &row_of, |run| {
            run.blocked_in.iter().map(|b| (b.stage.as_str(), &b.stack, b.est_ns)).collect()
        });
        let on_cpu_in = stack_changes(&a_runs, &b_runs, &row_of, |run| {
            run.parts()
                .iter()
                .flat_map(|s| s.on_cpu_in.iter().map(|i| (s.name.as_str(), &i.stack, i.est_ns)))
                .collect()
        });
        let teardowns = teardown_changes(&a_runs, &b_runs, level);
        let changed = rows.iter().any(|r| r.ns_per_exit.is_beyond_noise());
        let moved_code = named_rows(&rows)
            .into_iter()
            .map(|r| MovedCode::of(r, &on_cpu_in, &blocked_in))
            .collect();
        let (a, b) = (SideDoc::new(a), SideDoc::new(b));
        let warnings = loss_warnings(&a, &b);
        let shown = |changes: &[StackChange]| changes[..changes.len().min(STACKS_SHOWN)].to_vec();
        Self {
            a,
            b,
            noise,
            same_cut,
            rows,
            blocked_in: shown(&blocked_in),
            on_cpu_in: shown(&on_cpu_in),
            every_on_cpu: on_cpu_in,
            every_blocked: blocked_in,
            moved_code,
            teardowns,
            changed,
            warnings,
            verdict: String::new(),
        }
    }
}

impl SideDoc {
    fn new(runs: &[(String, RunDocument)]) -> Self {
        let distinct = |f: &dyn Fn(&RunDocument) -> String| {
            let mut values: Vec<String> = Vec::new();
            for (_, run) in runs {
                let v = f(run);
                if !values.contains(&v) {
                    values.push(v);
                }
            }
            values
        };
        Self {
            files: runs.iter().map(|(file, _)| file.clone()).collect(),
            kernels: distinct(&|r| r.kernel.clone()),
            attach: distinct(&|r| r.attach.to_string()),
            workloads: distinct(&|r| r.workload.describe()),
            exits: runs.iter().map(|(_, r)| r.exits()).collect(),
            lost: runs.iter().map(|(_, r)| r.lost).collect(),
            lost_ringbuf_full: runs
                .iter()
                .map(|(_, r)| r.losses.get(counters::RINGBUF_FULL))
                .collect(),
            loss_rate: {
                let lost: u64 = runs.iter().map(|(_, r)| r.lost).sum();
                let recorded: u64 = runs.iter().map(|(_, r)| r.exits()).sum();
                lost as f64 / (lost + recorded).max(1) as f64
            },
            partial: runs.iter().any(|(_, r)| r.partial),
        }
    }
}

/// A side that lost more than this part of its exits is not compared as an equal.
pub const LOSS_WARNING: f64 = 0.02;
/// Sides whose loss rates differ by more than this (in parts of their exits) lost unlike parts.
pub const LOSS_RATES_DIFFER: f64 = 0.01;

/// Warnings on the sides' losses: exits lost to a full ring buffer are those of a burst (the
/// kernel drops what comes while the buffer is full), so a side that lost many compares only
/// what was left of its bursts.
fn loss_warnings(a: &SideDoc, b: &SideDoc) -> Vec<String> {
    let mut warnings = Vec::new();
    for (name, side) in [("A", a), ("B", b)] {
        if side.loss_rate > LOSS_WARNING {
            let full: u64 = side.lost_ringbuf_full.iter().sum();
            let why = if full > 0 {
                format!(
                    ", {full} of them to a full ring buffer: exits of bursts, not a random \
                     sample, so its figures leave out what its bursts did"
                )
            } else {
                String::new()
            };
            warnings.push(format!(
                "{name} lost {:.1}% of its exits ({} lost){why}; rerun it with a larger \
                 --ringbuf-bytes or fewer exits at once",
                side.loss_rate * 100.0,
                side.lost.iter().sum::<u64>(),
            ));
        }
    }
    if (a.loss_rate - b.loss_rate).abs() > LOSS_RATES_DIFFER {
        warnings.push(format!(
            "the sides lost unlike parts of their exits (A {:.1}%, B {:.1}%): what each lost is \
             not the same kind of exit, and the change may be in what was lost",
            a.loss_rate * 100.0,
            b.loss_rate * 100.0
        ));
    }
    warnings
}

/// Rows named in the verdict, largest change first.
pub const ROWS_NAMED: usize = 3;

/// Rows the verdict names: those beyond noise, largest change of time per exit first.
pub fn named_rows(rows: &[RowDoc]) -> Vec<&RowDoc> {
    let mut moved: Vec<&RowDoc> =
        rows[1..].iter().filter(|r| r.ns_per_exit.is_beyond_noise()).collect();
    moved.sort_by(|x, y| y.ns_per_exit.delta.abs().total_cmp(&x.ns_per_exit.delta.abs()));
    moved.truncate(ROWS_NAMED);
    moved
}

impl MovedCode {
    /// Where `row`'s change lies: the code it covers, the chain its on-CPU change goes
    /// through, and the stack its blocked time grew (or shrank) most in.
    fn of(row: &RowDoc, on_cpu: &[StackChange], blocked: &[StackChange]) -> Self {
        let same_way = |changes: &[StackChange], delta: f64| -> Vec<(Vec<String>, f64)> {
            changes
                .iter()
                .filter(|c| c.row == row.group.name && c.delta_ns_per_exit * delta > 0.0)
                .map(|c| (c.stack.clone(), c.delta_ns_per_exit.abs()))
                .collect()
        };
        let on_cpu_delta = row.on_cpu_ns_per_exit.delta;
        let sampled = same_way(on_cpu, on_cpu_delta);
        let weighed: Vec<(&[String], f64)> =
            sampled.iter().map(|(s, w)| (s.as_slice(), *w)).collect();
        let on_cpu = heaviest_chain(&weighed, EXIT_FRAME).map(|hot| ChainChange {
            delta_ns_per_exit: on_cpu_delta.signum()
                * sampled
                    .iter()
                    .filter(|(s, _)| goes_through(s, &hot.frames))
                    .map(|(_, w)| w)
                    .sum::<f64>(),
            frames: hot.frames,
            share: hot.share,
        });
        let blocked_delta = row.off_cpu_ns_per_exit.delta;
        let blocks = same_way(blocked, blocked_delta);
        let all: f64 = blocks.iter().map(|(_, w)| w).sum();
        let blocked =
            blocks.iter().max_by(|x, y| x.1.total_cmp(&y.1)).map(|(stack, w)| ChainChange {
                frames: stack.clone(),
                delta_ns_per_exit: blocked_delta.signum() * w,
                share: w / all,
            });
        Self { row: row.group.name.clone(), covers: row.group.covers.clone(), on_cpu, blocked }
    }
}

/// Whether a stack (innermost first) goes through a chain (innermost first, `do_exit` left
/// out): its frames from the exit inwards begin with the chain's.
fn goes_through(stack: &[String], chain: &[String]) -> bool {
    let outward = stack.iter().rev().filter(|f| f.as_str() != EXIT_FRAME);
    outward.take(chain.len()).eq(chain.iter().rev())
}

#[derive(Clone, Copy)]
enum Side {
    A,
    B,
}

impl Side {
    fn stages(self, group: &Group) -> &[String] {
        match self {
            Self::A => &group.a_stages,
            Self::B => &group.b_stages,
        }
    }
}

/// A row's figures on both sides, and their changes; `whole` is the whole exit's row (`None`
/// for that row itself), the scale of what fewer runs can tell.
fn row(
    group: Group,
    a: &[RunDocument],
    b: &[RunDocument],
    level: f64,
    whole: Option<&RowDoc>,
) -> RowDoc {
    let one_stage = group.is_one_stage();
    let figures = |runs: &[RunDocument], stages: &[String]| -> Vec<RunFigures> {
        runs.iter().map(|run| run_figures(run, stages, one_stage)).collect()
    };
    let (fa, fb) = (figures(a, &group.a_stages), figures(b, &group.b_stages));
    let values = |figures: &[RunFigures], f: &dyn Fn(&RunFigures) -> Option<f64>| -> Vec<f64> {
        figures.iter().filter_map(f).collect()
    };
    let change = |f: &dyn Fn(&RunFigures) -> Option<f64>,
                  figure,
                  of_whole: fn(&RowDoc) -> Option<&Change>| {
        let whole = whole.and_then(of_whole).map_or(0.0, |c| c.a);
        Change::of(&values(&fa, f), &values(&fb, f), level, figure, whole)
    };
    let per_exit = |f: &RunFigures| Some(f.ns_per_exit);
    let off_cpu = |f: &RunFigures| Some(f.off_cpu_ns_per_exit);
    // Time mostly spent off a CPU follows what else the machine ran.
    let mostly_off_cpu = [&fa, &fb].iter().any(|side| {
        let total: f64 = side.iter().map(|f| f.ns_per_exit).sum();
        let off: f64 = side.iter().map(|f| f.off_cpu_ns_per_exit).sum();
        off > total / 2.0
    });
    let central = if mostly_off_cpu { Figure::Volatile } else { Figure::Steady };
    let latency = |k: usize| move |f: &RunFigures| f.latency.map(|l| l[k]);
    RowDoc {
        ns_per_exit: change(&per_exit, central, |w| Some(&w.ns_per_exit))
            .expect("every side has runs"),
        share_of_change: None,
        on_cpu_ns_per_exit: change(
            &|f| Some(f.ns_per_exit - f.off_cpu_ns_per_exit),
            Figure::Steady,
            |w| Some(&w.on_cpu_ns_per_exit),
        )
        .expect("every side has runs"),
        off_cpu_ns_per_exit: change(&off_cpu, Figure::Volatile, |w| Some(&w.off_cpu_ns_per_exit))
            .expect("every side has runs"),
        mean_ns: change(&latency(0), central, |w| w.mean_ns.as_ref()),
        p50_ns: change(&latency(1), central, |w| w.p50_ns.as_ref()),
        p99_ns: change(&latency(2), Figure::Volatile, |w| w.p99_ns.as_ref()),
        group,
    }
}

fn run_figures(run: &RunDocument, stages: &[String], one_stage: bool) -> RunFigures {
    let found: Vec<&StageDoc> =
        stages.iter().filter_map(|name| run.stages.iter().find(|s| s.name == *name)).collect();
    let exits = run.exits() as f64;
    let total: f64 = found.iter().map(|s| s.latency.total_ns as f64).sum();
    let off: f64 = found.iter().map(|s| s.latency.total_ns as f64 * s.off_cpu_share).sum();
    let latency = match found.as_slice() {
        [s] if one_stage => {
            let l = &s.latency;
            Some([l.mean_ns, l.p50_ns as f64, l.p99_ns as f64])
        }
        _ => None,
    };
    RunFigures { ns_per_exit: total / exits, off_cpu_ns_per_exit: off / exits, latency }
}

/// Each kind of teardown some run joined, its figures on both sides (a side's run with none of
/// it counts for nothing in a mean).
fn teardown_changes(a: &[RunDocument], b: &[RunDocument], level: f64) -> Vec<TeardownChange> {
    let kinds = [("net", 0), ("user", 1)];
    kinds
        .into_iter()
        .filter_map(|(kind, index)| {
            let of = |runs: &[RunDocument]| -> Vec<TeardownReport> {
                runs.iter().map(|r| r.teardowns.each()[index].clone()).collect()
            };
            let (ta, tb) = (of(a), of(b));
            let joined = |t: &[TeardownReport]| t.iter().map(|v| v.joined).collect::<Vec<_>>();
            if ta.iter().chain(&tb).all(|v| v.joined == 0) {
                return None;
            }
            let first = ta.iter().chain(&tb).find(|v| v.joined > 0)?;
            let values = |t: &[TeardownReport], f: fn(&TeardownReport) -> f64| -> Vec<f64> {
                t.iter().filter(|v| v.joined > 0).map(f).collect()
            };
            let change = |f: fn(&TeardownReport) -> f64| {
                Change::of(&values(&ta, f), &values(&tb, f), level, Figure::Volatile, 0.0)
            };
            Some(TeardownChange {
                kind,
                name: format!("{} teardown ({})", first.kind, first.function),
                a_joined: joined(&ta),
                b_joined: joined(&tb),
                teardown_ns: change(|v| v.teardown_ns.mean_ns),
                wait_ns: change(|v| v.exit_to_start_ns.mean_ns),
                blocked_share: change(|v| v.blocked_share),
                on_cpu_share: change(|v| v.on_cpu_share),
            })
        })
        .collect()
}

/// A run's stacks: (stage, frames, time).
type Stacks<'a> = Vec<(&'a str, &'a Vec<String>, f64)>;

/// Every stack's mean time per exit on both sides, by row, largest change first.
fn stack_changes(
    a: &[RunDocument],
    b: &[RunDocument],
    row_of: &dyn Fn(Side, &str) -> Option<String>,
    stacks: impl for<'a> Fn(&'a RunDocument) -> Stacks<'a>,
) -> Vec<StackChange> {
    let mut by_stack: HashMap<(String, Vec<String>), (f64, f64)> = HashMap::new();
    for (side, runs) in [(Side::A, a), (Side::B, b)] {
        for run in runs {
            let exits = run.exits() as f64 * runs.len() as f64;
            for (stage, frames, ns) in stacks(run) {
                let Some(row) = row_of(side, stage) else { continue };
                let entry = by_stack.entry((row, frames.clone())).or_default();
                match side {
                    Side::A => entry.0 += ns / exits,
                    Side::B => entry.1 += ns / exits,
                }
            }
        }
    }
    let mut changes: Vec<StackChange> = by_stack
        .into_iter()
        .map(|((row, stack), (a_ns, b_ns))| StackChange {
            row,
            stack,
            a_ns_per_exit: a_ns,
            b_ns_per_exit: b_ns,
            delta_ns_per_exit: b_ns - a_ns,
        })
        .collect();
    changes.sort_by(|x, y| {
        y.delta_ns_per_exit
            .abs()
            .total_cmp(&x.delta_ns_per_exit.abs())
            .then_with(|| x.stack.cmp(&y.stack))
    });
    changes
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::diff::{
        input::tests::{document, view},
        noise::welch,
    };

    type Stages<'a> = &'a [(&'a str, &'a [&'a str], f64)];

    fn runs(stages_of_run: &[Stages<'_>]) -> Vec<(String, RunDocument)> {
        stages_of_run
            .iter()
            .enumerate()
            .map(|(i, stages)| (format!("run{i}.json"), view(&document(100, stages))))
            .collect()
    }

    /// The tracepoint cut of this host's exit: three gaps.
    fn tracepoint_cut(mm: f64) -> [(&'static str, &'static [&'static str], f64); 3] {
        [
            ("do_exit…taskstats_exit", &["do_exit", "exit_signals", "taskstats_exit"], 1_000.0),
            (
                "perf_event_exit_task…exit_thread",
                &["perf_event_exit_task", "exit_mm", "exit_files"],
                mm,
            ),
            ("sched_autogroup_exit_task…__schedule", &["exit_notify", "__schedule"], 3_000.0),
        ]
    }

    #[test]
    fn the_interval_of_each_row_comes_from_the_runs() {
        let a = runs(&[&tracepoint_cut(1_000.0), &tracepoint_cut(1_200.0), &tracepoint_cut(800.0)]);
        let b =
            runs(&[&tracepoint_cut(3_000.0), &tracepoint_cut(3_300.0), &tracepoint_cut(2_700.0)]);
        let doc = DiffDocument::judged(&a, &b);
        assert!(doc.same_cut);
        assert_eq!((doc.noise.method, doc.rows.len()), ("interval", 4));
        let mm = &doc.rows[2];
        let level = row_level(4);
        assert_eq!(doc.noise.row_level, level);
        let expected = welch(&[1_000.0, 1_200.0, 800.0], &[3_000.0, 3_300.0, 2_700.0], level);
        assert_eq!(mm.ns_per_exit.interval, expected);
        assert_eq!((mm.ns_per_exit.delta, mm.ns_per_exit.beyond_noise), (2_000.0, Some(true)));
        // Every exit passes through every stage here: the stage's mean is its time per exit.
        assert_eq!(mm.mean_ns.as_ref().unwrap().interval, expected);
        // The whole exit's change is all in that stage; the others did not move at all.
        assert_eq!(mm.share_of_change, Some(1.0));
        assert_eq!(doc.rows[1].ns_per_exit.beyond_noise, Some(false));
        assert!(doc.changed);
        assert!(
            doc.verdict.contains("beyond run-to-run noise (interval +")
                && doc.verdict.contains(
                    "Beyond noise, per exit: perf_event_exit_task…exit_thread +2.0µs (+200%), \
                     100% of the exit's change."
                ),
            "{}",
            doc.verdict
        );
    }

    #[test]
    fn runs_that_differ_only_by_noise_change_nothing() {
        let a = runs(&[&tracepoint_cut(1_000.0), &tracepoint_cut(1_300.0), &tracepoint_cut(700.0)]);
        let b = runs(&[&tracepoint_cut(1_100.0), &tracepoint_cut(900.0), &tracepoint_cut(1_250.0)]);
        let doc = DiffDocument::judged(&a, &b);
        assert!(!doc.changed);
        assert!(doc.rows.iter().all(|r| r.ns_per_exit.beyond_noise == Some(false)));
        assert!(
            doc.verdict.contains("within run-to-run noise")
                && doc.verdict.contains("No stage's time per exit changes beyond noise."),
            "{}",
            doc.verdict
        );
    }

    #[test]
    fn different_cuts_compare_at_the_cut_both_share_and_say_so() {
        // A: kprobes, with exit_mm a stage of its own; B: tracepoints only.
        let kprobe_cut = |mm: f64| -> [(&'static str, &'static [&'static str], f64); 5] {
            [
                ("do_exit…taskstats_exit", &["do_exit", "exit_signals", "taskstats_exit"], 1_000.0),
                ("perf_event_exit_task", &["perf_event_exit_task"], 100.0),
                ("exit_mm", &["exit_mm"], mm - 300.0),
                ("exit_files", &["exit_files"], 200.0),
                ("sched_autogroup_exit_task…__schedule", &["exit_notify", "__schedule"], 3_000.0),
            ]
        };
        let a = runs(&[&kprobe_cut(1_000.0), &kprobe_cut(1_100.0), &kprobe_cut(900.0)]);
        let b =
            runs(&[&tracepoint_cut(5_000.0), &tracepoint_cut(5_200.0), &tracepoint_cut(4_800.0)]);
        let mut doc = DiffDocument::judged(&a, &b);
        assert!(!doc.same_cut);
        let names: Vec<&str> = doc.rows.iter().map(|r| r.group.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "exit",
                "do_exit…taskstats_exit",
                "perf_event_exit_task…exit_files",
                "sched_autogroup_exit_task…__schedule"
            ]
        );
        let merged = &doc.rows[2];
        assert_eq!(merged.group.a_stages, ["perf_event_exit_task", "exit_mm", "exit_files"]);
        assert_eq!((merged.ns_per_exit.a, merged.ns_per_exit.b), (1_000.0, 5_000.0));
        // Percentiles of stages taken apart do not add up: a merged row has none.
        assert!(merged.mean_ns.is_none() && merged.p99_ns.is_none());
        assert!(doc.rows[1].mean_ns.is_some());
        assert!(
            doc.verdict.contains(
                "A and B cut the exit differently: stages are compared by the kernel code they \
                 cover, at the finest cut both share (1 of 3 rows join differing stages)."
            ),
            "{}",
            doc.verdict
        );
        doc.b.attach = vec!["tracepoint".to_owned()];
        assert!(cut_note_of(&doc).contains("(attach auto vs tracepoint)"));
    }

    #[test]
    fn a_path_one_side_never_took_is_none_there() {
        a_path_one_side_never_took();
    }

    /// A diff where A's exits took a path B's never did; `report::diff`'s tests read its tables.
    pub(crate) fn a_path_one_side_never_took() -> DiffDocument {
        let [start, mm, end] = tracepoint_cut(1_000.0);
        let to_schedule: &[&str] =
            &["perf_event_exit_task", "exit_mm", "exit_files", "exit_notify", "__schedule"];
        let blocked = [start, mm, ("perf_event_exit_task…__schedule", to_schedule, 30_000.0), end];
        let doc = DiffDocument::judged(&runs(&[&blocked]), &runs(&[&tracepoint_cut(1_000.0)]));
        assert!(doc.same_cut, "{}", doc.verdict);
        let path = doc.rows.iter().find(|r| r.group.name == "perf_event_exit_task…__schedule");
        let path = path.unwrap();
        assert!(path.group.b_stages.is_empty());
        assert_eq!((path.ns_per_exit.a, path.ns_per_exit.b), (30_000.0, 0.0));
        assert!(path.mean_ns.is_none());
        doc
    }

    fn cut_note_of(doc: &DiffDocument) -> String {
        crate::diff::verdict::cut_note(doc)
    }

    #[test]
    fn one_run_a_side_cannot_tell_a_change_from_noise_unless_it_doubles() {
        let one = |mm: f64| runs(&[&tracepoint_cut(mm)]);
        let doc = DiffDocument::judged(&one(1_000.0), &one(1_500.0));
        assert_eq!(doc.noise.method, "factor");
        assert!(!doc.changed && doc.rows.iter().all(|r| r.ns_per_exit.interval.is_none()));
        assert!(
            doc.verdict.contains(
                "+500ns (+10%): with one run a side this cannot be told from run-to-run noise \
                 (without 3 runs a side, only a change past 2x either way, by 10% of the whole \
                 exit or more, can)"
            ),
            "{}",
            doc.verdict
        );
        let doc = DiffDocument::judged(&one(1_000.0), &one(8_000.0));
        let mm = &doc.rows[2];
        assert_eq!((mm.ns_per_exit.beyond_noise, mm.ns_per_exit.interval), (Some(true), None));
        // The whole exit grows 2.4x, the stage 8x.
        assert!(
            doc.verdict.contains(
                "more than 2x either way, beyond what runs of one workload differ by; with one \
                 run a side there is no interval"
            ) && doc.verdict.contains("perf_event_exit_task…exit_thread +7.0µs (+700%)"),
            "{}",
            doc.verdict
        );
        assert_eq!(mm.p99_ns.as_ref().unwrap().beyond_noise, None);
    }

    #[test]
    fn time_off_a_cpu_is_not_judged_from_one_run_a_side() {
        let blocked = |off: f64| {
            let mut doc = document(100, &tracepoint_cut(1_000.0));
            for stage in doc["stages"].as_array_mut().unwrap() {
                stage["off_cpu_share"] = off.into();
            }
            vec![("run.json".to_owned(), view(&doc))]
        };
        let doc = DiffDocument::judged(&blocked(0.1), &blocked(0.9));
        let exit = &doc.rows[0];
        assert_eq!(exit.ns_per_exit.beyond_noise, None);
        assert_eq!(exit.off_cpu_ns_per_exit.beyond_noise, None);
        assert_eq!(exit.on_cpu_ns_per_exit.beyond_noise, Some(true));
        assert!(doc.verdict.contains("it is mostly time off a CPU"), "{}", doc.verdict);
    }

    /// A run of the tracepoint cut whose teardown stage computes in `unmap_page_range` (90%
    /// of its samples) and `free_pgtables`.
    fn teardown(mm: f64, lost: u64, ringbuf_full: u64) -> (String, RunDocument) {
        let mut doc = document(100, &tracepoint_cut(mm));
        let stack = |frames: &[&str], share: f64| serde_json::json!({"stack": frames, "samples": 1, "share": share, "est_ns": mm * 100.0 * share});
        doc["stages"][2]["on_cpu_in"] = serde_json::json!([
            stack(
                &[
                    "zap_pte_range",
                    "unmap_page_range",
                    "unmap_vmas",
                    "exit_mmap",
                    "__mmput",
                    "do_exit"
                ],
                0.9
            ),
            stack(&["free_pgtables", "exit_mmap", "__mmput", "do_exit"], 0.1),
        ]);
        doc["lost"] = lost.into();
        doc["losses"] = serde_json::json!({"ringbuf_full": ringbuf_full, "hits": 0});
        ("run.json".to_owned(), view(&doc))
    }

    #[test]
    fn the_verdict_names_the_code_whose_time_moved() {
        let doc = DiffDocument::judged(&[teardown(1_000.0, 0, 0)], &[teardown(8_000.0, 0, 0)]);
        let code = &doc.moved_code[0];
        let chain = code.on_cpu.as_ref().unwrap();
        assert_eq!(chain.frames[..3], ["zap_pte_range", "unmap_page_range", "unmap_vmas"]);
        assert!(
            (chain.share - 0.9).abs() < 1e-9 && (chain.delta_ns_per_exit - 6_300.0).abs() < 1e-6
        );
        assert!(
            doc.verdict.contains(
                "perf_event_exit_task…exit_thread covers perf_event_exit_task, exit_mm, \
                 exit_files; its time moved on a CPU +7.0µs per exit, mostly in zap_pte_range ← \
                 unmap_page_range ← unmap_vmas ← exit_mmap ← __mmput (90% of that)."
            ),
            "{}",
            doc.verdict
        );
        assert!(doc.warnings.is_empty(), "{:?}", doc.warnings);
    }

    #[test]
    fn a_side_that_lost_many_exits_is_not_compared_as_an_equal() {
        a_side_that_lost_most_exits();
        // A few lost alike on both sides: nothing to warn of.
        let doc = DiffDocument::judged(&[teardown(1_000.0, 1, 0)], &[teardown(1_000.0, 1, 1)]);
        assert!(doc.warnings.is_empty(), "{:?}", doc.warnings);
    }

    /// A diff whose side A lost 99 % of its exits to a full ring buffer.
    pub(crate) fn a_side_that_lost_most_exits() -> DiffDocument {
        let doc =
            DiffDocument::judged(&[teardown(1_000.0, 9_900, 9_900)], &[teardown(1_000.0, 0, 0)]);
        assert_eq!(
            (doc.a.lost.clone(), doc.a.lost_ringbuf_full.clone()),
            (vec![9_900], vec![9_900])
        );
        assert!((doc.a.loss_rate - 0.99).abs() < 1e-9 && doc.b.loss_rate == 0.0);
        assert_eq!(doc.warnings.len(), 2, "{:?}", doc.warnings);
        assert!(doc.warnings[0].starts_with(
            "A lost 99.0% of its exits (9900 lost), 9900 of them to a full ring buffer"
        ));
        assert!(doc.warnings[1].contains("unlike parts of their exits (A 99.0%, B 0.0%)"));
        assert!(doc.verdict.contains("less than fair"), "{}", doc.verdict);
        doc
    }

    /// Network namespace teardowns are matched across the sides by kind, whatever the work
    /// function's code on each kernel: their time and wait, side by side; a kind neither side
    /// joined has no row.
    #[test]
    fn teardowns_are_matched_by_kind() {
        network_namespace_teardowns();
        // Documents of an earlier exitprof have no teardowns: no row.
        let plain = || ("run.json".to_owned(), view(&document(100, &tracepoint_cut(1_000.0))));
        assert!(DiffDocument::judged(&[plain()], &[plain()]).teardowns.is_empty());
    }

    /// A diff of network namespace teardowns, 400 ms on 6.1 against 100 ms on 7.3.
    pub(crate) fn network_namespace_teardowns() -> DiffDocument {
        let with_teardowns = |kernel: &str, teardown_ns: f64| {
            let mut doc = document(100, &tracepoint_cut(1_000.0));
            doc["kernel"] = kernel.into();
            let mut kind = |key: &str, what: &str, function: &str, joined: u64| {
                let t = &mut doc["teardowns"][key];
                (t["kind"], t["function"], t["joined"]) =
                    (what.into(), function.into(), joined.into());
                (t["teardown_ns"]["mean_ns"], t["exit_to_start_ns"]["mean_ns"]) =
                    (teardown_ns.into(), 2e6.into());
                (t["blocked_share"], t["on_cpu_share"]) = (0.7.into(), 0.3.into());
            };
            kind("net", "network namespace", "cleanup_net", 10);
            kind("user", "user namespace", "free_user_ns", 0);
            ("run.json".to_owned(), view(&doc))
        };
        let doc =
            DiffDocument::judged(&[with_teardowns("6.1", 400e6)], &[with_teardowns("7.3", 100e6)]);
        assert_eq!(doc.teardowns.len(), 1, "{:?}", doc.teardowns);
        let net = &doc.teardowns[0];
        assert_eq!(net.name, "network namespace teardown (cleanup_net)");
        let time = net.teardown_ns.as_ref().unwrap();
        assert_eq!((time.a, time.b, time.delta), (400e6, 100e6, -300e6));
        assert_eq!((net.a_joined.as_slice(), net.b_joined.as_slice()), (&[10][..], &[10][..]));
        doc
    }

    #[test]
    fn stacks_are_compared_per_exit_by_row() {
        let with_stacks = |blocked_ns: f64, sampled_ns: f64| {
            let mut doc = document(100, &tracepoint_cut(1_000.0));
            doc["blocked_in"] = serde_json::json!([
                {"stage": "perf_event_exit_task…exit_thread", "stack": ["down_read", "exit_mm"],
                 "blocks": 3, "walked_ns": 1, "est_ns": blocked_ns, "share": 0.5},
            ]);
            doc["stages"][2]["on_cpu_in"] = serde_json::json!([
                {"stack": ["unmap_vmas", "exit_mmap"], "samples": 4, "share": 1.0, "est_ns": sampled_ns},
            ]);
            ("run.json".to_owned(), view(&doc))
        };
        let a = [with_stacks(10_000.0, 50_000.0), with_stacks(30_000.0, 50_000.0)];
        let b = [with_stacks(100_000.0, 20_000.0)];
        let doc = DiffDocument::judged(&a, &b);
        let blocked = &doc.blocked_in[0];
        assert_eq!(blocked.row, "perf_event_exit_task…exit_thread");
        assert_eq!((blocked.a_ns_per_exit, blocked.b_ns_per_exit), (200.0, 1_000.0));
        assert_eq!(doc.on_cpu_in[0].delta_ns_per_exit, -300.0);
    }
}
