//! `exitprof __floor`: an empty program on `sched_switch`, attached alone until SIGINT or
//! SIGTERM, so that the benchmark can measure what any program there costs every context switch
//! of the machine, beside what exitprof's own costs: by the time the switches take, and (with
//! `--bpf-stats`) by the kernel's count of the program's run time.

use anyhow::Context as _;
use aya::{Btf, EbpfLoader, programs::BtfTracePoint};
use exitprof_common::names::programs;

use super::{
    counts::ProgramCost,
    load::{OBJECT, ensure_object_embedded},
    prog_stats::{self, enable_bpf_stats},
};
use crate::base::signals::Signals;

/// Attaches the empty program and holds it until SIGINT or SIGTERM; with `bpf_stats`, prints
/// its runs and run time meanwhile as one JSON line (`{"program":…,"runs":…,"run_ns":…}`).
pub async fn hold(bpf_stats: bool) -> anyhow::Result<()> {
    ensure_object_embedded()?;
    let mut signals = Signals::new()?;
    let stats = bpf_stats.then(enable_bpf_stats).transpose()?;
    let btf = Btf::from_sys_fs().context("reading the kernel's BTF")?;
    let mut ebpf = EbpfLoader::new()
        .btf(Some(&btf))
        .allow_unsupported_maps()
        .load(OBJECT)
        .context("loading exitprof's eBPF object")?;
    let program: &mut BtfTracePoint = ebpf
        .program_mut(programs::SCHED_SWITCH_FLOOR)
        .context("the eBPF object has no empty sched_switch program")?
        .try_into()?;
    program.load(programs::SCHED_SWITCH, &btf).context("loading the empty sched_switch program")?;
    program.attach().context("attaching the empty sched_switch program")?;
    // The line the benchmark waits for, as for any run that watches.
    eprintln!("exitprof: watching: an empty program on sched_switch, until SIGINT or SIGTERM");
    signals.next().await;
    if stats.is_some() {
        use std::os::fd::AsFd as _;
        let counted = prog_stats::read(program.fd()?.as_fd())
            .context("reading the empty program's statistics")?;
        let cost = ProgramCost {
            program: programs::SCHED_SWITCH_FLOOR.to_owned(),
            runs: counted.runs,
            run_ns: counted.run_ns,
        };
        println!("{}", serde_json::to_string(&cost)?);
    }
    // Dropping the object detaches the program.
    Ok(())
}
