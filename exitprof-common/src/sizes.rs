//! Sizes both sides agree on.

/// Bytes of a task's name, NUL included (the kernel's `TASK_COMM_LEN`).
pub const COMM_LEN: usize = 16;
