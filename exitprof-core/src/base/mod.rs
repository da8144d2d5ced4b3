//! The ground floor: files written atomically, and the error that ends exitprof as a usage
//! error.

pub mod atomic_file;

/// A request the machine cannot satisfy as asked (a limit, a missing command or process, a file
/// that cannot be read): reported like a usage error, with exit status 2, before anything is
/// loaded.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
