//! Replacing values of a kubeconfig where they stand, and checking the rewritten file:
//! the same YAML document, every value but the replaced ones read as before.

use std::ops::Range;
use std::path::Path;

use base64::Engine;

use crate::format::kubeconfig::{Document, Piece, Scalar};

/// Encodes PEM bytes as a `*-data` value, as kubeadm writes it (one line, standard base64).
pub(in crate::renew) fn encode_data(pem: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(pem)
}

/// The byte range a new base64 value may replace: `field` of `owner` (`user "admin"`,
/// `cluster "kubernetes"`) must stand alone, and where it stands must read as its value
/// (whitespace aside).
pub(in crate::renew) fn replaceable(
    file: &[u8],
    value: &Scalar,
    field: &str,
    owner: &str,
    path: &Path,
) -> anyhow::Result<Range<usize>> {
    if let Some(shared) = value.shared {
        anyhow::bail!(
            "{field} of {owner} {shared} in {}; certrenewd rewrites a value only where it stands alone: renew it by hand",
            path.display()
        );
    }
    let raw = file
        .get(value.span.clone())
        .and_then(|r| std::str::from_utf8(r).ok())
        .unwrap_or_default();
    if raw.is_empty() || compact(raw) != compact(&value.text) {
        anyhow::bail!(
            "{field} of {owner} in {} (line {}): its value is not written where certrenewd can replace it exactly; renew it by hand",
            path.display(),
            value.line
        );
    }
    Ok(value.span.clone())
}

