//! Where exiting tasks block. The kernel side walks the stack of a budget of blocks per second
//! and CPU and sends each with its length; here they are named from kallsyms and added up by
//! stage and stack. Each stage's blocked time (from the exits' records, every block counted) is
//! shared out between the stacks walked in it by their measured time: a walk is a sample of the
//! stage's blocks, as likely for a short block as for a long one. So the table accounts for
//! every nanosecond exits spent blocked, an exit that blocks a thousand times as much as one
//! that blocks once; stages where no block was walked keep their time apart.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::{
    analysis::{
        exit_stacks::ExitStacks,
        on_cpu::{EXIT_FRAME, exit_frames},
        profile::Profile,
        records::{Exit, StackKind},
    },
    kernel::kallsyms::Kallsyms,
};

/// Frames of the scheduler and of exitprof's own probe (`?`: code kallsyms does not name, the
/// eBPF program itself), above where a task really blocked.
pub(crate) const SCHEDULER_FRAMES: &[&str] = &[
    "?",
    "bpf_",
    "__bpf_",
    "__traceiter_",
    "__schedule",
    "schedule",
    "preempt_schedule",
    "io_schedule",
];

/// How often the exits blocked, from their records.
#[derive(Clone, Copy, Debug, Default)]
pub struct Blocking {
    /// Exits that blocked at least once.
    pub blocked_exits: u64,
    /// Blocks in all (times an exiting task was switched out asleep).
    pub blocks: u64,
}

impl Blocking {
    pub fn exit(&mut self, exit: &Exit) {
        if exit.blocks > 0 {
            self.blocked_exits += 1;
        }
        self.blocks += u64::from(exit.blocks);
    }
}

/// Where the exits blocked, all of their blocked time accounted for.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BlockedReport {
    /// Time the exits spent blocked, in all.
    pub blocked_ns: u128,
    /// Exits that blocked, and their blocks.
    pub blocked_exits: u64,
    pub blocks: u64,
    /// Blocks whose stack was walked and joined to its exit.
    pub blocks_walked: u64,
    /// By stage and stack, most time first: the stage's blocked time shared out by the walked
    /// blocks' time. They add up to `blocked_ns` less `unwalked_ns`.
    pub stacks: Vec<BlockedIn>,
    /// Blocked time in stages where no block's stack was walked (and of exits whose stages are
    /// unknown, their hits truncated).
    pub unwalked_ns: u128,
}

/// One stack where exits blocked, in one stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockedIn {
    pub stage: String,
    /// Innermost frame first, the scheduler left out, down to `do_exit`. A wait in code the
    /// compiler inlined into `do_exit` is named after that code, marked `(inlined)`.
    pub stack: Vec<String>,
    /// Walked blocks in it, and their time.
    pub blocks: u64,
    pub walked_ns: u128,
    /// The stage's blocked time times this stack's share of the time walked in the stage.
    pub est_ns: f64,
    /// Of all the exits' blocked time.
    pub share: f64,
}

