//! Whether fentry programs attach to kernel functions here. A kernel can load a tracing program
//! and still refuse to attach it: arm64 has BPF trampolines since v6.0 but reaches a kernel
//! function with one only through ftrace's direct calls (v6.4), so Debian 12's arm64 6.1 loads
//! fentry programs and fails every attach. The calibration loads an empty fentry program,
//! attaches it to one function and detaches it at once.

use std::{
    io,
    os::fd::{FromRawFd as _, OwnedFd},
};

use aya_obj::generated::{bpf_attach_type, bpf_attr, bpf_cmd, bpf_prog_type};

use super::btf::KernelBtf;

/// Functions the empty program may attach to, the first one BTF has: BPF's own test target
/// (net/bpf/test_run.c), which nothing else calls, else `do_exit`, which exitprof probes anyway.
const TARGETS: [&str; 2] = ["bpf_fentry_test1", "do_exit"];

/// `r0 = 0; exit`, each instruction as its 8 bytes read little-endian (opcode in the low byte).
const RETURN_ZERO: [u64; 2] = [0xb7, 0x95];

/// Loads an empty fentry program and attaches it to a kernel function; `Err` says which step
/// the kernel refused.
pub fn probe(btf: &KernelBtf) -> Result<(), String> {
    let (target, id) = TARGETS
        .iter()
        .find_map(|&name| btf.function_id(name).map(|id| (name, id)))
        .ok_or_else(|| format!("BTF has none of {}", TARGETS.join(", ")))?;
    let program = load(id)
        .map_err(|e| format!("this kernel refuses to load fentry/fexit (tracing) programs: {e}"))?;
    attach(&program).map(drop).map_err(|e| {
        format!(
            "this kernel loads fentry programs but cannot attach them (to {target}: {e}; arm64 \
             attaches them to kernel functions since Linux 6.4)"
        )
    })
}

/// `BPF_PROG_LOAD` of [`RETURN_ZERO`] as a fentry program on the function of BTF id `id`.
fn load(id: u32) -> io::Result<OwnedFd> {
    // SAFETY: a plain-data kernel ABI union, valid when zeroed.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the fields of the union's BPF_PROG_LOAD member.
    let load = unsafe { &mut attr.__bindgen_anon_3 };
    load.prog_type = bpf_prog_type::BPF_PROG_TYPE_TRACING as u32;
    load.expected_attach_type = bpf_attach_type::BPF_TRACE_FENTRY as u32;
    load.attach_btf_id = id;
    load.insns = RETURN_ZERO.as_ptr() as u64;
    load.insn_cnt = RETURN_ZERO.len() as u32;
    load.license = c"GPL".as_ptr() as u64;
    bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr)
}

/// Attaches a loaded tracing program where it was loaded for (`BPF_RAW_TRACEPOINT_OPEN` without
/// a name); the returned link detaches it when dropped.
fn attach(program: &OwnedFd) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: as in `load`.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.raw_tracepoint.prog_fd = program.as_raw_fd() as u32;
    bpf(bpf_cmd::BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

/// The `bpf` system call for a command that returns a new descriptor.
fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a whole, initialised bpf_attr of the size given; the pointers it holds
    // (instructions, license) outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            std::ptr::from_mut(attr),
            size_of::<bpf_attr>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
