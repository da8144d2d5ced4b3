//! Loads exitprof's eBPF object and attaches its programs as the probe plan says.

use std::{
    collections::{HashMap, HashSet},
    os::fd::AsFd as _,
    path::Path,
    time::Instant,
};

use anyhow::{Context as _, bail};
use aya::{
    Btf, Ebpf, EbpfError, EbpfLoader, Endianness,
    maps::MapError,
    programs::{
        BtfTracePoint, FEntry, FExit, KProbe, PerfEvent, Program, ProgramError, TracePoint,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use exitprof_common::{
    names::{compat_globals, globals, maps, programs},
    point::Marker,
    sizes::COMM_LEN,
};

use crate::{
    base::UsageError,
    kernel::{
        KernelFacts,
        bpf_memory::{BpfMemory, MemlockLimit},
        bpf_object::{self, BpfObject},
        btf::{KernelLayout, LoaderType},
    },
    probes::{
        ProbeOptions,
        counts::ProgramCost,
        kprobe_events,
        kprobe_events::KprobeEvent,
        maps::set_stopped,
        memlock::{self, Need},
        plan::{DeferredSite, How, Plan, Planned, SiteId},
        privileges, prog_stats,
    },
};

/// The eBPF objects, built from `exitprof-ebpf` by the build script: the default one, and the
/// compat one for kernels that lack what it uses (`crate::kernel::bpf_object`).
pub(super) static OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/exitprof"));
pub(super) static COMPAT_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/exitprof-compat"));

/// Fails when this binary was built without its eBPF object.
pub fn ensure_object_embedded() -> anyhow::Result<()> {
    if OBJECT.is_empty() {
        bail!(
            "this exitprof binary was built without its eBPF programs (bpf-linker was missing \
             at build time); run `cargo xtask setup` and rebuild, or use `cargo xtask run`"
        );
    }
    Ok(())
}

/// Nanoseconds of a clock tick as `/proc/PID/stat` counts them (`USER_HZ`).
fn ns_per_tick() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1_000_000_000 / u64::try_from(hz).ok().filter(|&hz| hz > 0).unwrap_or(100)
}

/// The compat object keeps marks by pid as the initial PID namespace numbers processes: a run
/// in another PID namespace cannot name them so.
fn ensure_compat_can_follow(compat: bool, pidns_ino: u64) -> anyhow::Result<()> {
    if compat && pidns_ino != 0 {
        return Err(UsageError(
            "this kernel needs exitprof's compat eBPF object (see `exitprof plan`), which follows \
             processes by their pids in the initial PID namespace: run exitprof there (e.g. \
             `--pid host` in a container)"
                .to_owned(),
        )
        .into());
    }
    Ok(())
}

/// `--cgroup`'s cgroup (`options.target_cgroup`, 0: none), and the compat object's offsets of a task's
/// v2 cgroup's ancestry, which it reads instead of the helper: `cgroup.ancestor_ids` (v4.x to
/// v5.19), which kernels old enough for the compat object have.
fn set_cgroup_target<'a>(
    loader: &mut EbpfLoader<'a>,
    layout: &'a KernelLayout,
    options: &'a LoadOptions,
    compat: bool,
) -> anyhow::Result<()> {
    loader.override_global(globals::TARGET_CGROUP, &options.target_cgroup, true);
    if !compat {
        return Ok(());
    }
    if options.target_cgroup != 0 && layout.cgroup_ancestor_ids == 0 {
        bail!(
            "--cgroup: this kernel needs exitprof's compat eBPF object, which finds a task's \
             cgroups through `struct cgroup`'s ancestor_ids, and this kernel's has none"
        );
    }
    loader
        .override_global(compat_globals::TASK_CGROUPS_OFFSET, &layout.task_cgroups, true)
        .override_global(compat_globals::CSS_SET_DFL_CGRP_OFFSET, &layout.css_set_dfl_cgrp, true)
        .override_global(compat_globals::CGROUP_LEVEL_OFFSET, &layout.cgroup_level, true)
        .override_global(
            compat_globals::CGROUP_ANCESTOR_IDS_OFFSET,
            &layout.cgroup_ancestor_ids,
            true,
        );
    Ok(())
}