fn compact(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// `data` with each range replaced by its text; ranges must not overlap.
pub(in crate::renew) fn splice(data: &[u8], edits: &[(Range<usize>, String)]) -> Vec<u8> {
    let mut sorted: Vec<&(Range<usize>, String)> = edits.iter().collect();
    sorted.sort_by_key(|(r, _)| r.start);
    let mut out = Vec::with_capacity(data.len() + 4096);
    let mut at = 0;
    for (r, text) in sorted {
        out.extend_from_slice(&data[at..r.start]);
        out.extend_from_slice(text.as_bytes());
        at = r.end;
    }
    out.extend_from_slice(&data[at..]);
    out
}

/// `new`, the document `old` became by `edits`, has the same events: the same collections,
/// anchors and aliases, the same values but for the replaced ones, which read as their new
/// text.
pub(in crate::renew) fn same_but_edits(
    old: &Document,
    new: &Document,
    edits: &[(Range<usize>, String)],
) -> anyhow::Result<()> {
    if old.pieces.len() != new.pieces.len() {
        anyhow::bail!("the YAML structure changed");
    }
    for (o, n) in old.pieces.iter().zip(&new.pieces) {
        let same = match (o, n) {
            (
                Piece::Scalar {
                    scalar: os,
                    anchor: oa,
                    null: on,
                },
                Piece::Scalar {
                    scalar: ns,
                    anchor: na,
                    null: nn,
                },
            ) => {
                let want = match edits.iter().find(|(r, _)| *r == os.span) {
                    Some((_, text)) => compact(&ns.text) == *text,
                    None => os.text == ns.text,
                };
                if !want {
                    anyhow::bail!("the value at line {} is not as expected", ns.line);
                }
                oa == na && on == nn
            }
            (Piece::MapStart { anchor: a, .. }, Piece::MapStart { anchor: b, .. })
            | (Piece::SeqStart { anchor: a, .. }, Piece::SeqStart { anchor: b, .. })
            | (Piece::Alias { anchor: a, .. }, Piece::Alias { anchor: b, .. }) => a == b,
            (Piece::MapEnd, Piece::MapEnd) | (Piece::SeqEnd, Piece::SeqEnd) => true,
            _ => false,
        };
        if !same {
            anyhow::bail!("the YAML structure changed");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::kubeconfig::Kubeconfig;

    const KUBEADM: &str = "apiVersion: v1\nkind: Config\nusers:\n- name: kubernetes-admin\n  user:\n    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\n";

    #[test]
    fn splicing_replaces_only_the_values() {
        let k = Kubeconfig::parse(KUBEADM.as_bytes()).unwrap();
        let u = &k.users[0];
        let out = splice(
            KUBEADM.as_bytes(),
            &[
                (u.key_data.clone().unwrap().span, "TkVXS0VZ".into()),
                (u.cert_data.clone().unwrap().span, "TkVX".into()),
            ],
        );
        let out = String::from_utf8(out).unwrap();
        assert_eq!(
            out,
            KUBEADM
                .replace("Q0VSVA==", "TkVX")
                .replace("S0VZ", "TkVXS0VZ")
        );
        let again = Kubeconfig::parse(out.as_bytes()).unwrap();
        assert_eq!(again.users[0].cert_data.as_ref().unwrap().text, "TkVX");
    }

    /// Every style a value may be written in, after comments in other scripts and with CRLF
    /// line ends: each replaced value is read back as the new one, and every byte outside it
    /// is the same.
    #[test]
    fn a_splice_changes_no_byte_outside_the_value() {
        let text = "# Zertifikate für die Steuerebene — ✓\r\nkind: Config\r\ndescription: >\r\n  folded\r\n  text # not a comment\r\nusers:\r\n# 管理者 «plain»\r\n- name: plain\r\n  user:\r\n    client-certificate-data: Q0VS\r\n      VA==   # é\r\n- {name: flow, user: {client-certificate-data: \"Q0VSVA==\", client-key-data: S0VZ}}\r\n- name: literal\r\n  user:\r\n    client-certificate-data: |\r\n      Q0VS\r\n      VA==\r\n\r\n    client-key-data: &k 'S0VZ'\r\n- name: tagged\r\n  user:\r\n    client-certificate-data: !!str Q0VSVA==\r\nclusters: [] # ½\r\n";
        let doc = Document::parse(text.as_bytes()).unwrap();
        let k = Kubeconfig::from_document(&doc).unwrap();
        let path = Path::new("/etc/kubernetes/admin.conf");
        let mut edits = Vec::new();
        for u in &k.users {
            let data = u.cert_data.as_ref().unwrap();
            let span = replaceable(
                text.as_bytes(),
                data,
                "client-certificate-data",
                &format!("user {:?}", u.name),
                path,
            )
            .unwrap();
            let new = encode_data(format!("NEW {}", u.name).as_bytes());
            let out = splice(text.as_bytes(), &[(span.clone(), new.clone())]);
            assert_eq!(
                out[..span.start],
                text.as_bytes()[..span.start],
                "{}",
                u.name
            );
            assert_eq!(
                out[span.start + new.len()..],
                text.as_bytes()[span.end..],
                "{}",
                u.name
            );
            edits.push((span, new));
        }
        let key = k.users[2].key_data.as_ref().unwrap();
        let span = replaceable(
            text.as_bytes(),
            key,
            "client-key-data",
            "user \"literal\"",
            path,
        )
        .unwrap();
        assert_eq!(&text[span.clone()], "S0VZ");
        edits.push((span, encode_data(b"NEW KEY")));
        let out = splice(text.as_bytes(), &edits);
        let new_doc = Document::parse(&out).unwrap();
        same_but_edits(&doc, &new_doc, &edits).unwrap();
        let again = Kubeconfig::from_document(&new_doc).unwrap();
        for u in &again.users {
            let pem = crate::format::kubeconfig::decode_data(&u.cert_data.as_ref().unwrap().text);
            assert_eq!(pem.unwrap(), format!("NEW {}", u.name).as_bytes());
        }
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("\"TkVXIGZsb3c=\""),
            "a quoted value stays quoted: {out}"
        );
        assert!(out.contains("client-key-data: &k 'TkVXIEtFWQ=='"), "{out}");
        assert!(out.contains("!!str TkVXIHRhZ2dlZA==\r\n"), "{out}");
        // The rest of the document, comments included, is as it was.
        let unchanged = |s: &str| {
            s.lines()
                .filter(|l| {
                    !["Q0VS", "VA==", "S0VZ", "TkVX"]
                        .iter()
                        .any(|v| l.contains(v))
                })
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(unchanged(&out), unchanged(text));
    }

    #[test]
    fn shared_or_inexact_values_are_not_replaced_and_say_why() {
        let text = "users:\n- name: a\n  user: &u\n    client-certificate-data: Q0VSVA==\n- name: b\n  user: *u\n";
        let k = Kubeconfig::parse(text.as_bytes()).unwrap();
        let path = Path::new("/etc/kubernetes/admin.conf");
        for (u, says) in k
            .users
            .iter()
            .zip(["anchored and used again", "is a YAML alias"])
        {
            let data = u.cert_data.as_ref().unwrap();
            let e = replaceable(
                text.as_bytes(),
                data,
                "client-certificate-data",
                &format!("user {:?}", u.name),
                path,
            )
            .unwrap_err();
            let e = e.to_string();
            assert!(
                e.contains(says)
                    && e.contains("/etc/kubernetes/admin.conf")
                    && e.contains("by hand"),
                "{e}"
            );
        }
        // An escape in a quoted value: its characters are not the value's.
        let text = "users:\n- name: a\n  user:\n    client-certificate-data: \"Q0VS\\x56A==\"\n";
        let k = Kubeconfig::parse(text.as_bytes()).unwrap();
        let data = k.users[0].cert_data.as_ref().unwrap();
        assert_eq!(data.text, "Q0VSVA==");
        let e = replaceable(
            text.as_bytes(),
            data,
            "client-certificate-data",
            "user \"a\"",
            path,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 4") && e.contains("by hand"), "{e}");
    }

    #[test]
    fn the_read_back_check_sees_any_other_change() {
        let doc = Document::parse(KUBEADM.as_bytes()).unwrap();
        let k = Kubeconfig::from_document(&doc).unwrap();
        let span = k.users[0].cert_data.clone().unwrap().span;
        let edits = [(span, "TkVX".to_string())];
        let good = splice(KUBEADM.as_bytes(), &edits);
        same_but_edits(&doc, &Document::parse(&good).unwrap(), &edits).unwrap();
        for bad in [
            String::from_utf8(good.clone())
                .unwrap()
                .replace("S0VZ", "S0VA"),
            String::from_utf8(good.clone())
                .unwrap()
                .replace("TkVX", "TkVY"),
            String::from_utf8(good.clone())
                .unwrap()
                .replace("v1", "[v1]"),
            String::from_utf8(good.clone()).unwrap() + "extra: 1\n",
        ] {
            let new = Document::parse(bad.as_bytes()).unwrap();
            assert!(same_but_edits(&doc, &new, &edits).is_err(), "{bad}");
        }
    }
}
