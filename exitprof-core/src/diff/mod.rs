//! `exitprof diff`: compares saved runs, side A (the baseline) against side B, row by row of the
//! exit's stages. The run is the unit of noise: with 3 or more runs a side, each change has an
//! interval from the runs; with fewer, only a change far beyond what runs differ by counts.
//! Sides that cut the exit differently are compared by the kernel code their stages cover.
//!
//! It reads saved runs (their run documents) and makes the diff's document, its verdict and its
//! tables; `export` encodes the document as files and `present` prints and writes it. It must
//! not import `cli`, `export` or `present`, nor load, attach or read the eBPF object.

pub mod document;
pub(crate) mod input;
mod matching;
pub mod noise;
pub mod verdict;

pub use input::Input;

use crate::{base::UsageError, diff::document::DiffDocument, document::run::RunDocument};

/// What one diff is asked to do, read from the command line.
pub struct DiffRequest {
    /// Side A's runs (the baseline) and side B's.
    pub a: Vec<Input>,
    pub b: Vec<Input>,
    /// Print the document as JSON instead of the tables.
    pub json: bool,
}

/// Reads both sides and compares them. Any input that is not a saved run fails here, before
/// anything is printed or written.
pub fn diff(request: &DiffRequest) -> Result<DiffDocument, UsageError> {
    let read = |inputs: &[Input]| -> Result<Vec<_>, UsageError> {
        inputs.iter().map(|i| Ok((i.path().display().to_string(), i.read()?))).collect()
    };
    let (a, b) = (read(&request.a)?, read(&request.b)?);
    refuse_copies(&a, &b)?;
    let runs = |side: Vec<Read>| -> Vec<_> {
        side.into_iter().map(|(file, (run, _))| (file, run)).collect()
    };
    Ok(DiffDocument::judged(&runs(a), &runs(b)))
}

/// A saved run as read: its file's name, its document and the hash of its bytes.
type Read = (String, (RunDocument, u64));

/// Refuses a run given twice (on one side or both, under any name): copies of one run agree
/// exactly, which runs never do, and would pass for runs that show no noise at all.
fn refuse_copies(a: &[Read], b: &[Read]) -> Result<(), UsageError> {
    let all: Vec<(&str, &String, u64)> = a
        .iter()
        .map(|(file, (_, content))| ("A", file, *content))
        .chain(b.iter().map(|(file, (_, content))| ("B", file, *content)))
        .collect();
    for (i, (side, file, content)) in all.iter().enumerate() {
        if let Some((other_side, other, _)) = all[..i].iter().find(|(_, _, c)| c == content) {
            return Err(UsageError(format!(
                "{other} (side {other_side}) and {file} (side {side}) hold the same run: copies of \
                 one run agree exactly, which runs of a workload never do, and would pass for runs \
                 without noise; give each run once"
            )));
        }
    }
    Ok(())
}