impl BlockedReport {
    pub fn of(
        blocking: Blocking,
        stacks: &ExitStacks,
        profile: &Profile,
        symbols: &Kallsyms,
    ) -> Self {
        let mut walked: HashMap<(usize, Vec<String>), (u64, u128)> = HashMap::new();
        for (stage, stack, tally) in stacks.tallies(StackKind::Blocked) {
            let waits_inline = profile.stage(stage).map(|(s, _)| s.waits_inline.as_slice());
            let named = blocked_frames(stack, symbols, waits_inline.unwrap_or_default());
            let w = walked.entry((stage, named)).or_default();
            w.0 += tally.count;
            w.1 += tally.ns;
        }
        let mut walked_in_stage: HashMap<usize, u128> = HashMap::new();
        for ((stage, _), (_, ns)) in &walked {
            *walked_in_stage.entry(*stage).or_default() += ns;
        }
        let whole = profile.exit();
        let blocked_ns = whole.off_cpu_ns.saturating_sub(whole.runq_ns);
        let stage_blocked = |index: usize| {
            profile.stage(index).map_or(0, |(_, l)| l.off_cpu_ns.saturating_sub(l.runq_ns))
        };
        let accounted: u128 = walked_in_stage.keys().map(|&s| stage_blocked(s)).sum();
        let mut rows: Vec<BlockedIn> = walked
            .into_iter()
            .filter_map(|((index, stack), (blocks, walked_ns))| {
                let (stage, _) = profile.stage(index)?;
                let in_stage = walked_in_stage[&index];
                let est_ns = if in_stage == 0 {
                    0.0
                } else {
                    stage_blocked(index) as f64 * walked_ns as f64 / in_stage as f64
                };
                let share = if blocked_ns == 0 { 0.0 } else { est_ns / blocked_ns as f64 };
                Some(BlockedIn {
                    stage: stage.name.clone(),
                    stack,
                    blocks,
                    walked_ns,
                    est_ns,
                    share,
                })
            })
            .collect();
        rows.sort_by(|a, b| {
            b.est_ns
                .total_cmp(&a.est_ns)
                .then_with(|| (&a.stage, &a.stack).cmp(&(&b.stage, &b.stack)))
        });
        Self {
            blocked_ns,
            blocked_exits: blocking.blocked_exits,
            blocks: blocking.blocks,
            blocks_walked: stacks.blocks.joined,
            stacks: rows,
            unwalked_ns: blocked_ns.saturating_sub(accounted),
        }
    }
}

/// A block's frames, innermost first, the scheduler left out, cut at `do_exit`. A block whose
/// innermost frame is `do_exit` itself waited in code inlined there: the stage's inlined code
/// that can wait (`waits_inline`, from the exit path of the kernel) names it.
pub fn blocked_frames(stack: &[u64], symbols: &Kallsyms, waits_inline: &[String]) -> Vec<String> {
    let mut frames = exit_frames(stack, symbols, SCHEDULER_FRAMES);
    if frames.first().map(String::as_str) == Some(EXIT_FRAME) && !waits_inline.is_empty() {
        frames.insert(0, format!("{} (inlined)", waits_inline.join(" or ")));
    }
    frames
}

impl BlockedIn {
    /// `rwsem_down_read_slowpath ← down_read ← do_exit`: where it blocked, called from where.
    pub fn describe(&self, frames: usize) -> String {
        if self.stack.is_empty() {
            return "(stack unknown)".to_owned();
        }
        self.stack.iter().take(frames).map(String::as_str).collect::<Vec<_>>().join(" ← ")
    }
}

#[cfg(test)]
mod tests {
    use exitprof_common::point::{Marker, Point};

    use super::*;
    use crate::probes::plan::Plan;
    use crate::{
        analysis::records::{ExitKey, KernelStack, PointHit},
        kernel::version::KernelVersion,
        probes::plan::{How, SiteId},
    };

    const KALLSYMS: &str = "ffffffff81000000 T __schedule\nffffffff81000100 T schedule\n\
         ffffffff81000200 T rwsem_down_read_slowpath\nffffffff81000300 T down_read\n\
         ffffffff81000400 T do_exit\nffffffff81000500 T __x64_sys_exit\n\
         ffffffff81000600 T ptrace_stop\nffffffff81000700 T ptrace_notify\n";

    fn at(symbols: &Kallsyms, names: &[&str]) -> Vec<u64> {
        names.iter().map(|n| symbols.address(n).unwrap() + 0x10).collect()
    }

