//! Probe points on the exit path of a task, from its start to `do_task_dead`.
//!
//! Every program here only records "the current task reached point X"; what the points mean and
//! where they sit on the running kernel is the business of userspace's probe plan.

use aya_ebpf::{
    EbpfContext as _,
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, tracepoint},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext,
        TracePointContext,
    },
};
use exitprof_common::point::{ExitFn, Marker, fn_code, marker_code};

use crate::{
    exit_state::{Opens, hit_current, note_group_dead},
    maps::{EXIT_TP_GROUP_DEAD, SYS_EXIT_GROUP_NR},
};

/// `SIGKILL` (include/uapi/asm-generic/signal.h).
const SIGKILL: i32 = 9;

#[inline(always)]
fn reach(marker: Marker, opens: Opens) -> u32 {
    hit_current(marker_code(marker), opens);
    0
}

#[inline(always)]
fn start(marker: Marker) -> u32 {
    reach(marker, Opens::Start)
}

/// `syscalls:sys_enter_exit` and `syscalls:sys_enter_exit_group`: one program attached to both,
/// so that the verifier checks it once (it takes tens of ms per program that opens exits), told
/// apart by the system call's number.
#[tracepoint]
pub fn sys_enter_exit(ctx: TracePointContext) -> u32 {
    // `int __syscall_nr`, after the common header, in every syscalls event: a load from the
    // context, which the verifier checks (no helper call).
    // SAFETY: offset 8 of a syscalls event is its `__syscall_nr`.
    let nr = unsafe { core::ptr::read(ctx.as_ptr().cast::<i32>().add(2)) };
    // The point's code computed without a branch: with one, the compiler copies the whole
    // opening of an exit into each side.
    let (exit, group) = (marker_code(Marker::SysEnterExit), marker_code(Marker::SysEnterExitGroup));
    let is_group = u8::from(nr == SYS_EXIT_GROUP_NR.load() as i32);
    hit_current(exit ^ (is_group * (exit ^ group)), Opens::Start);
    0
}

/// `signal_deliver(int sig, struct kernel_siginfo *info, struct k_sigaction *ka)`: `get_signal`
/// fires it with `SIGKILL` for a thread whose group is exiting, before `do_group_exit`.
#[btf_tracepoint]
pub fn signal_deliver(ctx: BtfTracePointContext) -> i32 {
    let sig: i32 = ctx.arg(0);
    if sig == SIGKILL {
        start(Marker::SignalDeliverKill);
    }
    0
}

/// `sched_process_exit(struct task_struct *p[, bool group_dead])`: `group_dead` and the position
/// right after `taskstats_exit` are v6.16+; older kernels fire it after `exit_mm`/`acct_process`.
#[btf_tracepoint]
pub fn sched_process_exit(ctx: BtfTracePointContext) -> i32 {
    let state = hit_current(marker_code(Marker::SchedProcessExit), Opens::Late);
    if EXIT_TP_GROUP_DEAD.load() != 0
        && let Some(state) = state
    {
        // A `bool` in the low byte of its argument slot.
        let group_dead: u64 = ctx.arg(1);
        note_group_dead(state, group_dead & 0xff != 0);
    }
    0
}

/// `x86_fpu_dropped(struct fpu *fpu)`, from `fpu__drop` in `exit_thread` (x86).
#[btf_tracepoint]
pub fn x86_fpu_dropped(_ctx: BtfTracePointContext) -> i32 {
    // fpu__drop also runs on other paths than exit_thread.
    reach(Marker::X86FpuDropped, Opens::Never);
    0
}

/// `void __noreturn do_exit(long code)`: only its entry can be probed (v6.15+ reject fexit on
/// `__noreturn` functions, and a kretprobe on it never fires).
#[kprobe]
pub fn kprobe_enter_do_exit(_ctx: ProbeContext) -> u32 {
    start(Marker::DoExit)
}

#[fentry]
pub fn fentry_enter_do_exit(_ctx: FEntryContext) -> u32 {
    start(Marker::DoExit)
}

/// `void __noreturn do_task_dead(void)`: the exiting task's last function.
#[kprobe]
pub fn kprobe_enter_do_task_dead(_ctx: ProbeContext) -> u32 {
    reach(Marker::DoTaskDead, Opens::Late)
}

#[fentry]
pub fn fentry_enter_do_task_dead(_ctx: FEntryContext) -> u32 {
    reach(Marker::DoTaskDead, Opens::Late)
}

/// Entry and return programs of every function slot of `exitprof_common::for_each_exit_fn!`, as
/// kprobe/kretprobe and as fentry/fexit, named as `ExitFn::programs` names them. The symbol each
/// attaches to is chosen by userspace's probe plan.
macro_rules! exit_fn_probes {
    ($($variant:ident => $slot:ident),+ $(,)?) => {
        paste::paste! {
            $(
                #[kprobe]
                pub fn [<kprobe_enter_ $slot>](ctx: ProbeContext) -> u32 {
                    entered(ExitFn::$variant, || ctx.arg::<i32>(1).unwrap_or(0));
                    0
                }

                #[kretprobe]
                pub fn [<kretprobe_exit_ $slot>](_ctx: RetProbeContext) -> u32 {
                    hit_current(fn_code(ExitFn::$variant, true), Opens::Never);
                    0
                }

                #[fentry]
                pub fn [<fentry_enter_ $slot>](ctx: FEntryContext) -> u32 {
                    entered(ExitFn::$variant, || ctx.arg::<i32>(1));
                    0
                }

                #[fexit]
                pub fn [<fexit_exit_ $slot>](_ctx: FExitContext) -> u32 {
                    hit_current(fn_code(ExitFn::$variant, true), Opens::Never);
                    0
                }
            )+
        }
    };
}

/// The entry of an exit-path function. `taskstats_exit(struct task_struct *tsk, int group_dead)`
/// also says whether the exit ends its thread group, as the kernel decided it; `second_arg`
/// reads that argument, and is called for no other function (the test is resolved at compile
/// time, so the other programs never read an argument their function may not have).
#[inline(always)]
fn entered(function: ExitFn, second_arg: impl FnOnce() -> i32) {
    let state = hit_current(fn_code(function, false), Opens::Never);
    if function == ExitFn::TaskstatsExit
        && let Some(state) = state
    {
        note_group_dead(state, second_arg() != 0);
    }
}

exitprof_common::for_each_exit_fn!(exit_fn_probes);
