//! The `delayacct` condition: the sysctl `kernel.task_delayacct` (off by default since v5.14),
//! which makes every task keep delay accounting that the exit path then folds into taskstats.
//!
//! Against a run that dies before it restores the sysctl (SIGKILL, a crash), the original value
//! is written to a record under /run before the sysctl changes, and removed once it is restored.
//! The next run that sets the condition finds the record, says so, and restores that original
//! value in the end. /run is emptied at boot, when sysctls are reset too. The record stays
//! locked while a run holds the sysctl, so two runs cannot change it at once.

use std::{
    fs::{self, File, OpenOptions, TryLockError},
    io,
};

const SYSCTL: &str = "/proc/sys/kernel/task_delayacct";
const RECORD_DIR: &str = "/run/exitprof";
const RECORD: &str = "/run/exitprof/task_delayacct.original";

#[derive(Debug, thiserror::Error)]
pub enum DelayacctError {
    #[error("{what} {path}: {error} (changing sysctls needs root)")]
    Io { what: &'static str, path: &'static str, error: io::Error },
    #[error("another exitprof run is holding kernel.task_delayacct (it has {RECORD} locked)")]
    Busy,
    #[error("{path} holds {text:?}, not 0 or 1")]
    Unexpected { path: &'static str, text: String },
}

fn io_error(what: &'static str, path: &'static str) -> impl FnOnce(io::Error) -> DelayacctError {
    move |error| DelayacctError::Io { what, path, error }
}

/// kernel.task_delayacct as a run set it; [`DelayacctGuard::restore`] puts the original back.
#[derive(Debug)]
pub struct DelayacctGuard {
    original: bool,
    /// Locked for as long as the guard lives.
    _record: File,
}

/// Sets kernel.task_delayacct to `on` and returns the guard that restores it.
pub fn set(on: bool) -> Result<DelayacctGuard, DelayacctError> {
    fs::create_dir_all(RECORD_DIR).map_err(io_error("creating", RECORD_DIR))?;
    let record = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(RECORD)
        .map_err(io_error("opening", RECORD))?;
    record.try_lock().map_err(|e| match e {
        TryLockError::WouldBlock => DelayacctError::Busy,
        TryLockError::Error(error) => DelayacctError::Io { what: "locking", path: RECORD, error },
    })?;
    let current = parse(SYSCTL, &fs::read_to_string(SYSCTL).map_err(io_error("reading", SYSCTL))?)?;
    let leftover = fs::read_to_string(RECORD).map_err(io_error("reading", RECORD))?;
    let original = if leftover.trim().is_empty() {
        fs::write(RECORD, value(current)).map_err(io_error("writing", RECORD))?;
        current
    } else {
        let original = parse(RECORD, &leftover)?;
        log::warn!(
            "kernel.task_delayacct is {}: an earlier exitprof run ended without restoring it \
             (its record {RECORD} says it was {}); this run restores that value when it ends",
            u8::from(current),
            u8::from(original),
        );
        original
    };
    if let Err(e) = fs::write(SYSCTL, value(on)) {
        if leftover.trim().is_empty() {
            // Nothing changed, so there is nothing for a later run to restore.
            fs::remove_file(RECORD).map_err(io_error("removing", RECORD))?;
        }
        return Err(DelayacctError::Io { what: "writing", path: SYSCTL, error: e });
    }
    Ok(DelayacctGuard { original, _record: record })
}

impl DelayacctGuard {
    /// Writes the original value back and removes the record.
    pub fn restore(self) -> Result<(), DelayacctError> {
        fs::write(SYSCTL, value(self.original)).map_err(io_error("writing", SYSCTL))?;
        fs::remove_file(RECORD).map_err(io_error("removing", RECORD))
    }
}

fn parse(path: &'static str, text: &str) -> Result<bool, DelayacctError> {
    match text.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        other => Err(DelayacctError::Unexpected { path, text: other.to_owned() }),
    }
}

/// The sysctl's text for `on`.
fn value(on: bool) -> String {
    format!("{}\n", u8::from(on))
}
