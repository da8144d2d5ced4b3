//! Resolving the probe plan on the running kernel: per site of the table (`sites.rs`),
//! fentry/fexit where tracing programs load and BTF has the function, kprobe/kretprobe where the
//! symbol exists and kprobes do, tracepoints otherwise — or exactly the mode the user forced,
//! failing clearly where it cannot work.

use std::collections::HashSet;

use exitprof_common::{names::programs, point::Marker};

use crate::kernel::{KernelFacts, exit_path::ExitPath, marker_name, version::KernelVersion};
use crate::probes::{
    plan::{AttachMode, Plan, Planned, Unplanned, Wants},
    sites::{DeferredSite, Hook, How, SITES, Site, SiteId, site_of, work_function_of},
};

/// Since v6.16 `fpu__drop` returns before `x86_fpu_dropped` for a task whose FPU registers were
/// saved since it last left user space (`TIF_NEED_FPU_LOAD`: it was switched out, preempted or
/// asleep): the tracepoint marks an exit or not as the exit was scheduled. A stage bounded by it
/// would cover different kernel work in different exits (the teardown of a preempted exit lands
/// in a stage that also covers `exit_mm`, the others' in one that ends at `exit_thread`), and
/// per-stage figures would be over different sets of exits: it is left out there. Before
/// v6.16 it fires for every exit (5.10, 6.1 and 6.12 read alike).
const FPU_DROP_SKIPPED_SINCE: KernelVersion = KernelVersion::new(6, 16, 0);
const FPU_DROP_SKIPPED: &str = "fpu__drop skips it for an exit switched out since it left user \
     space (TIF_NEED_FPU_LOAD, v6.16): a stage it bounded would depend on preemption, so it is \
     left out and exit_thread's time is in the stage that ends at the exit's end";

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("--attach kprobe: {why}; use {instead} (or auto)")]
    NoKprobes { why: String, instead: &'static str },
    #[error("--attach fentry: {why}; use {instead} (or auto)")]
    NoFentry { why: String, instead: &'static str },
    #[error("no way to time the {what} of an exit on this kernel: {why}")]
    MissingBoundary { what: &'static str, why: String },
}

/// Resolves every site for the running kernel in the given mode.
pub fn for_kernel(facts: &KernelFacts, mode: AttachMode, wants: Wants) -> Result<Plan, PlanError> {
    // A refusal names only the modes this kernel has.
    let instead = |other: &Result<(), String>, other_mode| match other {
        Ok(()) => other_mode,
        Err(_) => "--attach tracepoint",
    };
    match mode {
        AttachMode::Kprobe => facts.kprobes.clone().map_err(|why| PlanError::NoKprobes {
            why,
            instead: instead(&facts.fentry, "--attach fentry or --attach tracepoint"),
        })?,
        AttachMode::Fentry => facts.fentry.clone().map_err(|why| PlanError::NoFentry {
            why,
            instead: instead(&facts.kprobes, "--attach kprobe or --attach tracepoint"),
        })?,
        AttachMode::Auto | AttachMode::Tracepoint => {}
    }
    look_up_types(facts, mode);
    let mut points = Vec::new();
    let mut unavailable = Vec::new();
    for site in SITES {
        if site.id == SiteId::Deferred(DeferredSite::Kfree) && !wants.ipc_frees_via_kfree {
            unavailable.push(Unplanned {
                point: site.id.name().to_owned(),
                reason: "fires on every kfree of the machine: attached for the ipcns \
                         workload only"
                    .to_owned(),
            });
            continue;
        }
        match resolve_site(facts, mode, wants, site) {
            Ok(planned) => points.push(planned),
            Err(reason) => {
                unavailable.push(Unplanned { point: site.id.name().to_owned(), reason });
            }
        }
    }
    // A fallback is dropped where what it stands in for is probed.
    let probed: HashSet<SiteId> = points.iter().map(|p: &Planned| p.site).collect();
    let mut kept = Vec::new();
    for mut planned in points {
        let site = site_of(planned.site);
        match site.fallback_for {
            Some(primary) if probed.contains(&primary) => unavailable.push(Unplanned {
                point: planned.point.to_owned(),
                reason: format!("not needed: {} is probed", primary.name()),
            }),
            Some(primary) => {
                // Say what it stands in for, and why that could not be probed.
                let why = unavailable.iter().find(|u| u.point == primary.name());
                planned.note = Some(match why {
                    Some(u) => format!("stands in for {}: {}", u.point, u.reason),
                    None => format!("stands in for {}", primary.name()),
                });
                kept.push(planned);
            }
            None => kept.push(planned),
        }
    }
    let plan = Plan {
        kernel: facts.release.clone(),
        mode,
        object: facts.object.clone(),
        points: kept,
        unavailable,
        exit_path: ExitPath::for_kernel(facts.version),
    };
    // Without a start marker, an exit is timed from the first exit-only point it reaches.
    require(
        &plan,
        "start",
        &[
            Marker::DoExit,
            Marker::SysEnterExit,
            Marker::SysEnterExitGroup,
            Marker::SchedProcessExit,
        ],
    )?;
    require(&plan, "end", &[Marker::FinalSwitch])?;
    Ok(plan)
}

/// Fails unless the plan probes one of `any_of`, naming why each was left out.
fn require(plan: &Plan, what: &'static str, any_of: &[Marker]) -> Result<(), PlanError> {
    if plan.points.iter().any(|p| any_of.iter().any(|m| p.site == SiteId::Marker(*m))) {
        return Ok(());
    }
    let why = plan
        .unavailable
        .iter()
        .filter(|u| any_of.iter().any(|m| marker_name(*m) == u.point))
        .map(|u| format!("{}: {}", u.point, u.reason))
        .collect::<Vec<_>>()
        .join("; ");
    Err(PlanError::MissingBoundary { what, why })
}

/// Looks up in one pass the BTF types that planning and loading the sites will ask for: the
/// prototypes of the BTF tracepoints, and the functions where fentry may probe them.
fn look_up_types(facts: &KernelFacts, mode: AttachMode) {
    let Some(btf) = &facts.btf else { return };
    let fentry = facts.fentry.is_ok() && matches!(mode, AttachMode::Auto | AttachMode::Fentry);
    let tracepoints = SITES.iter().filter_map(|site| match site.hook {
        Hook::BtfTracepoint(tracepoint) => Some(tracepoint),
        _ => None,
    });
    let functions = SITES
        .iter()
        .filter(|_| fentry)
        .filter_map(|site| match site.hook {
            Hook::Function { symbol, renamed, .. } => {
                Some(std::iter::once(symbol).chain(renamed.iter().copied()))
            }
            _ => None,
        })
        .flatten();
    btf.look_up_probes(tracepoints.chain(programs::FOLLOW), functions);
}

/// Why a function point cannot be probed, when the kernel lacks the mode altogether (said once,
/// in the calibration, with the reason).
const NO_FENTRY: &str = "no fentry on this kernel";
const NO_KPROBES: &str = "no kprobes on this kernel";

/// Whether ftrace can trace `symbol`, where the kernel says which functions it can: fentry needs
/// it, and so do kprobe events.
fn traceable(facts: &KernelFacts, symbol: &str) -> Result<(), String> {
    match &facts.ftrace_functions {
        Some(traceable) if !traceable.contains(symbol) => {
            Err(format!("{symbol} is not in available_filter_functions (notrace)"))
        }
        _ => Ok(()),
    }
}

/// Whether the BTF tracepoint `name` of `site` can be attached here: it exists, is not another
/// architecture's, and what its program needs is known.
fn btf_tracepoint_usable(facts: &KernelFacts, site: SiteId, name: &str) -> Result<(), String> {
    if site == SiteId::Marker(Marker::X86FpuDropped)
        && facts.arch.exit_thread_tracepoint != Some(name)
    {
        return Err(format!("x86 only: {} has no tracepoint in exit_thread", facts.arch.name));
    }
    let btf = facts.btf.as_ref().ok_or("kernel BTF is missing")?;
    if let Some(function) = work_function_of(site)
        && facts.kallsyms.address(function).is_none_or(|a| a == 0)
    {
        return Err(format!("the address of {function} is not in kallsyms"));
    }
    if site == SiteId::Marker(Marker::X86FpuDropped) && facts.version >= FPU_DROP_SKIPPED_SINCE {
        return Err(FPU_DROP_SKIPPED.to_owned());
    }
    if btf.has_tracepoint(name) {
        Ok(())
    } else {
        Err(format!("tracepoint {name} does not exist on this kernel"))
    }
}

fn resolve_site(
    facts: &KernelFacts,
    mode: AttachMode,
    wants: Wants,
    site: &Site,
) -> Result<Planned, String> {
    let planned = |how, target: &str, note| Planned {
        site: site.id,
        point: site.id.name(),
        how,
        target: target.to_owned(),
        note,
    };
    match site.hook {
        Hook::BtfTracepoint(_) if matches!(site.id, SiteId::Cgroup(_)) && !wants.cgroup_paths => {
            Err("names the cgroups made and removed during a run: for --group-by cgroup".to_owned())
        }
        Hook::BtfTracepoint(name) => {
            btf_tracepoint_usable(facts, site.id, name)?;
            Ok(planned(How::BtfTracepoint, name, None))
        }
        Hook::Tracepoint { category: "syscalls", .. } if !wants.syscall_tracepoints => Err(
            "syscall tracepoints are off (--syscall-tracepoints): any of them slows every syscall \
             of the machine"
                .to_owned(),
        ),
        Hook::Tracepoint { category, event, .. } => {
            Ok(planned(How::Tracepoint, &format!("{category}:{event}"), None))
        }
        Hook::Function { symbol: first, renamed, .. } => {
            let unusable = match mode {
                AttachMode::Tracepoint => Some("a function probe (--attach tracepoint)".to_owned()),
                AttachMode::Auto if facts.fentry.is_err() && facts.kprobes.is_err() => {
                    Some(format!("{NO_FENTRY}; {NO_KPROBES}"))
                }
                _ => None,
            };
            if let Some(why) = &unusable
                && !wants.unusable_symbols
            {
                return Err(why.clone());
            }
            let symbol = pick_symbol(facts, first, renamed)?;
            let note = (symbol != first).then(|| format!("{first} is not a symbol on this kernel"));
            // A function that is not the first candidate says what it resolved to, even when it
            // cannot be probed.
            let resolved = |why: String| match &note {
                Some(n) => format!("resolves to {symbol} ({n}), but {why}"),
                None => why,
            };
            if let Some(why) = unusable {
                return Err(resolved(why));
            }
            // Errors name what is wrong with this symbol; a mode the kernel lacks altogether is
            // said once, in the calibration.
            let fentry = || -> Result<(), String> {
                facts.fentry.clone().map_err(|_| NO_FENTRY.to_owned())?;
                let btf = facts.btf.as_ref().ok_or("kernel BTF is missing")?;
                if !btf.has_function(symbol) {
                    return Err(format!("BTF has no function {symbol}"));
                }
                traceable(facts, symbol)
            };
            let kprobe = || -> Result<(), String> {
                facts.kprobes.clone().map_err(|_| NO_KPROBES.to_owned())?;
                if facts.kprobe_blacklist.contains(symbol) {
                    return Err(format!("{symbol} is on the kprobe blacklist"));
                }
                // Kprobe events refuse a function ftrace cannot trace (built `notrace`, as
                // perf's core is on 5.10) unless the kernel has KPROBE_EVENTS_ON_NOTRACE.
                traceable(facts, symbol)
            };
            match mode {
                AttachMode::Fentry => {
                    fentry().map_err(resolved).map(|()| planned(How::Fentry, symbol, note.clone()))
                }
                AttachMode::Kprobe => {
                    kprobe().map_err(resolved).map(|()| planned(How::Kprobe, symbol, note.clone()))
                }
                AttachMode::Auto => match (fentry(), kprobe()) {
                    (Ok(()), _) => Ok(planned(How::Fentry, symbol, note.clone())),
                    (Err(_), Ok(())) => Ok(planned(How::Kprobe, symbol, note.clone())),
                    (Err(no_fentry), Err(no_kprobe)) => {
                        Err(resolved(format!("{no_fentry}; {no_kprobe}")))
                    }
                },
                AttachMode::Tracepoint => unreachable!("handled above"),
            }
        }
    }
}

/// The first of a function's names that is a kernel symbol: `first`, else one it was `renamed`
/// to.
fn pick_symbol(
    facts: &KernelFacts,
    first: &'static str,
    renamed: &'static [&'static str],
) -> Result<&'static str, String> {
    let candidates = || std::iter::once(first).chain(renamed.iter().copied());
    if let Some(found) = candidates().find(|c| facts.kallsyms.has_function(c)) {
        return Ok(found);
    }
    let clones: Vec<&str> = candidates().flat_map(|c| facts.kallsyms.clones_of(c)).collect();
    let names = candidates().collect::<Vec<_>>().join(" / ");
    Err(if clones.is_empty() {
        format!("{names}: not a symbol on this kernel (inlined or compiled out)")
    } else {
        format!(
            "{names}: only compiler clones exist ({}), not the function itself",
            clones.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use exitprof_common::point::{ExitFn, Point};

    use super::*;
    use crate::{
        kernel::{
            arch, bpf_memory::BpfMemory, bpf_object::BpfObject, btf::KernelBtf, kallsyms::Kallsyms,
        },
        probes::{
            plan::PointSet,
            sites::{DO_EXIT, FREE_IPC_NS, TASK_FREE},
        },
    };

    const WANTS: Wants = Wants {
        ipc_frees_via_kfree: false,
        syscall_tracepoints: true,
        cgroup_paths: false,
        unusable_symbols: true,
    };

    /// Kernel facts from a captured kallsyms, with the running kernel's BTF (real type data).
    fn facts(kallsyms: &str, kprobes: bool, fentry: bool) -> KernelFacts {
        let no = |what: &str| Err(format!("no {what} here"));
        KernelFacts {
            arch: arch::X86_64,
            tracefs: "/sys/kernel/tracing".into(),
            release: "6.12.117+deb12-amd64".into(),
            version: KernelVersion::new(6, 12, 117),
            kprobes: if kprobes { Ok(()) } else { no("kprobes") },
            fentry: if fentry { Ok(()) } else { no("fentry") },
            btf: Some(KernelBtf::load().expect("this machine has kernel BTF")),
            loader_btf: Vec::new(),
            layout: Err("not needed to plan".to_owned()),
            kallsyms: Kallsyms::parse(kallsyms.as_bytes()).unwrap().into(),
            ftrace_functions: None,
            kprobe_blacklist: HashSet::new(),
            object: BpfObject::default_object(),
            bpf_memory: Ok(BpfMemory::MemoryCgroup),
        }
    }

    /// Function symbols of a 6.12 kernel on the exit path (free_ipc_ns is inlined there).
    const KALLSYMS_6_12: &str = "\
ffffffff81000010 T do_exit
ffffffff81000020 T exit_signals
ffffffff81000030 T taskstats_exit
ffffffff81000040 T exit_files
ffffffff81000050 T exit_task_namespaces
ffffffff81000060 T put_ipc_ns
ffffffff81000070 t free_ipc
ffffffff81000080 T shm_exit_ns
ffffffff81000090 T do_task_dead
ffffffff810000a0 T release_task
";

    fn how(plan: &Plan, site: SiteId) -> Option<(How, &str)> {
        plan.points.iter().find(|p| p.site == site).map(|p| (p.how, p.target.as_str()))
    }

    /// Where `fpu__drop` fires `x86_fpu_dropped` for some exits only (v6.16+), no stage is
    /// bounded by it: its stages would depend on how each exit was scheduled.
    #[test]
    fn x86_fpu_dropped_bounds_a_stage_only_where_every_exit_reaches_it() {
        let mut facts = facts(KALLSYMS_6_12, false, false);
        let fpu = SiteId::Marker(Marker::X86FpuDropped);
        let plan = for_kernel(&facts, AttachMode::Tracepoint, WANTS).unwrap();
        assert_eq!(how(&plan, fpu), Some((How::BtfTracepoint, "x86_fpu_dropped")));
        facts.version = KernelVersion::new(6, 16, 0);
        let plan = for_kernel(&facts, AttachMode::Tracepoint, WANTS).unwrap();
        assert_eq!(how(&plan, fpu), None);
        let left_out = plan.unavailable.iter().find(|u| u.point == fpu.name()).unwrap();
        assert!(left_out.reason.contains("TIF_NEED_FPU_LOAD"), "{}", left_out.reason);
    }

    #[test]
    fn free_ipc_ns_resolves_to_its_caller_where_inlined() {
        let plan =
            for_kernel(&facts(KALLSYMS_6_12, true, false), AttachMode::Kprobe, WANTS).unwrap();
        let planned = plan.points.iter().find(|p| p.site == FREE_IPC_NS).unwrap();
        assert_eq!((planned.how, planned.target.as_str()), (How::Kprobe, "free_ipc"));
        assert_eq!(planned.note.as_deref(), Some("free_ipc_ns is not a symbol on this kernel"));
    }

    #[test]
    fn the_btf_types_of_the_sites_are_looked_up_before_planning() {
        let facts = facts(KALLSYMS_6_12, true, true);
        for_kernel(&facts, AttachMode::Auto, WANTS).unwrap();
        let btf = facts.btf.as_ref().unwrap();
        assert!(btf.is_looked_up("btf_trace_sched_switch"));
        assert!(btf.is_looked_up("do_exit") && btf.is_looked_up("free_ipc"));
        // Only names: the empty one would list every anonymous type of the kernel.
        assert!(!btf.is_looked_up(""));
    }

    #[test]
    fn symbols_of_unusable_functions_are_looked_up_for_the_plan_only() {
        let reason = |kprobes, unusable_symbols| {
            let wants = Wants { unusable_symbols, ..WANTS };
            let facts = facts(KALLSYMS_6_12, kprobes, false);
            let plan = for_kernel(&facts, AttachMode::Auto, wants).unwrap();
            let free_ipc_ns = FREE_IPC_NS.name();
            plan.unavailable.iter().find(|u| u.point == free_ipc_ns).map(|u| u.reason.clone())
        };
        // Neither kprobes nor fentry: `exitprof plan` says what the function resolves to, a
        // run says only why it cannot be probed.
        assert_eq!(
            reason(false, true).as_deref(),
            Some(
                "resolves to free_ipc (free_ipc_ns is not a symbol on this kernel), but no fentry \
                 on this kernel; no kprobes on this kernel"
            )
        );
        assert_eq!(
            reason(false, false).as_deref(),
            Some("no fentry on this kernel; no kprobes on this kernel")
        );
        // Where functions can be probed, a run resolves them as the plan does.
        assert_eq!(reason(true, false), None);
    }

    #[test]
    fn kprobe_mode_probes_functions_and_keeps_tracepoints_for_markers() {
        let plan =
            for_kernel(&facts(KALLSYMS_6_12, true, false), AttachMode::Kprobe, WANTS).unwrap();
        assert_eq!(how(&plan, DO_EXIT), Some((How::Kprobe, "do_exit")));
        assert_eq!(
            how(&plan, SiteId::Function(ExitFn::TaskstatsExit)),
            Some((How::Kprobe, "taskstats_exit"))
        );
        assert_eq!(
            how(&plan, SiteId::Marker(Marker::FinalSwitch)),
            Some((How::BtfTracepoint, "sched_switch"))
        );
        // do_exit is probed, so the syscall tracepoints that stand in for it are not.
        assert_eq!(how(&plan, SiteId::Marker(Marker::SysEnterExit)), None);
        // Not a symbol in the captured kallsyms.
        assert_eq!(how(&plan, SiteId::Function(ExitFn::ExitSem)), None);
        assert!(
            plan.unavailable
                .iter()
                .any(|u| u.point == "exit_sem" && u.reason.contains("not a symbol"))
        );
    }

    /// As on 5.10, where perf's core is built `notrace`: kprobe events refuse such functions.
    #[test]
    fn kprobe_mode_leaves_out_functions_ftrace_cannot_trace() {
        let mut facts = facts(KALLSYMS_6_12, true, false);
        facts.ftrace_functions = Some(["do_exit", "taskstats_exit"].map(str::to_owned).into());
        let plan = for_kernel(&facts, AttachMode::Kprobe, WANTS).unwrap();
        assert_eq!(
            how(&plan, SiteId::Function(ExitFn::TaskstatsExit)),
            Some((How::Kprobe, "taskstats_exit"))
        );
        assert_eq!(how(&plan, SiteId::Function(ExitFn::ExitFiles)), None);
        assert!(
            plan.unavailable.iter().any(|u| u.point == "exit_files"
                && u.reason.contains("not in available_filter_functions"))
        );
    }

    #[test]
    fn auto_prefers_fentry_and_tracepoint_mode_uses_no_functions() {
        let auto = for_kernel(&facts(KALLSYMS_6_12, true, true), AttachMode::Auto, WANTS).unwrap();
        // The BTF is the running kernel's: do_exit is in every kernel's BTF.
        assert_eq!(how(&auto, DO_EXIT), Some((How::Fentry, "do_exit")));
        let tp =
            for_kernel(&facts(KALLSYMS_6_12, true, true), AttachMode::Tracepoint, WANTS).unwrap();
        assert!(tp.points.iter().all(|p| matches!(p.how, How::Tracepoint | How::BtfTracepoint)));
        assert_eq!(
            how(&tp, SiteId::Marker(Marker::SysEnterExit)),
            Some((How::Tracepoint, "syscalls:sys_enter_exit"))
        );
    }

    #[test]
    fn forced_modes_the_kernel_lacks_fail_with_advice() {
        let facts = facts(KALLSYMS_6_12, false, false);
        let err = for_kernel(&facts, AttachMode::Kprobe, WANTS).unwrap_err();
        assert!(err.to_string().contains("use --attach tracepoint"), "{err}");
        let err = for_kernel(&facts, AttachMode::Fentry, WANTS).unwrap_err();
        assert!(err.to_string().ends_with("use --attach tracepoint (or auto)"), "{err}");
        let with_kprobes = self::facts(KALLSYMS_6_12, true, false);
        let err = for_kernel(&with_kprobes, AttachMode::Fentry, WANTS).unwrap_err();
        assert!(err.to_string().contains("use --attach kprobe or --attach tracepoint"), "{err}");
        let with_fentry = self::facts(KALLSYMS_6_12, false, true);
        let err = for_kernel(&with_fentry, AttachMode::Kprobe, WANTS).unwrap_err();
        assert!(err.to_string().contains("use --attach fentry or --attach tracepoint"), "{err}");
    }

    #[test]
    fn without_btf_the_end_of_an_exit_cannot_be_timed_and_says_why() {
        let mut facts = facts(KALLSYMS_6_12, true, false);
        facts.btf = None;
        let err = for_kernel(&facts, AttachMode::Auto, WANTS).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no way to time the end of an exit on this kernel: final switch: kernel BTF is missing"
        );
    }

    #[test]
    fn without_syscall_tracepoints_exits_start_at_the_first_exit_only_point() {
        let facts = facts(KALLSYMS_6_12, false, false);
        let wants = Wants { syscall_tracepoints: false, ..WANTS };
        let plan = for_kernel(&facts, AttachMode::Tracepoint, wants).unwrap();
        assert!(plan.points.iter().all(|p| p.how != How::Tracepoint), "{:?}", plan.points);
        assert!(
            plan.unavailable
                .iter()
                .any(|u| u.point == "sys_enter_exit" && u.reason.contains("--syscall-tracepoints"))
        );
        assert_eq!(
            how(&plan, SiteId::Marker(Marker::SchedProcessExit)),
            Some((How::BtfTracepoint, "sched_process_exit"))
        );
    }

    #[test]
    fn the_minimal_point_set_keeps_the_start_the_final_switch_and_the_free() {
        let full =
            for_kernel(&facts(KALLSYMS_6_12, true, false), AttachMode::Kprobe, WANTS).unwrap();
        let minimal = full.clone().with_points(PointSet::Minimal);
        let sites: Vec<SiteId> = minimal.points.iter().map(|p| p.site).collect();
        assert_eq!(sites, [DO_EXIT, SiteId::Marker(Marker::FinalSwitch), TASK_FREE]);
        assert_eq!(minimal.points.len() + minimal.unavailable.len(), {
            full.points.len() + full.unavailable.len()
        });
        assert!(
            minimal
                .unavailable
                .iter()
                .any(|u| u.point == "taskstats_exit" && u.reason.contains("--points minimal"))
        );
        // Watching in tracepoint mode, an exit starts at the first exit-only point.
        let wants = Wants { syscall_tracepoints: false, ..WANTS };
        let facts = facts(KALLSYMS_6_12, false, false);
        let tp = for_kernel(&facts, AttachMode::Tracepoint, wants).unwrap();
        let sites: Vec<SiteId> =
            tp.with_points(PointSet::Minimal).points.iter().map(|p| p.site).collect();
        assert!(sites.contains(&SiteId::Marker(Marker::SchedProcessExit)), "{sites:?}");
        assert!(sites.contains(&SiteId::Marker(Marker::FinalSwitch)), "{sites:?}");
        assert!(!sites.contains(&SiteId::Marker(Marker::X86FpuDropped)), "{sites:?}");
    }

    #[test]
    fn each_hit_is_a_run_of_the_program_the_plan_attached() {
        let kprobes =
            for_kernel(&facts(KALLSYMS_6_12, true, false), AttachMode::Kprobe, WANTS).unwrap();
        assert_eq!(kprobes.program_at(Point::Marker(Marker::DoExit)), Some("kprobe_enter_do_exit"));
        let exit_files = ExitFn::ExitFiles;
        assert_eq!(kprobes.program_at(Point::Enter(exit_files)), Some("kprobe_enter_exit_files"));
        assert_eq!(
            kprobes.program_at(Point::Return(exit_files)),
            Some("kretprobe_exit_exit_files")
        );
        assert_eq!(kprobes.program_at(Point::Marker(Marker::FinalSwitch)), Some("sched_switch"));
        assert_eq!(kprobes.program_at(Point::Enter(ExitFn::ExitSem)), None, "not planned");
        let fentry =
            for_kernel(&facts(KALLSYMS_6_12, false, true), AttachMode::Fentry, WANTS).unwrap();
        assert_eq!(fentry.program_at(Point::Return(exit_files)), Some("fexit_exit_exit_files"));
    }

    #[test]
    fn the_fpu_marker_is_planned_on_x86_only() {
        let fpu = SiteId::Marker(Marker::X86FpuDropped);
        let mut facts = facts(KALLSYMS_6_12, false, false);
        let x86 = for_kernel(&facts, AttachMode::Tracepoint, WANTS).unwrap();
        assert_eq!(how(&x86, fpu), Some((How::BtfTracepoint, "x86_fpu_dropped")));
        facts.arch = arch::AARCH64;
        let arm64 = for_kernel(&facts, AttachMode::Tracepoint, WANTS).unwrap();
        assert_eq!(how(&arm64, fpu), None);
        let why = arm64.unavailable.iter().find(|u| u.point == "x86_fpu_dropped").unwrap();
        assert_eq!(why.reason, "x86 only: aarch64 has no tracepoint in exit_thread");
        // The rest of the plan is the same.
        let sites = |plan: &Plan| plan.points.iter().map(|p| p.site).collect::<Vec<_>>();
        let mut expected = sites(&x86);
        expected.retain(|&s| s != fpu);
        assert_eq!(sites(&arm64), expected);
    }

    #[test]
    fn kfree_is_attached_only_when_wanted() {
        let facts = facts(KALLSYMS_6_12, false, false);
        let kfree = SiteId::Deferred(DeferredSite::Kfree);
        let without = for_kernel(&facts, AttachMode::Auto, WANTS).unwrap();
        assert_eq!(how(&without, kfree), None);
        let with =
            for_kernel(&facts, AttachMode::Auto, Wants { ipc_frees_via_kfree: true, ..WANTS })
                .unwrap();
        assert_eq!(how(&with, kfree), Some((How::BtfTracepoint, "kfree")));
    }
}
