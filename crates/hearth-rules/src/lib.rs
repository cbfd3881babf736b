//! Security rules in Firebase's rules language for Cloud Firestore (`rules_version` 1 and 2):
//! the parser ([`parser`]), the evaluator ([`eval`], [`methods`]) and the decisions the relay
//! asks for: [`Ruleset::evaluate`] for a single document's get or write, and
//! [`Ruleset::check_list`] for a query, which must be allowed for every document it could
//! return (rules are not filters), proved with the document's fields the query does not fix
//! left unknown.

pub mod ast;
pub mod cases;
pub mod eval;
#[doc(hidden)]
pub mod fuzzing;
pub mod lexer;
mod list;
pub mod methods;
pub mod parser;
pub mod proof;
pub mod time;

use std::collections::BTreeMap;

use hearth_core::document::Document;
use hearth_core::path::DocumentName;
use hearth_core::query::model::Query;
use hearth_core::value::{Map, Timestamp};

use ast::{Allow, Function, Match, MethodSet, Segment};
use eval::{from_value, full_path, resource, Env, Val};

/// Most documents the rules may read (`get()`, `exists()`, ...) for a single-document
/// request, as Firestore's limit.
pub const DOCUMENT_READS_SINGLE: usize = 10;
/// Most documents the rules may read for a batch or transaction, as Firestore's limit.
pub const DOCUMENT_READS_BATCH: usize = 20;

/// A parsed rules file, ready to decide.
#[derive(Debug)]
pub struct Ruleset {
    /// The file's syntax tree.
    file: parser::File,
    /// The file's name, for explanations.
    name: String,
}

/// A rules file that does not parse: where and why.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct RulesError {
    /// The file.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// What is wrong.
    pub message: String,
}

impl RulesError {
    /// An error in `file` at `line`, `column`.
    pub fn at(file: &str, line: u32, column: u32, message: impl Into<String>) -> RulesError {
        RulesError {
            file: file.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }
}

/// An operation the rules decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Reading one document.
    Get,
    /// A query.
    List,
    /// Writing a document that does not exist.
    Create,
    /// Writing a document that exists.
    Update,
    /// Deleting a document.
    Delete,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::List => "list",
            Method::Create => "create",
            Method::Update => "update",
            Method::Delete => "delete",
        }
    }

    fn in_set(self, m: MethodSet) -> bool {
        matches!(
            (self, m),
            (Method::Get, MethodSet::Get | MethodSet::Read)
                | (Method::List, MethodSet::List | MethodSet::Read)
                | (Method::Create, MethodSet::Create | MethodSet::Write)
                | (Method::Update, MethodSet::Update | MethodSet::Write)
                | (Method::Delete, MethodSet::Delete | MethodSet::Write)
        )
    }
}

/// `request.auth` of a signed-in caller.
#[derive(Clone, Debug)]
pub struct Auth {
    /// `request.auth.uid`.
    pub uid: String,
    /// `request.auth.token`: every claim.
    pub token: Map,
}

/// One single-document operation to decide.
pub struct Request<'a> {
    /// The database.
    pub database: &'a str,
    /// The operation.
    pub method: Method,
    /// The document.
    pub path: &'a DocumentName,
    /// The caller (`None`: `request.auth == null`).
    pub auth: Option<&'a Auth>,
    /// `request.time`.
    pub time: Timestamp,
    /// The stored document before the operation (`resource`).
    pub resource: Option<&'a Document>,
    /// The document after the write (`request.resource`).
    pub new_resource: Option<&'a Document>,
}

/// Documents the rules read (`get()`, `exists()`, `getAfter()`, `existsAfter()`), at the
/// operation's version.
pub trait Reader {
    /// The document as stored.
    fn get(&self, name: &DocumentName) -> Result<Option<Document>, String>;
    /// The document as if the operation's writes were committed.
    fn get_after(&self, name: &DocumentName) -> Result<Option<Document>, String>;
}

/// Documents held in memory, read as stored and after (a fixed store: rules tests, the
/// fuzzer, benchmarks).
#[derive(Default)]
pub struct Documents(pub BTreeMap<DocumentName, Document>);

