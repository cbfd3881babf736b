//! The query model: source, filters, ordering, cursors, limits, projection, aggregations.
//!
//! A [`Query`] is plain data built with the builder methods below; [`super::validate`]
//! checks it against Firestore's rules and [`super::normalize`] derives the normalized order.

use std::fmt;

use crate::encoding::key::Direction;
use crate::path::{CollectionPath, DocumentName, FieldPath};
use crate::value::Value;

/// Filter operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    Equal,
    NotEqual,
    LessThan,
    LessThanOrEqual,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    NotIn,
    ArrayContains,
    ArrayContainsAny,
}

impl Operator {
    /// Every operator, in declaration order, which is also their wire order (the codec's tag
    /// is the position here, `docs/protocol.md`): append, never reorder.
    pub const ALL: [Operator; 10] = [
        Operator::Equal,
        Operator::NotEqual,
        Operator::LessThan,
        Operator::LessThanOrEqual,
        Operator::GreaterThan,
        Operator::GreaterThanOrEqual,
        Operator::In,
        Operator::NotIn,
        Operator::ArrayContains,
        Operator::ArrayContainsAny,
    ];

    /// Parses the JS spelling (`'=='`, `'array-contains'`, ...).
    pub fn parse(s: &str) -> Option<Operator> {
        Some(match s {
            "==" => Operator::Equal,
            "!=" => Operator::NotEqual,
            "<" => Operator::LessThan,
            "<=" => Operator::LessThanOrEqual,
            ">" => Operator::GreaterThan,
            ">=" => Operator::GreaterThanOrEqual,
            "in" => Operator::In,
            "not-in" => Operator::NotIn,
            "array-contains" => Operator::ArrayContains,
            "array-contains-any" => Operator::ArrayContainsAny,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Equal => "==",
            Operator::NotEqual => "!=",
            Operator::LessThan => "<",
            Operator::LessThanOrEqual => "<=",
            Operator::GreaterThan => ">",
            Operator::GreaterThanOrEqual => ">=",
            Operator::In => "in",
            Operator::NotIn => "not-in",
            Operator::ArrayContains => "array-contains",
            Operator::ArrayContainsAny => "array-contains-any",
        }
    }

    /// Operators that make their field an implicit `orderBy` (inequalities).
    pub fn is_inequality(self) -> bool {
        matches!(
            self,
            Operator::NotEqual
                | Operator::LessThan
                | Operator::LessThanOrEqual
                | Operator::GreaterThan
                | Operator::GreaterThanOrEqual
                | Operator::NotIn
        )
    }

    /// Operators whose operand is a list.
    pub fn takes_list(self) -> bool {
        matches!(
            self,
            Operator::In | Operator::NotIn | Operator::ArrayContainsAny
        )
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `field op value`.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldFilter {
    /// The field compared (`__name__` for `documentId()`).
    pub field: FieldPath,
    /// The comparison.
    pub op: Operator,
    /// The operand: a list for `in`, `not-in` and `array-contains-any`.
    pub value: Value,
}

/// A filter tree: field filters combined with AND and OR.
#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    Field(FieldFilter),
    And(Vec<Filter>),
    Or(Vec<Filter>),
}

impl Filter {
    pub fn field(field: &str, op: Operator, value: impl Into<Value>) -> Filter {
        Filter::Field(FieldFilter {
            field: FieldPath::parse(field).expect("a valid field path literal"),
            op,
            value: value.into(),
        })
    }

    /// Every field filter in the tree.
    pub fn field_filters(&self) -> Vec<&FieldFilter> {
        let mut out = Vec::new();
        fn walk<'a>(f: &'a Filter, out: &mut Vec<&'a FieldFilter>) {
            match f {
                Filter::Field(ff) => out.push(ff),
                Filter::And(v) | Filter::Or(v) => v.iter().for_each(|x| walk(x, out)),
            }
        }
        walk(self, &mut out);
        out
    }
}

/// One `orderBy`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OrderBy {
    /// The field ordered by (`__name__` for the document name).
    pub field: FieldPath,
    /// Ascending or descending.
    pub dir: Direction,
}

/// A cursor: values for a prefix of the normalized order. `inclusive` is `startAt`/`endAt`;
/// exclusive is `startAfter`/`endBefore`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cursor {
    /// One value per field of the normalized order, from the first.
    pub values: Vec<Value>,
    /// Whether a document exactly at the cursor is in the result.
    pub inclusive: bool,
    /// Built from a document snapshot: holds values for the whole normalized order, which
    /// may be more than the explicit `orderBy`s (value cursors may not).
    pub from_document: bool,
}

/// Where the documents come from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The documents directly in one collection.
    Collection(CollectionPath),
    /// Every collection with this id, at any depth.
    CollectionGroup(String),
}

impl Source {
    /// The collection group the query reads (the collection id).
    pub fn group(&self) -> &str {
        match self {
            Source::Collection(c) => c.id(),
            Source::CollectionGroup(g) => g,
        }
    }
}

