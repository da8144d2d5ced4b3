//! One exit's timeline, named: who exited, how long it took and where — every stage in order,
//! every block with its stack and length, every on-CPU sample — and its cause in a few words:
//! where it blocked most, or where it computed. What `--slower-than` prints as each slow exit
//! ends, and `report --exit` and `--slowest` from a record.

use std::collections::HashMap;

use serde::Serialize;

use crate::{
    analysis::{
        blocking::blocked_frames,
        exit_teardown::ExitTeardown,
        kept_exits::KeptExit,
        on_cpu::{EXIT_FRAME, HotPath, SAMPLING_FRAMES, exit_frames, heaviest_chain},
        profile::Profile,
        records::{ExitKind, StackKind},
        stages::span_after,
    },
    kernel::kallsyms::Kallsyms,
};

/// One exit, its timeline and its cause.
#[derive(Clone, Debug, Serialize)]
pub struct ExitTimeline {
    /// Thread and process ids as the kernel's initial PID namespace has them, and as
    /// exitprof's sees them (0 where the task is not in it).
    pub pid: u32,
    pub tgid: u32,
    pub ns_pid: u32,
    pub ns_tgid: u32,
    /// The thread's name and its process's.
    pub comm: String,
    pub process_comm: String,
    pub kind: ExitKind,
    /// Its cgroup v2 id, its path from the hierarchy's root and the workload it names (a
    /// container, a pod, a service), where known.
    pub cgroup_id: u64,
    pub cgroup: Option<String>,
    pub workload: Option<String>,
    /// When it ended (wall clock, seconds since the Unix epoch), where known.
    pub ended_at: Option<f64>,
    /// The CPU of its final switch-out.
    pub cpu: u32,
    /// Its first hit (the kernel's monotonic clock, ns): with `pid`, names the exit.
    pub start_ns: u64,
    /// The whole exit, and its parts on and off a CPU; off it, runnable (preempted) or
    /// blocked.
    pub duration_ns: u64,
    pub on_cpu_ns: u64,
    pub off_cpu_ns: u64,
    pub runq_ns: u64,
    pub blocked_ns: u64,
    /// Times it blocked (all of them, walked or not).
    pub blocks: u32,
    /// Where most of its time went: where it blocked most, or where it computed.
    pub cause: Cause,
    /// Every stage it went through, in order (a stage may come more than once).
    pub stages: Vec<TimelineStage>,
    /// Every block whose stack was walked, in order.
    pub blocked: Vec<TimelineBlock>,
    /// Blocked time of the blocks not walked (over the kernel side's budget of walks):
    /// `blocked` and this add up to `blocked_ns`.
    pub unwalked_blocked_ns: u64,
    /// Its on-CPU samples, in order.
    pub samples: Vec<TimelineSample>,
    /// The chain of calls most of its samples went through, and the function most of them
    /// were in, with its share of them.
    pub computed_in: Option<HotPath>,
    pub top_function: Option<(String, f64)>,
    /// Hits were lost for want of slots: the stages after the last one kept are unknown.
    pub truncated: bool,
    /// The teardowns of the namespaces it left, joined to it (in a record's views; as an exit
    /// ends they are not run yet, and `--slower-than` prints each as its own line when it is
    /// joined).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub teardowns: Vec<ExitTeardown>,
}

/// A stage of one exit.
#[derive(Clone, Debug, Serialize)]
pub struct TimelineStage {
    pub name: String,
    /// From the exit's start.
    pub at_ns: u64,
    pub ns: u64,
    pub off_cpu_ns: u64,
    pub runq_ns: u64,
}

/// A block of one exit.
#[derive(Clone, Debug, Serialize)]
pub struct TimelineBlock {
    /// The stage it blocked in (`null` where the record lacks the hits that place it).
    pub stage: Option<String>,
    /// From the exit's start to the switch-out.
    pub at_ns: u64,
    pub ns: u64,
    /// Innermost frame first, the scheduler left out, down to `do_exit`.
    pub stack: Vec<String>,
}

/// An on-CPU sample of one exit.
#[derive(Clone, Debug, Serialize)]
pub struct TimelineSample {
    pub stage: Option<String>,
    pub at_ns: u64,
    /// Innermost frame first, the sampling's own frames left out, down to `do_exit`.
    pub stack: Vec<String>,
}

/// What the timeline is told besides the exit: where it ran, and the clocks.
pub struct Context<'a> {
    pub profile: &'a Profile,
    pub symbols: &'a Kallsyms,
    /// The cgroup path of an id, where known.
    pub cgroup: &'a mut dyn FnMut(u64) -> Option<String>,
    /// The wall clock at monotonic 0 (seconds since the Unix epoch), where known.
    pub wall_at_zero: Option<f64>,
}

