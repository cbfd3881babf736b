//! The security rules (`--rules FILE`, Firebase's rules syntax) and how the relay applies
//! them: a connection's gets, list queries, aggregations and listens are checked before
//! anything is read, and its writes by the committer, document by document, at the
//! version they commit at (`crate::commit`).
//!
//! The rules in force are swapped whole: `SIGHUP` or a change of the file reloads them
//! ([`Rules::reload`]), and a file that does not parse leaves the rules in force, the log
//! saying why (file, line and column). A request is checked with the rules in force when
//! it arrived.
//!
//! Without `--rules` the relay is open: nothing is checked, and the binary then serves
//! loopback only unless told `--insecure-open`. A service token (`--service-secret`) is
//! trusted server code, past the rules, as the Admin SDK is past Firebase's.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use hearth_core::document::Document;
use hearth_core::kv::block_on_ready;
use hearth_core::path::DocumentName;
use hearth_core::query::execute::fetch;
use hearth_core::query::model::Query;
use hearth_core::value::{Map, Timestamp, Value};
use hearth_rules::{Auth, Decision, Method, Reader, Request, Ruleset};

use crate::auth::AuthContext;
use crate::commit::WriteError;
use crate::fanout::TargetGuard;
use crate::metrics::Metrics;
use crate::store::StoreError;
use crate::store::{DatabaseView, Store};
use hearth_core::error::ErrorCode;
use hearth_core::mutation::{ApplyContext, Mutation};

pub use hearth_rules::{DOCUMENT_READS_BATCH, DOCUMENT_READS_SINGLE};

/// Firestore's denial message, which every denial starts with.
const DENIED: &str = "Missing or insufficient permissions.";

/// The relay's security rules, reloadable.
pub struct Rules {
    /// The rules file; `None`: the relay runs open.
    file: Option<PathBuf>,
    /// The rules in force.
    current: RwLock<Option<Arc<Ruleset>>>,
    /// The loaded file's modification time and length, to tell when it changed.
    stamp: Mutex<Option<(SystemTime, u64)>>,
    /// Whether a denial names the rule that decided (`--explain-denials`).
    explain: bool,
    /// How many times rules were put in force: a listen proved under one generation and
    /// registered after the next reload's walk over the listens is proved again.
    generation: AtomicU64,
}

/// Why the rules file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum RulesLoadError {
    /// The file could not be read.
    #[error("reading the rules file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file does not parse or check (its message names the line and column).
    #[error("{0}")]
    Parse(#[from] hearth_rules::RulesError),
}

impl Rules {
    /// No rules: the relay is open.
    pub fn open() -> Rules {
        Rules {
            file: None,
            current: RwLock::new(None),
            stamp: Mutex::new(None),
            explain: true,
            generation: AtomicU64::new(0),
        }
    }

    /// The rules in `file`; `explain` says whether denials name the deciding rule.
    pub fn load(file: &Path, explain: bool) -> Result<Rules, RulesLoadError> {
        let rules = Rules {
            file: Some(file.to_owned()),
            current: RwLock::new(None),
            stamp: Mutex::new(None),
            explain,
            generation: AtomicU64::new(0),
        };
        rules.reload()?;
        Ok(rules)
    }

    /// Whether rules are configured (the relay is not open).
    pub fn enabled(&self) -> bool {
        self.file.is_some()
    }

    /// The rules file, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The rules in force; `None` when the relay is open.
    pub fn current(&self) -> Option<Arc<Ruleset>> {
        self.current.read().map_or(None, |r| r.clone())
    }

