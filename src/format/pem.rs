//! PEM blocks: found anywhere in a file (comments and bundles allowed), decoded strictly;
//! written by the `pem` crate. Read by hand: `pem::parse_many` stops at the first bad block
//! (a bad block must not hide the certificates after it), and `pem::parse` of each block
//! costs 10 µs (three passes over the text, a char-by-char copy), 0.2 s of CPU on a
//! 10,010-certificate tree, more than all of `check` above its verification floor
//! (benches/check-limit.sh).

use base64::Engine;
use memchr::memmem;

/// One decoded PEM block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The label between `BEGIN ` and the dashes, e.g. `CERTIFICATE`.
    pub label: String,
    /// RFC 1421 headers (`Proc-Type: 4,ENCRYPTED`), if any.
    pub headers: Vec<(String, String)>,
    /// The decoded contents.
    pub der: Vec<u8>,
}

/// Why a block could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockError {
    /// The label of the block.
    pub label: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Whether `data` looks like PEM at all (a BEGIN line somewhere).
pub fn is_pem(data: &[u8]) -> bool {
    memmem::find(data, b"-----BEGIN ").is_some()
}

/// Every PEM block in `data`, in order; undecodable blocks are returned as errors in place.
pub fn blocks(data: &[u8]) -> Vec<Result<Block, BlockError>> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(start) = memmem::find(rest, b"-----BEGIN ") {
        let after = &rest[start + 11..];
        let Some(label_end) = memmem::find(after, b"-----") else {
            out.push(Err(BlockError {
                label: String::new(),
                reason: "malformed PEM BEGIN line".into(),
            }));
            break;
        };
        let label = String::from_utf8_lossy(&after[..label_end]).into_owned();
        if label.len() > 64 || label.contains('\n') {
            out.push(Err(BlockError {
                label: String::new(),
                reason: "malformed PEM BEGIN line".into(),
            }));
            rest = &after[label_end..];
            continue;
        }
        let body_start = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let Some(end) = memmem::find(body_start, end_marker.as_bytes()) else {
            out.push(Err(BlockError {
                label,
                reason: "truncated PEM block (no END line)".into(),
            }));
            break;
        };
        out.push(decode_body(label, &body_start[..end]));
        rest = &body_start[end + end_marker.len()..];
    }
    out
}

/// The headers (`Key: value` lines before the base64) and the base64 of a block's body,
/// each line trimmed.
fn decode_body(label: String, body: &[u8]) -> Result<Block, BlockError> {
    let mut headers = Vec::new();
    let mut b64 = Vec::with_capacity(body.len());
    if body.is_ascii() {
        // Lines end at \n; trimming takes a \r with the other white space.
        for line in body.split(|&b| b == b'\n') {
            let line = trim(line);
            if b64.is_empty()
                && let Some(colon) = memchr::memchr(b':', line)
            {
                let text = |part| String::from_utf8_lossy(trim(part)).into_owned();
                headers.push((text(&line[..colon]), text(&line[colon + 1..])));
                continue;
            }
            b64.extend_from_slice(line);
        }
    } else {
        // Not ASCII, so not valid base64; read as text all the same, for the headers.
        for line in String::from_utf8_lossy(body).lines() {
            let line = line.trim();
            if let Some((k, v)) = line.split_once(':')
                && b64.is_empty()
            {
                headers.push((k.trim().to_string(), v.trim().to_string()));
                continue;
            }
            b64.extend_from_slice(line.as_bytes());
        }
    }
    match base64::engine::general_purpose::STANDARD.decode(&b64) {
        Ok(der) if !der.is_empty() => Ok(Block {
            label,
            headers,
            der,
        }),
        Ok(_) => Err(BlockError {
            label,
            reason: "empty PEM block".into(),
        }),
        Err(e) => Err(BlockError {
            label,
            reason: format!("invalid base64 in PEM block: {e}"),
        }),
    }
}

/// `line` without the white space `str::trim` removes, for ASCII.
fn trim(line: &[u8]) -> &[u8] {
    let space = |b: &u8| b.is_ascii_whitespace() || *b == 0x0b;
    let start = line.iter().position(|b| !space(b)).unwrap_or(line.len());
    let end = line
        .iter()
        .rposition(|b| !space(b))
        .map_or(start, |e| e + 1);
    &line[start..end]
}

/// Encodes `der` as a PEM block with 64-column lines, as openssl writes it.
pub fn encode(label: &str, der: &[u8]) -> String {
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    pem::encode_config(&pem::Pem::new(label, der), config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_blocks_among_text_and_round_trips() {
        let pem = encode("CERTIFICATE", &[1, 2, 3, 4, 5]);
        let data = format!(
            "subject=CN=x\n{pem}junk\n{}",
            encode("PRIVATE KEY", &[9; 100])
        );
        let got = blocks(data.as_bytes());
        assert_eq!(got.len(), 2);
        let first = got[0].as_ref().unwrap();
        assert_eq!(first.label, "CERTIFICATE");
        assert_eq!(first.der, vec![1, 2, 3, 4, 5]);
        assert_eq!(got[1].as_ref().unwrap().der, vec![9; 100]);
    }

    #[test]
    fn headers_are_read_and_truncation_is_reported() {
        let data = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nAQID\n-----END RSA PRIVATE KEY-----\n";
        let b = blocks(data.as_bytes()).remove(0).unwrap();
        assert_eq!(b.headers[0], ("Proc-Type".into(), "4,ENCRYPTED".into()));
        assert_eq!(b.der, vec![1, 2, 3]);
        let cut = &data[..40];
        let e = blocks(cut.as_bytes()).remove(0).unwrap_err();
        assert!(e.reason.contains("truncated"));
        let bad = "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        assert!(
            blocks(bad.as_bytes())
                .remove(0)
                .unwrap_err()
                .reason
                .contains("base64")
        );
    }
}
