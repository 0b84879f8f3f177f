//! Text laid out for people: aligned columns under group headings, long explanations on
//! wrapped lines below their row, everything within a page width. The width is the
//! terminal's when stdout is one, else a fixed [`PIPE_WIDTH`], so piped output never
//! depends on where it was run.

use std::borrow::Cow;
use std::io::IsTerminal;

/// The columns `s` takes on a terminal; printable ASCII (almost every cell) is counted
/// without looking characters up.
pub fn display_width(s: &str) -> usize {
    match s.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        true => s.len(),
        false => textwrap::core::display_width(s),
    }
}

/// The page width of output that does not go to a terminal (pipes, files, tests).
pub const PIPE_WIDTH: usize = 120;

/// Narrower terminals are laid out as if this wide (lines then wrap in the terminal).
const MIN_WIDTH: usize = 60;

/// Columns between cells.
const GAP: &str = "  ";

/// Where an explanation below a row starts.
const NOTE_INDENT: &str = "      ";

/// The width to lay stdout out for: the terminal's, else [`PIPE_WIDTH`].
pub fn page_width() -> usize {
    let stdout = std::io::stdout();
    if !stdout.is_terminal() {
        return PIPE_WIDTH;
    }
    // The terminal's columns, else $COLUMNS.
    let columns = crate::live::terminal_columns(&stdout).or_else(|| {
        std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse().ok())
            .filter(|&c: &usize| c > 0)
    });
    columns.map_or(PIPE_WIDTH, |c| c.max(MIN_WIDTH))
}

/// `s` in at most `max` columns: the middle gives way to `…`. A path keeps its file name
/// whole when it can (`secrets/…/etcd-peer-master-0.crt`); otherwise the start and, longer,
/// the end are kept.
pub fn elide_middle(s: &str, max: usize) -> String {
    elide(s, max).into_owned()
}

/// [`elide_middle`], borrowing `s` when it fits.
fn elide(s: &str, max: usize) -> Cow<'_, str> {
    if display_width(s) <= max {
        return Cow::Borrowed(s);
    }
    if max <= 1 {
        return "…".chars().take(max).collect();
    }
    let room = max - 1;
    let tail_room = match s.rfind('/') {
        // The file name whole, and at least a few characters of the start.
        Some(slash) if display_width(&s[slash..]) + 4 <= room => display_width(&s[slash..]),
        _ => room - room / 3,
    };
    let tail = take_end(s, tail_room);
    let head = take_start(s, room - display_width(&tail));
    Cow::Owned(format!("{head}…{tail}"))
}

/// `s` in at most `max` columns, its end given way to `…`.
pub fn cut_end(s: &str, max: usize) -> String {
    if display_width(s) <= max {
        return s.to_string();
    }
    let head = take_start(s, max.saturating_sub(1));
    format!("{}…", head.trim_end())
}

/// The longest start of `s` within `width` columns.
fn take_start(s: &str, width: usize) -> String {
    let mut out = String::new();
    for ch in s.chars() {
        if display_width(&out) + display_width(ch.encode_utf8(&mut [0; 4])) > width {
            break;
        }
        out.push(ch);
    }
    out
}

/// The longest end of `s` within `width` columns.
fn take_end(s: &str, width: usize) -> String {
    let mut tail: Vec<char> = Vec::new();
    let mut used = 0;
    for ch in s.chars().rev() {
        let w = display_width(ch.encode_utf8(&mut [0; 4]));
        if used + w > width {
            break;
        }
        used += w;
        tail.push(ch);
    }
    tail.into_iter().rev().collect()
}

/// `text` wrapped to `width`, each line starting with `indent`; words longer than a line
/// (paths) are broken.
pub fn wrapped(text: &str, indent: &str, width: usize) -> Vec<String> {
    let options = textwrap::Options::new(width.max(display_width(indent) + 20))
        .initial_indent(indent)
        .subsequent_indent(indent)
        .break_words(true)
        // A path stays whole where it can: not broken at its hyphens.
        .word_splitter(textwrap::WordSplitter::NoHyphenation);
    textwrap::wrap(text, options)
        .into_iter()
        .map(|l| l.into_owned())
        .collect()
}

/// The width to wrap line-per-item output to (`renew`'s): the terminal's when stdout is
/// one; none when piped, where each item stays one line for scripts and `grep`.
pub fn terminal_width() -> Option<usize> {
    std::io::stdout().is_terminal().then(page_width)
}

