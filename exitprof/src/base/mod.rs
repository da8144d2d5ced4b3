//! The ground floor, which every other folder may use and which uses none of them: exitprof's
//! own signals, pidfds of other processes, files written atomically, the async runtime, and the
//! error that ends exitprof as a usage error.

pub mod atomic_file;
pub mod pidfd;
pub mod signals;

/// The runtime of runs and comparisons: their work is waiting, one worker does it.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?)
}

/// A request the machine cannot satisfy as asked (a limit, a missing command or process, a file
/// that cannot be read): reported like a usage error, with exit status 2, before anything is
/// loaded.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