    /// The tracepoint plan of 6.18: the exit syscall, sched_process_exit, the final switch.
    fn profile() -> Profile {
        Profile::new(&Plan::with_sites(
            KernelVersion::new(6, 18, 0),
            &[
                (SiteId::Marker(Marker::SysEnterExit), How::Tracepoint, "syscalls:sys_enter_exit"),
                (SiteId::Marker(Marker::SchedProcessExit), How::BtfTracepoint, "x"),
                (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
            ],
        ))
    }

    /// An exit of `pid` that blocked `early_ns` in its first stage and `late_ns` in its second.
    fn exit(pid: u32, early_ns: u64, late_ns: u64) -> Exit {
        let hit = |point, ts_ns, off_cpu_ns| PointHit { point, ts_ns, off_cpu_ns, runq_ns: 0 };
        Exit {
            pid,
            tgid: pid,
            blocks: 2,
            hits: vec![
                hit(Point::Marker(Marker::SysEnterExit), 1_000, 0),
                hit(Point::Marker(Marker::SchedProcessExit), 2_000 + early_ns, early_ns),
                hit(
                    Point::Marker(Marker::FinalSwitch),
                    3_000 + early_ns + late_ns,
                    early_ns + late_ns,
                ),
            ],
            ..Exit::default()
        }
    }

    fn block(pid: u32, n_hits: u32, ns: u64, stack: Vec<u64>) -> KernelStack {
        KernelStack {
            kind: StackKind::Blocked,
            exit: ExitKey { pid, start_ns: 1_000 },
            n_hits,
            ts_ns: 1_500,
            ns,
            stack,
        }
    }

    /// Every block counts, not only each exit's longest: the stage's blocked time is shared out
    /// by what was walked, the stages without walks kept apart, and all of it adds up to the
    /// exits' blocked time. A wait directly in do_exit is named after the inlined code of its
    /// stage that can wait.
    #[test]
    fn all_blocked_time_is_accounted_by_stage_and_stack() {
        let symbols = Kallsyms::parse(KALLSYMS.as_bytes()).unwrap();
        let mut profile = profile();
        let mut stacks = ExitStacks::default();
        let mut blocking = Blocking::default();
        let ptrace = at(
            &symbols,
            &[
                "__schedule",
                "schedule",
                "ptrace_stop",
                "ptrace_notify",
                "do_exit",
                "__x64_sys_exit",
            ],
        );
        let inline = at(&symbols, &["__schedule", "schedule", "do_exit", "__x64_sys_exit"]);
        let rwsem =
            at(&symbols, &["__schedule", "rwsem_down_read_slowpath", "down_read", "do_exit"]);
        // Exit 1 blocks 50 ms in its first stage, in ten blocks of which three were walked
        // (ptrace_stop twice, do_exit once), and 1 ms in its second, none walked.
        for (stack, ns) in [(&ptrace, 5_000_000), (&ptrace, 5_000_000), (&inline, 10_000_000)] {
            stacks.record(&block(1, 1, ns, stack.clone()));
        }
        let e = exit(1, 50_000_000, 1_000_000);
        blocking.exit(&e);
        stacks.exit(&e, &profile.add(&e), false);
        // Exit 2 blocks 2 ms in its second stage, walked once (for 2 ms).
        let e = Exit { pid: 2, tgid: 2, ..exit(2, 0, 2_000_000) };
        stacks.record(&block(2, 2, 2_000_000, rwsem.clone()));
        blocking.exit(&e);
        stacks.exit(&e, &profile.add(&e), false);
        stacks.finish();
        let report = BlockedReport::of(blocking, &stacks, &profile, &symbols);
        assert_eq!(report.blocked_ns, 53_000_000);
        assert_eq!((report.blocked_exits, report.blocks, report.blocks_walked), (2, 4, 4));
        let rows: Vec<(String, String, u64, f64)> = report
            .stacks
            .iter()
            .map(|b| (b.stage.clone(), b.describe(3), b.blocks, b.est_ns))
            .collect();
        assert_eq!(
            rows,
            [
                (
                    "do_exit…taskstats_exit".to_owned(),
                    "ptrace_stop ← ptrace_notify ← do_exit".to_owned(),
                    2,
                    25e6
                ),
                (
                    "do_exit…taskstats_exit".to_owned(),
                    "synchronize_group_exit (inlined) ← do_exit".to_owned(),
                    1,
                    25e6
                ),
                (
                    "perf_event_exit_task…__schedule".to_owned(),
                    "rwsem_down_read_slowpath ← down_read ← do_exit".to_owned(),
                    1,
                    3e6
                ),
            ]
        );
        // Exit 1's late millisecond went into a stage where exit 2's block was walked.
        assert_eq!(report.unwalked_ns, 0);
        let total: f64 =
            report.stacks.iter().map(|b| b.est_ns).sum::<f64>() + report.unwalked_ns as f64;
        assert!((total - report.blocked_ns as f64).abs() < 1.0);
    }
}
