//! A YAML file as the events saphyr-parser reads from it (YAML 1.2: block and flow
//! collections, every scalar style, anchors and aliases, comments, CRLF), each scalar with
//! the byte range its value stands in, so a value can be replaced without touching anything
//! else.
//!
//! saphyr-parser counts positions in characters; they are turned into byte offsets here.

use std::ops::Range;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span};

/// More events than this is no kubeconfig (kubeadm's files have about a hundred): the
/// parse stops, so a hostile file of 8 MiB costs little memory.
const MAX_EVENTS: usize = 200_000;

/// A scalar value and where it stands in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scalar {
    /// The value.
    pub text: String,
    /// Byte range of the value's characters in the file: inside the quotes if quoted, the
    /// lines of a block scalar (`|`, `>`) without its header and final line break.
    pub span: Range<usize>,
    /// 1-based line.
    pub line: usize,
    /// Set when the value is not only here: rewriting it would change other places too.
    pub shared: Option<Sharing>,
}

/// Why a value read through a path of keys does not stand alone where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// It is reached through an alias (`*name`, or a merge key `<<`).
    Alias,
    /// It, or a collection holding it, is anchored (`&name`) and aliased elsewhere.
    Aliased,
}

impl std::fmt::Display for Sharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sharing::Alias => "is a YAML alias (its value stands elsewhere in the file)",
            Sharing::Aliased => {
                "is anchored and used again through a YAML alias (a rewrite would change the other uses too)"
            }
        })
    }
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

impl std::error::Error for ParseError {}

pub(super) fn err(line: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line: Some(line),
        message: message.into(),
    }
}

/// One event of the document, in file order. `anchor` is 0 when there is none; aliases name
/// the anchor by the same number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// The start of a mapping; its keys and values follow, then `MapEnd`.
    MapStart { anchor: usize, line: usize },
    /// The end of a mapping.
    MapEnd,
    /// The start of a sequence; its items follow, then `SeqEnd`.
    SeqStart { anchor: usize, line: usize },
    /// The end of a sequence.
    SeqEnd,
    /// A scalar; `null` for an empty or `~`/`null` plain scalar.
    Scalar {
        scalar: Scalar,
        anchor: usize,
        null: bool,
    },
    /// An alias of an earlier anchor.
    Alias { anchor: usize, line: usize },
}

/// The one YAML document of a file, as its events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Document {
    /// Every event of the document, in file order (empty for an empty file).
    pub pieces: Vec<Piece>,
}

impl Document {
    /// Reads a file's text; more than one document is an error.
    pub fn parse(data: &[u8]) -> Result<Document, ParseError> {
        let text = std::str::from_utf8(data).map_err(|e| ParseError {
            line: None,
            message: format!("not UTF-8 text: {e}"),
        })?;
        let bytes = ByteOffsets::new(text);
        let mut pieces = Vec::new();
        let mut documents = 0;
        for event in Parser::new_from_str(text) {
            let (event, span) = event.map_err(scan_error)?;
            let line = span.start.line();
            let piece = match event {
                Event::DocumentStart(_) => {
                    documents += 1;
                    if documents > 1 {
                        return Err(err(
                            line,
                            "several YAML documents in one file (kubectl reads only the first)",
                        ));
                    }
                    continue;
                }
                Event::MappingStart(anchor, _) => Piece::MapStart { anchor, line },
                Event::MappingEnd => Piece::MapEnd,
                Event::SequenceStart(anchor, _) => Piece::SeqStart { anchor, line },
                Event::SequenceEnd => Piece::SeqEnd,
                Event::Alias(anchor) => Piece::Alias { anchor, line },
                Event::Scalar(value, style, anchor, tag) => {
                    let propertied = anchor != 0 || tag.is_some();
                    let span = value_span(text, &bytes, span, style, propertied);
                    let null = style == ScalarStyle::Plain
                        && matches!(&*value, "" | "~" | "null" | "Null" | "NULL");
                    Piece::Scalar {
                        scalar: Scalar {
                            text: value.into_owned(),
                            span,
                            line,
                            shared: None,
                        },
                        anchor,
                        null,
                    }
                }
                Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {
                    continue;
                }
            };
            if pieces.len() == MAX_EVENTS {
                return Err(err(line, format!("more than {MAX_EVENTS} YAML nodes")));
            }
            pieces.push(piece);
        }
        Ok(Document { pieces })
    }
}

fn scan_error(e: ScanError) -> ParseError {
    err(e.marker().line(), e.info().to_string())
}

/// Byte offsets of character indices: exact for ASCII text, else from a checkpoint every
/// 64 characters (an 8 MiB file needs 1 MiB of them, not 64).
struct ByteOffsets {
    checkpoints: Option<Vec<usize>>,
}

const STRIDE: usize = 64;

impl ByteOffsets {
    fn new(text: &str) -> ByteOffsets {
        let checkpoints = (!text.is_ascii()).then(|| {
            text.char_indices()
                .step_by(STRIDE)
                .map(|(b, _)| b)
                .collect()
        });
        ByteOffsets { checkpoints }
    }

    /// The byte offset of character `index` of `text` (its length past the end).
    fn of(&self, text: &str, index: usize) -> usize {
        let Some(c) = &self.checkpoints else {
            return index.min(text.len());
        };
        let Some(&from) = c.get(index / STRIDE) else {
            return text.len();
        };
        text[from..]
            .char_indices()
            .nth(index % STRIDE)
            .map_or(text.len(), |(b, _)| from + b)
    }
}

/// Where a scalar's value stands: the event's span is turned into bytes and narrowed to the
/// value (past an anchor or tag, inside the quotes, without trailing blank lines).
fn value_span(
    text: &str,
    bytes: &ByteOffsets,
    span: Span,
    style: ScalarStyle,
    propertied: bool,
) -> Range<usize> {
    let start = bytes.of(text, span.start.index());
    let end = bytes.of(text, span.end.index()).max(start);
    let start = match style {
        ScalarStyle::Literal | ScalarStyle::Folded => start,
        _ if propertied => skip_properties(text, start, end),
        _ => start,
    };
    let raw = &text[start..end];
    match style {
        ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => {
            let quote = if style == ScalarStyle::SingleQuoted {
                b'\''
            } else {
                b'"'
            };
            match closing_quote(raw.as_bytes(), quote) {
                Some(close) if raw.as_bytes()[0] == quote => start + 1..start + close,
                _ => start..start,
            }
        }
        _ => start..start + raw.trim_end().len(),
    }
}

/// Past the anchors, tags and comments in front of a value.
fn skip_properties(text: &str, mut at: usize, end: usize) -> usize {
    let b = text.as_bytes();
    while at < end {
        match b[at] {
            b' ' | b'\t' | b'\r' | b'\n' => at += 1,
            b'#' => {
                while at < end && b[at] != b'\n' {
                    at += 1;
                }
            }
            b'&' | b'!' => {
                while at < end && !b" \t\r\n".contains(&b[at]) {
                    at += 1;
                }
            }
            _ => break,
        }
    }
    at
}

/// The index of the quote closing a quoted scalar that starts at `raw[0]`.
fn closing_quote(raw: &[u8], quote: u8) -> Option<usize> {
    let mut i = 1;
    while i < raw.len() {
        match raw[i] {
            b'\\' if quote == b'"' => i += 2,
            b'\'' if quote == b'\'' && raw.get(i + 1) == Some(&b'\'') => i += 2,
            q if q == quote => return Some(i),
            _ => i += 1,
        }
    }
    None
}
