//! Loads exitprof's eBPF object and attaches its programs as the probe plan says.

use std::{os::fd::AsFd as _, path::Path, time::Instant};

use anyhow::{Context as _, bail};
use aya::{
    Btf, Ebpf, EbpfLoader,
    programs::{BtfTracePoint, FEntry, FExit, KProbe, Program, TracePoint},
};
use exitprof_common::{point::Marker, sizes::COMM_LEN};

use crate::{
    kernel::KernelFacts,
    probes::{
        kprobe_events,
        kprobe_events::KprobeEvent,
        plan::{How, Plan, Planned, SiteId},
        prog_stats,
    },
};

/// The eBPF object, built from `exitprof-ebpf` by the build script.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/exitprof"));

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

/// Load-time settings of the eBPF side.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    /// Record every exit on the machine.
    pub trace_all: bool,
    /// Record the exits of tasks with this name (NUL-padded; all zero: none).
    pub target_comm: [u8; COMM_LEN],
    /// Size of the exit-record ring buffer.
    pub ringbuf_bytes: u32,
    /// Instances per kretprobe: how many tasks can be inside one probed function at once.
    pub kretprobe_maxactive: u32,
    /// Take the kernel stack where an exiting task blocks.
    pub block_stacks: bool,
}

/// The loaded object with its programs attached. Dropping it detaches everything.
pub struct Probes {
    /// kprobe events created through tracefs; dropped (removed) before the programs unload.
    kprobes: Vec<KprobeEvent>,
    pub ebpf: Ebpf,
    /// Names of the attached programs.
    programs: Vec<String>,
}

/// What the kernel measured of one attached program while BPF statistics were on.
#[derive(Debug)]
pub struct ProgramCost {
    pub program: String,
    /// Times it ran.
    pub runs: u64,
    /// Time spent in it, in total (ns).
    pub run_ns: u64,
}

