//! The block YAML subset kubeconfig files are written in, read line by line with the byte
//! range of every scalar kept (so a value can be replaced without touching anything else).

use std::ops::Range;

/// A scalar value and where its characters are in the file (inside the quotes, if quoted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scalar {
    /// The value.
    pub text: String,
    /// Byte range of the value's characters in the file.
    pub span: Range<usize>,
    /// 1-based line.
    pub line: usize,
}

/// Why a file could not be read as a kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "line {l}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// A parsed YAML node.
#[derive(Debug)]
pub(super) enum Node {
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
    Scalar(Scalar),
    /// Flow collections, block scalars: present, not looked into.
    Opaque,
    Null,
}

impl Node {
    pub(super) fn scalar(&self) -> Option<&Scalar> {
        match self {
            Node::Scalar(s) => Some(s),
            _ => None,
        }
    }

    pub(super) fn map(&self) -> &[(String, Node)] {
        match self {
            Node::Map(m) => m,
            _ => &[],
        }
    }
}

pub(super) fn get<'a>(map: &'a [(String, Node)], key: &str) -> Option<&'a Node> {
    map.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

pub(super) fn scalar(map: &[(String, Node)], key: &str) -> Option<Scalar> {
    get(map, key).and_then(Node::scalar).cloned()
}

pub(super) fn items<'a>(
    root: &'a [(String, Node)],
    key: &str,
) -> impl Iterator<Item = &'a [(String, Node)]> {
    let seq: &[Node] = match get(root, key) {
        Some(Node::Seq(s)) => s,
        _ => &[],
    };
    seq.iter().map(Node::map)
}

pub(super) fn name_of(entry: &[(String, Node)]) -> String {
    scalar(entry, "name").map(|s| s.text).unwrap_or_default()
}

pub(super) fn err(line: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line: Some(line),
        message: message.into(),
    }
}

/// One line with content: its indentation, where the content starts in the file, and the
/// content without a trailing comment or whitespace.
#[derive(Debug, Clone)]
pub(super) struct Line<'t> {
    pub(super) no: usize,
    indent: usize,
    start: usize,
    text: &'t str,
}

pub(super) fn lines(text: &str) -> Result<Vec<Line<'_>>, ParseError> {
    let mut out = Vec::new();
    let mut offset = 0;
    let mut documents = 0;
    for (n, raw) in text.split_inclusive('\n').enumerate() {
        let line_start = offset;
        offset += raw.len();
        let no = n + 1;
        let body = raw.trim_end_matches(['\n', '\r']);
        let indent = body.len() - body.trim_start_matches(' ').len();
        let rest = &body[indent..];
        if rest.starts_with('\t') {
            return Err(err(no, "a tab in the indentation"));
        }
        let content = strip_comment(rest).trim_end();
        if content.is_empty() {
            continue;
        }
        if indent == 0 && (content == "---" || content.starts_with("--- ")) {
            documents += 1;
            if documents > 1 || !out.is_empty() {
                return Err(err(no, "several YAML documents in one file"));
            }
            continue;
        }
        if indent == 0 && content == "..." {
            break;
        }
        if content.starts_with('%') && indent == 0 {
            continue; // %YAML directive
        }
        out.push(Line {
            no,
            indent,
            start: line_start + indent,
            text: content,
        });
    }
    Ok(out)
}

/// The text before a comment: `#` at the start or after whitespace, outside quotes.
fn strip_comment(s: &str) -> &str {
    let bytes = s.as_bytes();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(b'"') if b == b'\\' => i += 1,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'#' && (i == 0 || bytes[i - 1] == b' ') => return &s[..i],
            None if (b == b'"' || b == b'\'') && (i == 0 || b" :-[{,".contains(&bytes[i - 1])) => {
                quote = Some(b)
            }
            None => {}
        }
        i += 1;
    }
    s
}

fn is_seq_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

