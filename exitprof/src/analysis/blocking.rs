//! Where exiting tasks block: the kernel stack of each exit's longest block (switched out while
//! not runnable), named from kallsyms and added up by stack.

use std::collections::HashMap;

use serde::Serialize;

use crate::{
    analysis::{
        on_cpu::exit_frames,
        profile::Profile,
        records::Exit,
        stages::{Span, span_after},
    },
    kernel::kallsyms::Kallsyms,
};

/// Frames of the scheduler and of exitprof's own probe (`?`: code kallsyms does not name, the
/// eBPF program itself), above where a task really blocked.
const SCHEDULER_FRAMES: &[&str] = &[
    "?",
    "bpf_",
    "__bpf_",
    "__traceiter_",
    "__schedule",
    "schedule",
    "preempt_schedule",
    "io_schedule",
];

/// Frames shown per stack.
const FRAMES_SHOWN: usize = 5;

/// Stacks where exits blocked, with how many exits and how long.
#[derive(Default)]
pub struct Blocking {
    /// By raw stack (return addresses, innermost first), until the stacks are named.
    by_raw: HashMap<Vec<u64>, Blocked>,
    /// By named stack (innermost frame first).
    by_stack: HashMap<Vec<String>, Blocked>,
    /// Blocked time by stage (index of the profile's stages) and raw stack, for flame graphs.
    by_stage: HashMap<(usize, Vec<u64>), u128>,
    /// Exits that blocked, and those of them whose longest block's stack was walked (the
    /// kernel side walks within a budget per second).
    pub blocked_exits: u64,
    pub walked_exits: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Blocked {
    exits: u64,
    ns: u128,
}

/// One stack where exits blocked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BlockedIn {
    /// Innermost frame first, the scheduler left out.
    pub stack: Vec<String>,
    /// Exits whose longest walked block began here.
    pub exits: u64,
    /// Those blocks, summed.
    pub total_ns: u128,
    /// Of all the walked blocks' time.
    pub share: f64,
}

/// The time exits blocked in one stack of one stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedByStage {
    pub stage: String,
    /// Innermost frame first, the scheduler left out, down to `do_exit`.
    pub stack: Vec<String>,
    pub total_ns: u128,
}

impl Blocking {
    /// An exit, with the spans the profile cut it into (which place its block in a stage).
    pub fn exit(&mut self, exit: &Exit, spans: &[Span]) {
        if let Some(block) = &exit.block
            && let Some(span) = span_after(block.after_hits).and_then(|i| spans.get(i))
        {
            *self.by_stage.entry((span.stage, block.stack.clone())).or_default() +=
                u128::from(block.ns);
        }
        if exit.longest_block_ns > 0 {
            self.blocked_exits += 1;
        }
        if let Some(block) = &exit.block {
            self.walked_exits += 1;
            let b = self.by_raw.entry(block.stack.clone()).or_default();
            b.exits += 1;
            b.ns += u128::from(block.ns);
        }
    }

    /// Names the stacks seen so far: `name` gives the function an address lies in.
    pub fn name_stacks(&mut self, name: impl Fn(u64) -> String) {
        for (stack, b) in self.by_raw.drain() {
            let names: Vec<String> = stack
                .into_iter()
                .map(&name)
                .skip_while(|f| SCHEDULER_FRAMES.iter().any(|s| f.starts_with(s)))
                .take(FRAMES_SHOWN)
                .collect();
            let named = self.by_stack.entry(names).or_default();
            named.exits += b.exits;
            named.ns += b.ns;
        }
    }

    /// The `top` stacks by blocked time.
    pub fn report(&self, top: usize) -> Vec<BlockedIn> {
        let total: u128 = self.by_stack.values().map(|b| b.ns).sum();
        let mut stacks: Vec<BlockedIn> = self
            .by_stack
            .iter()
            .map(|(stack, b)| BlockedIn {
                stack: stack.clone(),
                exits: b.exits,
                total_ns: b.ns,
                share: if total == 0 { 0.0 } else { b.ns as f64 / total as f64 },
            })
            .collect();
        stacks.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.stack.cmp(&b.stack)));
        stacks.truncate(top);
        stacks
    }
}

impl Blocking {
    /// Blocked time by stage and named stack, most first.
    pub fn by_stage(&self, profile: &Profile, symbols: &Kallsyms) -> Vec<BlockedByStage> {
        let mut named: HashMap<(usize, Vec<String>), u128> = HashMap::new();
        for ((stage, stack), &ns) in &self.by_stage {
            *named.entry((*stage, exit_frames(stack, symbols, SCHEDULER_FRAMES))).or_default() +=
                ns;
        }
        let mut stacks: Vec<BlockedByStage> = named
            .into_iter()
            .filter_map(|((stage, stack), total_ns)| {
                let (stage, _) = profile.stage(stage)?;
                Some(BlockedByStage { stage: stage.name.clone(), stack, total_ns })
            })
            .collect();
        stacks.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.stack.cmp(&b.stack)));
        stacks
    }
}