impl Documents {
    /// The store holding `docs`.
    pub fn of(docs: impl IntoIterator<Item = Document>) -> Documents {
        Documents(docs.into_iter().map(|d| (d.name.clone(), d)).collect())
    }
}

impl Reader for Documents {
    fn get(&self, name: &DocumentName) -> Result<Option<Document>, String> {
        Ok(self.0.get(name).cloned())
    }

    fn get_after(&self, name: &DocumentName) -> Result<Option<Document>, String> {
        self.get(name)
    }
}

/// A decision, and what made it.
#[derive(Clone, Debug)]
pub struct Decision {
    /// Whether the operation is allowed.
    pub allowed: bool,
    /// Which rule allowed it, or why nothing did.
    pub explanation: String,
    /// The line of the rule that allowed it.
    pub rule_line: Option<u32>,
    /// For a denial: the lines of the `allow` statements that applied and did not hold.
    pub considered: Vec<u32>,
    /// For a denial: the errors that made statements false, with their lines (for the
    /// rules' author, `hearth-relay rules test`; never sent to a caller).
    pub errors: Vec<String>,
}

/// A segment of the path being matched.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Seg {
    /// A known segment.
    Known(String),
    /// A document id the proof does not know.
    Unknown,
    /// Any number of parent segments (a collection group's).
    AnyPrefix,
}

/// Ways `pattern` matches a prefix of `segs`: (segments consumed, bindings). `v2`: rules
/// version 2, where `{x=**}` takes zero or more segments (one or more in version 1).
fn prefixes(pattern: &[Segment], segs: &[Seg], v2: bool) -> Vec<(usize, Vec<(String, Val)>)> {
    let Some((first, rest)) = pattern.split_first() else {
        return vec![(0, Vec::new())];
    };
    let mut out = Vec::new();
    match first {
        Segment::Literal(l) => {
            if let Some(Seg::Known(k)) = segs.first() {
                if k == l {
                    for (n, b) in prefixes(rest, &segs[1..], v2) {
                        out.push((n + 1, b));
                    }
                }
            }
        }
        Segment::Var(v) => {
            let value = match segs.first() {
                Some(Seg::Known(k)) => Some(Val::Str(k.clone())),
                Some(Seg::Unknown) => Some(Val::Unknown),
                _ => None,
            };
            if let Some(value) = value {
                for (n, mut b) in prefixes(rest, &segs[1..], v2) {
                    b.insert(0, (v.clone(), value.clone()));
                    out.push((n + 1, b));
                }
            }
        }
        Segment::Rest(v) => {
            // Zero or more segments (rules version 2), one or more (version 1).
            for take in usize::from(!v2)..=segs.len() {
                let taken = &segs[..take];
                let value = if taken.iter().all(|s| matches!(s, Seg::Known(_))) {
                    Val::Path(
                        taken
                            .iter()
                            .filter_map(|s| match s {
                                Seg::Known(k) => Some(k.clone()),
                                _ => None,
                            })
                            .collect(),
                    )
                } else {
                    Val::Unknown
                };
                for (n, mut b) in prefixes(rest, &segs[take..], v2) {
                    b.insert(0, (v.clone(), value.clone()));
                    out.push((n + take, b));
                }
            }
        }
    }
    // A collection group's unknown parents can only be taken whole by a `**`.
    out
}

/// The allow statements that apply to `segs`, with their bindings and visible functions.
type Applying<'a> = Vec<(&'a Allow, Vec<(String, Val)>, Vec<&'a Function>)>;

