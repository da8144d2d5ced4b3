//! Measuring the programs the benchmarks run, the way `/usr/bin/time` measured the 2006 and 2012
//! LKML threads' programs:
//! elapsed from spawn to reap, user and sys from `wait4`.

use std::{
    fs::File,
    io::{self, Read},
    os::unix::fs::FileExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde::Serialize;

use crate::command::run;

/// How often a process's peak RSS is sampled.
const RSS_SAMPLE_PERIOD: Duration = Duration::from_millis(10);

/// Time a process took, in seconds. `user` and `sys` include the children it reaped.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Usage {
    pub elapsed: f64,
    pub user: f64,
    pub sys: f64,
}

impl Usage {
    pub fn cpu(&self) -> f64 {
        self.user + self.sys
    }

    /// The median of each figure over `samples`.
    pub fn medians(samples: &[Usage]) -> Self {
        Self {
            elapsed: median(samples.iter().map(|s| s.elapsed)),
            user: median(samples.iter().map(|s| s.user)),
            sys: median(samples.iter().map(|s| s.sys)),
        }
    }

    /// Each figure over `base`'s, NaN where `base` measured none (see `ratio`).
    pub fn ratio_to(self, base: Self) -> Self {
        Self {
            elapsed: ratio(self.elapsed, base.elapsed),
            user: ratio(self.user, base.user),
            sys: ratio(self.sys, base.sys),
        }
    }
}

/// `a / b`, or NaN when `b` measured no time (rusage counts in clock ticks, so a short run can
/// show none).
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// A finished process: its usage, its stdout, and its own peak RSS when it was watched.
pub struct Finished {
    pub usage: Usage,
    pub stdout: String,
    /// The highest `VmHWM` seen in `/proc/PID/status` (KiB), sampled every 10 ms: the process's
    /// own high-water mark, without its children's (which `wait4`'s `ru_maxrss` would include).
    pub peak_rss_kib: Option<u64>,
}

/// Runs `cmd` to completion with its stdout inherited; fails unless it exits with status 0.
pub fn measure(cmd: &mut Command) -> anyhow::Result<Usage> {
    let started = Instant::now();
    let child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    reap(child.id(), started, cmd)
}

/// Runs the command line `argv` to completion with its stdout inherited; fails unless it exits
/// with status 0.
pub fn measure_argv(argv: &[String]) -> anyhow::Result<Usage> {
    let (program, args) = argv.split_first().context("an empty command line")?;
    measure(Command::new(program).args(args))
}

/// Runs `cmd` to completion, capturing its stdout and, with `watch_rss`, sampling its own peak
/// RSS; fails unless it exits with status 0.
pub fn measure_captured(cmd: &mut Command, watch_rss: bool) -> anyhow::Result<Finished> {
    let started = Instant::now();
    let mut child =
        cmd.stdout(Stdio::piped()).spawn().with_context(|| format!("starting {cmd:?}"))?;
    let reader = read_in_background(child.stdout.take().context("the child's stdout")?);
    let sampler = watch_rss.then(|| RssSampler::start(child.id())).transpose()?;
    let usage = reap(child.id(), started, cmd);
    let peak_rss_kib = sampler.and_then(RssSampler::stop);
    let stdout = reader.join().expect("the stdout reader does not panic");
    let usage = usage?;
    Ok(Finished { usage, stdout: stdout.context("reading the child's stdout")?, peak_rss_kib })
}

/// Reads `pipe` to its end on a thread of its own, so that the child never blocks on a full
/// pipe while we wait for it.
fn read_in_background(
    mut pipe: impl Read + Send + 'static,
) -> thread::JoinHandle<io::Result<String>> {
    thread::spawn(move || {
        let mut out = String::new();
        pipe.read_to_string(&mut out).map(|_| out)
    })
}

