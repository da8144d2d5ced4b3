//! The two eBPF objects a run may load: the default one, which needs Linux 5.18's BPF, and the
//! compat one, which does without it, each fallback at a cost the plan names. Which one a kernel
//! loads is the engine's to find out, by probing what the kernel has.

use serde::{Deserialize, Serialize};

/// The object a run loads, and how each part of its work is done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BpfObject {
    /// `default` or `compat`.
    pub name: String,
    /// Why the compat object: what the kernel lacks of the default one's needs (or that it was
    /// forced); empty for the default object.
    pub missing: Vec<String>,
    /// Where the marks of followed processes are kept.
    pub follow: String,
    /// How the ancestry of an exiting task is walked for a mark.
    pub walk: String,
    /// How an exit claims its slot.
    pub slot_claim: String,
    /// How task fields are read.
    pub task_fields: String,
    /// Where `sched_switch` finds the state of the task it switches out.
    pub switch_state: String,
}

impl BpfObject {
    /// The compat object, where the default one passed the probes but failed to load: `why`
    /// says what the kernel refused.
    pub fn instead_of_rejected(why: &str) -> Self {
        Self::compat(vec![format!("the default object, which the kernel rejected: {why}")])
    }

    /// The default object, which needs nothing the kernel may lack.
    pub fn default_object() -> Self {
        Self {
            name: "default".to_owned(),
            missing: Vec::new(),
            follow: "task_storage".to_owned(),
            walk: "bpf_loop, 64 generations".to_owned(),
            slot_claim: "cmpxchg".to_owned(),
            task_fields: "btf".to_owned(),
            switch_state: "prev_state".to_owned(),
        }
    }

    pub fn compat(missing: Vec<String>) -> Self {
        Self {
            name: "compat".to_owned(),
            missing,
            follow: "pid_hash".to_owned(),
            walk: "bounded loop, 24 generations".to_owned(),
            slot_claim: "hash_insert".to_owned(),
            task_fields: "probe_read".to_owned(),
            switch_state: "task_state".to_owned(),
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