/// Load-time settings of the eBPF side.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    /// Record every exit on the machine.
    pub trace_all: bool,
    /// Record the exits of tasks with this name (NUL-padded; all zero: none).
    pub target_comm: [u8; COMM_LEN],
    /// Record the exits of tasks in the v2 cgroup of this id or below it (0: none).
    pub target_cgroup: u64,
    /// Await and report the frees of a sample of recorded exits (a run's deferred work; serve
    /// reads none).
    pub await_frees: bool,
    /// Size of the exit-record ring buffer.
    pub ringbuf_bytes: u32,
    /// Slots for exits in progress, preallocated in the kernel: a power of two.
    pub exit_slots: u32,
    /// How the probes are attached: the kretprobes' instances, the stacks of blocks (within a
    /// budget of walks), the sampling of exits on a CPU.
    pub probes: ProbeOptions,
}

/// The loaded object with its programs attached. Dropping it detaches everything.
pub struct Probes {
    /// kprobe events created through tracefs; dropped (removed) before the programs unload.
    kprobes: Vec<KprobeEvent>,
    pub ebpf: Ebpf,
    /// Names of the attached programs.
    programs: Vec<String>,
    /// The object loaded: the plan's, or the compat one where the kernel rejected the default.
    pub object: BpfObject,
}

impl Probes {
    /// Probe hits the kernel dropped: kprobe misses (e.g. kretprobe instances exhausted) plus
    /// program runs skipped because another BPF program was running on the CPU.
    pub fn misses(&self) -> anyhow::Result<u64> {
        let mut misses = kprobe_events::misses(&self.kprobes).context("reading kprobe_profile")?;
        for name in &self.programs {
            misses += self.stats(name)?.recursion_misses;
        }
        Ok(misses)
    }

    /// Runs and run time of every attached program (counted only while BPF statistics are
    /// enabled, see [`aya::sys::enable_stats`]).
    pub fn costs(&self) -> anyhow::Result<Vec<ProgramCost>> {
        self.programs
            .iter()
            .map(|name| {
                let stats = self.stats(name)?;
                Ok(ProgramCost { program: name.clone(), runs: stats.runs, run_ns: stats.run_ns })
            })
            .collect()
    }

    fn stats(&self, name: &str) -> anyhow::Result<prog_stats::ProgStats> {
        let program = self.ebpf.program(name).context("program vanished")?;
        prog_stats::read(program.fd()?.as_fd())
            .with_context(|| format!("reading the statistics of program {name}"))
    }
}

/// The kernel types the loader looks up to load `plan`'s programs, and the follow programs
/// (`programs::FOLLOW`): what [`KernelFacts::planned`] keeps of the
/// kernel's BTF.
pub fn loader_types(plan: &Plan) -> Vec<LoaderType<'_>> {
    plan.points
        .iter()
        .filter_map(|p| match p.how {
            How::BtfTracepoint => Some(LoaderType::Tracepoint(&p.target)),
            How::Fentry => Some(LoaderType::Function(&p.target)),
            How::Kprobe | How::Tracepoint => None,
        })
        .chain(programs::FOLLOW.map(LoaderType::Tracepoint))
        .collect()
}

/// Loads the object and attaches the plan's programs, and the follow programs. Where the kernel rejects the default object, the compat
/// one is loaded instead ([`load_verified`]).
pub fn load_and_attach(
    plan: &Plan,
    facts: &KernelFacts,
    options: LoadOptions,
) -> anyhow::Result<Probes> {
    let started = Instant::now();
    let mut probes = load_verified(plan, facts, options)?;
    let mut attacher = Attacher {
        probes: &mut probes,
        tracefs: facts.tracefs.as_path(),
        options,
        attached: HashSet::new(),
    };
    attacher.attach_plan(plan).map_err(privileges::explain_perf_refusal)?;
    log::info!(
        "loaded and attached {} programs in {} ms",
        probes.programs.len(),
        started.elapsed().as_millis()
    );
    Ok(probes)
}

/// The plan's points, the end of an exit and the free of its task first.
fn attach_order(plan: &Plan) -> Vec<&Planned> {
    let mut order: Vec<&Planned> = plan.points.iter().collect();
    order.sort_by_key(|p| match p.site {
        SiteId::Marker(Marker::FinalSwitch) => 0,
        SiteId::Deferred(DeferredSite::TaskFree) => 1,
        _ => 2,
    });
    order
}