fn applying<'a>(
    (blocks, v2): (&'a [Match], bool),
    segs: &[Seg],
    bindings: &[(String, Val)],
    functions: &[&'a Function],
    out: &mut Applying<'a>,
) {
    for block in blocks {
        for (n, b) in prefixes(&block.path, segs, v2) {
            // A collection group's parents are taken only by a version 2 `{x=**}`: in
            // version 1 recursive wildcards do not serve collection group queries.
            if segs[..n].contains(&Seg::AnyPrefix)
                && !(v2 && block.path.iter().any(|s| matches!(s, Segment::Rest(_))))
            {
                continue;
            }
            let mut bound = bindings.to_vec();
            bound.extend(b);
            let mut fns = functions.to_vec();
            fns.extend(block.functions.iter());
            if n == segs.len() {
                for allow in &block.allows {
                    out.push((allow, bound.clone(), fns.clone()));
                }
            } else {
                applying((&block.matches, v2), &segs[n..], &bound, &fns, out);
            }
        }
    }
}

pub(crate) fn auth_val(auth: Option<&Auth>) -> Val {
    match auth {
        None => Val::Null,
        Some(a) => {
            let mut m = BTreeMap::new();
            m.insert("uid".to_owned(), Val::Str(a.uid.clone()));
            m.insert(
                "token".to_owned(),
                Val::Map(
                    a.token
                        .iter()
                        .map(|(k, v)| (k.clone(), from_value(v)))
                        .collect(),
                ),
            );
            Val::Map(m)
        }
    }
}

impl Ruleset {
    /// Parses and checks `source` (named `file` in messages).
    pub fn parse(file: &str, source: &str) -> Result<Ruleset, RulesError> {
        Ok(Ruleset {
            file: parser::parse_file(file, source)?,
            name: file.to_owned(),
        })
    }

    /// Whether a list's outcome can change while the documents it returns do not: some
    /// `read` or `list` rule, or some function, reads other documents (`get()`,
    /// `exists()`, ...) or the time (`request.time`). A listen under such rules is proved
    /// again as its results change.
    pub fn list_reads_beyond_documents(&self) -> bool {
        fn dynamic(e: &ast::Expr) -> bool {
            e.any(&|e| match e {
                ast::Expr::Call(callee, _, _) => matches!(&**callee,
                    ast::Expr::Ident(n, _) if matches!(n.as_str(), "get" | "exists" | "getAfter" | "existsAfter")),
                ast::Expr::Member(target, name, _) => {
                    name == "time" && matches!(&**target, ast::Expr::Ident(n, _) if n == "request")
                }
                _ => false,
            })
        }
        fn walk(blocks: &[Match]) -> bool {
            blocks.iter().any(|b| {
                b.functions
                    .iter()
                    .any(|f| dynamic(&f.body) || f.lets.iter().any(|(_, e)| dynamic(e)))
                    || b.allows.iter().any(|a| {
                        a.methods.iter().any(|m| Method::List.in_set(*m))
                            && a.condition.as_ref().is_some_and(dynamic)
                    })
                    || walk(&b.matches)
            })
        }
        self.file
            .functions
            .iter()
            .any(|f| dynamic(&f.body) || f.lets.iter().any(|(_, e)| dynamic(e)))
            || walk(&self.file.matches)
    }

    /// Decides `req` by its statements: allowed if any applicable `allow` is true.
    pub(crate) fn decide(
        &self,
        method: Method,
        segs: &[Seg],
        vars: &[(String, Val)],
        (database, reader, reads): (&str, &dyn Reader, usize),
        path_text: &str,
    ) -> Decision {
        let mut found = Vec::new();
        let top: Vec<&Function> = self.file.functions.iter().collect();
        let v2 = self.file.version >= 2;
        applying((&self.file.matches, v2), segs, &[], &top, &mut found);
        let mut errors = Vec::new();
        let mut unknown = None;
        let mut considered = Vec::new();
        for (allow, bindings, functions) in found {
            if !allow.methods.iter().any(|m| method.in_set(*m)) {
                continue;
            }
            considered.push(allow.pos.line);
            let Some(condition) = &allow.condition else {
                return self.allowed(allow);
            };
            let mut all = vars.to_vec();
            all.extend(bindings);
            let mut env = Env::new(all, functions, reader, database, reads);
            match env.eval(condition) {
                Ok(Val::Bool(true)) => return self.allowed(allow),
                Ok(v) if v.is_unknown() => {
                    if unknown.is_none() {
                        // A filter is suggested only when no value in it can come from a
                        // document the rules read (which the caller may not see).
                        let hints = if env.read.is_empty() {
                            env.hints
                        } else {
                            Vec::new()
                        };
                        unknown = Some((allow.pos.line, hints));
                    }
                }
                Ok(_) => {}
                Err(e) => errors.push(format!("{}:{}: {e}", self.name, allow.pos.line)),
            }
        }
        Decision {
            allowed: false,
            explanation: self.explain_denial(method, path_text, &considered, unknown),
            rule_line: None,
            considered,
            errors,
        }
    }

    /// Why nothing allowed: the statements that applied, or for a list the filters that
    /// would prove it. Never the errors met nor values read (they may tell of documents the
    /// caller may not read: a missing field, a value `get()` returned), so the text is the
    /// same whatever the documents hold; filters are suggested only from an evaluation that
    /// read no document.
    fn explain_denial(
        &self,
        method: Method,
        path_text: &str,
        considered: &[u32],
        unknown: Option<(u32, Vec<proof::Hint>)>,
    ) -> String {
        let Some((line, hints)) = unknown else {
            if considered.is_empty() {
                return format!("no rule allows {} on {path_text}", method.name());
            }
            let lines: Vec<String> = considered.iter().map(u32::to_string).collect();
            return format!(
                "no rule allows {} on {path_text}: the allow statements at {} lines {} did not hold",
                method.name(),
                self.name,
                lines.join(", ")
            );
        };
        let mut fix: Vec<String> = Vec::new();
        for h in hints.iter().map(ToString::to_string) {
            if !fix.contains(&h) {
                fix.push(h);
            }
        }
        let fix = if fix.is_empty() {
            "add filters that make it hold for every result".to_owned()
        } else {
            format!(
                "add filters that make it hold for every result, such as {}",
                fix.join(" or ")
            )
        };
        format!(
            "the rule at {}:{line} depends on fields of the documents that the query does not fix: {fix}",
            self.name
        )
    }

    fn allowed(&self, allow: &Allow) -> Decision {
        Decision {
            allowed: true,
            explanation: format!("allowed by {}:{}", self.name, allow.pos.line),
            rule_line: Some(allow.pos.line),
            considered: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Decides a single-document operation; the rules may read `doc_reads_limit` documents.
    pub fn evaluate(&self, req: &Request, reader: &dyn Reader, doc_reads_limit: usize) -> Decision {
        let full = full_path(req.database, req.path);
        let segs: Vec<Seg> = full.iter().cloned().map(Seg::Known).collect();
        let mut request = BTreeMap::new();
        request.insert("auth".to_owned(), auth_val(req.auth));
        request.insert("time".to_owned(), Val::Timestamp(req.time));
        request.insert("path".to_owned(), Val::Path(full.clone()));
        request.insert("method".to_owned(), Val::Str(req.method.name().to_owned()));
        match req.new_resource {
            Some(new) => {
                request.insert("resource".to_owned(), resource(req.database, new));
            }
            // A delete has no new state: `request.resource` is null, as in Firestore.
            None if req.method == Method::Delete => {
                request.insert("resource".to_owned(), Val::Null);
            }
            None => {}
        }
        let vars = vec![
            ("request".to_owned(), Val::Map(request)),
            (
                "resource".to_owned(),
                req.resource
                    .map_or(Val::Null, |d| resource(req.database, d)),
            ),
        ];
        self.decide(
            req.method,
            &segs,
            &vars,
            (req.database, reader, doc_reads_limit),
            &format!("/{}", full.join("/")),
        )
    }

    /// Rules are not filters: allowed only if the `list` rules allow every document `query`
    /// could return, proved from the query's filters alone (the [`list`] module): the fields
    /// its `==` and `in` filters fix are known, those its range, `!=`, `not-in`,
    /// `array-contains` and `orderBy` clauses constrain are known to be present and
    /// bounded, and the rest of the document is unknown; each conjunction of an `or` is
    /// proved on its own.
    pub fn check_list(
        &self,
        database: &str,
        query: &Query,
        auth: Option<&Auth>,
        time: Timestamp,
        reader: &dyn Reader,
    ) -> Decision {
        self.prove_list(database, query, &list::Caller { auth, time }, reader)
    }
}
