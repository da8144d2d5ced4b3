//! `exitprof plan`: the probe plan for the running kernel, for a person or as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use exitprof_core::document::table::TextTable;

use exitprof_engine::{
    kernel::{
        KernelFacts,
        arch::Arch,
        bpf_memory::{BpfMemory, MemlockLimit},
        bpf_object::BpfObject,
    },
    probes::{
        memlock::bytes,
        plan::{AttachMode, Plan, Planned, Unplanned},
    },
};

/// The plan and the calibration it was resolved from.
#[derive(Debug, Serialize)]
pub struct PlanDocument {
    pub kernel: String,
    /// The architecture exitprof runs on, and what it relies on there.
    pub arch: Arch,
    pub mode: AttachMode,
    /// `"yes"`, or why not.
    pub kprobes: String,
    pub fentry: String,
    pub btf: bool,
    pub tracefs: String,
    /// Where the kernel charges BPF memory: `RLIMIT_MEMLOCK` (before 5.11) with the limit, the
    /// memory cgroup, or why it could not be told.
    pub bpf_memory: String,
    /// The eBPF object this kernel loads.
    pub object: BpfObject,
    pub points: Vec<Planned>,
    pub unavailable: Vec<Unplanned>,
}

impl PlanDocument {
    pub fn new(facts: &KernelFacts, plan: &Plan) -> Self {
        let feature = |r: &Result<(), String>| match r {
            Ok(()) => "yes".to_owned(),
            Err(why) => format!("no: {why}"),
        };
        Self {
            kernel: plan.kernel.clone(),
            arch: facts.arch,
            mode: plan.mode,
            kprobes: feature(&facts.kprobes),
            fentry: feature(&facts.fentry),
            btf: facts.layout.is_ok(),
            tracefs: facts.tracefs.display().to_string(),
            bpf_memory: match &facts.bpf_memory {
                Ok(BpfMemory::MemoryCgroup) => "the memory cgroup".to_owned(),
                Ok(BpfMemory::Memlock) => match MemlockLimit::read() {
                    Ok(limit) => format!(
                        "RLIMIT_MEMLOCK, {} here (hard limit {})",
                        bytes(limit.soft),
                        bytes(limit.hard)
                    ),
                    Err(e) => format!("RLIMIT_MEMLOCK (unread: {e})"),
                },
                Err(why) => format!("unknown: {why}"),
            },
            object: plan.object.clone(),
            points: plan.points.clone(),
            unavailable: plan.unavailable.clone(),
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "kernel   {}  (--attach {})", self.kernel, self.mode);
        let _ = writeln!(out, "arch     {}", self.arch.describe());
        let _ = writeln!(out, "kprobes  {}", self.kprobes);
        let _ = writeln!(out, "fentry   {}", self.fentry);
        let _ = writeln!(out, "BTF      {}", if self.btf { "yes" } else { "no" });
        let _ = writeln!(out, "tracefs  {}", self.tracefs);
        let _ = writeln!(out, "BPF memory charged to {}", self.bpf_memory);
        let _ = writeln!(out, "object   {}", self.object.describe());
        let _ = writeln!(out, "\nprobe points, in exit-path order ({}):", self.points.len());
        let mut table = TextTable::new(["point", "mode", "attached to", "note"]);
        for p in &self.points {
            table.add_row([
                p.point,
                &p.how.to_string(),
                &p.target,
                p.note.as_deref().unwrap_or(""),
            ]);
        }
        let _ = writeln!(out, "{table}");
        if !self.unavailable.is_empty() {
            let _ = writeln!(out, "\nnot attached ({}):", self.unavailable.len());
            let mut table = TextTable::new(["point", "why"]);
            for u in &self.unavailable {
                table.add_row([u.point.as_str(), u.reason.as_str()]);
            }
            let _ = writeln!(out, "{table}");
        }
        out
    }
}