/// Loads the object the plan names and, in it, every program the plan attaches (the kernel's
/// verifier checks each as it loads), attaching none. Where the kernel rejects the default
/// object (refuses a program, or cannot make a map), though it passed the probes that chose it
/// (`crate::kernel::bpf_object`), the compat object is loaded instead: [`Probes::object`] says
/// which, and why.
pub fn load_verified(
    plan: &Plan,
    facts: &KernelFacts,
    options: LoadOptions,
) -> anyhow::Result<Probes> {
    ensure_object_embedded()?;
    // Slots of exits whose end was never seen are released there: without it they would stay
    // held for good.
    anyhow::ensure!(
        plan.sees_task_frees(),
        "exitprof needs the sched_process_free tracepoint (BTF), where it releases the slots of \
         exits whose end it never saw"
    );
    let btf = Btf::parse(&facts.loader_btf, Endianness::default())
        .context("parsing the kernel's BTF types the eBPF loader needs")?;
    match load_object(plan, &plan.object, facts, options, &btf) {
        Err(Loading::Rejected(why)) if !plan.object.is_compat() => {
            eprintln!(
                "exitprof: the kernel rejected the default eBPF object ({why}): loading the \
                 compat object instead"
            );
            let compat = BpfObject::instead_of_rejected(&why);
            load_object(plan, &compat, facts, options, &btf).map_err(Loading::into_error)
        }
        loaded => loaded.map_err(Loading::into_error),
    }
}

/// Why an object did not load.
enum Loading {
    /// The kernel refused it: a program its verifier rejected, or a map it cannot make.
    Rejected(String),
    /// Anything else (no privileges, no memory, a program missing from the object).
    Failed(anyhow::Error),
}

impl Loading {
    /// A failure said with `explain` (the locked memory or the perf events it came from).
    fn explained(self, explain: impl FnOnce(anyhow::Error) -> anyhow::Error) -> Self {
        match self {
            Self::Failed(e) => Self::Failed(explain(e)),
            rejected @ Self::Rejected(_) => rejected,
        }
    }

    fn into_error(self) -> anyhow::Error {
        match self {
            Self::Rejected(why) => {
                anyhow::anyhow!("the kernel rejected exitprof's eBPF object: {why}")
            }
            Self::Failed(e) => e,
        }
    }

    /// A program that did not load: rejected where the verifier refused it (EINVAL, EACCES,
    /// E2BIG, ENOTSUPP), failed otherwise (EPERM: privileges).
    fn of_program(e: ProgramError, program: &str) -> Self {
        match &e {
            ProgramError::LoadError { io_error, verifier_log }
                if io_error.raw_os_error().is_some_and(refused) =>
            {
                Self::Rejected(format!("program {program}: {}", verdict(&verifier_log.to_string())))
            }
            _ => Self::Failed(anyhow::Error::from(e).context(format!("loading program {program}"))),
        }
    }
}

/// Whether a load's error number says the kernel refused what it was given (`ENOTSUPP`, 524,
/// is the kernel's own: no libc names it).
fn refused(errno: i32) -> bool {
    [libc::EINVAL, libc::EACCES, libc::E2BIG, 524].contains(&errno)
}

/// The verifier's reason, from its log: its last line that is not one of the statistics it
/// ends with (`processed N insns ...`, and per subprogram `subprog 0 (name) main insns_self N
/// ...` since 7.x) or a dump of the states it compared.
fn verdict(log: &str) -> String {
    const NOT_A_REASON: [&str; 5] =
        ["processed ", "verification time", "stack depth", "cur state:", "old state:"];
    let statistic = |l: &str| {
        NOT_A_REASON.iter().any(|s| l.starts_with(s))
            || (l.starts_with("subprog ") && l.contains(" insns_self "))
    };
    let reason = log.lines().map(str::trim).rfind(|l| !l.is_empty() && !statistic(l));
    reason.unwrap_or("no reason given").to_owned()
}

