//! Typed values out of the spanned TOML document, with a `Problem` (line and key) for each
//! one that is wrong.

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

    fn line(&self, span: Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    pub(super) fn problem(
        &mut self,
        span: Option<Range<usize>>,
        key: &str,
        message: impl Into<String>,
    ) {
        let line = span.map(|s| self.line(s));
        self.problems.push(Problem {
            line,
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

    pub(super) fn integer(&mut self, key: &str, v: &Value<'_>, range: Range<u64>) -> Option<u64> {
        let parsed = v
            .get_ref()
            .as_integer()
            .and_then(|i| i64::from_str_radix(&i.as_str().replace('_', ""), i.radix()).ok());
        match parsed {
            Some(n) if n >= 0 && range.contains(&(n as u64)) => Some(n as u64),
            Some(n) => {
                self.problem(
                    Some(v.span()),
                    key,
                    format!(
                        "{n} is out of range: must be from {} to {}",
                        range.start,
                        range.end - 1
                    ),
                );
                None
            }
            None => {
                let got = v.get_ref().type_str();
                self.problem(
                    Some(v.span()),
                    key,
                    format!("expected a whole number, got {got}"),
                );
                None
            }
        }
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
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    pub(super) fn abs_paths(&mut self, key: &str, v: &Value<'_>) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for p in self.strings(key, v).unwrap_or_default() {
            if Path::new(&p).is_absolute() {
                out.push(PathBuf::from(p));
            } else {
                self.problem(
                    Some(v.span()),
                    key,
                    format!("{p:?} must be an absolute path"),
                );
            }
        }
        out
    }
}

/// The same key but for case, `_`/`-`, a truncation, or one typo (an edit distance of 1).
fn similar(a: &str, b: &str) -> bool {
    let strip = |s: &str| s.replace(['_', '-'], "").to_ascii_lowercase().into_bytes();
    let (a, b) = (strip(a), strip(b));
    (a.len() > 4 && b.len() > 4 && (a.starts_with(&b) || b.starts_with(&a)))
        || (a.len().abs_diff(b.len()) <= 1 && strsim::generic_levenshtein(&a, &b) <= 1)
}