    /// Reads and parses the rules file again and puts it in force; on an error the rules
    /// in force stay. Nothing to do without a file.
    pub fn reload(&self) -> Result<(), RulesLoadError> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let read = |e| RulesLoadError::Read {
            path: path.display().to_string(),
            source: e,
        };
        let stamp = file_stamp(path);
        let source = std::fs::read_to_string(path).map_err(read)?;
        let parsed = Ruleset::parse(&path.display().to_string(), &source);
        // The stamp is taken even when the file does not parse: it is not read again
        // until it changes.
        if let Ok(mut s) = self.stamp.lock() {
            *s = stamp;
        }
        let ruleset = parsed?;
        if let Ok(mut current) = self.current.write() {
            *current = Some(Arc::new(ruleset));
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// How many times rules were put in force (see the field).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Reloads the rules if the file changed since it was last read, logging the outcome:
    /// true if new rules are in force.
    pub fn reload_if_changed(&self) -> bool {
        let Some(path) = &self.file else {
            return false;
        };
        let now = file_stamp(path);
        let changed = self.stamp.lock().is_ok_and(|s| *s != now);
        changed && self.reload_logged("the rules file changed")
    }

    /// Reloads the rules, logging the outcome; `why` says what asked for it. True if new
    /// rules are in force.
    pub fn reload_logged(&self, why: &str) -> bool {
        match self.reload() {
            Ok(()) => {
                tracing::info!(reason = why, "security rules reloaded");
                true
            }
            Err(e) => {
                tracing::error!(reason = why, error = %e, "the rules file has errors: the rules in force stay");
                false
            }
        }
    }

    /// What a caller's requests are checked with, their decisions counted in `metrics`:
    /// `None` when nothing is checked (the relay is open, or the caller holds a service
    /// token).
    pub fn access(&self, caller: &AuthContext, metrics: &Arc<Metrics>) -> Option<Access> {
        if caller.service {
            return None;
        }
        let rules = self.current()?;
        Some(Access {
            rules,
            auth: auth_of(caller).map(Arc::new),
            explain: self.explain,
            metrics: metrics.clone(),
        })
    }
}

/// The modification time and length of `path`, when it can be read.
fn file_stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// `request.auth` of a caller: `None` for a caller without a verified token.
pub fn auth_of(caller: &AuthContext) -> Option<Auth> {
    let Value::Map(token) = json_value(&caller.claims) else {
        return None;
    };
    Some(Auth {
        uid: caller.uid.clone().unwrap_or_default(),
        token,
    })
}

/// A JSON claim as a rules value: numbers that are integers become ints, the rest floats.
fn json_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::String(s.clone()),
        serde_json::Value::Array(a) => Value::Array(a.iter().map(json_value).collect()),
        serde_json::Value::Object(o) => Value::Map(
            o.iter()
                .map(|(k, v)| (k.clone(), json_value(v)))
                .collect::<Map>(),
        ),
    }
}

/// A caller's requests under the rules in force.
#[derive(Clone)]
pub struct Access {
    /// The rules in force when the request arrived.
    pub rules: Arc<Ruleset>,
    /// `request.auth`.
    pub auth: Option<Arc<Auth>>,
    /// Whether denials name the rule that decided.
    pub explain: bool,
    /// Where decisions are counted.
    pub metrics: Arc<Metrics>,
}

/// Reads through a snapshot of one database: `get()` and `exists()` of a read request
/// (nothing is written, so `getAfter()` reads the same).
pub struct SnapshotReader<'a, 'v> {
    /// The snapshot's view of the database.
    pub view: &'a DatabaseView<'v>,
}

impl Reader for SnapshotReader<'_, '_> {
    fn get(&self, name: &DocumentName) -> Result<Option<Document>, String> {
        block_on_ready(fetch(self.view, name)).map_err(|e| e.to_string())
    }

    fn get_after(&self, name: &DocumentName) -> Result<Option<Document>, String> {
        self.get(name)
    }
}

/// The current time as a rules timestamp.
pub fn now() -> Timestamp {
    Timestamp::from_micros(crate::commit::now_micros())
        .unwrap_or_else(|_| Timestamp::new(0, 0).expect("the epoch is a valid timestamp"))
}

impl Access {
    /// The client's message for a denial.
    pub fn denial(&self, decision: &Decision) -> String {
        if self.explain && !decision.explanation.is_empty() {
            format!("{DENIED} {}", decision.explanation)
        } else {
            DENIED.to_owned()
        }
    }

    /// Whether the caller may read document `name` (its state `doc`) of database `db`:
    /// `Err` with the client's message if not.
    pub fn check_get(
        &self,
        db: &str,
        name: &DocumentName,
        doc: Option<&Document>,
        reader: &dyn Reader,
    ) -> Result<(), String> {
        let request = Request {
            database: db,
            method: Method::Get,
            path: name,
            auth: self.auth.as_deref(),
            time: now(),
            resource: doc,
            new_resource: None,
        };
        let decision = self.rules.evaluate(&request, reader, DOCUMENT_READS_SINGLE);
        self.metrics.rules_decision("get", decision.allowed);
        if decision.allowed {
            Ok(())
        } else {
            Err(self.denial(&decision))
        }
    }

