//! Which of exitprof's two eBPF objects the running kernel loads, found by probing what it has
//! (its BTF's list of BPF helpers, the arguments of a tracepoint, the map types it creates),
//! never by its version number. The default object needs Linux 5.18's BPF; the compat object
//! does without it, each fallback at a cost the plan names.

use serde::Serialize;

use super::btf::KernelBtf;

/// Set (to anything but `0`) to load the compat object whatever the kernel has: tests compare
/// the two on one kernel.
pub const FORCE_COMPAT: &str = "EXITPROF_COMPAT";

/// The object a run loads, and how each part of its work is done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BpfObject {
    /// `default` or `compat`.
    pub name: &'static str,
    /// Why the compat object: what the kernel lacks of the default one's needs (or that it was
    /// forced); empty for the default object.
    pub missing: Vec<String>,
    /// Where the marks of followed processes are kept.
    pub follow: &'static str,
    /// How the ancestry of an exiting task is walked for a mark.
    pub walk: &'static str,
    /// How an exit claims its slot.
    pub slot_claim: &'static str,
    /// How task fields are read.
    pub task_fields: &'static str,
    /// Where `sched_switch` finds the state of the task it switches out.
    pub switch_state: &'static str,
}

impl BpfObject {
    /// The object for this kernel: the default one where it has all it needs.
    pub fn choose(btf: Option<&KernelBtf>, forced: bool) -> Self {
        let mut missing = Vec::new();
        if forced {
            missing.push(format!("forced ({FORCE_COMPAT})"));
        }
        if let Some(btf) = btf {
            let helper = |name: &str| btf.has_enumerator("bpf_func_id", name);
            if !helper("BPF_FUNC_loop") {
                missing.push("bpf_loop (5.17)".to_owned());
            }
            if !helper("BPF_FUNC_get_current_task_btf") {
                missing.push("bpf_get_current_task_btf (5.11)".to_owned());
            }
            if btf.tracepoint_arg_count("sched_switch") < 4 {
                missing.push("sched_switch's prev_state (5.18)".to_owned());
            }
        }
        if !aya::sys::is_map_supported(aya::maps::MapType::TaskStorage).unwrap_or(false) {
            missing.push("task storage (5.11; in tracing programs 5.13)".to_owned());
        }
        if missing.is_empty() { Self::default_object() } else { Self::compat(missing) }
    }

    /// Whether the environment forces the compat object.
    pub fn forced_by_environment() -> bool {
        std::env::var_os(FORCE_COMPAT).is_some_and(|v| !v.is_empty() && v != "0")
    }

    /// The default object, which needs nothing the kernel may lack.
    pub fn default_object() -> Self {
        Self {
            name: "default",
            missing: Vec::new(),
            follow: "task_storage",
            walk: "bpf_loop, 64 generations",
            slot_claim: "cmpxchg",
            task_fields: "btf",
            switch_state: "prev_state",
        }
    }

    fn compat(missing: Vec<String>) -> Self {
        Self {
            name: "compat",
            missing,
            follow: "pid_hash",
            walk: "bounded loop, 24 generations",
            slot_claim: "hash_insert",
            task_fields: "probe_read",
            switch_state: "task_state",
        }
    }

    /// The object of this name, for kernels that lack `missing` (a plan read back from a record
    /// file names its object).
    pub fn named(name: &str, missing: Vec<String>) -> Option<Self> {
        match name {
            "default" if missing.is_empty() => Some(Self::default_object()),
            "compat" => Some(Self::compat(missing)),
            _ => None,
        }
    }

    pub fn is_compat(&self) -> bool {
        self.name == "compat"
    }

    /// One line for the plan: the object, and for the compat one what it does instead and why.
    pub fn describe(&self) -> String {
        if !self.is_compat() {
            return "default (task storage, bpf_loop, cmpxchg, BTF task reads)".to_owned();
        }
        format!(
            "compat, for want of {}: marks in a hash by pid and start time, a walk of at most 24 \
             generations, slots claimed by hash inserts, task fields read by \
             bpf_probe_read_kernel (a helper call per context switch of the machine)",
            self.missing.join(", ")
        )
    }
}
