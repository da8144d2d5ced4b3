//! exitprof's own integration tests inside the guests: the tests that assert what the running
//! kernel offers and where exits' costs lie, run where kprobes and fentry exist.
//!
//! The test binary and exitprof (`cargo xtask dist`'s) are built static (musl), and the C
//! programs the tests profile are built static ahead of time (the guest has no compiler), all
//! for the guest's architecture (with Debian's cross compiler for the one that is not this
//! machine's); the tests find them through the environment their `support` module reads.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::busybox;
use crate::{
    arch::Arch, command::workspace_root, dist, measure::compile_c_with, test::test_binaries,
};

/// Where the guest finds the test binary and the test programs.
pub const TEST_BINARY: &str = "/tests/exitprof-tests";
pub const PROGRAMS: &str = "/tests/programs";

/// One run of the test binary in the guest.
#[derive(Clone)]
pub struct GuestTests {
    /// Names the run in the guest's report and the summary: `[a-z0-9-]+`.
    pub name: &'static str,
    /// The `--attach` mode the tests run in (`EXITPROF_TEST_ATTACH`).
    pub attach: &'static str,
    /// libtest's arguments: filters (the tests whose names contain any of them), and `--skip`s.
    pub args: &'static [&'static str],
}

/// Every attach mode the host lacks, for the tests that name where exits spend their time and
/// that account for every exit; and the test of forced modes, which on these kernels finds
/// every mode offered.
///
/// The ground truth runs whole, its blocked thread (`lock_hold`, in two of the tests) included:
/// the lock's holder and the exiting thread share one CPU, so the scheduler orders them (two
/// racing real-time threads on two emulated CPUs that share one host thread did not keep their
/// timing). Under emulation the programs make more work (`EXITPROF_TEST_EMULATED`), so that the
/// cost they construct dwarfs the probes' as on the host, and the thresholds are the host's.
pub const GUEST_TESTS: &[GuestTests] = &[
    GuestTests { name: "ground-truth-kprobe", attach: "kprobe", args: GROUND_TRUTH },
    GuestTests { name: "ground-truth-fentry", attach: "fentry", args: GROUND_TRUTH },
    GuestTests {
        name: "one-exit-fentry",
        attach: "fentry",
        args: &["reliability::a_command_that_exits_once_is_accounted_in_every_run"],
    },
    // A refused leader whose pid an exec takes before its last point: do_task_dead, which opens
    // late exits, is probed only in these modes. Beside it, chains deeper than the walk up the
    // ancestry born during a `--pid` run, decided as they are created (the compat object's hash
    // of marks on 5.10): one exitprof run each, some seconds.
    GuestTests {
        name: "exec-refusal-kprobe",
        attach: "kprobe",
        args: &[
            "identity::a_refused_leader_whose_pid_an_exec_takes_is_lost_once",
            "identity::watching_a_process_decides_deep_chains_born_during_the_run",
        ],
    },
    GuestTests {
        name: "forced-modes",
        attach: "auto",
        args: &["reliability::each_forced_mode_is_refused_or_works_as_the_kernel_offers"],
    },
    // The compat object forced beside the object the kernel chooses: every exit accounted, the
    // same measures.
    GuestTests { name: "compat", attach: "auto", args: &["compat::"] },
    // --cgroup, decided in the kernel by the exiting task's cgroup ancestry: by the helper in
    // the default object, by `cgroup.ancestor_ids` in the compat one (5.10).
    GuestTests { name: "cgroup-target", attach: "auto", args: &["cgroup_target::"] },
    // A diff of a small and a large address space's teardown: its verdict names the code that
    // moved (exit_mmap's), its differential flame graph draws it grown.
    GuestTests {
        name: "mm-diff-kprobe",
        attach: "kprobe",
        args: &["diff::a_larger_teardown_is_found_in_the_stage_that_covers_exit_mm"],
    },
    // arm64's share: the ground truth of the teardowns alone, in each mode.
    GuestTests { name: "teardowns-kprobe", attach: "kprobe", args: TEARDOWNS },
    GuestTests { name: "teardowns-fentry", attach: "fentry", args: TEARDOWNS },
    // The unit's capabilities and LimitMEMLOCK, and the DaemonSet's capabilities, under a 64 KiB
    // locked-memory limit: every exit recorded, or (without the unit's limit, where the kernel
    // charges BPF memory to it) a clear refusal with nothing loaded.
    GuestTests {
        name: "deployed-limits",
        attach: "auto",
        args: &[
            "deploy::the_units_privileges_and_limits_record_every_exit",
            "deploy::without_the_units_memlock_limit",
            "deploy::the_daemonsets_capabilities_suffice",
        ],
    },
    // Three exitprof in kprobe mode at once, as pid 1 of PID namespaces of their own where the
    // kernel's object allows: each counts its own misses, none removes another's live events.
    GuestTests { name: "side-by-side", attach: "kprobe", args: &["side_by_side::"] },
];

