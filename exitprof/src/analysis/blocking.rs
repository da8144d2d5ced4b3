//! Where exiting tasks block: the kernel stack of each exit's longest block (switched out while
//! not runnable), named from kallsyms and added up by stack.

use std::collections::HashMap;

use serde::Serialize;

use crate::analysis::records::Exit;

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
    /// By stack id in the loaded object's map, until the stacks are named (ids are per object).
    by_id: HashMap<u32, Blocked>,
    /// By named stack (innermost frame first).
    by_stack: HashMap<Vec<String>, Blocked>,
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
    /// Exits whose longest block began here.
    pub exits: u64,
    /// Their longest blocks, summed.
    pub total_ns: u128,
    /// Of all the exits' longest blocks.
    pub share: f64,
}

impl Blocking {
    pub fn exit(&mut self, exit: &Exit) {
        if let Some(stack) = exit.block_stack {
            let b = self.by_id.entry(stack).or_default();
            b.exits += 1;
            b.ns += u128::from(exit.longest_block_ns);
        }
    }

    /// Names the stacks seen so far, while their map is still loaded: `frames` gives a stack's
    /// function names, innermost first.
    pub fn name_stacks(&mut self, frames: impl Fn(u32) -> Vec<String>) {
        for (id, b) in self.by_id.drain() {
            let names: Vec<String> = frames(id)
                .into_iter()
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

    fn exit(stack: Option<u32>, longest_block_ns: u64) -> Exit {
        Exit {
            pid: 2,
            tgid: 1,
            longest_block_ns,
            block_stack: stack,
            hits: Vec::new(),
            ..Exit::default()
        }
    }

    #[test]
    fn stacks_are_named_without_the_scheduler_and_ranked_by_time() {
        let mut b = Blocking::default();
        b.exit(&exit(Some(7), 300));
        b.exit(&exit(Some(7), 100));
        b.exit(&exit(Some(9), 600));
        b.exit(&exit(None, 0));
        b.name_stacks(|id| {
            let inner = if id == 7 { "rwsem_down_read_slowpath" } else { "mutex_lock" };
            ["bpf_prog_x", "__traceiter_sched_switch", "__schedule", "schedule", inner, "exit_mm"]
                .map(str::to_owned)
                .to_vec()
        });
        let r = b.report(5);
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].describe(3), r[0].exits, r[0].total_ns),
            ("mutex_lock ← exit_mm".into(), 1, 600)
        );
        assert_eq!((r[1].describe(1), r[1].exits), ("rwsem_down_read_slowpath".into(), 2));
        assert!((r[0].share - 0.6).abs() < 1e-12);
    }
}
