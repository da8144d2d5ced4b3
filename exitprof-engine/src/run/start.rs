//! The start of a run: the request checked against the machine, the probe plan, the programs
//! attached, and the target started or found.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use exitprof_common::{names, sizes::COMM_LEN, task};

use exitprof_core::run::RunRequest;

use super::cgroupfs::{self, CgroupTree};
use crate::{
    base::{UsageError, pidfd::PidFd},
    kernel::{KernelFacts, bpf_object::BpfObject, kallsyms::Kallsyms, tracefs},
    probes::{
        ProbeOptions,
        counts::KernelLosses,
        load::{self, LoadOptions, Probes},
        maps::{self, RecordStream, RunStart},
        plan::{AttachMode, Plan, Planned, Wants},
        privileges, resolve,
    },
    profiled::{
        Storm, Target, watch,
        workload::{
            self, ChildOutcome, Killer, Workload,
            limits::{self, SystemLimits},
            threads,
        },
    },
};

/// Most threads in one burst when measuring how fast this machine can run a storm.
const BURST_THREADS: u32 = 1000;

/// Checks what can be checked before loading anything: the eBPF object and the privileges.
pub fn preflight() -> anyhow::Result<()> {
    load::ensure_object_embedded()?;
    privileges::check()?;
    Ok(())
}

/// Calibrates the kernel and resolves the probe plan.
pub fn plan(mode: AttachMode, wants: Wants) -> anyhow::Result<(KernelFacts, Plan)> {
    let tracefs = tracefs::ensure_mounted()?;
    let mut facts = KernelFacts::calibrate(tracefs).context("calibrating kernel features")?;
    let plan = resolve::for_kernel(&facts, mode, wants)?;
    facts.planned(&load::loader_types(&plan));
    Ok((facts, plan))
}

/// The eBPF object that loads on this kernel for `plan`: the plan's, verified by loading it and
/// every program the plan attaches (none is attached), or the compat one where the kernel
/// rejects it (`exitprof plan`, which then says so as a run would).
pub fn loaded_object(
    plan: &Plan,
    facts: &KernelFacts,
    probes: ProbeOptions,
) -> anyhow::Result<BpfObject> {
    let options = LoadOptions {
        trace_all: false,
        target_comm: [0; COMM_LEN],
        target_cgroup: 0,
        await_frees: true,
        ringbuf_bytes: 1 << 20,
        exit_slots: 1 << 10,
        probes,
    };
    Ok(load::load_verified(plan, facts, options)?.object)
}

/// A target checked against the machine, ready to start or watch.
pub enum Prepared {
    Workload(Workload),
    Pid(u32),
    Comm([u8; COMM_LEN]),
    /// The id of a cgroup of the v2 hierarchy.
    Cgroup(u64),
    All,
}

/// Checks the request against the machine before anything is loaded: a storm within the limits,
/// a reachable --rate, a command that exists, a pid that does. Returns the ready target and, for
/// --rate, the burst rate measured.
pub fn prepare(target: &Target) -> anyhow::Result<(Prepared, Option<f64>)> {
    match target {
        Target::Storm(storm) => {
            let limits = SystemLimits::read().context("reading the system's limits")?;
            limits::check(storm, &limits).map_err(|e| UsageError(e.to_string()))?;
            let unshares = match storm {
                Storm::Ipcns(_) => Some(("ipcns", "CLONE_NEWIPC")),
                Storm::Netns(_) => Some(("netns", "CLONE_NEWNET")),
                _ => None,
            };
            if let Some((name, flag)) = unshares
                && !privileges::has_capability(privileges::CAP_SYS_ADMIN)
            {
                anyhow::bail!(
                    "--workload {name} needs CAP_SYS_ADMIN: its children unshare({flag})"
                );
            }
            let burst_rate = match storm {
                Storm::Threads(p) => p.rate.map(|rate| check_rate(rate, p.threads)).transpose()?,
                _ => None,
            };
            Ok((Prepared::Workload(Workload::Storm(*storm)), burst_rate))
        }
        Target::Command(argv) => {
            let name = &argv[0];
            let path_var = std::env::var_os("PATH");
            let program = workload::command::resolve(name, path_var.as_deref())
                .map_err(|e| UsageError(e.to_string()))?;
            Ok((Prepared::Workload(Workload::Command { program, argv: argv.clone() }), None))
        }
        Target::Pid(pid) => {
            if !watch::process_exists(*pid) {
                return Err(UsageError(format!("--pid {pid}: no such process")).into());
            }
            // A thread is followed through its process only: name the process to watch.
            if let Some(tgid) = watch::thread_group_of(*pid).filter(|tgid| tgid != pid) {
                return Err(UsageError(format!(
                    "--pid {pid} is a thread of process {tgid}, not a process: use --pid {tgid}"
                ))
                .into());
            }
            Ok((Prepared::Pid(*pid), None))
        }
        Target::Comm(name) => {
            let mut comm = [0; COMM_LEN];
            comm[..name.len()].copy_from_slice(name.as_bytes());
            Ok((Prepared::Comm(comm), None))
        }
        Target::Cgroup(path) => {
            let id = cgroupfs::target_cgroup(path).map_err(|e| UsageError(e.to_string()))?;
            Ok((Prepared::Cgroup(id), None))
        }
        Target::All => Ok((Prepared::All, None)),
    }
}

