//! Which of exitprof's two eBPF objects the running kernel loads, found by probing what it has
//! (the helpers its verifier gives tracing programs, BPF `cmpxchg`, the arguments of a
//! tracepoint, the map types it creates), never by its version number. The default object
//! needs Linux 5.18's BPF; the compat object does without it, each fallback at a cost the plan
//! names. Where the default object passes the probes and the verifier still rejects it, the
//! compat object is loaded instead (`crate::probes::load`), saying why.

use aya::sys::BpfHelper;
use serde::Serialize;

use super::{btf::KernelBtf, verifier_probes};

/// Set (to anything but `0`) to load the compat object whatever the kernel has: tests compare
/// the two on one kernel.
pub const FORCE_COMPAT: &str = "EXITPROF_COMPAT";

/// Set (to anything but `0`) by tests only, to have a default object the verifier rejects for
/// real: loading it then loads a program of it that no verifier accepts
/// (`rejected_by_the_verifier`, an infinite loop), and the compat object must be taken instead.
/// Not an option of exitprof's: it exists for the tests of that fallback.
pub const TEST_REJECT_DEFAULT: &str = "EXITPROF_TEST_REJECT_DEFAULT";

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
        // Each helper the default object calls that the compat one does without, as the
        // verifier gives it to tracing programs; where the probe cannot run, as BTF lists it.
        let helpers = [
            (BpfHelper::BPF_FUNC_loop, "BPF_FUNC_loop", "bpf_loop (5.17)"),
            (
                BpfHelper::BPF_FUNC_get_current_task_btf,
                "BPF_FUNC_get_current_task_btf",
                "bpf_get_current_task_btf (5.11)",
            ),
            (
                BpfHelper::BPF_FUNC_task_storage_get,
                "BPF_FUNC_task_storage_get",
                "task storage in tracing programs (5.13)",
            ),
        ];
        for (helper, name, needs) in helpers {
            let listed = || btf.is_none_or(|btf| btf.has_enumerator("bpf_func_id", name));
            if !verifier_probes::tracing_helper(helper).unwrap_or_else(listed) {
                missing.push(needs.to_owned());
            }
        }
        if verifier_probes::cmpxchg() == Some(false) {
            missing.push("BPF cmpxchg (5.12)".to_owned());
        }
        if btf.is_some_and(|btf| btf.tracepoint_arg_count("sched_switch") < 4) {
            missing.push("sched_switch's prev_state (5.18)".to_owned());
        }
        if !aya::sys::is_map_supported(aya::maps::MapType::TaskStorage).unwrap_or(false) {
            missing.push("task storage (5.11)".to_owned());
        }
        if missing.is_empty() { Self::default_object() } else { Self::compat(missing) }
    }

    /// The compat object, where the default one passed the probes but failed to load: `why`
    /// says what the kernel refused.
    pub fn instead_of_rejected(why: &str) -> Self {
        Self::compat(vec![format!("the default object, which the kernel rejected: {why}")])
    }

    /// Whether the tests ask for a default object the verifier rejects
    /// ([`TEST_REJECT_DEFAULT`]).
    pub fn rejection_asked_for() -> bool {
        set_in_environment(TEST_REJECT_DEFAULT)
    }

    /// Whether the environment forces the compat object.
    pub fn forced_by_environment() -> bool {
        set_in_environment(FORCE_COMPAT)
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

/// Whether the environment variable `name` is set, to anything but `0`.
fn set_in_environment(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}