/// The ground truth, every test of it.
const GROUND_TRUTH: &[&str] = &["ground_truth::"];

/// The ground truth of the exit's teardowns, each computing in a function exitprof probes: the
/// address space (`exit_mm`, inlined, a gap), the descriptors (`exit_files`) and the semaphore
/// undo lists (`exit_sem`).
const TEARDOWNS: &[&str] = &[
    "ground_truth::an_mm_teardown_computes_in_exit_mmap",
    "ground_truth::closing_many_descriptors_computes_in_exit_files",
    "ground_truth::undoing_semaphore_operations_computes_in_exit_sem",
];

impl GuestTests {
    /// Whether this run is the ground truth (in one attach mode).
    pub fn is_ground_truth(&self) -> bool {
        self.args == GROUND_TRUTH
    }

    /// Whether this run is the teardowns' ground truth (in one attach mode).
    pub fn is_teardowns(&self) -> bool {
        self.args == TEARDOWNS
    }
}

/// The static builds a guest of one architecture runs.
pub struct StaticBuild {
    pub arch: Arch,
    pub busybox: PathBuf,
    pub exitprof: PathBuf,
    pub tests: PathBuf,
    /// Each test program: its name and its binary.
    pub programs: Vec<(String, PathBuf)>,
}

/// Builds exitprof, its integration tests and their C programs for `arch`, all statically
/// linked, and fetches its busybox.
pub fn build(arch: Arch) -> anyhow::Result<StaticBuild> {
    let exitprof = dist::static_binary(arch)?;
    // The shipped binary's target and profile: the tests' build shares its artifacts.
    let target = arch.musl_target();
    let tests =
        test_binaries(dist::cargo_for(arch)?, &["--profile", dist::PROFILE, "--target", target])?
            .pop()
            .context("cargo named no integration-test executable")?;
    let root = workspace_root();
    let out = root.join("target/vm").join(arch.debian());
    let programs = build_programs(arch, &root.join("exitprof/tests/programs"), &out)?;
    Ok(StaticBuild { arch, busybox: busybox::fetch(arch)?, exitprof, tests, programs })
}

/// Compiles each C program of `sources` as the tests do, but static and for `arch`, into
/// `out/programs`.
fn build_programs(
    arch: Arch,
    sources: &Path,
    out: &Path,
) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let dir = out.join("programs");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut programs = Vec::new();
    for entry in std::fs::read_dir(sources).with_context(|| format!("{}", sources.display()))? {
        let source = entry?.path();
        if source.extension().is_some_and(|e| e == "c") {
            let binary = compile_c_with(&arch.c_compiler(), &source, &dir, &["-static"])?;
            let name = source.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            programs.push((name, binary));
        }
    }
    programs.sort();
    Ok(programs)
}

/// libtest's summary in a run's stdout: the tests passed, or why not.
pub fn check(stdout: &str) -> Result<String, String> {
    let summary = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("test result: "))
        .ok_or_else(|| "libtest printed no summary".to_owned())?;
    let count = |what: &str| -> u64 {
        summary
            .split(['.', ';'])
            .find_map(|part| part.trim().strip_suffix(what)?.trim().parse().ok())
            .unwrap_or(0)
    };
    let (passed, failed) = (count("passed"), count("failed"));
    if !summary.starts_with("ok") || failed > 0 {
        return Err(format!("test result: {summary}"));
    }
    // A filter that matches nothing runs nothing and passes: that is a failure here.
    if passed == 0 {
        return Err(format!("no test matched: test result: {summary}"));
    }
    Ok(format!("{passed} passed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_summaries_are_read() {
        let ok = "running 4 tests\ntest a ... ok\n\ntest result: ok. 4 passed; 0 failed; 0 \
                  ignored; 0 measured; 120 filtered out; finished in 9.31s\n";
        assert_eq!(check(ok), Ok("4 passed".to_owned()));
        let failed = "test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured";
        assert!(check(failed).unwrap_err().contains("1 failed"));
        let none = "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 124 filtered out";
        assert!(check(none).unwrap_err().starts_with("no test matched"));
        assert!(check("thread 'main' panicked").is_err());
    }
}
