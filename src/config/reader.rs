//! Typed values out of the spanned TOML document, with a `Problem` (line and key) for each
//! one that is wrong.

use std::num::IntErrorKind;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::error::Problem;

/// Collects problems while reading values out of the spanned document.
pub(super) struct Reader<'t> {
    text: &'t str,
    pub(super) problems: Vec<Problem>,
}

pub(super) type Value<'i> = Spanned<DeValue<'i>>;

impl<'t> Reader<'t> {
    pub(super) fn new(text: &'t str) -> Reader<'t> {
        Reader {
            text,
            problems: Vec::new(),
        }
    }

    /// The 1-based line where `span` starts.
    pub(super) fn line_of(&self, span: Range<usize>) -> usize {
        self.position(span).0
    }

    /// The 1-based line and column (in characters) where `span` starts.
    fn position(&self, span: Range<usize>) -> (usize, usize) {
        let mut end = span.start.min(self.text.len());
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        let before = &self.text[..end];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line = before.matches('\n').count() + 1;
        (line, before[line_start..].chars().count() + 1)
    }

    pub(super) fn problem(
        &mut self,
        span: Option<Range<usize>>,
        key: &str,
        message: impl Into<String>,
    ) {
        let (line, column) = span.map(|s| self.position(s)).unzip();
        self.problems.push(Problem {
            line,
            column,
            key: key.to_string(),
            message: message.into(),
        });
    }

    pub(super) fn unknown_keys(&mut self, table: &DeTable<'_>, known: &[&str], prefix: &str) {
        for key in table.keys() {
            let name = key.get_ref().as_ref();
            if !known.contains(&name) {
                let hint = known
                    .iter()
                    .filter(|k| similar(k, name))
                    .map(|k| format!(" (did you mean `{k}`?)"))
                    .next()
                    .unwrap_or_else(|| format!("; known keys: {}", known.join(", ")));
                self.problem(
                    Some(key.span()),
                    &format!("{prefix}{name}"),
                    format!("unknown key{hint}"),
                );
            }
        }
    }

    pub(super) fn string(&mut self, key: &str, v: &Value<'_>) -> Option<String> {
        match v.get_ref().as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                let got = v.get_ref().type_str();
                self.problem(Some(v.span()), key, format!("expected a string, got {got}"));
                None
            }
        }
    }

    pub(super) fn boolean(&mut self, key: &str, v: &Value<'_>) -> Option<bool> {
        match v.get_ref().as_bool() {
            Some(b) => Some(b),
            None => {
                let got = v.get_ref().type_str();
                self.problem(
                    Some(v.span()),
                    key,
                    format!("expected true or false, got {got}"),
                );
                None
            }
        }
    }

    /// A whole number in `range`; out of it, the problem says which end and names the limit.
    pub(super) fn integer(&mut self, key: &str, v: &Value<'_>, range: Range<u64>) -> Option<u64> {
        let Some(int) = v.get_ref().as_integer() else {
            let got = v.get_ref().type_str();
            let why = format!("expected a whole number, got {got}");
            self.problem(Some(v.span()), key, why);
            return None;
        };
        let (min, max) = (range.start, range.end - 1);
        let why = match i128::from_str_radix(int.as_str(), int.radix()) {
            Ok(n) if (i128::from(min)..=i128::from(max)).contains(&n) => return Some(n as u64),
            Ok(n) if n < i128::from(min) => format!("{n} is too small: the minimum is {min}"),
            Ok(n) => format!("{n} is too large: the limit is {max}"),
            Err(e) if *e.kind() == IntErrorKind::NegOverflow => {
                format!("{int} is too small: the minimum is {min}")
            }
            Err(_) => format!("{int} is too large: the limit is {max}"),
        };
        self.problem(Some(v.span()), key, why);
        None
    }

    pub(super) fn abs_path(&mut self, key: &str, v: &Value<'_>) -> Option<PathBuf> {
        let s = self.string(key, v)?;
        let p = PathBuf::from(&s);
        if !p.is_absolute() {
            self.problem(
                Some(v.span()),
                key,
                format!("{s:?} must be an absolute path"),
            );
            return None;
        }
        Some(p)
    }

    pub(super) fn strings(&mut self, key: &str, v: &Value<'_>) -> Option<Vec<String>> {
        let items = self.spanned_strings(key, v)?;
        Some(items.into_iter().map(|(s, _)| s).collect())
    }

    /// An array of strings, each with its span (for a problem with one item).
    pub(super) fn spanned_strings(
        &mut self,
        key: &str,
        v: &Value<'_>,
    ) -> Option<Vec<(String, Range<usize>)>> {
        let Some(arr) = v.get_ref().as_array() else {
            let got = v.get_ref().type_str();
            self.problem(
                Some(v.span()),
                key,
                format!("expected an array of strings, got {got}"),
            );
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for (i, item) in arr.iter().enumerate() {
            match self.string(&format!("{key}[{i}]"), item) {
                Some(s) => out.push((s, item.span())),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    pub(super) fn abs_paths(&mut self, key: &str, v: &Value<'_>) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for (p, span) in self.spanned_strings(key, v).unwrap_or_default() {
            if Path::new(&p).is_absolute() {
                out.push(PathBuf::from(p));
            } else {
                self.problem(Some(span), key, format!("{p:?} must be an absolute path"));
            }
        }
        out
    }
}

/// The same key but for case, `_`/`-`, a truncation, or one typo (one letter changed, added,
/// left out, or two swapped).
fn similar(a: &str, b: &str) -> bool {
    let strip = |s: &str| s.replace(['_', '-'], "").to_ascii_lowercase();
    let (a, b) = (strip(a), strip(b));
    (a.len() > 4 && b.len() > 4 && (a.starts_with(&b) || b.starts_with(&a)))
        || (a.len().abs_diff(b.len()) <= 1 && strsim::osa_distance(&a, &b) <= 1)
}
