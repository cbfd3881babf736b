//! `WriteBatch` (atomic multi-document writes, latency-compensated) and `Transaction`
//! (optimistic: reads from the relay, revalidated at commit, retried on conflict).

use hearth_core::error::ErrorCode;
use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{future_to_promise, JsFuture};

use super::reference::{set_mutation, update_mutation, write_promise};
use super::snapshot::DocumentSnapshot;
use super::Db;
use crate::client::error::ClientError;
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;

/// Reads a `DocumentReference` argument by its public `path`.
fn reference_name(v: &JsValue) -> Result<DocumentName, ClientError> {
    let kind = Reflect::get(v, &"__hearthKind".into())
        .ok()
        .and_then(|k| k.as_string());
    if kind.as_deref() != Some("reference") {
        return Err(ClientError::invalid("expected a DocumentReference"));
    }
    let path = Reflect::get(v, &"path".into())
        .ok()
        .and_then(|p| p.as_string())
        .unwrap_or_default();
    DocumentName::parse(&path).map_err(ClientError::from)
}

/// Writes applied together, atomically, by `commit()`.
#[wasm_bindgen]
pub struct WriteBatch {
    /// The database the batch commits to.
    db: Rc<Db>,
    /// The writes so far, in call order.
    mutations: RefCell<Vec<Mutation>>,
    /// Set by `commit()`: a batch commits once, and takes no writes after.
    committed: std::cell::Cell<bool>,
}

impl WriteBatch {
    pub(crate) fn new(db: &Rc<Db>) -> WriteBatch {
        WriteBatch {
            db: db.clone(),
            mutations: RefCell::new(Vec::new()),
            committed: std::cell::Cell::new(false),
        }
    }

    fn push(&self, m: Result<Mutation, ClientError>) -> Result<(), JsValue> {
        if self.committed.get() {
            return Err(ClientError::new(
                ErrorCode::FailedPrecondition,
                "a write batch can no longer be used after commit()",
            )
            .into());
        }
        self.mutations.borrow_mut().push(m?);
        Ok(())
    }
}

#[wasm_bindgen]
impl WriteBatch {
    pub fn set(&self, reference: JsValue, data: JsValue, options: JsValue) -> Result<(), JsValue> {
        let name = reference_name(&reference)?;
        self.push(set_mutation(&name, &data, &options))
    }

    #[wasm_bindgen(variadic)]
    pub fn update(&self, reference: JsValue, data_or_pairs: &js_sys::Array) -> Result<(), JsValue> {
        let name = reference_name(&reference)?;
        self.push(update_mutation(&name, data_or_pairs))
    }

    pub fn delete(&self, reference: JsValue) -> Result<(), JsValue> {
        let name = reference_name(&reference)?;
        self.push(Ok(Mutation::delete(name)))
    }

    /// Applies every write atomically; resolves when the relay acknowledged the batch (or
    /// when it is durable locally, without a relay).
    pub fn commit(&self) -> Promise {
        if self.committed.replace(true) {
            return Promise::reject(
                &ClientError::new(
                    ErrorCode::FailedPrecondition,
                    "this write batch was already committed",
                )
                .to_js(),
            );
        }
        let muts = std::mem::take(&mut *self.mutations.borrow_mut());
        if muts.is_empty() {
            return Promise::resolve(&JsValue::UNDEFINED);
        }
        write_promise(&self.db, muts, JsValue::UNDEFINED)
    }
}

/// A transaction's reads: each document with the version it had (absent: `None`).
type Reads = Vec<(DocumentName, Option<u64>)>;

/// A transaction in progress: reads go to the relay and are recorded; writes are buffered.
#[wasm_bindgen]
pub struct Transaction {
    /// The database the transaction runs against.
    db: Rc<Db>,
    /// The documents read, with the versions the relay revalidates at commit; shared by the
    /// handles the chained methods return.
    reads: Rc<RefCell<Reads>>,
    /// The buffered writes, sent with the reads at commit; shared like `reads`.
    writes: Rc<RefCell<Vec<Mutation>>>,
}

#[wasm_bindgen]
impl Transaction {
    /// Reads a document from the relay; its version is revalidated at commit.
    pub fn get(&self, reference: JsValue) -> Promise {
        let db = self.db.clone();
        let reads = self.reads.clone();
        let writes = self.writes.clone();
        future_to_promise(async move {
            let name = reference_name(&reference)?;
            if !writes.borrow().is_empty() {
                return Err(ClientError::invalid(
                    "a transaction's reads must come before its writes",
                )
                .into());
            }
            let doc = db.transaction_get(&name).await?;
            reads
                .borrow_mut()
                .push((name.clone(), doc.as_ref().map(|d| d.update_version)));
            Ok(DocumentSnapshot::new(&db, name, doc, false, false).into())
        })
    }

    pub fn set(
        &self,
        reference: JsValue,
        data: JsValue,
        options: JsValue,
    ) -> Result<Transaction, JsValue> {
        let name = reference_name(&reference)?;
        self.writes
            .borrow_mut()
            .push(set_mutation(&name, &data, &options)?);
        Ok(self.clone_handle())
    }

    #[wasm_bindgen(variadic)]
    pub fn update(
        &self,
        reference: JsValue,
        data_or_pairs: &js_sys::Array,
    ) -> Result<Transaction, JsValue> {
        let name = reference_name(&reference)?;
        // As Firestore's SDK: a document this transaction read as missing cannot be updated,
        // and that is known before the commit.
        if self
            .reads
            .borrow()
            .iter()
            .any(|(n, version)| *n == name && version.is_none())
        {
            return Err(ClientError::invalid(format!(
                "cannot update document {name}: this transaction read it and it does not exist"
            ))
            .into());
        }
        self.writes
            .borrow_mut()
            .push(update_mutation(&name, data_or_pairs)?);
        Ok(self.clone_handle())
    }

    pub fn delete(&self, reference: JsValue) -> Result<Transaction, JsValue> {
        let name = reference_name(&reference)?;
        self.writes.borrow_mut().push(Mutation::delete(name));
        Ok(self.clone_handle())
    }
}

impl Transaction {
    fn clone_handle(&self) -> Transaction {
        Transaction {
            db: self.db.clone(),
            reads: self.reads.clone(),
            writes: self.writes.clone(),
        }
    }
}

const MAX_ATTEMPTS: u32 = 5;

pub(crate) use crate::client::js::sleep;

pub(crate) fn run_transaction(db: Rc<Db>, update: Function) -> Promise {
    future_to_promise(async move {
        if !db.has_relay() {
            return Err(ClientError::new(
                ErrorCode::FailedPrecondition,
                "transactions need a relay: open the database with { relay }",
            )
            .into());
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let tx = Transaction {
                db: db.clone(),
                reads: Rc::new(RefCell::new(Vec::new())),
                writes: Rc::new(RefCell::new(Vec::new())),
            };
            let handle = tx.clone_handle();
            let result = update.call1(&JsValue::NULL, &tx.into())?;
            let result = match result.dyn_into::<Promise>() {
                Ok(p) => JsFuture::from(p).await?,
                Err(v) => v,
            };
            let writes = std::mem::take(&mut *handle.writes.borrow_mut());
            let reads = std::mem::take(&mut *handle.reads.borrow_mut());
            if writes.is_empty() {
                return Ok(result);
            }
            match db.transaction_commit(writes, reads).await {
                Ok(_) => return Ok(result),
                Err(e) if e.code() == ErrorCode::Aborted && attempt < MAX_ATTEMPTS => {
                    sleep(f64::from(20 << attempt) * (0.5 + js_sys::Math::random())).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    })
}
