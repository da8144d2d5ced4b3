//! The ground floor, which every other folder may use and which uses none of them: exitprof's
//! own signals, pidfds of other processes and the async runtime; files written atomically and the
//! error that ends exitprof as a usage error are exitprof-core's.

pub mod pidfd;
pub mod signals;

pub use exitprof_core::base::{UsageError, atomic_file};

/// The runtime of runs and comparisons: their work is waiting, one worker does it.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?)
}