/// Fails when `rate` is beyond what bursts of the storm's threads reach on this machine now,
/// without probes (which only slow exits down). Returns the best burst rate.
fn check_rate(rate: u64, threads: u32) -> anyhow::Result<f64> {
    let burst = threads.min(BURST_THREADS);
    let mut best: f64 = 0.0;
    for _ in 0..3 {
        best = best.max(threads::burst_rate(burst).context("measuring the machine's exit rate")?);
    }
    log::info!("{burst}-thread bursts without sleeps reach {best:.0} exits/s");
    if rate as f64 > best {
        return Err(UsageError(format!(
            "--rate {rate} exits/s is out of reach: bursts of {burst} threads with no sleep \
             reached at most {best:.0} exits/s on this machine just now (without probes, which \
             only slow exits down); ask for less, or use --stagger-us 0 to run as fast as it goes"
        ))
        .into());
    }
    Ok(best)
}

/// The probe plan to use for `target`.
pub fn plan_for(target: &Target, probes: ProbeOptions) -> anyhow::Result<(KernelFacts, Plan)> {
    let driven = matches!(target, Target::Storm(_) | Target::Command(_));
    let wants = Wants {
        // Following IPC namespace frees costs a probe on every kfree in tracepoint mode: only
        // for the storm that makes them.
        ipc_frees_via_kfree: matches!(target, Target::Storm(Storm::Ipcns(_))),
        syscall_tracepoints: probes.syscall_tracepoints.unwrap_or(driven),
        cgroup_paths: probes.cgroup_paths,
        unusable_symbols: false,
    };
    if probes.cgroup_paths {
        CgroupTree::mounted().map_err(|e| UsageError(e.to_string()))?;
    }
    let (facts, plan) = plan(probes.attach, wants)?;
    let plan = plan.with_points(probes.points);
    describe_attach(&plan.points);
    Ok((facts, plan))
}

/// exitprof's programs attached, with the ring buffers they fill. Dropping it detaches them.
pub struct Attached {
    pub probes: Probes,
    pub(super) exits: RecordStream,
    pub(super) deferred: RecordStream,
    pub(super) stacks: RecordStream,
    pub(super) cgroups: RecordStream,
    /// Where exits are grouped by cgroup: the tree, for the cgroups made before the run.
    pub(super) cgroup_tree: Option<CgroupTree>,
    /// Names the kernel stacks the programs take.
    pub(super) symbols: Arc<Kallsyms>,
    /// The number of the last run begun.
    epoch: u32,
}

impl Attached {
    pub fn new(plan: &Plan, facts: &KernelFacts, options: LoadOptions) -> anyhow::Result<Self> {
        let mut probes = load::load_and_attach(plan, facts, options)?;
        // exitprof's own exits are never part of a target (--all, --comm): the kernel side
        // leaves out this process and the threads it creates.
        maps::track(&probes.ebpf, &[std::process::id()], task::EXCLUDED)?;
        let exits = RecordStream::take(&mut probes.ebpf, names::maps::EXITS)?;
        let deferred = RecordStream::take(&mut probes.ebpf, names::maps::DEFERRED)?;
        let stacks = RecordStream::take(&mut probes.ebpf, names::maps::STACKS)?;
        let cgroups = RecordStream::take(&mut probes.ebpf, names::maps::CGROUPS)?;
        let cgroup_tree = plan.names_cgroups().then(CgroupTree::mounted).transpose()?;
        Ok(Self {
            probes,
            exits,
            deferred,
            stacks,
            cgroups,
            cgroup_tree,
            symbols: facts.kallsyms.clone(),
            epoch: 0,
        })
    }