/// Loads `object` with the settings of `plan` and `options`, and every program `plan`
/// attaches in it.
fn load_object(
    plan: &Plan,
    object: &BpfObject,
    facts: &KernelFacts,
    options: LoadOptions,
    btf: &Btf,
) -> Result<Probes, Loading> {
    let failed = Loading::Failed;
    let layout = facts
        .layout
        .as_ref()
        .map_err(|why| failed(anyhow::anyhow!("exitprof needs the kernel's BTF: {why}")))?;
    let work = WorkGlobals::new(plan, facts);
    let (pidns_dev, pidns_ino) = pid_namespace().map_err(failed)?;
    let compat = object.is_compat();
    ensure_compat_can_follow(compat, pidns_ino).map_err(failed)?;
    let exit_tp_group_dead = u32::from(layout.exit_tp_group_dead);
    let trace_all = u32::from(options.trace_all);
    let await_frees = u32::from(options.await_frees);
    let block_walks = if options.probes.block_stacks { BLOCK_WALKS_PER_SEC } else { 0 };
    let stacks_bytes = stacks_ringbuf_bytes().map_err(failed)?;
    let max_entries = sized_maps(options, stacks_bytes);
    let bytes = if compat { COMPAT_OBJECT } else { OBJECT };
    let locked = lock_memory(facts, bytes, &max_entries, &programs_loaded(plan, compat, options))
        .map_err(failed)?;
    // A failure said as the locked memory or the perf events it came from.
    let explain = |e: anyhow::Error| {
        privileges::explain_perf_refusal(match locked {
            Some((need, limit)) => memlock::explain(e, need, limit),
            None => e,
        })
    };
    let failed = |e| Loading::Failed(explain(e));
    let mut loader = EbpfLoader::new();
    work.set(&mut loader, layout);
    set_cgroup_target(&mut loader, layout, &options, compat).map_err(failed)?;
    let loaded = loader
        .btf(Some(btf))
        // Task storage, which aya loads without a typed wrapper of its own.
        .allow_unsupported_maps()
        .override_global(globals::TRACE_ALL, &trace_all, true)
        .override_global(globals::AWAIT_FREES, &await_frees, true)
        .override_global(globals::BLOCK_WALKS_PER_SEC, &block_walks, true)
        .override_global(globals::PIDNS_DEV, &pidns_dev, true)
        .override_global(globals::PIDNS_INO, &pidns_ino, true)
        .override_global(globals::EXIT_TP_GROUP_DEAD, &exit_tp_group_dead, true)
        .override_global(globals::SYS_EXIT_GROUP_NR, &facts.arch.syscalls.exit_group, true)
        .override_global(globals::TASK_FLAGS_OFFSET, &layout.task_flags, true)
        .override_global(globals::TASK_GROUP_LEADER_OFFSET, &layout.task_group_leader, true)
        .override_global(globals::TASK_REAL_PARENT_OFFSET, &layout.task_real_parent, true)
        .override_global(globals::TASK_START_BOOTTIME_OFFSET, &layout.task_start_boottime, true)
        .override_global(globals::TASK_SIGNAL_OFFSET, &layout.task_signal, true)
        .override_global(globals::SIGNAL_LIVE_OFFSET, &layout.signal_live, true)
        .override_global(
            globals::SIGNAL_GROUP_EXEC_TASK_OFFSET,
            &layout.signal_group_exec_task,
            true,
        )
        .override_global(globals::EXITS_WAKEUP_BYTES, &wakeup(options.ringbuf_bytes), true)
        .override_global(globals::DEFERRED_WAKEUP_BYTES, &wakeup(DEFERRED_RINGBUF_BYTES), true)
        .override_global(globals::STACKS_WAKEUP_BYTES, &wakeup(stacks_bytes), true)
        .override_global(globals::TARGET_COMM, &options.target_comm, true)
        .override_global(globals::TASK_PID_OFFSET, &layout.task_pid, true)
        .override_global(globals::TASK_TGID_OFFSET, &layout.task_tgid, true)
        .override_global(globals::TASK_COMM_OFFSET, &layout.task_comm, true)
        .override_global(globals::TASK_NSPROXY_OFFSET, &layout.task_nsproxy, true)
        .override_global(globals::NSPROXY_IPC_NS_OFFSET, &layout.nsproxy_ipc_ns, true)
        .override_global(globals::CGROUP_ROOT_OFFSET, &layout.cgroup_root, true)
        .override_global(
            globals::CGROUP_ROOT_HIERARCHY_ID_OFFSET,
            &layout.cgroup_root_hierarchy_id,
            true,
        )
        .override_global(globals::CGROUP_KN_OFFSET, &layout.cgroup_kn, true)
        .override_global(globals::KERNFS_NODE_ID_OFFSET, &layout.kernfs_node_id, true)
        // The compat object's own settings.
        .override_global(compat_globals::TASK_STATE_OFFSET, &layout.task_state, compat)
        .override_global(compat_globals::NS_PER_TICK, &ns_per_tick(), compat)
        .override_global(globals::EXIT_SLOT_MASK, &(options.exit_slots - 1), true)
        .map_max_entries(maps::EXITS, max_entries[maps::EXITS])
        .map_max_entries(maps::DEFERRED, max_entries[maps::DEFERRED])
        .map_max_entries(maps::STACKS, max_entries[maps::STACKS])
        .map_max_entries(maps::EXIT_SLOTS, max_entries[maps::EXIT_SLOTS])
        .map_max_entries(maps::EXIT_OWNERS, max_entries[maps::EXIT_OWNERS])
        .map_max_entries(maps::FREES_AWAITED, max_entries[maps::FREES_AWAITED])
        .load(bytes);
    let ebpf = match loaded {
        Ok(ebpf) => ebpf,
        // A map type the kernel does not know (task storage before 5.11).
        Err(EbpfError::MapError(MapError::CreateError { name, io_error }))
            if io_error.raw_os_error().is_some_and(refused) =>
        {
            return Err(Loading::Rejected(format!("map {name}: {io_error}")));
        }
        Err(e) => {
            let what = format!("loading exitprof's {} eBPF object", object.name);
            return Err(failed(anyhow::Error::from(e).context(what)));
        }
    };
    kprobe_events::remove_stale(&facts.tracefs);
    let mut probes =
        Probes { kprobes: Vec::new(), ebpf, programs: Vec::new(), object: object.clone() };
    // No exit opens, nor is refused, until a run begins (`maps::begin_run`): none is counted
    // while the programs are attached, none of an earlier instant is this run's.
    set_stopped(&mut probes.ebpf, true).map_err(failed)?;
    let sampler = options.probes.sample_hz > 0;
    load_programs(&mut probes.ebpf, plan, compat, sampler, btf)
        .map_err(|l| l.explained(explain))?;
    Ok(probes)
}

