//! Looking values up in a YAML document by key, through aliases and merge keys (`<<`),
//! knowing when a value found is shared with other places of the file.

use std::collections::{HashMap, HashSet};

use super::yaml::{Document, ParseError, Piece, Scalar, Sharing, err};

/// How deep merge keys are followed (`<<: *a` where `a` merges `b`, ...).
const MAX_MERGES: usize = 8;

/// A node of the document (the index of its first piece), and whether the way to it went
/// through an alias.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At {
    piece: usize,
    alias: bool,
}

/// The nodes of a document and how they hold each other.
pub(crate) struct Tree<'d> {
    doc: &'d Document,
    /// Per piece starting a collection: its items, or its keys and values alternating.
    children: Vec<Vec<At>>,
    /// Per piece: the collection holding it (`usize::MAX` for the root).
    parent: Vec<usize>,
    /// Anchors that some alias uses.
    aliased: HashSet<usize>,
    root: Option<At>,
}

impl<'d> Tree<'d> {
    /// Links the pieces; a duplicate key is an error.
    pub(crate) fn new(doc: &'d Document) -> Result<Tree<'d>, ParseError> {
        let n = doc.pieces.len();
        let mut tree = Tree {
            doc,
            children: vec![Vec::new(); n],
            parent: vec![usize::MAX; n],
            aliased: HashSet::new(),
            root: None,
        };
        let mut anchors: HashMap<usize, usize> = HashMap::new();
        let mut open: Vec<usize> = Vec::new();
        for (i, piece) in doc.pieces.iter().enumerate() {
            let (node, anchor) = match piece {
                Piece::MapEnd | Piece::SeqEnd => {
                    if let Some(done) = open.pop() {
                        tree.check_keys(done)?;
                    }
                    continue;
                }
                Piece::Alias { anchor, line } => {
                    let target = *anchors
                        .get(anchor)
                        .ok_or_else(|| err(*line, "an alias of an unknown anchor"))?;
                    tree.aliased.insert(*anchor);
                    (
                        At {
                            piece: target,
                            alias: true,
                        },
                        0,
                    )
                }
                Piece::MapStart { anchor, .. }
                | Piece::SeqStart { anchor, .. }
                | Piece::Scalar { anchor, .. } => (
                    At {
                        piece: i,
                        alias: false,
                    },
                    *anchor,
                ),
            };
            if anchor != 0 {
                anchors.insert(anchor, i);
            }
            match open.last() {
                Some(&p) => {
                    tree.children[p].push(node);
                    if !node.alias {
                        tree.parent[i] = p;
                    }
                }
                None => tree.root = Some(node),
            }
            if matches!(piece, Piece::MapStart { .. } | Piece::SeqStart { .. }) {
                open.push(i);
            }
        }
        Ok(tree)
    }

    fn check_keys(&self, map: usize) -> Result<(), ParseError> {
        if !matches!(self.doc.pieces[map], Piece::MapStart { .. }) {
            return Ok(());
        }
        let mut seen = HashSet::new();
        for key in self.children[map].iter().step_by(2) {
            if let Some(s) = self.plain(*key)
                && !seen.insert(s.text.as_str())
            {
                return Err(err(s.line, format!("duplicate key {:?}", s.text)));
            }
        }
        Ok(())
    }

    /// The top node, if the document has one.
    pub(crate) fn root(&self) -> Option<At> {
        self.root
    }

    /// Whether `at` is a mapping.
    pub(crate) fn is_map(&self, at: At) -> bool {
        matches!(self.doc.pieces[at.piece], Piece::MapStart { .. })
    }

    /// Whether `at` is a null scalar.
    pub(crate) fn is_null(&self, at: At) -> bool {
        matches!(self.doc.pieces[at.piece], Piece::Scalar { null: true, .. })
    }

    /// The value of `key` in the mapping `at` (or in the mappings it merges with `<<`).
    pub(crate) fn get(&self, at: At, key: &str) -> Option<At> {
        self.get_merged(at, key, 0)
    }

    fn get_merged(&self, at: At, key: &str, depth: usize) -> Option<At> {
        if !self.is_map(at) || depth > MAX_MERGES {
            return None;
        }
        let entries = &self.children[at.piece];
        let value = |k: &str| {
            entries
                .chunks_exact(2)
                .find(|kv| self.plain(kv[0]).is_some_and(|s| s.text == k))
                .map(|kv| kv[1])
        };
        let through = |v: At| At {
            piece: v.piece,
            alias: v.alias || at.alias,
        };
        if let Some(v) = value(key) {
            return Some(through(v));
        }
        let merged = through(value("<<")?);
        let sources = if self.is_map(merged) {
            vec![merged]
        } else {
            self.items(merged)
        };
        sources.into_iter().find_map(|m| {
            let m = At {
                piece: m.piece,
                alias: true,
            };
            self.get_merged(m, key, depth + 1)
        })
    }

    /// The items of the sequence `at` (none if it is not a sequence).
    pub(crate) fn items(&self, at: At) -> Vec<At> {
        if !matches!(self.doc.pieces[at.piece], Piece::SeqStart { .. }) {
            return Vec::new();
        }
        self.children[at.piece]
            .iter()
            .map(|c| At {
                piece: c.piece,
                alias: c.alias || at.alias,
            })
            .collect()
    }

    /// The scalar at `at`, unless it is null or a collection, with how it is shared.
    pub(crate) fn scalar(&self, at: At) -> Option<Scalar> {
        let mut s = self.plain(at)?.clone();
        s.shared = if at.alias {
            Some(Sharing::Alias)
        } else if self.anchored_and_aliased(at.piece) {
            Some(Sharing::Aliased)
        } else {
            None
        };
        Some(s)
    }

    fn plain(&self, at: At) -> Option<&Scalar> {
        match &self.doc.pieces[at.piece] {
            Piece::Scalar {
                scalar,
                null: false,
                ..
            } => Some(scalar),
            _ => None,
        }
    }

    /// Whether the node or a collection holding it is an anchor some alias uses.
    fn anchored_and_aliased(&self, mut piece: usize) -> bool {
        while piece != usize::MAX {
            let anchor = match &self.doc.pieces[piece] {
                Piece::MapStart { anchor, .. }
                | Piece::SeqStart { anchor, .. }
                | Piece::Scalar { anchor, .. } => *anchor,
                _ => 0,
            };
            if anchor != 0 && self.aliased.contains(&anchor) {
                return true;
            }
            piece = self.parent[piece];
        }
        false
    }
}
