//! Plain text tables as every report prints them: no borders, figures right-aligned, no blanks
//! left at the ends of lines (they would end up in pasted reports).

use std::fmt;

use comfy_table::{CellAlignment, Row, Table, presets::NOTHING};

/// A borderless table under `header`.
pub struct TextTable(Table);

impl TextTable {
    pub fn new(header: impl Into<Row>) -> Self {
        let mut table = Table::new();
        table.load_preset(NOTHING).set_header(header);
        Self(table)
    }

    pub fn add_row(&mut self, row: impl Into<Row>) -> &mut Self {
        self.0.add_row(row);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.0.row_iter().next().is_none()
    }

    /// Right-aligns every column but the first, which names the rows.
    pub fn figures_right(self) -> Self {
        self.names_left(1)
    }

    /// Right-aligns every column but the first `names`, which name the rows.
    pub fn names_left(mut self, names: usize) -> Self {
        for column in self.0.column_iter_mut().skip(names) {
            column.set_cell_alignment(CellAlignment::Right);
        }
        self
    }
}

impl fmt::Display for TextTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.lines().map(|l| l.trim_end().to_owned()).collect();
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
        let text = table.figures_right().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| !l.ends_with(' ')), "{text:?}");
        assert!(lines[1].ends_with("    7"), "{text:?}");
        assert!(lines[2].ends_with("12345"), "{text:?}");
    }
}