/// The maps sized at load time, and their entries: as the loader makes them, and as the locked
/// memory they need is worked out.
fn sized_maps(options: LoadOptions, stacks_bytes: u32) -> HashMap<&'static str, u32> {
    HashMap::from([
        (maps::EXITS, options.ringbuf_bytes),
        (maps::DEFERRED, DEFERRED_RINGBUF_BYTES),
        (maps::STACKS, stacks_bytes),
        (maps::EXIT_SLOTS, options.exit_slots),
        (maps::EXIT_OWNERS, options.exit_slots),
        (maps::FREES_AWAITED, options.exit_slots),
    ])
}

/// The programs `plan` loads (each once), with the sampler's where it samples: what their
/// locked memory is worked out for.
fn programs_loaded(plan: &Plan, compat: bool, options: LoadOptions) -> Vec<&'static str> {
    let mut programs: Vec<&str> =
        wanted_programs(plan, compat).into_iter().map(|(program, _, _)| program).collect();
    if options.probes.sample_hz > 0 {
        programs.push(programs::SAMPLE_CPU);
    }
    programs.sort_unstable();
    programs.dedup();
    programs
}

/// The tracing programs loaded for `plan`, each with how and where it is attached later: the
/// plan's, the follow programs (exec's and fork's), and a test's program the verifier rejects
/// where one is asked for.
fn wanted_programs(plan: &Plan, compat: bool) -> Vec<(&'static str, How, &str)> {
    let mut wanted: Vec<(&str, How, &str)> = Vec::new();
    for planned in &plan.points {
        for (program, _) in planned.programs() {
            wanted.push((program, planned.how, &planned.target));
        }
    }
    wanted.extend(programs::FOLLOW.map(|program| (program, How::BtfTracepoint, program)));
    // Points that share a program and its target (the workqueue tracepoints standing in for
    // several work functions) load it once.
    let mut seen = HashSet::new();
    wanted.retain(|&(program, _, target)| seen.insert((program, target)));
    // A test's default object the verifier rejects, for real.
    if !compat && bpf_object::rejection_asked_for() {
        wanted.push((programs::REJECTED_BY_THE_VERIFIER, How::BtfTracepoint, "sched_switch"));
    }
    wanted
}

/// Where the kernel charges BPF memory to RLIMIT_MEMLOCK: what `object`'s maps (sized by
/// `max_entries`) and `programs` need, and the limit raised for it ([`memlock::ensure`]), or the
/// refusal; `None` where the kernel charges the memory cgroup.
fn lock_memory(
    facts: &KernelFacts,
    object: &[u8],
    max_entries: &HashMap<&str, u32>,
    programs: &[&str],
) -> anyhow::Result<Option<(Need, MemlockLimit)>> {
    match &facts.bpf_memory {
        Ok(BpfMemory::MemoryCgroup) => {
            log::debug!(
                "BPF memory is charged to the memory cgroup: RLIMIT_MEMLOCK does not apply"
            );
            Ok(None)
        }
        Ok(BpfMemory::Memlock) => {
            let need = Need::of(object, max_entries, programs)
                .context("working out the locked memory of the eBPF object")?;
            let limit = memlock::ensure(need)?;
            log::info!(
                "BPF memory is charged to RLIMIT_MEMLOCK: the maps need {}, the programs about {}; the \
                 limit is {}",
                memlock::bytes(need.maps),
                memlock::bytes(need.programs),
                memlock::bytes(limit.soft)
            );
            Ok(Some((need, limit)))
        }
        Err(why) => {
            log::warn!("{why}; loading without looking at RLIMIT_MEMLOCK");
            Ok(None)
        }
    }
}