/// `text` with each line wider than `page` wrapped, its continuation lines indented by
/// `hang` columns (where the text after the state word starts). Words are not broken but
/// a path too long for a line of its own, which is broken after a `/` (its file name kept
/// whole on the last piece).
pub fn wrap_lines(text: &str, hang: usize, page: usize) -> String {
    let room = page.saturating_sub(hang).max(20);
    let indent = " ".repeat(hang);
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        if display_width(body) <= page || body.len() <= hang || !body.is_char_boundary(hang) {
            out.push_str(line);
            continue;
        }
        let (prefix, rest) = body.split_at(hang);
        let mut cur = prefix.to_string();
        let mut fresh = true;
        let mut lines = Vec::new();
        for word in rest.split(' ').filter(|w| !w.is_empty()) {
            for piece in path_pieces(word, room) {
                let w = display_width(&piece);
                let needed = if fresh { w } else { w + 1 };
                if !fresh && display_width(&cur) + needed > page {
                    lines.push(std::mem::replace(&mut cur, indent.clone()));
                    fresh = true;
                }
                if !fresh {
                    cur.push(' ');
                }
                cur.push_str(&piece);
                // The pieces of one path each take a line of their own.
                fresh = false;
            }
        }
        lines.push(cur);
        for l in lines {
            out.push_str(l.trim_end());
            out.push('\n');
        }
        if !line.ends_with('\n') {
            out.pop();
        }
    }
    out
}

/// `word` in pieces of at most `room` columns, broken after a `/`; a word that fits, or
/// has no `/` to break at, whole.
fn path_pieces(word: &str, room: usize) -> Vec<String> {
    if display_width(word) <= room || !word.contains('/') {
        return vec![word.to_string()];
    }
    let mut pieces = Vec::new();
    let mut cur = String::new();
    for seg in word.split_inclusive('/') {
        if !cur.is_empty() && display_width(&cur) + display_width(seg) > room {
            pieces.push(std::mem::take(&mut cur));
        }
        cur.push_str(seg);
    }
    if !cur.is_empty() {
        pieces.push(cur);
    }
    pieces
}

/// One line of a [`Table`].
#[derive(Debug, Clone)]
enum Line {
    /// A group heading, flush left.
    Heading(String),
    /// A row of cells; the first cell is indented.
    Row(Vec<String>),
    /// An explanation of the row above, wrapped below it.
    Note(String),
}

/// Aligned columns with a header line, group headings, and notes below rows.
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    lines: Vec<Line>,
    /// Columns that may be shortened (middle elided) to fit, with the narrowest each may
    /// become.
    elastic: Vec<(usize, usize)>,
    /// The indent of rows under a heading.
    indent: usize,
    /// The first column is never elided: a cell wider than the column it was fitted to
    /// is printed whole on a line of its own, the row's other cells below it in their
    /// columns (file names are what a reader looks for, and two elided alike are lost).
    whole_first: bool,
}

impl Table {
    /// A table with these column titles; rows are indented by `indent` under headings.
    pub fn new(header: &[&str], indent: usize) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            lines: Vec::new(),
            elastic: Vec::new(),
            indent,
            whole_first: false,
        }
    }

    /// The first column's cells are kept whole: one too wide for it takes a line of its
    /// own, the rest of the row goes below it (the column may still be narrowed to fit).
    pub fn whole_first(mut self) -> Table {
        self.whole_first = true;
        self
    }

    /// Column `col` may be shortened (its cells' middles elided) down to `min` columns to
    /// fit the page.
    pub fn elastic(mut self, col: usize, min: usize) -> Table {
        self.elastic.push((col, min));
        self
    }

    /// A group heading.
    pub fn heading(&mut self, text: impl Into<String>) {
        self.lines.push(Line::Heading(text.into()));
    }

    /// A row, one cell per column.
    pub fn row(&mut self, cells: Vec<String>) {
        self.lines.push(Line::Row(cells));
    }

    /// An explanation of the last row, on its own wrapped lines below it.
    pub fn note(&mut self, text: impl Into<String>) {
        self.lines.push(Line::Note(text.into()));
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        !self.lines.iter().any(|l| matches!(l, Line::Row(_)))
    }

    /// The natural width of each column (the first includes the rows' indent).
    fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.header.iter().map(|h| display_width(h)).collect();
        for line in &self.lines {
            if let Line::Row(cells) = line {
                for (i, c) in cells.iter().enumerate().take(w.len()) {
                    let extra = if i == 0 { self.indent } else { 0 };
                    w[i] = w[i].max(display_width(c) + extra);
                }
            }
        }
        w
    }

    /// Whether every row fits `page` columns as it is, nothing narrowed or wrapped.
    pub fn fits(&self, page: usize) -> bool {
        let w = self.widths();
        w.iter().sum::<usize>() + GAP.len() * w.len().saturating_sub(1) <= page
    }

    /// Narrows the elastic columns until a row fits `page`: one column at a time off the
    /// one with the most room above its floor, so the longest gives way first.
    fn fit(&self, mut widths: Vec<usize>, page: usize) -> Vec<usize> {
        let total = |w: &[usize]| w.iter().sum::<usize>() + GAP.len() * w.len().saturating_sub(1);
        let floor = |col: usize, min: usize| min.max(display_width(&self.header[col]));
        while total(&widths) > page {
            let slack =
                |&&(col, min): &&(usize, usize)| widths[col].saturating_sub(floor(col, min));
            match self
                .elastic
                .iter()
                .filter(|e| slack(e) > 0)
                .max_by_key(slack)
            {
                Some(&(col, _)) => widths[col] -= 1,
                None => break,
            }
        }
        widths
    }

    /// The table laid out within `page` columns.
    pub fn render(&self, page: usize) -> String {
        let widths = self.fit(self.widths(), page);
        let mut out = String::new();
        cells_line(&mut out, &self.header, &widths, 0);
        for line in &self.lines {
            match line {
                Line::Heading(h) => {
                    out.push_str(&elide(h, page));
                    out.push('\n');
                }
                Line::Row(cells) => match cells.first() {
                    Some(first)
                        if self.whole_first && display_width(first) + self.indent > widths[0] =>
                    {
                        // The name alone, then the rest under their columns.
                        out.push_str(&" ".repeat(self.indent));
                        out.push_str(first);
                        out.push('\n');
                        let mut rest = cells.clone();
                        rest[0] = String::new();
                        cells_line(&mut out, &rest, &widths, self.indent);
                    }
                    _ => cells_line(&mut out, cells, &widths, self.indent),
                },
                Line::Note(n) => {
                    for l in wrapped(n, NOTE_INDENT, page) {
                        out.push_str(&l);
                        out.push('\n');
                    }
                }
            }
        }
        out
    }
}