    /// Whether the caller may run `query` (a list: a query, an aggregation or a listen) on
    /// database `db`: the rules must allow every document it could return. A document
    /// listener's query (`Query::document_target`) reads one document: it is judged by the
    /// `get` rule on that document as it is now, as Firestore judges a document listen.
    pub fn check_list(&self, db: &str, query: &Query, reader: &dyn Reader) -> Result<(), String> {
        if let Some(name) = query.document_target() {
            let doc = reader
                .get(name)
                .map_err(|_| format!("{DENIED} the rules could not read the store"))?;
            return self.check_get(db, name, doc.as_ref(), reader);
        }
        let decision = self
            .rules
            .check_list(db, query, self.auth.as_deref(), now(), reader);
        self.metrics.rules_decision("list", decision.allowed);
        if decision.allowed {
            Ok(())
        } else {
            Err(self.denial(&decision))
        }
    }

    /// Whether the caller may make one batch's writes to database `db`, committing at
    /// `time`: `changes` are each document's state before the batch and after it (create,
    /// update or delete follows from them), `before` reads any document as it was before
    /// the batch (`get()` in the rules); `getAfter()` sees the batch applied. The batch is
    /// allowed only if every write is: `Err` with the client's message for the first that
    /// is not.
    pub fn check_writes(
        &self,
        db: &str,
        changes: &[(DocumentName, Option<Document>, Option<Document>)],
        before: &dyn Fn(&DocumentName) -> Result<Option<Document>, String>,
        time: Timestamp,
    ) -> Result<(), String> {
        let reader = BatchReader { before, changes };
        let reads = if changes.len() > 1 {
            DOCUMENT_READS_BATCH
        } else {
            DOCUMENT_READS_SINGLE
        };
        for (name, old, new) in changes {
            let (method, kind) = match (old, new) {
                (_, None) => (Method::Delete, "delete"),
                (None, Some(_)) => (Method::Create, "create"),
                (Some(_), Some(_)) => (Method::Update, "update"),
            };
            let request = Request {
                database: db,
                method,
                path: name,
                auth: self.auth.as_deref(),
                time,
                resource: old.as_ref(),
                new_resource: new.as_ref(),
            };
            let decision = self.rules.evaluate(&request, &reader, reads);
            self.metrics.rules_decision(kind, decision.allowed);
            if !decision.allowed {
                return Err(self.denial(&decision));
            }
        }
        Ok(())
    }
}

impl Access {
    /// The rules' decision on a transaction's reads: `get` on each document it read, at its
    /// state now. `Some(refusal)` when the rules refuse one. Once they allow every one, the
    /// caller may be told that one changed since (it could read it anyway).
    pub fn decide_reads(
        &self,
        db: &str,
        reads: &[(DocumentName, Option<u64>)],
        read_doc: &dyn Fn(&DocumentName) -> Result<Option<Document>, StoreError>,
    ) -> Result<Option<WriteError>, StoreError> {
        let before = |name: &DocumentName| read_doc(name).map_err(|e| e.to_string());
        let reader = FnReader(&before);
        for (name, _) in reads {
            let doc = read_doc(name)?;
            if let Err(denied) = self.check_get(db, name, doc.as_ref(), &reader) {
                return Ok(Some(WriteError::new(ErrorCode::PermissionDenied, denied)));
            }
        }
        Ok(None)
    }

    /// The rules' decision on a batch's writes, before anything else about the stored
    /// documents is told: the writes as intended (preconditions taken to hold,
    /// `Mutation::apply_as_intended`), per document with the batch applied, all or nothing.
    /// `Some(refusal)` when the rules refuse.
    pub fn decide_writes(
        &self,
        db: &str,
        mutations: &[Mutation],
        ctx: &ApplyContext,
        read_doc: &dyn Fn(&DocumentName) -> Result<Option<Document>, StoreError>,
    ) -> Result<Option<WriteError>, StoreError> {
        let before = |name: &DocumentName| read_doc(name).map_err(|e| e.to_string());
        let mut overlay: Vec<(DocumentName, Option<Document>, Option<Document>)> = Vec::new();
        for m in mutations {
            let pos = overlay.iter().position(|(n, _, _)| *n == m.name);
            let base = match pos {
                Some(i) => overlay[i].2.clone(),
                None => read_doc(&m.name)?,
            };
            // A malformed write is refused by the checked apply that follows, with its error.
            let Ok(new) = m.apply_as_intended(base.as_ref(), ctx) else {
                return Ok(None);
            };
            match pos {
                Some(i) => overlay[i].2 = new,
                None => overlay.push((m.name.clone(), base, new)),
            }
        }
        Ok(self
            .check_writes(db, &overlay, &before, ctx.commit_time)
            .err()
            .map(|denied| WriteError::new(ErrorCode::PermissionDenied, denied)))
    }
}

