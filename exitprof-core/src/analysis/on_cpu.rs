//! Where exits compute: the kernel stacks the sampling clock caught inside followed exits
//! (joined to their exits by [`ExitStacks`]), by the stage the exit was in, named from kallsyms.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::{
    analysis::{
        exit_stacks::{ExitStacks, JoinCounts},
        profile::Profile,
        records::StackKind,
    },
    kernel::kallsyms::Kallsyms,
};

/// The frame a stack is cut at: the exit itself. Frames outside it (the syscall or signal
/// delivery that called it) are the same for every exit and say nothing.
pub const EXIT_FRAME: &str = "do_exit";
/// What calls `do_exit`, on x86_64 and arm64 (a record is read on either): the exit system
/// calls, the group exit, signal delivery, an oops. A stack that has one of them but not
/// `do_exit` lost it: arm64's unwinder follows the frame records functions save, and a function
/// caught in its first instructions, before it saved its own (where its kprobe or fentry
/// trampoline has just run, say), hides its caller. Such a stack is cut there, `do_exit` put
/// back in its place.
const CALLERS_OF_EXIT: &[&str] = &[
    "do_group_exit",
    "__x64_sys_exit",
    "__x64_sys_exit_group",
    "__arm64_sys_exit",
    "__arm64_sys_exit_group",
    "get_signal",
    "make_task_dead",
];
/// Frames of the sampling itself (the timer interrupt, perf and the eBPF program) that can sit
/// innermost, above the code that was interrupted; `?` is code kallsyms does not name.
pub const SAMPLING_FRAMES: &[&str] = &[
    "?",
    "bpf_",
    "__bpf_",
    "perf_",
    "__perf_",
    "___perf_",
    "__hrtimer_run_queues",
    "hrtimer_interrupt",
    "__sysvec_apic_timer_interrupt",
];
/// A hot path goes on into a callee while that callee holds at least this share of the stage's
/// samples: the chain it names is where most of the stage's CPU time goes.
const HOT_PATH_SHARE: f64 = 0.5;

impl OnCpuReport {
    /// The samples by stage, stacks named and trimmed, most sampled stage first; each stack's
    /// estimated time is its share of the stage's samples times the stage's on-CPU time in
    /// `profile`.
    pub fn of(stacks: &ExitStacks, profile: &Profile, symbols: &Kallsyms) -> Self {
        let mut by_stage: BTreeMap<usize, HashMap<Vec<String>, u64>> = BTreeMap::new();
        for (stage, stack, tally) in stacks.tallies(StackKind::OnCpu) {
            let named = exit_frames(stack, symbols, SAMPLING_FRAMES);
            *by_stage.entry(stage).or_default().entry(named).or_default() += tally.count;
        }
        let mut stages: Vec<StageOnCpu> = by_stage
            .into_iter()
            .filter_map(|(index, stacks)| {
                let (stage, latency) = profile.stage(index)?;
                let on_cpu_ns = latency.total_ns.saturating_sub(latency.off_cpu_ns);
                Some(StageOnCpu::new(stage.name.clone(), on_cpu_ns, stacks))
            })
            .collect();
        stages.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.stage.cmp(&b.stage)));
        Self { sampled: stacks.samples, stages }
    }
}

/// A raw stack's function names, innermost first: frames starting with one of `innermost` (the
/// machinery that took the stack) left out at the innermost end, and everything outside the exit
/// (above `do_exit`, or where `do_exit` was lost, above [`CALLERS_OF_EXIT`]) cut off.
pub fn exit_frames(stack: &[u64], symbols: &Kallsyms, innermost: &[&str]) -> Vec<String> {
    let mut frames = frames_within(stack, symbols, innermost, EXIT_FRAME);
    if !frames.iter().any(|f| f == EXIT_FRAME)
        && let Some(caller) = frames.iter().position(|f| CALLERS_OF_EXIT.contains(&f.as_str()))
    {
        frames.truncate(caller);
        frames.push(EXIT_FRAME.to_owned());
    }
    frames
}