/// Waits for our child `pid`, spawned at `started`; fails unless it exited with status 0.
fn reap(pid: u32, started: Instant, cmd: &Command) -> anyhow::Result<Usage> {
    let mut status = 0;
    // SAFETY: rusage is plain data, filled in by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to locals; the pid is our own unreaped child.
    if unsafe { libc::wait4(pid as i32, &raw mut status, 0, &raw mut usage) } < 0 {
        return Err(io::Error::last_os_error()).context("wait4");
    }
    let elapsed = started.elapsed();
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{cmd:?} failed: wait status {status:#x}");
    }
    let secs =
        |tv: libc::timeval| Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000).as_secs_f64();
    Ok(Usage {
        elapsed: elapsed.as_secs_f64(),
        user: secs(usage.ru_utime),
        sys: secs(usage.ru_stime),
    })
}

/// Samples one process's `VmHWM` until it exits.
struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<Option<u64>>,
}

impl RssSampler {
    fn start(pid: u32) -> anyhow::Result<Self> {
        // Opened once: the open file stays bound to this process even if the pid is reused.
        let status = File::open(format!("/proc/{pid}/status"))
            .with_context(|| format!("opening /proc/{pid}/status"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            let mut peak = None;
            let mut buf = vec![0; 4096];
            // A process that has exited has no memory map, hence no VmHWM line.
            while !stopped.load(Ordering::Relaxed)
                && let Some(hwm) = read_hwm(&status, &mut buf)
            {
                peak = peak.max(Some(hwm));
                thread::sleep(RSS_SAMPLE_PERIOD);
            }
            peak
        });
        Ok(Self { stop, thread })
    }

    fn stop(self) -> Option<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the RSS sampler does not panic")
    }
}

/// `VmHWM` (KiB) from an open `/proc/PID/status`, read from its start.
fn read_hwm(status: &File, buf: &mut [u8]) -> Option<u64> {
    let n = status.read_at(buf, 0).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}

/// The median of `values` (NaN when there are none).
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) { f64::midpoint(v[mid - 1], v[mid]) } else { v[mid] }
}

/// Compiles a C program into `out_dir` with `cc -O2 -pthread FLAGS`.
pub fn compile_c(source: &Path, out_dir: &Path, flags: &[&str]) -> anyhow::Result<PathBuf> {
    compile_c_with("cc", source, out_dir, flags)
}

/// [`compile_c`] with the C compiler `cc` (a cross compiler: `aarch64-linux-gnu-gcc`).
pub fn compile_c_with(
    cc: &str,
    source: &Path,
    out_dir: &Path,
    flags: &[&str],
) -> anyhow::Result<PathBuf> {
    let stem = source.file_stem().context("a source file name")?;
    let binary = out_dir.join(stem);
    run(Command::new(cc).args(["-O2", "-pthread"]).args(flags).arg("-o").arg(&binary).arg(source))
        .with_context(|| format!("compiling {} with {cc} (is it installed?)", source.display()))?;
    Ok(binary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median([3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median([]).is_nan());
    }

    #[test]
    fn a_ratio_over_no_time_is_nan() {
        let base = Usage { elapsed: 2.0, user: 0.0, sys: 1.0 };
        let ratio = Usage { elapsed: 3.0, user: 0.5, sys: 0.0 }.ratio_to(base);
        assert_eq!((ratio.elapsed, ratio.sys), (1.5, 0.0));
        assert!(ratio.user.is_nan());
    }

    #[test]
    fn a_process_is_measured_with_its_own_peak_rss() {
        // A shell that allocates nothing much, then sleeps long enough to be sampled.
        let finished =
            measure_captured(Command::new("sh").args(["-c", "echo hi; sleep 0.1"]), true).unwrap();
        assert_eq!(finished.stdout, "hi\n");
        assert!(finished.usage.elapsed >= 0.1, "elapsed {} s", finished.usage.elapsed);
        let rss = finished.peak_rss_kib.expect("sampled at least once");
        assert!((100..1_000_000).contains(&rss), "peak RSS {rss} KiB");
        let failed = measure(&mut Command::new("false")).unwrap_err();
        assert!(failed.to_string().contains("failed"), "{failed}");
    }
}