    /// Begins the next run: its exits are opened from now on, and carry its number. Before the
    /// target starts, so that none of its exits comes before.
    pub fn begin_run(&mut self) -> anyhow::Result<RunStart> {
        self.epoch += 1;
        maps::begin_run(&mut self.probes.ebpf, self.epoch)
    }

    /// What the kernel side lost so far.
    pub fn kernel_losses(&self) -> anyhow::Result<(KernelLosses, u64)> {
        Ok((maps::kernel_losses(&self.probes.ebpf)?, self.probes.misses()?))
    }

    /// Detaches everything, saying how long it took.
    pub fn detach(self) {
        let detach_start = Instant::now();
        drop(self);
        log::info!("detached in {} ms", detach_start.elapsed().as_millis());
    }
}

/// The exit ring buffer for a target: room for a storm's every exit, up to what the fastest
/// storms measured here fill between two reads, 4 MiB (about 20,000 exits a second of records of
/// up to 1 KiB, read every 20 ms and whenever a quarter is unread: several times over); 1 MiB
/// for targets of unknown size, which rarely exit that fast. Smaller is less memory for
/// exitprof (the buffer is resident twice); a buffer too small shows as `ringbuf_full` losses.
fn ringbuf_bytes_for(prepared: &Prepared) -> u32 {
    const MIN: u64 = 256 << 10;
    const MAX: u64 = 4 << 20;
    const UNKNOWN: u64 = 1 << 20;
    /// A record of a kprobe-mode exit (about 30 hits) and some.
    const PER_EXIT: u64 = 1 << 10;
    let bytes = match prepared {
        Prepared::Workload(workload) => workload
            .expected_exits()
            .map_or(UNKNOWN, |exits| exits.saturating_mul(PER_EXIT).next_power_of_two()),
        _ => UNKNOWN,
    };
    u32::try_from(bytes.clamp(MIN, MAX)).expect("at most 4 MiB")
}

/// Slots for exits in progress, kept by the kernel for a target. An exit takes one of two
/// slots its pid picks (the pid's low bits, or a mix of all its bits) and is lost, counted
/// (`state_map_full`), when other exits in progress hold both. A thread storm's threads, whose
/// pids run in turn, may all exit at once: twice as many slots leave room for the pids others
/// took in between. Each slot is some 1.5 KB of kernel memory.
fn exit_slots_for(prepared: &Prepared) -> u32 {
    const DEFAULT: u32 = 4096;
    match prepared {
        Prepared::Workload(Workload::Storm(Storm::Threads(p))) => {
            p.threads.saturating_mul(2).clamp(DEFAULT, 1 << 15).next_power_of_two()
        }
        _ => DEFAULT,
    }
}

/// The load-time options for a run's target.
pub fn load_options(prepared: &Prepared, request: &RunRequest) -> LoadOptions {
    LoadOptions {
        trace_all: matches!(prepared, Prepared::All),
        target_comm: match prepared {
            Prepared::Comm(comm) => *comm,
            _ => [0; COMM_LEN],
        },
        target_cgroup: match prepared {
            Prepared::Cgroup(id) => *id,
            _ => 0,
        },
        await_frees: true,
        ringbuf_bytes: request.ringbuf_bytes.unwrap_or_else(|| ringbuf_bytes_for(prepared)),
        exit_slots: request.exit_slots.unwrap_or_else(|| exit_slots_for(prepared)),
        probes: request.probes,
    }
}

/// The target, started or found, with what will stop collecting it.
pub struct Started {
    pub stop: Pin<Box<dyn Future<Output = anyhow::Result<Stop>>>>,
    /// Kills exitprof's children, for targets it started.
    pub killer: Option<Killer>,
}

