//! One self-contained HTML report (`.html`): the tables, the figures and a flame graph one can
//! zoom, in a single file that opens offline — nothing is fetched, everything is inline. The
//! figures are images of their SVG; the flame graph is inferno's SVG, whose own script zooms
//! and searches it, in a frame of its own (its script expects to be its document's root).

use std::fmt::Write as _;

use base64::Engine as _;

use super::{EncodeError, ExportSet, folded, svg};
use crate::document::{
    fmt_ns,
    table::{TextTable, escape_html},
};

/// A part of a page.
pub enum Block {
    /// A paragraph of text.
    Paragraph(String),
    /// A table, under its caption.
    Table(String, TextTable),
    /// A figure (an SVG image), under its caption.
    Figure(String, Vec<u8>),
    /// A flame graph (inferno's SVG, with its script), under its caption.
    FlameGraph(String, Vec<u8>),
    /// Text as the terminal shows it, folded away until opened.
    Text(String, String),
}

/// The page's own style: readable without any font or sheet from elsewhere.
const STYLE: &str = "\
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
th, td { padding: 0.2em 0.7em; border-bottom: 1px solid #ddd; text-align: left; \
vertical-align: top; }
th { background: #f2f2f2; } td.figure, th.figure { text-align: right; \
font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #ddd; }
iframe { width: 100%; height: 640px; border: 1px solid #ddd; }
pre { font-size: 0.8em; overflow-x: auto; background: #f8f8f8; padding: 0.8em; }
p.verdict { background: #fff8e0; padding: 0.6em; border-left: 4px solid #e0b000; }
";

/// A page of `blocks` under `title`.
pub fn page(title: &str, blocks: &[Block]) -> Vec<u8> {
    let mut html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta \
         name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n\
         <style>\n{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape_html(title),
        escape_html(title)
    );
    for block in blocks {
        match block {
            Block::Paragraph(text) => {
                let class = if text.starts_with("verdict:") { " class=\"verdict\"" } else { "" };
                let _ = writeln!(html, "<p{class}>{}</p>", escape_html(text));
            }
            Block::Table(caption, table) if !table.is_empty() => {
                let _ = writeln!(html, "<h2>{}</h2>\n{}", escape_html(caption), table.to_html());
            }
            Block::Table(..) => {}
            Block::Figure(caption, svg) => {
                let _ = writeln!(
                    html,
                    "<h2>{}</h2>\n<img alt=\"{}\" src=\"{}\">",
                    escape_html(caption),
                    escape_html(caption),
                    data_url(svg)
                );
            }
            Block::FlameGraph(caption, svg) => {
                let _ = writeln!(
                    html,
                    "<h2>{}</h2>\n<p>Click a frame to zoom into it, Ctrl-F to search.</p>\n\
                     <iframe title=\"{}\" src=\"{}\"></iframe>",
                    escape_html(caption),
                    escape_html(caption),
                    data_url(svg)
                );
            }
            Block::Text(caption, text) => {
                let _ = writeln!(
                    html,
                    "<details>\n<summary>{}</summary>\n<pre>{}</pre>\n</details>",
                    escape_html(caption),
                    escape_html(text)
                );
            }
        }
    }
    html.push_str("</body>\n</html>\n");
    html.into_bytes()
}

/// An SVG as a `data:` URL: inline, so that the page fetches nothing.
fn data_url(svg: &[u8]) -> String {
    format!("data:image/svg+xml;base64,{}", base64::engine::general_purpose::STANDARD.encode(svg))
}

/// The report of a run (or a comparison): what ran, the latency of each stage, the figure, the
/// flame graph, and the report as the terminal shows it.
pub fn encode(set: &ExportSet) -> Result<Vec<u8>, EncodeError> {
    let title = format!("exitprof: {}", set.describe());
    let mut blocks =
        vec![Block::Paragraph(format!("kernel {}, attach {}", set.kernel, set.attach))];
    for run in &set.runs {
        let label = run.variant.label();
        let label = if label.is_empty() { String::new() } else { format!("{label}: ") };
        blocks.push(Block::Paragraph(format!("{label}{}", run.describe())));
    }
    if let Some(verdict) = &set.verdict {
        blocks.push(Block::Paragraph(format!("verdict: {verdict}")));
    }
    blocks.push(Block::Table("latency of each stage".to_owned(), latency_table(set)));
    blocks.push(Block::Figure(
        "latency by percentile, and each stage's share".to_owned(),
        svg::encode(set)?,
    ));
    blocks.push(Block::FlameGraph(
        "where exits compute (on-cpu) and block (off-cpu)".to_owned(),
        folded::encode_svg(set)?,
    ));
    if !set.report.is_empty() {
        blocks.push(Block::Text("the whole report".to_owned(), set.report.clone()));
    }
    Ok(page(&title, &blocks))
}

/// Each series' count and percentiles.
fn latency_table(set: &ExportSet) -> TextTable {
    let variants = set.runs.len() > 1;
    let groups = set.series.iter().any(|s| s.group.is_some());
    let mut header = vec!["stage"];
    header.extend(variants.then_some("variant"));
    header.extend(groups.then_some("group"));
    let names = header.len();
    header.extend(["count", "mean", "p50", "p90", "p99", "max"]);
    let mut table = TextTable::new(header).names_left(names);
    for s in &set.series {
        let h = &s.hist;
        let at = |q: f64| fmt_ns(h.value_at_quantile(q) as f64);
        let mut row = vec![s.stage.clone()];
        row.extend(variants.then(|| s.variant.label()));
        row.extend(groups.then(|| s.group.clone().unwrap_or_default()));
        row.extend([
            h.len().to_string(),
            fmt_ns(if h.is_empty() { 0.0 } else { s.sum_ns as f64 / h.len() as f64 }),
            at(0.5),
            at(0.9),
            at(0.99),
            fmt_ns(h.max() as f64),
        ]);
        table.add_row(row);
    }
    table
}
