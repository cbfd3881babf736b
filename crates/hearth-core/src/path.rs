//! Document names, collection paths and field paths, with Firestore's validation and limits.
//!
//! Paths are lists of UTF-8 segments. Document names have an even number of segments
//! (`collection/id(/collection/id)*`), collection paths an odd number. Names order segment
//! by segment by UTF-8 bytes, a prefix first: exactly the derived `Ord` of `Vec<String>`.

use std::fmt;

/// Longest document id or collection id, in UTF-8 bytes.
pub const MAX_SEGMENT_BYTES: usize = 1500;
/// Longest document name, in UTF-8 bytes (segments plus separators).
pub const MAX_NAME_BYTES: usize = 6144;
/// Deepest nesting of collections under documents (`a/b/c/d/...` has depth segments/2).
pub const MAX_PATH_SEGMENTS: usize = 200;
/// Longest field name, in UTF-8 bytes.
pub const MAX_FIELD_NAME_BYTES: usize = 1500;

/// Why a path or field path was refused. Each message names the rule or the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    #[error("path is empty")]
    Empty,
    #[error("path `{path}` has an empty segment")]
    EmptySegment { path: String },
    #[error("path segment `{segment}` is not allowed (`.` and `..` are reserved)")]
    DotSegment { segment: String },
    #[error("id `{id}` is reserved: ids of the form __.*__ are not allowed")]
    ReservedId { id: String },
    #[error("id is {len} bytes, over the limit of {MAX_SEGMENT_BYTES} bytes")]
    SegmentTooLong { len: usize },
    #[error("document name is {len} bytes, over the limit of {MAX_NAME_BYTES} bytes")]
    NameTooLong { len: usize },
    #[error("path has {segments} segments, over the limit of {MAX_PATH_SEGMENTS}")]
    TooDeep { segments: usize },
    #[error("`{path}` is not a document path: a document path has an even number of segments")]
    NotADocument { path: String },
    #[error("`{path}` is not a collection path: a collection path has an odd number of segments")]
    NotACollection { path: String },
    #[error("id `{id}` contains `/`")]
    SlashInId { id: String },
    #[error("field path `{path}` is invalid: {why}")]
    BadFieldPath { path: String, why: &'static str },
    #[error("field name is {len} bytes, over the limit of {MAX_FIELD_NAME_BYTES} bytes")]
    FieldNameTooLong { len: usize },
}

fn check_segment(segment: &str, path: &str) -> Result<(), PathError> {
    if segment.is_empty() {
        return Err(PathError::EmptySegment {
            path: path.to_owned(),
        });
    }
    if segment == "." || segment == ".." {
        return Err(PathError::DotSegment {
            segment: segment.to_owned(),
        });
    }
    if segment.len() > MAX_SEGMENT_BYTES {
        return Err(PathError::SegmentTooLong { len: segment.len() });
    }
    if segment.len() >= 4 && segment.starts_with("__") && segment.ends_with("__") {
        return Err(PathError::ReservedId {
            id: segment.to_owned(),
        });
    }
    Ok(())
}

fn split_checked(path: &str) -> Result<Vec<String>, PathError> {
    let trimmed = path.strip_prefix('/').unwrap_or(path);
    if trimmed.is_empty() {
        return Err(PathError::Empty);
    }
    if trimmed.len() > MAX_NAME_BYTES {
        return Err(PathError::NameTooLong { len: trimmed.len() });
    }
    let segments: Vec<String> = trimmed.split('/').map(str::to_owned).collect();
    if segments.len() > MAX_PATH_SEGMENTS {
        return Err(PathError::TooDeep {
            segments: segments.len(),
        });
    }
    for s in &segments {
        check_segment(s, path)?;
    }
    Ok(segments)
}

/// The name of a document: `collection/id(/collection/id)*`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DocumentName {
    /// An even number (at least 2) of valid segments (private: every constructor validates
    /// them, so a name in hand is always a valid name).
    segments: Vec<String>,
}

/// The path of a collection: `collection(/id/collection)*`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CollectionPath {
    /// An odd number of valid segments (private, as for [`DocumentName`]).
    segments: Vec<String>,
}

