//! Markdown tables, as reports write them: a header, a `|---|` rule, a line a row. A cell is
//! made safe for its row: a `|` would start another cell and a line break another row, so
//! they become `/` and a space.

/// A Markdown table being built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkdownTable {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl MarkdownTable {
    /// A table with these column headers.
    pub fn new<S: ToString>(header: &[S]) -> MarkdownTable {
        MarkdownTable {
            header: header.iter().map(|h| cell(&h.to_string())).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are left empty, cells past the header's count are dropped
    /// (in a debug build, a mismatch is a bug and panics).
    pub fn row<S: ToString>(&mut self, cells: &[S]) -> &mut MarkdownTable {
        debug_assert_eq!(cells.len(), self.header.len(), "a row of the wrong width");
        let mut row: Vec<String> = cells.iter().map(|c| cell(&c.to_string())).collect();
        row.resize(self.header.len(), String::new());
        self.rows.push(row);
        self
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as Markdown, every line ending in a newline.
    pub fn render(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut s = line(&self.header);
        s.push('|');
        s.push_str(&"---|".repeat(self.header.len()));
        s.push('\n');
        for r in &self.rows {
            s.push_str(&line(r));
        }
        s
    }
}

/// `text` made safe for one cell.
fn cell(text: &str) -> String {
    text.replace('|', "/").replace(['\r', '\n'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_renders_its_header_rule_and_rows() {
        let mut t = MarkdownTable::new(&["users", "throughput"]);
        assert!(t.is_empty());
        t.row(&["1", "51.2"]).row(&[2.to_string(), "82.6".into()]);
        assert_eq!(
            t.render(),
            "| users | throughput |\n|---|---|\n| 1 | 51.2 |\n| 2 | 82.6 |\n"
        );
    }

    #[test]
    fn a_cell_cannot_break_its_row() {
        let mut t = MarkdownTable::new(&["signal"]);
        t.row(&["a | b\nc"]);
        assert_eq!(t.render(), "| signal |\n|---|\n| a / b c |\n");
    }
}
