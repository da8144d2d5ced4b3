//! The diff as one self-contained HTML page (`--export NAME.html`): what was compared, the
//! verdict and its warnings, the tables, the figure and the differential flame graph.

use super::{flame, svg};
use crate::{
    diff::document::DiffDocument,
    export::{
        EncodeError,
        html::{Block, page},
    },
    report::diff as text,
};

pub fn encode(doc: &DiffDocument) -> Result<Vec<u8>, EncodeError> {
    let mut blocks = vec![
        Block::Paragraph(format!("A: {}", text::describe_side(&doc.a))),
        Block::Paragraph(format!("B: {}", text::describe_side(&doc.b))),
        Block::Paragraph(format!("verdict: {}", doc.verdict)),
    ];
    blocks.extend(doc.warnings.iter().map(|w| Block::Paragraph(format!("warning: {w}"))));
    blocks.push(Block::Table(
        "time per exit (of all exits, whether they passed through the row or not)".to_owned(),
        text::time_table(doc),
    ));
    blocks.push(Block::Table(
        "latency of the exits through each row (rows of one stage a side)".to_owned(),
        text::latency_table(&doc.rows),
    ));
    for (title, stacks) in [("blocked in", &doc.blocked_in), ("on CPU in", &doc.on_cpu_in)] {
        blocks.push(Block::Table(
            format!("{title}: the stacks whose time per exit changed most"),
            text::stack_table(title, stacks),
        ));
    }
    blocks.push(Block::Figure("each row's time per exit, A and B".to_owned(), svg::encode(doc)?));
    blocks.push(Block::FlameGraph(
        "where B's exits compute and block against A's (red: more per exit in B, blue: less)"
            .to_owned(),
        flame::encode(doc)?,
    ));
    blocks.push(Block::Text("the whole diff".to_owned(), text::render(doc)));
    Ok(page("exitprof diff: B against A", &blocks))
}
