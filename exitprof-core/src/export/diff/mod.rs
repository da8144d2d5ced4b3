//! The exports of a diff: its document (`.json`, what `diff --json` prints), its figure
//! (`.svg`), its differential flame graph (`.flame.svg`) and the HTML page of them all.

mod flame;
mod html;
mod svg;

use super::{EncodeError, Format};
use crate::diff::document::DiffDocument;

/// The formats a diff is written in.
pub const FORMATS: [Format; 4] = [Format::Json, Format::Svg, Format::FlameSvg, Format::Html];

/// `doc` in `format`, one of [`FORMATS`]; `document` is its JSON, as `--json` prints it.
pub fn encode(doc: &DiffDocument, format: Format, document: &str) -> Result<Vec<u8>, EncodeError> {
    match format {
        Format::Svg => svg::encode(doc),
        Format::FlameSvg => flame::encode(doc),
        Format::Html => html::encode(doc),
        _ => Ok(document.as_bytes().to_vec()),
    }
}
