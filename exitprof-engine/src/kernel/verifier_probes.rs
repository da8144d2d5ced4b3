//! What the running kernel's verifier accepts of what the default eBPF object uses, probed as
//! libbpf and bpftool probe features: by loading a tiny program that uses it. A helper listed in
//! the kernel's BTF may still be refused to a kind of program, and a kernel whose BPF was
//! backported piecemeal (RHEL 9's 5.14) has no version number to go by.

use std::{
    ffi::CStr,
    os::fd::{FromRawFd as _, OwnedFd},
};

use aya::{
    programs::ProgramType,
    sys::{BpfHelper, is_helper_supported},
};
use aya_obj::generated::{
    BPF_ALU64, BPF_ATOMIC, BPF_CMPXCHG, BPF_DW, BPF_EXIT, BPF_JMP, BPF_K, BPF_MEM, BPF_MOV,
    BPF_STX, bpf_attr, bpf_cmd, bpf_insn, bpf_prog_type,
};

/// Whether a tracing program may call `helper`: `Some(answer)`, or `None` where the probe could
/// not run (no privileges to load a program, say). A raw tracepoint program asks, as the kernel
/// gives it the helpers of every tracing program (`bpf_tracing_func_proto`).
pub fn tracing_helper(helper: BpfHelper) -> Option<bool> {
    is_helper_supported(ProgramType::RawTracePoint, helper).ok()
}

/// Whether the verifier accepts BPF `cmpxchg` (Linux 5.12): a compare-and-exchange on a stack
/// slot of a socket filter. `None` where the probe could not run.
pub fn cmpxchg() -> Option<bool> {
    let insn = |code: u32, dst: u8, src: u8, off: i16, imm: i32| bpf_insn {
        code: code as u8,
        _bitfield_align_1: [],
        _bitfield_1: bpf_insn::new_bitfield_1(dst, src),
        off,
        imm,
    };
    let mov = |dst: u8, imm: i32| insn(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm);
    let insns = [
        // *(u64 *)(r10 - 8) = 0
        mov(1, 0),
        insn(BPF_STX | BPF_MEM | BPF_DW, 10, 1, -8, 0),
        // r0 = cmpxchg((u64 *)(r10 - 8), r0 = 0, r1 = 1)
        mov(0, 0),
        mov(1, 1),
        insn(BPF_STX | BPF_ATOMIC | BPF_DW, 10, 1, -8, BPF_CMPXCHG as i32),
        mov(0, 0),
        insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
    ];
    let license: &CStr = c"GPL";
    // SAFETY: an all-zero `bpf_attr` is valid, and the union's program-load part is set below.
    let mut attr = unsafe { std::mem::zeroed::<bpf_attr>() };
    // SAFETY: writing plain integers into the union's program-load part.
    let load = unsafe { &mut attr.__bindgen_anon_3 };
    load.prog_type = bpf_prog_type::BPF_PROG_TYPE_SOCKET_FILTER as u32;
    load.insn_cnt = insns.len() as u32;
    load.insns = insns.as_ptr() as u64;
    load.license = license.as_ptr() as u64;
    // SAFETY: `attr` and the instructions and license it points to are alive for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_PROG_LOAD as libc::c_long,
            &raw mut attr,
            size_of::<bpf_attr>(),
        )
    };
    if fd >= 0 {
        // SAFETY: the descriptor the kernel just returned, ours alone.
        drop(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        return Some(true);
    }
    // Before 5.12 the verifier refuses the instruction (`BPF_XADD uses reserved fields`):
    // EINVAL. Anything else (EPERM) says nothing of it.
    (std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)).then_some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As root, the probes answer; without the privileges to load a program, they say nothing.
    #[test]
    fn the_probes_answer_or_say_they_cannot() {
        // SAFETY: no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        for answer in [cmpxchg(), tracing_helper(BpfHelper::BPF_FUNC_task_storage_get)] {
            assert!(answer.is_some() || !root, "{answer:?} as root");
        }
    }
}