/// A raw stack's function names, innermost first: frames starting with one of `innermost` left
/// out at the innermost end, and everything outside `outermost` (the function whose work the
/// stack is part of) cut off.
pub fn frames_within(
    stack: &[u64],
    symbols: &Kallsyms,
    innermost: &[&str],
    outermost: &str,
) -> Vec<String> {
    let names = stack.iter().map(|&a| symbols.name_of(a).unwrap_or("?"));
    let mut frames: Vec<String> = names
        .skip_while(|f| innermost.iter().any(|s| f.starts_with(s)))
        .map(str::to_owned)
        .collect();
    // An arm64 fentry trampoline (not in kallsyms) between the probed function and the frame
    // record it makes for it, which names the function again: the function once.
    let mut at = 1;
    while at + 1 < frames.len() {
        if frames[at] == "?" && frames[at - 1] == frames[at + 1] {
            frames.drain(at..at + 2);
        } else {
            at += 1;
        }
    }
    if let Some(outer) = frames.iter().position(|f| f == outermost) {
        frames.truncate(outer + 1);
    }
    frames
}

/// The samples of a run (or of one side of a comparison), by stage.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OnCpuReport {
    pub sampled: JoinCounts,
    /// Stages with samples, most sampled first.
    pub stages: Vec<StageOnCpu>,
}

/// The samples of one stage.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageOnCpu {
    pub stage: String,
    pub samples: u64,
    /// The stage's on-CPU time over all exits, which its samples share out between stacks.
    pub on_cpu_ns: u128,
    /// The chain most of its samples go through, if any callee of `do_exit` holds most of them.
    pub mostly_in: Option<HotPath>,
    /// Every stack sampled in it, most samples first.
    pub stacks: Vec<OnCpuIn>,
}

/// A stack the sampling clock caught an exit in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OnCpuIn {
    /// Innermost frame first, down to `do_exit`.
    pub stack: Vec<String>,
    pub samples: u64,
    /// Of the stage's samples.
    pub share: f64,
    /// The stage's on-CPU time times `share`.
    pub est_ns: f64,
}

/// The deepest chain of calls from `do_exit` that most of a stage's samples go through.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HotPath {
    /// Innermost first, `do_exit` left out.
    pub frames: Vec<String>,
    /// Of the stage's samples, those in its innermost frame (or deeper).
    pub share: f64,
}

impl StageOnCpu {
    fn new(stage: String, on_cpu_ns: u128, stacks: HashMap<Vec<String>, u64>) -> Self {
        let samples: u64 = stacks.values().sum();
        let mut rows: Vec<OnCpuIn> = stacks
            .into_iter()
            .map(|(stack, n)| {
                let share = n as f64 / samples as f64;
                OnCpuIn { stack, samples: n, share, est_ns: share * on_cpu_ns as f64 }
            })
            .collect();
        rows.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.stack.cmp(&b.stack)));
        let weighed: Vec<(&[String], f64)> =
            rows.iter().map(|r| (r.stack.as_slice(), r.samples as f64)).collect();
        let mostly_in = heaviest_chain(&weighed, EXIT_FRAME);
        Self { stage, samples, on_cpu_ns, mostly_in, stacks: rows }
    }
}

/// The deepest chain of calls (innermost first, as stacks are) that holds most of the weight of
/// `stacks`: from the outermost frame in, the callee that holds the most weight, as long as it
/// holds at least [`HOT_PATH_SHARE`] of it all. `outermost` (the function they all are in:
/// `do_exit`, a teardown's work function) is left out of the chain. What a stage's samples mostly
/// go through, or (weighed by their change) where a diff's time moved.
pub fn heaviest_chain(stacks: &[(&[String], f64)], outermost: &str) -> Option<HotPath> {
    let total: f64 = stacks.iter().map(|(_, w)| w.max(0.0)).sum();
    if total <= 0.0 {
        return None;
    }
    let mut path: Vec<&str> = Vec::new();
    let mut held = total;
    loop {
        // Weight of each next frame among the stacks that go through `path`.
        let mut next: HashMap<&str, f64> = HashMap::new();
        for (stack, weight) in stacks.iter().filter(|(_, w)| *w > 0.0) {
            let mut outward = stack.iter().rev().map(String::as_str);
            if outward.by_ref().take(path.len()).eq(path.iter().copied())
                && let Some(frame) = outward.next()
            {
                *next.entry(frame).or_default() += weight;
            }
        }
        let best = next.into_iter().max_by(|a, b| a.1.total_cmp(&b.1).then_with(|| b.0.cmp(a.0)));
        match best {
            Some((frame, w)) if w >= HOT_PATH_SHARE * total => {
                path.push(frame);
                held = w;
            }
            _ => break,
        }
    }
    let frames: Vec<String> =
        path.iter().rev().filter(|&&f| f != outermost).map(|&f| f.to_owned()).collect();
    (!frames.is_empty()).then(|| HotPath { frames, share: held / total })
}