impl DocumentName {
    pub fn parse(path: &str) -> Result<DocumentName, PathError> {
        let segments = split_checked(path)?;
        if segments.len() % 2 != 0 {
            return Err(PathError::NotADocument {
                path: path.to_owned(),
            });
        }
        Ok(DocumentName { segments })
    }

    /// Builds a name from segments that were already validated (decoders re-validate).
    pub fn from_segments(segments: Vec<String>) -> Result<DocumentName, PathError> {
        let joined = segments.join("/");
        DocumentName::parse(&joined).and_then(|d| {
            if d.segments == segments {
                Ok(d)
            } else {
                Err(PathError::SlashInId { id: joined })
            }
        })
    }

    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// The document's id: its last segment.
    pub fn id(&self) -> &str {
        self.segments.last().expect("a document name has segments")
    }

    /// The collection the document belongs to.
    pub fn parent(&self) -> CollectionPath {
        CollectionPath {
            segments: self.segments[..self.segments.len() - 1].to_vec(),
        }
    }

    /// The id of the collection the document belongs to (its collection group).
    pub fn collection_id(&self) -> &str {
        &self.segments[self.segments.len() - 2]
    }

    /// A sub-collection of this document.
    pub fn collection(&self, id: &str) -> Result<CollectionPath, PathError> {
        let mut segments = self.segments.clone();
        segments.push(id.to_owned());
        CollectionPath::from_segments(segments)
    }
}

impl CollectionPath {
    pub fn parse(path: &str) -> Result<CollectionPath, PathError> {
        let segments = split_checked(path)?;
        if segments.len() % 2 != 1 {
            return Err(PathError::NotACollection {
                path: path.to_owned(),
            });
        }
        Ok(CollectionPath { segments })
    }

    pub fn from_segments(segments: Vec<String>) -> Result<CollectionPath, PathError> {
        let joined = segments.join("/");
        CollectionPath::parse(&joined).and_then(|c| {
            if c.segments == segments {
                Ok(c)
            } else {
                Err(PathError::SlashInId { id: joined })
            }
        })
    }

    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// The collection id: the last segment, which is also the collection group.
    pub fn id(&self) -> &str {
        self.segments
            .last()
            .expect("a collection path has segments")
    }

    /// The document with `id` in this collection.
    pub fn doc(&self, id: &str) -> Result<DocumentName, PathError> {
        if id.contains('/') {
            return Err(PathError::SlashInId { id: id.to_owned() });
        }
        let mut segments = self.segments.clone();
        segments.push(id.to_owned());
        DocumentName::from_segments(segments)
    }

    /// Whether `doc` is directly in this collection (not in a sub-collection).
    pub fn contains(&self, doc: &DocumentName) -> bool {
        doc.segments.len() == self.segments.len() + 1 && doc.segments.starts_with(&self.segments)
    }
}

impl fmt::Display for DocumentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.segments.join("/"))
    }
}

impl fmt::Display for CollectionPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.segments.join("/"))
    }
}

/// A path to a field inside a document: `a.b.c`, with backtick-quoted segments for names that
/// contain dots or other special characters (`` a.`b.c` ``). `__name__` is the document id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath {
    /// At least one segment, each non-empty and at most [`MAX_FIELD_NAME_BYTES`] (private:
    /// the constructors check them).
    segments: Vec<String>,
}

/// The special field path that stands for the document's name.
pub const DOCUMENT_ID_FIELD: &str = "__name__";

impl FieldPath {
    /// A field path from already-split segments (the JS `new FieldPath('a', 'b.c')`).
    pub fn from_segments(segments: Vec<String>) -> Result<FieldPath, PathError> {
        if segments.is_empty() {
            return Err(PathError::BadFieldPath {
                path: String::new(),
                why: "it has no segments",
            });
        }
        for s in &segments {
            if s.is_empty() {
                return Err(PathError::BadFieldPath {
                    path: segments.join("."),
                    why: "a field name is empty",
                });
            }
            if s.len() > MAX_FIELD_NAME_BYTES {
                return Err(PathError::FieldNameTooLong { len: s.len() });
            }
        }
        Ok(FieldPath { segments })
    }