pub(super) fn parse_node(
    lines: &mut [Line<'_>],
    i: &mut usize,
    min_indent: usize,
) -> Result<Node, ParseError> {
    let Some(l) = lines.get(*i) else {
        return Ok(Node::Null);
    };
    if l.indent < min_indent {
        return Ok(Node::Null);
    }
    let indent = l.indent;
    if is_seq_item(l.text) {
        parse_seq(lines, i, indent)
    } else if split_key(l.text).is_some() {
        parse_map(lines, i, indent)
    } else {
        // A lone scalar (a sequence item's value on its own line).
        let s = value(l, l.text, 0)?;
        *i += 1;
        Ok(s)
    }
}

fn parse_seq(lines: &mut [Line<'_>], i: &mut usize, indent: usize) -> Result<Node, ParseError> {
    let mut out = Vec::new();
    while let Some(l) = lines.get(*i) {
        if l.indent != indent || !is_seq_item(l.text) {
            break;
        }
        let after_dash = &l.text[1..];
        let rest = after_dash.trim_start_matches(' ');
        if rest.is_empty() {
            *i += 1;
            out.push(parse_node(lines, i, indent + 1)?);
            continue;
        }
        let shift = 1 + after_dash.len() - rest.len();
        if split_key(rest).is_some() || is_seq_item(rest) {
            // `- key: value`: the rest is the first line of a nested block, one column in.
            let l = &mut lines[*i];
            l.indent += shift;
            l.start += shift;
            l.text = rest;
            let inner = l.indent;
            out.push(parse_node(lines, i, inner)?);
        } else {
            let node = value(l, rest, shift)?;
            *i += 1;
            if lines.get(*i).is_some_and(|n| n.indent > indent) {
                return Err(err(
                    lines[*i].no,
                    "unexpected indentation (a multi-line value?)",
                ));
            }
            out.push(node);
        }
    }
    Ok(Node::Seq(out))
}

fn parse_map(lines: &mut [Line<'_>], i: &mut usize, indent: usize) -> Result<Node, ParseError> {
    let mut out: Vec<(String, Node)> = Vec::new();
    while let Some(l) = lines.get(*i) {
        if l.indent != indent || is_seq_item(l.text) {
            break;
        }
        let l = l.clone();
        let (key, value_at) =
            split_key(l.text).ok_or_else(|| err(l.no, "expected `key: value`"))?;
        if key == "<<" {
            return Err(err(l.no, "YAML merge keys are not supported"));
        }
        if out.iter().any(|(k, _)| *k == key) {
            return Err(err(l.no, format!("duplicate key {key:?}")));
        }
        *i += 1;
        let rest = l.text[value_at..].trim_start_matches(' ');
        let node = if rest.is_empty() {
            match lines.get(*i) {
                Some(n) if n.indent > indent => parse_node(lines, i, indent + 1)?,
                // A sequence may sit at its key's own indentation.
                Some(n) if n.indent == indent && is_seq_item(n.text) => {
                    parse_seq(lines, i, indent)?
                }
                _ => Node::Null,
            }
        } else if rest.starts_with('|') || rest.starts_with('>') {
            while lines.get(*i).is_some_and(|n| n.indent > indent) {
                *i += 1;
            }
            Node::Opaque
        } else {
            let at = l.text.len() - rest.len();
            let node = value(&l, rest, at)?;
            if lines.get(*i).is_some_and(|n| n.indent > indent) {
                return Err(err(
                    lines[*i].no,
                    "unexpected indentation (a multi-line value?)",
                ));
            }
            node
        };
        out.push((key, node));
    }
    Ok(Node::Map(out))
}

/// `key: rest` -> (key, index of rest); the key may be quoted.
fn split_key(text: &str) -> Option<(String, usize)> {
    let bytes = text.as_bytes();
    if let Some(q @ (b'"' | b'\'')) = bytes.first().copied() {
        let close = text[1..].find(q as char)? + 1;
        let after = &text[close + 1..];
        let colon = after.strip_prefix(':')?;
        if !(colon.is_empty() || colon.starts_with(' ')) {
            return None;
        }
        return Some((text[1..close].to_string(), close + 2));
    }
    if matches!(
        bytes.first(),
        Some(b'[' | b'{' | b'&' | b'*' | b'!' | b'|' | b'>')
    ) {
        return None;
    }
    let mut from = 0;
    while let Some(p) = text[from..].find(':') {
        let at = from + p;
        if at + 1 == text.len() || bytes[at + 1] == b' ' {
            let key = text[..at].trim_end();
            return (!key.is_empty()).then(|| (key.to_string(), at + 1));
        }
        from = at + 1;
    }
    None
}

/// The value `rest`, which starts at byte `at` of the line's content.
fn value(l: &Line<'_>, rest: &str, at: usize) -> Result<Node, ParseError> {
    let start = l.start + at;
    let first = rest.as_bytes()[0];
    match first {
        b'"' | b'\'' => {
            let inner = &rest[1..];
            let end = closing_quote(inner, first)
                .ok_or_else(|| err(l.no, "unterminated quoted value"))?;
            if !inner[end + 1..].trim().is_empty() {
                return Err(err(l.no, "unexpected text after a quoted value"));
            }
            let raw = &inner[..end];
            let text = if first == b'\'' {
                raw.replace("''", "'")
            } else if raw.contains('\\') {
                unescape(raw).ok_or_else(|| err(l.no, "unsupported escape in a quoted value"))?
            } else {
                raw.to_string()
            };
            Ok(Node::Scalar(Scalar {
                text,
                span: start + 1..start + 1 + end,
                line: l.no,
            }))
        }
        b'{' | b'[' => {
            let close = if first == b'{' { '}' } else { ']' };
            if !rest.ends_with(close) {
                return Err(err(l.no, "multi-line flow collections are not supported"));
            }
            Ok(Node::Opaque)
        }
        b'&' | b'*' => Err(err(l.no, "YAML anchors and aliases are not supported")),
        b'!' => Err(err(l.no, "YAML tags are not supported")),
        _ => Ok(match rest {
            "~" | "null" | "Null" | "NULL" => Node::Null,
            _ => Node::Scalar(Scalar {
                text: rest.to_string(),
                span: start..start + rest.len(),
                line: l.no,
            }),
        }),
    }
}

fn closing_quote(s: &str, q: u8) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if q == b'"' && b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == q {
            if q == b'\'' && b.get(i + 1) == Some(&b'\'') {
                i += 2;
                continue;
            }
            return Some(i);
        }
        i += 1;
    }
    None
}

fn unescape(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            '\\' => '\\',
            '"' => '"',
            '/' => '/',
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            _ => return None,
        });
    }
    Some(out)
}