/// The rules' view of one listen's caller, for the fan-out ([`TargetGuard`]): a document
/// that left the listen's result goes to it with its content only if the `get` rule lets
/// it read it, and, under rules that read other documents or the time, the listen is
/// proved again before each change goes out. Both read the store's latest snapshot.
pub struct ListenGuard {
    /// The caller's access.
    access: Access,
    /// The database.
    db: String,
    /// Where the rules' reads go.
    store: Arc<Store>,
    /// The listen's query (validated).
    query: Query,
    /// Whether the rules read other documents or the time (the proof can change).
    dynamic: bool,
    /// The caller, as decisions depend on it: uid and claims.
    viewer: String,
}

impl ListenGuard {
    /// The guard of a listen of `query` on `db` by the caller of `access`.
    pub fn new(access: Access, db: &str, store: Arc<Store>, query: Query) -> ListenGuard {
        let dynamic = access.rules.list_reads_beyond_documents();
        let viewer = format!("{:?}", access.auth.as_deref().map(|a| (&a.uid, &a.token)));
        ListenGuard {
            access,
            db: db.to_owned(),
            store,
            query,
            dynamic,
            viewer,
        }
    }
}

impl ListenGuard {
    /// Proves the listen under this guard's access, at the store's latest snapshot.
    fn prove(&self) -> Result<(), String> {
        let Ok(snap) = self.store.snapshot(&self.db) else {
            return Err(format!("{DENIED} the rules could not read the store"));
        };
        let view = snap.database(&self.db);
        self.access
            .check_list(&self.db, &self.query, &SnapshotReader { view: &view })
    }

    /// A document listen: whether the caller may still read its document as it is now. A
    /// document that is gone is told to a caller who could read it (its deletion says
    /// nothing more); one created again is judged anew.
    fn prove_document(&self, name: &DocumentName) -> Result<(), String> {
        let Ok(snap) = self.store.snapshot(&self.db) else {
            return Err(format!("{DENIED} the rules could not read the store"));
        };
        let view = snap.database(&self.db);
        let reader = SnapshotReader { view: &view };
        match reader.get(name) {
            Ok(None) => Ok(()),
            Ok(Some(doc)) => self.access.check_get(&self.db, name, Some(&doc), &reader),
            Err(_) => Err(format!("{DENIED} the rules could not read the store")),
        }
    }
}

impl TargetGuard for ListenGuard {
    fn viewer(&self) -> &str {
        &self.viewer
    }

    fn may_read(&self, doc: &Document) -> bool {
        let Ok(snap) = self.store.snapshot(&self.db) else {
            return false;
        };
        let view = snap.database(&self.db);
        let reader = SnapshotReader { view: &view };
        self.access
            .check_get(&self.db, &doc.name, Some(doc), &reader)
            .is_ok()
    }

    fn recheck(&self) -> Option<Result<(), String>> {
        // A document listen is judged by `get` on the document, which each change can
        // alter: proved again before every change goes out.
        if let Some(name) = self.query.document_target() {
            return Some(self.prove_document(name));
        }
        self.dynamic.then(|| self.prove())
    }

    fn reproved(&self, rules: &Arc<Ruleset>) -> Result<Arc<dyn TargetGuard>, String> {
        let mut access = self.access.clone();
        access.rules = rules.clone();
        let guard = ListenGuard::new(access, &self.db, self.store.clone(), self.query.clone());
        guard.prove()?;
        Ok(Arc::new(guard))
    }
}

/// Reads through a function (a write transaction's reads of the stored documents).
pub struct FnReader<'a>(pub &'a dyn Fn(&DocumentName) -> Result<Option<Document>, String>);

impl Reader for FnReader<'_> {
    fn get(&self, name: &DocumentName) -> Result<Option<Document>, String> {
        (self.0)(name)
    }

    fn get_after(&self, name: &DocumentName) -> Result<Option<Document>, String> {
        self.get(name)
    }
}

/// The rules' reads during a batch: `get()` sees the store before the batch, `getAfter()`
/// the batch's own writes over it.
struct BatchReader<'a> {
    /// Reads a document as it was before the batch.
    before: &'a dyn Fn(&DocumentName) -> Result<Option<Document>, String>,
    /// The batch's documents, before and after.
    changes: &'a [(DocumentName, Option<Document>, Option<Document>)],
}

impl Reader for BatchReader<'_> {
    fn get(&self, name: &DocumentName) -> Result<Option<Document>, String> {
        (self.before)(name)
    }

    fn get_after(&self, name: &DocumentName) -> Result<Option<Document>, String> {
        match self.changes.iter().find(|(n, _, _)| n == name) {
            Some((_, _, after)) => Ok(after.clone()),
            None => (self.before)(name),
        }
    }
}
