//! `exitprof diff`: compares saved runs, side A (the baseline) against side B, row by row of the
//! exit's stages. The run is the unit of noise: with 3 or more runs a side, each change has an
//! interval from the runs; with fewer, only a change far beyond what runs differ by counts.
//! Sides that cut the exit differently are compared by the kernel code their stages cover.
//!
//! It reads saved runs only: it must not import `cli` or `present` (which prints and exports
//! what it found), nor load, attach or read the eBPF object.

mod document;
mod flame;
mod html;
mod input;
mod matching;
mod noise;
mod svg;
mod text;
mod verdict;

pub use input::Input;

use crate::{
    base::UsageError,
    diff::document::DiffDocument,
    export::{self, ExportTarget, Format},
    report::run_document::RunDocument,
};

/// What one diff is asked to do, read from the command line.
pub struct DiffRequest {
    /// Side A's runs (the baseline) and side B's.
    pub a: Vec<Input>,
    pub b: Vec<Input>,
    /// Print the document as JSON instead of the tables.
    pub json: bool,
    pub exports: Vec<ExportTarget>,
}

/// The export formats of a diff: its document, its figure, its differential flame graph and
/// the HTML page of them all.
pub const EXPORT_FORMATS: [Format; 4] = [Format::Json, Format::Svg, Format::FlameSvg, Format::Html];

/// A finished diff: the report to print and the exports to write.
pub struct DiffReport {
    pub text: String,
    exports: Vec<(ExportTarget, Vec<u8>)>,
}

/// Reads both sides and compares them. Any input that is not a saved run fails here, before
/// anything is printed or written.
pub fn diff(request: &DiffRequest) -> anyhow::Result<DiffReport> {
    for target in &request.exports {
        export::check_writable(&target.path)?;
    }
    let read = |inputs: &[Input]| -> Result<Vec<_>, UsageError> {
        inputs.iter().map(|i| Ok((i.path().display().to_string(), i.read()?))).collect()
    };
    let (a, b) = (read(&request.a)?, read(&request.b)?);
    refuse_copies(&a, &b)?;
    let runs = |side: Vec<Read>| -> Vec<_> {
        side.into_iter().map(|(file, (run, _))| (file, run)).collect()
    };
    let doc = DiffDocument::judged(&runs(a), &runs(b));
    let document = format!("{}\n", serde_json::to_string_pretty(&doc)?);
    let exports = request
        .exports
        .iter()
        .map(|target| {
            let encoded = match target.format {
                Format::Svg => svg::encode(&doc),
                Format::FlameSvg => flame::encode(&doc),
                Format::Html => html::encode(&doc),
                _ => Ok(document.clone().into_bytes()),
            };
            let bytes = encoded.map_err(|source| export::ExportError::Encode {
                path: target.path.clone(),
                format: target.format,
                source,
            })?;
            Ok((target.clone(), bytes))
        })
        .collect::<anyhow::Result<_>>()?;
    let text = if request.json { document } else { text::render(&doc) };
    Ok(DiffReport { text, exports })
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

impl DiffReport {
    /// Writes one of the request's exports, encoded already.
    pub fn write(&self, target: &ExportTarget) -> Result<(), export::ExportError> {
        let bytes = self.exports.iter().find(|(t, _)| t == target).map(|(_, b)| b.as_slice());
        export::write_encoded(target, bytes.unwrap_or_default())
    }
}
