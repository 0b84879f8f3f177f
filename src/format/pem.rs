//! PEM blocks: found anywhere in a file (comments and bundles allowed), decoded strictly.

use base64::Engine;

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
    find(data, b"-----BEGIN ").is_some()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Every PEM block in `data`, in order; undecodable blocks are returned as errors in place.
pub fn blocks(data: &[u8]) -> Vec<Result<Block, BlockError>> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(start) = find(rest, b"-----BEGIN ") {
        let after = &rest[start + 11..];
        let Some(label_end) = find(after, b"-----") else {
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
        let Some(end) = find(body_start, end_marker.as_bytes()) else {
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

fn decode_body(label: String, body: &[u8]) -> Result<Block, BlockError> {
    let text = String::from_utf8_lossy(body);
    let mut headers = Vec::new();
    let mut b64 = String::with_capacity(body.len());
    for line in text.lines() {
        let line = line.trim();
        if let Some((k, v)) = line.split_once(':')
            && b64.is_empty()
        {
            headers.push((k.trim().to_string(), v.trim().to_string()));
            continue;
        }
        b64.push_str(line);
    }
    match base64::engine::general_purpose::STANDARD.decode(b64.as_bytes()) {
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

/// Encodes `der` as a PEM block with 64-column lines, as openssl writes it.
pub fn encode(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 64);
    out.push_str("-----BEGIN ");
    out.push_str(label);
    out.push_str("-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END ");
    out.push_str(label);
    out.push_str("-----\n");
    out
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