/// Starts the workload's children, or begins to watch processes exitprof did not start. With
/// the loaded object (`ebpf`), their exits are recorded.
pub fn start(
    prepared: Prepared,
    target: &Target,
    duration: Option<Duration>,
    quiet_stdout: bool,
    mut ebpf: Option<&mut aya::Ebpf>,
) -> anyhow::Result<Started> {
    match prepared {
        Prepared::Workload(workload) => {
            let gated = workload::spawn(&workload, quiet_stdout)?;
            if let Some(ebpf) = ebpf.as_deref_mut() {
                let role = match workload {
                    Workload::Storm(_) => task::DRIVER,
                    Workload::Command { .. } => task::FOLLOWED,
                };
                maps::track(ebpf, &gated.pids(), role)?;
                maps::decide_creations(ebpf, maps::Decided::All)?;
            }
            let running = gated.open()?;
            let killer = Some(running.killer());
            let waiter = tokio::task::spawn_blocking(move || running.wait());
            let stop = Box::pin(async move {
                Ok(Stop::Reaped(waiter.await.context("workload waiter panicked")??))
            });
            Ok(Started { stop, killer })
        }
        Prepared::Pid(pid) => {
            let exited = PidFd::open(pid)
                .with_context(|| format!("pid {pid} ended before exitprof could watch it"))?;
            let ebpf = ebpf.context("watching a process needs exitprof's probes")?;
            let followed = track_tree(ebpf, pid)?;
            maps::decide_creations(ebpf, maps::Decided::FromNow)?;
            eprintln!(
                "exitprof: watching pid {pid} and its descendants ({followed} now){}",
                until(duration, " or until it exits")
            );
            let stop = Box::pin(async move {
                tokio::select! {
                    r = exited.exited() => {
                        r.map(|()| Stop::ProcessExited).context("waiting for the watched process")
                    }
                    () = sleep_or_forever(duration) => Ok(Stop::Elapsed),
                }
            });
            Ok(Started { stop, killer: None })
        }
        Prepared::Comm(_) | Prepared::Cgroup(_) | Prepared::All => {
            let what = match target {
                Target::Comm(name) => format!("tasks named {name:?}"),
                Target::Cgroup(path) => format!("tasks in cgroup {} and below it", path.display()),
                _ => "every exit on the machine".to_owned(),
            };
            eprintln!("exitprof: watching {what}{}", until(duration, ""));
            let stop = Box::pin(async move {
                sleep_or_forever(duration).await;
                Ok(Stop::Elapsed)
            });
            Ok(Started { stop, killer: None })
        }
    }
}

/// What stopped collecting a target's records. The report says it as [`super::Ended`], which
/// also tells a workload killed on a signal from one that ended by itself.
pub enum Stop {
    /// exitprof's children ended and were reaped.
    Reaped(ChildOutcome),
    /// The watched process exited.
    ProcessExited,
    /// --duration elapsed.
    Elapsed,
    /// SIGINT or SIGTERM, while watching processes exitprof did not start.
    Signal,
}

/// Follows `pid`, and with it every process below it (the kernel side finds an exit's marked
/// ancestor). Returns how many descendants it has now.
fn track_tree(ebpf: &aya::Ebpf, pid: u32) -> anyhow::Result<usize> {
    maps::track(ebpf, &[pid], task::FOLLOWED)?;
    Ok(watch::descendants(pid)
        .with_context(|| format!("reading /proc for the descendants of {pid}"))?
        .len())
}

fn until(duration: Option<Duration>, or_else: &str) -> String {
    match duration {
        Some(d) => format!(" for {:.1} s{or_else} (Ctrl-C stops it earlier)", d.as_secs_f64()),
        None => format!(" until Ctrl-C{or_else}"),
    }
}

async fn sleep_or_forever(duration: Option<Duration>) {
    match duration {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

fn describe_attach(points: &[Planned]) {
    let mut by_how: Vec<(String, usize)> = Vec::new();
    for p in points {
        let how = p.how.to_string();
        match by_how.iter_mut().find(|(h, _)| *h == how) {
            Some((_, n)) => *n += 1,
            None => by_how.push((how, 1)),
        }
    }
    let kinds: Vec<String> = by_how.iter().map(|(h, n)| format!("{h}: {n}")).collect();
    log::info!("attaching {} probe points ({})", points.len(), kinds.join(", "));
}