impl Probes {
    /// Probe hits the kernel dropped: kprobe misses (e.g. kretprobe instances exhausted) plus
    /// program runs skipped because another BPF program was running on the CPU.
    pub fn misses(&self) -> anyhow::Result<u64> {
        let mut misses = 0;
        for event in &self.kprobes {
            misses += event.profile().context("reading kprobe_profile")?.1;
        }
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

/// Loads the object and attaches the plan's programs plus fork tracking.
pub fn load_and_attach(
    plan: &Plan,
    facts: &KernelFacts,
    options: LoadOptions,
) -> anyhow::Result<Probes> {
    ensure_object_embedded()?;
    let kernel_btf =
        facts.btf.as_ref().context("exitprof needs kernel BTF (CONFIG_DEBUG_INFO_BTF)")?;
    let tracefs = facts.tracefs.as_path();
    let started = Instant::now();
    let btf = Btf::from_sys_fs().context("reading kernel BTF for the eBPF loader")?;
    let offset = |strukt, field| kernel_btf.field_offset(strukt, field);
    let task_pid = offset("task_struct", "pid")?;
    let task_tgid = offset("task_struct", "tgid")?;
    let task_comm = offset("task_struct", "comm")?;
    let task_nsproxy = offset("task_struct", "nsproxy")?;
    let nsproxy_ipc_ns = offset("nsproxy", "ipc_ns")?;
    let work_func = offset("work_struct", "func")?;
    let free_ipc = facts.kallsyms.address("free_ipc").unwrap_or(0);
    let (trace_all, block_stacks) = (u32::from(options.trace_all), u32::from(options.block_stacks));
    let ebpf = EbpfLoader::new()
        .btf(Some(&btf))
        .override_global("TRACE_ALL", &trace_all, true)
        .override_global("BLOCK_STACKS_ON", &block_stacks, true)
        .override_global("WAKEUP_BYTES", &(u64::from(options.ringbuf_bytes) / 4), true)
        .override_global("TARGET_COMM", &options.target_comm, true)
        .override_global("TASK_PID_OFFSET", &task_pid, true)
        .override_global("TASK_TGID_OFFSET", &task_tgid, true)
        .override_global("TASK_COMM_OFFSET", &task_comm, true)
        .override_global("TASK_NSPROXY_OFFSET", &task_nsproxy, true)
        .override_global("NSPROXY_IPC_NS_OFFSET", &nsproxy_ipc_ns, true)
        .override_global("WORK_FUNC_OFFSET", &work_func, true)
        .override_global("FREE_IPC_ADDR", &free_ipc, true)
        .map_max_entries("EXITS", options.ringbuf_bytes)
        .load(OBJECT)
        .context("loading exitprof's eBPF object")?;
    kprobe_events::remove_stale(tracefs);
    let mut probes = Probes { kprobes: Vec::new(), ebpf, programs: Vec::new() };
    let mut attacher = Attacher { probes: &mut probes, btf: &btf, tracefs, options };
    // The end of an exit first, so that no exit starts without its end being watched.
    let mut order: Vec<&Planned> = plan.points.iter().collect();
    order.sort_by_key(|p| p.site != SiteId::Marker(Marker::FinalSwitch));
    for planned in order {
        for (program, ret) in program_names(planned) {
            attacher.attach(&program, planned.how, &planned.target, ret).with_context(|| {
                format!("attaching {} {} (program {program})", planned.how, planned.target)
            })?;
        }
    }
    attacher
        .attach("task_newtask", How::BtfTracepoint, "task_newtask", false)
        .context("attaching tp_btf task_newtask (follows the workload's forks)")?;
    log::info!(
        "attached {} programs in {} ms",
        probes.programs.len(),
        started.elapsed().as_millis()
    );
    Ok(probes)
}

/// The eBPF programs that implement a planned point, each with whether it is a return probe.
fn program_names(planned: &Planned) -> Vec<(String, bool)> {
    let kind = |entry: &str, exit: &str| {
        let (slot, has_return) =
            planned.site.function_programs().expect("function hooks have programs");
        let mut names = vec![(format!("{entry}_{slot}"), false)];
        if has_return {
            names.push((format!("{exit}_{slot}"), true));
        }
        names
    };
    match planned.how {
        How::Kprobe => kind("kprobe_enter", "kretprobe_exit"),
        How::Fentry => kind("fentry_enter", "fexit_exit"),
        // Tracepoint programs are named after their tracepoint.
        How::BtfTracepoint => vec![(planned.target.clone(), false)],
        How::Tracepoint => {
            vec![(planned.target.rsplit(':').next().unwrap_or(&planned.target).to_owned(), false)]
        }
    }
}

struct Attacher<'a> {
    probes: &'a mut Probes,
    btf: &'a Btf,
    tracefs: &'a Path,
    options: LoadOptions,
}

impl Attacher<'_> {
    fn attach(&mut self, program: &str, how: How, target: &str, ret: bool) -> anyhow::Result<()> {
        let prog: &mut Program = self
            .probes
            .ebpf
            .program_mut(program)
            .with_context(|| format!("the eBPF object has no program {program}"))?;
        match how {
            How::BtfTracepoint => {
                let p: &mut BtfTracePoint = prog.try_into()?;
                p.load(target, self.btf)?;
                p.attach()?;
            }
            How::Tracepoint => {
                let (category, name) =
                    target.split_once(':').context("tracepoint without category")?;
                let p: &mut TracePoint = prog.try_into()?;
                p.load()?;
                p.attach(category, name)?;
            }
            How::Kprobe => {
                let p: &mut KProbe = prog.try_into()?;
                p.load()?;
                let maxactive = ret.then_some(self.options.kretprobe_maxactive);
                let event =
                    KprobeEvent::attach(self.tracefs, program, p.fd()?.as_fd(), target, maxactive)?;
                self.probes.kprobes.push(event);
            }
            How::Fentry if ret => {
                let p: &mut FExit = prog.try_into()?;
                p.load(target, self.btf)?;
                p.attach()?;
            }
            How::Fentry => {
                let p: &mut FEntry = prog.try_into()?;
                p.load(target, self.btf)?;
                p.attach()?;
            }
        }
        self.probes.programs.push(program.to_owned());
        Ok(())
    }
}
