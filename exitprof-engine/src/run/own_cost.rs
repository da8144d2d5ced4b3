//! What exitprof itself costs: its own CPU time and peak memory, its workload children left out,
//! and (--bpf-stats) the run time of its eBPF programs in the kernel.

use std::os::fd::OwnedFd;

pub use exitprof_core::run::own_cost::{CpuTime, OwnCost};

use crate::probes::{counts::ProgramCost, load::Probes, prog_stats::enable_bpf_stats};

/// User and system CPU time of exitprof's threads now (`getrusage(RUSAGE_SELF)`).
pub fn cpu_time() -> CpuTime {
    // SAFETY: rusage is plain data, filled in by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local; RUSAGE_SELF cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut usage) };
    let seconds = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    CpuTime { user_s: seconds(usage.ru_utime), sys_s: seconds(usage.ru_stime) }
}

/// exitprof's cost so far, of which `collecting` went to collecting the target.
pub fn so_far(collecting: CpuTime) -> OwnCost {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    OwnCost { cpu: cpu_time(), collecting, peak_rss_bytes: vm_hwm(&status) }
}

/// exitprof's resident memory now (VmRSS), in bytes; `None` where it cannot be read.
pub fn resident_bytes() -> Option<u64> {
    status_bytes(&std::fs::read_to_string("/proc/self/status").ok()?, "VmRSS:")
}

/// VmHWM of a /proc/PID/status text, in bytes.
fn vm_hwm(status: &str) -> Option<u64> {
    status_bytes(status, "VmHWM:")
}

/// A field of a /proc/PID/status text that the kernel gives in kB, in bytes.
fn status_bytes(status: &str, field: &str) -> Option<u64> {
    let kib = status.lines().find_map(|l| l.strip_prefix(field))?.trim().strip_suffix("kB")?;
    Some(kib.trim().parse::<u64>().ok()? << 10)
}

/// The kernel counting the runs and run time of exitprof's programs (--bpf-stats), from
/// [`CostMeter::start`] to [`CostMeter::stop`].
pub struct CostMeter {
    /// Keeps BPF run-time statistics on while open ([`enable_bpf_stats`]).
    _stats: OwnedFd,
    /// Each program's counts when the meter started (zero unless statistics were already on).
    start: Vec<ProgramCost>,
}

impl CostMeter {
    pub fn start(probes: &Probes) -> anyhow::Result<Self> {
        let stats = enable_bpf_stats()?;
        let start = probes.costs()?;
        Ok(Self { _stats: stats, start })
    }

    /// Each program's runs and run time since the start.
    pub fn stop(self, probes: &Probes) -> anyhow::Result<Vec<ProgramCost>> {
        let now = probes.costs()?;
        Ok(now
            .into_iter()
            .zip(&self.start)
            .map(|(now, start)| ProgramCost {
                runs: now.runs.saturating_sub(start.runs),
                run_ns: now.run_ns.saturating_sub(start.run_ns),
                program: now.program,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_cpu_time_and_peak_memory() {
        assert_eq!(vm_hwm("Name:\tx\nVmHWM:\t  1024 kB\nVmRSS:\t 512 kB\n"), Some(1 << 20));
        assert_eq!(vm_hwm("Name:\tx\n"), None);
        let start = cpu_time();
        // Some work of its own, for the clock to see.
        let sum: u64 = (0..20_000_000u64).map(std::hint::black_box).sum();
        // Resident memory read before the peak: other tests grow the process meanwhile.
        let rss = resident_bytes().expect("VmRSS");
        let cost = so_far(cpu_time().since(start));
        assert!(sum > 0);
        assert!(cost.peak_rss_bytes.is_some_and(|b| b > 0), "{cost:?}");
        assert!(rss > 0 && rss <= cost.peak_rss_bytes.unwrap(), "{rss} {cost:?}");
        let (all, spent) = (cost.cpu.user_s + cost.cpu.sys_s, cost.collecting.user_s);
        assert!(spent > 0.0 && spent <= all, "{cost:?}");
    }
}
