//! Which of exitprof's two eBPF objects the running kernel loads, found by probing what it has
//! (the helpers its verifier gives tracing programs, BPF `cmpxchg`, the arguments of a
//! tracepoint, the map types it creates), never by its version number. The default object
//! needs Linux 5.18's BPF; the compat object does without it, each fallback at a cost the plan
//! names. Where the default object passes the probes and the verifier still rejects it, the
//! compat object is loaded instead (`crate::probes::load`), saying why.

use aya::sys::BpfHelper;
pub use exitprof_core::kernel::bpf_object::BpfObject;

use super::{btf::KernelBtf, verifier_probes};

/// Set (to anything but `0`) to load the compat object whatever the kernel has: tests compare
/// the two on one kernel.
pub const FORCE_COMPAT: &str = "EXITPROF_COMPAT";

/// Set (to anything but `0`) by tests only, to have a default object the verifier rejects for
/// real: loading it then loads a program of it that no verifier accepts
/// (`rejected_by_the_verifier`, an infinite loop), and the compat object must be taken instead.
/// Not an option of exitprof's: it exists for the tests of that fallback.
pub const TEST_REJECT_DEFAULT: &str = "EXITPROF_TEST_REJECT_DEFAULT";

/// The object for this kernel: the default one where it has all it needs.
pub fn choose(btf: Option<&KernelBtf>, forced: bool) -> BpfObject {
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
    if missing.is_empty() { BpfObject::default_object() } else { BpfObject::compat(missing) }
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

/// Whether the environment variable `name` is set, to anything but `0`.
fn set_in_environment(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}