/// `unmap_vmas ← exit_mmap ← __mmput ← exit_mm`: frames, innermost first, called from where.
pub fn describe_chain(frames: &[String], shown: usize) -> String {
    if frames.is_empty() {
        return "(stack unknown)".to_owned();
    }
    frames.iter().take(shown).map(String::as_str).collect::<Vec<_>>().join(" ← ")
}

#[cfg(test)]
mod tests {
    use exitprof_common::point::{ExitFn, Marker, Point};

    use super::*;
    use crate::probes::plan::Plan;
    use crate::{
        analysis::records::{Exit, ExitKey, KernelStack, PointHit},
        kernel::version::KernelVersion,
        probes::plan::{How, SiteId},
    };

    /// kallsyms as this host lists the functions of an mm teardown, with made-up addresses
    /// 0x100 apart.
    const KALLSYMS: &str = "\
ffffffff81000000 T asm_sysvec_apic_timer_interrupt
ffffffff81000100 T __sysvec_apic_timer_interrupt
ffffffff81000200 t hrtimer_interrupt
ffffffff81000300 t perf_swevent_hrtimer
ffffffff81000400 T zap_pte_range
ffffffff81000500 T unmap_page_range
ffffffff81000600 T unmap_vmas
ffffffff81000700 T free_pgtables
ffffffff81000800 T exit_mmap
ffffffff81000900 T __mmput
ffffffff81000a00 T do_exit
ffffffff81000b00 T do_group_exit
ffffffff81000c00 T __x64_sys_exit_group
ffffffff81000d00 T do_syscall_64
ffffffff81000e00 T put_files_struct
ffffffff81000f00 T filp_close
";

    fn symbols() -> Kallsyms {
        Kallsyms::parse(KALLSYMS.as_bytes()).unwrap()
    }

    /// The address 0x10 into a function of [`KALLSYMS`].
    fn at(name: &str) -> u64 {
        symbols().address(name).unwrap() + 0x10
    }

    fn stack(names: &[&str]) -> Vec<u64> {
        names.iter().map(|n| at(n)).collect()
    }

    const OUTSIDE: [&str; 3] = ["do_group_exit", "__x64_sys_exit_group", "do_syscall_64"];

    /// A stack under `do_exit` as sampled, with the syscall entry above it.
    fn exit_stack(inner: &[&str]) -> Vec<u64> {
        let mut names = inner.to_vec();
        names.push("do_exit");
        names.extend(OUTSIDE);
        stack(&names)
    }

