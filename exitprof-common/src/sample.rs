//! On-CPU samples: the kernel stack of a task caught by the sampling clock while it exits.

/// Frames kept of a sampled kernel stack.
pub const SAMPLE_STACK_DEPTH: usize = 32;

/// One sample of a followed exit.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Thread id of the exiting task (initial PID namespace, as in its exit record).
    pub pid: u32,
    /// Hits its exit record held at the sample: the sample lies in the stage between hit
    /// `n_hits - 1` and the next one.
    pub n_hits: u32,
    /// When the exit started (its first hit): with `pid`, names the exit the sample belongs to.
    pub exit_start_ns: u64,
    /// When the sample was taken.
    pub ts_ns: u64,
    /// Frames in `stack`.
    pub stack_len: u32,
    /// CPU the sample was taken on.
    pub cpu: u32,
    /// Return addresses, innermost first (the interrupted code's own address first).
    pub stack: [u64; SAMPLE_STACK_DEPTH],
}

#[cfg(feature = "user")]
// SAFETY: plain `#[repr(C)]` integers and an array of them, no padding.
unsafe impl aya::Pod for Sample {}
