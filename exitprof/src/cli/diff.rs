//! `exitprof diff`: saved runs, side A against side B.

use std::path::PathBuf;

use clap::Args;
use exitprof_core::{
    diff::{DiffRequest, Input},
    export::{self, ExportTarget},
};

use super::parse::usage;

/// `exitprof diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Side A's runs (the baseline): one `--json` document or record file (`exitprof record`),
    /// or several of repeated runs. Without `--`, exactly two: A and B.
    #[arg(value_name = "A", required = true)]
    pub a: Vec<PathBuf>,
    /// Side B's runs, after `--`.
    #[arg(last = true, value_name = "B")]
    pub b: Vec<PathBuf>,
    /// Print the diff as one JSON document instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the diff to PATH (repeatable), in the format its extension names: .json (the
    /// --json document), .svg (each row's time per exit on both sides, and its change with its
    /// interval), .flame.svg (a differential flame graph: B's stacks, red where B spends more
    /// per exit, blue where less), .html (one self-contained page of it all).
    #[arg(long = "export", value_name = "PATH")]
    pub exports: Vec<PathBuf>,
}

impl DiffArgs {
    /// The diff the command line asks for; a usage error when the sides cannot be told apart.
    pub fn request(&self) -> Result<DiffRequest, clap::Error> {
        let (a, b) = match (self.a.as_slice(), self.b.as_slice()) {
            ([a, b], []) => (vec![a.clone()], vec![b.clone()]),
            (_, []) => {
                return Err(usage(format!(
                    "diff needs two sides: `exitprof diff A B`, or `exitprof diff A1 A2 ... -- \
                     B1 B2 ...` for several runs a side ({} documents given, no `--`)",
                    self.a.len()
                )));
            }
            (a, b) => (a.to_vec(), b.to_vec()),
        };
        if let Some(option) = b.iter().find(|p| p.to_string_lossy().starts_with('-')) {
            return Err(usage(format!(
                "{} comes after `--`, where only side B's documents go: options go before `--`",
                option.display()
            )));
        }
        let inputs = |paths: Vec<PathBuf>| paths.into_iter().map(Input::Saved).collect();
        Ok(DiffRequest { a: inputs(a), b: inputs(b), json: self.json })
    }

    /// The files to write the diff to; a usage error for a format a diff is not written in.
    pub fn export_targets(&self) -> Result<Vec<ExportTarget>, clap::Error> {
        let exports = export::targets(&self.exports, None).map_err(usage)?;
        if let Some(t) = exports.iter().find(|t| !export::diff::FORMATS.contains(&t.format)) {
            return Err(usage(format!(
                "--export {}: a diff is written as .json, .svg, .flame.svg or .html, not .{}",
                t.path.display(),
                t.format
            )));
        }
        Ok(exports)
    }
}
