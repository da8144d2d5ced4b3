//! Feature calibration: what the running kernel supports, read once at startup.

use std::{
    collections::HashSet,
    fs,
    path::{Path, PathBuf},
    sync::Arc,
};

use super::{
    arch::{self, Arch},
    bpf_memory::BpfMemory,
    bpf_object::{self, BpfObject},
    btf::{KernelBtf, KernelLayout, LoaderType},
    fentry_attach,
    kallsyms::Kallsyms,
    version::KernelVersion,
};

/// The kprobe PMU; absent when the kernel is built without `CONFIG_KPROBES`.
const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe";

/// What the running kernel supports.
pub struct KernelFacts {
    /// The architecture exitprof was built for, and runs on.
    pub arch: Arch,
    /// Where tracefs is mounted.
    pub tracefs: PathBuf,
    pub release: String,
    pub version: KernelVersion,
    /// `Err(why)` when kprobes cannot be created.
    pub kprobes: Result<(), String>,
    /// `Err(why)` when fentry/fexit programs cannot be loaded.
    pub fentry: Result<(), String>,
    /// For planning only: dropped once the plan is made ([`KernelFacts::planned`]).
    pub btf: Option<KernelBtf>,
    /// What aya's loader needs of the kernel's BTF for the plan's programs
    /// ([`KernelBtf::loader_skeleton`]); empty before the plan is made, or without BTF.
    pub loader_btf: Vec<u8>,
    /// What the programs need of the kernel's types; `Err(why)` without BTF.
    pub layout: Result<KernelLayout, String>,
    /// Shared with the loaded probes, which name kernel stacks with it.
    pub kallsyms: Arc<Kallsyms>,
    /// `available_filter_functions` when readable: the functions ftrace, hence fentry, can hook.
    pub ftrace_functions: Option<HashSet<String>>,
    /// Functions kprobes refuse.
    pub kprobe_blacklist: HashSet<String>,
    /// The eBPF object this kernel loads.
    pub object: BpfObject,
    /// Where the kernel charges the memory of BPF maps and programs; `Err(why)` when it could
    /// not be told.
    pub bpf_memory: Result<BpfMemory, String>,
}

impl KernelFacts {
    /// Calibrates the running kernel. `tracefs` is the mounted tracefs root.
    pub fn calibrate(tracefs: &Path) -> anyhow::Result<Self> {
        let release = KernelVersion::running_release()?;
        let version = release.parse().map_err(anyhow::Error::msg)?;
        let btf = match KernelBtf::load() {
            Ok(btf) => Some(btf),
            Err(e) => {
                log::warn!("{e}");
                None
            }
        };
        let kprobes = if Path::new(KPROBE_PMU).exists() {
            Ok(())
        } else {
            Err(format!(
                "this kernel has no kprobes ({KPROBE_PMU} is missing: CONFIG_KPROBES is off)"
            ))
        };
        let fentry = calibrate_fentry(btf.as_ref());
        let object = bpf_object::choose(btf.as_ref(), bpf_object::forced_by_environment());
        let bpf_memory = BpfMemory::of_running_kernel().map_err(|e| {
            format!("a map made to see where the kernel charges BPF memory failed: {e}")
        });
        let layout = match &btf {
            Some(btf) => KernelLayout::read(btf).map_err(|e| e.to_string()),
            None => Err("kernel BTF is missing (is CONFIG_DEBUG_INFO_BTF on?)".to_owned()),
        };
        let kallsyms = Arc::new(Kallsyms::open()?);
        let ftrace_functions =
            read_lines(&tracefs.join("available_filter_functions")).map(|lines| {
                lines.map(|l| l.split_whitespace().next().unwrap_or("").to_owned()).collect()
            });
        let kprobe_blacklist = read_lines(&tracefs.join("../debug/kprobes/blacklist"))
            .or_else(|| read_lines(Path::new("/sys/kernel/debug/kprobes/blacklist")))
            .map(|lines| {
                lines.filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned)).collect()
            })
            .unwrap_or_default();
        Ok(Self {
            arch: arch::BUILT,
            tracefs: tracefs.to_owned(),
            release,
            version,
            kprobes,
            fentry,
            btf,
            loader_btf: Vec::new(),
            layout,
            kallsyms,
            ftrace_functions,
            kprobe_blacklist,
            object,
            bpf_memory,
        })
    }
}

impl KernelFacts {
    /// Forgets what only planning needs once the plan is made, keeping of the kernel's BTF what
    /// the loader needs for the types `wanted`.
    pub fn planned(&mut self, wanted: &[LoaderType<'_>]) {
        if let Some(btf) = self.btf.take() {
            self.loader_btf = btf.loader_skeleton(wanted);
        }
        self.ftrace_functions = None;
        self.kprobe_blacklist = HashSet::new();
    }
}

fn read_lines(path: &Path) -> Option<impl Iterator<Item = String>> {
    let text = fs::read_to_string(path).ok()?;
    Some(text.lines().map(str::to_owned).collect::<Vec<_>>().into_iter())
}

/// Whether fentry/fexit programs load and attach to kernel functions: the kernel needs BTF, BPF
/// trampolines that reach its functions, and an open function tracer.
fn calibrate_fentry(btf: Option<&KernelBtf>) -> Result<(), String> {
    let btf = btf.ok_or("kernel BTF is missing")?;
    fentry_attach::probe(btf)
}