    /// Parses a dotted field path with optional backtick quoting (`` \` `` and `\\` escape).
    pub fn parse(path: &str) -> Result<FieldPath, PathError> {
        let bad = |why| PathError::BadFieldPath {
            path: path.to_owned(),
            why,
        };
        let mut segments = Vec::new();
        let mut current = String::new();
        let mut quoted_segment = false;
        let mut chars = path.chars();
        while let Some(c) = chars.next() {
            match c {
                '`' if current.is_empty() && !quoted_segment => {
                    loop {
                        match chars.next() {
                            Some('`') => break,
                            Some('\\') => match chars.next() {
                                Some(e) => current.push(e),
                                None => return Err(bad("it ends inside an escape")),
                            },
                            Some(other) => current.push(other),
                            None => return Err(bad("a backtick is not closed")),
                        }
                    }
                    quoted_segment = true;
                }
                '.' => {
                    if current.is_empty() && !quoted_segment {
                        return Err(bad("a field name is empty"));
                    }
                    segments.push(std::mem::take(&mut current));
                    quoted_segment = false;
                }
                _ if quoted_segment => return Err(bad("text follows a quoted name")),
                '`' => return Err(bad("a backtick appears inside a name")),
                _ => current.push(c),
            }
        }
        if current.is_empty() && !quoted_segment {
            return Err(bad("a field name is empty"));
        }
        segments.push(current);
        FieldPath::from_segments(segments)
    }

    /// The `__name__` pseudo-field (`documentId()`).
    pub fn document_id() -> FieldPath {
        FieldPath {
            segments: vec![DOCUMENT_ID_FIELD.to_owned()],
        }
    }

    pub fn is_document_id(&self) -> bool {
        self.segments.len() == 1 && self.segments[0] == DOCUMENT_ID_FIELD
    }

    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// Whether `self` is `other` or a field inside it.
    pub fn starts_with(&self, other: &FieldPath) -> bool {
        self.segments.starts_with(&other.segments)
    }

    /// The path with one more segment.
    pub fn child(&self, name: &str) -> FieldPath {
        let mut segments = self.segments.clone();
        segments.push(name.to_owned());
        FieldPath { segments }
    }
}

fn is_simple_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl fmt::Display for FieldPath {
    /// The canonical form: simple names bare, others backtick-quoted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            if is_simple_name(s) {
                f.write_str(s)?;
            } else {
                f.write_str("`")?;
                for c in s.chars() {
                    if c == '`' || c == '\\' {
                        f.write_str("\\")?;
                    }
                    write!(f, "{c}")?;
                }
                f.write_str("`")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_names_validate_and_order() {
        let a = DocumentName::parse("users/alice").unwrap();
        let b = DocumentName::parse("users/alice/messages/m1").unwrap();
        assert!(a < b);
        assert_eq!(b.collection_id(), "messages");
        assert_eq!(b.parent().to_string(), "users/alice/messages");
        assert!(matches!(
            DocumentName::parse("users"),
            Err(PathError::NotADocument { .. })
        ));
        assert!(matches!(
            DocumentName::parse("users//x"),
            Err(PathError::EmptySegment { .. })
        ));
        assert!(matches!(
            DocumentName::parse("users/.."),
            Err(PathError::DotSegment { .. })
        ));
        let long = format!("users/{}", "x".repeat(1501));
        let err = DocumentName::parse(&long).unwrap_err();
        assert!(err.to_string().contains("1500"), "{err}");
        assert!(CollectionPath::parse("users").unwrap().doc("a/b").is_err());
    }

    #[test]
    fn field_paths_parse_and_print() {
        let p = FieldPath::parse("price.currency").unwrap();
        assert_eq!(p.segments(), ["price", "currency"]);
        let q = FieldPath::parse("a.`b.c`.`d\\`e`").unwrap();
        assert_eq!(q.segments(), ["a", "b.c", "d`e"]);
        assert_eq!(FieldPath::parse(&q.to_string()).unwrap(), q);
        for bad in ["", "a..b", ".a", "a.", "`a", "a`b"] {
            assert!(FieldPath::parse(bad).is_err(), "{bad}");
        }
        assert!(FieldPath::parse("__name__").unwrap().is_document_id());
    }
}