/// Loads every program `plan` attaches in the object, the follow programs, and the sampler's
/// where it samples (`sampler`).
fn load_programs(
    ebpf: &mut Ebpf,
    plan: &Plan,
    compat: bool,
    sampler: bool,
    btf: &Btf,
) -> Result<(), Loading> {
    for (program, how, target) in wanted_programs(plan, compat) {
        load_program(ebpf, program, how, target, btf)?;
    }
    if sampler {
        let name = programs::SAMPLE_CPU;
        let prog: &mut PerfEvent =
            program_of(ebpf, name)?.try_into().map_err(|e| Loading::of_program(e, name))?;
        prog.load().map_err(|e| Loading::of_program(e, name))?;
    }
    Ok(())
}

/// The program `name` of the object.
fn program_of<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Program, Loading> {
    ebpf.program_mut(name)
        .ok_or_else(|| Loading::Failed(anyhow::anyhow!("the eBPF object has no program {name}")))
}

/// Loads `program`, attached as `how` to `target` later: the kernel's verifier checks it now.
fn load_program(
    ebpf: &mut Ebpf,
    program: &str,
    how: How,
    target: &str,
    btf: &Btf,
) -> Result<(), Loading> {
    let prog = program_of(ebpf, program)?;
    let loaded = match how {
        How::BtfTracepoint => {
            <&mut BtfTracePoint>::try_from(prog).and_then(|p| p.load(target, btf))
        }
        // One program may serve several events (`sys_enter_exit`): loaded once.
        How::Tracepoint => <&mut TracePoint>::try_from(prog)
            .and_then(|p| if p.fd().is_ok() { Ok(()) } else { p.load() }),
        How::Kprobe => <&mut KProbe>::try_from(prog).and_then(KProbe::load),
        How::Fentry => match prog {
            Program::FExit(p) => p.load(target, btf),
            prog => <&mut FEntry>::try_from(prog).and_then(|p| p.load(target, btf)),
        },
    };
    loaded.map_err(|e| Loading::of_program(e, program))
}

/// What the programs of deferred work in kworkers need: the addresses of the work functions
/// (kallsyms), and which of them the workqueue tracepoints time.
struct WorkGlobals {
    free_ipc: u64,
    cleanup_net: u64,
    free_user_ns: u64,
    work_timed: u32,
}

impl WorkGlobals {
    fn new(plan: &Plan, facts: &KernelFacts) -> Self {
        let address = |name| facts.kallsyms.address(name).unwrap_or(0);
        Self {
            free_ipc: address("free_ipc"),
            cleanup_net: address("cleanup_net"),
            free_user_ns: address("free_user_ns"),
            work_timed: plan.work_timed(),
        }
    }

    /// Sets them, and the offsets of the structures they read (`layout`), in `loader`.
    fn set<'a>(&'a self, loader: &mut EbpfLoader<'a>, layout: &'a KernelLayout) {
        let ns = &layout.namespaces;
        loader
            .override_global(globals::WORK_FUNC_OFFSET, &layout.work_func, true)
            .override_global(globals::FREE_IPC_ADDR, &self.free_ipc, true)
            .override_global(globals::CLEANUP_NET_ADDR, &self.cleanup_net, true)
            .override_global(globals::FREE_USER_NS_ADDR, &self.free_user_ns, true)
            .override_global(globals::WORK_TIMED, &self.work_timed, true)
            .override_global(globals::NSPROXY_NET_NS_OFFSET, &ns.nsproxy_net_ns, true)
            .override_global(globals::TASK_REAL_CRED_OFFSET, &ns.task_real_cred, true)
            .override_global(globals::CRED_USER_NS_OFFSET, &ns.cred_user_ns, true)
            .override_global(globals::NET_LIST_OFFSET, &ns.net_list, true)
            .override_global(globals::NET_REFS_OFFSET, &ns.net_refs, true)
            .override_global(globals::NET_INUM_OFFSET, &ns.net_inum, true)
            .override_global(globals::NET_EXIT_LIST_OFFSET, &ns.net_exit_list, true)
            .override_global(globals::USER_NS_WORK_OFFSET, &ns.user_ns_work, true)
            .override_global(globals::USER_NS_INUM_OFFSET, &ns.user_ns_inum, true);
    }
}

/// The deferred-work ring buffer: records of 80 bytes, a few per exit at most (reaps, one free
/// in 16, IPC namespace frees, namespace teardowns), read every 20 ms: some 3,000 fit. Every
/// mapped byte of a ring buffer is resident in exitprof, twice (its pages are mapped twice, for
/// records that wrap).
const DEFERRED_RINGBUF_BYTES: u32 = 256 << 10;

