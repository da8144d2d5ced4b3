//! Sizes both sides agree on.

/// Processes one run can follow (entries of the eBPF side's `TRACKED` map).
pub const TRACKED_PROCESSES: u32 = 65_536;

/// Bytes of a task's name, NUL included (the kernel's `TASK_COMM_LEN`).
pub const COMM_LEN: usize = 16;
