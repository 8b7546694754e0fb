//! Plain tables for terminal and Markdown output: aligned columns, numbers to the right.

/// A table of strings; a column is right-aligned when every cell in it looks numeric.
#[derive(Clone, Debug, Default)]
pub struct Table {
    /// The column headings.
    pub headers: Vec<String>,
    /// The rows, a cell per column.
    pub rows: Vec<Vec<String>>,
}

fn numeric(cell: &str) -> bool {
    let c = cell.trim_end_matches(['%', 's', 'x']);
    !c.is_empty()
        && c.chars().all(|ch| {
            ch.is_ascii_digit()
                || matches!(
                    ch,
                    '.' | ',' | '-' | ' ' | 'm' | 'i' | 'n' | 'µ' | 'h' | 'd'
                )
        })
        && c.chars()
            .next()
            .is_some_and(|ch| ch.is_ascii_digit() || ch == '-')
}

impl Table {
    /// A table with these headings and no rows.
    pub fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Table {
        Table {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < w.len() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
        }
        w
    }

    /// Which columns are right-aligned: those (but the first) whose cells are numbers, beside
    /// placeholders without a digit (`-`, `no repeats`), with at least one number.
    fn right(&self) -> Vec<bool> {
        let placeholder = |c: &str| !c.chars().any(|ch| ch.is_ascii_digit());
        (0..self.headers.len())
            .map(|i| {
                let cells = || self.rows.iter().filter_map(|r| r.get(i));
                i > 0
                    && cells().all(|c| placeholder(c) || numeric(c))
                    && cells().any(|c| !placeholder(c))
            })
            .collect()
    }

    /// Aligned text, two spaces between columns, a rule under the header.
    pub fn text(&self) -> String {
        let (w, right) = (self.widths(), self.right());
        let line = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, width) in w.iter().enumerate() {
                let c = cells.get(i).map_or("", String::as_str);
                let pad = width - c.chars().count();
                if i > 0 {
                    s.push_str("  ");
                }
                if right[i] {
                    s.extend(std::iter::repeat_n(' ', pad));
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    s.extend(std::iter::repeat_n(' ', pad));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        let mut out = line(&self.headers);
        let rule: Vec<String> = w.iter().map(|&n| "-".repeat(n)).collect();
        out.push_str(&line(&rule));
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }

    /// A GitHub-flavoured Markdown table (pipes in cells escaped).
    pub fn markdown(&self) -> String {
        let right = self.right();
        let esc = |c: &str| c.replace('|', "\\|");
        let mut out = format!(
            "| {} |\n|{}|\n",
            self.headers
                .iter()
                .map(|h| esc(h))
                .collect::<Vec<_>>()
                .join(" | "),
            right
                .iter()
                .map(|&r| if r { "---:" } else { "---" })
                .collect::<Vec<_>>()
                .join("|")
        );
        for r in &self.rows {
            out.push_str(&format!(
                "| {} |\n",
                r.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | ")
            ));
        }
        out
    }
}

impl Table {
    /// An HTML `<table>` (cells escaped; numeric columns right-aligned).
    pub fn html(&self) -> String {
        let right = self.right();
        let cell = |tag: &str, i: usize, c: &str| {
            let align = if right[i] { " class=\"num\"" } else { "" };
            format!("<{tag}{align}>{}</{tag}>", html_escape(c))
        };
        let mut out = String::from("<table>\n<thead><tr>");
        for (i, h) in self.headers.iter().enumerate() {
            out.push_str(&cell("th", i, h));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for r in &self.rows {
            out.push_str("<tr>");
            for (i, c) in r.iter().enumerate() {
                out.push_str(&cell("td", i, c));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody>\n</table>\n");
        out
    }
}

/// Text made safe inside HTML elements and attribute values.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// One CSV field (RFC 4180 quoting when needed).
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_numbers_right_and_text_left() {
        let mut t = Table::new(["strategy", "touches"]);
        t.row(vec!["naive".into(), "405,929".into()]);
        t.row(vec!["inode-order".into(), "7".into()]);
        assert_eq!(
            t.text(),
            "strategy     touches\n-----------  -------\nnaive        405,929\ninode-order        7\n"
        );
        assert_eq!(
            t.markdown(),
            "| strategy | touches |\n|---|---:|\n| naive | 405,929 |\n| inode-order | 7 |\n"
        );
    }

    #[test]
    fn placeholders_keep_a_column_of_numbers_right_aligned() {
        let mut t = Table::new(["phase", "hit", "name"]);
        t.row(vec!["phase1".into(), "83.3%".into(), "-".into()]);
        t.row(vec!["phase2".into(), "no repeats".into(), "lru".into()]);
        t.row(vec!["phase3".into(), "-".into(), "-".into()]);
        assert_eq!(
            t.text(),
            "phase          hit  name\n------  ----------  ----\nphase1       83.3%  -\n\
             phase2  no repeats  lru\nphase3           -  -\n"
        );
    }

    #[test]
    fn quotes_csv_fields_that_need_it() {
        assert_eq!(csv_field("phase1 strategy=lru"), "phase1 strategy=lru");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
    }
}