/// The kernel stack ring buffer: 64 KiB per CPU (some 200 on-CPU samples of ~300 bytes, 200 ms
/// of a CPU at the highest --sample-hz; blocks' stacks are fewer, a budget a second), at least
/// 256 KiB, a power of two.
fn stacks_ringbuf_bytes() -> anyhow::Result<u32> {
    let cpus = u32::try_from(online_cpus()?.len()).unwrap_or(u32::MAX);
    Ok(cpus.saturating_mul(64 << 10).clamp(256 << 10, 16 << 20).next_power_of_two())
}

/// Unread bytes of a ring buffer of `bytes` above which a new record wakes exitprof: a quarter
/// of it, so that a burst is read well before the buffer fills.
fn wakeup(bytes: u32) -> u64 {
    u64::from(bytes) / 4
}

/// Kernel stacks walked per second and CPU, at most, where exits block. A walk costs a few
/// microseconds on the machines exitprof was measured on (2.0 to 2.7 µs per walk of a short
/// stack, by the BPF statistics of a program walking at every context switch); 200 a second
/// bound that to about 0.05 % of a CPU however many exits block.
const BLOCK_WALKS_PER_SEC: u32 = 200;

/// The device and inode of exitprof's PID namespace, or zeros in the initial one, where the
/// kernel's pids are the ones exitprof sees and none need translating.
fn pid_namespace() -> anyhow::Result<(u64, u64)> {
    use std::os::linux::fs::MetadataExt as _;
    /// The initial PID namespace's inode (`PROC_PID_INIT_INO`, include/linux/proc_ns.h).
    const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
    let ns = std::fs::metadata("/proc/self/ns/pid").context("reading /proc/self/ns/pid")?;
    if ns.st_ino() == PROC_PID_INIT_INO {
        return Ok((0, 0));
    }
    Ok((ns.st_dev(), ns.st_ino()))
}

/// The online CPUs (`/sys/devices/system/cpu/online`).
fn online_cpus() -> anyhow::Result<Vec<u32>> {
    aya::util::online_cpus().map_err(|(path, e)| anyhow::anyhow!("reading {path}: {e}"))
}

/// Attaches the loaded programs of a [`Probes`].
struct Attacher<'a> {
    probes: &'a mut Probes,
    tracefs: &'a Path,
    options: LoadOptions,
    /// Each program and target attached: points that share one (the workqueue tracepoints
    /// standing in for several work functions) attach it once.
    attached: HashSet<(String, String)>,
}