/// Appends one line of cells padded to `widths`, the first indented by `indent`; the last
/// cell is not padded, and nothing trails.
fn cells_line(out: &mut String, cells: &[String], widths: &[usize], indent: usize) {
    let start = out.len();
    let spaces = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
    spaces(out, indent);
    for (i, (cell, &w)) in cells.iter().zip(widths).enumerate() {
        let w = if i == 0 { w.saturating_sub(indent) } else { w };
        let cell = elide(cell, w);
        out.push_str(&cell);
        if i + 1 < cells.len() {
            spaces(out, w.saturating_sub(display_width(&cell)));
            out.push_str(GAP);
        }
    }
    let line_end = start + out[start..].trim_end().len();
    out.truncate(line_end);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_middle_of_a_long_path_gives_way() {
        let p = "secrets/etcd-all-certs/etcd-serving-metrics-master-0.crt";
        assert_eq!(elide_middle(p, 100), p);
        let e = elide_middle(p, 40);
        assert_eq!(display_width(&e), 40);
        assert_eq!(e, "secre…/etcd-serving-metrics-master-0.crt");
        // Too narrow for the file name: both ends of it.
        assert_eq!(elide_middle(p, 20), "secret…-master-0.crt");
        assert_eq!(elide_middle("abc", 1), "…");
    }

    #[test]
    fn columns_align_under_headings_with_notes_below() {
        let mut t = Table::new(&["CERTIFICATE", "STATUS"], 2);
        t.heading("/etc/etcd");
        t.row(vec!["server.crt".into(), "due".into()]);
        t.row(vec!["a-much-longer-name.crt".into(), "unrenewable".into()]);
        t.note("CA key not on this host");
        assert_eq!(
            t.render(120),
            "CERTIFICATE               STATUS\n\
             /etc/etcd\n  \
             server.crt              due\n  \
             a-much-longer-name.crt  unrenewable\n      \
             CA key not on this host\n"
        );
    }

    #[test]
    fn a_first_cell_kept_whole_takes_its_own_line_when_too_wide() {
        let mut t = Table::new(&["NAME", "STATUS"], 2)
            .elastic(0, 8)
            .whole_first();
        t.row(vec!["apiserver-kubelet-client.crt".into(), "due".into()]);
        t.row(vec!["ca.crt".into(), "ok".into()]);
        assert_eq!(
            t.render(20),
            "NAME          STATUS\n  \
             apiserver-kubelet-client.crt\n              \
             due\n  \
             ca.crt      ok\n"
        );
    }

    #[test]
    fn a_long_line_wraps_under_its_text_with_file_names_whole() {
        let line = "would renew  /etc/kubernetes/pki/apiserver-kubelet-client.crt (due)\n";
        assert_eq!(wrap_lines(line, 13, 100), line);
        assert_eq!(
            wrap_lines(line, 13, 50),
            "would renew  /etc/kubernetes/pki/\n             \
             apiserver-kubelet-client.crt (due)\n"
        );
    }

    #[test]
    fn the_longest_elastic_column_gives_way_first() {
        let mut t = Table::new(&["NAME", "CA", "STATUS"], 0)
            .elastic(0, 10)
            .elastic(1, 4);
        t.row(vec!["x".repeat(40), "y".repeat(20), "ok".into()]);
        let fitted = t.fit(t.widths(), 50);
        assert_eq!(fitted, [23, 17, 6]);
        assert_eq!(
            t.fit(t.widths(), 30),
            [13, 7, 6],
            "as much above each floor"
        );
        assert_eq!(t.fit(t.widths(), 10), [10, 4, 6], "never below a floor");
        let out = t.render(50);
        let (header, line) = (out.lines().next().unwrap(), out.lines().nth(1).unwrap());
        assert_eq!(display_width(header), 50, "{out}");
        assert!(line.contains('…') && line.ends_with("  ok"), "{out}");
    }
}