impl ExitTimeline {
    pub fn of(kept: &KeptExit, context: &mut Context<'_>) -> Self {
        let exit = &kept.exit;
        let start = exit.hits.first().map_or(0, |h| h.ts_ns);
        let stage_name = |index: usize| -> Option<String> {
            context.profile.stage(index).map(|(s, _)| s.name.clone())
        };
        let stages: Vec<TimelineStage> = kept
            .spans
            .iter()
            .zip(&exit.hits)
            .map(|(span, hit)| TimelineStage {
                name: stage_name(span.stage).unwrap_or_else(|| "?".to_owned()),
                at_ns: hit.ts_ns.saturating_sub(start),
                ns: span.ns,
                off_cpu_ns: span.off_cpu_ns,
                runq_ns: span.runq_ns,
            })
            .collect();
        let stage_of = |n_hits: u32| {
            let span = kept.spans.get(span_after(n_hits)?)?;
            Some(span.stage)
        };
        let (mut blocked, mut samples) = (Vec::new(), Vec::new());
        for s in &kept.stacks {
            let stage = stage_of(s.n_hits);
            let at_ns = s.ts_ns.saturating_sub(start);
            match s.kind {
                StackKind::Blocked => {
                    let waits_inline = stage
                        .and_then(|i| context.profile.stage(i))
                        .map(|(s, _)| s.waits_inline.as_slice())
                        .unwrap_or_default();
                    blocked.push(TimelineBlock {
                        stage: stage.and_then(stage_name),
                        at_ns,
                        ns: s.ns,
                        stack: blocked_frames(&s.stack, context.symbols, waits_inline),
                    });
                }
                StackKind::OnCpu => samples.push(TimelineSample {
                    stage: stage.and_then(stage_name),
                    at_ns,
                    stack: exit_frames(&s.stack, context.symbols, SAMPLING_FRAMES),
                }),
            }
        }
        blocked.sort_by_key(|b| b.at_ns);
        samples.sort_by_key(|s| s.at_ns);
        let weighed: Vec<(&[String], f64)> =
            samples.iter().map(|s| (s.stack.as_slice(), 1.0)).collect();
        let computed_in = heaviest_chain(&weighed, EXIT_FRAME);
        let top_function = top_function(&samples);
        let (duration_ns, off_cpu_ns, runq_ns) =
            (exit.duration_ns(), exit.off_cpu_ns(), exit.runq_ns());
        let blocked_ns = off_cpu_ns.saturating_sub(runq_ns);
        let walked: u64 = blocked.iter().map(|b| b.ns).sum();
        let cgroup = (context.cgroup)(exit.cgroup_id);
        let mut timeline = Self {
            pid: exit.pid,
            tgid: exit.tgid,
            ns_pid: exit.ns_pid,
            ns_tgid: exit.ns_tgid,
            comm: exit.comm.to_string(),
            process_comm: exit.process_comm.to_string(),
            kind: exit.kind(),
            cgroup_id: exit.cgroup_id,
            workload: cgroup.as_deref().map(super::groups::naming::workload_name),
            cgroup,
            ended_at: context.wall_at_zero.map(|zero| zero + exit.end_ns() as f64 / 1e9),
            cpu: exit.cpu,
            start_ns: start,
            duration_ns,
            on_cpu_ns: duration_ns.saturating_sub(off_cpu_ns),
            off_cpu_ns,
            runq_ns,
            blocked_ns,
            blocks: exit.blocks,
            cause: Cause::Runnable { ns: 0 },
            stages,
            blocked,
            unwalked_blocked_ns: blocked_ns.saturating_sub(walked),
            samples,
            computed_in,
            top_function,
            truncated: exit.truncated(),
            teardowns: Vec::new(),
        };
        timeline.cause = timeline.cause();
        timeline
    }

    /// Where the most of the exit's time went: blocked in a stack, waiting for a CPU, or
    /// computing in a chain of calls.
    fn cause(&self) -> Cause {
        let most = self.blocked_ns.max(self.runq_ns).max(self.on_cpu_ns);
        if most == self.blocked_ns && most > 0 {
            // The stack it blocked longest in, all its blocks there together.
            let mut by_stack: HashMap<&[String], u64> = HashMap::new();
            for b in &self.blocked {
                *by_stack.entry(b.stack.as_slice()).or_default() += b.ns;
            }
            let longest = by_stack.into_iter().max_by(|x, y| x.1.cmp(&y.1).then(y.0.cmp(x.0)));
            return Cause::Blocked {
                ns: self.blocked_ns,
                stack: longest.map(|(stack, _)| stack.to_vec()).unwrap_or_default(),
                stack_ns: longest.map_or(0, |(_, ns)| ns),
            };
        }
        if most == self.runq_ns && most > 0 {
            return Cause::Runnable { ns: self.runq_ns };
        }
        let (chain, share) = match (&self.computed_in, &self.top_function) {
            (Some(chain), _) => (chain.frames.clone(), chain.share),
            (None, Some((function, share))) => (vec![function.clone()], *share),
            (None, None) => (Vec::new(), 0.0),
        };
        Cause::Computed { ns: self.on_cpu_ns, chain, share, samples: self.samples.len() }
    }
}

/// Where most of an exit's time went.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Cause {
    /// Blocked (`ns` in all), longest in `stack` (`stack_ns` there; empty where no block's
    /// stack was walked).
    Blocked { ns: u64, stack: Vec<String>, stack_ns: u64 },
    /// Runnable, waiting for a CPU.
    Runnable { ns: u64 },
    /// On a CPU, most of its samples (`share`) in `chain` (innermost first; empty where no
    /// sample caught it).
    Computed { ns: u64, chain: Vec<String>, share: f64, samples: usize },
}

/// The function most samples were in (their innermost frame), and its share of them.
fn top_function(samples: &[TimelineSample]) -> Option<(String, f64)> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for s in samples {
        if let Some(f) = s.stack.first() {
            *counts.entry(f.as_str()).or_default() += 1;
        }
    }
    let (f, n) = counts.into_iter().max_by(|x, y| x.1.cmp(&y.1).then(y.0.cmp(x.0)))?;
    Some((f.to_owned(), n as f64 / samples.len() as f64))
}