impl Attacher<'_> {
    /// Attaches the plan's programs, the end of an exit and the free of its task first; then
    /// the follow programs (exec's and fork's), and the sampler.
    fn attach_plan(&mut self, plan: &Plan) -> anyhow::Result<()> {
        // The end of an exit and the free of its task first: no state is kept for an exit whose end
        // or free would go unseen. (Attached after a point that refuses exits, the free missed the
        // frees of tasks refused while the rest attached, which left their refusals for good: 10 or
        // so a run where other processes on the machine exit deeper than the ancestry walk looks.)
        for planned in attach_order(plan) {
            for (program, ret) in planned.programs() {
                self.attach(program, planned.how, &planned.target, ret).with_context(|| {
                    format!("attaching {} {} (program {program})", planned.how, planned.target)
                })?;
            }
        }
        for program in programs::FOLLOW {
            self.attach(program, How::BtfTracepoint, program, false).with_context(|| {
                format!("attaching tp_btf {program} (follows processes as they exec and fork)")
            })?;
        }
        if self.options.probes.sample_hz > 0 {
            self.attach_sampler(self.options.probes.sample_hz).context(
                "attaching the sampling program to the cpu-clock of every CPU (--no-cpu-stacks \
                 goes without it)",
            )?;
        }
        Ok(())
    }

    /// The sampling program on the software CPU clock of every online CPU, `hz` times a second.
    fn attach_sampler(&mut self, hz: u32) -> anyhow::Result<()> {
        let name = programs::SAMPLE_CPU;
        let prog: &mut PerfEvent = self
            .probes
            .ebpf
            .program_mut(name)
            .with_context(|| format!("the eBPF object has no program {name}"))?
            .try_into()?;
        for cpu in online_cpus()? {
            prog.attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Frequency(u64::from(hz)),
                false,
            )
            .with_context(|| format!("on CPU {cpu}"))?;
        }
        self.probes.programs.push(name.to_owned());
        Ok(())
    }

    /// Attaches `program`, loaded ([`load_verified`]), as `how` to `target`.
    fn attach(&mut self, program: &str, how: How, target: &str, ret: bool) -> anyhow::Result<()> {
        if !self.attached.insert((program.to_owned(), target.to_owned())) {
            return Ok(());
        }
        let prog: &mut Program = self
            .probes
            .ebpf
            .program_mut(program)
            .with_context(|| format!("the eBPF object has no program {program}"))?;
        match how {
            How::BtfTracepoint => {
                let p: &mut BtfTracePoint = prog.try_into()?;
                p.attach()?;
            }
            How::Tracepoint => {
                let (category, name) =
                    target.split_once(':').context("tracepoint without category")?;
                let p: &mut TracePoint = prog.try_into()?;
                p.attach(category, name)?;
            }
            How::Kprobe => {
                let p: &mut KProbe = prog.try_into()?;
                let maxactive = ret.then_some(self.options.probes.kretprobe_maxactive);
                let event =
                    KprobeEvent::attach(self.tracefs, program, p.fd()?.as_fd(), target, maxactive)?;
                self.probes.kprobes.push(event);
            }
            How::Fentry if ret => {
                let p: &mut FExit = prog.try_into()?;
                p.attach()?;
            }
            How::Fentry => {
                let p: &mut FEntry = prog.try_into()?;
                p.attach()?;
            }
        }
        if !self.probes.programs.iter().any(|p| p == program) {
            self.probes.programs.push(program.to_owned());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use aya_obj::{Object, ParseError};

    use super::*;
    use crate::probes::sites;

    /// Whether `object` defines the global `name`. (aya-obj keeps its symbol table to itself;
    /// patching a global, as the loader does, fails with `SymbolNotFound` only when there is no
    /// such symbol: with no bytes, it fails otherwise for their size.)
    fn has_global(object: &mut Object, name: &str) -> bool {
        let patch = HashMap::from([(name, (&[][..], true))]);
        !matches!(object.patch_map_data(patch), Err(ParseError::SymbolNotFound { .. }))
    }

    /// The verifier's reason is its message, not the statistics and states it prints after.
    #[test]
    fn the_verifiers_reason_is_its_message() {
        let log = "0: (b7) r1 = 0\n1: (63) *(u32 *)(r10 -4) = r1\ninfinite loop detected at insn 2\n\
                   cur state: R1=0 R10=fp0\nold state: R1=0 R10=fp0\n\
                   processed 5 insns (limit 1000000) max_states_per_insn 0\n\
                   subprog 0 (rejected_by_the_verifier) main insns_self 11 insns_total 11 stack 8\n";
        assert_eq!(verdict(log), "infinite loop detected at insn 2");
        assert_eq!(verdict(""), "no reason given");
    }

    /// Every name userspace looks up in the object — the programs the plan can ask for in any
    /// attach mode, the follow programs, every map and global of `exitprof_common::names` — is in
    /// the object this binary embeds, so that a misspelt name fails here, not in a VM guest.
    #[test]
    fn the_objects_define_every_name_userspace_uses() {
        for (name, bytes, extra_globals) in
            [("default", OBJECT, &[][..]), ("compat", COMPAT_OBJECT, compat_globals::ALL)]
        {
            assert!(
                !bytes.is_empty(),
                "this test binary embeds stub eBPF objects (bpf-linker was missing when it was \
                 built), so the names cannot be checked: run `cargo xtask setup` and rebuild"
            );
            let mut object = Object::parse(bytes).expect("the embedded eBPF object parses");
            // The program no verifier accepts is the default object's only.
            let rejected = (name == "default")
                .then_some(("a test's rejection", programs::REJECTED_BY_THE_VERIFIER));
            let programs = sites::every_program()
                .into_iter()
                .chain(programs::FOLLOW.map(|program| ("following", program)))
                .chain(rejected);
            let mut missing: Vec<String> = programs
                .filter(|(_, program)| !object.programs.contains_key(*program))
                .map(|(point, program)| format!("program {program} (for {point})"))
                .collect();
            missing.extend(
                maps::ALL
                    .iter()
                    .filter(|map| !object.maps.contains_key(**map))
                    .map(|map| format!("map {map}")),
            );
            missing.extend(
                globals::ALL
                    .iter()
                    .chain(extra_globals)
                    .filter(|global| !has_global(&mut object, global))
                    .map(|global| format!("global {global}")),
            );
            assert!(missing.is_empty(), "the {name} eBPF object lacks: {}", missing.join(", "));
        }
    }
}
