//! Loads exitprof's eBPF object and attaches its programs as the probe plan says.

use std::time::Instant;

use anyhow::{Context as _, bail};
use aya::{
    Btf, Ebpf, EbpfLoader,
    programs::{BtfTracePoint, FEntry, FExit, KProbe, TracePoint},
};
use exitprof_common::{point::Marker, sizes::COMM_LEN};

use crate::{
    kernel::{btf::KernelBtf, function_slot},
    plan::{How, Plan, Planned, SiteId},
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
}

/// The loaded object with its programs attached. Dropping it detaches everything.
pub struct Probes {
    pub ebpf: Ebpf,
}

/// Loads the object and attaches the plan's programs plus fork tracking.
pub fn load_and_attach(
    plan: &Plan,
    kernel_btf: &KernelBtf,
    options: LoadOptions,
) -> anyhow::Result<Probes> {
    ensure_object_embedded()?;
    let started = Instant::now();
    let btf = Btf::from_sys_fs().context("reading kernel BTF for the eBPF loader")?;
    let task_pid_offset = kernel_btf.field_offset("task_struct", "pid")?;
    let trace_all = u32::from(options.trace_all);
    let mut ebpf = EbpfLoader::new()
        .btf(Some(&btf))
        .override_global("TRACE_ALL", &trace_all, true)
        .override_global("TARGET_COMM", &options.target_comm, true)
        .override_global("TASK_PID_OFFSET", &task_pid_offset, true)
        .map_max_entries("EXITS", options.ringbuf_bytes)
        .load(OBJECT)
        .context("loading exitprof's eBPF object")?;
    if let Err(e) = aya_log::EbpfLogger::init(&mut ebpf) {
        log::debug!("eBPF-side logging is off: {e}");
    }
    let mut attached = 0;
    // The end of an exit first, so that no exit starts without its end being watched.
    let mut order: Vec<&Planned> = plan.points.iter().collect();
    order.sort_by_key(|p| p.site != SiteId::Marker(Marker::FinalSwitch));
    for planned in order {
        for program in program_names(planned) {
            attach(&mut ebpf, &btf, &program, planned.how, &planned.target).with_context(|| {
                format!("attaching {} {} (program {program})", planned.how, planned.target)
            })?;
            attached += 1;
        }
    }
    attach(&mut ebpf, &btf, "task_newtask", How::BtfTracepoint, "task_newtask")
        .context("attaching tp_btf task_newtask (follows the workload's forks)")?;
    attached += 1;
    log::info!("attached {attached} programs in {} ms", started.elapsed().as_millis());
    Ok(Probes { ebpf })
}

/// The eBPF programs that implement a planned point.
fn program_names(planned: &Planned) -> Vec<String> {
    let kind = |entry: &str, exit: &str| match planned.site {
        SiteId::Function(f) => {
            let slot = function_slot(f);
            vec![format!("{entry}_{slot}"), format!("{exit}_{slot}")]
        }
        SiteId::Marker(Marker::DoExit) => vec![format!("{entry}_do_exit")],
        SiteId::Marker(Marker::DoTaskDead) => vec![format!("{entry}_do_task_dead")],
        SiteId::Marker(m) => unreachable!("marker {m:?} is not a function"),
    };
    match planned.how {
        How::Kprobe => kind("kprobe_enter", "kretprobe_exit"),
        How::Fentry => kind("fentry_enter", "fexit_exit"),
        // Tracepoint programs are named after their tracepoint.
        How::BtfTracepoint => vec![planned.target.clone()],
        How::Tracepoint => {
            vec![planned.target.rsplit(':').next().unwrap_or(&planned.target).to_owned()]
        }
    }
}

fn attach(ebpf: &mut Ebpf, btf: &Btf, program: &str, how: How, target: &str) -> anyhow::Result<()> {
    let prog = ebpf
        .program_mut(program)
        .with_context(|| format!("the eBPF object has no program {program}"))?;
    match how {
        How::BtfTracepoint => {
            let p: &mut BtfTracePoint = prog.try_into()?;
            p.load(target, btf)?;
            p.attach()?;
        }
        How::Tracepoint => {
            let (category, name) = target.split_once(':').context("tracepoint without category")?;
            let p: &mut TracePoint = prog.try_into()?;
            p.load()?;
            p.attach(category, name)?;
        }
        How::Kprobe => {
            let p: &mut KProbe = prog.try_into()?;
            p.load()?;
            p.attach(target, 0)?;
        }
        How::Fentry if program.starts_with("fexit") => {
            let p: &mut FExit = prog.try_into()?;
            p.load(target, btf)?;
            p.attach()?;
        }
        How::Fentry => {
            let p: &mut FEntry = prog.try_into()?;
            p.load(target, btf)?;
            p.attach()?;
        }
    }
    Ok(())
}
