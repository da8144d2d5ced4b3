//! What differs between the architectures exitprof is built for (x86_64 and aarch64), all of it
//! fixed when it is built. The eBPF object is compiled for the target's architecture too: the
//! build script hands aya-build the target, which passes it to the object's build as
//! `bpf_target_arch`, and kprobe programs read their arguments from that architecture's
//! `struct pt_regs` (fentry and BTF tracepoint programs read an array of arguments, the same on
//! every architecture). Structure offsets come from the running kernel's BTF on every
//! architecture, and stacks from the kernel's own unwinder.

use serde::Serialize;

/// An architecture exitprof is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Arch {
    /// As Rust and `uname -m` name it.
    pub name: &'static str,
    /// The numbers of the system calls an exit starts from (`exit`, `exit_group`: the
    /// tracepoint program tells them apart by number) and of the one a reap returns from.
    pub syscalls: Syscalls,
    /// The tracepoint that fires inside `exit_thread`, where the architecture has one: in
    /// tracepoint mode it cuts the end of an exit into two stages.
    pub exit_thread_tracepoint: Option<&'static str>,
    /// What fentry/fexit on kernel functions needs of the kernel on this architecture (the plan
    /// says whether the running kernel has it, by attaching a program).
    pub fentry_needs: &'static str,
}

/// System call numbers (`arch/*/include/uapi/asm/unistd*.h`, `include/uapi/asm-generic/unistd.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Syscalls {
    pub exit: u32,
    pub exit_group: u32,
    pub wait4: u32,
}

#[cfg_attr(
    all(not(test), not(target_arch = "x86_64")),
    expect(dead_code, reason = "the other architecture's facts, for the plan's tests")
)]
pub const X86_64: Arch = Arch {
    name: "x86_64",
    syscalls: Syscalls { exit: 60, exit_group: 231, wait4: 61 },
    // `fpu__drop` fires it in `exit_thread` while the task's FPU registers are live.
    exit_thread_tracepoint: Some("x86_fpu_dropped"),
    fentry_needs: "BPF trampolines (Linux 5.5)",
};

pub const AARCH64: Arch = Arch {
    name: "aarch64",
    // arm64 takes the generic table.
    syscalls: Syscalls { exit: 93, exit_group: 94, wait4: 260 },
    // arm64's `exit_thread` (v6.13+, where it frees the guarded control stack; before, arm64
    // had none) fires no tracepoint, and nothing else fires one at one place of every exit
    // between `sched_process_exit` and its final switch.
    exit_thread_tracepoint: None,
    // BPF trampolines came to arm64 in v6.0, but reach a kernel function only through ftrace's
    // direct calls, which arm64 has since v6.4 (Debian's 6.1 loads fentry programs and cannot
    // attach them).
    fentry_needs: "BPF trampolines with ftrace direct calls (Linux 6.4)",
};

/// The architecture this binary (and the eBPF object it carries) was built for.
#[cfg(target_arch = "x86_64")]
pub const BUILT: Arch = X86_64;
#[cfg(target_arch = "aarch64")]
pub const BUILT: Arch = AARCH64;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("exitprof is built for x86_64 and aarch64 (see kernel/arch.rs)");

// The numbers above are the C library's for the target being built.
const _: () = {
    assert!(BUILT.syscalls.exit as libc::c_long == libc::SYS_exit);
    assert!(BUILT.syscalls.exit_group as libc::c_long == libc::SYS_exit_group);
    assert!(BUILT.syscalls.wait4 as libc::c_long == libc::SYS_wait4);
};

impl Arch {
    /// One line for the plan: what exitprof relies on here.
    pub fn describe(&self) -> String {
        let Syscalls { exit, exit_group, wait4 } = self.syscalls;
        let marker = match self.exit_thread_tracepoint {
            Some(tracepoint) => format!("{tracepoint} inside exit_thread"),
            None => "no exit_thread tracepoint (tracepoint mode has no point between \
                     sched_process_exit and the final switch)"
                .to_owned(),
        };
        format!(
            "{}: syscalls exit {exit}, exit_group {exit_group}, wait4 {wait4}; {marker}; fentry \
             needs {}",
            self.name, self.fentry_needs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_architecture_is_described_by_what_it_offers() {
        assert_eq!(
            X86_64.describe(),
            "x86_64: syscalls exit 60, exit_group 231, wait4 61; x86_fpu_dropped inside \
             exit_thread; fentry needs BPF trampolines (Linux 5.5)"
        );
        let arm64 = AARCH64.describe();
        assert!(arm64.starts_with("aarch64: syscalls exit 93, exit_group 94, wait4 260; no "));
        assert!(arm64.ends_with("ftrace direct calls (Linux 6.4)"), "{arm64}");
        assert!([X86_64, AARCH64].contains(&BUILT));
        assert_eq!(BUILT.name, std::env::consts::ARCH);
    }
}