    /// A profile of the tracepoint plan of 6.18: sys_enter_exit, sched_process_exit,
    /// x86_fpu_dropped, final switch.
    fn profile() -> Profile {
        let plan = Plan::with_sites(
            KernelVersion::new(6, 18, 0),
            &[
                (SiteId::Marker(Marker::SysEnterExit), How::Tracepoint, "syscalls:sys_enter_exit"),
                (SiteId::Marker(Marker::SchedProcessExit), How::BtfTracepoint, "x"),
                (SiteId::Marker(Marker::X86FpuDropped), How::BtfTracepoint, "x"),
                (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
            ],
        );
        Profile::new(&plan)
    }

    /// An exit of `pid` starting at `start`: 1 µs to sched_process_exit, 100 µs (10 µs of them
    /// off-CPU) to x86_fpu_dropped, 2 µs to the end.
    fn exit(pid: u32, start: u64) -> Exit {
        let hit = |point, at: u64, off_cpu_ns| PointHit {
            point,
            ts_ns: start + at,
            off_cpu_ns,
            runq_ns: 0,
        };
        Exit {
            pid,
            tgid: pid,
            hits: vec![
                hit(Point::Marker(Marker::SysEnterExit), 0, 0),
                hit(Point::Marker(Marker::SchedProcessExit), 1_000, 0),
                hit(Point::Marker(Marker::X86FpuDropped), 101_000, 10_000),
                hit(Point::Marker(Marker::FinalSwitch), 103_000, 10_000),
            ],
            ..Exit::default()
        }
    }

    fn sample(pid: u32, start: u64, n_hits: u32, ts: u64, stack: Vec<u64>) -> KernelStack {
        KernelStack {
            kind: StackKind::OnCpu,
            exit: ExitKey { pid, start_ns: start },
            n_hits,
            ts_ns: start + ts,
            ns: 0,
            stack,
        }
    }

    /// Folds the exit into the profile and its samples into `on_cpu`, as the session does.
    fn fold(profile: &mut Profile, on_cpu: &mut ExitStacks, exit: &Exit) {
        let spans = profile.add(exit);
        on_cpu.exit(exit, &spans, false);
    }

    #[test]
    fn samples_join_their_exit_under_the_stage_they_were_taken_in() {
        let (mut profile, mut on_cpu) = (profile(), ExitStacks::default());
        let zap = exit_stack(&["zap_pte_range", "unmap_page_range", "unmap_vmas", "exit_mmap"]);
        let pgt = exit_stack(&["free_pgtables", "exit_mmap"]);
        // Two exits; the second's samples arrive before the first's record.
        for _ in 0..3 {
            on_cpu.record(&sample(7, 1_000, 2, 50_000, zap.clone()));
        }
        on_cpu.record(&sample(7, 1_000, 2, 60_000, pgt.clone()));
        on_cpu.record(&sample(8, 5_000, 2, 10_000, zap.clone()));
        // In the first stage of exit 8, and in the last one of exit 7.
        on_cpu.record(&sample(8, 5_000, 1, 500, stack(&["put_files_struct", "do_exit"])));
        on_cpu.record(&sample(7, 1_000, 3, 102_000, stack(&["do_exit"])));
        // A sample of an exit whose record never comes.
        on_cpu.record(&sample(9, 1_000, 2, 1, zap.clone()));
        fold(&mut profile, &mut on_cpu, &exit(7, 1_000));
        // One read after its exit's record.
        on_cpu.record(&sample(7, 1_000, 2, 70_000, zap.clone()));
        fold(&mut profile, &mut on_cpu, &exit(8, 5_000));
        // The same pid's next exit has samples of its own: none of the first's.
        fold(&mut profile, &mut on_cpu, &exit(7, 900_000));
        on_cpu.finish();
        assert_eq!(on_cpu.samples, JoinCounts { joined: 8, unjoined: 1, unplaced: 0 });

        let report = OnCpuReport::of(&on_cpu, &profile, &symbols());
        let stages: Vec<(&str, u64)> =
            report.stages.iter().map(|s| (s.stage.as_str(), s.samples)).collect();
        assert_eq!(
            stages,
            [
                ("perf_event_exit_task…exit_thread", 6),
                ("do_exit…taskstats_exit", 1),
                ("sched_autogroup_exit_task…__schedule", 1)
            ]
        );
        let mm = &report.stages[0];
        // Three exits of 100 µs with 10 µs off-CPU: 270 µs on-CPU.
        assert_eq!(mm.on_cpu_ns, 270_000);
        let top = &mm.stacks[0];
        assert_eq!(
            top.stack,
            ["zap_pte_range", "unmap_page_range", "unmap_vmas", "exit_mmap", "do_exit"]
        );
        assert_eq!(top.samples, 5);
        let share = 5.0 / 6.0;
        assert!((top.share - share).abs() < 1e-12 && (top.est_ns - share * 270e3).abs() < 1e-6);
        assert_eq!(mm.stacks[1].stack, ["free_pgtables", "exit_mmap", "do_exit"]);
        let hot = mm.mostly_in.as_ref().unwrap();
        assert_eq!(
            describe_chain(&hot.frames, 9),
            "zap_pte_range ← unmap_page_range ← unmap_vmas ← exit_mmap"
        );
        assert!((hot.share - share).abs() < 1e-12);
    }

    #[test]
    fn a_hot_path_stops_where_no_callee_holds_most_samples() {
        let (mut profile, mut on_cpu) = (profile(), ExitStacks::default());
        let zap = exit_stack(&["zap_pte_range", "unmap_vmas", "exit_mmap"]);
        let pgt = exit_stack(&["free_pgtables", "exit_mmap"]);
        let files = exit_stack(&["filp_close", "put_files_struct"]);
        for (stack, n) in [(&zap, 4), (&pgt, 3), (&files, 3)] {
            for _ in 0..n {
                on_cpu.record(&sample(7, 1_000, 2, 50_000, stack.clone()));
            }
        }
        fold(&mut profile, &mut on_cpu, &exit(7, 1_000));
        let report = OnCpuReport::of(&on_cpu, &profile, &symbols());
        let hot = report.stages[0].mostly_in.as_ref().unwrap();
        assert_eq!(hot.frames, ["exit_mmap"]);
        assert!((hot.share - 0.7).abs() < 1e-12);
    }

    #[test]
    fn the_sampling_frames_and_the_syscall_entry_are_trimmed() {
        let raw = stack(&[
            "perf_swevent_hrtimer",
            "hrtimer_interrupt",
            "__sysvec_apic_timer_interrupt",
            "zap_pte_range",
            "do_exit",
            "do_group_exit",
        ]);
        assert_eq!(exit_frames(&raw, &symbols(), SAMPLING_FRAMES), ["zap_pte_range", "do_exit"]);
        // Unknown code innermost is the sampling's; outermost it stays, and so does a stack that
        // never reached do_exit (deeper than the frames kept).
        let raw = [0x10, at("unmap_vmas"), 0x20];
        assert_eq!(exit_frames(&raw, &symbols(), SAMPLING_FRAMES), ["unmap_vmas", "?"]);
    }

    /// As arm64's unwinder walks a function caught before it saved its frame record: its caller,
    /// do_exit, is not in the stack.
    #[test]
    fn a_stack_that_lost_do_exit_is_cut_at_its_caller() {
        let raw = stack(&["put_files_struct", "do_group_exit", "__x64_sys_exit_group"]);
        assert_eq!(exit_frames(&raw, &symbols(), SAMPLING_FRAMES), ["put_files_struct", "do_exit"]);
        // With do_exit there, only what is above it goes.
        let raw = exit_stack(&["put_files_struct"]);
        assert_eq!(exit_frames(&raw, &symbols(), SAMPLING_FRAMES), ["put_files_struct", "do_exit"]);
    }

    /// As arm64 walks a function probed by fentry: the function, its trampoline (unnamed), the
    /// frame record the trampoline made for the function, then its caller.
    #[test]
    fn an_fentry_trampoline_between_a_function_and_itself_is_left_out() {
        let mut raw =
            exit_stack(&["filp_close", "put_files_struct", "filp_close", "put_files_struct"]);
        raw[2] = 0x20; // the trampoline: "?"
        assert_eq!(
            exit_frames(&raw, &symbols(), SAMPLING_FRAMES),
            ["filp_close", "put_files_struct", "do_exit"]
        );
    }

    #[test]
    fn samples_that_cannot_join_are_counted() {
        let (mut profile, mut on_cpu) = (profile(), ExitStacks::default());
        let s = stack(&["do_exit"]);
        // Expired: a sample older than the wait limit by the samples' clock, when the next one
        // comes; its exit's record comes too late.
        on_cpu.record(&sample(4, 1_000, 1, 10, s.clone()));
        let late = crate::analysis::exit_stacks::WAIT_LIMIT_NS + 10_000;
        on_cpu.record(&sample(5, late, 1, 10, s.clone()));
        // More hits than the record holds, and none at all.
        on_cpu.record(&sample(7, late, 9, 10, s.clone()));
        on_cpu.record(&sample(7, late, 0, 10, s.clone()));
        fold(&mut profile, &mut on_cpu, &exit(7, late));
        fold(&mut profile, &mut on_cpu, &exit(4, 1_000));
        assert_eq!(on_cpu.samples, JoinCounts { joined: 0, unjoined: 1, unplaced: 2 });
        on_cpu.finish();
        assert_eq!(on_cpu.samples.unjoined, 2);
        assert!(OnCpuReport::of(&on_cpu, &profile, &symbols()).stages.is_empty());
    }

    #[test]
    fn functions_probed_in_kprobe_mode_are_stages_of_their_own() {
        let plan = Plan::with_sites(
            KernelVersion::new(6, 12, 0),
            &[
                (SiteId::Marker(Marker::DoExit), How::Kprobe, "do_exit"),
                (SiteId::Function(ExitFn::ExitFiles), How::Kprobe, "exit_files"),
                (SiteId::Marker(Marker::FinalSwitch), How::BtfTracepoint, "sched_switch"),
            ],
        );
        let (mut profile, mut on_cpu) = (Profile::new(&plan), ExitStacks::default());
        let hit = |point, ts_ns| PointHit { point, ts_ns, off_cpu_ns: 0, runq_ns: 0 };
        let e = Exit {
            pid: 7,
            tgid: 7,
            hits: vec![
                hit(Point::Marker(Marker::DoExit), 100),
                hit(Point::Enter(ExitFn::ExitFiles), 200),
                hit(Point::Return(ExitFn::ExitFiles), 5_200),
                hit(Point::Marker(Marker::FinalSwitch), 5_300),
            ],
            ..Exit::default()
        };
        let files = exit_stack(&["filp_close", "put_files_struct"]);
        on_cpu.record(&sample(7, 100, 2, 3_000, files));
        fold(&mut profile, &mut on_cpu, &e);
        let report = OnCpuReport::of(&on_cpu, &profile, &symbols());
        assert_eq!(report.stages[0].stage, "exit_files");
        assert_eq!(report.stages[0].stacks[0].est_ns, 5_000.0);
    }
}
