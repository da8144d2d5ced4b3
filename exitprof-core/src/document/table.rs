//! Plain text tables as every report prints them: no borders, figures right-aligned, no blanks
//! left at the ends of lines (they would end up in pasted reports).

use std::fmt::{self, Write as _};

use comfy_table::{CellAlignment, Row, Table, presets::NOTHING};

/// A borderless table under `header`.
pub struct TextTable {
    table: Table,
    /// Columns that name the rows, left-aligned; the others are figures, right-aligned (all
    /// left-aligned when `None`).
    names: Option<usize>,
}

impl TextTable {
    pub fn new(header: impl Into<Row>) -> Self {
        let mut table = Table::new();
        table.load_preset(NOTHING).set_header(header);
        Self { table, names: None }
    }

    pub fn add_row(&mut self, row: impl Into<Row>) -> &mut Self {
        self.table.add_row(row);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.table.row_iter().next().is_none()
    }

    /// Right-aligns every column but the first, which names the rows.
    pub fn figures_right(self) -> Self {
        self.names_left(1)
    }

    /// Right-aligns every column but the first `names`, which name the rows.
    pub fn names_left(mut self, names: usize) -> Self {
        for column in self.table.column_iter_mut().skip(names) {
            column.set_cell_alignment(CellAlignment::Right);
        }
        self.names = Some(names);
        self
    }
}

impl TextTable {
    /// The table as an HTML `<table>`: the header, then each row; text escaped, a cell's lines
    /// kept apart, figures right-aligned as in the terminal.
    pub fn to_html(&self) -> String {
        let row = |row: &Row, cell: &str| -> String {
            let cells = row.cell_iter().enumerate().fold(String::new(), |mut cells, (i, c)| {
                let figure = self.names.is_some_and(|names| i >= names);
                let align = if figure { " class=\"figure\"" } else { "" };
                let text = escape_html(&c.content()).replace('\n', "<br>");
                let _ = write!(cells, "<{cell}{align}>{text}</{cell}>");
                cells
            });
            format!("<tr>{cells}</tr>\n")
        };
        let header = self.table.header().map(|h| row(h, "th")).unwrap_or_default();
        let body: String = self.table.row_iter().map(|r| row(r, "td")).collect();
        format!("<table>\n<thead>{header}</thead>\n<tbody>\n{body}</tbody>\n</table>\n")
    }
}

/// Text made safe inside HTML (and its attributes).
pub fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

impl fmt::Display for TextTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.table.lines().map(|l| l.trim_end().to_owned()).collect();
        f.write_str(&lines.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_end_in_their_last_character_and_figures_align_right() {
        let mut table = TextTable::new(["stage", "count"]);
        table.add_row(["exit", "7"]).add_row(["exit_files", "12345"]);
        let table = table.figures_right();
        let text = table.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| !l.ends_with(' ')), "{text:?}");
        assert!(lines[1].ends_with("    7"), "{text:?}");
        let html = table.to_html();
        assert!(html.contains("<th>stage</th><th class=\"figure\">count</th>"), "{html}");
        assert!(html.contains("<td>exit_files</td><td class=\"figure\">12345</td>"), "{html}");
        assert!(lines[2].ends_with("12345"), "{text:?}");
    }
}
