//! A diff presented: its report (the tables, or the `--json` document) and its exports.

use exitprof_core::{
    diff::{self, DiffRequest},
    export::{self, ExportError, ExportTarget},
    report,
};

use super::publish::{check_exports, print_report, write_exports};

/// `exitprof diff`: compares the saved runs, then prints the diff's report and writes its
/// exports. Every export is encoded before anything is printed or written.
pub fn diff(request: &DiffRequest, exports: &[ExportTarget]) -> anyhow::Result<()> {
    check_exports(exports)?;
    let doc = diff::diff(request)?;
    let document = format!("{}\n", serde_json::to_string_pretty(&doc)?);
    let encoded = exports
        .iter()
        .map(|target| {
            let bytes = export::diff::encode(&doc, target.format, &document).map_err(|source| {
                ExportError::Encode { path: target.path.clone(), format: target.format, source }
            })?;
            Ok((target, bytes))
        })
        .collect::<Result<Vec<_>, ExportError>>()?;
    let text = if request.json { document } else { report::diff::render(&doc) };
    print_report(&text)?;
    write_exports(exports, |target| {
        let bytes = encoded.iter().find(|(t, _)| *t == target).map(|(_, b)| b.as_slice());
        export::write_encoded(target, bytes.unwrap_or_default())
    })
}