/// Whether `limit` keeps the first or the last documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum LimitType {
    #[default]
    First,
    Last,
}

/// A query. `limit` is `i64` so that negative input reaches validation and gets its error.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    /// The collection or collection group read.
    pub source: Source,
    /// The filter tree, if any.
    pub filter: Option<Filter>,
    /// The explicit `orderBy`s; validation and normalization add the implicit ones.
    pub order_by: Vec<OrderBy>,
    /// At most this many documents; signed so that a negative limit reaches validation.
    pub limit: Option<i64>,
    /// Whether `limit` keeps the first documents or the last (`limitToLast`).
    pub limit_type: LimitType,
    /// `startAt` / `startAfter`.
    pub start: Option<Cursor>,
    /// `endAt` / `endBefore`.
    pub end: Option<Cursor>,
    /// Documents skipped before the first returned.
    pub offset: u64,
    /// `Some(fields)` returns only those fields; `Some(vec![])` returns names only.
    pub projection: Option<Vec<FieldPath>>,
}

/// An aggregation over a query's result.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Aggregation {
    Count,
    Sum(FieldPath),
    Average(FieldPath),
}

impl Query {
    pub fn collection(path: CollectionPath) -> Query {
        Query::from_source(Source::Collection(path))
    }

    pub fn collection_group(id: &str) -> Query {
        Query::from_source(Source::CollectionGroup(id.to_owned()))
    }

    /// The query a document listener (and a client's limbo resolution) sends for document
    /// `name`: its collection filtered to `documentId() == name`.
    pub fn document(name: &DocumentName) -> Query {
        Query::collection(name.parent()).filter(Filter::Field(FieldFilter {
            field: FieldPath::document_id(),
            op: Operator::Equal,
            value: Value::Reference(name.clone()),
        }))
    }

    /// The document this query reads when it is a document listener's (its collection
    /// filtered to `documentId() == name` and nothing else but an order by name or a limit):
    /// such a query is a read of one document, judged by the rules as a get.
    pub fn document_target(&self) -> Option<&DocumentName> {
        let Source::Collection(collection) = &self.source else {
            return None;
        };
        let Some(Filter::Field(ff)) = &self.filter else {
            return None;
        };
        let Value::Reference(name) = &ff.value else {
            return None;
        };
        let plain = ff.field.is_document_id()
            && ff.op == Operator::Equal
            && collection.contains(name)
            && self.order_by.iter().all(|o| o.field.is_document_id())
            && self.limit.is_none_or(|n| n >= 1)
            && self.start.is_none()
            && self.end.is_none()
            && self.offset == 0
            && self.projection.is_none();
        plain.then_some(name)
    }

    fn from_source(source: Source) -> Query {
        Query {
            source,
            filter: None,
            order_by: Vec::new(),
            limit: None,
            limit_type: LimitType::First,
            start: None,
            end: None,
            offset: 0,
            projection: None,
        }
    }

    /// Adds a filter, ANDed with the existing ones.
    pub fn filter(mut self, f: Filter) -> Query {
        self.filter = Some(match self.filter.take() {
            None => f,
            Some(Filter::And(mut v)) => {
                v.push(f);
                Filter::And(v)
            }
            Some(existing) => Filter::And(vec![existing, f]),
        });
        self
    }

    /// `where(field, op, value)` with a field path literal.
    pub fn where_(self, field: &str, op: Operator, value: impl Into<Value>) -> Query {
        self.filter(Filter::field(field, op, value))
    }

    pub fn order_by(mut self, field: &str, dir: Direction) -> Query {
        self.order_by.push(OrderBy {
            field: FieldPath::parse(field).expect("a valid field path literal"),
            dir,
        });
        self
    }

    pub fn limit(mut self, n: i64) -> Query {
        self.limit = Some(n);
        self.limit_type = LimitType::First;
        self
    }

    pub fn limit_to_last(mut self, n: i64) -> Query {
        self.limit = Some(n);
        self.limit_type = LimitType::Last;
        self
    }

    pub fn offset(mut self, n: u64) -> Query {
        self.offset = n;
        self
    }

    pub fn start_at(mut self, values: Vec<Value>) -> Query {
        self.start = Some(Cursor {
            values,
            inclusive: true,
            from_document: false,
        });
        self
    }

    pub fn start_after(mut self, values: Vec<Value>) -> Query {
        self.start = Some(Cursor {
            values,
            inclusive: false,
            from_document: false,
        });
        self
    }

    pub fn end_at(mut self, values: Vec<Value>) -> Query {
        self.end = Some(Cursor {
            values,
            inclusive: true,
            from_document: false,
        });
        self
    }

    pub fn end_before(mut self, values: Vec<Value>) -> Query {
        self.end = Some(Cursor {
            values,
            inclusive: false,
            from_document: false,
        });
        self
    }

    pub fn select(mut self, fields: &[&str]) -> Query {
        self.projection = Some(
            fields
                .iter()
                .map(|f| FieldPath::parse(f).expect("a valid field path literal"))
                .collect(),
        );
        self
    }
}