impl BlockedIn {
    /// `rwsem_down_read_slowpath ← down_read ← exit_mm`: where it blocked, called from where.
    pub fn describe(&self, frames: usize) -> String {
        if self.stack.is_empty() {
            return "(stack unknown)".to_owned();
        }
        self.stack.iter().take(frames).map(String::as_str).collect::<Vec<_>>().join(" ← ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::records::Block;

    fn exit(stack: Option<&[u64]>, ns: u64) -> Exit {
        Exit {
            pid: 2,
            tgid: 1,
            longest_block_ns: ns,
            block: stack.map(|s| Block { stack: s.to_vec(), ns, after_hits: 1 }),
            ..Exit::default()
        }
    }

    #[test]
    fn stacks_are_named_without_the_scheduler_and_ranked_by_time() {
        let mut b = Blocking::default();
        b.exit(&exit(Some(&[1, 2, 3, 7, 8]), 300), &[]);
        b.exit(&exit(Some(&[1, 2, 3, 7, 8]), 100), &[]);
        b.exit(&exit(Some(&[1, 2, 3, 9, 8]), 600), &[]);
        b.exit(&exit(None, 50), &[]);
        b.exit(&exit(None, 0), &[]);
        b.name_stacks(|ip| {
            match ip {
                1 => "__traceiter_sched_switch",
                2 => "__schedule",
                3 => "schedule",
                7 => "rwsem_down_read_slowpath",
                9 => "mutex_lock",
                _ => "exit_mm",
            }
            .to_owned()
        });
        let r = b.report(5);
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].describe(3), r[0].exits, r[0].total_ns),
            ("mutex_lock ← exit_mm".into(), 1, 600)
        );
        assert_eq!((r[1].describe(1), r[1].exits), ("rwsem_down_read_slowpath".into(), 2));
        assert!((r[0].share - 0.6).abs() < 1e-12);
        assert_eq!((b.blocked_exits, b.walked_exits), (4, 3));
    }

    /// Distinct stacks never merge under one name unless their named frames are the same: they
    /// are kept apart by their addresses until named (no stack map, no hash collisions).
    #[test]
    fn many_distinct_stacks_keep_their_own_names() {
        let mut b = Blocking::default();
        for i in 0..5_000u64 {
            b.exit(&exit(Some(&[100 + i, 9_999]), i + 1), &[]);
        }
        b.name_stacks(|ip| format!("f{ip}"));
        let r = b.report(usize::MAX);
        assert_eq!(r.len(), 5_000);
        for s in &r {
            let ip: u64 = s.stack[0][1..].parse().unwrap();
            assert_eq!(s.total_ns, u128::from(ip - 100 + 1), "{s:?}");
        }
    }

    #[test]
    fn blocked_time_is_placed_in_the_stage_the_block_lay_in() {
        use exitprof_common::point::{Marker, Point};

        use crate::{
            analysis::{records::PointHit, stages::tests::plan},
            kernel::version::KernelVersion,
            probes::plan::{How, SiteId},
        };
        let plan = plan(
            KernelVersion::new(6, 18, 0),
            &[
                (SiteId::Marker(Marker::SysEnterExit), How::Tracepoint, "syscalls:sys_enter_exit"),
                (SiteId::Marker(Marker::SchedProcessExit), How::BtfTracepoint, "x"),
                (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
            ],
        );
        let mut profile = Profile::new(&plan);
        let symbols = Kallsyms::parse(
            "ffffffff81000000 T __schedule\nffffffff81000100 T rwsem_down_read_slowpath\n\
             ffffffff81000200 T down_read\nffffffff81000300 T do_exit\n\
             ffffffff81000400 T __x64_sys_exit\n"
                .as_bytes(),
        )
        .unwrap();
        let hit = |point, ts_ns| PointHit { point, ts_ns, off_cpu_ns: 0, runq_ns: 0 };
        let mut e = exit(Some(&[0xffffffff81000010, 0xffffffff81000110, 0xffffffff81000210]), 0);
        e.block.as_mut().unwrap().stack.extend([0xffffffff81000310, 0xffffffff81000410]);
        e.block.as_mut().unwrap().after_hits = 2;
        e.block.as_mut().unwrap().ns = 7_000;
        e.hits = vec![
            hit(Point::Marker(Marker::SysEnterExit), 0),
            hit(Point::Marker(Marker::SchedProcessExit), 1_000),
            hit(Point::Marker(Marker::FinalSwitch), 9_000),
        ];
        let mut b = Blocking::default();
        let spans = profile.add(&e);
        b.exit(&e, &spans);
        assert_eq!(
            b.by_stage(&profile, &symbols),
            [BlockedByStage {
                stage: "perf_event_exit_task…__schedule".to_owned(),
                stack: ["rwsem_down_read_slowpath", "down_read", "do_exit"]
                    .map(str::to_owned)
                    .to_vec(),
                total_ns: 7_000,
            }]
        );
    }
}
